"""Shard mode of tucker: a host tensor larger than the GPU (or than the memory it may use)
streamed through the GPU in slabs, copies overlapped with compute (_shard.Streamer), the
leading mode-0 rows that fit the memory limit resident.  CUDA torch, order ≥ 3.

HOSVD, two passes: slabs of mode 0 give every other mode's Gram matrix (a sum over slabs) and
‖X‖; mode 0's Gram X₍₀₎X₍₀₎ᵀ pairs rows of different slabs, so it comes from slabs of MODE 1
instead — X[:, j0:j1, …] is I₀ strided rows, one 2D copy a slab — as Σ B·Bᵀ.
Each HOOI iteration, two passes (the in-memory iteration's order and factors): pass 1 projects
each mode-0 slab on the factors of modes 1…N−1 (its rows of Y₀ are slab-local) and mode 0 is
updated; pass 2 accumulates Z = X ×₀ U₀ᵀ (R₀ × ∏ other sizes, resident), from which modes
1…N−1 are updated in turn and the core is formed, as in memory.
"""

from __future__ import annotations

import math

import array_api_compat

from . import _args
from ._engine import Engine
from ._shard import Streamer
from .primitives import mode_product

__all__ = ["tucker"]


def _project_rest(xp, y, factors, skip):
    """y ×_m U_mᵀ over the modes m ≥ 1 except skip, the last mode first."""
    for m in range(y.ndim - 1, 0, -1):
        if m != skip:
            y = mode_product(xp, y, xp.permute_dims(factors[m], (1, 0)), m)
    return y


def tucker(x_host, ranks, device, limit, n_iter_max, tol, precision, svd, init, random_state,
           progress):
    """(core, factors, run facts) of the shard-mode Tucker decomposition."""
    import torch

    dims = [int(d) for d in x_host.shape]
    nd = len(dims)
    if nd < 3:
        raise ValueError(f"tensor: shard mode's tucker takes 3 or more dimensions, got {nd}")
    like = torch.empty((), dtype=x_host.dtype, device=device)
    xp = array_api_compat.array_namespace(like)
    eng = Engine(xp, like, precision)
    st = Streamer(torch, x_host, device, ranks[0], limit)
    rest = math.prod(dims[1:])
    passes = 0
    with eng.fast():
        norm2 = torch.zeros((), dtype=torch.float64, device=device)
        grams = [None] * nd
        want_grams = isinstance(init, str) and init == "svd"

        def rows(a, b, slab):
            nonlocal norm2
            # float32 sums per slab, float64 across (as CP's shard mode)
            norm2 = norm2 + torch.linalg.vector_norm(slab).double() ** 2
            if want_grams:
                xs = slab.reshape((b - a, *dims[1:]))
                for n in range(1, nd):
                    g = eng.gram(xs, n)
                    grams[n] = g if grams[n] is None else grams[n] + g

        st.each(rows)
        passes += 1
        if want_grams:
            # mode-1 slabs in buffers of at most the accumulator Z's reserved size, two deep
            width = max(1, min(dims[1], ranks[0] * dims[1] // (2 * dims[0])))

            def cols(j0, j1, block):
                g = xp.matmul(block, xp.permute_dims(block, (1, 0)))
                grams[0] = g if grams[0] is None else grams[0] + g

            st.each_block(width, cols)
            passes += 1
            factors = [eng.top_eigvecs(grams[n], ranks[n], svd) for n in range(nd)]
        else:
            factors = _args.tucker_factors(
                init, xp, dims, ranks, random_state, like,
                lambda f: torch.as_tensor(f).to(device, x_host.dtype))
        del grams
        norm_x = math.sqrt(float(norm2))
        # made once: allocations of the same sizes every iteration fragment a capped pool
        y0 = torch.empty((dims[0], *ranks[1:]), dtype=x_host.dtype, device=device)
        z = torch.empty((ranks[0], rest), dtype=x_host.dtype, device=device)

        def contract_z():
            u0t = factors[0].T
            z.zero_()
            st.each(lambda a, b, slab: z.addmm_(u0t[:, a:b], slab))
            return z.reshape((ranks[0], *dims[1:]))

        def pass1(a, b, slab):
            y0[a:b] = _project_rest(xp, slab.reshape((b - a, *dims[1:])), factors, None)

        errors, core, per_iteration = [], None, 0
        for it in range(n_iter_max):
            st.each(pass1)
            factors[0] = eng.top_eigvecs(eng.gram(y0, 0), ranks[0], svd)
            zt = contract_z()
            y = zt
            for n in range(1, nd):
                y = _project_rest(xp, zt, factors, n)
                factors[n] = eng.top_eigvecs(eng.gram(y, n), ranks[n], svd)
            core = mode_product(xp, y, xp.permute_dims(factors[nd - 1], (1, 0)), nd - 1)
            passes += 2
            per_iteration = 2
            if _args.hooi_converged(eng, core, norm_x, errors, it, tol, progress):
                break
        progress.close()
        if core is None:
            core = _project_rest(xp, contract_z(), factors, None)
            passes += 1
    facts = {"shard": True, "resident_rows": st.resident_rows, "slab_rows": st.slab_rows,
             "slabs": len(st.slabs), "passes_hosvd": 2 if want_grams else 1,
             "passes_per_iteration": per_iteration, "passes": passes,
             "streamed_bytes_per_pass": st.streamed_bytes}
    return core, factors, facts
