"""kronlinalg.tensor: TensorLy's tensor primitives and decompositions on any array-API library.

Names, argument order and semantics follow TensorLy (``tensorly.tenalg`` / ``tensorly``), so
switching is a one-line change.  This first version computes through the array library's own
contractions (tensordot, matmul) — on NumPy, array-api-strict, torch, CuPy alike — with no
dedicated kernels yet.  No unfolding of the tensor is ever formed explicitly: mode products
contract the tensor in its own layout, and MTTKRP contracts it with one factor at a time, so the
Khatri–Rao product is never held in memory.

``multi_mode_dot`` is an operation of the skeleton (kronlinalg._operation): "sequential" (mode
products one by one) or, for a product over every mode, "kron" (kron_matmul's best algorithm,
reached through the planner's registry).  The decompositions (``parafac``: CP-ALS; ``tucker``:
HOSVD + HOOI) are built from these primitives, further down this module.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import array_api_compat

from . import planner
from ._operation import Algorithm, Call, Operation
from .common import backend, validation
from .planner.costs import tensor as costs

__all__ = ["khatri_rao", "mode_dot", "multi_mode_dot", "unfolding_dot_khatri_rao", "mttkrp",
           "cp_to_tensor", "tucker_to_tensor", "MULTI_MODE_DOT"]


# ---------------------------------------------------------------------------------------------
# argument checks


def _matrices(name, matrices, *, allow_vectors=False):
    if (isinstance(matrices, (str, bytes)) or not hasattr(matrices, "__len__")
            or hasattr(matrices, "shape")):
        raise TypeError(f"{name}: expected a sequence of arrays, got {type(matrices).__name__}")
    matrices = list(matrices)
    if not matrices:
        raise ValueError(f"{name}: expected a non-empty sequence of arrays, got none")
    return matrices


def _check(named: dict):
    """(namespace, result dtype) of the named arrays: one library, one device, real floats."""
    xp, dt = validation.floating_arrays(named)
    return xp, getattr(xp, dt) if hasattr(xp, dt) else None


def _mode(name, mode, ndim):
    mode = validation.count(name, mode)
    if not -ndim <= mode < ndim:
        raise ValueError(f"{name}: mode {mode} is out of range for a tensor of {ndim} dimensions")
    return mode % ndim


def _cast(xp, a, dtype):
    return a if dtype is None or a.dtype == dtype else xp.astype(a, dtype)


def _cp(name, cp_tensor):
    """(weights or None, factors) of a CP tensor given as (weights, factors) or a CPTensor."""
    if (isinstance(cp_tensor, (str, bytes)) or not hasattr(cp_tensor, "__len__")
            or len(cp_tensor) != 2):
        raise TypeError(f"{name}: expected (weights, factors), got {type(cp_tensor).__name__}")
    weights, factors = cp_tensor
    factors = _matrices(f"{name}.factors", factors)
    return weights, factors


# ---------------------------------------------------------------------------------------------
# primitives


def khatri_rao(matrices, /, *, skip=None, weights=None):
    """Column-wise Kronecker product of matrices (I_k × R) → (prod I_k × R), the first matrix's
    index varying slowest (TensorLy's order).  skip: index of a matrix to leave out; weights:
    a length-R vector multiplying the columns."""
    matrices = _matrices("matrices", matrices)
    named = {f"matrices[{i}]": m for i, m in enumerate(matrices)}
    if weights is not None:
        named["weights"] = weights
    xp, dt = _check(named)
    for i, m in enumerate(matrices):
        if m.ndim != 2:
            raise ValueError(f"matrices[{i}]: expected a 2-D array, got shape {tuple(m.shape)}")
    r = int(matrices[0].shape[1])
    for i, m in enumerate(matrices):
        if int(m.shape[1]) != r:
            raise ValueError(f"matrices[{i}]: has {m.shape[1]} columns, matrices[0] has {r}; "
                             "all must have the same number of columns")
    if skip is not None:
        skip = _mode("skip", skip, len(matrices))
        matrices = [m for i, m in enumerate(matrices) if i != skip]
        if not matrices:
            raise ValueError("skip: no matrix left once it is skipped")
    res = _cast(xp, matrices[0], dt)
    if weights is not None:
        if weights.ndim != 1 or int(weights.shape[0]) != r:
            raise ValueError(f"weights: expected shape ({r},), got {tuple(weights.shape)}")
        res = res * _cast(xp, weights, dt)[None, :]
    for m in matrices[1:]:
        m = _cast(xp, m, dt)
        res = xp.reshape(res[:, None, :] * m[None, :, :], (-1, r))
    return res


def _mode_dot(xp, tensor, m, mode, transpose):
    """tensor ×_mode m (m: (J, I), or (I, J) with transpose, or a vector (I,))."""
    if m.ndim == 1:
        return xp.tensordot(tensor, m, axes=([mode], [0]))
    out = xp.tensordot(m, tensor, axes=([0 if transpose else 1], [mode]))  # (J, other modes)
    nd = tensor.ndim
    perm = list(range(1, mode + 1)) + [0] + list(range(mode + 1, nd))
    return xp.permute_dims(out, tuple(perm))


def mode_dot(tensor, matrix_or_vector, /, mode, transpose=False):
    """n-mode product: tensor ×_mode M, M of shape (J, I_mode) (or (I_mode, J) with
    transpose=True); a vector of length I_mode removes the mode (TensorLy's semantics)."""
    xp, dt = _check({"tensor": tensor, "matrix_or_vector": matrix_or_vector})
    if tensor.ndim == 0:
        raise ValueError("tensor: expected at least 1 dimension, got a 0-D array")
    mode = _mode("mode", mode, tensor.ndim)
    m = matrix_or_vector
    if m.ndim not in (1, 2):
        raise ValueError(f"matrix_or_vector: expected a 1-D or 2-D array, got shape "
                         f"{tuple(m.shape)}")
    k = int(m.shape[0] if (m.ndim == 1 or transpose) else m.shape[1])
    if k != int(tensor.shape[mode]):
        raise ValueError(f"matrix_or_vector: its contracted dimension ({k}) must equal the "
                         f"tensor's mode-{mode} size ({tensor.shape[mode]}); shapes "
                         f"{tuple(tensor.shape)} and {tuple(m.shape)}")
    return _mode_dot(xp, _cast(xp, tensor, dt), _cast(xp, m, dt), mode, bool(transpose))


@dataclass
class _MMCall(Call):
    tensor: object = None
    mats: list = None  # applied in order, each (J, I) or a vector
    modes: tuple = ()  # the original mode each contracts (ascending)
    out_shape: tuple = ()
    dtype: object = None


def _mm_prepare(tensor, matrices, /, *, modes=None, skip=None, transpose=False):
    matrices = _matrices("matrices", matrices)
    named = {"tensor": tensor, **{f"matrices[{i}]": m for i, m in enumerate(matrices)}}
    xp, dt = _check(named)
    nd = tensor.ndim
    if nd == 0:
        raise ValueError("tensor: expected at least 1 dimension, got a 0-D array")
    if modes is None:
        modes = list(range(len(matrices)))
    else:
        if isinstance(modes, (str, bytes)) or not hasattr(modes, "__len__"):
            raise TypeError(f"modes: expected a sequence of integers, got {modes!r}")
        modes = [_mode(f"modes[{i}]", v, nd) for i, v in enumerate(modes)]
    if len(modes) != len(matrices):
        raise ValueError(f"modes: {len(modes)} modes for {len(matrices)} matrices")
    for i, v in enumerate(modes):
        if not 0 <= v < nd:
            raise ValueError(f"modes[{i}]: mode {v} is out of range for a tensor of {nd} "
                             "dimensions")
    if len(set(modes)) != len(modes):
        raise ValueError(f"modes: each mode at most once, got {list(modes)}")
    # TensorLy sorts by mode, then skips the skip-th of that order
    pairs = sorted(zip(range(len(matrices)), modes), key=lambda p: p[1])
    if skip is not None:
        skip = validation.count("skip", skip)
        pairs = [p for k, p in enumerate(pairs) if k != skip]
    mats, used = [], []
    cur = list(tensor.shape)
    dec = 0
    for i, mode in pairs:
        m = matrices[i]
        if m.ndim not in (1, 2):
            raise ValueError(f"matrices[{i}]: expected a 1-D or 2-D array, got shape "
                             f"{tuple(m.shape)}")
        m = _cast(xp, m, dt)
        if m.ndim == 2 and transpose:
            m = xp.permute_dims(m, (1, 0))
        if int(m.shape[-1]) != int(tensor.shape[mode]):
            raise ValueError(f"matrices[{i}]: its contracted dimension ({m.shape[-1]}) must "
                             f"equal the tensor's mode-{mode} size ({tensor.shape[mode]})")
        if m.ndim == 2:
            cur[mode - dec] = int(m.shape[0])
        else:
            del cur[mode - dec]
            dec += 1
        mats.append(m)
        used.append(mode)
    empty = not mats or 0 in tuple(tensor.shape) or any(0 in tuple(m.shape) for m in mats)
    return _MMCall(xp, tensor, (tensor, *mats), empty, _cast(xp, tensor, dt), mats,
                   tuple(used), tuple(cur), dt)


def _mm_plan_query(call):
    shapes = (tuple(call.tensor.shape),) + tuple(tuple(m.shape) for m in call.mats)
    dtype = backend.dtype_name(call.tensor.dtype)
    return shapes, ("float32" if dtype in ("float16", "bfloat16") else dtype), {"modes": call.modes}


def _mm_empty(call):
    xp = call.xp
    if not call.mats:
        return call.tensor
    if 0 in call.out_shape:
        return xp.zeros(call.out_shape, dtype=call.tensor.dtype,
                        device=array_api_compat.device(call.tensor))
    return _sequential(call)  # a zero-length contraction: tensordot gives the zeros


def _sequential(call):
    xp, res, dec = call.xp, call.tensor, 0
    for m, mode in zip(call.mats, call.modes):
        res = _mode_dot(xp, res, m, mode - dec, False)
        if m.ndim == 1:
            dec += 1
    return res


def _kron(call):
    """A product over every mode: vec(Y) = vec(X) @ (A1ᵀ ⊗ … ⊗ ANᵀ), by kron_matmul's best
    algorithm (found through the planner's registry: no import of the operation)."""
    xp, x = call.xp, call.tensor
    kind = backend.kind(x)
    shapes, dtype, _ = _mm_plan_query(call)
    info = costs.normalise(shapes, {"modes": call.modes})
    best = planner.plan("kron_matmul", *costs.kron_shapes(info), dtype=dtype, device=x)[0].name
    for cand in planner.candidates("kron_matmul", kind):
        if cand.name == best:
            flat = xp.reshape(x, (math.prod(x.shape),))
            out = cand.run(flat, [xp.permute_dims(m, (1, 0)) for m in call.mats])
            return xp.reshape(out, call.out_shape)
    return _sequential(call)


def _kron_applies(problem):
    if not problem.info["full"] or problem.dtype not in ("float32", "float64"):
        return False
    try:
        return any(True for _ in planner.candidates("kron_matmul", problem.kind))
    except ValueError:
        return False


MULTI_MODE_DOT = Operation(
    "multi_mode_dot", prepare=_mm_prepare, plan_query=_mm_plan_query, normalise=costs.normalise,
    empty=_mm_empty, grad_algorithm="sequential", options=("modes",),
    doc="tensor ×_n A_n over several modes; shapes: tensor, then each A_n as applied (J, I)")
for _k in ("cpu", "cuda"):
    MULTI_MODE_DOT.register(Algorithm(
        "sequential", _sequential, costs.predict_sequential, devices=(_k,),
        autograd=("autograd", "transform"),
        doc="one mode product at a time through the array library's tensordot"))
    MULTI_MODE_DOT.register(Algorithm(
        "kron", _kron, costs.predict_kron, devices=(_k,), applies=_kron_applies,
        doc="a product over every mode as x @ (A1ᵀ ⊗ … ⊗ ANᵀ) by kron_matmul"))


def multi_mode_dot(tensor, matrices, /, modes=None, skip=None, transpose=False, *,
                   algorithm="auto"):
    """tensor ×_{modes[0]} matrices[0] ×_{modes[1]} matrices[1] …  (TensorLy's semantics:
    modes defaults to 0, 1, …; skip is the index, in the order sorted by mode, of a matrix to
    leave out; transpose=True applies each matrix's transpose; vectors remove their mode).
    algorithm: "auto" (the planner), "sequential" or "kron" (only for a product of matrices
    over every mode)."""
    return MULTI_MODE_DOT(tensor, matrices, modes=modes, skip=skip, transpose=transpose,
                          algorithm=algorithm)


def _mttkrp(xp, tensor, factors, mode):
    """Σ over the other modes of X[i_1..i_N] Π_{m≠mode} A_m[i_m, r]: contract one factor at a
    time (the largest mode first), keeping the rank index as a batch axis."""
    nd = tensor.ndim
    r = int(factors[0].shape[1])
    others = sorted((m for m in range(nd) if m != mode), key=lambda m: -int(tensor.shape[m]))
    if not others:
        return xp.reshape(tensor, (-1, 1)) * xp.ones((1, r), dtype=tensor.dtype,
                                                     device=array_api_compat.device(tensor))
    m0 = others[0]
    t = xp.tensordot(factors[m0], tensor, axes=([0], [m0]))  # (R, remaining modes)
    left = [m for m in range(nd) if m != m0]
    for m in others[1:]:
        p = left.index(m) + 1
        perm = [0] + [i for i in range(1, t.ndim) if i != p] + [p]
        rest = tuple(int(t.shape[i]) for i in perm[1:-1])
        tp = xp.reshape(xp.permute_dims(t, tuple(perm)), (r, math.prod(rest), int(t.shape[p])))
        a = xp.reshape(xp.permute_dims(factors[m], (1, 0)), (r, int(t.shape[p]), 1))
        t = xp.reshape(xp.matmul(tp, a), (r,) + rest)
        left.remove(m)
    return xp.permute_dims(t, (1, 0))  # (I_mode, R)


def unfolding_dot_khatri_rao(tensor, cp_tensor, /, mode):
    """MTTKRP: unfold(tensor, mode) @ khatri_rao(factors, weights=weights, skip=mode), computed
    without the unfolding or the Khatri–Rao product.  cp_tensor: (weights or None, factors)."""
    weights, factors = _cp("cp_tensor", cp_tensor)
    named = {"tensor": tensor, **{f"cp_tensor.factors[{i}]": f for i, f in enumerate(factors)}}
    if weights is not None:
        named["cp_tensor.weights"] = weights
    xp, dt = _check(named)
    nd = tensor.ndim
    if nd == 0:
        raise ValueError("tensor: expected at least 1 dimension, got a 0-D array")
    if len(factors) != nd:
        raise ValueError(f"cp_tensor: {len(factors)} factors for a tensor of {nd} dimensions")
    mode = _mode("mode", mode, nd)
    r = None
    for i, f in enumerate(factors):
        if f.ndim != 2 or int(f.shape[0]) != int(tensor.shape[i]):
            raise ValueError(f"cp_tensor.factors[{i}]: expected shape ({tensor.shape[i]}, R), "
                             f"got {tuple(f.shape)}")
        r = int(f.shape[1]) if r is None else r
        if int(f.shape[1]) != r:
            raise ValueError(f"cp_tensor.factors[{i}]: {f.shape[1]} columns, factors[0] has {r}")
    factors = [_cast(xp, f, dt) for f in factors]
    out = _mttkrp(xp, _cast(xp, tensor, dt), factors, mode)
    if weights is not None:
        if weights.ndim != 1 or int(weights.shape[0]) != r:
            raise ValueError(f"cp_tensor.weights: expected shape ({r},), got "
                             f"{tuple(weights.shape)}")
        out = out * _cast(xp, weights, dt)[None, :]
    return out


mttkrp = unfolding_dot_khatri_rao


def cp_to_tensor(cp_tensor, /):
    """The full tensor Σ_r w_r a_1r ∘ … ∘ a_Nr of a CP tensor (weights or None, factors)."""
    weights, factors = _cp("cp_tensor", cp_tensor)
    named = {f"cp_tensor.factors[{i}]": f for i, f in enumerate(factors)}
    if weights is not None:
        named["cp_tensor.weights"] = weights
    xp, dt = _check(named)
    head = khatri_rao(factors[:-1], weights=weights) if len(factors) > 1 else None
    last = _cast(xp, factors[-1], dt)
    if head is None:
        if weights is not None:
            last = last * _cast(xp, weights, dt)[None, :]
        return xp.sum(last, axis=1)
    shape = tuple(int(f.shape[0]) for f in factors)
    return xp.reshape(xp.matmul(head, xp.permute_dims(last, (1, 0))), shape)


def tucker_to_tensor(tucker_tensor, /, skip_factor=None, transpose_factors=False):
    """The full tensor core ×_1 U_1 … ×_N U_N of a Tucker tensor (core, factors)."""
    if (isinstance(tucker_tensor, (str, bytes)) or not hasattr(tucker_tensor, "__len__")
            or len(tucker_tensor) != 2):
        raise TypeError(f"tucker_tensor: expected (core, factors), got "
                        f"{type(tucker_tensor).__name__}")
    core, factors = tucker_tensor
    return multi_mode_dot(core, factors, skip=skip_factor, transpose=transpose_factors)


# ---------------------------------------------------------------------------------------------
# decompositions: CP-ALS (parafac) and HOSVD + HOOI (tucker)


class CPTensor(tuple):
    """(weights, factors), as TensorLy's CPTensor unpacks."""

    __slots__ = ()

    def __new__(cls, weights, factors):
        return tuple.__new__(cls, (weights, list(factors)))

    weights = property(operator.itemgetter(0))
    factors = property(operator.itemgetter(1))


class TuckerTensor(tuple):
    """(core, factors), as TensorLy's TuckerTensor unpacks."""

    __slots__ = ()

    def __new__(cls, core, factors):
        return tuple.__new__(cls, (core, list(factors)))

    core = property(operator.itemgetter(0))
    factors = property(operator.itemgetter(1))


__all__ += ["parafac", "tucker", "CPTensor", "TuckerTensor"]


def _generator(random_state):
    import numpy as np

    if random_state is None or isinstance(random_state, (int, np.integer)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, (np.random.Generator, np.random.RandomState)):
        return random_state
    raise TypeError(f"random_state: expected None, an int or a NumPy generator, got "
                    f"{type(random_state).__name__}")


def _random(xp, rng, shape, like):
    import numpy as np

    vals = (rng.random_sample(shape) if isinstance(rng, np.random.RandomState)
            else rng.random(shape))
    return xp.asarray(vals, dtype=like.dtype, device=array_api_compat.device(like))


def _gram(xp, t, mode):
    """t₍mode₎ t₍mode₎ᵀ, contracting t with itself over the other modes (no unfolding)."""
    others = [m for m in range(t.ndim) if m != mode]
    return xp.tensordot(t, t, axes=(others, others))


def _top_eigvecs(xp, gram, k):
    """The k leading eigenvectors of a symmetric matrix (columns, by decreasing eigenvalue)."""
    _, vecs = xp.linalg.eigh(gram)
    return xp.flip(vecs, axis=1)[:, :k]


def _norm(xp, a):
    return float(xp.sqrt(xp.sum(a * a)))


def _progress(verbose, n):
    if not verbose:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=n, desc="fit")


def _report(bar, verbose, name, iteration, fit):
    if bar is not None:
        bar.set_postfix(fit=f"{fit:.6f}")
        bar.update(1)
    elif verbose:
        print(f"{name} iteration {iteration}: fit {fit:.8f}")


def _tensor_arg(tensor):
    xp, dt = _check({"tensor": tensor})
    if tensor.ndim < 2:
        raise ValueError(f"tensor: expected at least 2 dimensions, got shape {tuple(tensor.shape)}")
    return xp, _cast(xp, tensor, dt)


def _iters(n_iter_max, tol):
    n = validation.count("n_iter_max", n_iter_max)
    if n < 0:
        raise ValueError(f"n_iter_max: expected a non-negative integer, got {n}")
    tol = validation.scalar("tol", tol)
    if not tol >= 0:
        raise ValueError(f"tol: expected a non-negative number, got {tol}")
    return n, tol


def _solve_spd(xp, v, rhs):
    """v⁻¹ rhs for a symmetric positive semi-definite v: LU solve with a tiny ridge (relative
    to v's diagonal) so that a singular v (rank above a mode's size) stays finite; a
    pseudo-inverse if that still fails."""
    r = int(v.shape[0])
    eye = xp.eye(r, dtype=v.dtype, device=array_api_compat.device(v))
    scale = float(xp.max(xp.abs(xp.linalg.diagonal(v)))) if r else 0.0
    eps = 1e-14 if v.dtype == xp.float64 else 1e-6
    ridge = eps * (scale if scale > 0 else 1.0)
    try:
        out = xp.linalg.solve(v + ridge * eye, rhs)
        if bool(xp.all(xp.isfinite(out))):
            return out
    except Exception:  # noqa: BLE001  (a library's LinAlgError / RuntimeError)
        pass
    return xp.linalg.pinv(v) @ rhs


def parafac(tensor, rank, *, n_iter_max=100, init="svd", tol=1e-8, random_state=None,
            normalize_factors=False, callback=None, verbose=False):
    """CP decomposition by alternating least squares (TensorLy's ``parafac``), any order.

    Each factor update solves the R×R normal equations (the Hadamard product of the other
    factors' Gram matrices) against the MTTKRP; the fit 1 − ‖X − X̂‖/‖X‖ is computed from the
    Gram matrices and the last MTTKRP, never forming X̂.  Stops when the error decreases by less
    than tol.  init: "svd" (leading eigenvectors of X₍ₙ₎X₍ₙ₎ᵀ, random columns beyond a mode's
    size), "random", or (weights, factors).  callback(iteration, fit) after each iteration;
    verbose prints the fit (a tqdm bar when tqdm is installed).  Returns CPTensor(weights,
    factors)."""
    xp, x = _tensor_arg(tensor)
    rank = validation.count("rank", rank)
    if rank < 1:
        raise ValueError(f"rank: expected a positive integer, got {rank}")
    n_iter_max, tol = _iters(n_iter_max, tol)
    if callback is not None and not callable(callback):
        raise TypeError("callback: expected a callable callback(iteration, fit)")
    rng = _generator(random_state)
    nd, dims = x.ndim, [int(d) for d in x.shape]
    dev = array_api_compat.device(x)
    weights = xp.ones((rank,), dtype=x.dtype, device=dev)
    if isinstance(init, str) and init == "svd":
        factors = []
        for n in range(nd):
            u = _top_eigvecs(xp, _gram(xp, x, n), min(rank, dims[n]))
            if dims[n] < rank:
                u = xp.concat([u, _random(xp, rng, (dims[n], rank - dims[n]), x)], axis=1)
            factors.append(u)
    elif isinstance(init, str) and init == "random":
        factors = [_random(xp, rng, (d, rank), x) for d in dims]
    elif isinstance(init, str):
        raise ValueError(f"init: expected 'svd', 'random' or (weights, factors), got {init!r}")
    else:
        w0, f0 = _cp("init", init)
        if len(f0) != nd or any(tuple(f.shape) != (d, rank) for f, d in zip(f0, dims)):
            raise ValueError(f"init: expected {nd} factors of shapes (I_n, {rank}), got "
                             f"{[tuple(f.shape) for f in f0]}")
        factors = [_cast(xp, f, x.dtype) for f in f0]
        if w0 is not None:
            weights = _cast(xp, w0, x.dtype)
    norm_x = _norm(xp, x)
    grams = [f.T @ f for f in factors]
    errors = []
    bar = _progress(verbose, n_iter_max)
    for it in range(n_iter_max):
        for n in range(nd):
            v = None
            for m in range(nd):
                if m != n:
                    v = grams[m] if v is None else v * grams[m]
            mk_raw = _mttkrp(xp, x, factors, n)
            if normalize_factors:  # solve for A_n·diag(w), then split off its column norms
                f = _solve_spd(xp, v, mk_raw.T).T
                scales = xp.sqrt(xp.sum(f * f, axis=0))
                weights = xp.where(scales == 0, xp.ones_like(scales), scales)
                f = f / weights[None, :]
            else:  # the weights stay as they are (ones unless init gave them)
                v = weights[:, None] * v * weights[None, :]
                f = _solve_spd(xp, v, (mk_raw * weights[None, :]).T).T
            factors[n] = f
            grams[n] = f.T @ f
        # ‖X̂‖² = wᵀ(∘ Grams)w; ⟨X, X̂⟩ = Σ_r w_r Σ_i M[i, r] A_N[i, r] (M: the last MTTKRP,
        # of the other factors, which have not changed since)
        had = grams[0]
        for g in grams[1:]:
            had = had * g
        norm_rec2 = float(xp.sum(weights[:, None] * had * weights[None, :]))
        iprod = float(xp.sum(xp.sum(mk_raw * factors[nd - 1], axis=0) * weights))
        err = math.sqrt(abs(norm_x ** 2 + norm_rec2 - 2 * iprod)) / (norm_x or 1.0)
        errors.append(err)
        fit = 1.0 - err
        _report(bar, verbose, "parafac", it, fit)
        if callback is not None:
            callback(it, fit)
        if it >= 1 and abs(errors[-2] - errors[-1]) < tol:
            break
    if bar is not None:
        bar.close()
    return CPTensor(weights, factors)


def _tucker_ranks(rank, dims):
    if isinstance(rank, (list, tuple)):
        if len(rank) != len(dims):
            raise ValueError(f"rank: {len(rank)} ranks for a tensor of {len(dims)} dimensions")
        ranks = [validation.count(f"rank[{i}]", r) for i, r in enumerate(rank)]
    else:
        ranks = [validation.count("rank", rank)] * len(dims)
    if any(r < 1 for r in ranks):
        raise ValueError(f"rank: expected positive integers, got {rank!r}")
    return [min(r, d) for r, d in zip(ranks, dims)]


def tucker(tensor, rank, *, n_iter_max=100, init="svd", tol=1e-4, random_state=None,
           callback=None, verbose=False):
    """Tucker decomposition (TensorLy's ``tucker``): HOSVD from the leading eigenvectors of the
    mode Gram matrices X₍ₙ₎X₍ₙ₎ᵀ (formed by contracting X with itself, no unfolding, no SVD of
    one), then HOOI iterations until the relative error changes by less than tol.  rank: an int
    (every mode) or one per mode, capped at the mode sizes.  init: "svd", "random" or
    (core, factors).  Returns TuckerTensor(core, factors) with orthonormal factors."""
    xp, x = _tensor_arg(tensor)
    dims = [int(d) for d in x.shape]
    ranks = _tucker_ranks(rank, dims)
    n_iter_max, tol = _iters(n_iter_max, tol)
    if callback is not None and not callable(callback):
        raise TypeError("callback: expected a callable callback(iteration, fit)")
    nd = x.ndim
    if isinstance(init, str) and init == "svd":
        factors = [_top_eigvecs(xp, _gram(xp, x, n), ranks[n]) for n in range(nd)]
    elif isinstance(init, str) and init == "random":
        rng = _generator(random_state)
        factors = [xp.linalg.qr(_random(xp, rng, (d, r), x))[0] for d, r in zip(dims, ranks)]
    elif isinstance(init, str):
        raise ValueError(f"init: expected 'svd', 'random' or (core, factors), got {init!r}")
    else:
        if (isinstance(init, (bytes,)) or not hasattr(init, "__len__") or len(init) != 2):
            raise TypeError("init: expected 'svd', 'random' or (core, factors)")
        factors = [_cast(xp, f, x.dtype) for f in init[1]]
        if len(factors) != nd or any(tuple(f.shape) != (d, r)
                                     for f, d, r in zip(factors, dims, ranks)):
            raise ValueError(f"init: expected factors of shapes {list(zip(dims, ranks))}")
    norm_x = _norm(xp, x)
    bar = _progress(verbose, n_iter_max)
    errors = []
    core = None
    for it in range(n_iter_max):
        for n in range(nd):
            others = [m for m in range(nd) if m != n]
            y = multi_mode_dot(x, [factors[m] for m in others], modes=others, transpose=True)
            factors[n] = _top_eigvecs(xp, _gram(xp, y, n), ranks[n])
        core = mode_dot(y, factors[nd - 1], nd - 1, transpose=True)
        err = math.sqrt(abs(norm_x ** 2 - _norm(xp, core) ** 2)) / (norm_x or 1.0)
        errors.append(err)
        _report(bar, verbose, "tucker", it, 1.0 - err)
        if callback is not None:
            callback(it, 1.0 - err)
        if it >= 1 and abs(errors[-2] - errors[-1]) < tol:
            break
    if bar is not None:
        bar.close()
    if core is None:
        core = multi_mode_dot(x, factors, transpose=True)
    return TuckerTensor(core, factors)
