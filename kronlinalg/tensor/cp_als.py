"""parafac: CP decomposition by alternating least squares (TensorLy's ``parafac``), any order.

Each iteration is one dimension-tree sweep (_tree.sweep): two reads of the tensor, GEMMs on
its own layout, no unfolding, no Khatri–Rao product of N−1 factors.  Each factor update solves
the R×R normal equations (the Hadamard product of the other factors' Gram matrices) by an LU
solve with a small ridge; the fit comes from the Gram matrices and the last MTTKRP, so the
only host synchronisation of an iteration is reading its fit."""

from __future__ import annotations

import math
import operator

import array_api_compat

from ..common import backend, validation
from . import _args, _graph, _shard, _tree
from . import scaling as _scaling
from . import solve as _solve
from ._engine import Engine

__all__ = ["parafac", "CPTensor", "GRAPH_MIN_ITERATIONS", "PIPELINE", "SIDE_GRAMS", "SIDE_COPY",
           "LAST_RUN"]


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
            normalize_factors=False, callback=None, verbose=False, precision=None,
            device=None, memory_limit=None):
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

    Shard mode (device="cuda" or a CUDA torch device, tensor on the host: a NumPy array or a
    CPU torch tensor, pinned ideally): the tensor is streamed through the GPU in slabs of mode
    0 (two passes per iteration, copies overlapped with compute), rows that fit
    memory_limit (bytes; default 80 % of the free GPU memory) staying resident; for tensors
    larger than the GPU.  init "random" or (weights, factors); factors come back on the GPU.

    Returns CPTensor(weights, factors)."""
    if device is not None:
        return _sharded(tensor, rank, n_iter_max, init, tol, random_state, normalize_factors,
                        callback, verbose, precision, device, memory_limit)
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


# a CUDA graph of the sweep pays for its capture (one warm-up sweep and the capture) from
# this many iterations on
GRAPH_MIN_ITERATIONS = 4
# with a CUDA graph, queue sweep k + 1 before reading sweep k's fit (two graphs, _graph): the
# GPU does not idle while the host reads the fit, runs the callback and launches the next
# replay; stopping on tol then throws one sweep away
PIPELINE = True
# with prefactored updates (solve.PREFACTOR, CUDA torch): a mode's Gram matrix formed on the
# side stream before the factorization that needs it, not between its update and the next
# tensor pass or contraction (~9 µs each on an H100 at rank 64: a GEMM and its split-K
# reduction) — except the last mode's (the fit needs it next) and, for float16 storage with
# scaling.GRAM_LHS, mode 0's where its update did not write its largest magnitude (the GEMM
# operand's scale is then read from the Gram)
SIDE_GRAMS = True
# in the CUDA graph of a sweep: the copy of the state before it (kept for a rollback) on a
# stream of its own beside the sweep's first launches, not first on its stream (~5 µs of an
# H100 at 640³ rank 64), and the fit's two terms read where the fit kernel wrote them (no
# stacking launch)
SIDE_COPY = True
# how the last parafac call ran its sweeps (for benchmarks and bug reports)
LAST_RUN: dict = {}


def _update(eng, fts, grams, state, n, y, normalize, unit, robust):
    """Solve mode n's normal equations against y (R, I_n), the transposed MTTKRP; store the
    factor, its Gram and (normalize) the weights; keep the last mode's y for the fit.  With
    state["pre"] (a dict: eager or graphed sweeps, not shard mode), mode n's system may have
    been factorized ahead (Engine.prefactor), and mode n + 1's is started here."""
    xp = eng.xp
    others = [g for m, g in enumerate(grams) if m != n]
    pre = state["pre"].pop(n, None) if "pre" in state else None
    if normalize:  # solve for A_n·diag(w), then split off its column norms
        ft = eng.solve_normal(others, y, robust, pre)
        norms = xp.sqrt(xp.sum(ft * ft, axis=1))
        wn = xp.where(norms == 0, xp.ones_like(norms), norms)
        ft = ft / wn[:, None]
        state["w"] = wn
    elif unit:  # weights all ones (the default): no scaling of the system
        ft = eng.solve_normal(others, y, robust, pre)
    else:  # the weights stay as they are (given by init): diag(w) V diag(w) = V ∘ w wᵀ
        wn = state["w"]
        ft = eng.solve_normal(others + [wn[:, None] * wn[None, :]], wn[:, None] * y, robust,
                              pre)
    fts[n] = ft
    last = n == len(fts) - 1
    if last:
        state["last"] = y
    if last and state.get("fit_gram"):  # (formed by the fit kernel: _sweep_once)
        grams[n] = None
        if state.get("sink") is not None:
            state["sink"](n, ft, None, None)
        return
    ahead = not last and "pre" in state and not robust and (unit or normalize)
    g = None
    if ahead and SIDE_GRAMS and not (n == 0 and _scaling.GRAM_LHS and eng.half
                                     and eng.precision == "float16"
                                     and eng.largest_of(ft) is None):
        g = eng.side_gram(ft)
    if g is None:
        g = _gram(eng, ft)
    grams[n] = g
    eng.note_gram(n, ft, g)
    if state.get("sink") is not None:  # (a CUDA graph's copy of the new state, _graph)
        state["sink"](n, ft, g, eng.side_stream())
    if ahead:
        state["pre"][n + 1] = eng.prefactor([g for m, g in enumerate(grams) if m != n + 1])


