"""How much a per-shape choice among cuBLASLt's GEMM algorithms gains over cuBLAS's default.

For each a = d = 1 Kronecker-sparse pattern of the structured benchmark (one dense GEMM,
batch 25088), times the array library's ``x @ w.T`` / ``w @ x`` (CuPy for float16, torch for
bfloat16: the dense baseline) and every candidate cuBLASLt's heuristic offers for the same
product, each call alone on the device as ``kronlinalg._cublaslt.tune`` times them, then
--steps of the tuning's neighbourhood search (other tiles, custom options, cluster shapes
around the fastest), and times the baseline, the heuristic's fastest and the search's
finalists together; checks the fastest configuration's result against the baseline's.  GPU only.

    python benchmarks/gemm_lt_probe.py [--steps 2] [--out rows.json]
"""

from __future__ import annotations

import argparse
import functools
import json

SIZES = [(48, 48), (48, 192), (64, 256), (96, 96), (128, 128), (128, 512), (256, 1024),
         (384, 96), (384, 384), (512, 512), (768, 768)]
CODES = {"float16": 2, "bfloat16": 14}  # cudaDataType


def _config(plan, index):
    from kronlinalg.vendor import cublaslt as lt

    return {name: lt._config(plan.results[index].algo, attr)
            for name, attr in (("id", lt._ID), ("tile", lt._TILE), ("custom", lt._CUSTOM),
                               ("cluster", lt._CLUSTER))}


def main():
    import cupy as cp
    import torch

    from kronlinalg.vendor import cublaslt

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", type=int, default=25088)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=cublaslt.SEARCH_STEPS,
                    help="neighbourhood-search steps after the heuristic's list")
    args = ap.parse_args()
    if cublaslt._library() is None:
        raise SystemExit("libcublasLt not found")
    device, stream, n = cp.cuda.runtime.getDevice(), cp.cuda.get_current_stream().ptr, args.batch
    spin = cublaslt._spin_kernel()
    rows = []
    for dtype, code in CODES.items():
        tdt = getattr(torch, dtype)  # torch holds both (CuPy has no bfloat16), on the null stream
        for b, c in SIZES:
            for lay in ("batch_first", "batch_last"):
                first = lay == "batch_first"
                x = torch.randn((n, c) if first else (c, n), device="cuda").to(tdt)
                w = torch.randn((b, c), device="cuda").to(tdt)
                y = torch.empty((n, b) if first else (b, n), device="cuda", dtype=tdt)
                xc, wc = (cp.asarray(x), cp.asarray(w)) if dtype == "float16" else (x, w)
                base = (lambda: xc @ wc.T) if first else (lambda: wc @ xc)
                # column-major: batch_first Yᵀ (b × n) = (Wᵀ)ᵀ · Xᵀ; batch_last Yᵀ = Xᵀ · Wᵀ
                call = ((1, 0, b, n, c, w.data_ptr(), c, 0, x.data_ptr(), c, 0, y.data_ptr(), b,
                         0, 1) if first else
                        (0, 0, n, b, c, x.data_ptr(), n, 0, w.data_ptr(), c, 0, y.data_ptr(), n,
                         0, 1))
                plan = cublaslt._Plan(cublaslt.signature(call, code, 2), wide=False)
                ok = [i for i in range(plan.candidates(device))
                      if plan.results[i].state == 0 and plan.run(i, call, device, stream) == 0]
                run = functools.partial(plan.run, call=call, device=device, stream=stream)
                heur = cublaslt._device_times([functools.partial(run, i) for i in ok], spin,
                                               args.rounds)
                top = [ok[i] for i in sorted(range(len(ok)), key=heur.__getitem__)]
                # the search of cublaslt._tune: neighbours of the fastest, screened
                screened = dict(zip(ok, heur))
                expanded, searched = set(), 0
                for _ in range(args.steps):
                    seeds = [i for i in sorted(screened, key=screened.get)
                             if i not in expanded][:cublaslt.SEEDS]
                    expanded.update(seeds)
                    fresh = [i for i in plan.neighbours(device, seeds)
                             if plan.run(i, call, device, stream) == 0]
                    searched += len(fresh)
                    screened.update(zip(fresh, cublaslt._device_times(
                        [functools.partial(run, i) for i in fresh], spin,
                        cublaslt.SCREEN_ROUNDS, screen=True)))
                final = [i for i in sorted(screened, key=screened.get)
                         if i not in top[:1]][:cublaslt.FINALISTS]
                runs = [base, functools.partial(run, top[0])] + [
                    functools.partial(run, i) for i in final]
                times = cublaslt._device_times(runs, spin, args.rounds)
                best = min(range(2, len(times)), key=times.__getitem__, default=1)
                if times[1] <= times[best]:
                    best = 1
                runs[best]()  # the fastest configuration's result against the baseline's
                ref = torch.as_tensor(base(), device="cuda").float()
                err = float((y.float() - ref).abs().max() / ref.abs().max())
                pick = top[0] if best == 1 else final[best - 2]
                config = _config(plan, pick)
                first = _config(plan, top[0])
                config = {k: v if v == first[k] else f"{first[k]}->{v}" for k, v in config.items()}
                row = dict(dtype=dtype, layout=lay, b=b, c=c, baseline_ms=times[0],
                           heuristic_best_ms=times[1], search_best_ms=times[best],
                           n_heuristic=len(ok), n_searched=searched, rel_err=err,
                           config=config, floor_ms=2 * n * (b + c) / 2.96e9)
                print(f"{dtype:9s} {lay:11s} b={b:4d} c={c:4d} baseline={times[0]:.4f} "
                      f"heuristic={times[1]:.4f} search={times[best]:.4f} "
                      f"({len(ok)} + {searched}) x{times[0] / times[best]:.3f} "
                      f"err={err:.1e} floor={row['floor_ms']:.4f} {config}", flush=True)
                rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
