"""multi_mode_dot, an operation of the skeleton (kronlinalg._operation): "sequential" (mode
products one by one on the tensor's layout) or, for a product over every mode, "kron"
(kron_matmul's best algorithm, reached through the planner's registry); and tucker_to_tensor,
built on it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import array_api_compat

from .. import planner
from .._operation import Algorithm, Call, Operation
from ..common import backend, validation
from ..planner.costs import tensor as costs
from . import _args
from .primitives import mode_product

__all__ = ["multi_mode_dot", "tucker_to_tensor", "MULTI_MODE_DOT"]


@dataclass
class _MMCall(Call):
    tensor: object = None
    mats: list = None  # applied in order, each (J, I) or a vector
    modes: tuple = ()  # the original mode each contracts (ascending)
    out_shape: tuple = ()
    dtype: object = None


def _mm_prepare(tensor, matrices, /, *, modes=None, skip=None, transpose=False):
    matrices = _args.matrices("matrices", matrices)
    named = {"tensor": tensor, **{f"matrices[{i}]": m for i, m in enumerate(matrices)}}
    xp, dt = _args.check(named)
    nd = tensor.ndim
    if nd == 0:
        raise ValueError("tensor: expected at least 1 dimension, got a 0-D array")
    if modes is None:
        modes = list(range(len(matrices)))
    else:
        if isinstance(modes, (str, bytes)) or not hasattr(modes, "__len__"):
            raise TypeError(f"modes: expected a sequence of integers, got {modes!r}")
        modes = [_args.mode(f"modes[{i}]", v, nd) for i, v in enumerate(modes)]
    if len(modes) != len(matrices):
        raise ValueError(f"modes: {len(modes)} modes for {len(matrices)} matrices")
    for i, v in enumerate(modes):
        if not 0 <= v < nd:
            raise ValueError(f"modes[{i}]: mode {v} is out of range for a tensor of {nd} "
                             "dimensions")
    if len(set(modes)) != len(modes):
        raise ValueError(f"modes: each mode at most once, got {list(modes)}")
    # TensorLy sorts by mode, then skips the skip-th of that order
    pairs = sorted(zip(range(len(matrices)), modes), key=lambda p: p[1])
    if skip is not None:
        skip = validation.count("skip", skip)
        pairs = [p for k, p in enumerate(pairs) if k != skip]
    mats, used = [], []
    cur = list(tensor.shape)
    dec = 0
    for i, mode in pairs:
        m = matrices[i]
        if m.ndim not in (1, 2):
            raise ValueError(f"matrices[{i}]: expected a 1-D or 2-D array, got shape "
                             f"{tuple(m.shape)}")
        m = _args.cast(xp, m, dt)
        if m.ndim == 2 and transpose:
            m = xp.permute_dims(m, (1, 0))
        if int(m.shape[-1]) != int(tensor.shape[mode]):
            raise ValueError(f"matrices[{i}]: its contracted dimension ({m.shape[-1]}) must "
                             f"equal the tensor's mode-{mode} size ({tensor.shape[mode]})")
        if m.ndim == 2:
            cur[mode - dec] = int(m.shape[0])
        else:
            del cur[mode - dec]
            dec += 1
        mats.append(m)
        used.append(mode)
    empty = not mats or 0 in tuple(tensor.shape) or any(0 in tuple(m.shape) for m in mats)
    return _MMCall(xp, tensor, (tensor, *mats), empty, _args.cast(xp, tensor, dt), mats,
                   tuple(used), tuple(cur), dt)


def _mm_plan_query(call):
    shapes = (tuple(call.tensor.shape),) + tuple(tuple(m.shape) for m in call.mats)
    dtype = backend.dtype_name(call.tensor.dtype)
    return shapes, ("float32" if dtype in ("float16", "bfloat16") else dtype), {"modes": call.modes}


def _mm_empty(call):
    xp = call.xp
    if not call.mats:
        return call.tensor
    if 0 in call.out_shape:
        return xp.zeros(call.out_shape, dtype=call.tensor.dtype,
                        device=array_api_compat.device(call.tensor))
    return _sequential(call)  # a zero-length contraction: tensordot gives the zeros


def _sequential(call):
    xp, res, dec = call.xp, call.tensor, 0
    for m, mode in zip(call.mats, call.modes):
        res = mode_product(xp, res, m, mode - dec)
        if m.ndim == 1:
            dec += 1
    return res


def _kron(call):
    """A product over every mode: vec(Y) = vec(X) @ (A1ᵀ ⊗ … ⊗ ANᵀ), by kron_matmul's best
    algorithm (found through the planner's registry: no import of the operation)."""
    xp, x = call.xp, call.tensor
    kind = backend.kind(x)
    shapes, dtype, _ = _mm_plan_query(call)
    info = costs.normalise(shapes, {"modes": call.modes})
    best = planner.plan("kron_matmul", *costs.kron_shapes(info), dtype=dtype, device=x)[0].name
    for cand in planner.candidates("kron_matmul", kind):
        if cand.name == best:
            flat = xp.reshape(x, (math.prod(x.shape),))
            out = cand.run(flat, [xp.permute_dims(m, (1, 0)) for m in call.mats])
            return xp.reshape(out, call.out_shape)
    return _sequential(call)


def _kron_applies(problem):
    if not problem.info["full"] or problem.dtype not in ("float32", "float64"):
        return False
    try:
        return any(True for _ in planner.candidates("kron_matmul", problem.kind))
    except ValueError:
        return False


MULTI_MODE_DOT = Operation(
    "multi_mode_dot", prepare=_mm_prepare, plan_query=_mm_plan_query, normalise=costs.normalise,
    empty=_mm_empty, grad_algorithm="sequential", options=("modes",),
    doc="tensor ×_n A_n over several modes; shapes: tensor, then each A_n as applied (J, I)")
for _k in ("cpu", "cuda"):
    MULTI_MODE_DOT.register(Algorithm(
        "sequential", _sequential, costs.predict_sequential, devices=(_k,),
        autograd=("autograd", "transform"),
        doc="one mode product at a time, GEMMs on the tensor's layout"))
    MULTI_MODE_DOT.register(Algorithm(
        "kron", _kron, costs.predict_kron, devices=(_k,), applies=_kron_applies,
        doc="a product over every mode as x @ (A1ᵀ ⊗ … ⊗ ANᵀ) by kron_matmul"))


def multi_mode_dot(tensor, matrices, /, modes=None, skip=None, transpose=False, *,
                   algorithm="auto"):
    """tensor ×_{modes[0]} matrices[0] ×_{modes[1]} matrices[1] …  (TensorLy's semantics:
    modes defaults to 0, 1, …; skip is the index, in the order sorted by mode, of a matrix to
    leave out; transpose=True applies each matrix's transpose; vectors remove their mode).
    algorithm: "auto" (the planner), "sequential" or "kron" (only for a product of matrices
    over every mode)."""
    return MULTI_MODE_DOT(tensor, matrices, modes=modes, skip=skip, transpose=transpose,
                          algorithm=algorithm)


def tucker_to_tensor(tucker_tensor, /, skip_factor=None, transpose_factors=False):
    """The full tensor core ×_1 U_1 … ×_N U_N of a Tucker tensor (core, factors)."""
    if (isinstance(tucker_tensor, (str, bytes)) or not hasattr(tucker_tensor, "__len__")
            or len(tucker_tensor) != 2):
        raise TypeError(f"tucker_tensor: expected (core, factors), got "
                        f"{type(tucker_tensor).__name__}")
    core, factors = tucker_tensor
    return multi_mode_dot(core, factors, skip=skip_factor, transpose=transpose_factors)
