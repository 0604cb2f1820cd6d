#!/bin/bash
# The asv GPU history: the GPU benchmark classes (asv_bench/benchmarks: *GPU), one `asv run`
# each, on the device machine, recorded for the checked-out commit under
# asv_bench/results/<machine>/ (copied to $OUT: bring it back into the repository).
# Needs: the build on PYTHONPATH (source benchmarks/device_build.sh first), asv's wheels in
# .asvwheels (asv, asv_runner, json5, Pympler, importlib_metadata 8.5: `pip download --no-deps`
# for cp312 manylinux; the device has the rest), and the repository's history as
# a bundle in .asvwheels/main.bundle (`git bundle create .asvwheels/main.bundle main`; asv
# reads the commit's date from git).
#   run: source benchmarks/device_build.sh && bash benchmarks/asv_gpu.sh [machine]
# (ASV_CLASSES: the module.Class list to run, in order; ASV_S: the seconds they share, at most
# ASV_CLASS_S each)
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MACHINE=${1:-h100-sxm-80gb}
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/asv-site \
  .asvwheels/*.whl || exit 1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/asv-site
# (asv drops PYTHONPATH from the benchmarks' environment and passes ASV_PYTHONPATH instead: the
# build in /tmp/new-site must come before the source tree, which asv's runner can see)
export ASV_PYTHONPATH=$PYTHONPATH
# asv reads the commit's date from git in ../ (asv.conf.json "repo"): the bundle's main, fetched
# into the copied tree's repository (made if the copy has none)
[ -d .git ] || git init -q .
commit=$(git bundle list-heads .asvwheels/main.bundle refs/heads/main | cut -d' ' -f1)
git fetch -q .asvwheels/main.bundle "+refs/heads/main:refs/heads/main" 2>/dev/null \
  || git fetch -q .asvwheels/main.bundle "+refs/heads/main:refs/asv/main" || exit 1
echo "asv: commit $commit, machine $MACHINE"
cd asv_bench
python3 -m asv machine --yes --machine "$MACHINE" --os "$(uname -sr)" --arch x86_64 \
  --cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  --num_cpu "$(nproc)" --ram "$(free -g | awk '/Mem/ {print $2 " GB"}')" > /dev/null
# one `asv run` per class, each under its own limit (what is left of ASV_S): asv saves a run's
# results only when it ends and merges them into the commit's file, so a class that overruns
# loses only its own rows
classes=${ASV_CLASSES:-"kron.KronSmallGPU structured.StructuredGPU batched.BatchedGPU blocksparse.SpmmGPU strassen.StrassenGPU tensor.TensorGPU kron_operator.KroneckerOperatorGPU kron.KronLargeGPU"}
t0=$SECONDS
for c in $classes; do
  left=$(( ${ASV_S:-420} - (SECONDS - t0) ))
  [ $left -lt ${ASV_CLASS_S:-110} ] || left=${ASV_CLASS_S:-110}
  [ $left -gt 20 ] || { echo "asv: $c not run (time)"; continue; }
  echo "== asv $c ($left s left)"
  timeout $left python3 -m asv run --python=same --quick --show-stderr --launch-method forkserver \
    --machine "$MACHINE" --set-commit-hash "$commit" --bench "^$c\." 2>&1 \
    | grep -v "UserWarning\|warn_once\|to_sparse_bsr\|^ *$" >> "$OUT/asv_gpu.txt"
  grep -c "ok$\|failed$" "$OUT/asv_gpu.txt" | sed "s/^/  results so far: /"
done
tar cf "$OUT/asv_results_$MACHINE.tar" -C results "$MACHINE" benchmarks.json
