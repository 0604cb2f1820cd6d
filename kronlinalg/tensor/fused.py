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

Half-precision storage (parafac's precision "float16"/"bfloat16"): the first mode's MTTKRP by
the kernel's half variant (tensor_half_cuda.cu: the tensor read once in the half type, the
Khatri–Rao rows rounded to it on chip, float32 sums), U and V scaled by their largest
magnitudes for float16 (a device scalar undoes it, no host synchronisation).
"""

from __future__ import annotations

import math

import array_api_compat

from .._ext import load
from ..common import backend
from . import scaling

__all__ = ["ENABLED", "HALF", "DEFER_SCALE", "HALF_INTERMEDIATE", "HALF_VARIANT", "VARIANT",
           "HALF_CONTRACT", "GRAM_SCALE", "FOLD_SCALE", "MIN_ELEMENTS",
           "LAUNCHES", "LAST", "supported", "mttkrp_rows", "stored_mttkrp", "half_contract"]

_cuda = load("tensor_cuda")

# the kernel runs where this is True (a switch for benchmarks and bug hunts)
ENABLED = True
# half-precision storage: the first mode's MTTKRP by the kernel's half variant, and CP-ALS's
# sweep split after mode 0 around it (False: the library's half GEMMs on both passes, the
# split that writes least, as before)
HALF = True
# half-precision storage: the scales of a half GEMM's operands (the tensor's and the factor's
# largest magnitudes) applied to the small (R, I_n) results of CP-ALS's sweep rather than to
# the (R, ∏ other sizes) intermediate the GEMM writes (one read and one write of it less)
DEFER_SCALE = True
# half-precision storage, torch, with DEFER_SCALE: the intermediate of CP-ALS's library pass
# (R, ∏ other sizes) written in the half type and contracted by half products with float32
# sums (half its bytes written and read twice; its rounding adds ~2⁻¹¹ / 2⁻⁸ relative).  H100,
# 640³ rank 64: the GEMM 203 against 222 µs, the two contractions 32 + 24 µs against 42 + 33
# (float32 batched products); CP-ALS 0.746 against 0.788 ms per iteration
HALF_INTERMEDIATE = True
# the half intermediate contracted by kernels/tensor's half contractions (else torch's bmm with
# float32 output: 0.770 ms per iteration against 0.746)
HALF_CONTRACT = True
# the half variant's blocks: 0 (4 warps, 128 output rows, 64 p a stage, two blocks a
# multiprocessor), 1 (8 warps, 256 rows: each staged row of V serves twice the rows of X), 2
# ("b-major": 4 warps, 128 rows, a 64-wide chunk of the inner index b with a range of the outer
# a, so the chunk's rows of V are staged once; three blocks a multiprocessor).  H100, 640³
# rank 64, float16, GPU time with the scales: 0.310 / 0.303 / 0.257 ms (the kernel alone in a
# sweep: 262 and 206 µs for 0 and 2, 2.0 and 2.55 TB/s)
HALF_VARIANT = 2
# the pending scale of a half intermediate (the GEMM's operands' scales, DEFER_SCALE) applied
# by the half contractions that read it (half_contract's mult), not by a launch on each
# (R, I_n) result (two ~2 µs launches a CP-ALS sweep on an H100)
FOLD_SCALE = True
# float16, U a single factor (a 3-way tensor): U and V enter unscaled with their Gram matrices
# (Engine.gram_of: CP-ALS's, already formed) and the kernel scales the Khatri–Rao rows by the
# bound √(max diag) of each factor's largest magnitude (kl_tensor_mttkrp.gram_v): the factors'
# abs-max reductions, clamps and product (5 launches, ~20 µs before the kernel in CP-ALS's
# sweep on an H100) vanish; the copies into the kernel's rows are bfloat16's
GRAM_SCALE = True
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
_MIN_INNER_HALF = 64
_HALF_CODES = {"float16": 1, "bfloat16": 2}

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
            and eng.float32):
        return False
    n, half = xs.ndim, eng.half
    if half:  # (the half variant: the first mode only)
        if not (HALF and mode == 0 and eng.precision in _HALF_CODES
                and backend.dtype_name(xs.dtype) == eng.precision):
            return False
    elif eng.precision != "tf32" or backend.dtype_name(xs.dtype) != "float32":
        return False
    if n < 3 or mode not in (0, n - 1) or not 1 <= rank <= _MAX_RANK:
        return False
    dims = [int(d) for d in xs.shape]
    numel = math.prod(dims)
    m, ia, ib, _, _, row = _view(dims, mode)
    if (numel < MIN_ELEMENTS or ib < (_MIN_INNER_HALF if half else _MIN_INNER)
            or row % (8 if half else 4) or ia * _MAX_RANK * _U_SHARE > numel):
        return False
    return backend.device_view(xs).ptr % 16 == 0 and backend.is_c_contiguous(xs)


def _padded(xp, ft, s=None):
    """A rank-first factor (R, I) as the kernel reads it: (I, 64) row-major, zeros beyond R;
    divided by the device scalar s if given."""
    r, n = int(ft.shape[0]), int(ft.shape[1])
    rows = xp.permute_dims(ft, (1, 0))
    if s is not None and r == _MAX_RANK and backend.is_torch(ft):  # (one launch)
        import torch

        return torch.div(rows, s, out=torch.empty((n, r), dtype=ft.dtype, device=ft.device))
    if s is not None:
        rows = rows / s
    if r == _MAX_RANK:
        return backend.contiguous(rows)
    buf = xp.zeros((n, _MAX_RANK), dtype=ft.dtype, device=array_api_compat.device(ft))
    buf[:, :r] = rows
    return buf


def _largest(xp, a):
    """max |a| as a device scalar (at least 1e-30), in few launches (each costs more than
    the work in a CUDA graph of the sweep)."""
    if backend.is_torch(a):
        import torch

        return torch.linalg.vector_norm(a, float("inf")).clamp_min(1e-30)
    s = xp.max(xp.abs(a))
    return xp.where(s > 0, s, xp.ones_like(s))


def _grams_for_scale(eng, fts, a_modes, b_mode):
    """(U's Gram or None, V's Gram) for the kernel's Gram scale (GRAM_SCALE, U one factor or
    none, both Grams known to the engine, float32 C-contiguous), else (None, None)."""
    if not GRAM_SCALE or len(a_modes) > 1:
        return None, None
    gv = eng.gram_of(fts[b_mode])
    gu = eng.gram_of(fts[a_modes[0]]) if a_modes else None
    if gv is None or (a_modes and gu is None):
        return None, None
    if not all(backend.dtype_name(g.dtype) == "float32" and backend.is_c_contiguous(g)
               for g in (gu, gv) if g is not None):
        return None, None
    return gu, gv


def mttkrp_rows(eng, xs, scale, fts, mode, kr_rows):
    """The transposed MTTKRP (R, I_mode) of mode 0 or N−1 by the kernel (call supported()
    first), times scale.  kr_rows(xp, factors): the rank-first Khatri–Rao product (_tree's),
    for U of a tensor of order above 3.  xs float32, or (half storage, mode 0) float16 /
    bfloat16 with the factors in float32."""
    global LAUNCHES
    xp = eng.xp
    dims = [int(d) for d in xs.shape]
    r = int(fts[0].shape[0])
    m, ia, ib, a_modes, b_mode, _ = _view(dims, mode)
    last = mode != 0
    code = _HALF_CODES.get(backend.dtype_name(xs.dtype), 0)
    variant = int(HALF_VARIANT) if code else (1 if VARIANT else 0)
    key = (last, variant, code, m, ia, ib, backend.device_index(xs))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _cuda.plan(last, variant, m, ia * ib, code, ib)
    splits, mpad, per_sm = plan
    device = array_api_compat.device(xs)
    f32 = fts[b_mode].dtype
    uk = kr_rows(xp, [fts[k] for k in a_modes]) if a_modes else None
    su = sv = dscale = u = v = scale_out = None
    gu, gv = _grams_for_scale(eng, fts, a_modes, b_mode) if code == 1 else (None, None)
    if gv is not None:  # (U and V unscaled: the kernel scales W from their Grams)
        scale_out = xp.empty((1,), dtype=f32, device=device)
    elif code == 1 and scaling.supported(fts[b_mode], True) and (
            uk is None or scaling.supported(uk, True)):  # (one launch a factor)
        v, sv = scaling.scaled_copy(fts[b_mode], pad64=True)
        if uk is not None:
            u, su = scaling.scaled_copy(uk, pad64=True)
        dscale = sv if su is None else su * sv
    elif code == 1:  # float16: W = U·V must fit its range, so U and V enter divided by their
        sv = _largest(xp, fts[b_mode])  # largest magnitudes (undone by dscale on the device)
        su = _largest(xp, uk) if uk is not None else None
        dscale = xp.reshape(sv if su is None else su * sv, (1,))
    if u is None:
        u = (_padded(xp, uk, su) if uk is not None
             else xp.ones((1, _MAX_RANK), dtype=f32, device=device))
    if v is None:
        v = _padded(xp, fts[b_mode], sv)
    part = xp.empty((splits * _MAX_RANK * mpad,), dtype=f32, device=device)
    out = xp.empty((r, m), dtype=f32, device=device)
    ptr = backend.device_view
    _cuda.mttkrp(last, variant, m, ia, ib, r, ptr(xs).ptr, ptr(u).ptr, ptr(v).ptr,
                 ptr(part).ptr, splits, ptr(out).ptr, m, 1, float(scale), backend.cuda_stream(xs),
                 code, ptr(dscale).ptr if dscale is not None else 0,
                 ptr(gu).ptr if gu is not None else 0, ptr(gv).ptr if gv is not None else 0,
                 ptr(scale_out).ptr if scale_out is not None else 0)
    LAUNCHES += 1
    LAST.update(variant=variant, dtype=code, splits=splits, mpad=mpad, blocks_per_sm=per_sm,
                gram_scale=gv is not None)
    return out


def stored_mttkrp(xs, factors, mode=0, scale=1.0, grams=None):
    """The MTTKRP (I_mode, R) of a CUDA tensor (torch or CuPy) already stored as the kernel
    reads it — float32, or float16 / bfloat16 for mode 0 — times scale, by the kernel; None
    where the kernel does not take it (see supported()).  factors: float32 (I_n, R), every
    mode's (the contracted mode's is not read).  grams: the factors' Gram matrices FᵀF (R×R
    float32; None entries allowed), for float16's Gram scale (GRAM_SCALE) as CP-ALS runs it.
    For tests and benchmarks of the kernel itself; parafac stores the tensor and calls it
    through its sweep."""
    from ._engine import Engine

    xp = array_api_compat.array_namespace(xs)
    name = backend.dtype_name(xs.dtype)
    eng = Engine(xp, factors[0], name if name in _HALF_CODES else "tf32")
    rank = int(factors[0].shape[1])
    if not supported(eng, xs, rank, mode):
        return None
    fts = [backend.contiguous(xp.permute_dims(f, (1, 0))) for f in factors]
    for n, g in enumerate(grams or ()):
        if g is not None:
            eng.note_gram(n, fts[n], backend.contiguous(g))
    rows = mttkrp_rows(eng, xs, scale, fts, mode, _kr_rows)
    return xp.permute_dims(rows, (1, 0))


def _kr_rows(xp, fts):
    """The rank-first Khatri–Rao product (R, ∏ I_k), the first factor's index slowest (as
    _tree.kr_rows, which imports this module)."""
    k = fts[0]
    for f in fts[1:]:
        k = xp.reshape(k[:, :, None] * f[:, None, :], (int(k.shape[0]), -1))
    return k


def half_contract(y3, ft, leading, mult=None):
    """A half intermediate y3 (R, J, K) (float16 / bfloat16, CUDA torch or CuPy) contracted with
    the float32 rank-first factor ft by kernels/tensor's half contraction, float32 sums:
    Σ_k y3[r, j, k] ft[r, k] → (R, J), or (leading) Σ_j ft[r, j] y3[r, j, k] → (R, K), times
    mult (None, a number or a one-element float32 device array: the kernel multiplies, no
    launch of its own).  None where the kernel does not take it (HALF_CONTRACT off, no CUDA
    build, K not a multiple of 8, y3 not contiguous or not 16-byte aligned)."""
    code = _HALF_CODES.get(backend.dtype_name(y3.dtype), 0)
    if not (HALF_CONTRACT and _cuda is not None and code and backend.on_cuda(y3)):
        return None
    r, j, k = (int(d) for d in y3.shape)
    if k % 8 or not backend.is_c_contiguous(y3) or backend.device_view(y3).ptr % 16:
        return None
    xp = array_api_compat.array_namespace(y3)
    ft = backend.contiguous(ft)
    out = xp.empty((r, k if leading else j), dtype=ft.dtype, device=array_api_compat.device(ft))
    ptr = backend.device_view
    alpha, scale = 1.0, None
    if isinstance(mult, (int, float)):
        alpha = float(mult)
    elif mult is not None:
        scale = backend.contiguous(xp.reshape(mult, (1,)))
        if backend.dtype_name(scale.dtype) != "float32":
            return None
    _cuda.half_contract(code, leading, r, j, k, ptr(y3).ptr, ptr(ft).ptr, ptr(out).ptr,
                        backend.cuda_stream(y3), alpha, ptr(scale).ptr if scale is not None else 0)
    return out
