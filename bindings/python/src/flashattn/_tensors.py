# SPDX-License-Identifier: BSD-3-Clause
"""Reading tensors of any framework as (address, shape, strides in elements, dtype, device), and allocating new
ones through the framework the caller uses.

Recognised, in this order: NumPy arrays, torch tensors, objects with __cuda_array_interface__ (CuPy, Numba, ...),
objects with __dlpack__ (JAX, ...), objects with __array_interface__. No framework is imported here: a type is only
recognised when its module is already loaded, so flashattn works with none of them installed.
"""

import ctypes
import sys

from ._capi import DataType
from ._objects import refuse

CPU = ("cpu", 0)

_FLOAT_TYPES = {"float16": DataType.FP16, "bfloat16": DataType.BF16, "float32": DataType.FP32}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int16": 2, "int32": 4,
             "int64": 8, "bool": 1}


class TensorInfo:
    """What the library needs of one tensor. `owner` keeps the memory alive for the duration of a call."""

    __slots__ = ("name", "owner", "ptr", "shape", "strides", "dtype", "device", "kind", "readonly")

    def __init__(self, name, owner, ptr, shape, strides, dtype, device, kind, readonly=False):
        self.name = name
        self.owner = owner
        self.ptr = ptr
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.dtype = dtype  # a NumPy-style name: "float16", "bfloat16", "float32", "int32", ...
        self.device = device  # ("cpu", 0) or ("cuda", index); the index is None where it cannot be known
        self.kind = kind  # "numpy", "torch", "cupy", "cai", "dlpack", "array"
        self.readonly = readonly

    @property
    def on_cuda(self):
        return self.device[0] == "cuda"

    def data_type(self):
        if self.dtype not in _FLOAT_TYPES:
            refuse("%s has dtype %s; flashattn takes float16, bfloat16 or float32" % (self.name, self.dtype))
        return _FLOAT_TYPES[self.dtype]

    def nbytes(self):
        """Bytes of a contiguous tensor (workspaces)."""
        n = _ITEMSIZE.get(self.dtype, 1)
        for s in self.shape:
            n *= s
        return n


def device_name(device):
    return "cpu" if device[0] == "cpu" else "cuda" if device[1] is None else "cuda:%d" % device[1]


