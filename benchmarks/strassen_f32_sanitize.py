"""compute-sanitizer memcheck of strassen_cublas in float32 (Winograd's form at one and two
levels, and with beta the sums form / private copy), odd and unaligned shapes, CuPy arrays:

    compute-sanitizer --tool memcheck python benchmarks/strassen_f32_sanitize.py
"""

import cupy as cp
import numpy as np

import kronlinalg

rng = cp.random.default_rng(1)
worst = 0.0
for m, k, n in ((130, 66, 70), (257, 129, 263)):
    big_a = rng.standard_normal((m + 1, k + 1), dtype=cp.float32)
    big_b = rng.standard_normal((k + 1, n + 1), dtype=cp.float32)
    c = rng.standard_normal((m, n), dtype=cp.float32)
    for o in (0, 1):
        a, b = big_a[o:o + m, o:o + k], big_b[o:o + k, o:o + n]
        for beta in (0.0, -0.3):
            ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b) + beta * cp.asnumpy(c)
            for L in (1, 2):
                out = kronlinalg.strassen_matmul(a, b, c=c, beta=beta, levels=L,
                                                 algorithm="strassen_cublas")
                worst = max(worst, float(np.abs(cp.asnumpy(out) - ref).max() / np.abs(ref).max()))
print(f"float32 sanitize script done, worst relative error {worst:.2e}"
      + ("  TOO LARGE" if worst > 1e-4 else ""))
