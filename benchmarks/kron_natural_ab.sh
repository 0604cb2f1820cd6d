#!/bin/bash
# kron_large float32 with the natural-order kernel (default), without it, and with 4-warp blocks,
# each in its own process (the plan cache keys on these environment variables); tables and JSON
# to $OUT.  Run on the GPU machine after gpu-run.sh has built the checkout.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=benchmarks/data
run() {  # name, extra args, env...
  local name=$1 extra=$2; shift 2
  env "$@" timeout 200 python benchmarks/kron_gpu_compare.py --cases $D/cases.json \
    --anchors $D/h100-anchors-2026-11-22.json --sets kron_large --dtypes float32 $extra \
    --json "$OUT/kron_$name.json" 2>&1 | tail -13 | tee "$OUT/kron_$name.txt"
}
run natural ""
run other "--no-shuffle" KRONLINALG_KRON_NATURAL=0
run natural_w4 "--no-shuffle" KRONLINALG_KRON_NATURAL_WARPS=4
