# SPDX-License-Identifier: BSD-3-Clause
"""The C API of libflashattn as ctypes declarations, and the loading of the library.

Every function of include/flashattn/flashattn.h is declared here by hand, with its parameter names and ctypes
types; tests/test_declarations.py holds this table against bindings/spec/flashattn_api.json (generated from the
header), so a header change this file misses fails the tests. Enums and opaque handles get distinct ctypes types so
that check can tell an enum from an int32_t and one handle from another, although the ABI is the same.
"""

import ctypes
import ctypes.util
import enum
import os
import threading
from ctypes import POINTER, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t, c_void_p

# The ABI version this package was written against (bindings/spec/flashattn_api.json's "version").
ABI_MAJOR = 0
ABI_MINOR = 1
SONAME = "libflashattn.so.0"


class Status(enum.IntEnum):
    """flashAttnStatus_t."""

    SUCCESS = 0
    NOT_INITIALIZED = 1
    BAD_PARAM = 2
    NOT_SUPPORTED = 3
    INSUFFICIENT_WORKSPACE = 4
    ALLOC_FAILED = 5
    ARCH_MISMATCH = 6
    NO_DEVICE = 7
    EXECUTION_FAILED = 8
    INTERNAL_ERROR = 9


class Backend(enum.IntEnum):
    """flashAttnBackend_t."""

    AUTO = 0
    CUDA = 1
    HOST = 2


class DataType(enum.IntEnum):
    """flashAttnDataType_t."""

    FP16 = 0
    BF16 = 1
    FP32 = 2


class Mask(enum.IntEnum):
    """flashAttnMaskMode_t."""

    NONE = 0
    CAUSAL_TOP_LEFT = 1
    CAUSAL_BOTTOM_RIGHT = 2


class Operation(enum.IntEnum):
    """flashAttnOperation_t."""

    FORWARD = 0
    BACKWARD = 1
    DECODE_CHUNK = 2
    MERGE_STATES = 3


# C enum type -> (IntEnum, prefix of its enumerators in the header).
ENUMS = {
    "flashAttnStatus_t": (Status, "FLASHATTN_STATUS_"),
    "flashAttnBackend_t": (Backend, "FLASHATTN_BACKEND_"),
    "flashAttnDataType_t": (DataType, "FLASHATTN_DATA_"),
    "flashAttnMaskMode_t": (Mask, "FLASHATTN_MASK_"),
    "flashAttnOperation_t": (Operation, "FLASHATTN_OP_"),
}

CONSTANTS = {"FLASHATTN_MAX_TENSOR_RANK": 8}


# ctypes types of the C enums (C compilers give these enums the size of int).
class flashAttnStatus_t(c_int):
    pass


class flashAttnBackend_t(c_int):
    pass


class flashAttnDataType_t(c_int):
    pass


class flashAttnMaskMode_t(c_int):
    pass


class flashAttnOperation_t(c_int):
    pass


# Opaque handles.
class flashAttnHandle_t(c_void_p):
    pass


class flashAttnTensorDescriptor_t(c_void_p):
    pass


class flashAttnAttentionDescriptor_t(c_void_p):
    pass


class flashAttnSeqDescriptor_t(c_void_p):
    pass


class CUstream(c_void_p):
    """struct CUstream_st * (cudaStream_t)."""


_Status = flashAttnStatus_t
_Handle = flashAttnHandle_t
_Tensor = flashAttnTensorDescriptor_t
_Attn = flashAttnAttentionDescriptor_t
_Seq = flashAttnSeqDescriptor_t
_I32P = POINTER(c_int32)
_I64P = POINTER(c_int64)
_F32P = POINTER(c_float)

