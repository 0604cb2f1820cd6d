"""CUDA kron_matmul on the full shared benchmark sets (the cases of
benchmarks/kron_gpu_compare.py): fused CUDA kernels against the CuPy shuffle algorithm, float32
and float64 on CuPy arrays, bfloat16 (tensor cores) on torch tensors.  float32 runs in the
default mode (3xTF32 tensor cores where the factors allow; contiguous x with P x P factors,
P = 8 ... 64, on the natural-order kernel), as "float32-ieee" (CUDA-core FMAs,
``kron.float32_precision("ieee")``: the baseline of the bfloat16 tensor cores) and as
"float32-no-natural" (``KRONLINALG_KRON_NATURAL=0``: the fused tensor-core kernel that the
natural-order one replaced, for the A/B in one run).

GPU only: setup raises NotImplementedError when no CUDA device is visible.  Device time is
tracked with CUDA events (``track_*_ms``, median of 10 after a warm-up), next to asv's own
wall-clock ``time_*``; ``track_tflops`` and ``track_speedup_over_shuffle`` are the figures the
README's performance table reports.
"""

from __future__ import annotations

import math
import os
import statistics

import kronlinalg
from kronlinalg.kron import float32_precision
from kronlinalg.planner import kron_flops

# name -> (M, factor shapes), as in /work/shared/bench/cases.json
KRON_LARGE = {
    "1024x8^6": (1024, [(8, 8)] * 6),
    "1024x8^7": (1024, [(8, 8)] * 7),
    "1024x16^5": (1024, [(16, 16)] * 5),
    "1024x32^4": (1024, [(32, 32)] * 4),
    "1024x64^3": (1024, [(64, 64)] * 3),
    "1024x128^3": (1024, [(128, 128)] * 3),
    "16x8^8": (16, [(8, 8)] * 8),
    "16x16^6": (16, [(16, 16)] * 6),
    "16x32^5": (16, [(32, 32)] * 5),
    "16x64^4": (16, [(64, 64)] * 4),
}
KRON_SMALL = {
    "16x2x2^10": (16, [(2, 2)] * 10),
    "64x4x4^5": (64, [(4, 4)] * 5),
    "8x8x8^3": (8, [(8, 8)] * 3),
    "32x3x3^6": (32, [(3, 3)] * 6),
    "4x16x16^3": (4, [(16, 16)] * 3),
    "128x5x7,3x2,11x4": (128, [(5, 7), (3, 2), (11, 4)]),
}



class _Gpu:
    """CuPy for float32/float64, torch for bfloat16; raises NotImplementedError without a GPU."""

    def __init__(self, dtype):
        try:
            if dtype == "bfloat16":
                import torch

                if not torch.cuda.is_available():
                    raise RuntimeError
                self.torch, self.cupy = torch, None
            else:
                import cupy

                if cupy.cuda.runtime.getDeviceCount() == 0:
                    raise RuntimeError
                self.torch, self.cupy = None, cupy
        except Exception as err:  # noqa: BLE001
            raise NotImplementedError("no CUDA GPU visible") from err
        self.dtype = dtype

    def randn(self, shape, seed):
        if self.torch is not None:
            g = self.torch.Generator(device="cuda").manual_seed(seed)
            return self.torch.randn(shape, generator=g, device="cuda").to(self.torch.bfloat16)
        return self.cupy.random.RandomState(seed).standard_normal(shape, dtype=self.dtype)

    def sync(self):
        if self.torch is not None:
            self.torch.cuda.synchronize()
        else:
            self.cupy.cuda.runtime.deviceSynchronize()

    def event_ms(self, fn, reps=10):
        times = []
        for _ in range(reps):
            if self.torch is not None:
                a = self.torch.cuda.Event(enable_timing=True)
                b = self.torch.cuda.Event(enable_timing=True)
            else:
                a, b = self.cupy.cuda.Event(), self.cupy.cuda.Event()
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) if self.torch is not None
                         else self.cupy.cuda.get_elapsed_time(a, b))
        return statistics.median(times)

    def free(self):
        self.sync()
        if self.torch is not None:
            self.torch.cuda.empty_cache()
        else:
            self.cupy.get_default_memory_pool().free_all_blocks()


class _KronGpuSet:
    param_names = ["case", "dtype"]
    cases: dict = {}
    timeout = 600

    def setup(self, case, dtype):
        self.gpu = _Gpu(dtype.split("-")[0])
        self.prev_fp32 = float32_precision("ieee") if dtype == "float32-ieee" else None
        # (read when a plan is made; the plan cache keys on it)
        self.prev_natural = os.environ.get("KRONLINALG_KRON_NATURAL")
        if dtype == "float32-no-natural":
            os.environ["KRONLINALG_KRON_NATURAL"] = "0"
        m, shapes = self.cases[case]
        k = math.prod(p for p, _ in shapes)
        self.flops = kron_flops(m, shapes)
        try:
            self.x = self.gpu.randn((m, k), 1)
            self.fs = [self.gpu.randn(s, 2 + i) for i, s in enumerate(shapes)]
            kronlinalg.kron_matmul(self.x, self.fs, algorithm="sliced")  # warm-up, kernel load
        except Exception as err:  # noqa: BLE001 - out of memory on a smaller GPU
            self.teardown(case, dtype)
            raise NotImplementedError(f"does not fit this GPU: {err}") from err
        self.gpu.sync()

    def teardown(self, case, dtype):
        self.x = self.fs = None
        self.gpu.free()
        if self.prev_fp32 is not None:
            float32_precision(self.prev_fp32)
        if self.prev_natural is None:
            os.environ.pop("KRONLINALG_KRON_NATURAL", None)
        else:
            os.environ["KRONLINALG_KRON_NATURAL"] = self.prev_natural

    def _ours(self):
        kronlinalg.kron_matmul(self.x, self.fs, algorithm="sliced")

    def _shuffle(self):
        kronlinalg.kron_matmul(self.x, self.fs, algorithm="shuffle")

    def time_sliced(self, case, dtype):
        self._ours()
        self.gpu.sync()

    def time_shuffle(self, case, dtype):
        self._shuffle()
        self.gpu.sync()

    def track_sliced_ms(self, case, dtype):
        return self.gpu.event_ms(self._ours)

    track_sliced_ms.unit = "ms"

    def track_tflops(self, case, dtype):
        return self.flops / (self.gpu.event_ms(self._ours) * 1e-3) / 1e12

    track_tflops.unit = "TFLOP/s"

    def track_speedup_over_shuffle(self, case, dtype):
        ours = self.gpu.event_ms(self._ours)
        self.gpu.free()
        return self.gpu.event_ms(self._shuffle, reps=5) / ours

    track_speedup_over_shuffle.unit = "x"


class KronLargeGpu(_KronGpuSet):
    cases = KRON_LARGE
    params = [list(KRON_LARGE),
              ["float32", "float32-ieee", "float32-no-natural", "float64", "bfloat16"]]


class KronSmallGpu(_KronGpuSet):
    cases = KRON_SMALL
    params = [list(KRON_SMALL), ["float32", "float64", "bfloat16"]]
