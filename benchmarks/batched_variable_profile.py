"""Where one variable-size batched_matmul call's device time goes, kernel by kernel
(torch.profiler's CUDA activity), for each KRONLINALG_BATCHED_WGMMA level given:

    python benchmarks/batched_variable_profile.py --levels 0,2 --steps 8,1 --dtypes float16

10^4 packed square products of orders 8..256 (step 8: every operand 16-byte aligned), the size
table on the GPU, out_size given (batched_gpu.packed_inputs); three profiled calls after warm-up,
each kernel's mean device time a call.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import kronlinalg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batched_gpu import env_scope, packed_inputs  # noqa: E402


def one(dtype, step, level, calls=3, extra=""):
    """extra: NAME=VALUE environment settings for this case (space-separated)."""
    settings = {"KRONLINALG_BATCHED_WGMMA": level}
    settings.update(kv.split("=", 1) for kv in extra.split())
    with env_scope(settings):
        _one(dtype, step, f"{level} {extra}".strip(), calls)


def _one(dtype, step, label, calls):
    _, a, b, dsizes, na = packed_inputs(dtype, 10_000, step=step)

    def call():
        return kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na, algorithm="kami1d")

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    # host time a call (issued back to back, not waited for) and the loop's time a call
    t0 = time.perf_counter()
    for _ in range(5):
        call()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    host_us, loop_us = (t1 - t0) / 5 * 1e6, (t2 - t0) / 5 * 1e6
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    per = defaultdict(lambda: [0.0, 0])
    for it in prof.key_averages():  # kernels: the entries with device time of their own
        us = it.self_device_time_total
        if us > 0:
            per[it.key[:60]][0] += us
            per[it.key[:60]][1] += it.count
    total = sum(v[0] for v in per.values()) / calls
    print(f"{dtype} step {step} level {label}: {total:8.1f} us of kernels a call, "
          f"{sum(v[1] for v in per.values()) // calls} kernels; host {host_us:7.1f} us a call, "
          f"loop {loop_us:7.1f} us a call")
    for name, (us, cnt) in sorted(per.items(), key=lambda kv: -kv[1][0])[:8]:
        print(f"   {us / calls:8.1f} us  x{cnt // calls:<3d} {name}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="0,2")
    ap.add_argument("--steps", default="8,1")
    ap.add_argument("--dtypes", default="float16")
    ap.add_argument("--host-profile", action="store_true",
                    help="then cProfile 20 calls (float16, step 8): where the host time goes")
    ap.add_argument("--extra", action="append", default=[""],
                    help="also run each case with these NAME=VALUE settings (repeatable)")
    args = ap.parse_args()
    print(torch.cuda.get_device_name())
    for dtype in args.dtypes.split(","):
        for step in map(int, args.steps.split(",")):
            for level in args.levels.split(","):
                for extra in args.extra:
                    one(dtype, step, level, extra=extra)
    if args.host_profile:
        import cProfile
        import pstats

        _, a, b, dsizes, na = packed_inputs("float16", 10_000, step=8)
        for _ in range(3):
            kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na)
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(20):
            kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na)
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
