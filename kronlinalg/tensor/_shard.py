"""Shard mode of parafac: a host tensor larger than the GPU (or than the memory it may use)
streamed through the GPU in slabs of mode 0, copies overlapped with compute on a second stream.

Each iteration is the dimension-tree sweep split after mode 0 (_tree, p = 1), i.e. two passes
over the tensor: pass 1 contracts modes 1…N−1 of each slab (its rows of mode 0 are slab-local:
(R, rows) lands in its columns of the mode-0 MTTKRP), then mode 0 is updated; pass 2
accumulates A_0[slab]ᵀ X[slab] into (R, I_1⋯I_{N−1}), from which modes 1…N−1 are updated as
in memory.  The leading rows that fit the memory limit stay resident on the GPU (copied once);
the others cross the bus twice per iteration, from pinned host memory, two staging buffers
deep.  CUDA torch only.
"""

from __future__ import annotations

import math

import array_api_compat

from . import _tree
from ._engine import Engine

__all__ = ["plan", "Streamer"]


def plan(dims, rank, itemsize, limit):
    """(resident rows, slab rows) of mode 0 for a memory limit in bytes: the mode-0 pass-2
    accumulator (R × ∏ other sizes) and two staging slabs first, then resident rows."""
    row = math.prod(dims[1:]) * itemsize
    acc = rank * math.prod(dims[1:]) * itemsize
    small = 4 * rank * (sum(dims) + rank) * itemsize  # factors, MTTKRPs, Grams
    # 0.6: the caching allocator's rounding and the per-slab intermediates (the first H100
    # run with 0.9 ran out of a 2 GiB pool: 1.03 GiB allocated, 1.92 GiB reserved)
    avail = int(0.6 * limit) - acc - small
    if avail < 2 * row:
        raise MemoryError(f"memory_limit: {limit} bytes cannot hold the accumulator "
                          f"({acc} bytes) and two slabs of one mode-0 row ({row} bytes each)")
    slab = max(1, min(dims[0], avail // (8 * row)))  # slabs of ~1/8 of what is left
    resident = min(dims[0], max(0, (avail - 2 * slab * row) // row))
    if resident >= dims[0]:
        return dims[0], slab
    return resident, slab


class Streamer:
    """The tensor on the host (pinned) and its resident rows on the device; passes over it."""

    def __init__(self, torch, x_host, device, rank, limit):
        self.torch = torch
        self.dims = [int(d) for d in x_host.shape]
        self.device = device
        itemsize = x_host.element_size()
        self.resident_rows, self.slab_rows = plan(self.dims, rank, itemsize, limit)
        i0, rest = self.dims[0], math.prod(self.dims[1:])
        self.dtype, self.itemsize = x_host.dtype, itemsize
        x2 = x_host.reshape(i0, rest)
        self.resident = x2[:self.resident_rows].to(device)
        streamed = x2[self.resident_rows:]
        self.host = streamed if streamed.is_pinned() or not len(streamed) else streamed.pin_memory()
        self.slabs = [(a, min(a + self.slab_rows, i0))
                      for a in range(self.resident_rows, i0, self.slab_rows)]
        n_buf = min(2, len(self.slabs))
        self.buffers = [torch.empty((self.slab_rows, rest), dtype=x_host.dtype, device=device)
                        for _ in range(n_buf)]
        self.copy_stream = torch.cuda.Stream(device)
        self.streamed_bytes = (i0 - self.resident_rows) * rest * itemsize

    def each(self, consume):
        """consume(a, b, slab (b−a, ∏ other sizes) on the device) for every slab in row order,
        the next slab's copy running while the current one is consumed."""
        torch = self.torch
        if self.resident_rows:
            consume(0, self.resident_rows, self.resident)
        if not self.slabs:
            return
        cur = torch.cuda.current_stream(self.device)
        ready = [torch.cuda.Event() for _ in self.buffers]
        free = [torch.cuda.Event() for _ in self.buffers]
        self.copy_stream.wait_stream(cur)  # (the buffers' last readers, from a previous pass)

        def issue(k):
            a, b = self.slabs[k]
            j = k % len(self.buffers)
            with torch.cuda.stream(self.copy_stream):
                self.copy_stream.wait_event(free[j])  # its previous slab has been consumed
                self.buffers[j][:b - a].copy_(self.host[a - self.resident_rows:
                                                        b - self.resident_rows],
                                              non_blocking=True)
                ready[j].record(self.copy_stream)

        issue(0)
        for k, (a, b) in enumerate(self.slabs):
            if k + 1 < len(self.slabs):
                issue(k + 1)
            j = k % len(self.buffers)
            cur.wait_event(ready[j])
            consume(a, b, self.buffers[j][:b - a])
            free[j].record(cur)


    def each_block(self, width, consume):
        """consume(j0, j1, block (I_0, (j1 − j0)·∏ I_{2…}) on the device) for the slabs
        [j0, j1) of MODE 1, `width` indices each: every row of the tensor, the resident ones
        copied on the device, the others from pinned host memory, as strided (2D) copies on
        the copy stream, two buffers deep (one pass over the tensor)."""
        torch = self.torch
        from .._ext import load

        rows = load("tensor_cuda")
        if rows is None:
            raise RuntimeError("shard mode's mode-1 slabs need the CUDA build of kronlinalg")
        i0, i1 = self.dims[0], self.dims[1]
        rest2 = math.prod(self.dims[2:])
        item = self.itemsize
        blocks = [(j, min(j + width, i1)) for j in range(0, i1, width)]
        bufs = [torch.empty((i0, width * rest2), dtype=self.dtype, device=self.device)
                for _ in range(min(2, len(blocks)))]
        cur = torch.cuda.current_stream(self.device)
        ready = [torch.cuda.Event() for _ in bufs]
        free = [torch.cuda.Event() for _ in bufs]
        self.copy_stream.wait_stream(cur)
        pitch = i1 * rest2 * item  # one mode-0 row of the tensor, in bytes
        res = self.resident_rows

        def issue(k):
            j0, j1 = blocks[k]
            buf = bufs[k % len(bufs)]
            dpitch, wbytes = width * rest2 * item, (j1 - j0) * rest2 * item
            stream = self.copy_stream
            with torch.cuda.stream(stream):
                stream.wait_event(free[k % len(bufs)])
                if res:
                    rows.copy_rows(buf.data_ptr(), dpitch,
                                   self.resident.data_ptr() + j0 * rest2 * item, pitch,
                                   wbytes, res, stream.cuda_stream)
                if i0 > res:
                    rows.copy_rows(buf.data_ptr() + res * dpitch, dpitch,
                                   self.host.data_ptr() + j0 * rest2 * item, pitch,
                                   wbytes, i0 - res, stream.cuda_stream)
                ready[k % len(bufs)].record(stream)

        issue(0)
        for k, (j0, j1) in enumerate(blocks):
            if k + 1 < len(blocks):
                issue(k + 1)
            j = k % len(bufs)
            cur.wait_event(ready[j])
            consume(j0, j1, bufs[j][:, :(j1 - j0) * rest2])
            free[j].record(cur)


def host_tensor(tensor, device, memory_limit, precision):
    """The checked arguments of a shard-mode call: (C-contiguous CPU torch tensor, CUDA torch
    device, memory limit in bytes)."""
    import numpy as np
    import torch

    from ..common import validation
    from . import _args

    if isinstance(tensor, np.ndarray):
        tensor = torch.from_numpy(tensor)
    if not (isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"):
        raise TypeError("tensor: shard mode (device=...) takes a host tensor: a NumPy array or "
                        "a CPU torch tensor")
    _args.tensor_arg(tensor)
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError) as e:
        raise ValueError(f"device: expected a CUDA device, got {device!r}") from e
    if device.type != "cuda" or not torch.cuda.is_available():
        raise ValueError(f"device: shard mode needs an available CUDA device, got {device}")
    if precision not in (None, "tf32", "ieee"):
        raise ValueError(f"precision: shard mode takes 'tf32' or 'ieee', got {precision!r}")
    if memory_limit is None:
        free, _ = torch.cuda.mem_get_info(device)
        memory_limit = int(0.8 * free)
    memory_limit = validation.count("memory_limit", memory_limit)
    return tensor.contiguous(), device, memory_limit


def als(x_host, fts, weights, rank, device, limit, n_iter_max, tol, precision, progress,
        fit_terms, solve_update):
    """The shard-mode iterations; returns (weights, rank-first factors, run facts)."""
    import torch

    dims = [int(d) for d in x_host.shape]
    nd = len(dims)
    like = fts[0]
    xp = array_api_compat.array_namespace(like)
    eng = Engine(xp, like, precision)
    st = Streamer(torch, x_host, device, rank, limit)
    rest = math.prod(dims[1:])
    grams = None
    norm2 = torch.zeros((), dtype=torch.float64, device=device)
    errors, w, norm_x = [], weights, 0.0
    with eng.fast():
        with eng.exact():
            grams = [f @ f.T for f in fts]
        # made once: allocations of the same sizes every iteration fragment a capped pool
        y0 = torch.empty((rank, dims[0]), dtype=like.dtype, device=device)
        z = torch.empty((rank, rest), dtype=like.dtype, device=device)
        for it in range(n_iter_max):
            first = it == 0

            def pass1(a, b, slab):
                nonlocal norm2
                xs = slab.reshape((b - a, *dims[1:]))
                y0[:, a:b] = _tree.mttkrp_rows(eng, xs, 1.0, fts, 0)  # one-pass kernel or GEMMs
                if first:  # float32 sums per slab, float64 across: vector_norm(dtype=float64)
                    # casts the whole slab first (twice its size: the resident block's
                    # float64 copy broke the 2 GiB pool in the first H100 run)
                    norm2 = norm2 + torch.linalg.vector_norm(slab).double() ** 2

            st.each(pass1)
            if first:
                norm_x = math.sqrt(float(norm2))
            state = {"w": w, "last": None}
            solve_update(eng, fts, grams, state, 0, y0)
            z.zero_()

            def pass2(a, b, slab):
                z.addmm_(fts[0][:, a:b], slab)

            st.each(pass2)
            _tree.subtree(eng, z, list(range(1, nd)), fts, dims,
                          lambda n, y: solve_update(eng, fts, grams, state, n, y))
            w = state["w"]
            rec2, ip = eng.scalars(*fit_terms(xp, grams, w, state["last"], fts[nd - 1]))
            err = math.sqrt(abs(norm_x ** 2 + rec2 - 2.0 * ip)) / (norm_x or 1.0)
            errors.append(err)
            progress.report(it, 1.0 - err)
            if it >= 1 and abs(errors[-2] - errors[-1]) < tol:
                break
    facts = {"shard": True, "resident_rows": st.resident_rows, "slab_rows": st.slab_rows,
             "slabs": len(st.slabs), "passes_per_iteration": 2,
             "streamed_bytes_per_iteration": 2 * st.streamed_bytes}
    return w, fts, facts
