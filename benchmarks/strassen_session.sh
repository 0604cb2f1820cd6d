#!/bin/bash
# One device call for strassen_matmul:
#   export ST_T0=$(date +%s) ST_LIMIT_S=410
#   bash .wheelhouse/gpu-run.sh bash benchmarks/strassen_session.sh
# First, side by side (correctness only, timings untouched): the GPU tests, and
# compute-sanitizer: racecheck of the FP64 leaf on a tiny problem (levels 0-2: a few CTAs a
# launch; its hazards are per CTA) and memcheck of strassen_cublas's passes in both one-level
# forms.  Then, alone on the GPU: the FP64 leaf's CUTLASS variants 3 (128x64) and 2 (m16n8k8)
# at N = 2048 and 4096 (one process each: the variant is read once a process), then the
# benchmark (focus: cuBLAS, Winograd's and the sums form interleaved; the case set with the
# planner's picks - the no-regression check; the per-stage table, predicted beside measured;
# the default leaf against cuBLAS).  Each step has its own limit; the benchmark gets what is
# left of ST_LIMIT_S counted from ST_T0 (else of ST_SCRIPT_S from the script's start).
#   OUT=/tmp/out bash benchmarks/strassen_session.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
left() {
  if [ -n "$ST_T0" ]; then echo $(( ${ST_LIMIT_S:-410} - ($(date +%s) - ST_T0) ));
  else echo $(( ${ST_SCRIPT_S:-260} - SECONDS )); fi
}
CUTLASS_INC=$(python -c "import os, cutlass_library as c; print(os.path.join(os.path.dirname(c.__file__), 'source', 'include'))" 2>/dev/null)
echo "== CUTLASS: ${CUTLASS_INC:-not found} ($SECONDS s, $(left) s left)"
python -c "from kronlinalg import strassen as s; c = s.strassen_cuda
print('FP64 leaf kernel:', c.leaf_kernel(1), '(0 own, 1-2 CUTLASS), tile', c.leaf_tile(1))"
(
  sleep 5  # after pytest's import (the editable build's no-op rebuild check)
  timeout ${ST_RACE_S:-55} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python benchmarks/strassen_sanitize.py --leaf --tiny > "$OUT/strassen_sanitizer.txt" 2>&1
  echo "racecheck (--leaf --tiny) rc $?" >> "$OUT/strassen_sanitizer.txt"
  timeout ${ST_SAN_S:-50} compute-sanitizer --tool memcheck --error-exitcode 9 \
    python benchmarks/strassen_sanitize.py --cublas >> "$OUT/strassen_sanitizer.txt" 2>&1
  echo "memcheck (--cublas) rc $?" >> "$OUT/strassen_sanitizer.txt"
) &
san_pid=$!
echo "== tests, with the sanitizers beside them ($SECONDS s)"
timeout ${ST_TEST_S:-100} python -m pytest -q -m gpu -p no:cacheprovider -rf \
  tests/test_strassen.py tests/test_strassen_gpu.py > "$OUT/strassen_tests.txt" 2>&1
test_rc=$?; tail -8 "$OUT/strassen_tests.txt"; echo "tests rc $test_rc ($SECONDS s)"
wait $san_pid
grep -E "rc [0-9]|SUMMARY|sanitize script done|Race|Hazard" "$OUT/strassen_sanitizer.txt" | head -20
echo "sanitizers done ($SECONDS s, $(left) s left)"
echo "== leaf variants ($SECONDS s)"
for v in 2; do
  KRONLINALG_STRASSEN_LEAF=$v timeout 25 python benchmarks/strassen_gpu.py --sections leaf \
    --leaf-dtypes float64 --leaf-sizes 2048,4096 --reps 7 --budget 200 --out /tmp/leaf$v.json \
    2>&1 | grep -E "^\| leaf|rror" | tee -a "$OUT/strassen_leaf_variants.txt"
done
budget=$(( $(left) - 30 ))
[ $budget -lt 40 ] && budget=40
echo "== benchmark, budget $budget s ($SECONDS s)"
timeout $((budget + 20)) python benchmarks/strassen_gpu.py --budget $budget --reps ${ST_REPS:-5} \
  --sweep 0 --out "$OUT/strassen.json" > "$OUT/strassen_bench.txt" 2>&1
echo "bench rc $?"
grep -E "^\| (focus|float|leaf)|\| total \||REGRESSION|regression|error growth|memory|wall|out of time" \
  "$OUT/strassen_bench.txt" | grep -vE "\| (S1|S3\+S4|S6\+S7|copy\+S1) \|" | cut -c1-160
echo "== done ($SECONDS s, $(left) s left)"
