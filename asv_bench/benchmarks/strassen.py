"""strassen_matmul on the CPU: levels 0..2 against NumPy's matmul on small squares and one odd
rectangle; on the GPU (StrassenGPU) against cuBLAS at N = 4096 and 8192 (the full GPU
comparison is benchmarks/strassen_gpu.py)."""

from __future__ import annotations

import array_api_compat
import numpy as np

from kronlinalg import strassen_matmul

from . import gpu_timing

# A process's first call on NumPy arrays imports array_api_compat's NumPy namespace (~35 ms,
# once); --quick's single sample would time that instead of the operation, so the module does
# it (the CPU points before ba86556 had it done by the run's other imports).
array_api_compat.array_namespace(np.empty(0))

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


class StrassenGPU:
    """strassen_matmul against cuBLAS (torch.matmul) on the H100 sizes of the issue's table:
    the planner's choice (levels=None), one level forced, and cuBLAS."""

    params = [[4096, 8192], ["float64", "float32"], ["cublas", "auto", "levels_1"]]
    param_names = ["n", "dtype", "algorithm"]
    timeout = 300

    def setup(self, n, dtype, algorithm):
        self.torch = torch = gpu_timing.cuda_torch()
        self.a = gpu_timing.randn(torch, (n, n), dtype, 1)
        self.b = gpu_timing.randn(torch, (n, n), dtype, 2)
        if algorithm == "cublas":  # (torch's default float32 matmul is IEEE, as our leaves)
            self.fn = lambda: self.a @ self.b
        else:
            levels = 1 if algorithm == "levels_1" else None
            self.fn = lambda: strassen_matmul(self.a, self.b, levels=levels)
        self.fn()
        torch.cuda.synchronize()

    def teardown(self, n, dtype, algorithm):
        self.a = self.b = None
        gpu_timing.free(self.torch)

    def track_gpu_ms(self, n, dtype, algorithm):
        return gpu_timing.event_ms(self.torch, self.fn, reps=5)

    track_gpu_ms.unit = "ms"
