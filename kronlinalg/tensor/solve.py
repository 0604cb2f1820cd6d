"""CP-ALS's factor update in one CUDA launch (kernels/tensor/solve_cuda.cu): the Hadamard
product of the other modes' Gram matrices, its ridge, an L·D·Lᵀ factorization in shared memory
and the solve against the transposed MTTKRP (R, I_n), for ranks up to 64 in float32 and
float64, on torch and CuPy arrays.

The library route it replaces — a Hadamard product, ~6 launches forming the ridge, then
torch's solve_ex (cuSOLVER getrf + getrs) — took ~0.2 ms of an H100 per update at rank 64,
~0.5 ms of a CP-ALS iteration that reads 1 GB of tensor in ~1 ms.  `SOLVER` picks the route
for benchmarks and bug hunts: "auto" (this kernel where it runs, else the LU solve), "lu"
(torch.linalg.solve_ex / the library's solve) or "cholesky" (torch: cholesky_ex and two
triangular solves).
"""

from __future__ import annotations

import array_api_compat

from .._ext import load
from ..common import backend

__all__ = ["SOLVER", "VARIANT", "PREFACTOR", "INVERSE", "FIT_KERNEL", "FIT_GRAM", "LAUNCHES",
           "supported", "factor", "solve", "fit_terms"]

_cuda = load("tensor_cuda")

# "auto", "lu" or "cholesky" (read when a parafac call starts)
SOLVER = "auto"
# the kernel's factorization: 1 (its loads issued ahead of its stores) or 0 (a row at a time,
# the first version: 66 µs a rank-64 update on an H100, against 148 µs for torch's route)
VARIANT = 1
# CP-ALS on CUDA torch: each mode's system factorized (factor()) on a side stream as soon as
# its Gram matrices are known — during the tensor pass before its update — and only the
# solve left after that pass.  H100, rank 64, 640 right-hand sides: the factorization 24–28 µs
# beside the pass, the solve from it 20 µs, against 34 µs for the one launch; CP-ALS 640³
# rank 64 1.080 against 1.111 ms per iteration (tf32), 0.775 against 0.788 (float16)
PREFACTOR = True
# with PREFACTOR: the side stream's factorization also forms the inverse of the system (the
# substitutions against the identity, in the same launch), and the update after the tensor
# pass is the product by it — 64 independent multiply-adds a row instead of two chains of 64
# dependent substitution steps (20 µs at rank 64 × 640 on an H100, three times an iteration on
# its critical path).  The product is not the substitution's rounding: factors differ in the
# last bits (forward error of the same order, κ·ε).  H100, 640³ rank 64, same run: the product
# 12 µs; CP-ALS tf32 1.047 → 1.039 ms, float16 0.617 → 0.608; bfloat16 0.620 → 0.626, so
# Engine.prefactor leaves it out for bfloat16 (the last mode's factorization and inversion,
# 41 µs behind its Gram on the side stream, then decide when its update starts)
INVERSE = True
# CP-ALS's fit terms (‖X̂‖², ⟨X, X̂⟩) in one launch where fit_terms() runs, else ~12 library
# launches (~20 µs in a CUDA graph of the sweep at rank 64 × 640 on an H100).  On: a block a
# rank index, the last block adding the partial sums in order (H100, CP-ALS 640³ rank 64, same
# run: tf32 1.064 against 1.076 ms per iteration, float16 0.652 against 0.664, fit equal to 9
# digits); its first version (one block, 44.5 µs) was slower than the library launches
FIT_KERNEL = True
# with FIT_KERNEL: CP-ALS's last mode's Gram matrix formed by the fit kernel (block r its row
# r) instead of a GEMM launch between the last update and the fit (~9 µs on an H100 at rank
# 64: cuBLAS's GEMM and its split-K reduction).  H100, same run: the fit kernel then takes
# 17.5 µs; tf32 alone 1.066 against 1.056 / 1.064 ms (noise), part of every timed
# combination of session 7 (tf32 1.039, float16 0.608)
FIT_GRAM = True
# kernel launches by this process (tests check that a path took the kernel)
LAUNCHES = 0
_MAX_RANK = 64


def supported(like, rank, count):
    """Whether the kernel solves a rank-`rank` system from `count` Gram matrices of like's
    library, device and dtype."""
    return (_cuda is not None and (backend.is_torch(like) or backend.is_cupy(like))
            and backend.on_cuda(like) and 1 <= rank <= _MAX_RANK
            and 1 <= count <= _cuda.SOLVE_MAX_GRAMS
            and backend.dtype_name(like.dtype) in ("float32", "float64"))


