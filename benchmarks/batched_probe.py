"""Where batched_matmul's GPU time goes: device time against host time, per call.

    python benchmarks/batched_probe.py --out probe.json            # the tables
    ncu ... python benchmarks/batched_probe.py --ncu variable:float16   # one call, profiled

For each uniform case (batch x n^3, every dtype) three numbers for ours (algorithm="auto" and
the kami1d kernel) and torch.bmm:
- device: CUDA-event time of one call with the stream held busy ~0.3 ms before the start event
  (a spinning kernel), so the host's time before the launches is hidden: what the GPU spends;
- loop: CUDA-event time per call of a warm loop of back-to-back calls: max(host, device);
- host: perf_counter time of one call's enqueue (no synchronisation), median.
Variable sizes (10^4 packed products, orders uniform in 8..256) get the device time of ours and
of the bucketing + bmm baseline.  --ncu CASE: warm up, then one call of that case between
torch.cuda.profiler.start/stop (ncu --profile-from-start off).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time

import numpy as np
import torch

import kronlinalg
from batched_gpu import COPY_BW, DT, SE, timed  # (this folder: the script's path)

TINY_AB = False


def spin(us=300):
    """Queue a kernel that spins ~us microseconds (torch.cuda._sleep takes cycles)."""
    torch.cuda._sleep(int(us * 1.7e3))


def device_time(fn, reps=15):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        spin()
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)


def loop_time(fn, reps=9, inner=200):
    """µs a call: batched_gpu.timed's median of CUDA-event-timed loops of back-to-back calls."""
    return timed(fn, reps=reps, inner=inner) * 1e6


def host_time(fn, reps=9, inner=200):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        spin(inner * 60)  # the queue never drains while the host enqueues
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        ts.append((time.perf_counter() - t0) * 1e6 / inner)
        torch.cuda.synchronize()
    return statistics.median(ts)


def uniform(dtype, batch, n, rows):
    torch.manual_seed(0)
    dt = DT[dtype]
    a = torch.randn(batch, n, n, device="cuda").to(dt)
    b = torch.randn(batch, n, n, device="cuda").to(dt)
    nbytes = 3 * batch * n * n * SE[dtype]
    row = {"dtype": dtype, "batch": batch, "n": n, "bytes": nbytes}
    calls = {"bmm": lambda: torch.bmm(a, b),
             "auto": lambda: kronlinalg.batched_matmul(a, b),
             "kami1d": lambda: kronlinalg.batched_matmul(a, b, algorithm="kami1d")}
    ref = torch.bmm(a[:4].double(), b[:4].double())
    got = kronlinalg.batched_matmul(a, b)[:4].double()
    row["auto_relerr"] = float((got - ref).abs().max() / ref.abs().max())
    for name, fn in calls.items():
        row[f"{name}_device_us"] = device_time(fn)
        row[f"{name}_loop_us"] = loop_time(fn)
        row[f"{name}_host_us"] = host_time(fn)
    if TINY_AB:  # the same kernel call with the tiny-product kernel off (the tile kernels)
        os.environ["KRONLINALG_BATCHED_TINY"] = "0"
        try:
            row["tiles_device_us"] = device_time(calls["kami1d"])
        finally:
            del os.environ["KRONLINALG_BATCHED_TINY"]
    row["auto_device_frac"] = nbytes / (row["auto_device_us"] * 1e-6) / COPY_BW
    row["kami1d_device_frac"] = nbytes / (row["kami1d_device_us"] * 1e-6) / COPY_BW
    rows.append(row)
    print(f"{dtype:9s} {batch:6d} x {n:3d}: device us ours {row['auto_device_us']:7.1f} "
          f"(kami1d {row['kami1d_device_us']:7.1f}, {row['kami1d_device_frac']:.2f} copy) bmm "
          f"{row['bmm_device_us']:7.1f} | loop ours {row['auto_loop_us']:6.1f} bmm "
          f"{row['bmm_loop_us']:6.1f} | host ours {row['auto_host_us']:5.1f} kami1d "
          f"{row['kami1d_host_us']:5.1f} bmm {row['bmm_host_us']:5.1f}"
          + (f" | tiles off-tiny {row['tiles_device_us']:7.1f}" if TINY_AB else ""), flush=True)


