#!/bin/bash
# One device call: where batched_matmul's 128 x 128 kernel spends its time — Nsight Compute's
# warp-state statistics and per-SASS-instruction stall samples for each case named in
# $NCU_CASES (batched_probe.py --ncu specs: u256:float16, variable:float16, ...).
#   OUT=/tmp/out NCU_CASES="u256:float16 variable:float16" \
#     bash .wheelhouse/gpu-run.sh bash benchmarks/batched_ncu.sh
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for case in ${NCU_CASES:-u256:float16 variable:float16}; do
  tag=${case//:/_}
  timeout ${NCU_S:-150} ncu --clock-control none --profile-from-start off \
    -k regex:${NCU_KERNEL:-large_kernel} -c 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
    -o /tmp/$tag -f python benchmarks/batched_probe.py --ncu $case > /tmp/$tag.log 2>&1
  tail -3 /tmp/$tag.log
  ncu -i /tmp/$tag.ncu-rep --page details > $OUT/ncu_$tag.txt 2>&1
  ncu -i /tmp/$tag.ncu-rep --page source --csv --print-source sass > /tmp/${tag}_sass.csv 2>&1
  python - /tmp/${tag}_sass.csv > $OUT/ncu_${tag}_stalls.txt <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = next(i for i, r in enumerate(rows) if any("Sampl" in c for c in r))
cols, body = rows[head], rows[head + 1:]
ci = next(i for i, c in enumerate(cols) if "Sampling (All" in c)
src = next((i for i, c in enumerate(cols) if c.strip().lower() == "source"), 1)
stall = [i for i, c in enumerate(cols) if c.startswith("stall_") or "Stall" in c and i != ci]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
total = sum(num(r[ci]) for r in body if len(r) > ci) or 1
print("columns:", cols)
print("total samples", total)
# by stall reason, summed
sums = {cols[i]: sum(num(r[i]) for r in body if len(r) > i) for i in stall}
for k, v in sorted(sums.items(), key=lambda kv: -kv[1])[:16]:
    print(f"{v / total:6.3f} {k}")
print()
for r in sorted((r for r in body if len(r) > ci), key=lambda r: -num(r[ci]))[:70]:
    top = sorted(((num(r[i]), cols[i]) for i in stall), reverse=True)[:3]
    print(f"{num(r[ci]) / total:6.3f} {r[0]:>6} {r[src][:70]:70s} " +
          " ".join(f"{n}={v:.0f}" for v, n in top if v))
PY
  gzip -c /tmp/${tag}_sass.csv > $OUT/ncu_${tag}_sass.csv.gz
done
echo done
