"""The planner's picks for batched_matmul and matmul on the CPU, on a grid of shapes held out
from the fit (orders and batch sizes the CPU model was not fitted on).

    OPENBLAS_NUM_THREADS=1 python benchmarks/batched_planner_cpu.py

For each shape: the best-of-5 time of each candidate, the planner's pick, whether the pick is
within 10 % of the fastest, and matmul's time against NumPy's (the "never > 5 % slower" check;
calls of a few microseconds show the Python overhead of the routed call).
"""

import sys
import time

import numpy as np

import kronlinalg


def best(fn, reps=5):
    fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    rng = np.random.default_rng(0)
    rows = []
    for dt in ("float64", "float32"):
        for n in (3, 6, 10, 14, 20, 28, 40, 56, 80, 112, 160):
            for flops in (2e5, 4e6, 3e7):
                batch = max(2, int(flops // (2 * n ** 3)))
                a = rng.standard_normal((batch, n, n)).astype(dt)
                b = rng.standard_normal((batch, n, n)).astype(dt)
                times = {alg: best(lambda: kronlinalg.batched_matmul(a, b, algorithm=alg))
                         for alg in ("blocked", "library")}
                pick = kronlinalg.plan("batched_matmul", a.shape, b.shape, dtype=dt)[0].name
                t_np = best(lambda: np.matmul(a, b))
                t_mm = best(lambda: kronlinalg.matmul(a, b))
                fastest = min(times.values())
                rows.append((dt, n, batch, times, pick, times[pick] <= 1.10 * fastest, t_np, t_mm))
                print(f"{dt} n={n:3d} batch={batch:6d} blocked {times['blocked']*1e6:9.1f} us "
                      f"library {times['library']*1e6:9.1f} us pick {pick:8s} "
                      f"{'ok' if rows[-1][5] else 'MISS'}  matmul/numpy {t_mm / t_np:5.2f}",
                      flush=True)
    ok = sum(r[5] for r in rows)
    slow = sum(r[7] > 1.05 * r[6] for r in rows)
    print(f"planner within 10 % of the fastest: {ok}/{len(rows)}; matmul more than 5 % slower "
          f"than numpy.matmul: {slow}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
