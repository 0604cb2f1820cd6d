"""KroneckerOperator against linear_operator's KroneckerProductLinearOperator on the same factors.

For each dtype (float64, float32) and Kronecker shape P^N (32³, 16⁴, 64², 8⁵) on torch CUDA:

- matmul: ``op @ X`` for X of shape (N, k), k right-hand sides (16 and 1);
- solve with a noise shift, ``(K + s·I) x = b``: the first call on a new operator (its
  per-factor eigendecompositions included) and repeated calls on the same operator (both
  libraries cache the decompositions);
- logdet(K + s·I): first call, repeated call, and the two values compared;
- agreement: the relative difference of the two libraries' products and solves, and the
  residual ‖(K + sI)x − b‖/‖b‖ of ours.

Times: CUDA events around single synchronised calls (perf_counter on the CPU), warm-up, median
of --reps (≥ 20).  Writes kron_operator_gpu.json and kron_operator_gpu.md to --out.

    python benchmarks/kron_operator_gpu.py --out $OUT              # the H100 run
    python benchmarks/kron_operator_gpu.py --device cpu --quick    # a check on torch CPU
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time

import torch

import kronlinalg
from kronlinalg import KroneckerOperator

SHAPES = ["32^3", "16^4", "64^2", "8^5"]
QUICK_SHAPES = ["8^3", "16^2", "4^5"]
TARGETS = {"matmul": 3.0, "solve_repeat": 5.0}


def parse_shape(text):
    p, n = text.split("^")
    return int(p), int(n)


class Timer:
    def __init__(self, device, reps, warmup=3):
        self.cuda = device.type == "cuda"
        self.reps, self.warmup = reps, warmup

    def __call__(self, fn):
        """Median seconds of single synchronised calls of fn()."""
        for _ in range(self.warmup):
            fn()
        times = []
        for _ in range(self.reps):
            if self.cuda:
                torch.cuda.synchronize()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)


def rel(a, b):
    a, b = a.double(), b.double()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def spd_factors(p, n, dtype, device, gen):
    out = []
    for _ in range(n):
        a = torch.randn(p, p, generator=gen, dtype=torch.float64)
        a = a @ a.T / p + 0.5 * torch.eye(p, dtype=torch.float64)
        out.append(a.to(dtype=dtype, device=device))
    return out


def peer_operator(factors):
    from linear_operator.operators import DenseLinearOperator, KroneckerProductLinearOperator

    return KroneckerProductLinearOperator(*(DenseLinearOperator(f) for f in factors))


def run_case(shape, dtype, device, timer, rhs_list, shift, gen):
    p, n = parse_shape(shape)
    N = p ** n
    factors = spd_factors(p, n, dtype, device, gen)
    shift_t = torch.tensor(shift, dtype=dtype, device=device)
    ours = KroneckerOperator(factors)
    peer = peer_operator(factors)
    peer_shifted = peer.add_diagonal(shift_t)
    row = {"shape": shape, "N": N, "dtype": str(dtype).replace("torch.", ""), "shift": shift}

    for k in rhs_list:
        x = torch.randn(N, k, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)
        t_ours = timer(lambda: ours @ x)
        t_peer = timer(lambda: peer @ x)
        row[f"matmul_k{k}"] = {"ours_s": t_ours, "peer_s": t_peer, "speedup": t_peer / t_ours,
                               "rel_diff": rel(ours @ x, peer @ x)}

    b = torch.randn(N, 1, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)
    t_first = timer(lambda: KroneckerOperator(factors).solve(b, shift))
    t_first_peer = timer(lambda: peer_operator(factors).add_diagonal(shift_t).solve(b))
    t_rep = timer(lambda: ours.solve(b, shift))
    t_rep_peer = timer(lambda: peer_shifted.solve(b))
    xs, xp = ours.solve(b, shift), peer_shifted.solve(b)
    residual = rel(ours @ xs + shift * xs, b)
    row["solve_first"] = {"ours_s": t_first, "peer_s": t_first_peer,
                          "speedup": t_first_peer / t_first}
    row["solve_repeat"] = {"ours_s": t_rep, "peer_s": t_rep_peer, "speedup": t_rep_peer / t_rep,
                           "rel_diff": rel(xs, xp), "residual_ours": residual,
                           "residual_peer": rel(ours @ xp + shift * xp, b)}

    t_ld_first = timer(lambda: KroneckerOperator(factors).logdet(shift))
    t_ld_first_peer = timer(lambda: peer_operator(factors).add_diagonal(shift_t).logdet())
    t_ld = timer(lambda: ours.logdet(shift))
    t_ld_peer = timer(lambda: peer_shifted.logdet())
    ld, ld_peer = float(ours.logdet(shift)), float(peer_shifted.logdet())
    # the float64 value of the same eigenvalue grid: what rounding allows
    ref = float(KroneckerOperator([f.double() for f in factors]).logdet(shift))
    row["logdet"] = {"ours_first_s": t_ld_first, "peer_first_s": t_ld_first_peer,
                     "ours_s": t_ld, "peer_s": t_ld_peer, "speedup": t_ld_peer / t_ld,
                     "speedup_first": t_ld_first_peer / t_ld_first,
                     "ours": ld, "peer": ld_peer, "float64": ref,
                     "rel_diff": abs(ld - ld_peer) / abs(ld_peer)}
    return row


def markdown(rows, meta, rhs_list):
    lines = [f"# KroneckerOperator vs linear_operator KroneckerProductLinearOperator",
             "",
             f"{meta['device_name']}; torch {meta['torch']}, linear_operator "
             f"{meta['linear_operator']}, kronlinalg {meta['kronlinalg']}; median of "
             f"{meta['reps']} single synchronised calls; shift {meta['shift']}; times in ms, "
             "speedup = linear_operator's time / ours.",
             ""]
    head = ["dtype", "P^N", "N"]
    for k in rhs_list:
        head += [f"matmul k={k} ours", "peer", "×"]
    head += ["solve 1st ours", "peer", "×", "solve rep. ours", "peer", "×",
             "logdet ours", "peer", "×", "logdet rel. diff", "solve rel. diff", "residual"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ms = lambda s: f"{s * 1e3:.3f}"  # noqa: E731
    for r in rows:
        cells = [r["dtype"], r["shape"], str(r["N"])]
        for k in rhs_list:
            m = r[f"matmul_k{k}"]
            cells += [ms(m["ours_s"]), ms(m["peer_s"]), f"{m['speedup']:.2f}"]
        s1, s2, ld = r["solve_first"], r["solve_repeat"], r["logdet"]
        cells += [ms(s1["ours_s"]), ms(s1["peer_s"]), f"{s1['speedup']:.2f}",
                  ms(s2["ours_s"]), ms(s2["peer_s"]), f"{s2['speedup']:.2f}",
                  ms(ld["ours_s"]), ms(ld["peer_s"]), f"{ld['speedup']:.2f}",
                  f"{ld['rel_diff']:.1e}", f"{s2['rel_diff']:.1e}", f"{s2['residual_ours']:.1e}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Medians over the cases (targets: matmul ≥ 3×, repeated solve ≥ 5×, logdet "
              "equal to rounding):", ""]
    for key, val in summary(rows, rhs_list).items():
        lines.append(f"- {key}: {val}")
    return "\n".join(lines) + "\n"


def summary(rows, rhs_list):
    def med(key):
        return round(statistics.median([r[key]["speedup"] for r in rows]), 3)

    def worst(keys):
        diffs = [r[k]["rel_diff"] for r in rows for k in keys if r["dtype"] == "float64"]
        return max(diffs, default=float("nan"))

    matmuls = [f"matmul_k{k}" for k in rhs_list]
    out = {f"matmul k={k} median speedup": med(f"matmul_k{k}") for k in rhs_list}
    out["matmul median speedup (all k)"] = round(
        statistics.median([r[k]["speedup"] for r in rows for k in matmuls]), 3)
    out["solve first-call median speedup"] = med("solve_first")
    out["solve repeated median speedup"] = med("solve_repeat")
    out["logdet repeated median speedup"] = med("logdet")
    out["logdet max rel. diff (float64 cases)"] = worst(["logdet"])
    out["solve max rel. diff (float64 cases)"] = worst(["solve_repeat"])
    out["matmul max rel. diff (float64 cases)"] = worst(matmuls)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for JSON + markdown")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    ap.add_argument("--shapes", nargs="+", default=None,
                    help="P^N cases (default: 32^3 16^4 64^2 8^5)")
    ap.add_argument("--rhs", type=int, nargs="+", default=[16, 1],
                    help="right-hand sides of matmul")
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--shift", type=float, default=0.1)
    ap.add_argument("--quick", action="store_true", help="small shapes and 5 repetitions (a check)")
    args = ap.parse_args(argv)
    import linear_operator

    device = torch.device(args.device)
    shapes = args.shapes or (QUICK_SHAPES if args.quick else SHAPES)
    reps = 5 if args.quick else max(args.reps, 20)
    timer = Timer(device, reps)
    gen = torch.Generator().manual_seed(0)
    meta = {"device": str(device),
            "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                            else platform.processor() or "cpu"),
            "torch": torch.__version__, "linear_operator": linear_operator.__version__,
            "kronlinalg": kronlinalg.__version__, "reps": reps, "shift": args.shift,
            "threads": torch.get_num_threads()}
    rows = []
    for dt in args.dtypes:
        for shape in shapes:
            row = run_case(shape, getattr(torch, dt), device, timer, args.rhs, args.shift, gen)
            rows.append(row)
            m = "  ".join(f"matmul k={k} {row[f'matmul_k{k}']['speedup']:.2f}x" for k in args.rhs)
            s1, s2, ld = row["solve_first"], row["solve_repeat"], row["logdet"]
            print(f"{dt:8s} {shape:5s} {m}  solve first {s1['speedup']:.2f}x  "
                  f"repeat {s2['speedup']:.2f}x  logdet {ld['speedup']:.2f}x "
                  f"(rel diff {ld['rel_diff']:.1e})  solve rel diff {s2['rel_diff']:.1e}  "
                  f"residual {s2['residual_ours']:.1e}", flush=True)
    result = {"meta": meta, "rows": rows, "summary": summary(rows, args.rhs), "targets": TARGETS}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kron_operator_gpu.json"), "w") as f:
        json.dump(result, f, indent=1)
    md = markdown(rows, meta, args.rhs)
    with open(os.path.join(args.out, "kron_operator_gpu.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
