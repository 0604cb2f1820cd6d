"""Small strassen_matmul calls for compute-sanitizer (memcheck / racecheck): every level 0..4,
both dtypes, the three CUDA algorithms (reloaded: float64, one level), odd and unaligned
shapes, overwrite mode.  --leaf: the FP64 leaf of "strassen" only (the CUTLASS mainloop where
built), every level; --quick: fewer calls (racecheck).

    compute-sanitizer --tool memcheck python benchmarks/strassen_sanitize.py [--leaf] [--quick]
"""

import sys

import cupy as cp
import numpy as np

from kronlinalg import strassen

quick = "--quick" in sys.argv  # racecheck: the leaf kernels' shared memory, fewer calls
leaf = "--leaf" in sys.argv  # the FP64 leaf of "strassen" only, levels 0..4
rng = cp.random.default_rng(0)
worst = 0.0
for dtype in ((np.float64,) if leaf else (np.float64, np.float32)):
    for (m, k, n) in ((300, 500, 123), (257, 129, 263))[:1 if quick and leaf else 2]:
        big_a = rng.standard_normal((m + 1, k + 1)).astype(dtype)
        big_b = rng.standard_normal((k + 1, n + 1)).astype(dtype)
        views = ((big_a[:m, :k], big_b[:k, :n]), (big_a[1:, 1:], big_b[1:, 1:]))
        for a, b in views[:1 if quick and leaf else 2]:  # racecheck --leaf: 60 s was too short
            ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
            algos = ("strassen", "strassen_cublas", "strassen_reloaded")
            if quick:
                algos = ("strassen", "strassen_reloaded")
            if leaf:
                algos = ("strassen",)
            for algo in algos:
                if algo == "strassen_reloaded" and dtype != np.float64:
                    continue
                # every level of our kernels; cuBLAS's leaves (slow under the sanitizer) at one
                levels = (2,) if quick and not leaf else (1, 2) if algo == "strassen_cublas" \
                    else range(5)
                for L in ((1,) if algo == "strassen_reloaded" else levels):
                    out = strassen.strassen_matmul(a, b, levels=L, algorithm=algo)
                    err = np.abs(cp.asnumpy(out) - ref).max() / np.abs(ref).max()
                    worst = max(worst, err)
            if not quick:
                a2, b2 = a.copy(), b.copy()
                c = cp.ones((m, n), dtype)
                strassen.strassen_matmul(a2, b2, c=c, beta=0.5, levels=3, overwrite_inputs=True)
cp.cuda.Device().synchronize()
print(f"sanitize script done, worst relative error {worst:.2e}"
      + ("  TOO LARGE for float64" if leaf and worst > 1e-10 else ""))
