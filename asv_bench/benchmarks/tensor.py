"""kronlinalg.tensor on the CPU: a mode product, MTTKRP and a CP-ALS iteration at 64³ rank 16,
against the direct NumPy contraction (and TensorLy's where it is installed)."""

from __future__ import annotations

import numpy as np

from kronlinalg import tensor as kt

N, RANK = 64, 16


class TensorCPU:
    params = [["kronlinalg", "numpy"], ["float32", "float64"]]
    param_names = ["impl", "dtype"]

    def setup(self, impl, dtype):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((N, N, N)).astype(dtype)
        self.m = rng.standard_normal((RANK, N)).astype(dtype)
        self.factors = [rng.standard_normal((N, RANK)).astype(dtype) for _ in range(3)]
        self.weights = np.ones(RANK, dtype=dtype)

    def time_mode_dot(self, impl, dtype):
        if impl == "kronlinalg":
            kt.mode_dot(self.x, self.m, 1)
        else:
            np.moveaxis(np.tensordot(self.x, self.m, axes=([1], [1])), -1, 1)

    def time_mttkrp(self, impl, dtype):
        if impl == "kronlinalg":
            kt.unfolding_dot_khatri_rao(self.x, (self.weights, self.factors), 0)
        else:
            np.einsum("ijk,jr,kr->ir", self.x, self.factors[1], self.factors[2], optimize=True)

    def time_parafac_2_iterations(self, impl, dtype):
        if impl == "kronlinalg":
            kt.parafac(self.x, RANK, n_iter_max=2, init="random", random_state=0, tol=0.0)
        else:  # (the same two ALS sweeps written with einsum and solve)
            f = [a.copy() for a in self.factors]
            for _ in range(2):
                for n in range(3):
                    o = [f[i] for i in range(3) if i != n]
                    spec = ["jr,kr->", "ir,kr->", "ir,jr->"][n]
                    sub = "ijk," + spec.split("->")[0] + "->" + "ijk"[n] + "r"
                    m = np.einsum(sub, self.x, *o, optimize=True)
                    g = (o[0].T @ o[0]) * (o[1].T @ o[1])
                    f[n] = np.linalg.solve(g, m.T).T
