#!/bin/bash
# One device call for the block-sparse operations: GPU tests, compute-sanitizer, the benchmark,
# each under its own limit so that what finished comes back.  Run from the repository root,
# after the build (bash .wheelhouse/gpu-run.sh bash benchmarks/blocksparse_session.sh):
#   OUT=/tmp/out bash benchmarks/blocksparse_session.sh
# BS_SAN=all: memcheck over every kernel (else the batched kernel's memcheck and racecheck);
# BS_RACE=1: racecheck over the panel and 2D kernels too.  The benchmark runs in two parts:
# batched + the dense-output SpGEMM (BS_SPGEMM_ALL=1: every SpGEMM case) first, then
# BS_SECTIONS (default spmm,auto; empty: none).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== tests ($SECONDS s)"
timeout ${BS_TEST_S:-75} python -m pytest -q -m gpu -p no:cacheprovider -rf \
  tests/test_blocksparse_batched.py tests/test_blocksparse.py \
  2>&1 | tee "$OUT/blocksparse_tests.txt" | tail -25
dense_only=--spgemm-dense-only; [ -n "$BS_SPGEMM_ALL" ] && dense_only=
echo "== benchmark: batched, SpGEMM ${dense_only:+(dense output only)} ($SECONDS s)"
timeout ${BS_BATCHED_S:-80} python benchmarks/blocksparse_gpu.py --budget ${BS_BATCHED_BUDGET:-65} \
  --sections spgemm,batched $dense_only --out "$OUT/blocksparse_batched.json" \
  2>&1 | tee "$OUT/blocksparse_batched_bench.txt" | tail -22
echo "== sanitizer ($SECONDS s)"
{
  if [ "$BS_SAN" = all ]; then
    timeout ${BS_SAN_S:-50} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python benchmarks/blocksparse_sanitize.py 2>&1 | tail -6
  else
    timeout ${BS_SAN_S:-35} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python benchmarks/blocksparse_sanitize.py --batched 2>&1 | tail -6
  fi
  echo "-- racecheck, batched kernel"
  timeout ${BS_RACE_S:-35} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --batched 2>&1 | tail -6
  if [ -n "$BS_RACE" ]; then
    timeout 40 compute-sanitizer --tool racecheck --error-exitcode 9 \
      python benchmarks/blocksparse_sanitize.py --quick 2>&1 | tail -6
  fi
} 2>&1 | tee "$OUT/blocksparse_sanitizer.txt"
if [ -n "${BS_SECTIONS-spmm,auto}" ]; then
  echo "== benchmark: ${BS_SECTIONS-spmm,auto} ($SECONDS s)"
  timeout ${BS_BENCH_S:-115} python benchmarks/blocksparse_gpu.py --budget ${BS_BUDGET:-95} \
    --sections ${BS_SECTIONS-spmm,auto} --spmm-dtypes ${BS_DTYPES:-fp32,fp16,fp64} \
    --out "$OUT/blocksparse.json" 2>&1 | tee "$OUT/blocksparse_bench.txt" | tail -45
fi
echo "== done ($SECONDS s)"
