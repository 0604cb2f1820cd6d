#!/bin/bash
# One device call for the block-sparse operation: GPU tests, the benchmark, compute-sanitizer
# (memcheck over every kernel; racecheck over the panel and 2D kernels with BS_RACE=1), each
# under its own limit so that what finished comes back.  Run from the repository root, after
# the build (bash .wheelhouse/gpu-run.sh bash benchmarks/blocksparse_session.sh):
#   OUT=/tmp/out bash benchmarks/blocksparse_session.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== tests ($SECONDS s)"
timeout ${BS_TEST_S:-40} python -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_blocksparse.py \
  2>&1 | tee "$OUT/blocksparse_tests.txt" | tail -25
echo "== benchmark ($SECONDS s)"
timeout ${BS_BENCH_S:-215} python benchmarks/blocksparse_gpu.py --budget ${BS_BUDGET:-190} \
  --out "$OUT/blocksparse.json" 2>&1 | tee "$OUT/blocksparse_bench.txt" | tail -60
echo "== sanitizer ($SECONDS s)"
timeout ${BS_SAN_S:-45} compute-sanitizer --tool memcheck --error-exitcode 9 \
  python benchmarks/blocksparse_sanitize.py 2>&1 | tee "$OUT/blocksparse_sanitizer.txt" | tail -8
if [ -n "$BS_RACE" ]; then
  timeout ${BS_RACE_S:-40} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --quick 2>&1 | tee "$OUT/blocksparse_racecheck.txt" | tail -8
fi
echo "== done ($SECONDS s)"
