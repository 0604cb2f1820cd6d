"""spmm / spgemm on the CPU: our kernels against scipy.sparse BSR @ dense (the issue's CPU
criterion: >= 3x at density <= 0.1 on 2 cores) and the dense BLAS product.  Small cases: N =
2048, 16 x 16 blocks, random block patterns.  The GPU comparison is
benchmarks/blocksparse_gpu.py."""

from __future__ import annotations

import numpy as np

import kronlinalg
from kronlinalg import BlockSparseMatrix


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
