"""The CUDA cost-model constants of planner/costs/batched.py from a benchmarks/batched_gpu.py
JSON file: per dtype and arrangement, our kernels' fraction of the copy bandwidth by order
(batch 10⁴, orders 16-64), their flop rate at order 256, and how much slower the variable-size
case (orders uniform in 8..256) ran than the same flops at that rate; torch.bmm's fraction of the
copy bandwidth by order.  Prints the tables to paste (the model is edited by hand: a reviewer
sees every change).

    python benchmarks/batched_calibrate.py benchmarks/data/batched_h100_2026-11-26.json [--check]

--check: plans every uniform case of the file with the planner as it is now (profile
"h100-sxm") and prints its pick against the fastest measured candidate (torch.bmm for
"library"): the pick within 10 % of the fastest or not.
"""

from __future__ import annotations

import json
import sys

COPY_BW = 2.96e12


def main(path):
    rows = json.load(open(path))["rows"]
    uni = [r for r in rows if r["case"] == "batch 1e4" and r["m"] == r["n"] == r["k"]]
    var = {r["dtype"]: r for r in rows if r["case"] == "variable" and "step" not in r["orders"]}
    kami, lib = {}, {}
    for r in uni:
        dt = "float16" if r["dtype"] in ("float16", "bfloat16") else r["dtype"]
        if r["dtype"] == "bfloat16":
            continue
        n = r["n"]
        lib.setdefault(dt, {})[n] = round(r["bytes"] / (r["torch_bmm_us"] * 1e-6) / COPY_BW, 3)
        for dims in (1, 2):
            t = r.get(f"kami{dims}d_us")
            if t is None:
                continue
            entry = kami.setdefault((dt, dims), {"rate": None, "bw": {}, "variable": None})
            if n <= 64:
                entry["bw"][n] = round(r["bytes"] / (t * 1e-6) / COPY_BW, 3)
            if n == 256:
                entry["rate"] = 2.0 * r["batch"] * n ** 3 / (t * 1e-6)
    for (dt, dims), entry in kami.items():
        v = var.get(dt)
        if v is not None and entry["rate"] and v.get(f"kami{dims}d_us"):
            # the variable case's flops: 2 n³ summed over orders uniform in 8..256
            flops = 2.0 * v["count"] * sum(n ** 3 for n in range(8, 257)) / 249
            entry["variable"] = round(v[f"kami{dims}d_us"] * 1e-6 / (flops / entry["rate"]), 2)
        if entry["rate"]:
            entry["rate"] = float(f"{entry['rate']:.3g}")
    print("LIBRARY_BW_FRACTION = {")
    for dt, t in lib.items():
        print(f"    {dt!r}: {dict(sorted(t.items()))},")
    print("}")
    print("KAMI_MEASURED = {")
    for key, e in sorted(kami.items()):
        print(f"    {key!r}: {{'rate': {e['rate']!r}, 'bw': {dict(sorted(e['bw'].items()))}, "
              f"'variable': {e['variable']!r}}},")
    print("}")


def check(path):
    import kronlinalg

    rows = json.load(open(path))["rows"]
    good = total = 0
    for r in rows:
        if r["case"] not in ("batch 1e4", "batch 1e3", "low rank"):
            continue
        times = {"library": r["torch_bmm_us"], "kami1d": r.get("kami1d_us"),
                 "kami2d": r.get("kami2d_us")}
        times = {k: v for k, v in times.items() if v}
        plan = kronlinalg.plan("batched_matmul", (r["batch"], r["m"], r["k"]),
                               (r["batch"], r["k"], r["n"]), dtype=r["dtype"], device="h100-sxm")
        pick = plan[0].name
        best = min(times.values())
        ok = times.get(pick, float("inf")) <= 1.1 * best
        good += ok
        total += 1
        print(f"{r['case']:9} {r['dtype']:8} {r['m']}x{r['k']}x{r['n']:<4} pick {pick:7} "
              f"{times.get(pick, float('nan')):9.1f} us, fastest {min(times, key=times.get):7} "
              f"{best:9.1f} us {'ok' if ok else 'MISS'}")
    print(f"pick within 10 % of the fastest: {good} of {total}")


if __name__ == "__main__":
    check(sys.argv[1]) if "--check" in sys.argv else main(sys.argv[1])
