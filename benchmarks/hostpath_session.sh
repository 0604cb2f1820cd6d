#!/bin/bash
# One device call for the per-call fast path (issue 38's host time): build with CUDA (sm_90a),
# the GPU tests of the operations whose replays changed, compute-sanitizer memcheck on the
# replays (benchmarks/sanitize_fastpath.py), then the host time per call (benchmarks/host_time.py).
#   run: bash benchmarks/hostpath_session.sh   (wheels from .wheelhouse; logs and tables to $OUT)
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KRONLINALG_CACHE_DIR=$OUT/kl-cache
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .wheelhouse/*.whl
export PYTHONPATH=/tmp/site
start=$SECONDS
python3 -m pip install -q --no-build-isolation --no-deps -Csetup-args=-Dgpu_arch=90a \
  -Cbuild-dir=/tmp/kl-build-hp --target /tmp/hp-site . > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
export PYTHONPATH=/tmp/hp-site:/tmp/site
echo "build: $((SECONDS - start)) s"
for f in ${TEST_FILES:-tests/test_kron_cuda.py tests/test_structured.py tests/test_kron.py tests/test_autograd.py tests/test_structured_packed.py tests/test_hardening.py}; do
  timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -x "$f" > "$OUT/t_$(basename $f .py).txt" 2>&1
  echo "$f: $(tail -1 "$OUT/t_$(basename $f .py).txt")"
done
grep -h "^FAILED\|^ERROR" "$OUT"/t_*.txt | head -10
cp benchmarks/sanitize_fastpath.py /tmp/san.py
(cd /tmp && timeout 120 compute-sanitizer --tool memcheck --print-limit 5 python3 /tmp/san.py 2>&1 | tail -3)
cp benchmarks/host_time.py /tmp/ht.py
(cd /tmp && python3 /tmp/ht.py --device cuda --out "$OUT" 2>&1 | tail -16)
echo "total: $((SECONDS - start)) s"
