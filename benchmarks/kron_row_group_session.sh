#!/bin/bash
# One device call for kron_matmul's row groups (KRONLINALG_KRON_ROW_GROUP_KB, issue 35's float64
# roofline): the natural-kernel GPU tests with the row-group test, then kron_large float64 (and
# float32, KG_DTYPES) timed under each budget in its own process, alternated (KG_BUDGETS, KB;
# 0 = off), each step under its own limit so that what finished comes back:
#   OUT=/tmp/out KL_GPU_ARCH=90a bash .wheelhouse/gpu-run.sh bash benchmarks/kron_row_group_session.sh
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=benchmarks/data
echo "== tests ($SECONDS s)"
timeout ${KG_TEST_S:-100} python -m pytest tests/test_kron_cuda.py -q -p no:cacheprovider \
  -k "${KG_TESTS:-row_groups or natural_kernel or natural_two or ring_kernel}" 2>&1 | tail -4 \
  | tee "$OUT/tests.txt"
for kb in ${KG_BUDGETS:-0 16384 8192 32768 0 16384}; do
  echo "== ROW_GROUP_KB=$kb ($SECONDS s)" | tee -a "$OUT/ab.txt"
  KRONLINALG_KRON_ROW_GROUP_KB=$kb timeout ${KG_RUN_S:-75} python benchmarks/kron_gpu_compare.py \
    --cases $D/cases.json --anchors $D/h100-anchors-2026-11-22.json --sets kron_large \
    --dtypes ${KG_DTYPES:-float64} --no-shuffle --reps ${KG_REPS:-5} ${KG_ONLY:+--only $KG_ONLY} \
    --json "$OUT/ab_${kb}_${SECONDS}.json" 2>&1 | grep -E "float|median" | tee -a "$OUT/ab.txt"
done
echo "== done ($SECONDS s)"
