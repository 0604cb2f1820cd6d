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
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import kronlinalg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batched_gpu import packed_inputs  # noqa: E402


def one(dtype, step, level, calls=3):
    os.environ["KRONLINALG_BATCHED_WGMMA"] = level
    _, a, b, dsizes, na = packed_inputs(dtype, 10_000, step=step)

    def call():
        return kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na, algorithm="kami1d")

    for _ in range(3):
        call()
    torch.cuda.synchronize()
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
    print(f"{dtype} step {step} level {level}: {total:8.1f} us of kernels a call, "
          f"{sum(v[1] for v in per.values()) // calls} kernels")
    for name, (us, cnt) in sorted(per.items(), key=lambda kv: -kv[1][0])[:8]:
        print(f"   {us / calls:8.1f} us  x{cnt // calls:<3d} {name}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="0,2")
    ap.add_argument("--steps", default="8,1")
    ap.add_argument("--dtypes", default="float16")
    args = ap.parse_args()
    print(torch.cuda.get_device_name())
    for dtype in args.dtypes.split(","):
        for step in map(int, args.steps.split(",")):
            for level in args.levels.split(","):
                one(dtype, step, level)