def _gram(eng, ft):
    """ft·ftᵀ in IEEE float32 (the solves amplify its rounding)."""
    xp = eng.xp
    with eng.exact():
        return xp.matmul(ft, xp.permute_dims(ft, (1, 0)))


def _sweep_once(eng, xs, scale, p, normalize, unit, fts, grams, w, robust, sink=None):
    """One ALS sweep from (factors, their Grams, weights): the new ones and the device scalars
    (‖X̂‖², ⟨X, X̂⟩) of the fit.  Pure on its inputs (new lists), so that a CUDA graph can
    replay it on static buffers; sink(n, factor, gram, side stream or None), if given, is
    called as soon as mode n's new factor and Gram are made (the inputs' mode-n entries are
    not read after that)."""
    fts, grams = list(fts), list(grams)
    r = int(fts[0].shape[0])
    state = {"w": w, "last": None, "pre": {}, "sink": sink,
             "fit_gram": (_solve.FIT_GRAM and _solve.FIT_KERNEL and eng.lib == "torch"
                          and _solve.supported(fts[-1], r, len(fts)))}
    for n, (f, g) in enumerate(zip(fts, grams)):
        eng.note_gram(n, f, g)
    if not robust and (unit or normalize):
        state["pre"][0] = eng.prefactor(grams[1:])
    try:
        _tree.sweep(eng, xs, scale, fts,
                    lambda n, y: _update(eng, fts, grams, state, n, y, normalize, unit, robust),
                    p)
    finally:
        eng.join_side()  # (Grams formed on the side stream: the fit and the caller read them)
        eng.forget_grams()
    if grams[-1] is None:  # (the last mode's Gram from the fit kernel, solve.FIT_GRAM)
        both = _solve.fit_terms(grams[:-1], state["w"], state["last"], fts[-1], last_gram=True)
        if both is None:
            grams[-1] = _gram(eng, fts[-1])
        else:
            rec2, ip, grams[-1] = both
        if sink is not None:
            sink(len(fts) - 1, None, grams[-1], None)
        if both is not None:
            return fts, grams, state["w"], rec2, ip
    rec2, ip = _fit_terms(eng.xp, grams, state["w"], state["last"], fts[-1])
    return fts, grams, state["w"], rec2, ip


def _als(eng, x, weights, fts, n_iter_max, tol, normalize, progress):
    xp = eng.xp
    nd, rank = x.ndim, int(fts[0].shape[0])
    norm_x = eng.norm(x)
    xs, scale = eng.store(x)
    p = _tree.sweep_split(eng, xs, rank)
    with eng.exact():
        grams = [xp.matmul(f, xp.permute_dims(f, (1, 0))) for f in fts]
    unit = bool(xp.all(weights == 1))  # (one read of the device, before the loop)

    def step(fts, grams, w, robust=False, sink=None):
        return _sweep_once(eng, xs, scale, p, normalize, unit, fts, grams, w, robust, sink)

    graph = None
    LAST_RUN.clear()
    LAST_RUN.update(graph=False, reason="eager: not a CUDA torch tensor or few iterations")
    if eng.lib == "torch" and eng.cuda and n_iter_max >= GRAPH_MIN_ITERATIONS:
        graph, reason = _graph.capture(eng, step, fts, grams, weights, PIPELINE, SIDE_COPY)
        LAST_RUN.update(graph=graph is not None, reason=reason)
    LAST_RUN.update(solve_kernel=eng.solver == "kernel" and _solve.supported(fts[0], rank, nd - 1))
    errors, it, robust = [], 0, False
    w = weights
    ahead = 1 if graph is not None and len(graph.graphs) > 1 else 0
    while it < n_iter_max:
        if graph is not None:
            # (pipelined: sweep it + 1 is queued before sweep it's fit is read)
            while graph.launched < min(it + 1 + ahead, n_iter_max):
                graph.launch()
            rec2, ip = graph.result(it)
        else:
            new = step(fts, grams, w, robust)
            rec2, ip = eng.scalars(new[3], new[4])
        err = math.sqrt(abs(norm_x ** 2 + rec2 - 2.0 * ip)) / (norm_x or 1.0)
        if not math.isfinite(err) and not robust:
            # a singular system the ridge did not tame: redo the sweep by pseudo-inverses,
            # eagerly from here on
            if graph is not None:
                fts, grams, w = graph.state_before(it)
                graph = None
            robust = True
            continue
        if graph is None:
            fts, grams, w = new[0], new[1], new[2]
        errors.append(err)
        progress.report(it, 1.0 - err)
        it += 1
        if it >= 2 and abs(errors[-2] - errors[-1]) < tol:
            break
    if graph is not None:  # (it ≥ 1 here: the loop ran and checked sweep it − 1 last)
        fts, grams, w = graph.state_after(it - 1)
    progress.close()
    return w, fts


