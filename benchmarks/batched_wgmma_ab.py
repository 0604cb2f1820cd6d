"""batched_matmul's half-type kernels on the GPU, A/B in one process: the warpgroup-MMA kernel
(kernels/batched/batched_cuda_wgmma.cuh) against the 128 x 128 mma.sync kernel, with torch.bmm
beside them.

    python benchmarks/batched_wgmma_ab.py --out wgmma_ab.json

The variants are KRONLINALG_BATCHED_WGMMA (0: the mma.sync kernel; 1, the default: the wgmma kernel
for uniform stacks of aligned rows at orders >= 96 and k >= 64 and for variable products of aligned
rows; 3: for every uniform stack of aligned rows and every variable product of order >= 96), which
the C++ launcher reads at every launch.  Every time is the median of 12 CUDA-event loops of warm calls (batched_gpu.timed);
`algorithm="kami1d"` (our kernels, never torch's).  Each variant's result is checked against a
float64 reference on a few products.  Cases: batch 10^4 of orders 64, 128, 256 and low rank (m =
n = 128, k = 16, 32), float16 and bfloat16; variable sizes (10^4 packed square products, orders
8..256 in steps of 8 and of 1, the size table on the GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import kronlinalg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batched_gpu import (COPY_BW, SE, env_scope, packed_error, packed_inputs,  # noqa: E402
                         rel_err, stack_inputs, timed)

# name: KRONLINALG_BATCHED_WGMMA (1: the wgmma kernel where rows are aligned; "staged", the
# default since 2026-11-27: and its staged form for variable products of rows at other offsets)
VARIANTS = {"mma_sync": "0", "level1": "1", "default": "1 staged", "wgmma": "3"}


def with_env(level, fn):
    level, *rest = level.split()
    with env_scope({"KRONLINALG_BATCHED_WGMMA": level,
                    "KRONLINALG_BATCHED_WG_STAGED": "1" if "staged" in rest else "0"}):
        return fn()


def uniform(dtype, batch, m, n, k):
    a, b, nbytes, ref = stack_inputs(dtype, batch, m, n, k)
    row = {"case": f"{m}x{k}x{n}", "dtype": dtype, "batch": batch, "bytes": nbytes,
           "torch_bmm_us": timed(lambda: torch.bmm(a, b)) * 1e6}
    for name, level in VARIANTS.items():
        if "staged" in level:  # (variable batches only)
            continue

        def call():
            return kronlinalg.batched_matmul(a, b, algorithm="kami1d")
        out = with_env(level, call)
        row[f"{name}_err"] = rel_err(out[:8], ref)
        row[f"{name}_us"] = with_env(level, lambda: timed(call)) * 1e6
    return row


def variable(dtype, count, step):
    orders, a, b, dsizes, na = packed_inputs(dtype, count, step=step)
    row = {"case": f"variable 8..256 step {step}", "dtype": dtype, "batch": count,
           "bytes": 3 * na * SE[dtype]}
    for name, level in VARIANTS.items():
        def call():
            return kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na, algorithm="kami1d")
        out = with_env(level, call)
        row[f"{name}_err"] = packed_error(out, a, b, orders, 6)
        row[f"{name}_us"] = with_env(level, lambda: timed(call)) * 1e6
    return row


def line(row):
    parts = [f"{row['case']:>26} {row['dtype']:>8}"]
    if "torch_bmm_us" in row:
        parts.append(f"bmm {row['torch_bmm_us']:8.1f} ({row['bytes'] / row['torch_bmm_us'] / 1e6 / COPY_BW * 1e12:.2f})")
    for name in VARIANTS:
        if f"{name}_us" not in row:
            continue
        us = row[f"{name}_us"]
        frac = row["bytes"] / (us * 1e-6) / COPY_BW
        parts.append(f"{name} {us:8.1f} ({frac:.2f}, err {row[f'{name}_err']:.1e})")
    return " | ".join(parts)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="batched_wgmma_ab.json")
    ap.add_argument("--only", default="uniform,lowrank,variable",
                    help="groups: uniform (orders 64, 128, 256), lowrank, variable")
    args = ap.parse_args()
    only = set(args.only.split(","))
    print(torch.cuda.get_device_name(), file=sys.stderr)
    rows = []
    cases = [("uniform", d, 10_000, n, n, n) for d in ("float16", "bfloat16") for n in (64, 128, 256)
             if "uniform" in only]
    cases += [("uniform", d, 10_000, 128, 128, k) for d in ("float16", "bfloat16") for k in (16, 32)
              if "lowrank" in only]
    cases += [("variable", d, 10_000, s) for d in ("float16", "bfloat16") for s in (8, 1)
              if "variable" in only or ("variable8" in only and s == 8)]
    for c in cases:
        try:
            row = uniform(*c[1:]) if c[0] == "uniform" else variable(*c[1:])
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            print("failed:", c, type(exc).__name__, str(exc)[:300], flush=True)
            continue
        rows.append(row)
        print(line(row), flush=True)
        with open(args.out, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
