"""One CP-ALS sweep captured as a CUDA graph (torch): a sweep is ~60 small launches around its
two GEMMs over the tensor (solves, Gram matrices, batched products); replayed as one graph,
their launch costs vanish and the GPU never waits for Python between them.

The graph reads static buffers (factors, Grams, weights) and writes the sweep's results back
into them, keeping the previous ones for a rollback (a non-finite fit: the caller redoes that
sweep eagerly, by pseudo-inverses)."""

from __future__ import annotations

__all__ = ["capture"]


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
            for dst, src in zip(self.prev, (*self.fts, *self.grams, self.w)):
                dst.copy_(src)
            fts2, grams2, w2, rec2, ip = step(self.fts, self.grams, self.w)
            for dst, src in zip((*self.fts, *self.grams, self.w), (*fts2, *grams2, w2)):
                dst.copy_(src)
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
    cannot be captured), with the LU solve and then with Cholesky: the caller then runs the
    sweeps eagerly."""
    import torch

    why = []
    for solver in ("lu", "cholesky"):
        eng.solver = solver
        try:
            return GraphedSweep(torch, step, fts, grams, w), f"cuda graph ({solver} solves)"
        except Exception as e:  # noqa: BLE001  (a capture error of any library call)
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            why.append(f"{solver}: {type(e).__name__}: {str(e)[:120]}")
    eng.solver = "lu"
    return None, "eager: capture failed (" + "; ".join(why) + ")"
