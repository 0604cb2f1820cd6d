#!/bin/bash
# The "one house" refactor on the GPU, in one device call: build this tree and the commit
# before the refactor (59abdee, carried as .old/old.tar) side by side, run the GPU tests and
# compute-sanitizer on the changed launch paths, then time kron_large float32 and the
# Kronecker-sparse float32 set on both builds in the same call, and the host time per call.
#   run: bash benchmarks/refactor_session.sh   (wheels from .wheelhouse, results to $OUT)
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KRONLINALG_CACHE_DIR=$OUT/kl-cache
wh=$PWD/.wheelhouse
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$wh"/*.whl
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
start=$SECONDS
mkdir -p /tmp/old && tar -xf .old/old.tar -C /tmp/old
( cd /tmp/old && python3 -m pip install -q --no-build-isolation --no-deps -Csetup-args=-Dgpu_arch=90a \
    -Cbuild-dir=/tmp/old-build --target /tmp/old-site . > "$OUT/old_build.txt" 2>&1 ) &
# both builds installed into their own folders (not editable: an editable install's import
# hook would shadow the old build), chosen per command by PYTHONPATH
python3 -m pip install -q --no-build-isolation --no-deps -Csetup-args=-Dgpu_arch=90a \
  -Cbuild-dir=/tmp/kl-build --target /tmp/new-site . > "$OUT/new_build.txt" 2>&1 || { tail -30 "$OUT/new_build.txt"; exit 1; }
wait
NEW=/tmp/new-site:/tmp/site OLD=/tmp/old-site:/tmp/site
export PYTHONPATH=$NEW
echo "builds: $((SECONDS - start)) s"; tail -3 "$OUT/old_build.txt"

echo "== GPU tests (one process per file: a fault in one cannot poison the others)"
t0=$SECONDS
for f in tests/test_*.py; do
  left=$(( ${TESTS_S:-230} - (SECONDS - t0) ))
  [ $left -gt 5 ] || { echo "$f: not run (time)"; continue; }
  timeout $left python3 -m pytest -q -m gpu -p no:cacheprovider -rf "$f" > "$OUT/gpu_$(basename $f .py).txt" 2>&1
  echo "$f: $(tail -1 "$OUT/gpu_$(basename $f .py).txt")"
done | tee "$OUT/gpu_tests.txt"
grep -h "^FAILED\|^ERROR" "$OUT"/gpu_test_*.txt | head -30

echo "== compute-sanitizer (kron and structured launch paths, the tile probe)"
cat > /tmp/san.py <<'PY'
import cupy as cp, numpy as np, kronlinalg
from kronlinalg.structured import KSChain
rng = np.random.default_rng(0)
for dt in (cp.float32, cp.float64, cp.float16):
    for shapes, m in [([(8, 8)] * 3, 5), ([(3, 5), (7, 2), (4, 4)], 7), ([(16, 16)] * 2, 33)]:
        fs = [cp.asarray(rng.standard_normal(s), dtype=dt) for s in shapes]
        k = int(np.prod([s[0] for s in shapes])); l = int(np.prod([s[1] for s in shapes]))
        for _ in range(2):  # the second call takes the fast path's replay
            kronlinalg.kron_matmul(cp.asarray(rng.standard_normal((m, k)), dtype=dt), fs)
            kronlinalg.kron_matmul(cp.asarray(rng.standard_normal((l, m)), dtype=dt), fs,
                                   side="left")
for dt in (cp.float32, cp.float16):
    for pats in [[(1, 4, 4, 3)], [(2, 3, 5, 4)], [(3, 8, 4, 1), (1, 6, 9, 2)], [(2, 24, 16, 8)],
                 [(1, 130, 24, 1)], [(1, 40, 48, 6)]]:
        ch = KSChain.random(pats, rng=rng, xp=cp, dtype=dt)
        for alg in ("auto", "kernel", "auto"):
            kronlinalg.structured_matmul(cp.asarray(rng.standard_normal((37, ch.shape[1])), dtype=dt),
                                         ch, algorithm=alg)
cp.cuda.Device().synchronize()
print("sanitizer script done")
PY
for tool in memcheck racecheck; do
  timeout 75 compute-sanitizer --tool $tool --print-limit 5 python3 /tmp/san.py 2>&1 | tail -4 | tee -a "$OUT/sanitizer.txt"
done

echo "== A/B: kron_large float32 and the KS float32 set, old (59abdee) and new, same call"
for round in 1 2; do
  ( cd /tmp/old && PYTHONPATH=$OLD timeout 90 python3 benchmarks/kron_gpu_compare.py \
      --sets kron_large --dtypes float32 --no-shuffle --reps 10 --cases benchmarks/data/cases.json \
      --anchors benchmarks/data/h100-anchors-2026-11-22.json --json "$OUT/kron_old_$round.json" > "$OUT/kron_old_$round.txt" 2>&1 )
  timeout 90 python3 benchmarks/kron_gpu_compare.py --sets kron_large --dtypes float32 --no-shuffle \
      --reps 10 --cases benchmarks/data/cases.json --anchors benchmarks/data/h100-anchors-2026-11-22.json \
      --json "$OUT/kron_new_$round.json" > "$OUT/kron_new_$round.txt" 2>&1
done
tail -3 "$OUT/kron_new_1.txt"
( cd /tmp/old && PYTHONPATH=$OLD timeout 100 python3 benchmarks/structured_compare.py --device gpu \
    --no-tune --patterns 16 --dtypes float32 --reps 5 --json "$OUT/ks_old.json" > "$OUT/ks_old.txt" 2>&1 )
timeout 100 python3 benchmarks/structured_compare.py --device gpu --no-tune --patterns 16 --dtypes float32 \
    --reps 5 --json "$OUT/ks_new.json" > "$OUT/ks_new.txt" 2>&1
tail -3 "$OUT/ks_new.txt"

echo "== host time per call (CUDA): the same script on the new build, then the old one"
timeout 60 python3 benchmarks/host_time.py --device cuda --out "$OUT" 2>&1 | tail -14
mkdir -p "$OUT/old"
PYTHONPATH=$OLD timeout 60 python3 benchmarks/host_time.py --device cuda --out "$OUT/old" 2>&1 | tail -14
timeout 60 python3 benchmarks/host_profile.py > "$OUT/host_profile.txt" 2>&1; head -40 "$OUT/host_profile.txt"
python3 benchmarks/ab_summary.py "$OUT" | tee "$OUT/ab_summary.txt" | tail -16
# only the summaries come back (the per-file logs of passing test files are dropped)
for f in "$OUT"/gpu_test_*.txt; do grep -q "failed\|error" "$f" || rm -f "$f"; done
rm -f "$OUT"/*_build.txt "$OUT"/kron_*_?.txt
echo "total: $((SECONDS - start)) s"
