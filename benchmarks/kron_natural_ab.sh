#!/bin/bash
# The natural-order float32 kron kernel against the other kernels and across its tuning knobs,
# each configuration in its own process (the plan cache keys on these environment variables);
# tables and JSON to $OUT.  Run on the GPU machine after gpu-run.sh has built the checkout.
#   bash benchmarks/kron_natural_ab.sh [ab|sweep|cols4|tiles|colprof|passes|profile|p16src]...
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=benchmarks/data
CASES=1024x8^6,1024x16^5,1024x32^4,1024x64^3,16x32^5,16x16^6
run() {  # name, extra args, env...  (sweep tables go to one file: $OUT holds 8 files at most)
  local name=$1 extra=$2; shift 2
  echo "== $name $*" | tee -a "$OUT/kron_sweep.txt"
  env "$@" timeout 200 python benchmarks/kron_gpu_compare.py --cases $D/cases.json \
    --anchors $D/h100-anchors-2026-11-22.json --sets kron_large --dtypes float32 $extra \
    2>&1 | grep -E "float32|median" | tee -a "$OUT/kron_sweep.txt"
}
ab() {
  run natural "--json $OUT/kron_natural.json"
  run other "--no-shuffle --json $OUT/kron_other.json" KRONLINALG_KRON_NATURAL=0
  run natural_again "--json $OUT/kron_natural_again.json"
}
sweep() {
  local o="--no-shuffle --reps 10 --only $CASES"
  run default "$o"
  run st2 "$o" KRONLINALG_KRON_NATURAL_STAGES=2
  run st3 "$o" KRONLINALG_KRON_NATURAL_STAGES=3
  run t2 "$o" KRONLINALG_KRON_NATURAL_T=2
}
cols4() {  # column tiles of 4 i allowed: 3-step P = 16 groups (16 x 16^6 in 3 + 3, not 2+2+2)
  local o="--no-shuffle --reps 10 --only 16x16^6,16x32^5,1024x8^6,16x8^8,1024x16^5"
  run default "$o"
  run cols4 "$o" KRONLINALG_KRON_NATURAL_TI_MIN=4
}
tiles() {  # column tile widths and load stages on the cases with column passes
  local o="--no-shuffle --reps 10 --only 16x16^6,16x32^5,1024x8^6,16x8^8,1024x16^5"
  run ti4 "$o" KRONLINALG_KRON_NATURAL_TI_MIN=4 KRONLINALG_KRON_NATURAL_TI=4
  run ti16 "$o" KRONLINALG_KRON_NATURAL_TI=16
  run ti32 "$o" KRONLINALG_KRON_NATURAL_TI=32
  run st3 "$o" KRONLINALG_KRON_NATURAL_STAGES=3
}
colprof() {  # Nsight Compute, full set: the column passes of 16 x 32^5 (middle) and 1024 x 8^6
  cat > /tmp/colprof.py <<'PY'
import cupy as cp, kronlinalg
for m, p, n in ((16, 32, 5), (1024, 8, 6)):
    fs = [cp.random.standard_normal((p, p), dtype=cp.float32) for _ in range(n)]
    x = cp.random.standard_normal((m, p ** n), dtype=cp.float32)
    kronlinalg.kron_matmul(x, fs, algorithm="sliced")
cp.cuda.Device().synchronize()
PY
  for id in 2 5; do
    timeout 150 ncu --set full --import-source no --launch-skip $((id - 1)) --launch-count 1 \
      -k regex:natural -o /tmp/colprof$id python /tmp/colprof.py > /dev/null 2>&1
    ncu -i /tmp/colprof$id.ncu-rep --page details --csv > "$OUT/colprof_details$id.csv" 2>&1
    ncu -i /tmp/colprof$id.ncu-rep --page source --csv --print-source sass \
      > "$OUT/colprof_sass$id.csv" 2>&1
  done
}
passes() {  # Nsight Compute: time and DRAM traffic of every pass of the multi-pass kron_large cases
  cat > /tmp/passes.py <<'PY'
import cupy as cp, kronlinalg
for m, p, n in ((1024, 16, 5), (16, 16, 6), (16, 32, 5), (1024, 8, 6), (16, 8, 8)):
    fs = [cp.random.standard_normal((p, p), dtype=cp.float32) for _ in range(n)]
    x = cp.random.standard_normal((m, p ** n), dtype=cp.float32)
    kronlinalg.kron_matmul(x, fs, algorithm="sliced")
cp.cuda.Device().synchronize()
PY
  timeout 240 ncu --clock-control none -k regex:kron \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.per_cycle_active \
    python /tmp/passes.py 2>&1 | grep -E "kron|duration|bytes|throughput|issue_active|warps_active" \
    > "$OUT/ncu_passes.txt"
}
profile() {  # Nsight Compute on both passes of 256 x 32^4 and 256 x 16^5
  cat > /tmp/nat_prof.py <<'PY'
import cupy as cp, kronlinalg
for p, n in ((32, 4), (16, 5)):
    fs = [cp.random.standard_normal((p, p), dtype=cp.float32) for _ in range(n)]
    x = cp.random.standard_normal((256, p ** n), dtype=cp.float32)
    kronlinalg.kron_matmul(x, fs, algorithm="sliced")
cp.cuda.Device().synchronize()
PY
  timeout 240 ncu --clock-control none -k regex:natural --launch-count 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section Occupancy --section SchedulerStats python /tmp/nat_prof.py 2>&1 \
    | grep -E "natural_kernel|Duration|DRAM Throughput|Issued Warp|Local Memory|Theoretical Occ" \
    | tee "$OUT/ncu_natural.txt"
}
p16src() {  # Nsight Compute, full set with per-instruction counts: the P = 16 passes (256 x 16^5's
  # line and column passes, 16 x 16^6's line pass and ring column pass) and their SASS
  cat > /tmp/p16.py <<'PY'
import cupy as cp, kronlinalg
for m, n in ((256, 5), (16, 6)):
    fs = [cp.random.standard_normal((16, 16), dtype=cp.float32) for _ in range(n)]
    x = cp.random.standard_normal((m, 16 ** n), dtype=cp.float32)
    kronlinalg.kron_matmul(x, fs, algorithm="sliced")
cp.cuda.Device().synchronize()
PY
  for id in 0 1 2 3; do
    timeout 150 ncu --set full --import-source no -k regex:natural --launch-skip $id \
      --launch-count 1 -o /tmp/p16_$id python /tmp/p16.py > /dev/null 2>&1
    ncu -i /tmp/p16_$id.ncu-rep --page details --csv >> "$OUT/p16_details.csv" 2>&1
    ncu -i /tmp/p16_$id.ncu-rep --page source --csv --print-source sass 2>&1 \
      | gzip > "$OUT/p16_sass$id.csv.gz"
  done
}
for s in ${*:-ab}; do "$s"; done
