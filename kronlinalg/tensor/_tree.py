"""MTTKRP on a C-order tensor without its unfoldings or its Khatri–Rao products, and the
dimension tree that serves every mode of a CP-ALS sweep from two passes over the tensor.

Everything is "rank-first": a factor enters as Fᵀ (R, I_n) and partial results are (R, …)
arrays, so that each contraction is a GEMM on a view of the tensor's own layout or a batched
product over r on a small intermediate:

- the tensor's LAST modes contracted: X viewed (I_0⋯I_{N-2}, I_{N-1}) times F_{N-1} (a GEMM on
  the transposed view), then each further trailing mode by a batched (R, pre, I_m)·(R, I_m, 1);
- its FIRST modes contracted: F_0ᵀ times X viewed (I_0, I_1⋯I_{N-1}), then each further leading
  mode by a batched (R, 1, I_m)·(R, I_m, post).

A set of several modes is contracted through their (partial) Khatri–Rao product instead only
when that product is smaller than the intermediate the chain would write (a rank above the
mode sizes: the 40490×449×44 gene tensor at R = 1000 would otherwise write R/44 times the
tensor) — the full Khatri–Rao product of the other N−1 factors is never formed.

A CP-ALS sweep splits the modes at p: pass 1 contracts modes p…N−1 (old factors) to
(R, I_0⋯I_{p−1}), from which the modes 0…p−1 are updated in turn (a subtree: contract the
right half of the remaining modes, recurse left, contract the freshly updated left half,
recurse right); pass 2 contracts modes 0…p−1 with their NEW factors and serves modes p…N−1 the
same way.  Two reads of the tensor per iteration for any order; p is chosen to minimise the
intermediates.
"""

from __future__ import annotations

import math

from . import fused

__all__ = ["sweep", "subtree", "split", "sweep_split", "mttkrp_rows", "kr_rows",
           "contract_suffix", "contract_prefix"]


def kr_rows(xp, fts):
    """The Khatri–Rao product of factors given rank-first (R, I_k): (R, ∏ I_k), the first
    factor's index varying slowest."""
    r = int(fts[0].shape[0])
    k = fts[0]
    for f in fts[1:]:
        k = xp.reshape(k[:, :, None] * f[:, None, :], (r, -1))
    return k


def _bmm(xp, a, b):
    """a @ b over a leading batch index.  One of them in a half type (a half intermediate,
    torch): the other, float32, rounded to that type after division by its largest magnitude;
    float32 sums and output."""
    if a.dtype == b.dtype:
        return xp.matmul(a, b)
    import torch

    half_a = a.element_size() == 2
    f, half = (b, a.dtype) if half_a else (a, b.dtype)
    s = None
    if half == torch.float16:  # (bfloat16 has float32's range)
        s = torch.linalg.vector_norm(f, float("inf")).clamp_min(1e-30)
        f = f / s
    fh = f.to(half)
    out = torch.bmm(a, fh, out_dtype=b.dtype) if half_a else torch.bmm(fh, b, out_dtype=a.dtype)
    return out if s is None else out * s


def _trailing(xp, y, ft, pre, d, mult=None):
    """Σ_i y[r, p, i] F[i, r] → (R, pre), times mult if given: y (R, pre·d) (of a half type:
    kernels/tensor's half contraction where it runs, which applies mult)."""
    r = int(ft.shape[0])
    y3 = xp.reshape(y, (r, pre, d))
    if y.dtype != ft.dtype:
        out = fused.half_contract(y3, ft, False, mult)
        if out is not None:
            return out
    return _scaled(xp.reshape(_bmm(xp, y3, ft[:, :, None]), (r, pre)), mult)


def _leading(xp, y, ft, d, post, mult=None):
    """Σ_i F[i, r] y[r, i, q] → (R, post), times mult if given: y (R, d·post) (of a half type:
    kernels/tensor's half contraction where it runs, which applies mult)."""
    r = int(ft.shape[0])
    y3 = xp.reshape(y, (r, d, post))
    if y.dtype != ft.dtype:
        out = fused.half_contract(y3, ft, True, mult)
        if out is not None:
            return out
    return _scaled(xp.reshape(_bmm(xp, ft[:, None, :], y3), (r, post)), mult)


