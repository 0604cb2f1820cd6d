"""The planner's picks for batched_matmul and matmul on the GPU, on a grid held out from the
fit (orders and batch sizes the CUDA constants were not measured on; issue 33's held-out grid:
orders 8-256, batch 10²-10⁵, every dtype).

    python benchmarks/batched_planner_gpu.py --out planner_gpu.json
    python benchmarks/batched_planner_gpu.py --evaluate planner_gpu.json   # offline, no GPU

For each stack (dense, torch CUDA tensors): each algorithm's time a call in a warm loop of
back-to-back calls (CUDA events: host time shows where a call is host-bound, as a user's loop
sees it), auto's, whether auto is within 10 % of the fastest forced algorithm, and
kronlinalg.matmul's time against torch.matmul's (the "never more than 5 % slower" check).
Stacks above --max-bytes are skipped.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import kronlinalg
from batched_gpu import DT, timed  # (this folder: the script's path)



def loop_time(fn):
    """µs a call in a warm loop of back-to-back calls (about 2 ms a loop, median of 5)."""
    return timed(fn, reps=5) * 1e6


def evaluate(path, device="h100-sxm"):
    """Offline (no GPU): the planner's picks today for the stacks of a recorded run, against
    that run's measured times (the pick's time within 10 % of the fastest; an in-sample check
    once the constants were refitted on the run)."""
    with open(path) as fh:
        rows = json.load(fh)["rows"]
    ok = 0
    for r in rows:
        shape = (r["batch"], r["n"], r["n"])
        pick = kronlinalg.plan("batched_matmul", shape, shape, dtype=r["dtype"], device=device,
                               dense=True)[0].name
        t = r["times_us"]
        good = t[pick] <= 1.10 * min(t.values())
        ok += good
        if not good:
            print(f"{r['dtype']:9s} n={r['n']:3d} batch={r['batch']:6d} pick {pick:8s} "
                  f"{t[pick]:9.1f} us, fastest {min(t, key=t.get)} {min(t.values()):9.1f} us")
    print(f"{device}: the pick within 10 % of the fastest on {ok}/{len(rows)} of {path}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="planner_gpu.json")
    ap.add_argument("--evaluate", default="",
                    help="a recorded run's JSON: the planner's picks today against it (no GPU)")
    ap.add_argument("--dtypes", default="float64,float32,float16,bfloat16")
    ap.add_argument("--orders", default="8,12,20,24,40,48,80,100,160,200,256")
    ap.add_argument("--batches", default="100,1000,10000,100000")
    ap.add_argument("--max-bytes", type=float, default=1.5e9)
    args = ap.parse_args()
    if args.evaluate:
        return evaluate(args.evaluate)
    rows = []
    for dtype in args.dtypes.split(","):
        size = torch.empty((), dtype=DT[dtype]).element_size()
        for n in (int(v) for v in args.orders.split(",")):
            for batch in (int(v) for v in args.batches.split(",")):
                if 3 * batch * n * n * size > args.max_bytes:
                    continue
                a = torch.randn(batch, n, n, device="cuda").to(DT[dtype])
                b = torch.randn(batch, n, n, device="cuda").to(DT[dtype])
                times = {}
                for algo in ("library", "kami1d", "kami2d"):
                    times[algo] = loop_time(
                        lambda: kronlinalg.batched_matmul(a, b, algorithm=algo))
                auto = loop_time(lambda: kronlinalg.batched_matmul(a, b))
                mm = loop_time(lambda: kronlinalg.matmul(a, b))
                tm = loop_time(lambda: torch.matmul(a, b))
                fastest = min(times.values())
                row = {"dtype": dtype, "n": n, "batch": batch, "times_us": times,
                       "auto_us": auto, "fastest": min(times, key=times.get),
                       "auto_ok": auto <= 1.10 * fastest, "matmul_us": mm,
                       "torch_matmul_us": tm, "matmul_ok": mm <= 1.05 * tm}
                rows.append(row)
                print(f"{dtype:9s} n={n:3d} batch={batch:6d} library {times['library']:9.1f} "
                      f"kami1d {times['kami1d']:9.1f} kami2d {times['kami2d']:9.1f} auto "
                      f"{auto:9.1f} {'ok' if row['auto_ok'] else 'MISS'} | matmul {mm:9.1f} "
                      f"torch.matmul {tm:9.1f} {'ok' if row['matmul_ok'] else 'SLOWER'}",
                      flush=True)
                del a, b
                torch.cuda.empty_cache()
    ok = sum(r["auto_ok"] for r in rows)
    mok = sum(r["matmul_ok"] for r in rows)
    summary = (f"auto within 10 % of the fastest: {ok}/{len(rows)}; matmul within 5 % of "
               f"torch.matmul: {mok}/{len(rows)}")
    print(summary)
    with open(args.out, "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows, "summary": summary},
                  fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
