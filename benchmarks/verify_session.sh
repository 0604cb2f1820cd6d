#!/bin/bash
# The verification a session owes the GPU after CPU-only changes, in one device call (~9 min on
# an H100): the build (benchmarks/device_build.sh), the GPU tests of the operations and of the
# per-call fronts (one pytest process per file), compute-sanitizer memcheck on each operation's
# sanitizer script, racecheck of the block-sparse panels and the strassen FP64 leaf, and the host
# time per call (first, after the build); logs and tables to $OUT (sanitizer logs: one file).
#   run(command="bash benchmarks/verify_session.sh", carry=[".wheelhouse"], timeout_s=600)
# VERIFY_FILES overrides the test files; VERIFY_SAN=0 skips the sanitizers, VERIFY_HOST=0 the
# host-time table.  One process after another, everything takes more than one call's 600 s
# (test_kron_cuda.py alone ~210-600 s); VERIFY_ALL=1 runs every test file side by side instead
# (gpu_tests.sh's TESTS_PARALLEL, the long files in shards) with the sanitizers beside them,
# each sanitizer its own process: the whole GPU suite in one call.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# the build, then the host time first (on a device idle since the build: the reading the
# criteria judge), then the tests and the sanitizers
source benchmarks/device_build.sh
export KL_BUILT=1
if [ "${VERIFY_HOST:-1}" = 1 ]; then
  cp benchmarks/host_time.py /tmp/ht.py
  (cd /tmp && timeout 110 python3 /tmp/ht.py --device cuda --out "$OUT" 2>&1 | tail -18)
fi
export TESTS_S=${TESTS_S:-330}
if [ "${VERIFY_ALL:-0}" = 1 ]; then
  export TESTS_PARALLEL=1
  # (the long files in shards: test_kron_cuda ~600 s in one process, 4 x 130-165 s in four)
  VERIFY_FILES=${VERIFY_FILES:-$(ls tests/test_*.py | sed -e 's/test_kron_cuda.py$/&:4/' \
    -e 's/test_\(structured\|batched\|blocksparse\|blocksparse_batched\|kron\|strassen\|strassen_gpu\|structured_packed\|properties\|tensor\|tensor_half\|tensor_solve\|kron_operator\).py$/&:2/')}
fi
export PYTHONPATH=/tmp/new-site:/tmp/site PYTHONUNBUFFERED=1
# (every sanitizer log goes into ONE file under $OUT: the device returns at most 8 files, and
# the session of 21:22 UTC lost its sanitizer results to that limit)
san_log() {  # name, log: the verdict to stdout, the log's tail into $OUT/sanitizers.txt
  echo "$1: rc=$3 $(tail -1 "$2")"
  { echo "== $1 (rc $3)"; tail -25 "$2"; } >> "$OUT/sanitizers.txt"
}
sanitize() {  # name tool timeout script [args]: one compute-sanitizer run, its verdict logged
  local name=$1 tool=$2 limit=$3 script=$4; shift 4
  cp "benchmarks/$script.py" "/tmp/$script.py"
  (cd /tmp && timeout $limit compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 5 \
    python3 "/tmp/$script.py" "$@" > "/tmp/san_$name.txt" 2>&1)
  echo $? > "/tmp/san_$name.rc"
}
sanitizers() {  # memcheck of every operation's script; racecheck of the block-sparse panels and
  # batched C staging and of strassen's FP64 leaf (CUTLASS mainloop where built); two chains
  # side by side
  { sanitize blocksparse_sanitize memcheck 150 blocksparse_sanitize
    sanitize race_bs racecheck 150 blocksparse_sanitize --panel --batched
    sanitize sanitize_fastpath memcheck 90 sanitize_fastpath; } &
  sanitize batched_sanitize memcheck 90 batched_sanitize
  sanitize strassen_sanitize memcheck 90 strassen_sanitize
  sanitize tensor_sanitize memcheck 90 tensor_sanitize
  sanitize race_leaf racecheck 150 strassen_sanitize --leaf --quick
  wait
}
if [ "${VERIFY_SAN:-1}" = 1 ] && [ "${VERIFY_ALL:-0}" = 1 ]; then
  # (beside the tests: the sanitizers run their own processes)
  sanitizers &
  san_pid=$!
fi
bash benchmarks/gpu_tests.sh ${VERIFY_FILES:-tests/test_signatures.py tests/test_batched.py \
  tests/test_blocksparse.py tests/test_blocksparse_batched.py tests/test_strassen.py \
  tests/test_strassen_gpu.py tests/test_namespace.py tests/test_structured.py \
  tests/test_structured_packed.py tests/test_kron.py tests/test_autograd.py tests/test_hardening.py \
  tests/test_planner.py tests/test_kron_operator.py tests/test_tensor.py tests/test_tensor_fused.py \
  tests/test_tensor_solve.py tests/test_tensor_half.py tests/test_kron_cuda.py}
if [ "${VERIFY_SAN:-1}" = 1 ]; then
  if [ -n "$san_pid" ]; then wait $san_pid; else sanitizers; fi
  for s in sanitize_fastpath batched_sanitize blocksparse_sanitize strassen_sanitize tensor_sanitize \
           race_bs race_leaf; do
    san_log "$s" "/tmp/san_$s.txt" "$(cat /tmp/san_$s.rc 2>/dev/null)"
  done
fi