def _fit_terms(xp, grams, w, y_last, ft_last):
    """Device scalars ‖X̂‖² = wᵀ(∘ Grams)w and ⟨X, X̂⟩ = Σ_r w_r Σ_i M[i, r] A_N[i, r] (M the
    last MTTKRP, of factors unchanged since), summed in float64 (one launch of kernels/tensor's
    fit kernel where solve.fit_terms runs)."""
    both = _solve.fit_terms(grams, w, y_last, ft_last)
    if both is not None:
        return both
    f64 = xp.float64
    w64 = xp.astype(w, f64)
    had = xp.astype(_hadamard(grams), f64)
    rec2 = xp.sum(w64[:, None] * had * w64[None, :])
    ip = xp.sum(xp.sum(xp.astype(y_last * ft_last, f64), axis=1) * w64)
    return rec2, ip


def _sharded(tensor, rank, n_iter_max, init, tol, random_state, normalize, callback, verbose,
             precision, device, memory_limit):
    import torch

    tensor, device, memory_limit = _shard.host_tensor(tensor, device, memory_limit, precision)
    rank = validation.count("rank", rank)
    if rank < 1:
        raise ValueError(f"rank: expected a positive integer, got {rank}")
    n_iter_max, tol = _args.iterations(n_iter_max, tol)
    callback = _args.callback_arg(callback)
    if isinstance(init, str) and init == "svd":
        raise ValueError("init: shard mode starts from 'random' or (weights, factors) (an SVD "
                         "initialisation needs cross-slab products)")
    like = torch.empty((), dtype=tensor.dtype, device=device)
    xp = array_api_compat.array_namespace(like)
    dims = [int(d) for d in tensor.shape]
    if isinstance(init, str) and init == "random":
        rng = _args.generator(random_state)
        fts = [_args.random(xp, rng, (d, rank), like) for d in dims]
        weights = xp.ones((rank,), dtype=like.dtype, device=device)
    elif isinstance(init, str):
        raise ValueError(f"init: expected 'random' or (weights, factors), got {init!r}")
    else:
        w0, f0 = _args.cp("init", init)
        if len(f0) != len(dims) or any(tuple(f.shape) != (d, rank) for f, d in zip(f0, dims)):
            raise ValueError(f"init: expected {len(dims)} factors of shapes (I_n, {rank})")
        fts = [torch.as_tensor(f).to(device, tensor.dtype) for f in f0]
        weights = (torch.ones(rank, dtype=tensor.dtype, device=device) if w0 is None
                   else torch.as_tensor(w0).to(device, tensor.dtype))
    fts = [f.T.contiguous() for f in fts]
    unit = bool(xp.all(weights == 1))

    def solve_update(eng, fts_, grams, state, n, y):
        _update(eng, fts_, grams, state, n, y, normalize, unit, False)

    w, fts, facts = _shard.als(tensor, fts, weights, rank, device, memory_limit, n_iter_max,
                               tol, precision or "tf32",
                               _args.Progress("parafac", verbose, n_iter_max, callback),
                               _fit_terms, solve_update)
    LAST_RUN.clear()
    LAST_RUN.update(graph=False, reason="shard mode", **facts)
    return CPTensor(w, [f.T.contiguous() for f in fts])
