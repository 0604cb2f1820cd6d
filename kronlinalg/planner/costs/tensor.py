"""multi_mode_dot's candidates (kronlinalg.tensor): "sequential" mode products (one GEMM on a
view of the tensor's layout each), and "kron" (a product over every mode is
x @ (A1ᵀ ⊗ … ⊗ ANᵀ), run by kron_matmul's best candidate, whose own cost model prices it).

Shapes: the tensor, then each matrix (J, I) or vector (I,) as it is applied (after skip and
transpose); options: ``modes`` (the mode each one contracts, ascending) and ``dtype`` unused.
"""

from __future__ import annotations

import math

from ..roofline import roofline

from ...common.dtypes import ITEMSIZE as _ITEMSIZE

__all__ = ["normalise", "predict_sequential", "predict_kron"]


def normalise(shapes, options) -> dict:
    """dims, the sequence of mode products, their flops and bytes (read + written per step)."""
    if len(shapes) < 1:
        raise ValueError("shapes: multi_mode_dot takes the tensor's shape, then each matrix's")
    dims = [int(d) for d in shapes[0]]
    mats = [tuple(int(d) for d in s) for s in shapes[1:]]
    modes = tuple(options.get("modes", range(len(mats))))
    if len(modes) != len(mats):
        raise ValueError(f"shapes: {len(mats)} matrices but {len(modes)} modes")
    flops = elements = 0.0
    cur = list(dims)
    dec = 0
    steps = []
    for s, mode in zip(mats, modes):
        m = mode - dec
        if not 0 <= m < len(cur) or s[-1] != cur[m]:
            raise ValueError(f"shapes: a factor of shape {s} does not fit mode {mode} of {dims}")
        size_in = math.prod(cur)
        j = s[0] if len(s) == 2 else 1
        flops += 2.0 * size_in * j
        if len(s) == 2:
            cur[m] = j
        else:
            del cur[m]
            dec += 1
        elements += size_in + math.prod(cur) + math.prod(s)
        steps.append((tuple(s), m))
    full = (len(mats) == len(dims) >= 1 and all(len(s) == 2 for s in mats)
            and tuple(modes) == tuple(range(len(dims))))
    return {"dims": tuple(dims), "steps": tuple(steps), "flops": flops, "elements": elements,
            "full": full, "out": tuple(cur)}


def predict_sequential(problem, prof):
    """One GEMM per mode: each reads its input and writes its output (roofline each)."""
    info = problem.info
    s_e = _ITEMSIZE.get(problem.dtype, 8)
    nbytes = info["elements"] * s_e
    rate = prof.flops(problem.dtype)
    n = max(1, len(info["steps"]))
    seconds = roofline(info["flops"], nbytes, rate, prof.bandwidth, n * prof.launch_s)
    return seconds, {"flops": info["flops"], "bytes": nbytes,
                     "terms": {"flop": info["flops"] / rate, "mem": nbytes / prof.bandwidth,
                               "call": n * prof.launch_s}}


def kron_shapes(info):
    """(x shape, factor shapes) of the kron_matmul equal to a product over every mode."""
    return ((math.prod(info["dims"]),),) + tuple((s[1], s[0]) for s, _ in info["steps"])


def predict_kron(problem, prof):
    """kron_matmul's own best prediction for the same product (planner.plan of kron_matmul)."""
    from ..ranking import plan

    info = problem.info
    if not info["full"]:
        return math.inf, {"reason": "not a product over every mode"}
    try:
        best = plan("kron_matmul", *kron_shapes(info), dtype=problem.dtype,
                    device=problem.device)[0]
    except (ValueError, KeyError):
        return math.inf, {"reason": "kron_matmul cannot plan it"}
    return best.seconds, {"kron_matmul": best.name, **best.details}