def factor(grams, eps, ws=None, inverse=False):
    """The factorization of ∘ grams + ρI (see solve) alone, one block on the current stream,
    into the workspace ws (R·R + R,) (a new one if None) for solve(..., factored=ws); returns
    ws (call supported() first).  inverse: the system's inverse instead (solve(...,
    factored=ws, inverse=True) multiplies by it)."""
    g0 = grams[0]
    xp = array_api_compat.array_namespace(g0)
    r = int(g0.shape[0])
    if ws is None:
        ws = xp.empty((r * r + r,), dtype=g0.dtype, device=array_api_compat.device(g0))
    grams = [backend.contiguous(g) for g in grams]
    ptr = backend.address_getter(g0)
    _cuda.spd_solve(backend.dtype_name(g0.dtype) == "float64", 1 if VARIANT else 0, r,
                    [ptr(g) for g in grams], 0, 0, 0, 0, 0, float(eps), backend.cuda_stream(g0),
                    3 if inverse else 1, ptr(ws))
    return ws


def solve(grams, rhs, eps, factored=None, inverse=False):
    """(∘ grams + ρI)⁻¹ rhs, ρ = eps · max(its largest diagonal entry, 1e-30) (call
    supported() first): grams R×R, rhs (R, n), all of one dtype on one GPU; a new (R, n)
    array.  Inputs are not modified.  factored: factor(grams, eps)'s workspace (its launch
    ordered before this one): only the solve runs; inverse: factored holds the inverse
    (factor(..., inverse=True)) and the solve is the product by it."""
    global LAUNCHES
    xp = array_api_compat.array_namespace(rhs)
    r, n = int(rhs.shape[0]), int(rhs.shape[1])
    out = xp.empty((r, n), dtype=rhs.dtype, device=array_api_compat.device(rhs))
    if n == 0:
        return out
    rhs = backend.contiguous(rhs)
    ptr = backend.address_getter(rhs)
    if factored is not None:
        _cuda.spd_solve(backend.dtype_name(rhs.dtype) == "float64", 1, r, [], ptr(rhs), n,
                        ptr(out), n, n, float(eps), backend.cuda_stream(rhs),
                        4 if inverse else 2, ptr(factored))
    else:
        grams = [backend.contiguous(g) for g in grams]
        _cuda.spd_solve(backend.dtype_name(rhs.dtype) == "float64", 1 if VARIANT else 0, r,
                        [ptr(g) for g in grams], ptr(rhs), n, ptr(out), n, n, float(eps),
                        backend.cuda_stream(rhs))
    LAUNCHES += 1
    return out


def fit_terms(grams, w, y, ft, last_gram=False):
    """(‖X̂‖², ⟨X, X̂⟩) of CP-ALS's fit as two float64 device scalars, by one launch of
    kernels/tensor's fit kernel — w (R,) the weights, grams the R×R Gram matrices, y and ft
    (R, n) the last mode's transposed MTTKRP and factor — or None where it does not run
    (FIT_KERNEL off, not CUDA torch/CuPy, rank above 64, more than 8 Gram matrices, mixed
    dtypes).  last_gram: grams lacks the last mode's, which the kernel forms (ft·ftᵀ, in the
    same launch): returns (‖X̂‖², ⟨X, X̂⟩, ft·ftᵀ)."""
    r = int(ft.shape[0])
    if not (FIT_KERNEL and supported(ft, r, len(grams) + (1 if last_gram else 0))
            and len(grams) >= 1):
        return None
    if any(a.dtype != ft.dtype for a in (*grams, w, y)):
        return None
    xp = array_api_compat.array_namespace(ft)
    n = int(ft.shape[1])
    device = array_api_compat.device(ft)
    out = xp.empty((2,), dtype=xp.float64, device=device)
    work = xp.zeros((2 * r + 1,), dtype=xp.float64, device=device)  # (partials, a ticket)
    ft, y, w = backend.contiguous(ft), backend.contiguous(y), backend.contiguous(w)
    grams = [backend.contiguous(g) for g in grams]
    gram = xp.empty((r, r), dtype=ft.dtype, device=device) if last_gram else None
    ptr = backend.address_getter(ft)
    _cuda.fit_terms(backend.dtype_name(ft.dtype) == "float64", r, [ptr(g) for g in grams],
                    ptr(w), ptr(y), ptr(ft), n, ptr(out), ptr(work), backend.cuda_stream(ft),
                    ptr(gram) if gram is not None else 0)
    return (out[0], out[1]) if gram is None else (out[0], out[1], gram)
