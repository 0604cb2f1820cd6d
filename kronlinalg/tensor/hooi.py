"""tucker: HOSVD from the mode Gram matrices, then HOOI (TensorLy's ``tucker``).

The Gram matrices X₍ₙ₎X₍ₙ₎ᵀ come from GEMMs on the tensor's own layout (Engine.gram: a view
times its transpose for the first and last modes, a batched product over the leading index
for a middle one) followed by a small symmetric eigendecomposition — never an SVD of an
unfolding.  The projections of HOOI contract the first and the last mode first (GEMMs on
views of the full tensor), the middle ones on the already smaller result."""

from __future__ import annotations

import operator

from ..common import backend, validation
from . import _args, _shard, _shard_tucker
from ._engine import Engine
from .primitives import mode_product

__all__ = ["tucker", "TuckerTensor", "CONCURRENT_HOSVD", "LAST_RUN"]

# the HOSVD's modes (Gram and eigh each) on streams and host threads of their own (CUDA torch)
CONCURRENT_HOSVD = True
# how the last tucker call ran (shard mode: resident rows, slabs, passes over the tensor)
LAST_RUN: dict = {}


class TuckerTensor(tuple):
    """(core, factors), as TensorLy's TuckerTensor unpacks."""

    __slots__ = ()

    def __new__(cls, core, factors):
        return tuple.__new__(cls, (core, list(factors)))

    core = property(operator.itemgetter(0))
    factors = property(operator.itemgetter(1))


def _ranks(rank, dims):
    if isinstance(rank, (list, tuple)):
        if len(rank) != len(dims):
            raise ValueError(f"rank: {len(rank)} ranks for a tensor of {len(dims)} dimensions")
        ranks = [validation.count(f"rank[{i}]", r) for i, r in enumerate(rank)]
    else:
        ranks = [validation.count("rank", rank)] * len(dims)
    if any(r < 1 for r in ranks):
        raise ValueError(f"rank: expected positive integers, got {rank!r}")
    return [min(r, d) for r, d in zip(ranks, dims)]


def _project(xp, x, factors, skip=None):
    """x ×_m U_mᵀ over every mode m except skip: the boundary modes first (GEMMs on views of
    the full tensor), then the middle ones, each on an already reduced tensor."""
    nd = x.ndim
    order = [m for m in (0, nd - 1) if m != skip]
    order += [m for m in range(1, nd - 1) if m != skip]
    y = x
    for m in dict.fromkeys(order):
        y = mode_product(xp, y, xp.permute_dims(factors[m], (1, 0)), m)
    return y


def tucker(tensor, rank, *, n_iter_max=100, init="svd", tol=1e-4, random_state=None,
           callback=None, verbose=False, precision=None, svd="eigh", device=None,
           memory_limit=None):
    """Tucker decomposition (TensorLy's ``tucker``): HOSVD from the leading eigenvectors of the
    mode Gram matrices X₍ₙ₎X₍ₙ₎ᵀ (formed by GEMMs on the tensor's layout, no unfolding, no SVD
    of one), then HOOI iterations until the relative error changes by less than tol
    (n_iter_max=0: the HOSVD alone).  rank: an int (every mode) or one per mode, capped at the
    mode sizes.  init: "svd", "random" or (core, factors).  precision (float32 on CUDA):
    "tf32" (default) or "ieee".  svd: how the leading eigenvectors of each Gram matrix are
    found: "eigh" (default, exact) or "randomized" (a (rank+16)-column subspace, two power
    steps and Rayleigh–Ritz: for large modes on the GPU, whose full eigh is latency-bound).
    Shard mode (device="cuda" or a CUDA torch device, tensor on the host: a NumPy array or a
    CPU torch tensor of 3 or more dimensions, pinned ideally): the tensor is streamed through
    the GPU in slabs (HOSVD two passes, each HOOI iteration two), the leading mode-0 rows that
    fit memory_limit (bytes; default 80 % of the free GPU memory) staying resident; core and
    factors come back on the GPU; LAST_RUN reports the passes.
    Returns TuckerTensor(core, factors) with orthonormal factors."""
    if device is not None:
        return _sharded(tensor, rank, n_iter_max, init, tol, random_state, callback, verbose,
                        precision, svd, device, memory_limit)
    xp, x = _args.tensor_arg(tensor)
    dims = [int(d) for d in x.shape]
    ranks = _ranks(rank, dims)
    n_iter_max, tol = _args.iterations(n_iter_max, tol)
    callback = _args.callback_arg(callback)
    if precision not in (None, "tf32", "ieee"):
        raise ValueError(f"precision: expected 'tf32' or 'ieee' for tucker, got {precision!r}")
    if svd not in ("eigh", "randomized"):
        raise ValueError(f"svd: expected 'eigh' or 'randomized', got {svd!r}")
    eng = Engine(xp, x, precision or "tf32")
    nd = x.ndim
    LAST_RUN.clear()
    LAST_RUN.update(shard=False)
    with eng.fast():
        x = backend.contiguous(x)
        if isinstance(init, str) and init == "svd":
            factors = eng.hosvd(x, ranks, svd, CONCURRENT_HOSVD)
        else:
            factors = _args.tucker_factors(init, xp, dims, ranks, random_state, x,
                                           lambda f: _args.cast(xp, f, x.dtype))
        progress = _args.Progress("tucker", verbose, n_iter_max, callback)
        norm_x = eng.norm(x)
        errors, core = [], None
        for it in range(n_iter_max):
            for n in range(nd):
                y = _project(xp, x, factors, skip=n)
                factors[n] = eng.top_eigvecs(eng.gram(y, n), ranks[n], svd)
            core = mode_product(xp, y, xp.permute_dims(factors[nd - 1], (1, 0)), nd - 1)
            if _args.hooi_converged(eng, core, norm_x, errors, it, tol, progress):
                break
        progress.close()
        if core is None:
            core = _project(xp, x, factors)
    return TuckerTensor(core, factors)


def _sharded(tensor, rank, n_iter_max, init, tol, random_state, callback, verbose, precision,
             svd, device, memory_limit):
    tensor, device, memory_limit = _shard.host_tensor(tensor, device, memory_limit, precision)
    ranks = _ranks(rank, [int(d) for d in tensor.shape])
    n_iter_max, tol = _args.iterations(n_iter_max, tol)
    callback = _args.callback_arg(callback)
    if svd not in ("eigh", "randomized"):
        raise ValueError(f"svd: expected 'eigh' or 'randomized', got {svd!r}")
    core, factors, facts = _shard_tucker.tucker(
        tensor, ranks, device, memory_limit, n_iter_max, tol, precision or "tf32", svd, init,
        random_state, _args.Progress("tucker", verbose, n_iter_max, callback))
    LAST_RUN.clear()
    LAST_RUN.update(facts)
    return TuckerTensor(core, factors)
