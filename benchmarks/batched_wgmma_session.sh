#!/bin/bash
# One device call for the warpgroup-MMA batched kernel (an sm_90a build):
#   OUT=/tmp/out KL_GPU_ARCH=90a bash .wheelhouse/gpu-run.sh bash benchmarks/batched_wgmma_session.sh
# its GPU tests (the half-type stacks on each kernel first), the A/B timing against the mma.sync
# kernel and torch.bmm, the rest of batched_matmul's GPU tests, compute-sanitizer memcheck and
# racecheck of the large-tile cases with the wgmma kernel on (variable batches too).
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_batched.py \
    -k "half_stacks or variable_packed_large" 2>&1 | tail -6; } | tee $OUT/wgmma_tests.txt
timeout ${WG_BENCH_S:-200} python benchmarks/batched_wgmma_ab.py --only ${WG_ONLY:-uniform,lowrank,variable8} --out $OUT/wgmma_ab.json 2>&1 | tee $OUT/wgmma_ab.txt
{ timeout 150 python -m pytest -q -m gpu -p no:cacheprovider tests/test_batched.py 2>&1 | tail -4
  for tool in memcheck racecheck; do
    KRONLINALG_BATCHED_WGMMA=2 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
      python benchmarks/batched_sanitize.py --quick --large-only 2>&1 | tail -3
    echo "$tool rc=${PIPESTATUS[0]}"
  done; } 2>&1 | tee $OUT/checks.txt
echo done
