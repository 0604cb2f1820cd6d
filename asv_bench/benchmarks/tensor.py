"""kronlinalg.tensor on the CPU: a mode product, MTTKRP and a CP-ALS iteration at 64³ rank 16,
against the direct NumPy contraction (and TensorLy's where it is installed); TensorGPU: the
issue's 640³ rank-64 CP-ALS, MTTKRP and Tucker on torch CUDA."""

from __future__ import annotations

import numpy as np

from kronlinalg import tensor as kt

from . import gpu_timing

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
        # (each timed call once first, both sides: asv --quick times a single call, and the
        # first call of the process pays one-time costs — ~30 ms on kronlinalg's side — that a
        # user's loop never sees again)
        self.time_mode_dot(impl, dtype)
        self.time_mttkrp(impl, dtype)

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


class TensorGPU:
    """The issue's CP-ALS problem on the GPU (torch CUDA, 640³ float32, rank 64): ten ALS
    iterations (time per call / 10 is the per-iteration figure), MTTKRP of mode 0 and a Tucker
    (HOSVD + HOOI) of rank 64³."""

    params = [["float32"]]
    param_names = ["dtype"]
    timeout = 300
    n, rank = 640, 64

    def setup(self, dtype):
        self.torch = torch = gpu_timing.cuda_torch()
        n, r = self.n, self.rank
        self.x = gpu_timing.randn(torch, (n, n, n), dtype, 1)
        self.factors = [gpu_timing.randn(torch, (n, r), dtype, 2 + i) for i in range(3)]
        self.weights = torch.ones(r, device="cuda", dtype=getattr(torch, dtype))
        self.cp = lambda: kt.parafac(self.x, r, n_iter_max=10, init="random", random_state=0,
                                     tol=0.0)
        self.cp()
        torch.cuda.synchronize()

    def teardown(self, dtype):
        self.x = self.factors = None
        gpu_timing.free(self.torch)

    def track_parafac_ms_per_iteration(self, dtype):
        return gpu_timing.event_ms(self.torch, self.cp, reps=3) / 10

    track_parafac_ms_per_iteration.unit = "ms"

    def track_mttkrp_ms(self, dtype):
        return gpu_timing.event_ms(self.torch, lambda: kt.unfolding_dot_khatri_rao(
            self.x, (self.weights, self.factors), 0))

    track_mttkrp_ms.unit = "ms"

    def track_tucker_ms(self, dtype):
        return gpu_timing.event_ms(self.torch, lambda: kt.tucker(
            self.x, (64, 64, 64), n_iter_max=2, init="svd", tol=0.0), reps=3)

    track_tucker_ms.unit = "ms"
