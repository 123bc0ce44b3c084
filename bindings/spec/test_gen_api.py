#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The generator's promise: it reads the real header completely, and refuses what it does not understand.

Each refusal case edits the real header the way a future change might (a new kind of declaration, a macro
argument, an enumerator without a value, ...) and expects HeaderError, since silently skipping such a construct
would leave a function or value out of every binding's check. Standard library only (unittest), so the CTest test
runs wherever python3 does.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_api  # noqa: E402

with open(os.path.join(gen_api.ROOT, "include", "flashattn", "flashattn.h"), encoding="utf-8") as _f:
    HEADER = _f.read()

ANCHOR = "/** @} */\n\n#ifdef __cplusplus\n} /* extern \"C\" */"


def with_tail(text):
    """The real header with `text` added after the last declaration (inside extern "C")."""
    assert ANCHOR in HEADER, "the header's closing block moved: update ANCHOR"
    return HEADER.replace(ANCHOR, text + "\n" + ANCHOR)


class ParsesTheRealHeader(unittest.TestCase):
    def test_every_exported_declaration_is_found(self):
        api = gen_api.parse_header(HEADER)
        names = [f["name"] for f in api["functions"]]
        # Count the declarations independently of the parser: every FLASHATTN_API that is not a #define.
        expected = [line for line in HEADER.split("\n")
                    if line.startswith("FLASHATTN_API ")]
        self.assertEqual(len(names), len(expected))
        self.assertIn("flashAttnForward", names)
        self.assertEqual(len(api["enums"]), HEADER.count("typedef enum "))
        self.assertEqual(len(api["handles"]), HEADER.count("typedef struct "))

    def test_types_are_normalized(self):
        api = gen_api.parse_header(HEADER)
        fns = {f["name"]: f for f in api["functions"]}
        self.assertEqual(fns["flashAttnGetStream"]["params"][1],
                         {"name": "stream", "type": "struct CUstream_st **"})
        self.assertEqual(fns["flashAttnGetErrorString"]["return"], "const char *")
        self.assertEqual(fns["flashAttnGetVersion"]["params"], [])
        self.assertEqual(fns["flashAttnSetTensorDescriptor"]["params"][3], {"name": "dims", "type": "const int64_t *"})

    def test_an_added_function_appears(self):
        api = gen_api.parse_header(with_tail(
            "FLASHATTN_API flashAttnStatus_t   flashAttnNew(flashAttnHandle_t h,\n    const  int64_t*x);"))
        self.assertEqual(api["functions"][-1], {"name": "flashAttnNew", "return": "flashAttnStatus_t", "params": [
            {"name": "h", "type": "flashAttnHandle_t"}, {"name": "x", "type": "const int64_t *"}]})


class RefusesWhatItDoesNotUnderstand(unittest.TestCase):
    def refuse(self, text):
        with self.assertRaises(gen_api.HeaderError):
            gen_api.parse_header(text)

    def test_function_without_export_macro(self):
        self.refuse(with_tail("flashAttnStatus_t flashAttnHidden(flashAttnHandle_t h);"))

    def test_function_pointer_parameter(self):
        self.refuse(with_tail("FLASHATTN_API flashAttnStatus_t flashAttnCb(void (*cb)(void *), void *user);"))

    def test_array_parameter(self):
        self.refuse(with_tail("FLASHATTN_API flashAttnStatus_t flashAttnArr(int64_t dims[4]);"))

    def test_unknown_type(self):
        self.refuse(with_tail("FLASHATTN_API flashAttnStatus_t flashAttnU(unsigned int x);"))
        self.refuse(with_tail("FLASHATTN_API flashAttnStatus_t flashAttnV(flashAttnThing_t x);"))

    def test_const_pointer_to_const(self):
        self.refuse(with_tail("FLASHATTN_API flashAttnStatus_t flashAttnC(const char *const *names);"))

    def test_undeclared_struct(self):
        self.refuse(with_tail("FLASHATTN_API flashAttnStatus_t flashAttnS(struct Other *p);"))

    def test_enumerator_without_value(self):
        self.refuse(with_tail("typedef enum flashAttnNew_t { FLASHATTN_NEW_A = 0, FLASHATTN_NEW_B } flashAttnNew_t;"))

    def test_enum_with_expression_value(self):
        self.refuse(with_tail("typedef enum flashAttnNew_t { FLASHATTN_NEW_A = 1 << 2 } flashAttnNew_t;"))

    def test_public_struct(self):
        self.refuse(with_tail("typedef struct flashAttnParams { int32_t a; } flashAttnParams;"))

    def test_other_typedef(self):
        self.refuse(with_tail("typedef int32_t flashAttnIndex_t;"))

    def test_macro_with_arguments(self):
        self.refuse(HEADER.replace("#define FLASHATTN_MAX_TENSOR_RANK 8",
                                   "#define FLASHATTN_MAX_TENSOR_RANK 8\n#define FLASHATTN_SIZE(x) ((x) * 2)"))

    def test_code_under_an_unknown_conditional(self):
        self.refuse(with_tail("#ifdef FLASHATTN_EXPERIMENTAL\nFLASHATTN_API int32_t flashAttnX(void);\n#endif"))

    def test_unterminated_declaration(self):
        self.refuse(with_tail("FLASHATTN_API int32_t flashAttnX(void)"))

    def test_duplicate_function(self):
        self.refuse(with_tail("FLASHATTN_API int32_t flashAttnGetVersion(void);"))

    def test_version_must_be_in_cmake(self):
        with self.assertRaises(gen_api.HeaderError):
            gen_api.read_version("project(flashattn LANGUAGES C)")
        self.assertEqual(gen_api.read_version("project(flashattn VERSION 2.13.4 DESCRIPTION x)"),
                         {"major": 2, "minor": 13, "patch": 4})


if __name__ == "__main__":
    unittest.main()
