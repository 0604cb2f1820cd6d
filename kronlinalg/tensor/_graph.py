"""One CP-ALS sweep captured as a CUDA graph (torch): a sweep is ~60 small launches around its
two GEMMs over the tensor (solves, Gram matrices, batched products); replayed as one graph,
their launch costs vanish and the GPU never waits for Python between them.

The graph reads static buffers (factors, Grams, weights) and writes the sweep's results back
into them, keeping the previous ones for a rollback (a non-finite fit: the caller redoes that
sweep eagerly, by pseudo-inverses)."""

from __future__ import annotations

__all__ = ["capture"]


def _copy(torch, dsts, srcs):
    """dst.copy_(src) for each pair, as one multi-tensor launch where torch has it (2N + 1 tiny
    copies a sweep otherwise, ~2 µs each in a graph)."""
    foreach = getattr(torch, "_foreach_copy_", None)
    if foreach is not None:
        foreach(list(dsts), list(srcs))
        return
    for dst, src in zip(dsts, srcs):
        dst.copy_(src)


class GraphedSweep:
    def __init__(self, torch, step, fts, grams, w):
        self.torch = torch
        self.fts = [f.clone() for f in fts]
        self.grams = [g.clone() for g in grams]
        self.w = w.clone()
        self.prev = [t.clone() for t in (*self.fts, *self.grams, self.w)]
        # warm up on a side stream (library handles and workspaces are made outside the
        # capture); its result is dropped
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step(self.fts, self.grams, self.w)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            _copy(torch, self.prev, (*self.fts, *self.grams, self.w))
            fts2, grams2, w2, rec2, ip = step(self.fts, self.grams, self.w)
            _copy(torch, (*self.fts, *self.grams, self.w), (*fts2, *grams2, w2))
            self.terms = torch.stack([rec2.reshape(()), ip.reshape(())])

    def replay(self):
        """One sweep; (‖X̂‖², ⟨X, X̂⟩) as Python floats (the one wait of the iteration)."""
        self.graph.replay()
        return self.terms.tolist()

    def state(self):
        return ([f.clone() for f in self.fts], [g.clone() for g in self.grams], self.w.clone())

    def rollback(self):
        """The state before the last replay."""
        n = len(self.fts)
        prev = [t.clone() for t in self.prev]
        return prev[:n], prev[n:2 * n], prev[2 * n]


def capture(eng, step, fts, grams, w):
    """(a GraphedSweep, why) — or (None, why) where the capture failed (a library call that
    cannot be captured), with the engine's solver, then the LU solve, then Cholesky: the caller
    then runs the sweeps eagerly."""
    import torch

    why = []
    for solver in dict.fromkeys((eng.solver, "lu", "cholesky")):
        eng.solver = solver
        try:
            return GraphedSweep(torch, step, fts, grams, w), f"cuda graph ({solver} solves)"
        except Exception as e:  # noqa: BLE001  (a capture error of any library call)
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            why.append(f"{solver}: {type(e).__name__}: {str(e)[:120]}")
    eng.solver = "lu"  # (the eager sweeps: the library's LU)
    return None, "eager: capture failed (" + "; ".join(why) + ")"
