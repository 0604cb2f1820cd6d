"""Offline check and refit of strassen_matmul's per-launch model from a device run's JSON.

    python benchmarks/strassen_fit.py strassen.json [--fit] [--fit-cublas]

Recomputes every stage's prediction (planner/costs/strassen.py's launch_times, on the run's
device profile) beside the measured time and prints pred/meas per stage and per total, flagging
stages outside +-15 % and totals outside +-10 % (the issue's bounds).  With --fit it first
searches the FP64 leaf's fraction of cuBLAS and its k0 (the CUTLASS leaf's constants where that
leaf ran, else the own kernel's) on the "strassen" leaf launches, least squares in log(pred/meas),
and prints the constants to put in the cost file.  With --fit-cublas it searches
strassen_cublas's host time a product and its short-call gain on strassen_cublas's launches.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

from kronlinalg.planner import DeviceProfile, Problem, profile_for
from kronlinalg.planner.costs import strassen as costs


def device_profile(res):
    raw = res.get("profile")
    if isinstance(raw, dict):
        fields = {f.name for f in dataclasses.fields(DeviceProfile)}
        try:
            return DeviceProfile(**{k: (tuple(v) if isinstance(v, list) else v)
                                    for k, v in raw.items() if k in fields})
        except TypeError:
            pass
    return profile_for("h100-sxm")


def predicted(prof, n, levels, algorithm, leaf_kernel):
    """Per-stage predictions; algorithm as the run tags it: "strassen_cublas (w)" / "(s)" is
    strassen_cublas at one level in Winograd's / the sums form (untagged: the sums form)."""
    shapes = ((n, n), (n, n))
    winograd = algorithm.endswith("(w)")
    algorithm = algorithm.split(" ")[0]
    info = {**costs.normalise(shapes, {}), "leaf_tile": (128, 128), "leaf_kernel": leaf_kernel,
            "winograd": winograd}
    p = Problem("strassen_matmul", shapes, "float64", "cuda:0", "cuda",
                {"levels": levels, "overwrite": False}, info)
    rows: dict = {}
    for lab, t in costs.launch_times(p, prof, levels, algorithm):
        rows[lab] = rows.get(lab, 0.0) + t
    return rows


def table(res, prof, leaf_kernel, show=True):
    groups: dict = {}
    for r in res["stages"]:
        groups.setdefault((r["algorithm"], r["N"], r["levels"]), []).append(r)
    worst, sq = [], 0.0
    for (algo, n, L), rows in sorted(groups.items()):
        pred = predicted(prof, n, L, algo, leaf_kernel)
        tot_m = tot_p = 0.0
        for r in rows:
            if r["stage"] == "total":
                continue
            p = pred.get(r["stage"], float("nan"))
            tot_m += r["measured_s"]
            tot_p += p
            ratio = p / r["measured_s"] if r["measured_s"] else float("nan")
            flag = "" if abs(ratio - 1) <= 0.15 else "  <-- outside 15 %"
            if flag:
                worst.append((algo, n, L, r["stage"], round(ratio, 2)))
            if ratio > 0 and (algo == "strassen" and r["stage"].startswith("{")
                              or FIT_CUBLAS and algo.startswith("strassen_cublas")):
                sq += math.log(ratio) ** 2
            if show:
                print(f"{algo:16s} N={n:5d} L={L} {r['stage']:8s} meas {r['measured_s'] * 1e3:8.3f}"
                      f" pred {p * 1e3:8.3f}  {ratio:.2f}{flag}")
        ratio = tot_p / tot_m if tot_m else float("nan")
        if abs(ratio - 1) > 0.10:
            worst.append((algo, n, L, "total", round(ratio, 2)))
        if show:
            print(f"{algo:16s} N={n:5d} L={L} total    meas {tot_m * 1e3:8.3f} pred "
                  f"{tot_p * 1e3:8.3f}  {ratio:.2f}{'' if abs(ratio - 1) <= 0.10 else '  <--'}")
    return worst, sq


FIT_CUBLAS = False  # --fit-cublas: the residual is over strassen_cublas's launches


def main():
    global FIT_CUBLAS
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--fit-cublas", action="store_true",
                    help="search strassen_cublas's host time a product (CUBLAS_HOST_S) and the "
                         "short-call gain (CUBLAS_SHORT_GAIN) on its launches")
    ap.add_argument("--leaf-kernel", default=None, help="own or cutlass (default: the run's)")
    args = ap.parse_args()
    res = json.load(open(args.json))
    prof = device_profile(res)
    leaf_kernel = args.leaf_kernel or ("own" if res.get("leaf_choice") == 0 else "cutlass")
    if args.fit:
        best = None
        for frac in [0.5 + 0.01 * i for i in range(61)]:
            for k0 in (0.0, 50.0, 100.0, 150.0, 200.0, 300.0, 400.0, 600.0, 800.0):
                if leaf_kernel == "cutlass":
                    costs.CUTLASS_LEAF_FRACTION, costs.CUTLASS_LEAF_K0 = frac, k0
                else:
                    costs.LEAF_FRACTION["float64"], costs.LEAF_K0["float64"] = frac, k0
                _, sq = table(res, prof, leaf_kernel, show=False)
                if best is None or sq < best[0]:
                    best = (sq, frac, k0)
        _, frac, k0 = best
        print(f"fit ({leaf_kernel} leaf): fraction {frac:.2f}, k0 {k0:.0f}")
        if leaf_kernel == "cutlass":
            costs.CUTLASS_LEAF_FRACTION, costs.CUTLASS_LEAF_K0 = frac, k0
        else:
            costs.LEAF_FRACTION["float64"], costs.LEAF_K0["float64"] = frac, k0
    if args.fit_cublas:
        FIT_CUBLAS = True
        best = None
        t0 = costs.CUBLAS_SHORT_T[0]
        for host in [1e-6 * h for h in range(10, 62, 2)]:
            for gain in [0.01 * g for g in range(0, 31)]:
                for t1 in (20e-3, 30e-3, 40e-3, 60e-3):
                    costs.CUBLAS_HOST_S, costs.CUBLAS_SHORT_GAIN = host, gain
                    costs.CUBLAS_SHORT_T = (t0, t1)
                    _, sq = table({"stages": [r for r in res["stages"]
                                              if r["algorithm"].startswith("strassen_cublas")]},
                                  prof, leaf_kernel, show=False)
                    if best is None or sq < best[0]:
                        best = (sq, host, gain, t1)
        _, host, gain, t1 = best
        print(f"fit (strassen_cublas): CUBLAS_HOST_S {host * 1e6:.0f} us, CUBLAS_SHORT_GAIN "
              f"{gain:.2f}, CUBLAS_SHORT_T ({t0 * 1e3:.1f} ms, {t1 * 1e3:.0f} ms)")
        costs.CUBLAS_HOST_S, costs.CUBLAS_SHORT_GAIN = host, gain
        costs.CUBLAS_SHORT_T = (t0, t1)
        FIT_CUBLAS = False
    worst, _ = table(res, prof, leaf_kernel)
    print(f"\n{len(worst)} stage(s)/total(s) outside the bounds:", worst)


if __name__ == "__main__":
    main()
