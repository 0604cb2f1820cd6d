"""The half-precision path's operand preparation in one CUDA launch each
(kernels/tensor/scale_cuda.cu): a rank-first float32 factor divided by its largest magnitude
(written to a device scalar: no host synchronisation) and copied either as the one-pass
MTTKRP kernel's padded (I, 64) float32 rows or in the half type for a GEMM over the stored
tensor.  The library route is 3–4 launches (an abs-max reduction that took 6–9 µs of an H100
at 64 × 640, a clamp, a division, a cast), on the CP sweep's critical path three times.

`KERNEL` switches it on (fused.mttkrp_rows for float16 storage, Engine.lhs for the half
GEMMs).  Off: one block reads the 160 KB factor twice, latency-bound (H100, CP-ALS 640³ rank
64 in float16: 0.686 against 0.664 ms per iteration).

Where CP-ALS knows the factor's Gram matrix G = FᵀF (it forms it for the normal equations),
max |F| ≤ √(max diag G): gram_scaled_copy divides by that bound instead, with no pass over F
before the copy, so a grid of blocks shares it (`GRAM_LHS`, Engine.lhs for float16).
bfloat16 has float32's exponent range: its GEMM operand needs no scale at all (`BF16_CAST`:
a cast, one launch).
"""

from __future__ import annotations

import math

import array_api_compat

from .._ext import load
from ..common import backend

__all__ = ["KERNEL", "GRAM_LHS", "BF16_CAST", "MAX_ELEMENTS", "supported", "scaled_copy",
           "gram_supported", "gram_scaled_copy"]

_cuda = load("tensor_cuda")

# the one-launch preparation where it runs (else the library's launches)
KERNEL = False
# float16: a factor's GEMM copy scaled by the bound from its Gram matrix (one launch of a grid
# of blocks) where the Gram is known, instead of its largest magnitude (3-4 launches)
GRAM_LHS = True
# bfloat16: a factor's GEMM copy is a cast, unscaled (the scale only guards float16's range)
BF16_CAST = True
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


def gram_supported(a, gram=None, largest=None):
    """Whether gram_scaled_copy runs on a (a 2-D float32 CUDA torch tensor or CuPy array of
    at most 64 rows) with its Gram matrix gram (rows × rows, float32, C-contiguous) or its
    largest magnitude largest (one float32 on the device)."""
    if not (_cuda is not None and (backend.is_torch(a) or backend.is_cupy(a))
            and backend.on_cuda(a) and a.ndim == 2
            and backend.dtype_name(a.dtype) == "float32" and 1 <= int(a.shape[0]) <= _MAX_RANK):
        return False
    if largest is not None:
        return (backend.dtype_name(largest.dtype) == "float32"
                and math.prod(int(d) for d in largest.shape) == 1
                and backend.is_c_contiguous(largest))
    return (gram is not None and gram.ndim == 2 and backend.dtype_name(gram.dtype) == "float32"
            and tuple(int(d) for d in gram.shape) == (int(a.shape[0]),) * 2
            and backend.is_c_contiguous(gram))


def gram_scaled_copy(a, gram, out_dtype, largest=None):
    """(copy, s): a (R, n) divided by s = √max(max diag gram, 1e-30) — gram = a·aᵀ bounds
    max |a| by s — or, given largest (a device float32 holding max |a|, CP-ALS's factor
    update writes it), by s = max(largest, 1e-30); as an (R, n) array of out_dtype (float32,
    float16 or bfloat16 of a's library); s a (1,) float32 device array.  One launch, no pass
    over a before it.  Call gram_supported() first; a, gram and largest are not modified."""
    xp = array_api_compat.array_namespace(a)
    device = array_api_compat.device(a)
    a = backend.contiguous(a)
    r, n = int(a.shape[0]), int(a.shape[1])
    out = xp.empty((r, n), dtype=out_dtype, device=device)
    code = _CODES[backend.dtype_name(out.dtype)]
    s = xp.empty((1,), dtype=a.dtype, device=device)
    ptr = backend.device_view
    _cuda.scaled_copy(code, False, r, n, ptr(a).ptr, ptr(out).ptr, ptr(s).ptr,
                      backend.cuda_stream(a), ptr(gram).ptr if largest is None else 0,
                      ptr(largest).ptr if largest is not None else 0)
    return out, s
