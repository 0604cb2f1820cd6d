#!/bin/bash
# One device call for the per-call fast path (issue 38's host time): benchmarks/gpu_tests.sh
# (build with CUDA for sm_90a, the GPU tests of the operations whose replays changed), then
# compute-sanitizer memcheck on the replays (benchmarks/sanitize_fastpath.py) and the host time
# per call (benchmarks/host_time.py).
#   run: bash benchmarks/hostpath_session.sh   (wheels from .wheelhouse; logs and tables to $OUT)
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash benchmarks/gpu_tests.sh ${TEST_FILES:-tests/test_kron_cuda.py tests/test_structured.py \
  tests/test_kron.py tests/test_autograd.py tests/test_structured_packed.py tests/test_hardening.py}
export PYTHONPATH=/tmp/new-site:/tmp/site PYTHONUNBUFFERED=1
cp benchmarks/sanitize_fastpath.py /tmp/san.py
(cd /tmp && timeout 120 compute-sanitizer --tool memcheck --print-limit 5 python3 /tmp/san.py 2>&1 | tail -3)
cp benchmarks/host_time.py /tmp/ht.py
(cd /tmp && python3 /tmp/ht.py --device cuda --out "$OUT" 2>&1 | tail -18)
