#!/bin/bash
# One device call for strassen_matmul (after the build: bash .wheelhouse/gpu-run.sh bash
# benchmarks/strassen_session.sh): the leaf microbenchmark (DMMA shapes; the own leaf, the
# CUTLASS-mainloop leaves with 1, 2, 4 targets and cuBLAS, same run), the GPU tests,
# compute-sanitizer memcheck + racecheck, and the benchmark (cases with the planner's picks - the
# no-regression check - and the per-stage table, predicted beside measured); each under its own
# limit so that what finished comes back.  ST_SCRIPT_S: the seconds this script may take.
#   OUT=/tmp/out bash benchmarks/strassen_session.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CUTLASS_INC=$(python -c "import os, cutlass_library as c; print(os.path.join(os.path.dirname(c.__file__), 'source', 'include'))" 2>/dev/null)
echo "== CUTLASS: ${CUTLASS_INC:-not found}; microbenchmark build, in the background ($SECONDS s)"
CUT_FLAGS=()
[ -n "$CUTLASS_INC" ] && CUT_FLAGS=(-DKL_HAVE_CUTLASS -I "$CUTLASS_INC" --expt-relaxed-constexpr)
nvcc -arch=sm_90a -std=c++17 -O3 -I kernels/include -I kernels/common -I kernels/strassen \
  "${CUT_FLAGS[@]}" benchmarks/strassen_leaf_bench.cu -ldl -o /tmp/strassen_leaf_bench \
  > "$OUT/strassen_leaf.txt" 2>&1 &
nvcc_pid=$!
python -c "from kronlinalg import strassen; print('leaf tile (float64):', strassen.strassen_cuda.leaf_tile(1))"
echo "== tests ($SECONDS s)"
timeout ${ST_TEST_S:-75} python -m pytest -q -m gpu -p no:cacheprovider -rf -x \
  tests/test_strassen.py tests/test_strassen_gpu.py 2>&1 | tee "$OUT/strassen_tests.txt" | tail -6
echo "== microbenchmark ($SECONDS s)"
wait $nvcc_pid; echo "nvcc rc $?"
CUBLAS_LIB=$(python -c "
import cupy as cp
a = cp.ones((64, 64)); float((a @ a).sum())
print(next(l.split()[-1] for l in open('/proc/self/maps') if 'libcublas.so' in l and 'Lt' not in l))")
echo "cuBLAS: $CUBLAS_LIB"
CUBLAS_LIB=$CUBLAS_LIB timeout ${ST_MICRO_S:-50} /tmp/strassen_leaf_bench 2>&1 | tee -a "$OUT/strassen_leaf.txt" \
  | grep -E "^mma|^N=|T=1|T=4|bk32"
echo "== sanitizer ($SECONDS s)"
timeout ${ST_SAN_S:-45} compute-sanitizer --tool memcheck --error-exitcode 9 \
  python benchmarks/strassen_sanitize.py > "$OUT/strassen_sanitizer.txt" 2>&1
echo "memcheck rc $?" | tee -a "$OUT/strassen_sanitizer.txt"; tail -3 "$OUT/strassen_sanitizer.txt"
timeout ${ST_RACE_S:-35} compute-sanitizer --tool racecheck --error-exitcode 9 \
  python benchmarks/strassen_sanitize.py --quick >> "$OUT/strassen_sanitizer.txt" 2>&1
echo "racecheck rc $?" | tee -a "$OUT/strassen_sanitizer.txt"; tail -3 "$OUT/strassen_sanitizer.txt"
budget=$(( ${ST_SCRIPT_S:-290} - SECONDS - 15 ))
[ $budget -lt 40 ] && budget=40
echo "== benchmark, budget $budget s ($SECONDS s)"
timeout $((budget + 30)) python benchmarks/strassen_gpu.py --budget $budget --reps ${ST_REPS:-7} \
  --out "$OUT/strassen.json" > "$OUT/strassen_bench.txt" 2>&1
echo "bench rc $?"
grep -E "^\| (float|leaf)|REGRESSION|regression|error growth|memory|wall" "$OUT/strassen_bench.txt" \
  | grep -vE "\| (S1|S3\+S4|S6\+S7|copy\+S1) \|" | cut -c1-150
echo "== done ($SECONDS s)"