def _use_kr(dims, modes, boundary):
    """Whether contracting several modes through their Khatri–Rao product (∏ sizes × R) writes
    less than the chain, whose first GEMM writes numel/I_boundary × R."""
    if len(modes) < 2:
        return False
    return math.prod(dims[m] for m in modes) < math.prod(dims) // dims[boundary]


def _scaled(y, mult):
    return y if mult is None else y * mult


def contract_suffix(eng, xs, scale, fts, p, defer=False, half_out=False):
    """X contracted over modes p…N−1 with their factors: (R, I_0⋯I_{p−1}); with defer, (that
    before its scale, the scale: see Engine.mm_stored)."""
    xp, dims, n = eng.xp, [int(d) for d in xs.shape], xs.ndim
    numel, left = math.prod(dims), math.prod(dims[:p])
    modes = list(range(p, n))
    if _use_kr(dims, modes, n - 1):
        k = kr_rows(xp, [fts[m] for m in modes])
        y, mult = eng.mm_stored(k, xp.reshape(xs, (left, numel // left)), True, scale, True)
        return (y, mult) if defer else _scaled(y, mult)
    y, mult = eng.mm_stored(fts[n - 1], xp.reshape(xs, (numel // dims[-1], dims[-1])), True,
                            scale, True, half_out and p == n - 1)
    for m in range(n - 2, p - 1, -1):
        y = _trailing(xp, y, fts[m], math.prod(dims[:m]), dims[m])
    return (y, mult) if defer else _scaled(y, mult)


def contract_prefix(eng, xs, scale, fts, p, defer=False, half_out=False):
    """X contracted over modes 0…p−1 with their factors: (R, I_p⋯I_{N−1}); with defer, (that
    before its scale, the scale: see Engine.mm_stored)."""
    xp, dims = eng.xp, [int(d) for d in xs.shape]
    numel, lead = math.prod(dims), math.prod(dims[:p])
    modes = list(range(p))
    if _use_kr(dims, modes, 0):
        k = kr_rows(xp, [fts[m] for m in modes])
        y, mult = eng.mm_stored(k, xp.reshape(xs, (lead, numel // lead)), False, scale, True)
        return (y, mult) if defer else _scaled(y, mult)
    y, mult = eng.mm_stored(fts[0], xp.reshape(xs, (dims[0], numel // dims[0])), False, scale,
                            True, half_out and p == 1)
    post = numel // dims[0]
    for m in range(1, p):
        post //= dims[m]
        y = _leading(xp, y, fts[m], dims[m], post)
    return (y, mult) if defer else _scaled(y, mult)


def _written(dims, r, p):
    """Elements the two root contractions write when the sweep splits at p (its cost model:
    both read the tensor once whatever p is)."""
    n, numel = len(dims), math.prod(dims)
    cost = r * (math.prod(dims[:p]) + math.prod(dims[p:]))
    for modes, boundary in ((range(p, n), n - 1), (range(p), 0)):
        modes = list(modes)
        if len(modes) > 1:
            cost += r * min(numel // dims[boundary], math.prod(dims[m] for m in modes))
    return cost


def split(dims, r):
    """The root split p (1 ≤ p < N) whose contractions write least (ties: the largest p)."""
    n = len(dims)
    return min(range(n - 1, 0, -1), key=lambda p: _written(dims, r, p))


def sweep_split(eng, xs, r):
    """The sweep's split: for a 3-way tensor whose mode-0 MTTKRP the one-pass kernel runs
    (fused), p = 1 — pass 1 is that kernel, pass 2 the GEMM A₀ᵀ·X(I, JK), cuBLAS's faster
    orientation of the two (0.45 against 0.52 ms at 640³ rank 64, H100); p = 2 where only
    mode 2 qualifies; otherwise split()."""
    dims = [int(d) for d in xs.shape]
    if len(dims) == 3:
        for mode, p in ((0, 1), (2, 2)):
            if fused.supported(eng, xs, r, mode):
                return p
    return split(dims, r)


def _root(eng, xs, scale, fts, mode, library):
    """A root contraction that serves mode 0 or N−1 alone: the one-pass kernel where it runs,
    else library() (the GEMM chain)."""
    if fused.supported(eng, xs, int(fts[0].shape[0]), mode):
        return fused.mttkrp_rows(eng, xs, scale, fts, mode, kr_rows)
    return library()


def subtree(eng, y, modes, fts, dims, update, mult=None):
    """Serve the modes of y (R, ∏ their sizes; every other mode already contracted): update(n,
    y_n) for each in order, contracting each half with the other half's factors as they are
    at that moment (the left half's updated ones for the right half).  mult (None, a number or
    a device scalar): y's pending scale, applied by the first contraction of each half (a
    single mode: to y itself)."""
    xp = eng.xp
    if len(modes) == 1:
        update(modes[0], _scaled(y, mult))
        return
    q = len(modes) // 2
    left, right = modes[:q], modes[q:]
    yl, pre, pending = y, math.prod(dims[m] for m in modes), mult
    for m in reversed(right):
        pre //= dims[m]
        yl, pending = _trailing(xp, yl, fts[m], pre, dims[m], pending), None
    subtree(eng, yl, left, fts, dims, update)
    del yl
    yr, post, pending = y, math.prod(dims[m] for m in modes), mult
    for m in left:
        post //= dims[m]
        yr, pending = _leading(xp, yr, fts[m], dims[m], post, pending), None
    subtree(eng, yr, right, fts, dims, update)


def sweep(eng, xs, scale, fts, update, p):
    """One ALS sweep over every mode in order 0…N−1: update(n, y_n) with y_n (R, I_n) the
    transposed MTTKRP of mode n from the factors current at that moment; update must store the
    new factor in fts[n].  Reads the (stored) tensor xs twice.  Half storage (fused.DEFER_SCALE):
    each pass's scale is applied to the (R, I_n) results, not to its intermediate."""
    dims = [int(d) for d in xs.shape]
    n = len(dims)
    defer = eng.half and fused.DEFER_SCALE
    half_out = defer and fused.HALF_INTERMEDIATE and eng.lib == "torch"

    def root(mode, library, served):
        """(y, its pending scale): the one-pass kernel where the pass serves one mode (mode
        not None) that it runs, else the library's contraction (a half intermediate only
        where a subtree of several modes contracts it further)."""
        if mode is not None and fused.supported(eng, xs, int(fts[0].shape[0]), mode):
            return fused.mttkrp_rows(eng, xs, scale, fts, mode, kr_rows), None
        if defer:
            return library(eng, xs, scale, fts, p, True, half_out and served > 1)
        return library(eng, xs, scale, fts, p), None

    def serve(y, modes, mult):
        if fused.FOLD_SCALE:  # (the pending scale applied by the contractions of y)
            subtree(eng, y, modes, fts, dims, update, mult)
        else:
            subtree(eng, y, modes, fts, dims,
                    update if mult is None else (lambda m, yn: update(m, yn * mult)))

    y, mult = root(0 if p == 1 else None, contract_suffix, p)
    serve(y, list(range(p)), mult)
    del y
    y, mult = root(n - 1 if p == n - 1 else None, contract_prefix, n - p)
    serve(y, list(range(p, n)), mult)


def mttkrp_rows(eng, xs, scale, fts, mode):
    """The transposed MTTKRP of one mode, (R, I_mode): X contracted with every other factor,
    starting with the larger side of the mode (the smaller intermediate)."""
    xp, dims = eng.xp, [int(d) for d in xs.shape]
    n = len(dims)
    if mode == 0:
        return _root(eng, xs, scale, fts, 0, lambda: contract_suffix(eng, xs, scale, fts, 1))
    if mode == n - 1:
        return _root(eng, xs, scale, fts, n - 1,
                     lambda: contract_prefix(eng, xs, scale, fts, n - 1))
    if math.prod(dims[:mode + 1]) <= math.prod(dims[mode:]):
        y = contract_suffix(eng, xs, scale, fts, mode + 1)  # (R, I_0⋯I_mode)
        post = math.prod(dims[:mode + 1])
        for m in range(mode):
            post //= dims[m]
            y = _leading(xp, y, fts[m], dims[m], post)
        return y
    y = contract_prefix(eng, xs, scale, fts, mode)  # (R, I_mode⋯I_{N−1})
    pre = math.prod(dims[mode:])
    for m in range(n - 1, mode, -1):
        pre //= dims[m]
        y = _trailing(xp, y, fts[m], pre, dims[m])
    return y
