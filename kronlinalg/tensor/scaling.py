"""The half-precision path's operand preparation in one CUDA launch each
(kernels/tensor/scale_cuda.cu): a rank-first float32 factor divided by its largest magnitude
(written to a device scalar: no host synchronisation) and copied either as the one-pass
MTTKRP kernel's padded (I, 64) float32 rows or in the half type for a GEMM over the stored
tensor.  The library route is 3–4 launches (an abs-max reduction that took 6–9 µs of an H100
at 64 × 640, a clamp, a division, a cast), on the CP sweep's critical path three times.

`KERNEL` switches it on (fused.mttkrp_rows for float16 storage, Engine.lhs for the half
GEMMs); off by default: not yet timed on a GPU.
"""

from __future__ import annotations

import array_api_compat

from .._ext import load
from ..common import backend

__all__ = ["KERNEL", "MAX_ELEMENTS", "supported", "scaled_copy"]

_cuda = load("tensor_cuda")

# the one-launch preparation where it runs (else the library's launches)
KERNEL = False
_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
_MAX_RANK = 64


# one block does it all: for factors (R × I_n, tens of thousands of elements), not for large
# Khatri–Rao products
MAX_ELEMENTS = 1 << 18


def supported(a, pad64=False):
    """Whether scaled_copy runs on a (a 2-D float32 CUDA torch tensor or CuPy array of at most
    MAX_ELEMENTS elements; at most 64 rows for pad64)."""
    return (KERNEL and _cuda is not None and (backend.is_torch(a) or backend.is_cupy(a))
            and backend.on_cuda(a) and a.ndim == 2
            and backend.dtype_name(a.dtype) == "float32"
            and int(a.shape[0]) * int(a.shape[1]) <= MAX_ELEMENTS
            and (not pad64 or int(a.shape[0]) <= _MAX_RANK))


def scaled_copy(a, out_dtype=None, pad64=False, scale=True):
    """(copy, s): a (R, n) divided by s = max(max |a|, 1e-30) (scale; else s is None and
    nothing is divided), as (n, 64) float32 rows zero beyond R (pad64) or as an (R, n) array
    of out_dtype (a dtype of a's library: float32, float16, bfloat16); s a (1,) float32 device
    array.  Call supported() first; a is not modified."""
    xp = array_api_compat.array_namespace(a)
    device = array_api_compat.device(a)
    a = backend.contiguous(a)
    r, n = int(a.shape[0]), int(a.shape[1])
    if pad64:
        out, code = xp.empty((n, _MAX_RANK), dtype=a.dtype, device=device), 0
    else:
        dt = out_dtype if out_dtype is not None else a.dtype
        out = xp.empty((r, n), dtype=dt, device=device)
        # (named from the array's dtype: CuPy takes out_dtype as a scalar type, numpy.float16)
        code = _CODES[backend.dtype_name(out.dtype)]
    s = xp.empty((1,), dtype=a.dtype, device=device) if scale else None
    ptr = backend.device_view
    _cuda.scaled_copy(code, pad64, r, n, ptr(a).ptr, ptr(out).ptr,
                      ptr(s).ptr if s is not None else 0, backend.cuda_stream(a))
    return out, s
