#!/bin/bash
# One device call for the per-call fast path (issue 38's host time): benchmarks/gpu_tests.sh
# (build with CUDA for sm_90a, the GPU tests of the operations whose replays changed), then
# compute-sanitizer memcheck on the replays (benchmarks/sanitize_fastpath.py) and the host time
# per call (benchmarks/host_time.py).
#   run: bash benchmarks/hostpath_session.sh   (wheels from .wheelhouse; logs and tables to $OUT)
# HT_SANITIZE=0 skips the sanitizer.  HT_OLD_EXT=DIR: .pyx/.pxd files of an older
# kronlinalg/_ext (`git show REV:kronlinalg/_ext/F > DIR/F`) are built beside this checkout and
# timed between two runs of it on the same host (host_time_cuda_{new1,old,new2}.md in $OUT):
# hosts differ by up to 1.5x, so a before/after holds only within one call.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash benchmarks/gpu_tests.sh ${TEST_FILES:-tests/test_kron_cuda.py tests/test_structured.py \
  tests/test_kron.py tests/test_autograd.py tests/test_structured_packed.py tests/test_hardening.py}
export PYTHONPATH=/tmp/new-site:/tmp/site PYTHONUNBUFFERED=1
if [ "${HT_SANITIZE:-1}" != 0 ]; then
  cp benchmarks/sanitize_fastpath.py /tmp/san.py
  (cd /tmp && timeout 120 compute-sanitizer --tool memcheck --print-limit 5 python3 /tmp/san.py 2>&1 | tail -3)
fi
cp benchmarks/host_time.py /tmp/ht.py
timed() {  # timed LABEL SITE: host_time with SITE's kronlinalg, tables renamed by LABEL
  (cd /tmp && PYTHONPATH=$2:/tmp/site python3 /tmp/ht.py --device cuda --out "$OUT" 2>&1 | tail -18)
  for ext in md json; do mv "$OUT/host_time_cuda.$ext" "$OUT/host_time_cuda_$1.$ext"; done
}
if [ -z "$HT_OLD_EXT" ]; then
  timed new /tmp/new-site
  exit 0
fi
timed new1 /tmp/new-site
rm -rf /tmp/ext-new && cp -a kronlinalg/_ext /tmp/ext-new
cp "$HT_OLD_EXT"/* kronlinalg/_ext/
t0=$SECONDS
python3 -m pip install -q --upgrade --no-build-isolation --no-deps -Csetup-args=-Dgpu_arch=90a \
  -Cbuild-dir=/tmp/kl-build --target /tmp/old-site . > "$OUT/build_old.txt" 2>&1 \
  || { tail -30 "$OUT/build_old.txt"; }
echo "old build: $((SECONDS - t0)) s"
rm -rf kronlinalg/_ext && cp -a /tmp/ext-new kronlinalg/_ext
[ -d /tmp/old-site/kronlinalg ] && timed old /tmp/old-site
timed new2 /tmp/new-site
