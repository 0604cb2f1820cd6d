"""kron_matmul: the sliced-multiply kernel and the shuffle algorithm, CPU and GPU.

Shapes follow the shared benchmark sets (/work/shared/bench/cases.json): ``kron_large``
(FastKron's sizes, with M scaled down so a CPU case stays within ~2^22 elements of x) and
``kron_small`` (latency-bound shapes, as given).  GPU classes use the full ``kron_large`` sizes
where they fit and skip (NotImplementedError in setup) without a CuPy-visible GPU.
"""

from __future__ import annotations

import math

import numpy as np

import kronlinalg
from kronlinalg.planner import kron_flops

# name -> (M, factor shapes)
KRON_LARGE_CPU = {
    "8^6": (16, [(8, 8)] * 6),
    "16^4": (32, [(16, 16)] * 4),
    "32^3": (64, [(32, 32)] * 3),
    "64^3": (16, [(64, 64)] * 3),
}
KRON_LARGE_GPU = {
    "8^6": (1024, [(8, 8)] * 6),
    "16^5": (1024, [(16, 16)] * 5),
    "32^4": (1024, [(32, 32)] * 4),
    "64^3": (1024, [(64, 64)] * 3),
    "8^8,M16": (16, [(8, 8)] * 8),
}
KRON_SMALL = {
    "2x2^10": (16, [(2, 2)] * 10),
    "4x4^5": (64, [(4, 4)] * 5),
    "8x8^3": (8, [(8, 8)] * 3),
    "3x3^6": (32, [(3, 3)] * 6),
    "16x16^3": (4, [(16, 16)] * 3),
    "5x7,3x2,11x4": (128, [(5, 7), (3, 2), (11, 4)]),
}



def _inputs(xp, m, shapes, dtype, seed=0):
    # (CuPy: drawn on the device — the GPU's kron_large x is up to 8 GB, minutes from the host)
    rng = xp.random.default_rng(seed) if xp is not np else np.random.default_rng(seed)
    k = math.prod(p for p, _ in shapes)
    x = xp.asarray(rng.standard_normal((m, k)), dtype=dtype)
    fs = [xp.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]
    return x, fs


class _KronCPU:
    param_names = ["case", "dtype", "algorithm"]
    cases: dict = {}
    timeout = 120

    def setup(self, case, dtype, algorithm):
        m, shapes = self.cases[case]
        self.x, self.fs = _inputs(np, m, shapes, dtype)
        self.algorithm = algorithm
        self.flop = kron_flops(m, shapes)
        kronlinalg.kron_matmul(self.x, self.fs, algorithm=algorithm)  # warm-up

    def time_kron_matmul(self, case, dtype, algorithm):
        kronlinalg.kron_matmul(self.x, self.fs, algorithm=self.algorithm)

    def time_kron_matmul_left(self, case, dtype, algorithm):
        kronlinalg.kron_matmul(self.x.T, [f.T for f in self.fs], side="left",
                               algorithm=self.algorithm)

    def peakmem_kron_matmul(self, case, dtype, algorithm):
        kronlinalg.kron_matmul(self.x, self.fs, algorithm=self.algorithm)


class KronLargeCPU(_KronCPU):
    cases = KRON_LARGE_CPU
    params = [list(KRON_LARGE_CPU), ["float32", "float64"], ["sliced", "shuffle"]]


class KronSmallCPU(_KronCPU):
    cases = KRON_SMALL
    params = [list(KRON_SMALL), ["float32", "float64"], ["sliced", "shuffle"]]


def _cupy_or_skip():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:
        pass
    raise NotImplementedError("no CUDA GPU visible to CuPy")


class _KronGPU:
    param_names = ["case", "dtype", "algorithm"]
    cases: dict = {}
    timeout = 300

    def setup(self, case, dtype, algorithm):
        cp = _cupy_or_skip()
        m, shapes = self.cases[case]
        self.cp = cp
        self.x, self.fs = _inputs(cp, m, shapes, dtype)
        self.algorithm = algorithm
        kronlinalg.kron_matmul(self.x, self.fs, algorithm=algorithm)  # warm-up, kernel load
        cp.cuda.get_current_stream().synchronize()

    def time_kron_matmul(self, case, dtype, algorithm):
        kronlinalg.kron_matmul(self.x, self.fs, algorithm=self.algorithm)
        self.cp.cuda.get_current_stream().synchronize()

    def track_gpu_ms(self, case, dtype, algorithm):
        """Median device time of 10 calls, by CUDA events (no host overhead)."""
        cp = self.cp
        times = []
        for _ in range(10):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            kronlinalg.kron_matmul(self.x, self.fs, algorithm=self.algorithm)
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop))
        return float(np.median(times))

    track_gpu_ms.unit = "ms"


class KronLargeGPU(_KronGPU):
    cases = KRON_LARGE_GPU
    params = [list(KRON_LARGE_GPU), ["float32", "float64"], ["sliced", "shuffle"]]


class KronSmallGPU(_KronGPU):
    cases = KRON_SMALL
    params = [list(KRON_SMALL), ["float16", "float32", "float64"], ["sliced", "shuffle"]]
