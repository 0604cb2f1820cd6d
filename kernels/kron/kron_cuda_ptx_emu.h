// Host emulation of the CUDA builtins and PTX wrappers the natural-order kron kernels use
// (kron_cuda_common.cuh includes this instead of cuda_ptx.cuh under KL_EMU): one std::thread per
// CUDA thread, warp-collective mma through a per-warp exchange, cp.async landing at once.  A
// development tool, not part of the build: kron_natural_emulate.cpp drives it.
//
// mma fragments (PTX ISA), lane (g, t) = (lane / 4, lane % 4):
//   m16n8k16 f16/bf16: A[g][2t..2t+1], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..];
//                      B[2t..2t+1][g], B[2t+8..2t+9][g]
//   m16n8k8 f16/bf16:  A[g][2t..2t+1], A[g+8][2t..]; B[2t..2t+1][g]
//   m16n8k8 f64:       A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]; B[t][g], B[t+4][g]
//   C (all):           C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]
#ifndef KRONLINALG_KRON_CUDA_PTX_EMU_H
#define KRONLINALG_KRON_CUDA_PTX_EMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__

struct EmuDim {
  unsigned x = 0, y = 1, z = 1;
};
inline thread_local EmuDim threadIdx, blockIdx;
inline EmuDim gridDim, blockDim;

alignas(128) inline unsigned char g_emu_smem[256 * 1024];
#define KL_DYNAMIC_SMEM(name) unsigned char *name = g_emu_smem

inline std::unique_ptr<std::barrier<>> g_emu_block;
inline std::unique_ptr<std::barrier<>> g_emu_warp[32];

inline void __syncthreads() { g_emu_block->arrive_and_wait(); }
inline void __syncwarp() { g_emu_warp[threadIdx.x / 32]->arrive_and_wait(); }
inline int __clz(uint32_t v) { return v ? __builtin_clz(v) : 32; }
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t b = uint64_t(x) | (uint64_t(y) << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((b >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline void __trap() { std::abort(); }

// Runs `fn` as `grid` blocks of `threads` threads, one block after the other; shared memory
// poisoned (0xff: NaN in every float type) before each block.
template <class F>
void emu_launch(unsigned grid, unsigned threads, size_t smem, F fn) {
  if (smem > sizeof g_emu_smem) {
    std::fprintf(stderr, "shared memory %zu > the emulator's %zu\n", smem, sizeof g_emu_smem);
    std::abort();
  }
  gridDim.x = grid;
  blockDim.x = threads;
  for (unsigned b = 0; b < grid; ++b) {
    std::memset(g_emu_smem, 0xff, sizeof g_emu_smem);
    g_emu_block = std::make_unique<std::barrier<>>(threads);
    for (unsigned w = 0; w < threads / 32; ++w) g_emu_warp[w] = std::make_unique<std::barrier<>>(32);
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; ++t)
      ts.emplace_back([&, t, b] {
        threadIdx.x = t;
        blockIdx.x = b;
        fn();
      });
    for (auto &t : ts) t.join();
  }
}

namespace kl {
namespace cu {

inline uint32_t smem_u32(const void *p) { return uint32_t(reinterpret_cast<uintptr_t>(p)); }

inline double emu_xa[32][32][4], emu_xb[32][32][2];
inline uint32_t emu_ua[32][32][4], emu_ub[32][32][2];

template <class H>
inline float emu_half_at(uint32_t r, int hi) {
  H h;
  const uint16_t bits = uint16_t(hi ? r >> 16 : r & 0xffff);
  std::memcpy(&h, &bits, 2);
  if constexpr (std::is_same_v<H, __half>)
    return __half2float(h);
  else
    return __bfloat162float(h);
}

inline void emu_warp_sync() { g_emu_warp[threadIdx.x / 32]->arrive_and_wait(); }

// K = 16 or 8: m16n8k16 / m16n8k8 on half pairs (exact products, float32 sums)
template <bool BF16, int K>
inline void emu_mma_half(float (&c)[4], const uint32_t *a, const uint32_t *b) {
  using H = std::conditional_t<BF16, __nv_bfloat16, __half>;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int i = 0; i < K / 4; ++i) emu_ua[w][lane][i] = a[i];
  for (int i = 0; i < K / 8; ++i) emu_ub[w][lane][i] = b[i];
  emu_warp_sync();
  auto A = [&](int r, int k) {
    const int reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0), kk = k % 8;
    return emu_half_at<H>(emu_ua[w][(r % 8) * 4 + kk / 2][reg], kk % 2);
  };
  auto B = [&](int k, int n) {
    const int kk = k % 8;
    return emu_half_at<H>(emu_ub[w][n * 4 + kk / 2][k >= 8 ? 1 : 0], kk % 2);
  };
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  float r[4];
  for (int e = 0; e < 4; ++e) {
    double s = c[e];
    for (int k = 0; k < K; ++k) s += double(A(rows[e], k)) * double(B(k, cols[e]));
    r[e] = float(s);
  }
  emu_warp_sync();
  for (int e = 0; e < 4; ++e) c[e] = r[e];
}
template <bool BF16>
inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const uint32_t b[2] = {b0, b1};
  emu_mma_half<BF16, 16>(c, a, b);
}
template <bool BF16>
inline void mma_1688(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  const uint32_t a[2] = {a0, a1}, b[1] = {b0};
  emu_mma_half<BF16, 8>(c, a, b);
}
inline void dmma_1688(double (&c)[4], const double (&a)[4], double b0, double b1) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) emu_xa[w][lane][i] = a[i];
  emu_xb[w][lane][0] = b0;
  emu_xb[w][lane][1] = b1;
  emu_warp_sync();
  auto A = [&](int r, int k) { return emu_xa[w][(r % 8) * 4 + k % 4][(r >= 8) + 2 * (k >= 4)]; };
  auto B = [&](int k, int n) { return emu_xb[w][n * 4 + k % 4][k >= 4]; };
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  double r[4];
  for (int e = 0; e < 4; ++e) {
    double s = c[e];
    for (int k = 0; k < 8; ++k) s = std::fma(A(rows[e], k), B(k, cols[e]), s);
    r[e] = s;
  }
  emu_warp_sync();
  for (int e = 0; e < 4; ++e) c[e] = r[e];
}

