"""One launcher switch of the structured kernel (an environment variable read per call, e.g.
KRONLINALG_KS_KT) off (=0) against on (=1) on the structured benchmark's sample (seed 0,
batch 25088, 120 patterns) filtered by a pattern predicate, both layouts, the half types (and
float32 with --float32): device time of the extension call, the dense product x @ W.T (cuBLAS)
and the relative difference between the two results.  GPU only.

    python benchmarks/ks_env_ab.py KRONLINALG_KS_KT "d % 4 == 0 and d % 8 != 0 and d > 4" --float32
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from structured_compare import CASES, _gpu_timer, load_cases, sample  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("env")
    ap.add_argument("where", help="a Python expression in a, b, c, d")
    ap.add_argument("--float32", action="store_true")
    ap.add_argument("--layouts", default="0,1")
    ap.add_argument("--extra", default="", help="more patterns: a,b,c,d;a,b,c,d")
    args = ap.parse_args()

    import cupy as cp
    import torch

    from kronlinalg import structured
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    ks = load_cases(CASES)
    B = ks["batch"]
    pats, _ = sample(ks, 120, 0, B, 8192)
    pats += [tuple(int(v) for v in e.split(",")) for e in args.extra.split(";") if e]
    pats = [p for p in pats if eval(args.where, {}, dict(zip("abcd", p)))]  # noqa: S307
    timeit = _gpu_timer(cp, reps=10)  # device time, as the structured benchmark's

    ratios, wins = [], 0
    dtypes = ("float16", "bfloat16") + (("float32",) if args.float32 else ())
    codes = {"float32": 0, "float16": 2, "bfloat16": 3}
    stream = torch.cuda.current_stream().cuda_stream
    for dtype in dtypes:
        tdt, code = getattr(torch, dtype), codes[dtype]
        for p in pats:
            a, b, c, d = p
            n, m = a * c * d, a * b * d
            v = torch.randn(p, device="cuda").to(tdt)
            w = torch.tensor(structured.KSFactor(p, v.float().cpu().numpy()).to_dense(),
                             device="cuda").to(tdt)
            for layout in (int(s) for s in args.layouts.split(",")):
                x = torch.randn((B, n) if layout == 0 else (n, B), device="cuda").to(tdt)
                t, ys = {}, {}
                for mode in ("0", "1"):
                    os.environ[args.env] = mode
                    y = torch.empty((B, m) if layout == 0 else (m, B), device="cuda", dtype=tdt)

                    args_ = (p, B, layout, (v.data_ptr(),) + tuple(v.stride()),
                             (x.data_ptr(), x.shape[1]), (y.data_ptr(), y.shape[1]), code, stream)

                    def run(args_=args_):
                        ks_cuda.matmul(*args_)

                    t[mode] = timeit(run)
                    ys[mode] = y.double()
                os.environ.pop(args.env)
                dense = timeit((lambda: x @ w.T) if layout == 0 else (lambda: w @ x))
                diff = float(torch.linalg.norm(ys["1"] - ys["0"]) / torch.linalg.norm(ys["0"]))
                ratios.append(t["0"] / t["1"])
                wins += t["1"] < dense
                print(f"{str(p):18s} {dtype:9s} {'bf' if layout == 0 else 'bl'} off "
                      f"{t['0']:.4f} on {t['1']:.4f} ({t['0'] / t['1']:.3f}x) dense {dense:.4f} "
                      f"(on/dense {t['1'] / dense:.3f}) diff {diff:.1e}", flush=True)
    if ratios:
        print(f"median {statistics.median(ratios):.3f}x over {len(ratios)} rows; "
              f"'on' faster than dense on {wins}")


if __name__ == "__main__":
    main()
