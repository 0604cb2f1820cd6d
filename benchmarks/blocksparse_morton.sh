#!/bin/bash
# One device call for issue 34's open criteria ("Morton pays", batched 0.6x): the GPU tests of
# the changed kernels, the benchmark (benchmarks/blocksparse_morton.py), then compute-sanitizer
# memcheck (every dtype) and racecheck (FP16, FP32) over the 2D kernel's options and the
# strip-major grids; each step under its own limit so that what finished comes back.
#   bash .wheelhouse/gpu-run.sh bash benchmarks/blocksparse_morton.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== tests ($SECONDS s)"
timeout ${M_TEST_S:-45} python -m pytest -q -m gpu -p no:cacheprovider -rf -x \
  tests/test_blocksparse.py -k "2d_options or every_tile or alpha_beta or matches_dense" \
  2>&1 | tee "$OUT/morton_tests.txt" | tail -6
echo "== benchmark ($SECONDS s)"
timeout ${M_BENCH_S:-125} python benchmarks/blocksparse_morton.py --budget ${M_BUDGET:-100} \
  --sections ${M_SECTIONS:-patterns,wide,batched} --out "$OUT/morton.json" \
  2>&1 | tee "$OUT/morton_bench.txt" | grep -v '^{' | cut -c1-330 | tail -45
echo "== sanitizer ($SECONDS s)"
{
  echo "-- memcheck, 2D options + strip-major"
  timeout ${M_MEM_S:-30} compute-sanitizer --tool memcheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --twod 2>&1 | tail -4
  echo "-- racecheck, 2D options + strip-major (FP16, FP32)"
  timeout ${M_RACE_S:-40} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --twod --quick 2>&1 | tail -4
} 2>&1 | tee "$OUT/morton_sanitizer.txt"
echo "== done ($SECONDS s)"
