# SPDX-License-Identifier: BSD-3-Clause
"""Python binding of libflashattn (pure ctypes, no compiler needed).

    import numpy as np, flashattn
    o = flashattn.forward(q, k, v, causal=True)   # NumPy arrays run on the HOST backend

Tensors are NumPy arrays (HOST backend), or on a GPU any object with __cuda_array_interface__ or __dlpack__
(PyTorch, CuPy, JAX; CUDA backend). Shapes follow the C API's dims ([batch, heads, seq, headDim]), strides are read
from the tensors. `flashattn.torch` adds a differentiable attention for PyTorch. The library is found through
FLASHATTN_LIBRARY, else by its SONAME libflashattn.so.0.
"""

from ._capi import ABI_MAJOR, ABI_MINOR, Backend, DataType, LibraryNotFoundError, Mask, Operation, Status, lib
from ._objects import (AttentionDescriptor, Error, Handle, SeqDescriptor, TensorDescriptor, check_support,
                       error_string, last_error_message, version)
from ._ops import backward, decode, forward, merge_states

__version__ = "%d.%d.0" % (ABI_MAJOR, ABI_MINOR)

__all__ = ["AttentionDescriptor", "Backend", "DataType", "Error", "Handle", "LibraryNotFoundError", "Mask",
           "Operation", "SeqDescriptor", "Status", "TensorDescriptor", "backward", "check_support", "decode",
           "error_string", "forward", "last_error_message", "lib", "merge_states", "version"]
