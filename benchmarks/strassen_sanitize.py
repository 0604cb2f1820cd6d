"""Small strassen_matmul calls for compute-sanitizer (memcheck / racecheck): every level 0..4,
both dtypes, the three CUDA algorithms (reloaded: float64, one level), odd and unaligned
shapes, overwrite mode.  --leaf: the FP64 leaf of "strassen" only (the CUTLASS mainloop where
built), every level; --quick: fewer calls (racecheck); --tiny (with --leaf): one 130x66x70
problem at levels 0..2 - a few CTAs a launch, enough for racecheck (its hazards are within one
CTA's shared memory) and well under a minute; --cublas: strassen_cublas at one level in both
forms (Winograd's, with its sums on a side stream, and the sums form:
KRONLINALG_STRASSEN_WINOGRAD 1, 2, 0) and at two levels (Winograd's form in each, the private copy),
odd and unaligned shapes (memcheck of the passes and the target kernel).

    compute-sanitizer --tool memcheck python benchmarks/strassen_sanitize.py [--leaf] [--quick]
    compute-sanitizer --tool racecheck python benchmarks/strassen_sanitize.py --leaf --tiny
"""

import os
import sys

import cupy as cp
import numpy as np

from kronlinalg import strassen

quick = "--quick" in sys.argv  # racecheck: the leaf kernels' shared memory, fewer calls
leaf = "--leaf" in sys.argv  # the FP64 leaf of "strassen" only, levels 0..4
tiny = "--tiny" in sys.argv  # with --leaf: 130x66x70, levels 0..2 (racecheck in < 60 s)
# --levels=3,4: the tiny problem's levels instead of 0..2 (a racecheck run of its own: level 4
# is 7^4 leaf products of 8x4x4)
tiny_levels = next((tuple(int(v) for v in x.split("=", 1)[1].split(",")) for x in sys.argv
                    if x.startswith("--levels=")), (0, 1, 2))
cublas = "--cublas" in sys.argv  # strassen_cublas's one-level forms and two levels
rng = cp.random.default_rng(0)
worst = 0.0


def check(out, ref):
    global worst
    err = np.abs(cp.asnumpy(out) - ref).max() / np.abs(ref).max()
    worst = max(worst, err)


if cublas:
    for (m, k, n) in ((130, 66, 70), (257, 129, 263)):
        big_a = rng.standard_normal((m + 1, k + 1))
        big_b = rng.standard_normal((k + 1, n + 1))
        for o in (0, 1):
            a, b = big_a[o:o + m, o:o + k], big_b[o:o + k, o:o + n]
            ref = cp.asnumpy(a) @ cp.asnumpy(b)
            for form in ("1", "2", "0"):
                os.environ["KRONLINALG_STRASSEN_WINOGRAD"] = form
                check(strassen.strassen_matmul(a, b, levels=1, algorithm="strassen_cublas"), ref)
            if o == 0:  # two levels (Winograd's form in each, and the private copy): 49
                for form in ("1", "0"):  # cuBLAS leaves each, slow under memcheck
                    os.environ["KRONLINALG_STRASSEN_WINOGRAD"] = form
                    check(strassen.strassen_matmul(a, b, levels=2,
                                                   algorithm="strassen_cublas"), ref)
elif leaf and tiny:
    a = rng.standard_normal((130, 66))
    b = rng.standard_normal((66, 70))
    ref = cp.asnumpy(a) @ cp.asnumpy(b)
    for L in tiny_levels:
        check(strassen.strassen_matmul(a, b, levels=L, algorithm="strassen"), ref)
else:
    for dtype in ((np.float64,) if leaf else (np.float64, np.float32)):
        for (m, k, n) in ((300, 500, 123), (257, 129, 263))[:1 if quick and leaf else 2]:
            big_a = rng.standard_normal((m + 1, k + 1)).astype(dtype)
            big_b = rng.standard_normal((k + 1, n + 1)).astype(dtype)
            views = ((big_a[:m, :k], big_b[:k, :n]), (big_a[1:, 1:], big_b[1:, 1:]))
            for a, b in views[:1 if quick and leaf else 2]:  # racecheck --leaf: 60 s too short
                ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
                algos = ("strassen", "strassen_cublas", "strassen_reloaded")
                if quick:
                    algos = ("strassen", "strassen_reloaded")
                if leaf:
                    algos = ("strassen",)
                for algo in algos:
                    if algo == "strassen_reloaded" and dtype != np.float64:
                        continue
                    # every level of our kernels; cuBLAS's leaves (slow under the sanitizer) at 1
                    levels = (2,) if quick and not leaf else (1, 2) if algo == "strassen_cublas" \
                        else range(5)
                    for L in ((1,) if algo == "strassen_reloaded" else levels):
                        check(strassen.strassen_matmul(a, b, levels=L, algorithm=algo), ref)
                if not quick:
                    a2, b2 = a.copy(), b.copy()
                    c = cp.ones((m, n), dtype)
                    strassen.strassen_matmul(a2, b2, c=c, beta=0.5, levels=3,
                                             overwrite_inputs=True)
cp.cuda.Device().synchronize()
print(f"sanitize script done, worst relative error {worst:.2e}"
      + ("  TOO LARGE for float64" if (leaf or cublas) and worst > 1e-10 else ""))
