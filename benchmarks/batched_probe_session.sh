#!/bin/bash
# One device call: batched_matmul's GPU tests, compute-sanitizer on the tiny-product kernel, the
# probe (device / loop / host time per call, tiny kernel on and off), a host profile of auto.
#   OUT=/tmp/out bash .wheelhouse/gpu-run.sh bash benchmarks/batched_probe_session.sh
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout ${BP_TEST_S:-150} python -m pytest -q -m gpu -p no:cacheprovider -x tests/test_batched.py $BP_TESTS 2>&1 | tail -8 | tee $OUT/tests.txt
{ timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python benchmarks/batched_sanitize.py --tiny-only 2>&1 | tail -4
  echo "memcheck rc=${PIPESTATUS[0]}"
  timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 python benchmarks/batched_sanitize.py --tiny-only 2>&1 | tail -4
  echo "racecheck rc=${PIPESTATUS[0]}"; } 2>&1 | tee $OUT/sanitizer.txt
timeout ${BP_PROBE_S:-150} python benchmarks/batched_probe.py $BP_ARGS --out $OUT/probe.json 2>&1 | tee $OUT/probe.txt
[ -n "$BP_PROFILE" ] && timeout 60 python benchmarks/batched_probe.py --profile-auto $BP_PROFILE 2>&1 | head -40 | tee $OUT/profile.txt
if [ -n "$BP_RACE_LARGE" ]; then  # racecheck of the 128 x 128 kernel's cases
  timeout ${BP_RACE_LARGE} compute-sanitizer --tool racecheck --error-exitcode 9 python benchmarks/batched_sanitize.py --quick --large-only 2>&1 | tail -4 | tee $OUT/race_large.txt
  echo "racecheck large rc=${PIPESTATUS[0]}" | tee -a $OUT/race_large.txt
fi
echo done
