"""The planner's view of kronlinalg.distributed: two operations with their candidates.

- "distributed_kron_matmul": shapes x's global (M, K), then each factor (P, Q); options
  ranks (default 1), grid (default: the cost model's), latency_s, bandwidth (default: the
  calibrated or table link).  Candidates "fastkron" and "per_factor".
- "distributed_matmul": shapes a (m, k), b (k, n); options ranks, latency_s, bandwidth.
  Candidates "strassen_winograd" and "classical".

    >>> import kronlinalg
    >>> kronlinalg.plan("distributed_kron_matmul", (4096, 4096), (8, 8), (8, 8), (8, 8),
    ...                 (8, 8), dtype="float32", ranks=4)[0].name
    'fastkron'
"""

from __future__ import annotations

from .. import planner
from ..planner.costs import distributed as costs
from .kron import kron_matmul
from .strassen import strassen_matmul

_KRON_OPTIONS = ("ranks", "grid", "latency_s", "bandwidth")
_MATMUL_OPTIONS = ("ranks", "latency_s", "bandwidth")


def _kron_predict(per_factor):
    def predict(problem, prof):
        info, opt = problem.info, problem.options
        ranks = int(opt.get("ranks", 1))
        grid = opt.get("grid") or costs.choose_grid(
            info["m"], info["factors"], ranks, problem.dtype, problem.device, problem.kind,
            opt.get("latency_s"), opt.get("bandwidth"), prof)
        return costs.predict_kron(info["m"], info["factors"], tuple(grid), problem.dtype,
                                  problem.device, problem.kind, opt.get("latency_s"),
                                  opt.get("bandwidth"), per_factor, prof)

    return predict


def _kron_run(algorithm):
    def run(x, factors, /, **options):
        return kron_matmul(x, factors, algorithm=algorithm, **options)

    return run


def _matmul_predict(n_products, additions, leaf_op):
    def predict(problem, prof):
        info, opt = problem.info, problem.options
        if info["m"] % 2 or info["k"] % 2 or info["n"] % 2:
            import math

            return math.inf, {"reason": "m, k and n must be even"}
        return costs.predict_matmul(info["m"], info["k"], info["n"], int(opt.get("ranks", 1)),
                                    n_products, problem.dtype, problem.device, problem.kind,
                                    opt.get("latency_s"), opt.get("bandwidth"), prof, additions,
                                    leaf_op)

    return predict


def _matmul_run(algorithm):
    def run(a, b, /, **options):
        return strassen_matmul(a, b, algorithm=algorithm, **options)

    return run


planner.register_op("distributed_kron_matmul", costs.normalise_kron,
                    "Kron-Matmul over ranks (kronlinalg.distributed)", options=_KRON_OPTIONS)
planner.register_op("distributed_matmul", costs.normalise_matmul,
                    "matmul over ranks (kronlinalg.distributed)", options=_MATMUL_OPTIONS)
for _name, _pf in (("fastkron", False), ("per_factor", True)):
    planner.register("distributed_kron_matmul", planner.Candidate(
        _name, _kron_predict(_pf), devices=("cpu", "cuda"), run=_kron_run(_name),
        family=f"distributed/{_name}"))
# (each with its default leaf: Strassen–Winograd's pieces through strassen_matmul, the classical
# split's through the library GEMM)
for _name, _np, _adds, _leaf in (("strassen_winograd", 7, 15, "strassen_matmul"),
                                 ("classical", 8, 4, "matmul")):
    planner.register("distributed_matmul", planner.Candidate(
        _name, _matmul_predict(_np, _adds, _leaf), devices=("cpu", "cuda"),
        run=_matmul_run(_name),
        family=f"distributed/{_name}"))
