"""strassen_matmul on the CPU: levels 0..2 against NumPy's matmul on small squares and one odd
rectangle (the full GPU comparison is benchmarks/strassen_gpu.py)."""

from __future__ import annotations

import numpy as np

from kronlinalg import strassen_matmul

SHAPES = {"512": ((512, 512), (512, 512)), "1024": ((1024, 1024), (1024, 1024)),
          "300x500x123": ((300, 500), (500, 123))}


class StrassenCPU:
    params = [list(SHAPES), ["numpy", "strassen_l1", "strassen_l2", "strassen_l2_overwrite"],
              ["float32", "float64"]]
    param_names = ["shape", "algorithm", "dtype"]

    def setup(self, shape, algorithm, dtype):
        rng = np.random.default_rng(0)
        sa, sb = SHAPES[shape]
        self.a = rng.standard_normal(sa).astype(dtype)
        self.b = rng.standard_normal(sb).astype(dtype)

    def time_matmul(self, shape, algorithm, dtype):
        if algorithm == "numpy":
            self.a @ self.b
        elif algorithm == "strassen_l1":
            strassen_matmul(self.a, self.b, levels=1)
        elif algorithm == "strassen_l2":
            strassen_matmul(self.a, self.b, levels=2)
        else:
            strassen_matmul(self.a, self.b, levels=2, overwrite_inputs=True)
