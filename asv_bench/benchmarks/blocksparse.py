"""spmm / spgemm on the CPU: our kernels against scipy.sparse BSR @ dense (the issue's CPU
criterion: >= 3x at density <= 0.1 on 2 cores) and the dense BLAS product.  Small cases: N =
2048, 16 x 16 blocks, random block patterns.  SpmmGPU: N = 16384 on the GPU against dense cuBLAS
and torch BSR (the full GPU comparison is benchmarks/blocksparse_gpu.py)."""

from __future__ import annotations

import numpy as np

import kronlinalg
from kronlinalg import BlockSparseMatrix

from . import gpu_timing


def _matrix(n, density, b=16, seed=0):
    rng = np.random.default_rng(seed)
    R = n // b
    mask = rng.random((R, R)) < density
    a = np.kron(mask, np.ones((b, b))) * rng.standard_normal((n, n))
    return BlockSparseMatrix.from_dense(a, block=b), a


class SpmmCPU:
    params = ([0.05, 0.1, 0.25], [64, 256], ["blocksparse", "scipy_bsr", "dense"])
    param_names = ["density", "rhs", "algorithm"]
    timeout = 120

    def setup(self, density, rhs, algorithm):
        self.A, a = _matrix(2048, density)
        self.x = np.random.default_rng(1).standard_normal((2048, rhs))
        if algorithm == "scipy_bsr":
            bsr = self.A.to_scipy("bsr")
            self.fn = lambda: bsr @ self.x
        elif algorithm == "dense":
            self.fn = lambda: a @ self.x
        else:
            self.fn = lambda: kronlinalg.spmm(self.A, self.x, algorithm="blocksparse")
        self.fn()

    def time_spmm(self, density, rhs, algorithm):
        self.fn()


class SpgemmCPU:
    params = ([0.01, 0.05], ["blocksparse", "scipy_csr"])
    param_names = ["density", "algorithm"]
    timeout = 120

    def setup(self, density, algorithm):
        self.A, a = _matrix(2048, density, seed=2)
        if algorithm == "scipy_csr":
            csr = self.A.to_scipy("csr")
            self.fn = lambda: csr @ csr
        else:
            self.fn = lambda: kronlinalg.spgemm(self.A, self.A, algorithm="blocksparse")
        self.fn()

    def time_spgemm(self, density, algorithm):
        self.fn()


class SpmmGPU:
    """spmm at N = 16384 (16 x 16 blocks, random block patterns) against dense cuBLAS
    (torch.mm) and torch's BSR, torch CUDA tensors: the issue's table, a subset."""

    params = ([0.05, 0.1], [64, 256], ["float16", "float32"], ["kronlinalg", "dense", "torch_bsr"])
    param_names = ["density", "rhs", "dtype", "algorithm"]
    timeout = 300
    n = 16384

    def setup(self, density, rhs, dtype, algorithm):
        self.torch = torch = gpu_timing.cuda_torch()
        n, b = self.n, 16
        g = torch.Generator(device="cuda").manual_seed(0)
        mask = torch.rand((n // b, n // b), generator=g, device="cuda") < density
        dense = (gpu_timing.randn(torch, (n, n), dtype, 1)
                 * mask.repeat_interleave(b, 0).repeat_interleave(b, 1).to(getattr(torch, dtype)))
        self.x = gpu_timing.randn(torch, (n, rhs), dtype, 2)
        if algorithm == "dense":
            self.fn = lambda: dense @ self.x
        elif algorithm == "torch_bsr":
            bsr = dense.to_sparse_bsr((b, b))
            self.fn = lambda: bsr @ self.x
        else:
            A = BlockSparseMatrix.from_dense(dense, block=b)
            del dense
            self.fn = lambda: kronlinalg.spmm(A, self.x)
        self.fn()
        torch.cuda.synchronize()

    def teardown(self, density, rhs, dtype, algorithm):
        self.fn = self.x = None
        gpu_timing.free(self.torch)

    def track_gpu_ms(self, density, rhs, dtype, algorithm):
        return gpu_timing.event_ms(self.torch, self.fn)

    track_gpu_ms.unit = "ms"


def _batched(batch, order, density, dtype="float64", seed=3):
    """A stack sharing one random block pattern (16 x 16 blocks), as NumPy."""
    rng = np.random.default_rng(seed)
    q = order // 16
    mask = rng.random((q, q)) < density
    return (np.kron(mask, np.ones((16, 16)))[None]
            * rng.standard_normal((batch, order, order))).astype(dtype)


class SpmmBatchedCPU:
    """spmm_batched on the CPU (gather and dense paths) against NumPy's batched matmul."""

    params = ([64, 128], ["gather", "dense", "numpy"])
    param_names = ["order", "algorithm"]
    timeout = 120

    def setup(self, order, algorithm):
        a = _batched(256, order, 0.5)
        self.x = np.random.default_rng(4).standard_normal((256, order, 32))
        if algorithm == "numpy":
            self.fn = lambda: a @ self.x
        else:
            A = kronlinalg.BatchedBlockSparseMatrix.from_dense(a)
            self.fn = lambda: kronlinalg.spmm_batched(A, self.x, algorithm=algorithm)
        self.fn()

    def time_spmm_batched(self, order, algorithm):
        self.fn()


class SpmmBatchedGPU:
    """spmm_batched, batch 10^4, FP16, 50 % block density: the batched kernel against torch.bmm
    of the dense stacks (the issue's case RHS = order, and a narrow RHS)."""

    params = ([64, 256], [32, "order"], ["kronlinalg", "bmm"])
    param_names = ["order", "rhs", "algorithm"]
    timeout = 300

    def setup(self, order, rhs, algorithm):
        self.torch = torch = gpu_timing.cuda_torch()
        n = order if rhs == "order" else rhs
        a = torch.from_numpy(_batched(10_000, order, 0.5, "float32")).to("cuda", torch.float16)
        self.x = gpu_timing.randn(torch, (10_000, order, n), "float16", 5)
        if algorithm == "bmm":
            self.fn = lambda: torch.bmm(a, self.x)
        else:
            A = kronlinalg.BatchedBlockSparseMatrix.from_dense(a)
            del a
            self.fn = lambda: kronlinalg.spmm_batched(A, self.x, algorithm="blocksparse")
        self.fn()
        torch.cuda.synchronize()

    def teardown(self, order, rhs, algorithm):
        self.fn = self.x = None
        gpu_timing.free(self.torch)

    def track_gpu_ms(self, order, rhs, algorithm):
        return gpu_timing.event_ms(self.torch, self.fn)

    track_gpu_ms.unit = "ms"
