"""The MTTKRP of a tensor's first or last mode in one pass over it (CUDA, float32 on TF32
tensor cores): kernels/tensor's kernel reads the tensor once and forms the Khatri–Rao rows of
the other modes on chip (in registers, from factor rows staged in shared memory), where the
library path (_tree) runs a cuBLAS GEMM that
writes an (R, ∏ other sizes / I_last) intermediate and a batched product that reads it again.

It takes the tensor's own C-order layout: the other modes' index is p = a·I_b + b, with b the
mode next to the contracted one (the last mode's neighbour for mode 0, mode N−2 for mode N−1)
and a the rest; W[p, r] = U[a, r]·V[b, r], U the Khatri–Rao product of the factors of the
modes in a (a single factor for a 3-way tensor).  CP-ALS uses it for one pass of its sweep
(_tree.sweep); `ENABLED = False` sends everything to the library path (benchmarks compare).
"""

from __future__ import annotations

import math

import array_api_compat

from .._ext import load
from ..common import backend

__all__ = ["ENABLED", "VARIANT", "MIN_ELEMENTS", "LAUNCHES", "LAST", "supported",
           "mttkrp_rows"]

_cuda = load("tensor_cuda")

# the kernel runs where this is True (a switch for benchmarks and bug hunts)
ENABLED = True
# the kernel's thread-block shape: 0 (4 warps of 64 × 32 outputs) or 1 (8 warps of 32 × 32);
# H100, 640³ rank 64: 0.434 / 0.427 ms (modes 0 / 2) for 0, 0.526 / 0.510 ms for 1
VARIANT = 0
# kernel launches by this process (tests check that a path took the kernel)
LAUNCHES = 0
# below this many tensor elements the library's GEMMs are as fast (launch costs dominate)
MIN_ELEMENTS = 1 << 20
# U (the Khatri–Rao product of the modes in a) is formed in global memory: at most this share
# of the tensor's size
_U_SHARE = 8
_MAX_RANK = 64
_MIN_INNER = 32

_PLANS: dict = {}
# the last launch: its variant, splits, padded rows and blocks per multiprocessor
LAST: dict = {}


def _view(dims, mode):
    """(m, ia, ib, modes of a, mode of b, row length) of the kernel's view for mode 0 or N−1."""
    n = len(dims)
    if mode == 0:
        return dims[0], math.prod(dims[1:n - 1]), dims[n - 1], list(range(1, n - 1)), n - 1, \
            math.prod(dims[1:])
    return dims[n - 1], math.prod(dims[:n - 2]), dims[n - 2], list(range(n - 2)), n - 2, \
        dims[n - 1]


def supported(eng, xs, rank, mode):
    """Whether the kernel runs mode `mode`'s MTTKRP of the stored tensor xs on this engine."""
    if not (ENABLED and _cuda is not None and eng.cuda and eng.lib in ("torch", "cupy")
            and eng.float32 and eng.precision == "tf32" and not eng.half):
        return False
    n = xs.ndim
    if n < 3 or mode not in (0, n - 1) or not 1 <= rank <= _MAX_RANK:
        return False
    if backend.dtype_name(xs.dtype) != "float32":
        return False
    dims = [int(d) for d in xs.shape]
    numel = math.prod(dims)
    m, ia, ib, _, _, row = _view(dims, mode)
    if numel < MIN_ELEMENTS or ib < _MIN_INNER or row % 4 or ia * _MAX_RANK * _U_SHARE > numel:
        return False
    return backend.device_view(xs).ptr % 16 == 0 and backend.is_c_contiguous(xs)


def _padded(xp, ft):
    """A rank-first factor (R, I) as the kernel reads it: (I, 64) row-major, zeros beyond R."""
    r, n = int(ft.shape[0]), int(ft.shape[1])
    rows = xp.permute_dims(ft, (1, 0))
    if r == _MAX_RANK:
        return backend.contiguous(rows)
    buf = xp.zeros((n, _MAX_RANK), dtype=ft.dtype, device=array_api_compat.device(ft))
    buf[:, :r] = rows
    return buf


def mttkrp_rows(eng, xs, scale, fts, mode, kr_rows):
    """The transposed MTTKRP (R, I_mode) of mode 0 or N−1 by the kernel (call supported()
    first), times scale.  kr_rows(xp, factors): the rank-first Khatri–Rao product (_tree's),
    for U of a tensor of order above 3."""
    global LAUNCHES
    xp = eng.xp
    dims = [int(d) for d in xs.shape]
    r = int(fts[0].shape[0])
    m, ia, ib, a_modes, b_mode, _ = _view(dims, mode)
    last = mode != 0
    variant = 1 if VARIANT else 0
    key = (last, variant, m, ia * ib, backend.device_index(xs))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _cuda.plan(last, variant, m, ia * ib)
    splits, mpad, per_sm = plan
    device = array_api_compat.device(xs)
    if a_modes:
        u = _padded(xp, kr_rows(xp, [fts[k] for k in a_modes]))
    else:
        u = xp.ones((1, _MAX_RANK), dtype=xs.dtype, device=device)
    v = _padded(xp, fts[b_mode])
    part = xp.empty((splits * _MAX_RANK * mpad,), dtype=xs.dtype, device=device)
    out = xp.empty((r, m), dtype=xs.dtype, device=device)
    ptr = backend.device_view
    _cuda.mttkrp(last, variant, m, ia, ib, r, ptr(xs).ptr, ptr(u).ptr, ptr(v).ptr,
                 ptr(part).ptr, splits, ptr(out).ptr, m, 1, float(scale), backend.cuda_stream(xs))
    LAUNCHES += 1
    LAST.update(variant=variant, splits=splits, mpad=mpad, blocks_per_sm=per_sm)
    return out