# (name, restype, ((parameter name, ctypes type), ...)), in header order.
DECLARATIONS = (
    ("flashAttnGetVersion", c_int32, ()),
    ("flashAttnGetErrorString", c_char_p, (("status", _Status),)),
    ("flashAttnGetLastErrorMessage", c_size_t, (("buf", c_char_p), ("len", c_size_t))),
    ("flashAttnCreate", _Status, (("handle", POINTER(_Handle)),)),
    ("flashAttnCreateWithBackend", _Status, (("handle", POINTER(_Handle)), ("backend", flashAttnBackend_t))),
    ("flashAttnDestroy", _Status, (("handle", _Handle),)),
    ("flashAttnGetBackend", _Status, (("handle", _Handle), ("backend", POINTER(flashAttnBackend_t)))),
    ("flashAttnSetStream", _Status, (("handle", _Handle), ("stream", CUstream))),
    ("flashAttnGetStream", _Status, (("handle", _Handle), ("stream", POINTER(CUstream)))),
    ("flashAttnCreateTensorDescriptor", _Status, (("desc", POINTER(_Tensor)),)),
    ("flashAttnSetTensorDescriptor", _Status, (("desc", _Tensor), ("dataType", flashAttnDataType_t),
                                               ("rank", c_int32), ("dims", _I64P), ("strides", _I64P))),
    ("flashAttnGetTensorDescriptor", _Status, (("desc", _Tensor), ("maxRank", c_int32),
                                               ("dataType", POINTER(flashAttnDataType_t)), ("rank", _I32P),
                                               ("dims", _I64P), ("strides", _I64P))),
    ("flashAttnDestroyTensorDescriptor", _Status, (("desc", _Tensor),)),
    ("flashAttnCreateAttentionDescriptor", _Status, (("desc", POINTER(_Attn)),)),
    ("flashAttnDestroyAttentionDescriptor", _Status, (("desc", _Attn),)),
    ("flashAttnSetAttentionScale", _Status, (("desc", _Attn), ("scale", c_float))),
    ("flashAttnGetAttentionScale", _Status, (("desc", _Attn), ("scale", _F32P))),
    ("flashAttnSetAttentionMask", _Status, (("desc", _Attn), ("mask", flashAttnMaskMode_t))),
    ("flashAttnGetAttentionMask", _Status, (("desc", _Attn), ("mask", POINTER(flashAttnMaskMode_t)))),
    ("flashAttnSetAttentionWindow", _Status, (("desc", _Attn), ("left", c_int64), ("right", c_int64))),
    ("flashAttnGetAttentionWindow", _Status, (("desc", _Attn), ("left", _I64P), ("right", _I64P))),
    ("flashAttnSetAttentionSoftcap", _Status, (("desc", _Attn), ("softcap", c_float))),
    ("flashAttnGetAttentionSoftcap", _Status, (("desc", _Attn), ("softcap", _F32P))),
    ("flashAttnSetAttentionAlibiSlopes", _Status, (("desc", _Attn), ("slopes", _F32P), ("perBatch", c_int32))),
    ("flashAttnGetAttentionAlibiSlopes", _Status, (("desc", _Attn), ("slopes", POINTER(_F32P)),
                                                   ("perBatch", _I32P))),
    ("flashAttnSetAttentionSinks", _Status, (("desc", _Attn), ("sinks", _F32P))),
    ("flashAttnGetAttentionSinks", _Status, (("desc", _Attn), ("sinks", POINTER(_F32P)))),
    ("flashAttnSetAttentionSinksGradient", _Status, (("desc", _Attn), ("dSinks", _F32P))),
    ("flashAttnGetAttentionSinksGradient", _Status, (("desc", _Attn), ("dSinks", POINTER(_F32P)))),
    ("flashAttnSetAttentionDeterministic", _Status, (("desc", _Attn), ("deterministic", c_int32))),
    ("flashAttnGetAttentionDeterministic", _Status, (("desc", _Attn), ("deterministic", _I32P))),
    ("flashAttnCreateSeqDescriptor", _Status, (("desc", POINTER(_Seq)),)),
    ("flashAttnDestroySeqDescriptor", _Status, (("desc", _Seq),)),
    ("flashAttnSetSeqRagged", _Status, (("desc", _Seq), ("batch", c_int64), ("cuSeqlensQ", _I32P),
                                        ("cuSeqlensK", _I32P), ("maxSeqlenQ", c_int64), ("maxSeqlenK", c_int64))),
    ("flashAttnGetSeqRagged", _Status, (("desc", _Seq), ("batch", _I64P), ("cuSeqlensQ", POINTER(_I32P)),
                                        ("cuSeqlensK", POINTER(_I32P)), ("maxSeqlenQ", _I64P),
                                        ("maxSeqlenK", _I64P))),
    ("flashAttnSetSeqKvLengths", _Status, (("desc", _Seq), ("batch", c_int64), ("seqlensK", _I32P))),
    ("flashAttnGetSeqKvLengths", _Status, (("desc", _Seq), ("batch", _I64P), ("seqlensK", POINTER(_I32P)))),
    ("flashAttnSetSeqPaged", _Status, (("desc", _Seq), ("batch", c_int64), ("blockTable", _I32P),
                                       ("maxPagesPerSeq", c_int64))),
    ("flashAttnGetSeqPaged", _Status, (("desc", _Seq), ("batch", _I64P), ("blockTable", POINTER(_I32P)),
                                       ("maxPagesPerSeq", _I64P))),
    ("flashAttnCheckSupport", _Status, (("handle", _Handle), ("operation", flashAttnOperation_t),
                                        ("attnDesc", _Attn), ("seqDesc", _Seq), ("qDesc", _Tensor),
                                        ("kDesc", _Tensor), ("vDesc", _Tensor), ("oDesc", _Tensor),
                                        ("description", c_char_p), ("descriptionLen", c_size_t),
                                        ("deterministic", _I32P))),
    ("flashAttnForwardGetWorkspaceSize", _Status, (("handle", _Handle), ("attnDesc", _Attn), ("seqDesc", _Seq),
                                                   ("qDesc", _Tensor), ("kDesc", _Tensor), ("vDesc", _Tensor),
                                                   ("oDesc", _Tensor), ("lseDesc", _Tensor),
                                                   ("bytes", POINTER(c_size_t)))),
    ("flashAttnForward", _Status, (("handle", _Handle), ("attnDesc", _Attn), ("seqDesc", _Seq),
                                   ("qDesc", _Tensor), ("q", c_void_p), ("kDesc", _Tensor), ("k", c_void_p),
                                   ("vDesc", _Tensor), ("v", c_void_p), ("oDesc", _Tensor), ("o", c_void_p),
                                   ("lseDesc", _Tensor), ("lse", _F32P), ("workspace", c_void_p),
                                   ("workspaceBytes", c_size_t))),
    ("flashAttnBackwardGetWorkspaceSize", _Status, (("handle", _Handle), ("attnDesc", _Attn), ("seqDesc", _Seq),
                                                    ("qDesc", _Tensor), ("kDesc", _Tensor), ("vDesc", _Tensor),
                                                    ("oDesc", _Tensor), ("lseDesc", _Tensor),
                                                    ("bytes", POINTER(c_size_t)))),
    ("flashAttnBackwardGetWorkspaceSizeWithGradients", _Status,
     (("handle", _Handle), ("attnDesc", _Attn), ("seqDesc", _Seq), ("qDesc", _Tensor), ("kDesc", _Tensor),
      ("vDesc", _Tensor), ("oDesc", _Tensor), ("dODesc", _Tensor), ("lseDesc", _Tensor), ("dQDesc", _Tensor),
      ("dKDesc", _Tensor), ("dVDesc", _Tensor), ("bytes", POINTER(c_size_t)))),
    ("flashAttnBackward", _Status, (("handle", _Handle), ("attnDesc", _Attn), ("seqDesc", _Seq),
                                    ("qDesc", _Tensor), ("q", c_void_p), ("kDesc", _Tensor), ("k", c_void_p),
                                    ("vDesc", _Tensor), ("v", c_void_p), ("oDesc", _Tensor), ("o", c_void_p),
                                    ("dODesc", _Tensor), ("dO", c_void_p), ("lseDesc", _Tensor), ("lse", _F32P),
                                    ("dQDesc", _Tensor), ("dQ", c_void_p), ("dKDesc", _Tensor), ("dK", c_void_p),
                                    ("dVDesc", _Tensor), ("dV", c_void_p), ("workspace", c_void_p),
                                    ("workspaceBytes", c_size_t))),
    ("flashAttnDecodeChunkGetWorkspaceSize", _Status, (("handle", _Handle), ("attnDesc", _Attn),
                                                       ("seqDesc", _Seq), ("qDesc", _Tensor), ("kDesc", _Tensor),
                                                       ("vDesc", _Tensor), ("oDesc", _Tensor),
                                                       ("lseDesc", _Tensor), ("numChunks", c_int32),
                                                       ("bytes", POINTER(c_size_t)))),
    ("flashAttnDecodeChunk", _Status, (("handle", _Handle), ("attnDesc", _Attn), ("seqDesc", _Seq),
                                       ("qDesc", _Tensor), ("q", c_void_p), ("kDesc", _Tensor), ("k", c_void_p),
                                       ("vDesc", _Tensor), ("v", c_void_p), ("oDesc", _Tensor), ("o", c_void_p),
                                       ("lseDesc", _Tensor), ("lse", _F32P), ("numChunks", c_int32),
                                       ("workspace", c_void_p), ("workspaceBytes", c_size_t))),
    ("flashAttnMergeStatesGetWorkspaceSize", _Status, (("handle", _Handle), ("partialODesc", _Tensor),
                                                       ("partialLseDesc", _Tensor), ("oDesc", _Tensor),
                                                       ("lseDesc", _Tensor), ("bytes", POINTER(c_size_t)))),
    ("flashAttnMergeStates", _Status, (("handle", _Handle), ("partialODesc", _Tensor), ("partialO", _F32P),
                                       ("partialLseDesc", _Tensor), ("partialLse", _F32P), ("oDesc", _Tensor),
                                       ("o", c_void_p), ("lseDesc", _Tensor), ("lse", _F32P),
                                       ("workspace", c_void_p), ("workspaceBytes", c_size_t))),
)