// cp.async lands at once: a copy into a buffer still being read shows as a wrong result
inline void cp_async_16(void *dst, const void *src, bool valid) {
  if (valid)
    std::memcpy(dst, src, 16);
  else
    std::memset(dst, 0, 16);
}
inline void cp_async_8(void *dst, const void *src, bool valid) {
  if (valid)
    std::memcpy(dst, src, 8);
  else
    std::memset(dst, 0, 8);
}
// mbarriers (the ring kernels): pending arrivals in bits 0-15, the count in 16-31, completed
// phases in 32-63; cp.async has landed by the time its arrival is made
inline void mbar_init(uint64_t *bar, uint32_t count) {
  std::atomic_ref<uint64_t>(*bar).store(uint64_t(count) | (uint64_t(count) << 16));
}
inline void cp_async_mbar_arrive(uint64_t *bar) {
  std::atomic_ref<uint64_t> a(*bar);
  uint64_t v = a.load();
  for (;;) {
    const uint64_t pending = (v & 0xffff) - 1, count = (v >> 16) & 0xffff;
    const uint64_t nv = pending ? (v & ~uint64_t(0xffff)) | pending
                                : ((v >> 32) + 1) << 32 | count << 16 | count;
    if (a.compare_exchange_weak(v, nv)) return;
  }
}
inline void mbar_wait_parity(uint64_t *bar, uint32_t parity) {
  std::atomic_ref<uint64_t> a(*bar);
  // the phase of this parity has completed once the completed phases' parity differs
  while (((a.load() >> 32) & 1) == parity) std::this_thread::yield();
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

}  // namespace cu
}  // namespace kl

#endif
