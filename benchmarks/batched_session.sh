#!/bin/bash
# One device call for batched_matmul: the GPU tests of tests/test_batched.py, the benchmark
# (groups chosen by BM_ONLY), compute-sanitizer memcheck (+ racecheck on the quick set), each
# under its own limit so that what finished comes back.  Run from the repository root, after
# the build (bash .wheelhouse/gpu-run.sh bash benchmarks/batched_session.sh):
#   OUT=/tmp/out BM_ONLY=variable,large bash benchmarks/batched_session.sh
# (BM_ARGS: more arguments of batched_gpu.py, e.g. "--ab --dtypes float16,float32"; BM_TEST_K:
# a pytest -k expression; BM_RACE_ARGS: racecheck's extra arguments, e.g. --large-only;
# BM_TABLE=1: the before / after table of batched_large_table.py, from an --ab run)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== benchmark ($SECONDS s)"
timeout ${BM_BENCH_S:-200} python benchmarks/batched_gpu.py --only "${BM_ONLY:-small,b1e3,fp32err,lowrank,variable,variable8,large}" \
  $BM_ARGS --out "$OUT/batched.json" 2>&1 | tee "$OUT/batched_bench.txt" | grep -v "^|" | tail -60
[ -n "$BM_TABLE" ] && python benchmarks/batched_large_table.py "$OUT/batched.json" | tee "$OUT/batched_large.md"
echo "== tests ($SECONDS s)"
timeout ${BM_TEST_S:-100} python -m pytest -q -m gpu -p no:cacheprovider -rf -x tests/test_batched.py ${BM_TEST_K:+-k "$BM_TEST_K"} \
  2>&1 | tee "$OUT/batched_tests.txt" | tail -15
echo "== sanitizer ($SECONDS s)"
{ timeout ${BM_SAN_S:-80} compute-sanitizer --tool memcheck --error-exitcode 9 \
    python benchmarks/batched_sanitize.py --quick 2>&1 | tail -8
  echo "memcheck rc=${PIPESTATUS[0]}"
  if [ "${BM_RACE:-1}" = 1 ]; then
    timeout ${BM_RACE_S:-60} compute-sanitizer --tool racecheck --error-exitcode 9 \
      python benchmarks/batched_sanitize.py --quick $BM_RACE_ARGS 2>&1 | tail -8
    echo "racecheck rc=${PIPESTATUS[0]}"  # (read before any other command resets it)
  fi; } 2>&1 | tee "$OUT/batched_sanitizer.txt"
echo "== done ($SECONDS s)"
