#!/bin/bash
# One device call closing a batched_matmul kernel change: the GPU tests of batched_matmul and
# what routes through it, compute-sanitizer racecheck of the 128 x 128 kernel's cases, the
# low-rank rows (the planner's pick), and Nsight Compute's per-kernel durations of one
# variable-size call (where its device time goes) plus the 128 x 128 kernel's stall profile.
#   OUT=/tmp/out bash .wheelhouse/gpu-run.sh bash benchmarks/batched_verify_session.sh
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 150 python -m pytest -q -m gpu -p no:cacheprovider tests/test_batched.py \
  tests/test_namespace.py tests/test_planner.py tests/test_signatures.py 2>&1 | tail -4 | tee $OUT/tests.txt
{ timeout ${BV_RACE_S:-220} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python benchmarks/batched_sanitize.py --quick --large-only 2>&1 | tail -3
  echo "racecheck rc=${PIPESTATUS[0]}"; } 2>&1 | tee $OUT/racecheck.txt
timeout 60 python benchmarks/batched_gpu.py --only lowrank --dtypes float64,float32 \
  --out $OUT/lowrank.json 2>&1 | grep -E "^\| low" | tee $OUT/lowrank.txt
timeout 90 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
  --print-summary per-kernel python benchmarks/batched_probe.py --ncu variable:float16 \
  > $OUT/variable_kernels.txt 2>&1
tail -60 $OUT/variable_kernels.txt | grep -E "large_kernel|tile_kernel|bin_kernel|Kernel|kernel|gpu__time" | head -60
NCU_CASES="u256:float16" NCU_S=90 OUT=/tmp/ncu bash benchmarks/batched_ncu.sh > /dev/null 2>&1
cp /tmp/ncu/ncu_u256_float16_stalls.txt $OUT/ 2>/dev/null; head -20 /tmp/ncu/ncu_u256_float16_stalls.txt | cut -c1-160
grep -E "Duration|Issued Ipc|No Eligible|Eligible Warps" /tmp/ncu/ncu_u256_float16.txt
echo done
