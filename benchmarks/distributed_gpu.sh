#!/bin/bash
# kronlinalg.distributed on 4 GPUs in one device call: build (sm_90a), the CPU test file, then
# benchmarks/distributed_gpu.py under torchrun (NCCL; NVLink multicast off).  Logs to $OUT.
#   run(command="bash benchmarks/distributed_gpu.sh", carry=[".wheelhouse"], kind="nvidia-h100-x4")
# ONLY=strassen: the benchmark's Strassen–Winograd part alone (with and without the overlap,
# pipeline 1/2/4/8/16), after the correctness check, and the tests after the benchmark;
# BENCH_S caps the benchmark's seconds.  On GPUs the Strassen part then times pipeline 1/4/8
# again on a group with a high-priority NCCL stream (the overlap's next try; not yet run).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
root=$(pwd)
export PYTHONUNBUFFERED=1 KRONLINALG_CACHE_DIR=/tmp/kl-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
nvidia-smi topo -m | head -8
start=$SECONDS
source benchmarks/device_build.sh
tests() {
  (cd "$root/tests" && timeout 45 python3 -m pytest -q -p no:cacheprovider test_distributed.py > "$OUT/tests.txt" 2>&1; tail -3 "$OUT/tests.txt")
}
[ -n "$ONLY" ] || tests  # ONLY=...: the benchmark first, then the tests
(cd /tmp && timeout ${BENCH_S:-230} python3 -m torch.distributed.run --standalone \
  --nproc-per-node ${NGPU:-4} "$root/benchmarks/distributed_gpu.py" 2>&1 | tee "$OUT/bench.txt" | grep -v "^\[rank[123]\]")
[ -z "$ONLY" ] || tests
echo "total: $((SECONDS - start)) s"
