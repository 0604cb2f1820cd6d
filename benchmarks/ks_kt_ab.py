"""K pre-transposed (KRONLINALG_KS_KT=1) against K gathered through registers (=0) for the runs
of 4 j (d % 4 == 0, d % 8 != 0, d > 4) of the structured benchmark's sample, batch_first and
batch_last, all dtypes: device time of the extension call and dense's x @ W.T.  GPU only."""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from structured_compare import CASES, _gpu_timer, load_cases, sample  # noqa: E402


def main():
    import cupy as cp
    import torch

    from kronlinalg import structured
    from kronlinalg._ext import ks_cuda

    ks = load_cases(CASES)
    B = ks["batch"]
    pats, _ = sample(ks, 120, 0, B, 8192)
    pats = [p for p in pats if p[3] % 4 == 0 and p[3] % 8 != 0 and p[3] > 4]
    timeit = _gpu_timer(cp, reps=10)  # device time, as the structured benchmark's

    ratios = []
    for dtype in ("float16", "bfloat16", "float32"):
        tdt = getattr(torch, dtype)
        for p in pats:
            a, b, c, d = p
            n, m = a * c * d, a * b * d
            v = torch.randn(p, device="cuda").to(tdt)
            w = torch.tensor(structured.KSFactor(p, v.float().cpu().numpy()).to_dense(),
                             device="cuda").to(tdt)
            for layout in (0, 1):
                x = torch.randn((B, n) if layout == 0 else (n, B), device="cuda").to(tdt)
                t, ys = {}, {}
                for mode in ("0", "1"):
                    os.environ["KRONLINALG_KS_KT"] = mode
                    y = torch.empty((B, m) if layout == 0 else (m, B), device="cuda", dtype=tdt)

                    def run(y=y, x=x):
                        ks_cuda.matmul(p, B, layout, (v.data_ptr(),) + tuple(v.stride()),
                                       (x.data_ptr(), x.shape[1]), (y.data_ptr(), y.shape[1]),
                                       {"float32": 0, "float16": 2, "bfloat16": 3}[dtype],
                                       torch.cuda.current_stream().cuda_stream)

                    t[mode] = timeit(run)
                    ys[mode] = y.double()
                os.environ.pop("KRONLINALG_KS_KT")
                dense = timeit((lambda: x @ w.T) if layout == 0 else (lambda: w @ x))
                diff = float(torch.linalg.norm(ys["1"] - ys["0"]) / torch.linalg.norm(ys["0"]))
                ratios.append(t["0"] / t["1"])
                print(f"{str(p):18s} {dtype:9s} {'bf' if layout == 0 else 'bl'} regs "
                      f"{t['0']:.4f} kt {t['1']:.4f} ({t['0'] / t['1']:.3f}x) dense {dense:.4f} "
                      f"diff {diff:.1e}", flush=True)
    print(f"median {statistics.median(ratios):.3f}x over {len(ratios)} rows")


if __name__ == "__main__":
    main()
