#!/bin/bash
# One device call for issue 34's open criteria ("Morton pays", batched 0.6x): the benchmark
# (benchmarks/blocksparse_morton.py), the GPU tests of the changed kernels, then
# compute-sanitizer memcheck (every dtype) and racecheck (FP16, FP32) over the 2D kernel's
# options and the strip-major grids; each step under its own limit so that what finished comes
# back (about 190 s after a ~140 s build).
#   bash .wheelhouse/gpu-run.sh bash benchmarks/blocksparse_morton.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== benchmark ($SECONDS s)"
timeout ${M_BENCH_S:-95} python benchmarks/blocksparse_morton.py --budget ${M_BUDGET:-78} \
  --sections ${M_SECTIONS:-patterns,wide,batched} --out "$OUT/morton.json" \
  2>&1 | tee "$OUT/morton_bench.txt" | grep -v '^{' | cut -c1-300 | tail -40
echo "== tests ($SECONDS s)"
timeout ${M_TEST_S:-30} python -m pytest -q -m gpu -p no:cacheprovider -rf -x \
  tests/test_blocksparse.py -k "${M_TESTS:-2d_options or alpha_beta}" \
  2>&1 | tee "$OUT/morton_tests.txt" | tail -5
echo "== sanitizer ($SECONDS s)"
{
  echo "-- memcheck, 2D options + strip-major"
  timeout ${M_MEM_S:-25} compute-sanitizer --tool memcheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --twod 2>&1 | tail -4
  echo "-- racecheck, 2D options + strip-major (FP16, FP32)"
  timeout ${M_RACE_S:-30} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --twod --quick 2>&1 | tail -4
} 2>&1 | tee "$OUT/morton_sanitizer.txt"
echo "== done ($SECONDS s)"
