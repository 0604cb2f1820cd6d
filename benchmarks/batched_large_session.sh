#!/bin/bash
# One device call: the 128 x 128 kernel after a change.  BL_PARTS picks the parts, in this order
# (default: all three):
#   checks   batched_matmul's GPU tests, the large / variable ones again with unaligned rows
#            loaded synchronously, compute-sanitizer memcheck of the large-tile cases (staging
#            on: every loader path)
#   default  batched_gpu.py's large groups (orders 64-256, low rank, variable sizes)
#   sync     the variable groups with unaligned rows loaded synchronously (STAGING=0)
#   OUT=/tmp/out [BL_PARTS="checks default"] \
#     bash .wheelhouse/gpu-run.sh bash benchmarks/batched_large_session.sh
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PARTS=" ${BL_PARTS:-checks default sync} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
if part checks; then
  { timeout 150 python -m pytest -q -m gpu -p no:cacheprovider -x tests/test_batched.py 2>&1 | tail -4
    KRONLINALG_BATCHED_STAGING=0 timeout 90 python -m pytest -q -m gpu -p no:cacheprovider -x \
      tests/test_batched.py -k "large or variable or orders" 2>&1 | tail -3
    KRONLINALG_BATCHED_STAGING=1 timeout ${BL_SAN_S:-90} compute-sanitizer --tool memcheck \
      --error-exitcode 9 python benchmarks/batched_sanitize.py --quick --large-only 2>&1 | tail -3
    echo "memcheck rc=${PIPESTATUS[0]}"; } 2>&1 | tee $OUT/checks.txt
fi
if part default; then
  timeout ${BL_BENCH_S:-150} python benchmarks/batched_gpu.py \
    --only ${BL_ONLY:-lowrank,large64,variable,variable8,large} --out $OUT/large.json 2>&1 | tail -40
fi
if part sync; then
  KRONLINALG_BATCHED_STAGING=0 timeout 90 python benchmarks/batched_gpu.py --only variable,variable8 \
    --out $OUT/synchronous.json 2>&1 | tail -12
fi
echo done
