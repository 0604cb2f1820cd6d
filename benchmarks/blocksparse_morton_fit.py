"""Fit the 2D kernel's planner constants (kronlinalg/planner/costs/blocksparse.py: ns per CTA
step and per block, per dtype class and panel height) to a blocksparse_morton.py run, then
replay the planner on every measured row (H100 profile) against the measured times.

    python benchmarks/blocksparse_morton_fit.py morton.json [--variant 2d_new]

Prints the fitted constants and, per row, 1D / 2D measured, the predictions and the pick.
"""

from __future__ import annotations

import argparse
import json
import math
import types

import numpy as np

from kronlinalg.planner import profiles
from kronlinalg.planner.costs import blocksparse as costs

CLS = {"fp16": "half", "fp32": "float32", "fp64": "float64"}
NAME = {"fp16": "float16", "fp32": "float32", "fp64": "float64"}


def gpu_tile(dname, n):  # the 1D kernel's RHS tile (kl_bs_spmm_cuda_tile_n, b = 16)
    if dname == "fp16":
        return 256 if n > 128 else 128 if n > 64 else 64
    if dname == "fp32":
        return 128 if n > 64 else 64
    return 128 if n > 64 else 64


def problem(row):
    n, d, N = row["rhs"], row["dtype"], row.get("N", 16384)
    info = {"m": N, "k": N, "n": n, "block": 16, "nnzb": row["nnzb"],
            "density": row["nnzb"] / (N // 16) ** 2, "skew": row.get("skew", 1.0),
            "lib": "torch", "beta": 0, "order": "row", "tile": 0,
            "reuse": round(row["reuse"], 2), "gpu_tile": gpu_tile(d, n)}
    return types.SimpleNamespace(info=info, kind="cuda", dtype=NAME[d])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("json")
    p.add_argument("--variant", default="2d_new")
    p.add_argument("--tables", action="store_true", help="also the run's markdown tables")
    args = p.parse_args()
    res = json.load(open(args.json))
    if args.tables:
        tables(res)
    rows = [r for r in res.get("patterns", []) + res.get("wide", []) if args.variant in r["ms"]]
    prof = profiles.KNOWN_GPUS["h100-sxm"]
    fixed = prof.launch_s + costs._HOST_OURS
    for r in rows:  # kernel times where measured (the launches alone), else whole calls
        r["t"] = dict(r.get("kernel_ms") or {"1d": r["ms"].get("1d_strip_major"),
                                              args.variant: r["ms"][args.variant]})
        if "2d_f64w" in r["t"]:  # FP64's default form above 64 columns
            r["t"][args.variant] = r["t"]["2d_f64w"]
    groups = {}
    for r in rows:
        P = r["P"]
        wide = P == 8 or (r["dtype"] == "fp64" and r["rhs"] > 64)
        tiles = math.ceil(r["rhs"] / (128 if wide else 64))
        steps = r["nnzb"] / r["reuse"]
        # in the 1D model's units (the 2D time times predicted / measured 1D time), so that the
        # planner's pick follows the measured 2D / 1D ratio where the 1D model is off (FP64:
        # it predicts ~1.3x the measured time)
        scale = costs.predict_spmm_ours(problem(r), prof)[0] * 1e3 / r["t"]["1d"]
        t = r["t"][args.variant] * 1e-3 * scale - prof.launch_s
        groups.setdefault((CLS[r["dtype"]], P), []).append((steps * tiles, r["nnzb"] * tiles, t))
    fitted = {}
    for key, pts in sorted(groups.items()):
        a = np.array([[s * 1e-9, b * 1e-9] for s, b, _ in pts])
        y = np.array([t for *_, t in pts])
        best = None
        for cols in ([0, 1], [0], [1]):  # non-negative least squares on two columns
            x, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
            if np.all(x >= 0):
                full = np.zeros(2)
                full[cols] = x
                err = float(np.sum((a @ full - y) ** 2))
                if best is None or err < best[1]:
                    best = (full, err)
        fitted[key] = best[0]
        print(f"{key}: step {best[0][0]:.3f} ns, block {best[0][1]:.3f} ns over {len(pts)} rows")
    costs._2D_STEP_NS.update({k: float(v[0]) for k, v in fitted.items()})
    costs._2D_BLOCK_NS.update({k: float(v[1]) for k, v in fitted.items()})
    print("| pattern | dtype | RHS | reuse | 1D call ms | 2D call ms | predicted 1D / 2D | "
          "2D / 1D measured | model picks | right |")
    right = 0
    for r in rows:
        pr = problem(r)
        t1 = costs.predict_spmm_ours(pr, prof)[0] * 1e3
        t2 = costs.predict_spmm_morton(pr, prof)[0] * 1e3
        m1, m2 = r["t"]["1d"], r["t"][args.variant]
        if "kernel_ms" in r:  # loops of whole calls (2D: its row-order call, shifted to the form)
            m1 = r["ms"]["1d"]
            m2 = r["ms"]["2d_row_order"] - r["kernel_ms"]["2d_new"] + r["t"][args.variant]
        pick = "2d" if t2 < t1 else "1d"
        ok = (pick == "2d") == (m2 < m1)
        right += ok
        print(f"| {r.get('N', 16384)} {r['pattern']} {r.get('density', '')} | {r['dtype']} | "
              f"{r['rhs']} | "
              f"{r['reuse']:.2f} | {m1:.4g} | {m2:.4g} | {t1:.4g} / {t2:.4g} | {m2 / m1:.2f} | "
              f"{pick} | {'yes' if ok else 'NO'} |")
    print(f"model picks the faster of 1D / 2D in {right} of {len(rows)} rows")
    # the Python of a call: a loop of calls runs at max(host, kernel), so where the whole call
    # is well above the launch alone the difference is the host's (the 1D has a fast path)
    for name, key in (("1d", "1d"), ("2d", args.variant)):
        host = [r["ms"][key] for r in res.get("patterns", [])
                if key in r.get("kernel_ms", {}) and r["ms"][key] > 1.3 * r["kernel_ms"][key]]
        if host:
            print(f"host-bound {name} calls: {len(host)}, ms per call median "
                  f"{float(np.median(host)):.4f}, min {min(host):.4f}")


def tables(res):
    """The run's markdown tables (docs/blocksparse.md)."""
    def f(v):
        return "—" if v is None else f"{v:.3g}"
    print("| N | pattern | density | dtype | RHS | reuse (P) | 1D | 2D first | 2D C | 2D new | "
          "2D deep | 2D other warps | best 2D / 1D | call: 1D | call: 2D | call: dense | "
          "auto picked | call: auto |")
    print("|" + "---|" * 18)
    for r in res.get("patterns", []):
        ms = r["kernel_ms"]  # the launches alone; whole calls: the last columns
        best = min(v for k, v in ms.items() if k.startswith("2d_") and k != "2d_old")
        print(f"| {r.get('N', 16384)} | {r['pattern']} | {r['density']} | {r['dtype']} | "
              f"{r['rhs']} | {r['reuse']:.2f} ({r['P']}) | {f(ms['1d'])} | {f(ms.get('2d_old'))} | "
              f"{f(ms.get('2d_c'))} | {f(ms.get('2d_new'))} | {f(ms.get('2d_deep'))} | "
              f"{f(ms.get('2d_nw4', ms.get('2d_f64w')))} | **{best / ms['1d']:.2f}** | "
              f"{f(r['ms']['1d'])} | "
              f"{f(r['ms'].get('2d_row_order'))} | {f(r['ms']['dense'])} | {r['auto']} | "
              f"{f(r['ms']['auto'])} |")
    print()
    print("| pattern | RHS | reuse | 1D tile-fastest | 1D strip-major | 2D first | 2D new "
          "tile-fastest | 2D new strip-major | 2D deep | dense | auto |")
    print("|" + "---|" * 11)
    for r in res.get("wide", []):
        ms = r["ms"]
        print(f"| {r['pattern']} | {r['rhs']} | {r['reuse']:.2f} | " + " | ".join(
            f(ms.get(k)) for k in ("1d_tile_fastest", "1d_strip_major", "2d_old",
                                   "2d_new_tile_fastest", "2d_new", "2d_deep", "dense", "auto"))
            + " |")
    print()
    print("| order | RHS | nnz blocks | ours | bmm | ours / bmm | bytes ratio | ours TB/s | "
          "bmm TB/s | auto | error |")
    print("|" + "---|" * 11)
    for r in res.get("batched", []):
        print(f"| {r['order']} | {r['rhs']} | {r['nnzb']} | {r['ours_ms']:.4g} | {r['bmm_ms']:.4g} "
              f"| **{r['ratio']:.3f}** | {r['bytes_ratio']:.3f} | {r['ours_tbs']:.2f} | "
              f"{r['bmm_tbs']:.2f} | {r['auto_ms']:.4g} | {r['err_ours']:.1e} |")


if __name__ == "__main__":
    main()