def variable_inputs(dtype, count=10_000, lo=8, hi=256, step=1):
    rng = np.random.default_rng(1)
    orders = rng.integers(lo, hi + 1, count) // step * step  # (step 8: every operand aligned)
    sizes = np.stack([orders, orders, orders], axis=1).astype(np.int64)
    na = int((orders ** 2).sum())
    dt = DT[dtype]
    a = torch.randn(na, device="cuda").to(dt)
    b = torch.randn(na, device="cuda").to(dt)
    return orders, a, b, torch.from_numpy(sizes).cuda(), na


def variable(dtype, rows):
    orders, a, b, dsizes, na = variable_inputs(dtype)
    nbytes = 3 * na * SE[dtype]
    ours = device_time(lambda: kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na),
                       reps=7)
    buckets = []
    for top in range(8 + 15, 256 + 16, 16):
        cnt = int(((orders <= top) & (orders > top - 16)).sum())
        if cnt:
            buckets.append((torch.zeros(cnt, top, top, device="cuda", dtype=DT[dtype]),
                            torch.zeros(cnt, top, top, device="cuda", dtype=DT[dtype])))
    base = device_time(lambda: [torch.bmm(x, y) for x, y in buckets], reps=7)
    row = {"case": "variable", "dtype": dtype, "ours_device_us": ours,
           "bucket_bmm_device_us": base, "frac": nbytes / (ours * 1e-6) / COPY_BW,
           "speedup": base / ours}
    rows.append(row)
    print(f"variable {dtype:9s}: ours {ours:8.1f} us ({row['frac']:.2f} copy), bucketing + bmm "
          f"{base:8.1f} us: {row['speedup']:.2f}x", flush=True)


def ncu_case(spec):
    kind, dtype = spec.split(":")
    if kind in ("variable", "variable8"):
        _, a, b, dsizes, na = variable_inputs(dtype, step=8 if kind == "variable8" else 1)
        fn = lambda: kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na)  # noqa: E731
    else:  # uniform:<dtype>:<n> as "u<n>"
        n = int(kind[1:])
        a = torch.randn(10_000, n, n, device="cuda").to(DT[dtype])
        b = torch.randn(10_000, n, n, device="cuda").to(DT[dtype])
        fn = lambda: kronlinalg.batched_matmul(a, b, algorithm="kami1d")  # noqa: E731
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="batched_probe.json")
    ap.add_argument("--ncu", default="")
    ap.add_argument("--dtypes", default="float64,float32,float16,bfloat16")
    ap.add_argument("--sizes", default="10000:16,10000:32,1000:16,1000:32,1000:64")
    ap.add_argument("--variable", action="store_true")
    ap.add_argument("--tiny-ab", action="store_true",
                    help="also time kami1d with KRONLINALG_BATCHED_TINY=0")
    ap.add_argument("--profile-auto", default="",
                    help="dtype:batch:n: cProfile 500 auto calls of that stack (host time)")
    args = ap.parse_args()
    global TINY_AB
    TINY_AB = args.tiny_ab
    if args.profile_auto:
        dtype, batch, n = args.profile_auto.split(":")
        a = torch.randn(int(batch), int(n), int(n), device="cuda").to(DT[dtype])
        b = torch.randn(int(batch), int(n), int(n), device="cuda").to(DT[dtype])
        for _ in range(3):
            kronlinalg.batched_matmul(a, b)
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(500):
            kronlinalg.batched_matmul(a, b)
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)
        return
    if args.ncu:
        ncu_case(args.ncu)
        return
    print(torch.cuda.get_device_name(), torch.__version__, file=sys.stderr)
    rows: list = []
    for dtype in args.dtypes.split(","):
        for spec in args.sizes.split(","):
            batch, n = (int(v) for v in spec.split(":"))
            uniform(dtype, batch, n, rows)
    if args.variable:
        for dtype in args.dtypes.split(","):
            variable(dtype, rows)
    with open(args.out, "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
