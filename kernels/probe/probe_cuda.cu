// Calibration probes (see probe.h): one thread block, clock64() around the measured loop.
// The cycle counter is per SM, so start and end must be read on the same SM: one block does it.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "probe.h"

namespace kl {
namespace {

constexpr int kChaseWords = 1024;  // pointer-chase ring (4 KiB)
constexpr int kStreamWords = 4096;  // streaming buffer (16 KiB), a power of two for masking

// out[0] = cycles; out[1] = a value that depends on every load, so none is optimised away.
__global__ void smem_latency(int32_t iters, uint32_t step, long long *out) {
  __shared__ uint32_t chain[kChaseWords];
  for (int i = threadIdx.x; i < kChaseWords; i += blockDim.x) chain[i] = (i + step) % kChaseWords;
  __syncthreads();
  if (threadIdx.x != 0) return;
  uint32_t j = 0;
  for (int i = 0; i < kChaseWords; ++i) j = chain[j];  // warm-up lap: first-touch effects out
  const long long t0 = clock64();
#pragma unroll 16
  for (int i = 0; i < iters; ++i) j = chain[j];
  const long long t1 = clock64();
  out[0] = t1 - t0;
  out[1] = j;
}

constexpr int kBurst = 64;  // loads per unrolled burst: immediate offsets, no index arithmetic

__global__ void smem_bandwidth(int32_t bursts, int32_t stride, long long *out) {
  __shared__ uint32_t buf[kStreamWords];
  __shared__ long long t0;
  for (int i = threadIdx.x; i < kStreamWords; i += blockDim.x) buf[i] = i;
  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Lane l starts at word l*stride: the lane stride alone decides how many lanes share a bank
  // (each later load shifts every lane by one word, keeping the pattern).  volatile: the same
  // words are read every burst and must not be hoisted out of the loop.
  const volatile uint32_t *p = buf + lane * uint32_t(stride) + warp;
  uint32_t acc[4] = {0, 0, 0, 0};
  __syncthreads();
  if (threadIdx.x == 0) t0 = clock64();
  for (int i = 0; i < bursts; ++i) {
#pragma unroll
    for (int k = 0; k < kBurst; ++k) acc[k & 3] += p[k];
  }
  __syncthreads();
  if (threadIdx.x == 0) out[0] = clock64() - t0;
  if (acc[0] + acc[1] + acc[2] + acc[3] == 0xFFFFFFFFu) out[1] = 1;  // keeps the loads alive
}

// mma.sync wrappers: D = A·B + D with the accumulator in place.
__device__ __forceinline__ void mma_fp16(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ void mma_fp64(double (&d)[2], double a, double b) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a), "d"(b));
#endif
}

constexpr int kChains = 8;  // independent accumulators per warp: enough to hide mma latency

template <int Kind>
__global__ void mma_throughput(int32_t iters, long long *out) {
#if __CUDA_ARCH__ >= 800
  __shared__ long long t0;
  // Operand bits of 1.0 in each format; the values only have to be finite.
  const uint32_t one = Kind == KL_MMA_FP16 ? 0x3C003C00u : Kind == KL_MMA_BF16 ? 0x3F803F80u
                                                                                : 0x3F800000u;
  const uint32_t a[4] = {one, one, one, one}, b[2] = {one, one};
  float acc[kChains][4] = {};
  double dacc[kChains][2] = {};
  __syncthreads();
  if (threadIdx.x == 0) t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if (Kind == KL_MMA_FP16) mma_fp16(acc[c], a, b);
      if (Kind == KL_MMA_BF16) mma_bf16(acc[c], a, b);
      if (Kind == KL_MMA_TF32) mma_tf32(acc[c], a, b);
      if (Kind == KL_MMA_FP64) mma_fp64(dacc[c], 1.0, 1.0);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) out[0] = clock64() - t0;
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) sum += acc[c][0] + acc[c][3] + float(dacc[c][0] + dacc[c][1]);
  if (sum == -1.0f) out[1] = 1;  // keeps every accumulator live
