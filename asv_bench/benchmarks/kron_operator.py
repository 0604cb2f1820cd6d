"""KroneckerOperator on the CPU (NumPy): a repeated solve with a noise shift, logdet and the
first solve (its per-factor eigendecompositions included) on a 32 x 32 x 16 grid, against
the dense Cholesky solve of a 16 x 16 x 8 grid for scale; KroneckerOperatorGPU: matmul, solve
and logdet on torch CUDA."""

from __future__ import annotations

import numpy as np

from kronlinalg import KroneckerOperator

from . import gpu_timing


def _spd(rng, n, dtype):
    a = rng.standard_normal((n, n))
    return (a @ a.T / n + 0.5 * np.eye(n)).astype(dtype)


class KroneckerOperatorCPU:
    params = [["float32", "float64"]]
    param_names = ["dtype"]

    def setup(self, dtype):
        rng = np.random.default_rng(0)
        self.factors = [_spd(rng, n, dtype) for n in (32, 32, 16)]
        self.op = KroneckerOperator(self.factors)
        self.b = rng.standard_normal((32 * 32 * 16, 1)).astype(dtype)
        self.op.solve(self.b, 0.1)  # the decompositions, cached
        small = [_spd(rng, n, dtype) for n in (16, 16, 8)]
        self.dense = KroneckerOperator(small).to_dense() + 0.1 * np.eye(2048, dtype=dtype)
        self.b_small = self.b[:2048]

    def time_solve_repeated(self, dtype):
        self.op.solve(self.b, 0.1)

    def time_solve_first(self, dtype):
        KroneckerOperator(self.factors).solve(self.b, 0.1)

    def time_logdet(self, dtype):
        self.op.logdet(0.1)

    def time_dense_cholesky_solve_2048(self, dtype):
        c = np.linalg.cholesky(self.dense)
        np.linalg.solve(c.T, np.linalg.solve(c, self.b_small))


class KroneckerOperatorGPU:
    """KroneckerOperator on torch CUDA, float64, a 32³ grid: matmul, the repeated solve with a
    noise shift (the decompositions cached) and logdet — the issue's GP workload."""

    params = [["float64", "float32"]]
    param_names = ["dtype"]
    timeout = 300

    def setup(self, dtype):
        import numpy as np

        self.torch = torch = gpu_timing.cuda_torch()
        rng = np.random.default_rng(0)
        tdt = getattr(torch, dtype)
        self.factors = [torch.as_tensor(_spd(rng, 32, "float64"), device="cuda").to(tdt)
                        for _ in range(3)]
        self.op = KroneckerOperator(self.factors)
        self.b = gpu_timing.randn(torch, (32 ** 3, 1), dtype, 1)
        self.op.solve(self.b, 0.1)
        torch.cuda.synchronize()

    def teardown(self, dtype):
        self.op = self.factors = self.b = None
        gpu_timing.free(self.torch)

    def track_matmul_ms(self, dtype):
        return gpu_timing.event_ms(self.torch, lambda: self.op @ self.b)

    track_matmul_ms.unit = "ms"

    def track_solve_repeated_ms(self, dtype):
        return gpu_timing.event_ms(self.torch, lambda: self.op.solve(self.b, 0.1))

    track_solve_repeated_ms.unit = "ms"

    def track_logdet_ms(self, dtype):
        return gpu_timing.event_ms(self.torch, lambda: self.op.logdet(0.1))

    track_logdet_ms.unit = "ms"
