# Sourced by the device-call scripts (gpu_tests.sh, distributed_gpu.sh): install the carried
# wheels into /tmp/site, build this checkout for sm_90a into /tmp/new-site (the log in
# $OUT/build.txt; the caller exits on failure) and put both on PYTHONPATH.  --upgrade: on a
# machine kept warm since an earlier call, pip --target would otherwise keep the old package.
mkdir -p /tmp/site "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .wheelhouse/*.whl
export PYTHONPATH=/tmp/site
build_start=$SECONDS
python3 -m pip install -q --upgrade --no-build-isolation --no-deps -Csetup-args=-Dgpu_arch=90a \
  -Cbuild-dir=/tmp/kl-build --target /tmp/new-site . > "$OUT/build.txt" 2>&1 \
  || { tail -30 "$OUT/build.txt"; exit 1; }
export PYTHONPATH=/tmp/new-site:/tmp/site
echo "build: $((SECONDS - build_start)) s"