#else
  if (threadIdx.x == 0) out[0] = -1;  // built for an arch without mma.sync
#endif
}

int cuda_fail(cudaError_t e, const char *what) {
  std::string msg = std::string("probe: ") + what + ": " + cudaGetErrorString(e);
  return fail(KL_ERR_CUDA, msg.c_str());
}

// Runs launch(out) on a fresh 2-element device buffer, waits, and returns out[0] in *cycles.
template <class Launch>
int run(Launch launch, int64_t *cycles) {
  long long *out = nullptr;
  cudaError_t e = cudaMalloc(&out, 2 * sizeof(long long));
  if (e != cudaSuccess) return cuda_fail(e, "cudaMalloc");
  long long host[2] = {0, 0};
  launch(out);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  cudaFree(out);
  if (e != cudaSuccess) return cuda_fail(e, "launch");
  if (host[0] < 0) return fail(KL_ERR_INVALID, "probe: mma.sync needs sm_80 or newer");
  *cycles = host[0];
  return KL_OK;
}

bool bad_count(int32_t n, int32_t most) { return n < 1 || n > most; }

}  // namespace
}  // namespace kl

extern "C" int kl_probe_smem_latency(int32_t iters, int64_t *cycles) {
  using namespace kl;
  if (!cycles || bad_count(iters, 1 << 24))
    return fail(KL_ERR_INVALID, "probe: iters must be in [1, 2^24]");
  // A step coprime to the ring size walks every word; runtime-valued so it cannot be folded.
  return run([&](long long *out) { smem_latency<<<1, 32>>>(iters, 97u, out); }, cycles);
}

extern "C" int kl_probe_smem_bandwidth(int32_t warps, int32_t iters, int32_t stride,
                                       int64_t *cycles, int64_t *bytes) {
  using namespace kl;
  if (!cycles || !bytes || bad_count(warps, 32) || bad_count(iters, 1 << 24) ||
      bad_count(stride, 64))
    return fail(KL_ERR_INVALID, "probe: warps in [1, 32], iters in [1, 2^24], stride in [1, 64]");
  const int32_t bursts = (iters + kBurst - 1) / kBurst;
  *bytes = int64_t(warps) * 32 * bursts * kBurst * int64_t(sizeof(uint32_t));
  return run([&](long long *out) { smem_bandwidth<<<1, 32 * warps>>>(bursts, stride, out); },
             cycles);
}

extern "C" int kl_probe_mma(int32_t kind, int32_t warps, int32_t iters, int64_t *cycles,
                            int64_t *ops) {
  using namespace kl;
  if (!cycles || !ops || bad_count(warps, 32) || bad_count(iters, 1 << 24))
    return fail(KL_ERR_INVALID, "probe: warps in [1, 32], iters in [1, 2^24]");
  // 2·m·n·k per instruction: m16n8k16 = 4096, m16n8k8 = 2048, m8n8k4 = 512
  static const int64_t per_mma[4] = {4096, 4096, 2048, 512};
  if (kind < 0 || kind > 3) return fail(KL_ERR_INVALID, "probe: kind must be 0..3");
  *ops = per_mma[kind] * warps * int64_t(iters) * kChains;
  const unsigned threads = 32u * unsigned(warps);
  return run(
      [&](long long *out) {
        switch (kind) {
          case KL_MMA_FP16: mma_throughput<KL_MMA_FP16><<<1, threads>>>(iters, out); break;
          case KL_MMA_BF16: mma_throughput<KL_MMA_BF16><<<1, threads>>>(iters, out); break;
          case KL_MMA_TF32: mma_throughput<KL_MMA_TF32><<<1, threads>>>(iters, out); break;
          default: mma_throughput<KL_MMA_FP64><<<1, threads>>>(iters, out); break;
        }
      },
      cycles);
}