def _element_strides(name, byte_strides, itemsize):
    out = []
    for s in byte_strides:
        if s % itemsize:
            refuse("%s has a stride of %d bytes, not a multiple of its %d-byte elements" % (name, s, itemsize))
        out.append(s // itemsize)
    return out


def _contiguous_strides(shape):
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(int(s), 1)
    return tuple(reversed(strides))


def _numpy_dtype_name(dtype):
    return "bfloat16" if dtype.name == "bfloat16" else dtype.name


def _from_numpy(name, a):
    return TensorInfo(name, a, a.__array_interface__["data"][0], a.shape,
                      _element_strides(name, a.strides, a.itemsize), _numpy_dtype_name(a.dtype), CPU, "numpy",
                      not a.flags.writeable)


def _from_torch(name, t):
    dtype = str(t.dtype).replace("torch.", "")
    if t.device.type == "cuda":
        device = ("cuda", t.device.index if t.device.index is not None else 0)
    elif t.device.type == "cpu":
        device = CPU
    else:
        refuse("%s is on the %s device; flashattn takes CPU or CUDA tensors" % (name, t.device))
    if t.is_sparse or getattr(t, "is_quantized", False):
        refuse("%s is not a dense strided tensor" % name)
    return TensorInfo(name, t, t.data_ptr(), t.shape, t.stride(), dtype, device, "torch")


_TYPESTR = {"f2": "float16", "f4": "float32", "f8": "float64", "i1": "int8", "u1": "uint8", "i2": "int16",
            "i4": "int32", "i8": "int64", "b1": "bool"}


def _typestr_name(name, typestr):
    if typestr[0] == ">" or typestr[1:] not in _TYPESTR:
        refuse("%s has the array-interface type %r, which flashattn cannot read (bfloat16 arrays: pass them "
               "through __dlpack__)" % (name, typestr))
    return _TYPESTR[typestr[1:]]


_cuda_driver = None


def _cuda_device_of(pointer):
    """The device ordinal of a CUDA pointer (through the driver), or None where the driver cannot say."""
    global _cuda_driver
    if _cuda_driver is None:
        try:
            _cuda_driver = ctypes.CDLL("libcuda.so.1")
        except OSError:
            _cuda_driver = False
    if not _cuda_driver:
        return None
    ordinal = ctypes.c_int(-1)
    # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
    if _cuda_driver.cuPointerGetAttribute(ctypes.byref(ordinal), 9, ctypes.c_uint64(pointer)) != 0:
        return None
    return ordinal.value


def _from_cai(name, obj):
    cai = obj.__cuda_array_interface__
    dtype = _typestr_name(name, cai["typestr"])
    shape = tuple(cai["shape"])
    ptr, readonly = cai["data"]
    strides = cai.get("strides")
    strides = _contiguous_strides(shape) if strides is None else _element_strides(name, strides, _ITEMSIZE[dtype])
    index = None
    cupy_device = getattr(obj, "device", None)
    if type(obj).__module__.startswith("cupy") and cupy_device is not None:
        index = int(cupy_device.id)
    elif ptr:
        index = _cuda_device_of(ptr)
    kind = "cupy" if type(obj).__module__.startswith("cupy") else "cai"
    return TensorInfo(name, obj, ptr or 0, shape, strides, dtype, ("cuda", index), kind, bool(readonly))


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_CODES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
             (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16"}


def _from_dlpack(name, obj, stream):
    device_type, device_id = obj.__dlpack_device__()
    if device_type in (_DL_CUDA, _DL_CUDA_MANAGED):
        # The producer orders its pending work before `stream` (1 = the legacy default stream, as DLPack spells it).
        try:
            capsule = obj.__dlpack__(stream=stream or 1)
        except TypeError:
            capsule = obj.__dlpack__()
        device = ("cuda", int(device_id))
    elif device_type in (_DL_CPU, _DL_CUDA_HOST):
        capsule = obj.__dlpack__()
        device = CPU
    else:
        refuse("%s is on DLPack device type %d; flashattn takes CPU or CUDA memory" % (name, device_type))
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    # A legacy capsule starts with its DLTensor (DLManagedTensor's first member). It is read, not consumed: its
    # name stays "dltensor", so its destructor frees the tensor once `owner` (the capsule) is released.
    dl = _DLTensor.from_address(get(capsule, b"dltensor"))
    key = (dl.dtype.code, dl.dtype.bits)
    if key not in _DL_CODES or dl.dtype.lanes != 1:
        refuse("%s has a DLPack dtype (code %d, %d bits, %d lanes) flashattn cannot read"
               % (name, dl.dtype.code, dl.dtype.bits, dl.dtype.lanes))
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    strides = tuple(dl.strides[i] for i in range(dl.ndim)) if dl.strides else _contiguous_strides(shape)
    return TensorInfo(name, (obj, capsule), (dl.data or 0) + dl.byte_offset, shape, strides, _DL_CODES[key], device,
                      "dlpack")


def _from_array_interface(name, obj):
    ai = obj.__array_interface__
    dtype = _typestr_name(name, ai["typestr"])
    shape = tuple(ai["shape"])
    ptr, readonly = ai["data"]
    strides = ai.get("strides")
    strides = _contiguous_strides(shape) if strides is None else _element_strides(name, strides, _ITEMSIZE[dtype])
    return TensorInfo(name, obj, ptr, shape, strides, dtype, CPU, "array", bool(readonly))


def read(name, obj, stream=None):
    """TensorInfo of `obj`, or flashattn.Error naming `name` when it is no tensor this binding reads."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return _from_numpy(name, obj)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(name, obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(name, obj)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(name, obj, stream)
    if hasattr(obj, "__array_interface__"):
        return _from_array_interface(name, obj)
    refuse("%s is a %s, not a tensor flashattn reads (a NumPy array, a torch tensor, or an object with "
           "__cuda_array_interface__ or __dlpack__)" % (name, type(obj).__name__))


def allocation_strides(shape, like_strides=None):
    """Packed strides for `shape`, in the memory order of `like_strides` (the last dim innermost), so that an
    output takes its input's layout, as torch.empty_like does."""
    n = len(shape)
    if like_strides is None or len(like_strides) != n or n == 0:
        return _contiguous_strides(shape)
    order = sorted(range(n - 1), key=lambda i: (-like_strides[i], i)) + [n - 1]
    strides = [0] * n
    step = 1
    for i in reversed(order):
        strides[i] = step
        step *= max(int(shape[i]), 1)
    return tuple(strides)


def _framework_of(like):
    if like.kind in ("numpy", "array"):
        return "numpy"
    if like.kind == "torch":
        return "torch"
    if like.kind == "cupy":
        return "cupy"
    return None


def empty(like, name, shape, dtype, strides=None):
    """A new tensor of `like`'s framework and device with the given shape, dtype name and element strides."""
    strides = strides or _contiguous_strides(shape)
    framework = _framework_of(like)
    if framework == "numpy":
        import numpy as np

        if dtype == "bfloat16":
            try:
                import ml_dtypes
            except ImportError:
                refuse("allocating the bfloat16 %s needs ml_dtypes; pass it in instead" % name)
            np_dtype = np.dtype(ml_dtypes.bfloat16)
        else:
            np_dtype = np.dtype(dtype)
        span = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if all(shape) else 0
        base = np.empty(span, dtype=np_dtype)
        return np.lib.stride_tricks.as_strided(base, shape, [st * np_dtype.itemsize for st in strides])
    if framework == "torch":
        import torch

        return torch.empty_strided(tuple(shape), tuple(strides), dtype=getattr(torch, dtype),
                                   device=like.owner.device)
    if framework == "cupy":
        import cupy

        # Allocate the dims in memory order (outermost first) and view them back in the asked order.
        order = sorted(range(len(shape)), key=lambda i: (-strides[i], i))
        with cupy.cuda.Device(like.device[1]):
            base = cupy.empty(tuple(shape[i] for i in order), dtype=dtype)
        return base.transpose([order.index(i) for i in range(len(shape))])
    refuse("flashattn cannot allocate %s for a %s input (%s): pass it in" % (name, like.kind, type(like.owner).__name__))


def workspace(like, nbytes, given=None, stream=None):
    """(owner, 256-byte aligned address, bytes) of a workspace of at least `nbytes`: `given` when passed (its
    whole size is handed to the library, which refuses it if too small), else allocated through `like`'s framework
    (the header asks for 256-byte alignment; frameworks align less strictly on the host, so 255 spare bytes)."""
    if given is not None:
        info = read("workspace", given, stream)
        if info.strides != _contiguous_strides(info.shape):
            refuse("the workspace must be contiguous")
        return info, info.ptr, info.nbytes()
    if nbytes == 0:
        return None, None, 0
    buf = empty(like, "the workspace", (nbytes + 255,), "uint8")
    info = read("workspace", buf, stream)
    return buf, (info.ptr + 255) // 256 * 256, nbytes
