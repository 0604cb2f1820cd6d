"""batched_matmul's low-rank stacks on the GPU, A/B in one process: the thin-product kernel
(kernels/batched/batched_cuda_thin.cuh), in its forms (KRONLINALG_BATCHED_THIN_OPTS), against the
tile kernels it replaced there (KRONLINALG_BATCHED_THIN=0), with torch.bmm and
`algorithm="auto"` beside them.

    python benchmarks/batched_thin_ab.py --out thin_ab.json [--batch 10000]

Every time is the median of 12 CUDA-event loops of warm calls (batched_gpu.timed: host time
shows where a call is host-bound).  TB/s counts A + B + D once; the fraction is of the 2.96 TB/s
copy bandwidth.  Each variant's result is checked against a float64 reference on a few products
(relative Frobenius error; torch.bmm's beside it: 3xTF32 float32 should be within 2x IEEE's).
Cases: batch 10⁴, m = n in {64, 128, 256}, k in {8, 16, 32}, float16, bfloat16, float32.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import kronlinalg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batched_gpu import COPY_BW, env_scope, rel_err, stack_inputs, timed  # noqa: E402

SHAPES = ((128, 16, 128), (128, 32, 128), (128, 8, 128), (256, 16, 256), (256, 32, 256),
          (64, 16, 64), (64, 32, 64))


# name, KRONLINALG_BATCHED_THIN, KRONLINALG_BATCHED_THIN_OPTS (-1: the launcher's choice; bit 0
# 8-warp blocks, bit 1 the half types' results by bulk copies, bit 2 float32's warps in rows,
# bit 3 float32's results through staging rows by bulk copies), algorithm, the dtypes it runs
# (None: all)
VARIANTS = (("thin", "1", "-1", "kami1d", None), ("thin_rows", "1", "4", "kami1d", None),
            ("thin8", "1", "1", "kami1d", None),
            ("thin_f32_staged", "1", "8", "kami1d", ("float32",)),
            ("thin8_f32_staged", "1", "9", "kami1d", ("float32",)),
            ("tiles", "0", "-1", "kami1d", None),
            ("auto", "1", "-1", "auto", None),
            ("thin_last", "1", "-1", "kami1d", None))  # (the default again: an order effect shows)


def case(dtype, batch, m, k, n):
    a, b, nbytes, ref = stack_inputs(dtype, batch, m, n, k)
    row = {"case": f"{m}x{k}x{n}", "dtype": dtype, "batch": batch, "bytes": nbytes,
           "torch_bmm_us": timed(lambda: torch.bmm(a, b)) * 1e6,
           "torch_bmm_err": rel_err(torch.bmm(a[:8], b[:8]), ref)}
    for name, env, opts, algo, dtypes in VARIANTS:
        if dtypes is not None and dtype not in dtypes:
            continue
        with env_scope({"KRONLINALG_BATCHED_THIN": env, "KRONLINALG_BATCHED_THIN_OPTS": opts}):
            def call():
                return kronlinalg.batched_matmul(a, b, algorithm=algo)
            row[f"{name}_err"] = rel_err(call()[:8], ref)
            row[f"{name}_us"] = timed(call) * 1e6
    return row


def line(row):
    frac = {k[:-3]: row["bytes"] / (row[k] * 1e-6) / COPY_BW for k in row if k.endswith("_us")}
    parts = [f"{row['case']:>12} {row['dtype']:>8}"]
    for name in ("torch_bmm",) + tuple(v[0] for v in VARIANTS if v[0] + "_us" in row):
        parts.append(f"{name} {row[name + '_us']:8.1f} ({frac[name]:.2f})")
    errs = " ".join(f"{name} {row[name + '_err']:.1e}"
                    for name in ("thin", "thin_f32_staged", "thin8_f32_staged")
                    if name + "_err" in row)
    parts.append(f"err {errs} bmm {row['torch_bmm_err']:.1e}")
    return "  ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--dtypes", default="float16,bfloat16,float32")
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, kronlinalg {kronlinalg.__version__}, "
          f"batch {args.batch}; µs a call (fraction of {COPY_BW / 1e12:.2f} TB/s copy)")
    rows = []
    for dtype in args.dtypes.split(","):
        for (m, k, n) in SHAPES:
            rows.append(case(dtype, args.batch, m, k, n))
            print(line(rows[-1]), flush=True)
            if args.out:
                with open(args.out, "w") as f:
                    json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
