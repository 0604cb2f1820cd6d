#!/bin/bash
# One device call for issue 34's narrow right-hand sides (spmm_batched), with
# test_batched's GPU tests beside them (each step under its own limit, so what finished comes
# back):
#   OUT=/tmp/out KL_GPU_ARCH=90a bash .wheelhouse/gpu-run.sh bash benchmarks/blocksparse_narrow_session.sh
# 1. GPU tests: test_batched (NS_BATCHED=0 skips), the block-sparse batched kernel's and the
#    panel kernel's; 2. spmm_batched at narrow right-hand sides in each form (batched_narrow)
#    against torch.bmm and batched_matmul (the FP16 SpMM's work-list orders and panel variants:
#    blocksparse_half.sh); 3. compute-sanitizer memcheck and racecheck over the block-sparse
#    batched kernel (every form) and the panel kernel's options; 4. memcheck over
#    test_batched's large-tile kernels (NS_LARGE=0 skips). NS_GPU=1: issue 34's SpMM table
#    (blocksparse_gpu.py --sections spmm) before the sanitizers.
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== tests ($SECONDS s)"
if [ "${NS_BATCHED:-1}" = 1 ]; then
  timeout ${NS_BT_S:-90} python -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_batched.py \
    2>&1 | tail -6 | tee "$OUT/tests_batched.txt"
fi
timeout ${NS_TEST_S:-120} python -m pytest -q -m gpu -p no:cacheprovider -rf \
  tests/test_blocksparse_batched.py tests/test_blocksparse.py \
  -k "${NS_TESTS:-narrow or every_tile or panel_options or heavy or repeated or alpha_beta}" \
  2>&1 | tail -6 | tee "$OUT/tests_blocksparse.txt"
echo "== spmm_batched narrow ($SECONDS s)"
timeout ${NS_BATCHED_S:-90} python benchmarks/blocksparse_morton.py --budget 80 --sections batched \
  --out "$OUT/narrow.json" 2>&1 | grep -v '^{' | tee "$OUT/narrow.txt" | tail -14
if [ "${NS_GPU:-0}" = 1 ]; then  # issue 34's SpMM table: every dtype against torch BSR, dense,
                                 # cuSPARSE CSR (the spmm section of blocksparse_gpu.py)
  echo "== blocksparse_gpu.py --sections spmm ($SECONDS s)"
  timeout ${NS_GPU_S:-150} python benchmarks/blocksparse_gpu.py --budget 130 --sections spmm \
    --out "$OUT/spmm.json" 2>&1 | grep -E '^\| (dtype|fp|---)' | cut -c1-260 | tee "$OUT/spmm_table.txt"
fi
echo "== sanitizer ($SECONDS s)"
{
  echo "-- memcheck, block-sparse batched (every form) + panel options"
  timeout ${NS_MEM_S:-60} compute-sanitizer --tool memcheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --batched --panel 2>&1 | tail -3
  echo "memcheck rc=${PIPESTATUS[0]}"
  echo "-- racecheck, block-sparse batched + panel options"
  timeout ${NS_RACE_S:-60} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --batched --panel 2>&1 | tail -3
  echo "racecheck rc=${PIPESTATUS[0]}"
  if [ "${NS_LARGE:-1}" = 1 ]; then
    echo "-- memcheck, batched_matmul's large-tile kernels"
    timeout ${NS_LARGE_S:-90} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python benchmarks/batched_sanitize.py --quick --large-only 2>&1 | tail -3
    echo "large memcheck rc=${PIPESTATUS[0]}"
  fi
} 2>&1 | tee "$OUT/sanitizer.txt"
echo "== done ($SECONDS s)"
