# SPDX-License-Identifier: BSD-3-Clause
"""flashattn.Error and the library's objects (handle and descriptors) as Python objects.

Each object owns one library object and destroys it exactly once: on close(), at the end of a `with` block, or when
it is garbage collected (weakref.finalize, which also runs at interpreter exit). The finalizer holds only the raw
pointer and the destroy function, never the Python object, so that it does not keep it alive.
"""

import ctypes
import weakref
from ctypes import byref, c_float, c_int32, c_int64, c_size_t

from . import _capi
from ._capi import Backend, DataType, Mask, Status


class Error(Exception):
    """A failed flashattn call, or an argument the binding refused before calling the library.

    `status` is a flashattn.Status; `message` the library's last-error message (or the binding's own, naming the
    offending argument, for a refusal before the call); `function` the C function, or None for such a refusal.
    """

    def __init__(self, status, message, function=None):
        try:
            status = Status(status)
        except ValueError:
            pass  # a status this binding does not know stays a plain int
        self.status = status
        self.message = message
        self.function = function
        name = status.name if isinstance(status, Status) else "status %d" % status
        # The library's messages start with the function's name already.
        prefix = function + ": " if function and not message.startswith(function) else ""
        super().__init__("%s%s: %s" % (prefix, name, message))


def last_error_message():
    """The message of the last failed library call of this thread."""
    lib = _capi.lib()
    n = lib.flashAttnGetLastErrorMessage(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.flashAttnGetLastErrorMessage(buf, n + 1)
    return buf.value.decode("utf-8", "replace")


def error_string(status):
    """flashAttnGetErrorString: the static name of a status."""
    return _capi.lib().flashAttnGetErrorString(int(status)).decode()


def version():
    """The loaded library's version as (major, minor, patch)."""
    return _capi.lib().version


def call(name, *args):
    """Calls a status-returning C function; raises flashattn.Error (with the thread's last message) on failure."""
    for arg in args:
        # Checked here: an exception raised while ctypes converts an argument would reach the caller as a
        # ctypes.ArgumentError instead of a flashattn.Error.
        if isinstance(arg, _Object) and arg.closed:
            refuse("this %s is closed" % arg._what, Status.NOT_INITIALIZED)
    status = getattr(_capi.lib(), name)(*args)
    if status != Status.SUCCESS:
        raise Error(status, last_error_message(), name)


def refuse(message, status=Status.BAD_PARAM):
    """An argument the binding rejects before the library sees it."""
    raise Error(status, message)


def _destroy(destroy_name, pointer):
    # Runs from a finalizer: at interpreter exit the library may already be unloadable, and there is nobody to
    # report an error to.
    try:
        getattr(_capi.lib(), destroy_name)(pointer)
    except Exception:  # noqa: BLE001
        pass


class _Object:
    _ctype = None
    _create = None
    _destroy_name = None
    _what = "object"

    def _adopt(self, pointer):
        self._pointer = pointer
        self._finalizer = weakref.finalize(self, _destroy, self._destroy_name, pointer)

    @property
    def _as_parameter_(self):
        # ctypes passes the object as its pointer; a closed object is refused here rather than handed to the
        # library as a dangling pointer.
        if not self._finalizer.alive:
            refuse("this %s is closed" % self._what, Status.NOT_INITIALIZED)
        return self._ctype(self._pointer)

    @property
    def closed(self):
        return not self._finalizer.alive

    def close(self):
        """Destroys the library object now; later calls do nothing."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _create(ctype, create_name, *extra):
    pointer = ctype()
    call(create_name, byref(pointer), *extra)
    return pointer.value


class Handle(_Object):
    """A library context (flashAttnCreateWithBackend): the backend, the device it was created on, and a stream.

    A handle serves one thread at a time.
    """

    _ctype = _capi.flashAttnHandle_t
    _destroy_name = "flashAttnDestroy"
    _what = "handle"

    def __init__(self, backend=Backend.AUTO):
        self._adopt(_create(_capi.flashAttnHandle_t, "flashAttnCreateWithBackend", int(backend)))

    @property
    def backend(self):
        value = _capi.flashAttnBackend_t()
        call("flashAttnGetBackend", self, byref(value))
        return Backend(value.value)

    @property
    def stream(self):
        """The bound CUDA stream as an integer (0 = the legacy default stream)."""
        value = _capi.CUstream()
        call("flashAttnGetStream", self, byref(value))
        return value.value or 0

    @stream.setter
    def stream(self, stream):
        call("flashAttnSetStream", self, _capi.CUstream(int(stream or 0)))


class TensorDescriptor(_Object):
    """Data type, dims and strides (in elements) of one tensor (flashAttnSetTensorDescriptor)."""

    _ctype = _capi.flashAttnTensorDescriptor_t
    _destroy_name = "flashAttnDestroyTensorDescriptor"
    _what = "tensor descriptor"

    def __init__(self, dtype=None, dims=None, strides=None):
        self._adopt(_create(_capi.flashAttnTensorDescriptor_t, "flashAttnCreateTensorDescriptor"))
        if dtype is not None:
            self.set(dtype, dims, strides)

    def set(self, dtype, dims, strides):
        rank = len(dims)
        if len(strides) != rank:
            refuse("dims has %d entries, strides %d" % (rank, len(strides)))
        array = c_int64 * max(rank, 1)
        call("flashAttnSetTensorDescriptor", self, int(dtype), rank, array(*dims), array(*strides))

    def get(self):
        """(DataType, dims, strides) as set."""
        max_rank = _capi.CONSTANTS["FLASHATTN_MAX_TENSOR_RANK"]
        dtype, rank = _capi.flashAttnDataType_t(), c_int32()
        dims, strides = (c_int64 * max_rank)(), (c_int64 * max_rank)()
        call("flashAttnGetTensorDescriptor", self, max_rank, byref(dtype), byref(rank), dims, strides)
        n = rank.value
        return DataType(dtype.value), tuple(dims[:n]), tuple(strides[:n])


class AttentionDescriptor(_Object):
    """Scale, mask, window, softcap, ALiBi and determinism (flashAttnSetAttention*); defaults as the library's."""

    _ctype = _capi.flashAttnAttentionDescriptor_t
    _destroy_name = "flashAttnDestroyAttentionDescriptor"
    _what = "attention descriptor"

    def __init__(self, scale=None, mask=None, window=None, softcap=None, deterministic=None):
        self._adopt(_create(_capi.flashAttnAttentionDescriptor_t, "flashAttnCreateAttentionDescriptor"))
        self._slopes = None  # the slopes' owner, kept alive: the library reads the pointer when an operation runs
        if scale is not None:
            self.scale = scale
        if mask is not None:
            self.mask = mask
        if window is not None:
            self.window = window
        if softcap is not None:
            self.softcap = softcap
        if deterministic is not None:
            self.deterministic = deterministic

    @property
    def scale(self):
        """The softmax scale, or None while the default 1/sqrt(headDim) applies."""
        value = c_float()
        call("flashAttnGetAttentionScale", self, byref(value))
        return value.value or None

    @scale.setter
    def scale(self, scale):
        call("flashAttnSetAttentionScale", self, float(scale))

    @property
    def mask(self):
        value = _capi.flashAttnMaskMode_t()
        call("flashAttnGetAttentionMask", self, byref(value))
        return Mask(value.value)

    @mask.setter
    def mask(self, mask):
        call("flashAttnSetAttentionMask", self, int(mask))

    @property
    def window(self):
        """(left, right); -1 is unbounded."""
        left, right = c_int64(), c_int64()
        call("flashAttnGetAttentionWindow", self, byref(left), byref(right))
        return left.value, right.value

    @window.setter
    def window(self, window):
        left, right = window
        call("flashAttnSetAttentionWindow", self, int(left), int(right))

    @property
    def softcap(self):
        value = c_float()
        call("flashAttnGetAttentionSoftcap", self, byref(value))
        return value.value

    @softcap.setter
    def softcap(self, softcap):
        call("flashAttnSetAttentionSoftcap", self, float(softcap))

    @property
    def deterministic(self):
        value = c_int32()
        call("flashAttnGetAttentionDeterministic", self, byref(value))
        return bool(value.value)

    @deterministic.setter
    def deterministic(self, deterministic):
        call("flashAttnSetAttentionDeterministic", self, int(deterministic))

    def set_alibi_slopes(self, pointer, per_batch=False, owner=None):
        """FP32 slopes at `pointer` (the backend's memory), [heads] or [batch, heads]; 0/None turns ALiBi off.

        `owner` is kept alive with the descriptor, since the library reads the slopes only when an operation runs.
        """
        call("flashAttnSetAttentionAlibiSlopes", self, ctypes.cast(pointer or 0, _capi._F32P), int(per_batch))
        self._slopes = owner if pointer else None

    @property
    def alibi_slopes(self):
        """(pointer or 0, per_batch)."""
        pointer, per_batch = _capi._F32P(), c_int32()
        call("flashAttnGetAttentionAlibiSlopes", self, byref(pointer), byref(per_batch))
        return ctypes.cast(pointer, ctypes.c_void_p).value or 0, bool(per_batch.value)

    def set_sinks(self, pointer, owner=None):
        """FP32 attention sinks at `pointer` (the backend's memory), [heads]; 0/None turns sinks off. `owner` is
        kept alive with the descriptor (docs/semantics.md, Attention sinks)."""
        call("flashAttnSetAttentionSinks", self, ctypes.cast(pointer or 0, _capi._F32P))
        self._sinks = owner if pointer else None

    @property
    def sinks(self):
        """The sinks pointer, or 0."""
        pointer = _capi._F32P()
        call("flashAttnGetAttentionSinks", self, byref(pointer))
        return ctypes.cast(pointer, ctypes.c_void_p).value or 0

    def set_sinks_gradient(self, pointer, owner=None):
        """Where Backward writes dSinks (FP32 [heads], the backend's memory); 0/None: not computed."""
        call("flashAttnSetAttentionSinksGradient", self, ctypes.cast(pointer or 0, _capi._F32P))
        self._dsinks = owner if pointer else None

    @property
    def sinks_gradient(self):
        """The dSinks pointer, or 0."""
        pointer = _capi._F32P()
        call("flashAttnGetAttentionSinksGradient", self, byref(pointer))
        return ctypes.cast(pointer, ctypes.c_void_p).value or 0


def _i32(pointer):
    return ctypes.cast(pointer or 0, _capi._I32P)


def _address(p):
    return ctypes.cast(p, ctypes.c_void_p).value or 0


class SeqDescriptor(_Object):
    """Ragged batches, per-sequence KV lengths and paged caches (flashAttnSetSeq*).

    The int32 arrays live in the backend's memory and are read when an operation runs: the setters take their
    addresses and keep their owners alive with the descriptor.
    """

    _ctype = _capi.flashAttnSeqDescriptor_t
    _destroy_name = "flashAttnDestroySeqDescriptor"
    _what = "sequence descriptor"

    def __init__(self):
        self._adopt(_create(_capi.flashAttnSeqDescriptor_t, "flashAttnCreateSeqDescriptor"))
        self._owners = {}

    def set_ragged(self, batch, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, owners=()):
        call("flashAttnSetSeqRagged", self, int(batch), _i32(cu_seqlens_q), _i32(cu_seqlens_k), int(max_seqlen_q),
             int(max_seqlen_k))
        self._owners["ragged"] = owners

    def set_kv_lengths(self, batch, seqlens_k, owner=None):
        call("flashAttnSetSeqKvLengths", self, int(batch), _i32(seqlens_k))
        self._owners["kv_lengths"] = owner

    def set_paged(self, batch, block_table, max_pages_per_seq, owner=None):
        call("flashAttnSetSeqPaged", self, int(batch), _i32(block_table), int(max_pages_per_seq))
        self._owners["paged"] = owner

    @property
    def ragged(self):
        """(batch, cu_seqlens_q address, cu_seqlens_k address, max_seqlen_q, max_seqlen_k); batch 0 = not ragged."""
        batch, max_q, max_k = c_int64(), c_int64(), c_int64()
        cu_q, cu_k = _capi._I32P(), _capi._I32P()
        call("flashAttnGetSeqRagged", self, byref(batch), byref(cu_q), byref(cu_k), byref(max_q), byref(max_k))
        return batch.value, _address(cu_q), _address(cu_k), max_q.value, max_k.value

    @property
    def kv_lengths(self):
        """(batch, address); batch 0 = unset."""
        batch, lengths = c_int64(), _capi._I32P()
        call("flashAttnGetSeqKvLengths", self, byref(batch), byref(lengths))
        return batch.value, _address(lengths)

    @property
    def paged(self):
        """(batch, block table address, max_pages_per_seq); batch 0 = unset."""
        batch, table, pages = c_int64(), _capi._I32P(), c_int64()
        call("flashAttnGetSeqPaged", self, byref(batch), byref(table), byref(pages))
        return batch.value, _address(table), pages.value


def check_support(handle, operation, q_desc, k_desc, v_desc, o_desc, attention=None, seq=None):
    """flashAttnCheckSupport: (description, deterministic) or flashattn.Error saying why not."""
    text = ctypes.create_string_buffer(512)
    deterministic = c_int32()
    call("flashAttnCheckSupport", handle, int(operation), attention, seq, q_desc, k_desc, v_desc, o_desc, text,
         c_size_t(len(text)), byref(deterministic))
    return text.value.decode(), bool(deterministic.value)
