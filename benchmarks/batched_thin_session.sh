#!/bin/bash
# One device call for batched_matmul's thin-product kernel (low-rank stacks):
#   OUT=/tmp/out KL_GPU_ARCH=90a bash .wheelhouse/gpu-run.sh bash benchmarks/batched_thin_session.sh
# test_batched's GPU tests, compute-sanitizer memcheck and racecheck on the tiny- and
# thin-product kernels' cases, the A/B (thin kernel forms, tile kernels, auto, torch.bmm), then
# the low-rank tests and the sanitizers again with the other forms (KRONLINALG_BATCHED_THIN_OPTS).
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout ${BT_TEST_S:-200} python -m pytest -q -m gpu -p no:cacheprovider tests/test_batched.py $BT_TESTS 2>&1 | tail -8 | tee $OUT/tests.txt
{ timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python benchmarks/batched_sanitize.py --tiny-only 2>&1 | tail -4
  echo "memcheck rc=${PIPESTATUS[0]}"
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 python benchmarks/batched_sanitize.py --tiny-only 2>&1 | tail -4
  echo "racecheck rc=${PIPESTATUS[0]}"; } 2>&1 | tee $OUT/sanitizer.txt
timeout ${BT_AB_S:-220} python benchmarks/batched_thin_ab.py $BT_ARGS --out $OUT/thin_ab.json 2>&1 | grep -v Warn | tee $OUT/thin_ab.txt
# other forms: bulk stores from 8-warp blocks; float32's warps in rows; float32 staged, bulk stores
for opts in ${BT_OPTS:-3 4 8}; do
  KRONLINALG_BATCHED_THIN_OPTS=$opts timeout 60 python -m pytest -q -m gpu -p no:cacheprovider tests/test_batched.py -k low_rank 2>&1 | tail -1 | sed "s/^/THIN_OPTS=$opts: /"
  KRONLINALG_BATCHED_THIN_OPTS=$opts timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python benchmarks/batched_sanitize.py --tiny-only 2>&1 | tail -1
  echo "memcheck (THIN_OPTS=$opts) rc=${PIPESTATUS[0]}"
done 2>&1 | tee -a $OUT/sanitizer.txt
echo done
