#!/bin/bash
# A/B of kernel source variants in one device call (one machine, so the timings compare):
# each DIR holds replacement files for kernels/kron/, copied in (fresh timestamps) and rebuilt
# through the editable install before kron_large float32 is timed; list a variant twice to
# alternate.  The last variant's sources stay in kernels/kron/ on the device.
#   bash .wheelhouse/gpu-run.sh bash benchmarks/kron_variant_ab.sh DIR_A DIR_B DIR_A DIR_B
#   ONLY=1024x32^4,16x32^5 bash ... (cases)     env knobs apply to every variant
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=benchmarks/data
for v in "$@"; do
  cp "$v"/* kernels/kron/
  s=$SECONDS; python -c "import kronlinalg" > /dev/null 2>&1; echo "rebuild $v: $((SECONDS - s)) s"
  echo "== $v" | tee -a "$OUT/ab.txt"
  timeout 200 python benchmarks/kron_gpu_compare.py --cases $D/cases.json \
    --anchors $D/h100-anchors-2026-11-22.json --sets kron_large --dtypes float32 --no-shuffle \
    --reps 10 ${ONLY:+--only $ONLY} 2>&1 | grep -E "float32|median" | tee -a "$OUT/ab.txt"
done
