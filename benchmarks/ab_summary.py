"""Old against new, from the JSON files of benchmarks/refactor_session.sh: kron_large's per-case
times (kron_gpu_compare.py, the median over its rounds) and the Kronecker-sparse float32 set's
kernel times (structured_compare.py), as medians of new/old per-case ratios.

    python benchmarks/ab_summary.py OUTDIR
"""

from __future__ import annotations

import glob
import json
import statistics
import sys


def kron_cases(paths):
    times = {}
    for p in paths:
        with open(p) as fh:
            rows = json.load(fh)["rows"]
        for r in rows:
            if "ms" in r:
                times.setdefault((r.get("case") or str(r.get("shapes")), r["dtype"]), []).append(r["ms"])
    return {k: statistics.median(v) for k, v in times.items()}


def ks_cases(path):
    with open(path) as fh:
        res = json.load(fh)
    rows = res.get("rows") or res.get("gpu_rows") or []
    return {(str(r["pattern"]), r["layout"], r["dtype"]): r for r in rows if "kernel_ms" in r}


def main(out):
    old = kron_cases(sorted(glob.glob(f"{out}/kron_old_*.json")))
    new = kron_cases(sorted(glob.glob(f"{out}/kron_new_*.json")))
    ratios = []
    for k in sorted(set(old) & set(new)):
        ratios.append(new[k] / old[k])
        print(f"kron {k[0]:>28} {k[1]}: old {old[k]:8.3f} ms  new {new[k]:8.3f} ms  new/old {ratios[-1]:.3f}")
    if ratios:
        print(f"kron_large float32: median new/old {statistics.median(ratios):.3f} over {len(ratios)} cases")
    try:
        o, n = ks_cases(f"{out}/ks_old.json"), ks_cases(f"{out}/ks_new.json")
    except (OSError, ValueError, KeyError) as exc:
        print(f"KS: no comparison ({exc!r})")
        return
    common = sorted(set(o) & set(n))
    kr = [n[k]["kernel_ms"] / o[k]["kernel_ms"] for k in common]
    if kr:
        print(f"KS float32 kernel: median new/old {statistics.median(kr):.3f} over {len(kr)} rows "
              f"(min {min(kr):.3f}, max {max(kr):.3f}); old median kernel "
              f"{statistics.median(o[k]['kernel_ms'] for k in common):.4f} ms, new "
              f"{statistics.median(n[k]['kernel_ms'] for k in common):.4f} ms")


if __name__ == "__main__":
    main(sys.argv[1])
