"""batched_matmul and matmul on the CPU: stacks of small products against NumPy's matmul (one
BLAS call per matrix), and a variable-size list."""

from __future__ import annotations

import numpy as np

import kronlinalg


class BatchedCPU:
    params = (["float64", "float32"], [4, 16, 32, 64])
    param_names = ["dtype", "order"]

    def setup(self, dtype, order):
        rng = np.random.default_rng(0)
        batch = max(8, 2_000_000 // (2 * order ** 3))
        self.a = rng.standard_normal((batch, order, order)).astype(dtype)
        self.b = rng.standard_normal((batch, order, order)).astype(dtype)

    def time_batched_matmul(self, dtype, order):
        kronlinalg.batched_matmul(self.a, self.b)

    def time_numpy_matmul(self, dtype, order):
        np.matmul(self.a, self.b)

    def time_matmul_routed(self, dtype, order):
        kronlinalg.matmul(self.a, self.b)


class VariableCPU:
    def setup(self):
        rng = np.random.default_rng(0)
        orders = rng.integers(2, 40, 300)
        self.a = [rng.standard_normal((n, n)) for n in orders]
        self.b = [rng.standard_normal((n, n)) for n in orders]

    def time_list(self):
        kronlinalg.batched_matmul(self.a, self.b)

    def time_numpy_loop(self):
        [x @ y for x, y in zip(self.a, self.b)]
