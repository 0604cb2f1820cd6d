"""``matmul(a, b)``: the array API's matmul, routed by the cost model.

Candidates: the array library's matmul ("library"), and batched_matmul's kernels ("batched")
for stacks of small products, taken only where the planner predicts a gain of at least 5 %
(planner/costs/batched.py: matmul's margin).  Other algorithms register here:
``MATMUL.register(Algorithm(...))`` for one written against this module's call, or
``register_matmul_candidate(candidate)`` for a planner.Candidate that lives elsewhere (the
Strassen helper's ``strassen.matmul_candidate()``).

matmul is batched_matmul's public face for ``a @ b``: it runs batched_matmul's algorithms
through the planner's registry (the runner each registered candidate carries), so it imports
no other operation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._ext import load
from ._operation import Algorithm, Call, Operation
from . import planner
from .common import backend, precision, validation
from .common.signatures import ScaledFront, arrays_signature, host_stack_replayer, pair_call
from .common.dtypes import FLOAT, HALF, KERNEL_CODE
from .planner.costs import batched as costs

__all__ = ["matmul", "MATMUL", "register_matmul_candidate"]

_batched_cpu, _batched_cuda = load("batched_cpu"), load("batched_cuda")
# batched_matmul's float32 mode, read where the kernels keep it (one process-wide setting)
_batched_fp32 = precision.Float32Precision(_batched_cuda, "KRONLINALG_BATCHED_FP32")


def batched_runner(kind, algorithm):
    """run(a, b): batched_matmul's `algorithm` on `kind` arrays, the runner it registered with
    the planner (no import of the operation)."""
    for cand in planner.candidates("batched_matmul", kind):
        if cand.name == algorithm:
            return cand.run
    raise ValueError(f"algorithm: batched_matmul has no {algorithm!r} on {kind}")


def batched_matmul(a, b, /, *, algorithm):
    """batched_matmul's `algorithm` on (a, b)."""
    return batched_runner(backend.kind(a), algorithm)(a, b)


@dataclass
class _Call(Call):
    a: object = None  # the operands as given
    b: object = None
    a2: object = None  # 1-D operands promoted to matrices
    b2: object = None
    squeeze: tuple = ()  # axes to remove from the result, in order
    dtype: str = ""  # the promoted dtype ("" for non-floating operands: library only)
    allow_strassen: bool = False  # the caller accepts Strassen's error growth (an opt-in)


def _prepare(a, b, /, *, allow_strassen=False):
    named = {"a": a, "b": b}
    xp = validation.namespace_of(named)
    validation.same_device(named)
    for name, v in named.items():
        if v.ndim == 0:
            raise ValueError(f"{name}: matmul takes arrays of at least 1 dimension, got a 0-D "
                             "array")
    a2 = xp.expand_dims(a, axis=0) if a.ndim == 1 else a
    b2 = xp.expand_dims(b, axis=-1) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"b: its contracted dimension ({b2.shape[-2]}) must equal a's last "
                         f"({a2.shape[-1]}); shapes {tuple(a.shape)} and {tuple(b.shape)}")
    try:
        costs.matmul_normalise((tuple(a.shape), tuple(b.shape)), {})
    except ValueError:
        raise ValueError(f"b: batch dimensions {tuple(b2.shape[:-2])} do not broadcast with "
                         f"a's {tuple(a2.shape[:-2])}") from None
    squeeze = (-1,) if b.ndim == 1 else ()
    if a.ndim == 1:
        squeeze += (-1,) if b.ndim == 1 else (-2,)
    names = {backend.dtype_name(a.dtype), backend.dtype_name(b.dtype)}
    dtype = backend.dtype_name(xp.result_type(a, b)) if names <= set(FLOAT) else ""
    return _Call(xp, a, (a, b), False, a, b, a2, b2, squeeze, dtype, bool(allow_strassen))


def _plan_query(call):
    shapes = (tuple(call.a.shape), tuple(call.b.shape))
    if not call.dtype:  # integers, bool, complex: the library's matmul alone
        return shapes, "float64", {"library_only": True}
    dt = "float32" if call.dtype in HALF and not backend.on_cuda(call.a) else call.dtype
    return shapes, dt, ({"allow_strassen": True} if call.allow_strassen else {})


def _normalise(shapes, options):
    info = costs.matmul_normalise(shapes, options)
    info.update(variable=False, order=max(info["m"], info["n"]))
    return info


def _facts(problem):
    if problem.kind != "cuda" or _batched_cpu is None or problem.dtype not in FLOAT:
        return {}
    info = problem.info
    mode = 0 if _batched_fp32() == "tf32x3" else 1
    return {"config1d": _batched_cpu.config(info["m"], info["n"], info["k"],
                                            KERNEL_CODE[problem.dtype], 1, mode)}


