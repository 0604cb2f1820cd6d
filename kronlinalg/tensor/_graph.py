"""One CP-ALS sweep captured as a CUDA graph (torch): a sweep is ~30 small launches around its
two passes over the tensor (solves, Gram matrices, batched products); replayed as one graph,
their launch costs vanish and the GPU never waits for Python between them.

The graph reads static buffers (factors, Grams, weights) and writes the sweep's results back
into them, keeping the previous ones for a rollback (a non-finite fit: the caller redoes that
sweep eagerly, by pseudo-inverses).

Pipelined (cp_als.PIPELINE, the default): two graphs of the same sweep, alternating, each keeping the
state before its sweep in a slot of its own, so that sweep k + 1 is queued before the host
reads sweep k's fit.  The GPU then never idles while the host waits for the fit, runs the
callback and launches the next replay (52 µs an iteration between replays on an H100 at 640³
rank 64, against ~1.2 ms of sweep).  The cost: stopping on `tol` runs one sweep that is thrown
away (its state before it is the answer)."""

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


def _pair(torch, a, b):
    """(a, b) as one (2,) tensor: a view where b follows a in one buffer (solve.fit_terms's
    output), else stacked."""
    a0, b0 = a.reshape(()), b.reshape(())
    if (a0.dtype == b0.dtype and a0.untyped_storage().data_ptr() == b0.untyped_storage().data_ptr()
            and b0.storage_offset() == a0.storage_offset() + 1):
        return a0.as_strided((2,), (1,))
    return torch.stack([a0, b0])


class GraphedSweep:
    """`slots` CUDA graphs of one sweep over shared static buffers, launched in turn."""

    def __init__(self, torch, step, fts, grams, w, slots, side_copy=False):
        self.torch = torch
        self.n = len(fts)
        self.cur = [t.clone() for t in (*fts, *grams, w)]
        self.prev = [[t.clone() for t in self.cur] for _ in range(slots)]
        # warm up on a side stream (library handles and workspaces are made outside the
        # capture); its result is dropped
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step(*self._split(self.cur))
        torch.cuda.current_stream().wait_stream(side)
        self.graphs, self.terms, pool = [], [], None
        # side_copy: the graph's copies on a stream of their own, beside the sweep: the state
        # before it (kept for a rollback) at its start, each mode's new factor and Gram as
        # soon as its update has made them (step's sink: the sweep reads a mode's old factor
        # and Gram only before that update); and the fit's two terms taken as they lie in one
        # buffer (no stacking launch).  Without it both copies run on the sweep's stream, at
        # its start and its end (~5 and ~10 µs of an H100 at 640³ rank 64)
        copier = torch.cuda.Stream() if side_copy else None
        for s in range(slots):
            g = torch.cuda.CUDAGraph()
            # (one memory pool: the graphs run one after the other on one stream)
            with torch.cuda.graph(g, pool=pool):
                main = torch.cuda.current_stream()
                if copier is None:
                    _copy(torch, self.prev[s], self.cur)
                    fts2, grams2, w2, rec2, ip = step(*self._split(self.cur))
                    _copy(torch, self.cur, (*fts2, *grams2, w2))
                else:  # (forked branches of the graph, joined below)
                    copier.wait_stream(main)
                    with torch.cuda.stream(copier):
                        _copy(torch, self.prev[s], self.cur)
                    sunk = set()
                    fts2, grams2, w2, rec2, ip = step(*self._split(self.cur),
                                                      sink=self._sink(copier, sunk))
                    main.wait_stream(copier)
                    rest = [(self.cur[k], t) for k, t in enumerate((*fts2, *grams2, w2))
                            if k % self.n not in sunk or k == 2 * self.n]
                    rest = [(d, t) for d, t in rest if d is not t]  # (unchanged weights)
                    if rest:
                        _copy(torch, [d for d, _ in rest], [t for _, t in rest])
                self.terms.append(_pair(torch, rec2, ip) if side_copy else
                                  torch.stack([rec2.reshape(()), ip.reshape(())]))
            pool = g.pool()
            self.graphs.append(g)
        self.host = torch.empty((slots, 2), dtype=self.terms[0].dtype, pin_memory=True)
        self.events = [torch.cuda.Event() for _ in range(slots)]
        self.launched = 0  # sweeps queued so far

    def _sink(self, copier, sunk):
        """step's sink(n, factor, gram, side): copy mode n's new factor and Gram (either may
        be None: it follows in another call) into the state on the copier stream, after the
        current stream's work and the side stream's (side: where the Gram was formed, or
        None); records n in sunk once both came."""
        torch = self.torch
        came = {}

        def sink(n, ft, gram, side):
            copier.wait_stream(torch.cuda.current_stream())
            if side is not None:
                copier.wait_stream(side)
            pairs = [(self.cur[k], t) for k, t in ((n, ft), (self.n + n, gram)) if t is not None]
            with torch.cuda.stream(copier):
                _copy(torch, [d for d, _ in pairs], [t for _, t in pairs])
            came.setdefault(n, set()).update(k for k, t in ((0, ft), (1, gram)) if t is not None)
            if came[n] == {0, 1}:
                sunk.add(n)

        return sink

    def _split(self, ts):
        n = self.n
        return list(ts[:n]), list(ts[n:2 * n]), ts[2 * n]

    def _clone(self, ts):
        fts, grams, w = self._split(ts)
        return [f.clone() for f in fts], [g.clone() for g in grams], w.clone()

    def launch(self):
        """Queue the next sweep and the copy of its (‖X̂‖², ⟨X, X̂⟩) to the host."""
        s = self.launched % len(self.graphs)
        self.graphs[s].replay()
        self.host[s].copy_(self.terms[s], non_blocking=True)
        self.events[s].record()
        self.launched += 1

    def result(self, sweep):
        """(‖X̂‖², ⟨X, X̂⟩) of sweep `sweep` (launched, and at most one sweep behind the last
        one launched) as Python floats: the one wait of the iteration."""
        s = sweep % len(self.graphs)
        self.events[s].synchronize()
        return self.host[s].tolist()

    def state_after(self, sweep):
        """(factors, Grams, weights) after sweep `sweep` (the last one launched or the one
        before it)."""
        if self.launched > sweep + 1:  # the next one ran: its slot holds the state before it
            return self._clone(self.prev[(sweep + 1) % len(self.graphs)])
        return self._clone(self.cur)

    def state_before(self, sweep):
        """The state before sweep `sweep` (the last one launched or the one before it)."""
        return self._clone(self.prev[sweep % len(self.graphs)])


def capture(eng, step, fts, grams, w, pipeline=True, side_copy=False):
    """(a GraphedSweep, why) — or (None, why) where the capture failed (a library call that
    cannot be captured), with the engine's solver, then the LU solve, then Cholesky: the caller
    then runs the sweeps eagerly."""
    import torch

    why = []
    slots = 2 if pipeline else 1
    for solver in dict.fromkeys((eng.solver, "lu", "cholesky")):
        eng.solver = solver
        try:
            return (GraphedSweep(torch, step, fts, grams, w, slots, side_copy),
                    f"cuda graph ({solver} solves{', pipelined' if slots == 2 else ''})")
        except Exception as e:  # noqa: BLE001  (a capture error of any library call)
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            why.append(f"{solver}: {type(e).__name__}: {str(e)[:120]}")
    eng.solver = "lu"  # (the eager sweeps: the library's LU)
    return None, "eager: capture failed (" + "; ".join(why) + ")"
