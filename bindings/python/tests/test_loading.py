# SPDX-License-Identifier: BSD-3-Clause
"""How the package finds the library, and that it imports with neither the library nor NumPy nor torch."""

import os
import subprocess
import sys

LIBRARY = os.environ["FLASHATTN_LIBRARY"]


def run(code, **env_changes):
    env = dict(os.environ)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_import_needs_no_library_numpy_or_torch():
    # None in sys.modules makes an import fail, as if the package were not installed.
    r = run("import sys; sys.modules['numpy'] = sys.modules['torch'] = None\n"
            "import flashattn; print(int(flashattn.Status.BAD_PARAM), flashattn.Mask.CAUSAL_BOTTOM_RIGHT.name)",
            FLASHATTN_LIBRARY="/nonexistent/libflashattn.so")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "CAUSAL_BOTTOM_RIGHT"]


def test_a_bad_flashattn_library_is_a_clear_error():
    r = run("import flashattn\ntry:\n    flashattn.version()\nexcept flashattn.LibraryNotFoundError as e:\n"
            "    print(e)", FLASHATTN_LIBRARY="/nonexistent/libflashattn.so")
    assert r.returncode == 0, r.stderr
    assert "FLASHATTN_LIBRARY=/nonexistent/libflashattn.so could not be loaded" in r.stdout


def test_the_soname_through_the_loader_path():
    directory = os.path.dirname(os.path.abspath(LIBRARY))
    assert os.path.exists(os.path.join(directory, "libflashattn.so.0"))
    r = run("import flashattn; print(flashattn.version(), flashattn.lib().path)", FLASHATTN_LIBRARY=None,
            LD_LIBRARY_PATH=directory)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "libflashattn.so.0"


def test_no_library_anywhere_says_what_was_tried():
    r = run("import flashattn\ntry:\n    flashattn.lib()\nexcept flashattn.LibraryNotFoundError as e:\n    print(e)",
            FLASHATTN_LIBRARY=None, LD_LIBRARY_PATH="/nonexistent")
    assert r.returncode == 0, r.stderr
    if "could not be loaded" not in r.stdout:  # an installed libflashattn.so.0 was found by the loader
        assert r.stdout == ""
        return
    assert "Set FLASHATTN_LIBRARY" in r.stdout and "libflashattn.so.0" in r.stdout
