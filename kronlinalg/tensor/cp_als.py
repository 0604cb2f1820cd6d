"""parafac: CP decomposition by alternating least squares (TensorLy's ``parafac``), any order.

Each iteration is one dimension-tree sweep (_tree.sweep): two reads of the tensor, GEMMs on
its own layout, no unfolding, no Khatri–Rao product of N−1 factors.  Each factor update solves
the R×R normal equations (the Hadamard product of the other factors' Gram matrices) by an LU
solve with a small ridge; the fit comes from the Gram matrices and the last MTTKRP, so the
only host synchronisation of an iteration is reading its fit."""

from __future__ import annotations

import math
import operator

from ..common import backend, validation
from . import _args, _tree
from ._engine import Engine

__all__ = ["parafac", "CPTensor"]


class CPTensor(tuple):
    """(weights, factors), as TensorLy's CPTensor unpacks."""

    __slots__ = ()

    def __new__(cls, weights, factors):
        return tuple.__new__(cls, (weights, list(factors)))

    weights = property(operator.itemgetter(0))
    factors = property(operator.itemgetter(1))


def _initial(eng, x, rank, init, random_state):
    """(weights, rank-first factors Fᵀ (R, I_n)) to start from."""
    xp, dims = eng.xp, [int(d) for d in x.shape]
    weights = xp.ones((rank,), dtype=x.dtype, device=eng.device)
    if isinstance(init, str) and init == "svd":
        rng = _args.generator(random_state)
        fts = []
        for n, d in enumerate(dims):
            u = eng.top_eigvecs(eng.gram(x, n), min(rank, d))
            if d < rank:  # (TensorLy also fills the columns beyond a mode's size at random)
                u = xp.concat([u, _args.random(xp, rng, (d, rank - d), x)], axis=1)
            fts.append(u)
    elif isinstance(init, str) and init == "random":
        rng = _args.generator(random_state)
        fts = [_args.random(xp, rng, (d, rank), x) for d in dims]
    elif isinstance(init, str):
        raise ValueError(f"init: expected 'svd', 'random' or (weights, factors), got {init!r}")
    else:
        w0, f0 = _args.cp("init", init)
        if len(f0) != len(dims) or any(tuple(f.shape) != (d, rank) for f, d in zip(f0, dims)):
            raise ValueError(f"init: expected {len(dims)} factors of shapes (I_n, {rank}), got "
                             f"{[tuple(f.shape) for f in f0]}")
        _args.check({"tensor": x, **{f"init.factors[{i}]": f for i, f in enumerate(f0)}})
        fts = [_args.cast(xp, f, x.dtype) for f in f0]
        if w0 is not None:
            weights = _args.cast(xp, w0, x.dtype)
    return weights, [backend.contiguous(xp.permute_dims(f, (1, 0))) for f in fts]


def parafac(tensor, rank, *, n_iter_max=100, init="svd", tol=1e-8, random_state=None,
            normalize_factors=False, callback=None, verbose=False, precision=None):
    """CP decomposition by alternating least squares (TensorLy's ``parafac``), any order.

    Each factor update solves the R×R normal equations (the Hadamard product of the other
    factors' Gram matrices) against the MTTKRP; the fit 1 − ‖X − X̂‖/‖X‖ is computed from the
    Gram matrices and the last MTTKRP, never forming X̂.  Stops when the error decreases by less
    than tol.  init: "svd" (leading eigenvectors of X₍ₙ₎X₍ₙ₎ᵀ, random columns beyond a mode's
    size), "random", or (weights, factors).  callback(iteration, fit) after each iteration;
    verbose prints the fit (a tqdm bar when tqdm is installed).

    precision (float32 on CUDA; float64 always computes in float64): "tf32" (default: the
    GEMMs over the tensor on TF32 tensor cores, fit within ~1e-3 of IEEE float32's), "ieee",
    or "float16"/"bfloat16": the tensor stored in that type scaled by its largest magnitude
    (half the bytes per pass; float32 accumulation, solves in float32).

    Returns CPTensor(weights, factors)."""
    xp, x = _args.tensor_arg(tensor)
    rank = validation.count("rank", rank)
    if rank < 1:
        raise ValueError(f"rank: expected a positive integer, got {rank}")
    n_iter_max, tol = _args.iterations(n_iter_max, tol)
    callback = _args.callback_arg(callback)
    eng = Engine(xp, x, _args.precision(precision, x))
    with eng.fast():
        weights, fts = _initial(eng, x, rank, init, random_state)
        weights, fts = _als(eng, x, weights, fts, n_iter_max, tol, normalize_factors,
                            _args.Progress("parafac", verbose, n_iter_max, callback))
    return CPTensor(weights, [backend.contiguous(xp.permute_dims(f, (1, 0))) for f in fts])


