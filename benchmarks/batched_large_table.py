"""Before / after table of the 128 x 128 kernel from a `batched_gpu.py --ab` JSON file: per dtype,
uniform orders 64 / 128 / 256 (batch 10⁴) and the variable case (10⁴ packed products, orders
8..256; step 8 where present), our 1D kernel with the 128 x 128 tiles ("new": kami1d_us) and
without them ("small tiles": small_tiles_us, KRONLINALG_BATCHED_LARGE=0, same run), against
torch.bmm and the best of padding / bucketing + torch.bmm.  TB/s on A + B + D (the actual bytes
for variable sizes); the fraction is of the 2.96 TB/s copy bandwidth.

    python benchmarks/batched_large_table.py batched.json
"""

from __future__ import annotations

import json
import math
import sys

COPY_BW = 2.96e12


def _cell(nbytes, us):
    if not us or not math.isfinite(us):
        return "-"
    tb = nbytes / (us * 1e-6) / 1e12
    return f"{us:.0f} ({tb:.2f}, {tb * 1e12 / COPY_BW:.2f})"


def main(path):
    rows = json.load(open(path))["rows"]
    print("| dtype | case | torch.bmm / best baseline µs | small tiles µs (TB/s, of copy) | "
          "128 x 128 µs (TB/s, of copy) | new vs bmm / baseline | other thresholds µs |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["case"] == "batch 1e4" and r["m"] == r["n"] == r["k"] and r["n"] >= 64:
            base, label = r["torch_bmm_us"], f"{r['n']}³"
            base_txt = f"{base:.0f}"
        elif r["case"] == "variable":
            base = min(r.get("pad_bmm_us", math.inf), r.get("bucket_bmm_us", math.inf))
            label = f"variable {r['orders']}"
            base_txt = f"pad {r.get('pad_bmm_us', math.nan):.0f} / bucket {r.get('bucket_bmm_us', math.nan):.0f}"
        else:
            continue
        new = r.get("kami1d_us")
        other = ", ".join(f"from {k[11:-3]}: {r[k]:.0f}" for k in r if k.startswith("large_from_"))
        ratio = f"{base / new:.2f}x" if new else "-"
        print(f"| {r['dtype']} | {label} | {base_txt} | {_cell(r['bytes'], r.get('small_tiles_us'))} | "
              f"{_cell(r['bytes'], new)} | {ratio} | {other} |")


if __name__ == "__main__":
    main(sys.argv[1])
