#!/bin/bash
# The GPU tests in one device call, one pytest process per file (a fault in one file cannot
# poison the CUDA context of the others), with skip reasons; then compute-sanitizer memcheck
# on the kron and structured launch paths.
#   run: bash benchmarks/gpu_tests.sh [test files...]   (wheels from .wheelhouse, logs to $OUT)
# TESTS_S: seconds for all the files (default 480); TESTS_PARALLEL=1 runs them side by side
# (TESTS_JOBS at a time; FILE:n or TESTS_SHARDS=n: a file in n processes).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KRONLINALG_CACHE_DIR=$OUT/kl-cache
start=$SECONDS
[ -n "$KL_BUILT" ] || source benchmarks/device_build.sh  # (KL_BUILT: a caller built already)
files=${*:-tests/test_kron_cuda.py tests/test_structured.py tests/test_structured_packed.py tests/test_kron.py tests/test_strassen.py tests/test_planner.py tests/test_properties.py tests/test_hardening.py tests/test_namespace.py tests/test_structured_tiles.py tests/test_autograd.py tests/test_batched.py tests/test_blocksparse.py tests/test_cublaslt.py tests/test_kron_operator.py tests/test_demo.py tests/test_tensor.py tests/test_signatures.py tests/test_strassen_gpu.py}
t0=$SECONDS
if [ -n "$TESTS_PARALLEL" ]; then
  # the files at once, TESTS_JOBS (12) processes at a time, each its own plan cache, within
  # TESTS_S (the GPU is shared: test time only, never timings); FILE:n (or TESTS_SHARDS=n for
  # every file) runs a file in n processes, every n-th test each (conftest.py's shards)
  for entry in $files; do
    f=${entry%%:*}; n=${TESTS_SHARDS:-1}; [ "$entry" != "$f" ] && n=${entry##*:}
    for i in $(seq 0 $((n - 1))); do echo "$f $i $n"; done
  done | xargs -P ${TESTS_JOBS:-12} -L 1 bash -c '
    f=$0; i=$1; n=$2; name=$(basename $f .py)$([ $n -gt 1 ] && echo "_$i")
    KRONLINALG_TEST_SHARD=$([ $n -gt 1 ] && echo "$i/$n") KRONLINALG_CACHE_DIR=/tmp/kl-cache-$name \
      timeout '"${TESTS_S:-480}"' python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs "$f" \
      > "'"$OUT"'/gpu_$name.txt" 2>&1'
  for log in "$OUT"/gpu_test_*.txt; do echo "$(basename $log .txt): $(tail -1 "$log")"; done \
    | tee "$OUT/gpu_tests.txt"
else
for f in $files; do
  left=$(( ${TESTS_S:-480} - (SECONDS - t0) ))
  [ $left -gt 5 ] || { echo "$f: not run (time)"; continue; }
  log="$OUT/gpu_$(basename $f .py).txt"
  timeout $left python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs "$f" > "$log" 2>&1
  echo "$f: $(tail -1 "$log")"
done | tee "$OUT/gpu_tests.txt"
fi
grep -h "^FAILED\|^ERROR" "$OUT"/gpu_test_*.txt | head -30
grep -h "^SKIPPED" "$OUT"/gpu_test_*.txt | sort | uniq -c | sort -rn | head -12
for f in "$OUT"/gpu_test_*.txt; do grep -q "failed\|error" "$f" || rm -f "$f"; done
echo "total: $((SECONDS - start)) s"