def _hadamard(grams, skip=None):
    out = None
    for m, g in enumerate(grams):
        if m != skip:
            out = g if out is None else out * g
    return out


def _als(eng, x, weights, fts, n_iter_max, tol, normalize, progress):
    xp = eng.xp
    nd, rank = x.ndim, int(fts[0].shape[0])
    norm_x = eng.norm(x)
    xs, scale = eng.store(x)
    p = _tree.split([int(d) for d in x.shape], rank)
    grams = [xp.matmul(f, xp.permute_dims(f, (1, 0))) for f in fts]
    state = {"w": weights, "last": None, "robust": False}
    # weights that are all ones (the default) need no scaling of the systems: skip it
    unit = bool(xp.all(weights == 1))

    def update(n, y):
        v = _hadamard(grams, skip=n)
        if normalize:  # solve for A_n·diag(w), then split off its column norms
            ft = eng.solve_spd(v, y, state["robust"])
            norms = xp.sqrt(xp.sum(ft * ft, axis=1))
            w = xp.where(norms == 0, xp.ones_like(norms), norms)
            ft = ft / w[:, None]
            state["w"] = w
        elif unit:
            ft = eng.solve_spd(v, y, state["robust"])
        else:  # the weights stay as they are (given by init)
            w = state["w"]
            ft = eng.solve_spd(w[:, None] * v * w[None, :], w[:, None] * y, state["robust"])
        fts[n] = ft
        grams[n] = xp.matmul(ft, xp.permute_dims(ft, (1, 0)))
        if n == nd - 1:
            state["last"] = y

    errors = []
    it = 0
    while it < n_iter_max:
        saved = (list(fts), list(grams), state["w"])
        _tree.sweep(eng, xs, scale, fts, update, p)
        err = _error(eng, norm_x, grams, state["w"], state["last"], fts[nd - 1])
        if not math.isfinite(err) and not state["robust"]:
            # a singular system the ridge did not tame: redo the sweep by pseudo-inverses
            fts[:], grams[:], state["w"] = saved[0], saved[1], saved[2]
            state["robust"] = True
            continue
        errors.append(err)
        progress.report(it, 1.0 - err)
        it += 1
        if it >= 2 and abs(errors[-2] - errors[-1]) < tol:
            break
    progress.close()
    return state["w"], fts


def _error(eng, norm_x, grams, w, y_last, ft_last):
    """‖X − X̂‖/‖X‖ from ‖X̂‖² = wᵀ(∘ Grams)w and ⟨X, X̂⟩ = Σ_r w_r Σ_i M[i, r] A_N[i, r] (M the
    last MTTKRP, of factors unchanged since), summed in float64; one read of the device."""
    xp = eng.xp
    f64 = xp.float64
    w64 = xp.astype(w, f64)
    had = xp.astype(_hadamard(grams), f64)
    rec2 = xp.sum(w64[:, None] * had * w64[None, :])
    ip = xp.sum(xp.sum(xp.astype(y_last * ft_last, f64), axis=1) * w64)
    rec2, ip = eng.scalars(rec2, ip)
    return math.sqrt(abs(norm_x ** 2 + rec2 - 2.0 * ip)) / (norm_x or 1.0)
