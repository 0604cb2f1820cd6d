"""batched_matmul and matmul on the CPU: stacks of small products against NumPy's matmul (one
BLAS call per matrix), and a variable-size list; on the GPU (BatchedGPU) against torch.bmm."""

from __future__ import annotations

import array_api_compat
import numpy as np

import kronlinalg

from . import gpu_timing

# A process's first call on NumPy arrays imports array_api_compat's NumPy namespace (~35 ms,
# once); --quick's single sample would time that instead of the operation, so the module does
# it (the CPU points before ba86556 had it done by the run's other imports).
array_api_compat.array_namespace(np.empty(0))


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


class BatchedGPU:
    """batched_matmul (the planner's choice) against torch.bmm (cuBLAS strided-batched) on the
    issue's batch-10⁴ stacks; track_tbps is the bytes moved (a, b read, c written) per second."""

    params = [[16, 32, 64], ["float64", "float32", "float16"], ["kronlinalg", "torch_bmm"]]
    param_names = ["order", "dtype", "algorithm"]
    timeout = 300
    batch = 10_000

    def setup(self, order, dtype, algorithm):
        self.torch = torch = gpu_timing.cuda_torch()
        shape = (self.batch, order, order)
        self.a = gpu_timing.randn(torch, shape, dtype, 1)
        self.b = gpu_timing.randn(torch, shape, dtype, 2)
        self.bytes = 3 * self.a.numel() * self.a.element_size()
        self.fn = ((lambda: torch.bmm(self.a, self.b)) if algorithm == "torch_bmm" else
                   (lambda: kronlinalg.batched_matmul(self.a, self.b)))
        self.fn()
        torch.cuda.synchronize()

    def teardown(self, order, dtype, algorithm):
        self.a = self.b = None
        gpu_timing.free(self.torch)

    def track_gpu_us(self, order, dtype, algorithm):
        return 1e3 * gpu_timing.event_ms(self.torch, self.fn)

    track_gpu_us.unit = "us"

    def track_tbps(self, order, dtype, algorithm):
        return self.bytes / (gpu_timing.event_ms(self.torch, self.fn) * 1e-3) / 1e12

    track_tbps.unit = "TB/s"