def _empty(call):  # never used: the library makes empty results itself
    return call.xp.matmul(call.a, call.b)


def _library(call):
    return call.xp.matmul(call.a, call.b)


def _batched(algorithm):
    def run(call):
        info_empty = call.a2.shape[-1] == 0 or 0 in call.a2.shape[-2:] or 0 in call.b2.shape[-1:]
        if info_empty or math.prod(call.a2.shape[:-2]) * math.prod(call.b2.shape[:-2]) == 0:
            return _library(call)
        out = batched_matmul(call.a2, call.b2, algorithm=algorithm)
        for ax in call.squeeze:
            out = call.xp.squeeze(out, axis=ax)
        return out

    return run


def _applies(kind):
    def applies(problem):
        info = problem.info
        if problem.options.get("library_only") or info["batch"] < 2 or info["order"] > costs.MAX_ORDER:
            return False
        if kind == "cpu":
            return _batched_cpu is not None and problem.dtype in ("float32", "float64")
        return _batched_cuda is not None or not problem.device.startswith("cuda:")

    return applies


def _signature(arrays, options, algorithm):
    if len(arrays) != 2 or options:
        return None
    sig = arrays_signature(arrays, True, True)
    return None if sig is None else (algorithm,) + sig


def _replay_library(call):
    matmul = backend.native_matmul(call.a, call.b, call.xp)
    return matmul(call.a, call.b), matmul


def _replay_batched(algorithm):
    def replay(call):
        out = _batched(algorithm)(call)
        if call.squeeze:
            return out, None
        if algorithm == "blocked":
            # NumPy stacks and CPU torch tensors of one kernel dtype: the compiled replay (a
            # repeat fills in three addresses); anything else repeats through batched_matmul's
            # own fast path
            replayer = host_stack_replayer(call.a, call.b, out)
            if replayer is not None:
                return out, replayer
        return out, batched_runner(backend.kind(call.a), algorithm)  # (resolved once)

    return replay


MATMUL = Operation(
    "matmul", prepare=_prepare, plan_query=_plan_query, normalise=_normalise, empty=_empty,
    grad_algorithm="library", facts=_facts, signature=_signature,
    doc="a @ b with array-API semantics; shapes: a, b")
MATMUL.register(Algorithm(
    "library", _library, costs.predict_library, devices=("cpu", "cuda"),
    autograd=("autograd", "transform"), replay=_replay_library,
    doc="the array library's matmul (BLAS on CPU, cuBLAS on CUDA)"))
MATMUL.register(Algorithm(
    "batched", _batched("blocked"), costs.predict_matmul_batched(costs.predict_blocked),
    devices=("cpu",), applies=_applies("cpu"), replay=_replay_batched("blocked"),
    doc="batched_matmul's CPU kernel for stacks of small products (5 % margin)"))
MATMUL.register(Algorithm(
    "batched", _batched("kami1d"), costs.predict_matmul_batched(costs.predict_kami(1)),
    devices=("cuda",), applies=_applies("cuda"), replay=_replay_batched("kami1d"),
    doc="batched_matmul's KAMI 1D kernel for stacks of small products (5 % margin)"))


def register_matmul_candidate(candidate):
    """Offer matmul an algorithm given as a planner.Candidate (e.g.
    ``strassen.matmul_candidate()``): its predict, applies and devices; it runs as
    ``candidate.run(a, b)``.  Returns the registered Algorithm."""
    def run(call):
        return candidate.run(call.a, call.b)

    return MATMUL.register(Algorithm(candidate.name, run, candidate.predict,
                                     devices=tuple(candidate.devices), applies=candidate.applies,
                                     doc=candidate.doc))


def matmul(a, b, /, *, allow_strassen=False):
    """``a @ b`` with the array API's matmul semantics: 1-D operands promoted (and the added
    dimension removed), batch dimensions broadcast, the library's type promotion and errors.
    Computed by the candidate the planner predicts fastest: the array library's matmul, or
    batched_matmul's kernels for stacks of small products where they predict a gain of 5 % or
    more (``kronlinalg.explain("matmul", a.shape, b.shape, dtype=..., device=...)``).

    allow_strassen=True also lets the planner take strassen_matmul where it predicts a gain of
    5 % or more on large float32/float64 products: faster, but its error grows with the
    levels (up to ~2·3^L times classical's; see docs/strassen_matmul.md), so it is an opt-in."""
    if allow_strassen:
        return MATMUL(a, b, allow_strassen=True)
    return pair_call(_FRONT, a, b)


# the public call's first step, compiled: a repeated signature replays without the skeleton's
# Python frames (the routed call's overhead decides calls of a few microseconds)
_FRONT = ScaledFront(MATMUL, MATMUL.fast_cache, True, True)