class LibraryNotFoundError(OSError):
    """libflashattn could not be loaded (neither FLASHATTN_LIBRARY nor the SONAME)."""


def _unwrap(result, func, args):
    # Enum restypes are c_int subclasses, which ctypes hands back as objects; callers want the number.
    return result.value if isinstance(result, c_int) else result


class Library:
    """The loaded shared library, with every declared function as an attribute."""

    def __init__(self, cdll, path):
        self.cdll = cdll
        self.path = path
        missing = []
        for name, restype, params in DECLARATIONS:
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                missing.append(name)
                continue
            fn.restype = restype
            fn.argtypes = [t for _, t in params]
            if isinstance(restype, type) and issubclass(restype, c_int) and restype is not c_int32:
                fn.errcheck = _unwrap
            setattr(self, name, fn)
        if missing:
            raise LibraryNotFoundError("%s lacks %s: it is older than this binding (ABI %d.%d)"
                                       % (path, ", ".join(missing), ABI_MAJOR, ABI_MINOR))
        version = self.flashAttnGetVersion()
        self.version = (version // 10000, version // 100 % 100, version % 100)
        if self.version[0] != ABI_MAJOR:
            raise LibraryNotFoundError("%s is libflashattn %d.%d.%d; this binding needs major version %d"
                                       % ((path,) + self.version + (ABI_MAJOR,)))


_lock = threading.Lock()
_library = None


def _open():
    explicit = os.environ.get("FLASHATTN_LIBRARY")
    if explicit:
        try:
            return ctypes.CDLL(explicit), explicit
        except OSError as e:
            # An explicit choice that fails must not fall back to another copy of the library.
            raise LibraryNotFoundError("FLASHATTN_LIBRARY=%s could not be loaded: %s" % (explicit, e)) from None
    errors = []
    try:
        return ctypes.CDLL(SONAME), SONAME
    except OSError as e:
        errors.append("%s: %s" % (SONAME, e))
    found = ctypes.util.find_library("flashattn")
    if found:
        try:
            return ctypes.CDLL(found), found
        except OSError as e:
            errors.append("%s: %s" % (found, e))
    else:
        errors.append("ctypes.util.find_library('flashattn') found nothing")
    raise LibraryNotFoundError(
        "libflashattn could not be loaded. Set FLASHATTN_LIBRARY to the path of libflashattn.so, or install the "
        "library where the dynamic loader finds it (LD_LIBRARY_PATH, ldconfig). Tried: " + "; ".join(errors))


def lib():
    """The loaded library (loaded on first use, so that `import flashattn` works without it)."""
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                cdll, path = _open()
                _library = Library(cdll, path)
    return _library
