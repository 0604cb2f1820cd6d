"""calibrate(comm): the link's latency and bandwidth as the cost model sees them, measured on
the communicator (what every rank sends while all send: an all-to-all of equal pieces)."""

from __future__ import annotations

import time

import numpy as np

from ..planner.costs import distributed as costs
from .adapters import communicator
from .comm import empty_like_shape

__all__ = ["calibrate"]


def _sync(a):
    mod = type(a).__module__
    if mod.startswith("torch") and a.device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    elif mod.startswith("cupy"):
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _time_alltoall(c, buf, pieces, repeats):
    n = buf.shape[0] // c.size
    best = float("inf")
    for _ in range(repeats):
        c.barrier()
        _sync(buf)
        t0 = time.perf_counter()
        c.exchange({p: buf[p * n:(p + 1) * n] for p in range(c.size)},
                   {q: pieces[q] for q in range(c.size)}, buf)
        _sync(buf)
        best = min(best, time.perf_counter() - t0)
    return best


def calibrate(comm, *, like=None, nbytes=1 << 26, repeats=5, install=True) -> dict:
    """Measure latency (an all-to-all of 8 bytes a peer) and bandwidth (of `nbytes` a rank)
    on comm, with buffers like `like` (default: NumPy; pass a CUDA tensor or CuPy array for a
    GPU link).  The slowest rank's figures are agreed on (all ranks return the same dict);
    install=True makes them the cost model's defaults for that device kind."""
    c = communicator(comm)
    if c.size == 1:
        return {"latency_s": 0.0, "bandwidth": float("inf"), "ranks": 1}
    like = np.empty(1, np.float32) if like is None else like
    kind = "cpu"
    mod = type(like).__module__
    if (mod.startswith("torch") and like.device.type == "cuda") or mod.startswith("cupy"):
        kind = "cuda"
    out = []
    for total in (8 * c.size, max(int(nbytes) // 4 // c.size * c.size, c.size)):
        n = total // c.size if total > 8 * c.size else 2
        buf = empty_like_shape(like, (n * c.size,))
        if mod.startswith("torch"):
            buf.fill_(1)
        else:
            buf[...] = 1
        pieces = [empty_like_shape(like, (n,)) for _ in range(c.size)]
        out.append((_time_alltoall(c, buf, pieces, repeats), n * buf.element_size()
                    if hasattr(buf, "element_size") else n * buf.dtype.itemsize))
    (t_small, _), (t_big, piece) = out
    latency = t_small / (c.size - 1)
    bandwidth = piece * (c.size - 1) / max(t_big - t_small, 1e-9)
    worst = np.array([latency, 1.0 / bandwidth])
    table = c.gather_meta((worst * 1e15).astype(np.int64), 600.0)
    latency, inv_bw = table.max(axis=0) / 1e15
    result = {"latency_s": float(latency), "bandwidth": float(1.0 / inv_bw), "ranks": c.size,
              "kind": kind}
    if install:
        costs.DEFAULT_LINKS[kind] = (result["latency_s"], result["bandwidth"])
    return result
