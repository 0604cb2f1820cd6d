"""The operation skeleton: prepare → fast path → choose → run → finish, written once.

Every public operation (kron_matmul, structured_matmul, strassen_matmul, batched_matmul, spmm,
...) is an :class:`Operation`.  Its module supplies what is particular to it — how a call is
validated (``prepare``), how the planner knows its shapes (``plan_query`` and ``normalise``),
the hashable signature of a repeated call (``signature``), what an empty call returns
(``empty``) — and registers its algorithms as :class:`Algorithm` records: name, device kinds,
an ``applies`` predicate, a cost function and a runner.  The planner ranks what applies;
this skeleton runs the one it picked.  A forced ``algorithm=`` that cannot run a problem
gets the planner's ValueError (``applies`` is the one statement of applicability).

The fast path: an algorithm may offer ``replay(call) -> (result, replayer)``, where
``replayer(*arrays, **options)`` repeats the same launches on new arrays of the same
signature (or returns None to decline).  A call whose signature was seen before then skips
validation and planning: for tiny products those cost more than the kernels.

Autograd, in one place: when a torch input requires grad (or runs under a torch.func
transform) the skeleton sets ``call.grad`` to "autograd" (or "transform") and runs the picked
algorithm only if it lists that mode in ``Algorithm.autograd``; otherwise the operation's
``grad_algorithm`` (one composed of the library's differentiable ops) runs instead.  No path
returns gradients it did not compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import planner
from .common import backend, signatures

__all__ = ["Algorithm", "Call", "Operation"]


def _always(problem) -> bool:
    return True


@dataclass(frozen=True)
class Algorithm:
    """One registered way to compute an operation.

    run(call) -> result.  cost(problem, profile) -> seconds, or (seconds, details).
    applies(problem) -> bool: whether it can run that problem (device, dtype, build, sizes).
    replay(call) -> (result, replayer or None): optional, see the module docstring.
    autograd: the gradient modes run() supports ("autograd": torch.autograd through a
    Function or differentiable ops; "transform": torch.func's grad/vmap).
    """

    name: str
    run: Callable
    cost: Callable
    devices: tuple = ("cpu",)
    applies: Callable = _always
    replay: Callable | None = None
    autograd: tuple = ()
    doc: str = ""


@dataclass
class Call:
    """A validated call: what every operation's prepared call carries (subclass it).

    xp: the caller's namespace; lead: the array whose device the call runs on; arrays: every
    input array (for the autograd check); empty: nothing to compute (see Operation.empty);
    grad: set by the skeleton (None, "autograd" or "transform")."""

    xp: object
    lead: object
    arrays: tuple
    empty: bool = False
    grad: str | None = field(default=None, init=False)


class Operation:
    """The skeleton of one public operation; call it like the function it implements.

    prepare(*arrays, **options) -> Call (raises TypeError/ValueError naming the argument).
    plan_query(call) -> (shapes, dtype name, options): how the planner sees the call.
    normalise(shapes, options) -> info dict: the planner's reading of shapes (plan() works
    without arrays); the operation may add kernel facts it asks its C entry points for.
    signature(arrays, options, algorithm) -> hashable or None (None: never cached).
    empty(call) -> the result of a call with nothing to compute.
    facts(problem) -> dict added to the planner's problem info: what the kernels decide for
    it (passes, tiles, whether a problem fits), asked of the C entry points.
    grad_algorithm: the algorithm that runs when gradients are wanted and the picked one
    cannot compute them.
    options: the keyword options plan() accepts for this operation (others: TypeError).
    measure(call, arrays) -> algorithm name or None: for "auto", an operation may time its
    candidates on the caller's arrays (and record them with the planner) instead of trusting
    the model; None leaves the choice to the planner.
    """

    def __init__(self, name, *, prepare, plan_query, normalise, empty, doc="", signature=None,
                 grad_algorithm=None, facts=None, measure=None, options=None):
        self.name = name
        self.prepare = prepare
        self.plan_query = plan_query
        self.empty = empty
        self.signature = signature
        self.grad_algorithm = grad_algorithm
        self.measure = measure
        self.algorithms: dict = {}  # (name, device kind) -> Algorithm
        self.names: tuple = ("auto",)
        self._fast = signatures.SignatureCache()
        planner.register_op(name, normalise, doc, facts=facts, options=options)

    def register(self, algorithm: Algorithm) -> Algorithm:
        """Add an algorithm for its device kinds (and tell the planner of it)."""
        for kind in algorithm.devices:
            self.algorithms[(algorithm.name, kind)] = algorithm
            planner.register(self.name, planner.Candidate(
                algorithm.name, algorithm.cost, devices=(kind,), applies=algorithm.applies,
                run=self._runner(algorithm.name), family=f"{self.name}/{algorithm.name}/{kind}",
                doc=algorithm.doc))
        if algorithm.name not in self.names:
            self.names += (algorithm.name,)
        return algorithm

    @property
    def fast_cache(self) -> signatures.SignatureCache:
        """signature -> replayer of this operation's fast path (a compiled front reads it)."""
        return self._fast

    def _runner(self, name):
        def run(*arrays, **options):
            return self(*arrays, algorithm=name, **options)

        run.__name__ = f"{self.name}_{name}"
        return run

    # -- the call ------------------------------------------------------------------------------

    def __call__(self, *arrays, algorithm="auto", **options):
        key = None
        if self.signature is not None:
            key = self.signature(arrays, options, algorithm)
            if key is not None:
                replayer = self._fast.get(key)
                if replayer is not None:
                    out = replayer(*arrays, **options)
                    if out is not None:
                        return out
        if algorithm not in self.names:
            raise ValueError(f"algorithm: expected one of {self.names}, got {algorithm!r}")
        call = self.prepare(*arrays, **options)
        if call.empty:
            return self.empty(call)
        call.grad = backend.grad_mode(call.arrays)
        measured = (self.measure(call, arrays) if algorithm == "auto" and call.grad is None
                    and self.measure is not None else None)
        algo = (self.algorithms[(measured, backend.kind(call.lead))] if measured
                else self.pick(call, algorithm))
        if call.grad is not None and call.grad not in algo.autograd:
            algo = self.algorithms[(self.grad_algorithm, backend.kind(call.lead))]
        if key is not None and algo.replay is not None and call.grad is None:
            out, replayer = algo.replay(call)
            if replayer is not None:
                self._fast.remember(key, replayer)
            return out
        return algo.run(call)

    def pick(self, call: Call, algorithm: str = "auto") -> Algorithm:
        """The algorithm that runs `call`: the planner's first choice, or the forced one after
        the planner has checked that it applies (ValueError naming the candidates if not)."""
        shapes, dtype, options = self.plan_query(call)
        forced = None if algorithm == "auto" else algorithm
        name = planner.plan(self.name, *shapes, dtype=dtype, device=call.lead,
                            algorithm=forced, **options)[0].name
        return self.algorithms[(name, backend.kind(call.lead))]

    def cached_signatures(self) -> tuple:
        """The signatures the fast path replays now (for tests and diagnostics)."""
        return self._fast.keys()

    def clear(self) -> None:
        """Forget the fast path's replays (planner.clear_cache() does it for every operation)."""
        self._fast.clear()
