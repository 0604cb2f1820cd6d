"""structured_matmul: the one-pass Kronecker-sparse kernel (and, on the GPU, the strided and
block_dense cuBLAS GEMMs) against the bmm and dense algorithms.

Cases come from the shared benchmark sets (/work/shared/bench/cases.json, ``kronecker_sparse``):
the two ViT-S/16 chains, patterns of the Kronecker-sparse generator, and a dyadic butterfly.  CPU
classes scale the batch to 2048 (the issue's CPU criterion); GPU classes use the batch of 25088
and raise NotImplementedError in setup without a CuPy-visible GPU.  The full comparison (120+
sampled patterns, speedups, planner agreement) is benchmarks/structured_compare.py.
"""

from __future__ import annotations

import statistics

import numpy as np

from kronlinalg import structured

# name -> patterns of K1 … KL
CASES = {
    "vit_qkv": [(1, 192, 48, 2), (2, 48, 192, 1)],
    "vit_mlp": [(1, 768, 192, 2), (6, 64, 64, 1)],
    "1x64x64x16": [(1, 64, 64, 16)],
    "2x128x128x4": [(2, 128, 128, 4)],
    "1x96x384x3": [(1, 96, 384, 3)],
    "1x256x1024x1": [(1, 256, 1024, 1)],
    "butterfly1024": list(structured.butterfly(1024, rng=0).patterns),
}
ALGORITHMS = ["kernel", "bmm", "dense"]
LAYOUTS = ["batch_first", "batch_last"]


def _chain(xp_mod, patterns, dtype, seed=0):
    rng = np.random.default_rng(seed)
    factors = []
    for p in patterns:
        v = rng.standard_normal(p) / np.sqrt(p[2])
        factors.append(structured.KSFactor(p, xp_mod.asarray(v).astype(dtype)))
    return structured.KSChain(factors)


def _x(xp_mod, chain, batch, layout, dtype, seed=1):
    n = chain.shape[1]
    shape = (batch, n) if layout == "batch_first" else (n, batch)
    if xp_mod is np:
        return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return xp_mod.random.RandomState(seed).standard_normal(shape, dtype="float32").astype(dtype)


def _flops(chain, batch):
    return sum(2.0 * batch * int(np.prod(p)) for p in chain.patterns)


class StructuredCPU:
    param_names = ["case", "layout", "algorithm"]
    params = [list(CASES), LAYOUTS, ALGORITHMS]
    timeout = 120
    batch = 2048

    def setup(self, case, layout, algorithm):
        self.chain = _chain(np, CASES[case], "float32")
        self.x = _x(np, self.chain, self.batch, layout, "float32")
        structured.structured_matmul(self.x, self.chain, layout=layout, algorithm=algorithm)

    def time_structured_matmul(self, case, layout, algorithm):
        structured.structured_matmul(self.x, self.chain, layout=layout, algorithm=algorithm)

    def track_gflops(self, case, layout, algorithm):
        import time

        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            structured.structured_matmul(self.x, self.chain, layout=layout, algorithm=algorithm)
            ts.append(time.perf_counter() - t0)
        return _flops(self.chain, self.batch) / min(ts) / 1e9

    track_gflops.unit = "GFLOP/s"


def _cupy_or_skip():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:  # noqa: BLE001
        pass
    raise NotImplementedError("no CUDA GPU visible to CuPy")


class StructuredGPU:
    param_names = ["case", "layout", "dtype", "algorithm"]
    params = [list(CASES), LAYOUTS, ["float32", "float16"],
              ALGORITHMS + ["strided", "block_dense", "auto", "auto_packed"]]
    timeout = 300
    batch = 25088

    def setup(self, case, layout, dtype, algorithm):
        cp = _cupy_or_skip()
        if algorithm == "block_dense" and not any(p[0] > 1 and p[3] > 1 for p in CASES[case]):
            raise NotImplementedError("block_dense: a factor with a > 1 and d > 1 only")
        self.cp = cp
        self.chain = _chain(cp, CASES[case], dtype)
        self.x = _x(cp, self.chain, self.batch, layout, dtype)
        # auto_packed: the planner's choice on the chain packed once (structured.KSPacked)
        factors = structured.KSPacked(self.chain) if algorithm == "auto_packed" else self.chain
        alg = "auto" if algorithm == "auto_packed" else algorithm
        self.run = lambda: structured.structured_matmul(  # noqa: E731
            self.x, factors, layout=layout, algorithm=alg)
        self.run()  # warm-up, module load
        cp.cuda.get_current_stream().synchronize()

    def time_structured_matmul(self, case, layout, dtype, algorithm):
        self.run()
        self.cp.cuda.get_current_stream().synchronize()

    def track_gpu_ms(self, case, layout, dtype, algorithm):
        """Median device time of 10 calls, by CUDA events."""
        cp = self.cp
        times = []
        for _ in range(10):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            self.run()
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop))
        return statistics.median(times)

    track_gpu_ms.unit = "ms"

    def track_tflops(self, case, layout, dtype, algorithm):
        return _flops(self.chain, self.batch) / (self.track_gpu_ms(case, layout, dtype, algorithm)
                                                 * 1e-3) / 1e12

    track_tflops.unit = "TFLOP/s"
