#!/bin/bash
# One device call for strassen_matmul (after the build: bash .wheelhouse/gpu-run.sh bash
# benchmarks/strassen_session.sh).  First, side by side (correctness only, timings untouched):
# the GPU tests, compute-sanitizer memcheck + racecheck on the FP64 leaf (every level), and the
# microbenchmark's build.  Then, alone on the GPU: the leaf microbenchmark (DMMA shapes; the own
# leaf, the CUTLASS-mainloop leaves with 1, 2, 4 targets and cuBLAS, same run) and the benchmark
# (the case set with the planner's picks - the no-regression check - the sweeps and the
# per-stage table, predicted beside measured).  Each step has its own limit so that what
# finished comes back; the benchmark gets what is left of ST_LIMIT_S (the call's limit) counted
# from ST_T0 (date +%s at the call's start), else of ST_SCRIPT_S.
#   OUT=/tmp/out bash benchmarks/strassen_session.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CUTLASS_INC=$(python -c "import os, cutlass_library as c; print(os.path.join(os.path.dirname(c.__file__), 'source', 'include'))" 2>/dev/null)
echo "== CUTLASS: ${CUTLASS_INC:-not found} ($SECONDS s)"
python -c "from kronlinalg import strassen as s; c = s.strassen_cuda
print('FP64 leaf kernel:', c.leaf_kernel(1), '(0 own, 1-3 CUTLASS), tile', c.leaf_tile(1))"
CUT_FLAGS=()
[ -n "$CUTLASS_INC" ] && CUT_FLAGS=(-DKL_HAVE_CUTLASS -I "$CUTLASS_INC" --expt-relaxed-constexpr)
nvcc -arch=sm_90a -std=c++17 -O3 -I kernels/include -I kernels/common -I kernels/strassen \
  "${CUT_FLAGS[@]}" benchmarks/strassen_leaf_bench.cu -ldl -o /tmp/strassen_leaf_bench \
  > "$OUT/strassen_leaf.txt" 2>&1 &
nvcc_pid=$!
(
  sleep 5  # after pytest's import (the editable build's no-op rebuild check)
  timeout ${ST_SAN_S:-60} compute-sanitizer --tool memcheck --error-exitcode 9 \
    python benchmarks/strassen_sanitize.py --leaf > "$OUT/strassen_sanitizer.txt" 2>&1
  echo "memcheck (--leaf) rc $?" >> "$OUT/strassen_sanitizer.txt"
  timeout ${ST_RACE_S:-120} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python benchmarks/strassen_sanitize.py --leaf --quick >> "$OUT/strassen_sanitizer.txt" 2>&1
  echo "racecheck (--leaf --quick) rc $?" >> "$OUT/strassen_sanitizer.txt"
) &
san_pid=$!
echo "== tests, with the sanitizers beside them ($SECONDS s)"
timeout ${ST_TEST_S:-110} python -m pytest -q -m gpu -p no:cacheprovider -rf -x \
  tests/test_strassen.py tests/test_strassen_gpu.py > "$OUT/strassen_tests.txt" 2>&1
test_rc=$?; tail -6 "$OUT/strassen_tests.txt"; echo "tests rc $test_rc ($SECONDS s)"
wait $san_pid
grep -E "rc [0-9]|SUMMARY|sanitize script done" "$OUT/strassen_sanitizer.txt"
echo "sanitizers done ($SECONDS s)"
if [ $test_rc -ne 0 ] && [ $test_rc -ne 124 ] && [ -z "$KRONLINALG_STRASSEN_LEAF" ]; then
  # a failing default leaf must not cost the rest of the run: measure the own kernel instead
  export KRONLINALG_STRASSEN_LEAF=0; echo "tests failed: KRONLINALG_STRASSEN_LEAF=0 from here"
fi
echo "== microbenchmark ($SECONDS s)"
wait $nvcc_pid; echo "nvcc rc $?"
CUBLAS_LIB=$(python -c "
import cupy as cp
a = cp.ones((64, 64)); float((a @ a).sum())
print(next(l.split()[-1] for l in open('/proc/self/maps') if 'libcublas.so' in l and 'Lt' not in l))")
echo "cuBLAS: $CUBLAS_LIB"
CUBLAS_LIB=$CUBLAS_LIB timeout ${ST_MICRO_S:-50} /tmp/strassen_leaf_bench 2>&1 | tee -a "$OUT/strassen_leaf.txt" \
  | grep -E "^mma|^N=|T=1|T=4|bk32|rror"
if [ -n "$ST_T0" ]; then
  budget=$(( ${ST_LIMIT_S:-420} - ($(date +%s) - ST_T0) - 25 ))
else
  budget=$(( ${ST_SCRIPT_S:-290} - SECONDS - 15 ))
fi
[ $budget -lt 40 ] && budget=40
echo "== benchmark, budget $budget s ($SECONDS s)"
timeout $((budget + 30)) python benchmarks/strassen_gpu.py --budget $budget --reps ${ST_REPS:-5} \
  --out "$OUT/strassen.json" > "$OUT/strassen_bench.txt" 2>&1
echo "bench rc $?"
grep -E "^\| (float|leaf)|REGRESSION|regression|error growth|memory|wall" "$OUT/strassen_bench.txt" \
  | grep -vE "\| (S1|S3\+S4|S6\+S7|copy\+S1) \|" | cut -c1-150
echo "== done ($SECONDS s)"
