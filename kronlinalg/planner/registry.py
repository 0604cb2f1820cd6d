"""Candidates as data: every algorithm of every operation is one registered `Candidate`.

An operation registers once how to read its shapes (`register_op`); each algorithm registers a
predictor and a runner (`register`).  plan() only ever walks this table, so adding an algorithm
(a fused kernel, Strassen, batched small GEMM) is one `register` call, not another `if`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Candidate", "Problem", "register", "register_op", "candidates", "normalise", "ops",
           "check_options"]


@dataclass(frozen=True)
class Problem:
    """One planning question, as the predictors see it."""

    op: str
    shapes: tuple  # the operand shapes, as given
    dtype: str  # the dtype the kernels compute in
    device: str  # 'cpu', 'cuda:N' or a table row name
    kind: str  # 'cpu' or 'cuda'
    options: dict  # keyword options of the operation (side=..., ...)
    info: dict = field(default_factory=dict)  # what the op's normaliser derived (sizes, flops)


@dataclass(frozen=True)
class Candidate:
    """An algorithm for one operation.

    predict(problem, profile) returns predicted seconds, or (seconds, details dict).
    applies(problem) says whether it can run that problem at all (device, dtype, build).
    run(*arrays, **options) computes the operation with this algorithm.
    """

    name: str
    predict: Callable
    devices: tuple = ("cpu",)  # device kinds: 'cpu', 'cuda'
    applies: Callable = lambda problem: True
    run: Callable | None = None
    family: str = ""  # how benchmarks group prediction errors; default name/kind
    doc: str = ""
    op: str = ""


@dataclass(frozen=True)
class _OpSpec:
    normalise: Callable  # (shapes, options) -> info dict; raises ValueError on bad shapes
    doc: str = ""
    # (problem) -> dict merged into problem.info: what the kernels decide (tiles, passes) for
    # this problem, asked of them by the operation that registered it (the planner itself
    # imports no operation and no extension)
    facts: Callable | None = None


_OPS: dict = {}
_OPTIONS: dict = {}  # op -> the keyword options plan() accepts (None: any)
_CANDIDATES: dict = {}  # op -> list of Candidate, in registration order
_listeners: list = []  # called after any change, so cached plans are dropped


def register_op(op: str, normalise: Callable, doc: str = "", facts: Callable | None = None,
                options=None) -> None:
    """Register operation `op`: normalise(shapes, options) -> info dict reads its shapes for the
    planner; options, if given, names the keyword options plan() accepts for it (e.g.
    ("side",)): plan() then refuses any other keyword with a TypeError naming it.  None keeps
    plan() permissive (the operation's normaliser alone judges its options)."""
    _OPTIONS[op] = None if options is None else tuple(options)
    _OPS[op] = _OpSpec(normalise, doc, facts)
    _CANDIDATES.setdefault(op, [])
    _changed()


def register(op: str, candidate: Candidate) -> Candidate:
    """Add (or replace: same name on an overlapping device kind) a candidate for `op`."""
    if op not in _OPS:
        raise ValueError(f"op: unknown operation {op!r}; known: {sorted(_OPS)}")
    cand = dataclasses.replace(candidate, op=op)
    kept = [c for c in _CANDIDATES[op]
            if not (c.name == cand.name and set(c.devices) & set(cand.devices))]
    _CANDIDATES[op] = kept + [cand]
    _changed()
    return cand


def ops() -> list:
    return sorted(_OPS)


def candidates(op: str, kind: str | None = None) -> list:
    if op not in _OPS:
        raise ValueError(f"op: unknown operation {op!r}; known: {sorted(_OPS)}")
    return [c for c in _CANDIDATES[op] if kind is None or kind in c.devices]


def check_options(op: str, options: dict) -> None:
    """TypeError naming the keyword that `op` does not take (see register_op's options)."""
    known = _OPTIONS.get(op)
    if known is None:
        return
    unknown = sorted(set(options) - set(known))
    if unknown:
        import difflib

        hint = difflib.get_close_matches(unknown[0], known, n=1)
        raise TypeError(
            f"plan() got an unexpected keyword argument {unknown[0]!r} for {op}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f"; its options: {', '.join(known) if known else 'none'}")


def normalise(op: str, shapes: tuple, options: dict) -> dict:
    if op not in _OPS:
        raise ValueError(f"op: unknown operation {op!r}; known: {sorted(_OPS)}")
    return _OPS[op].normalise(shapes, options)


def facts(problem) -> dict:
    """The kernel facts the operation's registered hook adds to a problem's info ({} if none)."""
    hook = _OPS[problem.op].facts
    return hook(problem) if hook is not None else {}


def _changed() -> None:
    for fn in _listeners:
        fn()
