"""A/B of kron_matmul's L2-resident chunks (KRONLINALG_KRON_CHUNK_MB) on the GPU.

    python benchmarks/kron_chunk_ab.py [--variants 0,8,16,32] [--dtypes float64,float32]
        [--cases 1024x8^6,1024x16^5] [--reps 10] [--json PATH]

Each variant runs in its own process (the knob is read when a call is planned, and a repeated
signature replays its first plan): CuPy arrays, ``algorithm="sliced"`` (the fused kernels, what
kron_gpu_compare.py times), CUDA events around single calls after two warm-ups, the median of
``--reps``.  Correctness in the same process: the rows at the chunk edges and a few random ones
against a float64 shuffle reference of those rows on the GPU (relative Frobenius error).  The
roofline fraction is kron_gpu_compare.py's: X and Y once at 2.96 TB/s, or the flops at the
dtype's peak, whichever bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOF = {"TBps": 2.96, "float32": 51.05, "float64": 57.32, "float16": 791.3}
DEFAULT_CASES = "1024x8^6,1024x8^7,1024x16^5,1024x32^4,1024x64^3"


def parse_case(text):
    m, rest = text.split("x")
    p, n = rest.split("^")
    return int(m), int(p), int(n)


def reference_rows(cp, x_rows, factors):
    """x_rows @ kron(factors) in float64 by the shuffle algorithm."""
    y = x_rows.astype(cp.float64)
    rows = y.shape[0]
    for f in factors:
        p = f.shape[0]
        y = y.reshape(rows, p, -1)
        y = cp.einsum("rpk,pq->rkq", y, f.astype(cp.float64)).reshape(rows, -1)
    return y


def child(args):
    import cupy as cp

    import kronlinalg as kl

    mb = int(os.environ.get("KRONLINALG_KRON_CHUNK_MB", "0") or 0)
    out = []
    for case in args.cases.split(","):
        M, P, N = parse_case(case)
        for dtype in args.dtypes.split(","):
            es = cp.dtype(dtype).itemsize
            K = P**N
            rng = cp.random.default_rng(7)
            try:
                x = rng.standard_normal((M, K), dtype=cp.float32).astype(dtype)
                fs = [(rng.standard_normal((P, P), dtype=cp.float32) / P**0.5).astype(dtype)
                      for _ in range(N)]
                for _ in range(2):
                    y = kl.kron_matmul(x, fs, algorithm="sliced")
                cp.cuda.Device().synchronize()
                times = []
                for _ in range(args.reps):
                    a, b = cp.cuda.Event(), cp.cuda.Event()
                    a.record()
                    y = kl.kron_matmul(x, fs, algorithm="sliced")
                    b.record()
                    b.synchronize()
                    times.append(cp.cuda.get_elapsed_time(a, b))
            except cp.cuda.memory.OutOfMemoryError:
                print(f"{case} {dtype}: out of memory", flush=True)
                continue
            # rows at every plausible chunk edge (R = 1 .. 64 rows) and random ones
            rows = sorted({0, 1, M - 1, M - 2, 7, 8, 15, 16, 31, 32, 63, 64,
                           *[int(r) for r in rng.integers(0, M, 6).get()]} & set(range(M)))
            idx = cp.asarray(rows)
            ref = reference_rows(cp, x[idx], fs)
            got = y[idx].astype(cp.float64)
            err = float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))
            ms = statistics.median(times)
            flops = 2.0 * M * K * P * N
            bound = max(2.0 * M * K * es / (ROOF["TBps"] * 1e12),
                        flops / (ROOF.get(dtype, ROOF["float16"]) * 1e12)) * 1e3
            row = {"case": case, "dtype": dtype, "chunk_mb": mb, "ms": ms,
                   "roof": bound / ms, "relerr": err, "times": times}
            out.append(row)
            print(f"{case:>11} {dtype:>8} chunk {mb:>3} MiB: {ms:8.3f} ms  roof {bound / ms:5.3f}"
                  f"  relerr {err:.1e}", flush=True)
            del x, fs, y
            cp.get_default_memory_pool().free_all_blocks()
    print("JSON " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="0,8,16,32")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    rows = []
    for v in args.variants.split(","):
        env = dict(os.environ, KRONLINALG_KRON_CHUNK_MB=v)
        cmd = [sys.executable, __file__, "--child", "--dtypes", args.dtypes, "--cases",
               args.cases, "--reps", str(args.reps)]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        for line in res.stdout.splitlines():
            if line.startswith("JSON "):
                rows += json.loads(line[5:])
            else:
                print(line, flush=True)
        if res.returncode:
            print(res.stderr[-3000:], flush=True)
    base = {(r["case"], r["dtype"]): r["ms"] for r in rows if r["chunk_mb"] == 0}
    print("\n| case | dtype | chunk MiB | ms | × unchunked | roof | relerr |\n|---|---|---|---|---|---|---|")
    for r in rows:
        b = base.get((r["case"], r["dtype"]))
        sp = f"{b / r['ms']:.2f}" if b else "—"
        print(f"| {r['case']} | {r['dtype']} | {r['chunk_mb']} | {r['ms']:.3f} | {sp} | "
              f"{r['roof']:.3f} | {r['relerr']:.1e} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
