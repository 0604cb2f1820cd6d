"""matmul's candidates.  Today only the array library's own matmul (BLAS / cuBLAS); Strassen and
batched small GEMM register here when their kernels land."""

from __future__ import annotations

import math

from ..roofline import roofline
from ..registry import Candidate, register, register_op

from ...common.dtypes import ITEMSIZE as _ITEMSIZE


def normalise(shapes, options) -> dict:
    """batch, m, k, n of a matmul with array-API semantics (1-D operands promoted, batch dims
    broadcast)."""
    if len(shapes) != 2:
        raise ValueError(f"shapes: matmul takes two shapes (a, b), got {len(shapes)}")
    a, b = shapes
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"shapes: matmul operands must have at least one dimension, got {a}, {b}")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ValueError(f"shapes: a's last dimension ({a2[-1]}) must equal b's contracted "
                         f"dimension ({b2[-2]})")
    batch_a, batch_b = a2[:-2], b2[:-2]
    nd = max(len(batch_a), len(batch_b))
    batch_a = (1,) * (nd - len(batch_a)) + batch_a
    batch_b = (1,) * (nd - len(batch_b)) + batch_b
    batch = []
    for x, y in zip(batch_a, batch_b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes: batch dimensions {a2[:-2]} and {b2[:-2]} do not broadcast")
        batch.append(max(x, y))
    m, k, n = a2[-2], a2[-1], b2[-1]
    nb = math.prod(batch)
    return {"batch": nb, "m": m, "k": k, "n": n, "flops": 2.0 * nb * m * n * k,
            "elements": nb * (m * k + k * n + m * n)}


def _predict_library(problem, prof):
    info = problem.info
    s_e = _ITEMSIZE.get(problem.dtype, 4)
    nbytes = info["elements"] * s_e
    seconds = roofline(info["flops"], nbytes, prof.flops(problem.dtype), prof.bandwidth,
                       prof.launch_s)
    return seconds, {"flops": info["flops"], "bytes": nbytes,
                     "terms": {"flop": info["flops"] / prof.flops(problem.dtype),
                               "mem": nbytes / prof.bandwidth, "call": prof.launch_s}}


def _run_library(a, b, /):
    import array_api_compat

    return array_api_compat.array_namespace(a, b).matmul(a, b)


register_op("matmul", normalise, "a @ b with array-API semantics; shapes: a, b")
register("matmul", Candidate(
    "library", _predict_library, devices=("cpu", "cuda"), run=_run_library,
    family="matmul/library", doc="the array library's matmul (BLAS on CPU, cuBLAS on CUDA)"))
