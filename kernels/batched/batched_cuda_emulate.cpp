// Runs the CUDA kernels of batched_cuda_kernels.cuh on the CPU, one std::thread per CUDA thread,
// to check their indexing (work items, tile loaders, shared-memory layouts, mma fragments, the
// epilogue, named barriers, the variable-size table) on machines without a GPU.  Not part of the
// build; tests/test_batched.py compiles and runs it when g++ and the CUDA headers are present:
//
//   g++ -std=c++20 -O1 -pthread -DKL_BATCHED_EMULATE -I/usr/local/cuda/include -I. \
//       -I../include -I../common batched_cuda_emulate.cpp -o /tmp/batched_emulate && \
//       /tmp/batched_emulate
//
// The warp-collective instructions follow the PTX ISA's fragment layouts, lane (g, t) =
// (lane / 4, lane % 4):
//   mma m8n8k4 f64:  A[g][t]; B[t][g]; C[g][2t], C[g][2t+1]
//   mma m16n8k8 f64: as m16n8k8 tf32 below, in 64-bit registers
//   mma m16n8k16:    A[g][2t..2t+1], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..];
//                    B[2t..2t+1][g], B[2t+8..2t+9][g]; C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]
//   mma m16n8k8 tf32: A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]; B[t][g], B[t+4][g]; C as above
//   ldmatrix .x2 .trans: lanes 0-7 / 8-15 address the rows of matrices 0 / 1; lane (g, t) gets
//                    M[2t][g], M[2t+1][g] of each (the lower index in the low half)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "knobs.hpp"

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct Dim {
  unsigned x = 0, y = 0, z = 0;
};
thread_local Dim threadIdx, blockIdx;
static Dim gridDim;
static bool g_rn = kl::knob_set("KRONLINALG_EMULATE_RN");

alignas(16) static unsigned char g_smem[228 * 1024];  // (the H100's 227 KB a block)
#define KL_DYNAMIC_SMEM(name) unsigned char *name = g_smem
#define __shared__ static  // blocks run one after another: one copy serves each in turn
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

static std::unique_ptr<std::barrier<>> g_block;
static std::unique_ptr<std::barrier<>> g_warp[32];
static std::map<int, std::unique_ptr<std::barrier<>>> g_named[8];  // per group id: one barrier
static std::mutex g_named_mu;

inline void __syncthreads() { g_block->arrive_and_wait(); }
inline void __syncwarp() { g_warp[threadIdx.x / 32]->arrive_and_wait(); }
inline void emu_named_barrier(int id, int count) {
  // every group's named barrier: groups are the P*32 consecutive threads of id - 1
  std::barrier<> *b;
  {
    std::lock_guard<std::mutex> lock(g_named_mu);
    auto &slot = g_named[0][id];
    if (!slot) slot = std::make_unique<std::barrier<>>(count);
    b = slot.get();
  }
  b->arrive_and_wait();
}
template <class T>
inline T __ldg(const T *p) {
  return *p;
}
inline int min(int a, int b) { return a < b ? a : b; }
template <class V>
inline void __stcs(V *p, V v) {  // (a store; the cache hint is the GPU's business)
  *p = v;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class F>
void emu_launch(unsigned grid, int threads, int smem, F fn) {
  if (smem > int(sizeof g_smem)) {
    std::fprintf(stderr, "shared memory %d > emulator's %zu\n", smem, sizeof g_smem);
    std::abort();
  }
  gridDim.x = grid;
  for (unsigned b = 0; b < grid; ++b) {
    std::memset(g_smem, 0xff, sizeof g_smem);  // poison: NaN-like bytes in every stage
    g_block = std::make_unique<std::barrier<>>(threads);
    for (int w = 0; w < threads / 32; ++w) g_warp[w] = std::make_unique<std::barrier<>>(32);
    g_named[0].clear();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t, b] {
        threadIdx.x = unsigned(t);
        blockIdx.x = b;
        fn();
      });
    for (auto &t : ts) t.join();
  }
}

// ---- warp-collective instructions -----------------------------------------------------------

static thread_local int dummy_tl;
static double xa[32][32], xb[32][32];
static uint32_t ua[32][32][4], ub[32][32][2];
static const void *lp[32][32];

inline void warp_sync() { g_warp[threadIdx.x / 32]->arrive_and_wait(); }

namespace kl {
namespace batched {
inline void dmma_884(double (&c)[2], double a, double b) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  xa[w][lane] = a;
  xb[w][lane] = b;
  warp_sync();
  for (int j = 0; j < 2; ++j) {
    double s = 0;
    for (int k = 0; k < 4; ++k) s += xa[w][g * 4 + k] * xb[w][(2 * t + j) * 4 + k];
    c[j] += s;
  }
  warp_sync();
}
// m16n8k8 f64: A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]; B[t][g], B[t+4][g];
// C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]
static double ya[32][32][4], yb[32][32][2];
inline void dmma_1688(double (&c)[4], const double (&a)[4], double b0, double b1) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) ya[w][lane][e] = a[e];
  yb[w][lane][0] = b0;
  yb[w][lane][1] = b1;
  warp_sync();
  auto A = [&](int r, int k) { return ya[w][(r % 8) * 4 + k % 4][(r >= 8) + 2 * (k >= 4)]; };
  auto B = [&](int k, int n) { return yb[w][n * 4 + k % 4][k >= 4]; };
  for (int e = 0; e < 4; ++e) {
    const int r = g + 8 * (e >= 2), n = 2 * t + (e & 1);
    double s = 0;
    for (int k = 0; k < 8; ++k) s += A(r, k) * B(k, n);
    c[e] += s;
  }
  warp_sync();
}
}  // namespace batched

namespace cu {
template <class H>
static float half_at(uint32_t r, int hi) {
  H h;
  uint16_t bits = uint16_t(hi ? r >> 16 : r & 0xffff);
  std::memcpy(&h, &bits, 2);
  if constexpr (std::is_same_v<H, __half>) return __half2float(h);
  else return __bfloat162float(h);
}

template <bool BF16>
inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  using H = std::conditional_t<BF16, __nv_bfloat16, __half>;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  std::memcpy(ua[w][lane], a, sizeof(a));
  ub[w][lane][0] = b0;
  ub[w][lane][1] = b1;
  warp_sync();
  auto A = [&](int r, int k) {  // A[r][k] from the lane that holds it
    const int gg = r % 8, reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0), kk = k % 8;
    return half_at<H>(ua[w][gg * 4 + kk / 2][reg], kk % 2);
  };
  auto B = [&](int k, int n) {
    const int reg = k >= 8 ? 1 : 0, kk = k % 8;
    return half_at<H>(ub[w][n * 4 + kk / 2][reg], kk % 2);
  };
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int e = 0; e < 4; ++e) {
    float s = c[e];
    for (int k = 0; k < 16; ++k) s += A(rows[e], k) * B(k, cols[e]);
    c[e] = s;
  }
  warp_sync();
}

inline float tf32_value(uint32_t u) { return __uint_as_float(u & 0xffffe000u); }
inline void split_tf32(uint32_t x, uint32_t &hi, uint32_t &lo) {
  auto rna = [](float f) {  // cvt.rna.tf32.f32: nearest, ties away from zero, 10 mantissa bits
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;
    return u & 0xffffe000u;
  };
  hi = rna(__uint_as_float(x));
  lo = rna(__uint_as_float(x) - __uint_as_float(hi));
}
inline void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  std::memcpy(ua[w][lane], a, sizeof(a));
  ub[w][lane][0] = b0;
  ub[w][lane][1] = b1;
  warp_sync();
  auto A = [&](int r, int k) {
    const int reg = (r >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0);
    return tf32_value(ua[w][(r % 8) * 4 + k % 4][reg]);
  };
  auto B = [&](int k, int n) { return tf32_value(ub[w][n * 4 + k % 4][k >= 4 ? 1 : 0]); };
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int e = 0; e < 4; ++e) {
    // exact products, one rounding of (c + their sum) toward zero per instruction: the tensor
    // cores' truncating accumulation (Fasi et al. 2021); KRONLINALG_EMULATE_RN set: to nearest
    double s = c[e];
    for (int k = 0; k < 8; ++k) s += double(A(rows[e], k)) * double(B(k, cols[e]));
    float r = float(s);
    if (!g_rn && std::fabs(double(r)) > std::fabs(s)) r = std::nextafter(r, 0.0f);
    c[e] = r;
  }
  warp_sync();
}

// cp.async lands at once here: a copy into a buffer still being read shows as a wrong result
inline void cp_async_16(void *dst, const void *src, bool valid) {
  if (valid)
    std::memcpy(dst, src, 16);
  else
    std::memset(dst, 0, 16);
}
inline void cp_async_16_part(void *dst, const void *src, int bytes) {
  std::memset(dst, 0, 16);
  std::memcpy(dst, src, size_t(bytes));  // (reads only the valid bytes, as the hardware does)
}
template <int BYTES>
inline void cp_async_elem(void *dst, const void *src, bool valid) {
  if (valid)
    std::memcpy(dst, src, BYTES);
  else
    std::memset(dst, 0, BYTES);
}
// mbarriers: pending arrivals in bits 0-31, the count in 32-62, the phase's parity in bit 63
// (cp.async lands at once here, so its arrival is an arrival)
inline void mbar_init(uint64_t *bar, uint32_t count) {
  __atomic_store_n(bar, uint64_t(count) | (uint64_t(count) << 32), __ATOMIC_SEQ_CST);
}
inline void mbar_arrive(uint64_t *bar) {
  uint64_t old = __atomic_load_n(bar, __ATOMIC_SEQ_CST), next;
  do {
    const uint64_t pending = old & 0xffffffffu, count = (old >> 32) & 0x7fffffffu;
    if (pending == 0) {
      std::fprintf(stderr, "mbarrier: more arrivals than its count\n");
      std::abort();
    }
    next = pending == 1 ? (count | (count << 32) | ((~old) & (uint64_t(1) << 63)))
                        : ((pending - 1) | (old & ~uint64_t(0xffffffffu)));
  } while (!__atomic_compare_exchange_n(bar, &old, next, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST));
}
inline void cp_async_mbar_arrive(uint64_t *bar) { mbar_arrive(bar); }
inline void mbar_wait_parity(uint64_t *bar, uint32_t parity) {
  while (uint32_t(__atomic_load_n(bar, __ATOMIC_SEQ_CST) >> 63) == parity)
    std::this_thread::yield();
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

inline void ldsm_x2_trans(uint32_t &r0, uint32_t &r1, const void *p) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  lp[w][lane] = p;
  warp_sync();
  auto at = [&](int m, int row, int col) {  // 16-bit element (row, col) of matrix m
    uint16_t v;
    std::memcpy(&v, static_cast<const unsigned char *>(lp[w][m * 8 + row]) + 2 * col, 2);
    return uint32_t(v);
  };
  r0 = at(0, 2 * t, g) | (at(0, 2 * t + 1, g) << 16);
  r1 = at(1, 2 * t, g) | (at(1, 2 * t + 1, g) << 16);
  warp_sync();
}
// ldmatrix .x4: lanes 8m..8m+7 address the rows of matrix m; lane (g, t) gets M[g][2t..2t+1]
// of each (.trans: M[2t][g], M[2t+1][g])
template <bool TRANS>
inline void ldsm_x4_impl(uint32_t (&r)[4], const void *p) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  lp[w][lane] = p;
  warp_sync();
  auto at = [&](int m, int row, int col) {
    uint16_t v;
    std::memcpy(&v, static_cast<const unsigned char *>(lp[w][m * 8 + row]) + 2 * col, 2);
    return uint32_t(v);
  };
  for (int m = 0; m < 4; ++m)
    r[m] = TRANS ? at(m, 2 * t, g) | (at(m, 2 * t + 1, g) << 16)
                 : at(m, g, 2 * t) | (at(m, g, 2 * t + 1) << 16);
  warp_sync();
}
inline void ldsm_x4(uint32_t (&r)[4], const void *p) { ldsm_x4_impl<false>(r, p); }
inline void ldsm_x4_trans(uint32_t (&r)[4], const void *p) { ldsm_x4_impl<true>(r, p); }

// ---- warpgroup MMA (sm_90a), as the PTX ISA defines it --------------------------------------
// Shared-memory addresses are offsets into g_smem (whose swizzle phase is then that of address
// 0).  Descriptor: start address bits 0-13, leading byte offset 16-29, stride byte offset 32-45
// (16-byte units), swizzle mode 62-63 (1: 128 bytes: address bits 4-6 XOR bits 7-9).
inline uint32_t smem_u32(const void *p) {
  return uint32_t(static_cast<const unsigned char *>(p) - g_smem);
}
inline uint64_t wgmma_desc_swizzled_128(const void *tile) {
  return (uint64_t(smem_u32(tile)) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
template <int ROW>
inline uint64_t wgmma_desc_swizzled(const void *tile) {
  static_assert(ROW == 128, "the batched kernel's 128-byte rows");
  return wgmma_desc_swizzled_128(tile);
}
inline uint64_t wgmma_desc_mn128(const void *tile, uint32_t mn_bytes) {
  return (uint64_t(smem_u32(tile)) >> 4) | (uint64_t((mn_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
inline void wgmma_fence() {}
inline void wgmma_commit() {}
template <int N>
inline void wgmma_wait() {}
inline void fence_proxy_async_shared() {}
// bulk copies land at once here
inline void bulk_store(void *gdst, const void *ssrc, int bytes) {
  std::memcpy(gdst, ssrc, size_t(bytes));
}
inline void bulk_commit() {}
inline void bulk_wait_read() {}
inline void bulk_wait() {}
template <int R>
inline void wgmma_fence_operands(float (&)[R]) {}
inline uint32_t swz128(uint32_t addr) { return addr ^ (((addr >> 7) & 7) << 4); }
// D(64 x N) += A(64 x 16) B(16 x N): A K-major (row r, k: r / 8 groups SBO apart, rows of 128
// bytes), B K-major likewise or MN-major (TRANS_B: k / 8 groups SBO apart, rows of 128 bytes of
// 64 columns, the next 64 columns LBO on); thread t holds rows 16 (t / 32) + (t % 32) / 4 (+ 8),
// columns 8 i + 2 (t % 4) (+ 1) in d[4 i ..].  Each thread computes its own values.
template <int N, bool BF16, bool TRANS_B = false>
inline void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db) {
  using H = std::conditional_t<BF16, __nv_bfloat16, __half>;
  auto field = [](uint64_t desc, int lo) { return uint32_t((desc >> lo) & 0x3FFF) << 4; };
  if ((da >> 62) != 1 || (db >> 62) != 1) {
    std::fprintf(stderr, "wgmma emulation: 128-byte swizzle only\n");
    std::abort();
  }
  auto at = [](uint32_t addr) {
    H h;
    std::memcpy(&h, g_smem + swz128(addr), 2);
    if constexpr (BF16) return __bfloat162float(h);
    else return __half2float(h);
  };
  const uint32_t a0 = field(da, 0), a_sbo = field(da, 32);
  const uint32_t b0 = field(db, 0), b_lbo = field(db, 16), b_sbo = field(db, 32);
  auto A = [&](int r, int k) { return at(a0 + (r / 8) * a_sbo + (r % 8) * 128 + 2 * k); };
  auto B = [&](int k, int n) {
    if (TRANS_B) return at(b0 + (n / 64) * b_lbo + (k / 8) * b_sbo + (k % 8) * 128 + 2 * (n % 64));
    return at(b0 + (n / 8) * b_sbo + (n % 8) * 128 + 2 * k);
  };
  const int t = int(threadIdx.x) % 128, w = t / 32, g = (t % 32) / 4, q = t % 4;
  for (int e = 0; e < N / 2; ++e) {
    const int r = 16 * w + g + 8 * ((e >> 1) & 1), c = 8 * (e >> 2) + 2 * q + (e & 1);
    float s = d[e];
    for (int k = 0; k < 16; ++k) s += A(r, k) * B(k, c);
    d[e] = s;
  }
}
}  // namespace cu
}  // namespace kl

namespace kl {
namespace batched {
inline void mma_tf32_fresh(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  for (float &x : d) x = 0.0f;
  kl::cu::mma_tf32(d, a, b0, b1);
}
}  // namespace batched
}  // namespace kl

static double g_shfl[32][32];
template <class V>
inline V __shfl_xor_sync(unsigned, V v, int mask) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  g_shfl[w][lane] = double(v);
  warp_sync();
  const V r = V(g_shfl[w][lane ^ mask]);
  warp_sync();
  return r;
}
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

#include "batched_cuda_launch.cuh"

// ---- the checks -----------------------------------------------------------------------------

using namespace kl::batched;

template <class T>
static double to_d(T x) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
  else return double(x);
}
template <class T>
static T from_d(double x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(float(x));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(float(x));
  else return T(x);
}

// The larger error, a NaN counting as infinite (std::max(err, NaN) would keep err: a NaN in
// an output, from a stale shared-memory value times a zero say, must fail a check).
static double worse(double err, double e) { return std::isnan(e) ? HUGE_VAL : std::max(err, e); }

static int failures = 0;

// A stack of `count` products with the given layouts (trans_a: A stored k-major; trans_b: B
// stored n-major columns), alpha, beta and C broadcast along rows when c_row.
template <class T, int MMA>
static void check_uniform(const char *name, int shape, int64_t count, int64_t m, int64_t n,
                          int64_t k, bool trans_a, bool trans_b, double beta, bool c_row,
                          double tol) {
  std::mt19937 rng(unsigned(m * 131 + n * 7 + k + shape));
  std::normal_distribution<double> nd;
  std::vector<T> A(size_t(count * m * k) + 8), B(size_t(count * k * n) + 8),
      C(size_t(count * m * n) + 8), D(size_t(count * m * n) + 8, from_d<T>(12345.0));
  for (auto &x : A) x = from_d<T>(nd(rng));
  for (auto &x : B) x = from_d<T>(nd(rng));
  for (auto &x : C) x = from_d<T>(nd(rng));
  kl_batched_problem p{};
  p.m = m, p.n = n, p.k = k, p.ndim = 1, p.shape[0] = count;
  p.a = A.data(), p.a_bs[0] = m * k;
  p.a_rs = trans_a ? 1 : k, p.a_cs = trans_a ? m : 1;
  p.b = B.data(), p.b_bs[0] = k * n;
  p.b_rs = trans_b ? 1 : n, p.b_cs = trans_b ? k : 1;
  p.c = C.data(), p.c_bs[0] = c_row ? 0 : m * n, p.c_rs = c_row ? 0 : n, p.c_cs = 1;
  p.d = D.data(), p.d_bs[0] = m * n, p.d_rs = n, p.d_cs = 1;
  p.alpha = -1.5, p.beta = beta;
  Args args{p, count, nullptr, 0};
  launch_shape<T, MMA>(shape, args, nullptr);
  double worst = 0, scale = 0;
  for (int64_t b = 0; b < count; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk)
          s += to_d(A[b * m * k + i * p.a_rs + kk * p.a_cs]) *
               to_d(B[b * k * n + kk * p.b_rs + j * p.b_cs]);
        double ref = -1.5 * s;
        if (beta != 0) ref += beta * to_d(C[b * p.c_bs[0] + i * p.c_rs + j]);
        const double got = to_d(D[b * m * n + i * n + j]);
        worst = worse(worst, std::fabs(got - ref));
        scale = std::max(scale, std::fabs(ref));
      }
  const bool untouched = to_d(D[count * m * n]) == to_d(from_d<T>(12345.0));
  const double rel = worst / std::max(scale, 1e-30);
  const bool ok = rel <= tol && untouched;
  failures += !ok;
  std::printf("%-5s %s shape %d  %ldx %ldx%ldx%ld  ta=%d tb=%d beta=%g  rel err %.2e%s\n",
              ok ? "ok" : "FAIL", name, shape, long(count), long(m), long(k), long(n), trans_a,
              trans_b, beta, rel, untouched ? "" : "  WROTE PAST THE END");
}

template <class T, int MMA>
static void check_variable(const char *name, int shape, double tol, bool claim) {
  const int64_t sizes[][3] = {{3, 4, 5}, {0, 2, 2}, {7, 0, 3}, {9, 9, 0}, {33, 17, 65},
                              {70, 66, 20}, {16, 16, 16}};
  const int count = 7;
  std::mt19937 rng(7);
  std::normal_distribution<double> nd;
  std::vector<std::vector<T>> A(count), B(count), D(count);
  std::vector<kl_batched_entry> table(count);
  for (int i = 0; i < count; ++i) {
    const int64_t m = sizes[i][0], n = sizes[i][1], k = sizes[i][2];
    A[i].resize(size_t(m * k) + 1);
    B[i].resize(size_t(k * n) + 1);
    D[i].assign(size_t(m * n) + 1, from_d<T>(777.0));
    for (auto &x : A[i]) x = from_d<T>(nd(rng));
    for (auto &x : B[i]) x = from_d<T>(nd(rng));
    table[i] = {m, n, k, int64_t(intptr_t(A[i].data())), k, 1, int64_t(intptr_t(B[i].data())),
                n, 1, 0, 0, 0, int64_t(intptr_t(D[i].data())), n, 1};
  }
  Args args{};
  args.p.alpha = 1.0;
  args.count = count;
  args.table = table.data();
  const kl_batched_config cfg = describe(shape, 0);
  args.tm_max = (64 + cfg.tile_m - 1) / cfg.tile_m;  // max_order 64 < 70: the last row item
  unsigned long long counter = 0;
  if (claim) args.counter = &counter;  // dynamic claims (the CUDA launcher's default)
  launch_shape<T, MMA>(shape, args, nullptr);
  double worst = 0;
  bool untouched = true;
  for (int i = 0; i < count; ++i) {
    const int64_t m = sizes[i][0], n = sizes[i][1], k = sizes[i][2];
    double scale = 1e-30, err = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) s += to_d(A[i][r * k + kk]) * to_d(B[i][kk * n + c]);
        err = worse(err, std::fabs(to_d(D[i][r * n + c]) - s));
        scale = std::max(scale, std::fabs(s));
      }
    if (m * n) worst = worse(worst, k ? err / scale : err);
    untouched &= to_d(D[i][m * n]) == to_d(from_d<T>(777.0));
  }
  const bool ok = worst <= tol && untouched;
  failures += !ok;
  std::printf("%-5s %s shape %d  variable (7 products, empty ones, %s)  rel err %.2e%s\n",
              ok ? "ok" : "FAIL", name, shape, claim ? "claimed" : "grid-stride", worst,
              untouched ? "" : "  WROTE PAST THE END");
}

// The packed form: every product's operands back to back in one buffer per operand, so odd
// sizes put most rows at unaligned addresses (the loaders' element and realigning paths).
template <class T, int MMA>
static void check_packed(const char *name, int shape, double tol) {
  const int64_t orders[] = {9, 0, 17, 70, 33, 5, 64, 1, 23};
  const int count = 9;
  std::mt19937 rng(11);
  std::normal_distribution<double> nd;
  int64_t total = 0;
  for (int64_t o : orders) total += o * o;
  std::vector<T> A(size_t(total) + 1), B(size_t(total) + 1), D(size_t(total) + 1, from_d<T>(777.0));
  for (auto &x : A) x = from_d<T>(nd(rng));
  for (auto &x : B) x = from_d<T>(nd(rng));
  std::vector<kl_batched_entry> table(count);
  int64_t off = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t o = orders[i];
    table[i] = {o, o, o, int64_t(intptr_t(A.data() + off)), o, 1, int64_t(intptr_t(B.data() + off)),
                o, 1, 0, 0, 0, int64_t(intptr_t(D.data() + off)), o, 1};
    off += o * o;
  }
  Args args{};
  args.p.alpha = 1.0;
  args.count = count;
  args.table = table.data();
  const kl_batched_config cfg = describe(shape, 0);
  args.tm_max = (70 + cfg.tile_m - 1) / cfg.tile_m;
  unsigned long long counter = 0;
  args.counter = &counter;
  launch_shape<T, MMA>(shape, args, nullptr);
  double worst = 0;
  off = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t o = orders[i];
    double scale = 1e-30, err = 0;
    for (int64_t r = 0; r < o; ++r)
      for (int64_t c = 0; c < o; ++c) {
        double s = 0;
        for (int64_t kk = 0; kk < o; ++kk)
          s += to_d(A[off + r * o + kk]) * to_d(B[off + kk * o + c]);
        err = worse(err, std::fabs(to_d(D[off + r * o + c]) - s));
        scale = std::max(scale, std::fabs(s));
      }
    worst = worse(worst, err / scale);
    off += o * o;
  }
  const bool untouched = to_d(D[total]) == to_d(from_d<T>(777.0));
  const bool ok = worst <= tol && untouched;
  failures += !ok;
  std::printf("%-5s %s shape %d  packed (9 products, odd offsets)  rel err %.2e%s\n",
              ok ? "ok" : "FAIL", name, shape, worst, untouched ? "" : "  WROTE PAST THE END");
}

// A float16 / bfloat16 variable batch split by size (launch_variable_split): packed operands
// (odd orders: unaligned rows), empty and k = 0 products, orders on both sides of `from`, one
// product past max_order (its last row item takes the rest), alpha and beta.
// aligned: sizes that are all multiples of 8 instead (every row 16-byte aligned: with the
// warpgroup-MMA kernel on, KRONLINALG_BATCHED_WGMMA=1 sends them all to it, whatever the order).
template <class T, int MMA>
static void check_split(const char *name, double tol, int64_t from = 96, bool aligned = false) {
  // (the first product of order >= 96 has k < 64: its panel's rows past k must be zeros, not
  // what the poisoned shared memory holds)
  const int64_t odd[][3] = {{9, 9, 9},     {0, 5, 5},     {17, 17, 17},  {7, 130, 40},
                            {33, 33, 33},  {5, 5, 5},     {200, 200, 200}, {1, 1, 1},
                            {96, 96, 96},  {300, 140, 97}, {95, 95, 95},  {128, 128, 128},
                            {100, 120, 0}, {64, 64, 64},  {130, 130, 130}, {131, 3, 129}};
  const int64_t even[][3] = {{8, 8, 8},     {0, 8, 8},     {16, 24, 40},  {136, 128, 64},
                             {96, 96, 96},  {200, 200, 200}, {8, 256, 16}, {64, 64, 64},
                             {128, 128, 128}, {256, 8, 8},  {40, 40, 0},   {24, 16, 8},
                             {264, 136, 96}, {48, 48, 48},  {8, 8, 264},  {160, 96, 200}};
  const auto &sizes = aligned ? even : odd;
  const int count = 16;
  const int64_t max_order = 256;
  std::mt19937 rng(13);
  std::normal_distribution<double> nd;
  int64_t na = 0, nb = 0, nd_ = 0;
  for (auto &z : sizes) na += z[0] * z[2], nb += z[2] * z[1], nd_ += z[0] * z[1];
  std::vector<T> A(size_t(na) + 1), B(size_t(nb) + 1), C(size_t(nd_) + 1),
      D(size_t(nd_) + 1, from_d<T>(777.0));
  for (auto &x : A) x = from_d<T>(nd(rng));
  for (auto &x : B) x = from_d<T>(nd(rng));
  for (auto &x : C) x = from_d<T>(nd(rng));
  std::vector<kl_batched_entry> table(count);
  int64_t oa = 0, ob = 0, od = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t m = sizes[i][0], n = sizes[i][1], k = sizes[i][2];
    table[i] = {m, n, k, int64_t(intptr_t(A.data() + oa)), k, 1, int64_t(intptr_t(B.data() + ob)),
                n, 1, int64_t(intptr_t(C.data() + od)), n, 1, int64_t(intptr_t(D.data() + od)), n, 1};
    oa += m * k, ob += k * n, od += m * n;
  }
  Args args{};
  args.p.alpha = -1.5;
  args.p.beta = 0.5;
  args.count = count;
  args.table = table.data();
  const int small_shape = pick_shape(from - 1, from - 1, KL_BATCHED_1D);
  double worst = 0;
  for (const char *staged : {"0", "1"}) {  // synchronous loads, then the staging variant
  setenv("KRONLINALG_BATCHED_STAGING", staged, 1);
  std::fill(D.begin(), D.end() - 1, from_d<T>(777.0));
  const SplitPlan plan =
      split_plan(from, max_order, small_shape, MMA, sizeof(T) == 2 ? variable_wg_mode() : 0);
  std::vector<unsigned long long> scratch(size_t(plan.words(count)), 0);
  launch_variable_split<T, MMA>(args, plan, scratch.data(), nullptr);
  oa = ob = od = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t m = sizes[i][0], n = sizes[i][1], k = sizes[i][2];
    double scale = 1e-30, err = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) s += to_d(A[oa + r * k + kk]) * to_d(B[ob + kk * n + c]);
        const double ref = -1.5 * s + 0.5 * to_d(C[od + r * n + c]);
        err = worse(err, std::fabs(to_d(D[od + r * n + c]) - ref));
        scale = std::max(scale, std::fabs(ref));
      }
    worst = worse(worst, err / scale);
    oa += m * k, ob += k * n, od += m * n;
  }
  }
  unsetenv("KRONLINALG_BATCHED_STAGING");
  const bool untouched = to_d(D[nd_]) == to_d(from_d<T>(777.0));
  const bool ok = worst <= tol && untouched;
  failures += !ok;
  std::printf("%-5s %s split variable (16 products, packed, %s, from %ld)  rel err %.2e%s\n",
              ok ? "ok" : "FAIL", name, aligned ? "aligned" : "odd", long(from), worst,
              untouched ? "" : "  WROTE PAST THE END");
}

// The tiny-product kernel (batched_cuda_tiny.cuh) or, THIN, the thin-product kernel
// (batched_cuda_thin.cuh): a stack of dense products a padded stride apart (the padding
// poisoned: nothing may be written there), B broadcast or not, alpha and beta; first that the
// kernel's layout check takes the layout and refuses what it must.
template <class T, bool THIN = false>
static void check_tiny(const char *name, int64_t count, int m, int n, int k, bool b_shared,
                       double beta, double tol) {
  auto layout = [](const kl_batched_problem &q, int64_t cnt, int64_t *st) {
    return THIN ? thin_layout(q, cnt, int(sizeof(T)), st) : tiny_layout(q, cnt, int(sizeof(T)), st);
  };
  const int vec = 16 / int(sizeof(T));
  auto padded = [&](int64_t elems) { return (elems + vec - 1) / vec * vec + vec; };
  const int64_t sa = padded(int64_t(m) * k), sb = b_shared ? 0 : padded(int64_t(k) * n),
                sd = padded(int64_t(m) * n);
  std::mt19937 rng(unsigned(m * 1000 + n * 31 + k));
  std::normal_distribution<double> nd;
  const T poison = from_d<T>(4321.0);
  std::vector<T> A(size_t(count * sa) + vec), B(size_t(b_shared ? padded(int64_t(k) * n) : count * sb) + vec),
      C(size_t(count * sd) + vec), D(size_t(count * sd) + vec, poison);
  // 16-byte aligned starts (std::vector of 2-byte types need not be)
  auto al = [](auto &v) {
    using E = std::remove_reference_t<decltype(v[0])>;
    uintptr_t x = reinterpret_cast<uintptr_t>(v.data());
    return reinterpret_cast<E *>((x + 15) / 16 * 16);
  };
  T *a = al(A), *b = al(B), *c = al(C), *d = al(D);
  for (auto &x : A) x = from_d<T>(nd(rng));
  for (auto &x : B) x = from_d<T>(nd(rng));
  for (auto &x : C) x = from_d<T>(nd(rng));
  kl_batched_problem p{};
  p.m = m, p.n = n, p.k = k, p.ndim = 2, p.shape[0] = count, p.shape[1] = 1;
  p.a = a, p.a_bs[0] = sa, p.a_bs[1] = 12345, p.a_rs = k, p.a_cs = 1;
  p.b = b, p.b_bs[0] = sb, p.b_bs[1] = 777, p.b_rs = n, p.b_cs = 1;
  p.c = c, p.c_bs[0] = sd, p.c_rs = n, p.c_cs = 1;
  p.d = d, p.d_bs[0] = sd, p.d_rs = n, p.d_cs = 1;
  p.alpha = -1.5, p.beta = beta;
  int64_t strides[4];
  bool layout_ok = layout(p, count, strides) &&
                   (count < 2 || (strides[0] == sa && strides[1] == sb && strides[3] == sd));
  {  // what it must refuse: a transposed A, an unaligned stride, order 33, a split batch
    kl_batched_problem q = p;
    q.a_rs = 1, q.a_cs = m;
    layout_ok &= m == 1 || k == 1 || !layout(q, count, strides);
    q = p;
    q.a_bs[0] = sa + 1;
    layout_ok &= count < 2 || !layout(q, count, strides);
    q = p;
    q.k = 33, q.a_rs = 33;
    layout_ok &= !layout(q, count, strides);
    q = p;
    q.ndim = 2, q.shape[0] = 2, q.shape[1] = count, q.a_bs[0] = sa, q.a_bs[1] = 0;
    layout_ok &= count < 2 || !layout(q, 2 * count, strides);
  }
  layout(p, count, strides);
  if constexpr (THIN) launch_thin<T>(p, count, strides, nullptr);
  else launch_tiny<T>(p, count, strides, nullptr);
  double worst = 0, scale = 1e-30;
  bool untouched = true;
  for (int64_t q = 0; q < count; ++q) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int kk = 0; kk < k; ++kk)
          s += to_d(a[q * sa + i * k + kk]) * to_d(b[q * sb + kk * n + j]);
        double ref = -1.5 * s;
        if (beta != 0) ref += beta * to_d(c[q * sd + i * n + j]);
        worst = worse(worst, std::fabs(to_d(d[q * sd + i * n + j]) - ref));
        scale = std::max(scale, std::fabs(ref));
      }
    for (int64_t e = int64_t(m) * n; e < sd; ++e) untouched &= to_d(d[q * sd + e]) == to_d(poison);
  }
  const double rel = worst / scale;
  const bool ok = rel <= tol && untouched && layout_ok;
  failures += !ok;
  std::printf("%-5s %s %s  %ldx %dx%dx%d%s beta=%g  rel err %.2e%s%s\n", ok ? "ok" : "FAIL",
              name, THIN ? "thin" : "tiny", long(count), m, k, n, b_shared ? " (B shared)" : "", beta, rel,
              untouched ? "" : "  WROTE INTO THE PADDING", layout_ok ? "" : "  LAYOUT CHECK");
}

template <class T>
static void tiny_suite(const char *name, double tol) {
  check_tiny<T>(name, 37, 16, 16, 16, false, 0.0, tol);
  check_tiny<T>(name, 29, 32, 32, 32, false, 0.5, tol);
  check_tiny<T>(name, 13, 1, 1, 1, false, 0.0, tol);
  check_tiny<T>(name, 17, 5, 7, 3, true, 1.0, tol);
  check_tiny<T>(name, 11, 17, 31, 9, false, 0.0, tol);
  check_tiny<T>(name, 9, 32, 1, 32, false, 0.5, tol);
  check_tiny<T>(name, 9, 1, 32, 17, true, 0.0, tol);
  check_tiny<T>(name, 1, 23, 19, 29, false, 0.0, tol);
  check_tiny<T>(name, 21, 16, 16, 16, true, 1.0, tol);  // the fixed kernels: shared B, beta
  check_tiny<T>(name, 1, 32, 32, 32, true, 0.0, tol);
  check_tiny<T>(name, 14, 32, 32, 32, false, -2.0, tol);
}

// The thin kernel: low-rank stacks (k <= 32), partial tiles in both directions, k not a multiple
// of the MMA's k, every stage of the ring turning (three blocks walk the tiles).
template <class T>
static void thin_suite(const char *name, double tol) {
  constexpr int v = 16 / int(sizeof(T));  // k and n: whole 16-byte pieces
  check_tiny<T, true>(name, 5, 128, 128, 16, false, 0.0, tol);
  check_tiny<T, true>(name, 3, 128, 128, 32, false, 0.5, tol);
  check_tiny<T, true>(name, 4, 200, 136, 2 * v, true, 1.0, tol);
  check_tiny<T, true>(name, 2, 71, 264, v, false, -2.0, tol);
  check_tiny<T, true>(name, 7, 64, 64, 3 * v, false, 0.0, tol);
  check_tiny<T, true>(name, 1, 256, 256, 32, true, 0.0, tol);
  check_tiny<T, true>(name, 6, 33, 72, 16, false, 0.5, tol);
  // 4 and 8 warps, bulk stores, rows, float32's staged grid (8, 9: bulk copies of a warp's
  // 16 x 64 halves; rows past m, copies of 8, 40 and 64 columns)
  if (!kl::knob_set("KRONLINALG_BATCHED_THIN_OPTS")) {
    for (const char *opts : {"0", "1", "2", "3", "4", "5", "8", "9"}) {
      setenv("KRONLINALG_BATCHED_THIN_OPTS", opts, 1);
      const std::string label = std::string(name) + " opts " + opts;
      check_tiny<T, true>(label.c_str(), 3, 200, 136, v, false, 0.5, tol);
      check_tiny<T, true>(label.c_str(), 2, 100, 72, 2 * v, true, 0.0, tol);
      check_tiny<T, true>(label.c_str(), 2, 97, 232, 3 * v, false, 1.0, tol);
    }
    unsetenv("KRONLINALG_BATCHED_THIN_OPTS");
  }
}

template <class T, int MMA>
static void suite(const char *name, double tol) {
  if constexpr (MMA == kHmma || MMA == kTf32x3 || MMA == kDmma16) {  // the 128 x 128 kernel
    check_uniform<T, MMA>(name, kL128, 2, 128, 128, 128, false, false, 0.0, false, tol);
    check_uniform<T, MMA>(name, kL128, 3, 125, 133, 259, true, false, 0.5, true, tol);
    check_uniform<T, MMA>(name, kL128, 2, 257, 127, 7, false, true, 1.0, false, tol);
    check_uniform<T, MMA>(name, kL128, 2, 1, 1, 1, true, true, 0.0, false, tol);
    check_uniform<T, MMA>(name, kL128, 3, 129, 131, 9, false, false, 0.0, false, tol);
    check_uniform<T, MMA>(name, kL128, 2, 100, 100, 0, false, false, 0.5, false, tol);
    check_uniform<T, MMA>(name, kL128, 7, 96, 96, 96, false, false, 0.0, false, tol);
    if constexpr (sizeof(T) == 2) {  // KRONLINALG_BATCHED_WGMMA set: these run the wgmma kernel
      check_uniform<T, MMA>(name, kL128, 2, 64, 136, 200, false, false, 0.5, false, tol);
      check_uniform<T, MMA>(name, kL128, 3, 256, 24, 40, false, false, 0.0, false, tol);
      check_uniform<T, MMA>(name, kL128, 2, 8, 256, 16, false, false, 1.0, true, tol);
      check_uniform<T, MMA>(name, kL128, 2, 128, 128, 520, false, false, 0.0, false, tol);
    }
    check_split<T, MMA>(name, tol);
    check_split<T, MMA>(name, tol, 96, true);
    if (sizeof(T) == 2 && wgmma_level() >= 2)  // every product on the wgmma kernel's tiles
      check_split<T, MMA>(name, tol, 1);
    check_uniform<T, MMA>(name, kL64, 3, 64, 64, 64, false, false, 0.0, false, tol);
    check_uniform<T, MMA>(name, kL64, 3, 61, 67, 131, true, false, 0.5, true, tol);
    check_uniform<T, MMA>(name, kL64, 2, 129, 63, 7, false, true, 1.0, false, tol);
    check_uniform<T, MMA>(name, kL64, 3, 65, 65, 9, false, false, 0.0, false, tol);
    check_uniform<T, MMA>(name, kL64, 2, 48, 50, 0, false, false, 0.5, false, tol);
    if (kl::knob_set("KL_EMULATE_LARGE_ONLY") || kl::knob_set("KL_EMULATE_HALF_LARGE_ONLY"))
      return;
  }
  for (int shape : {kT16, kS32, kS32G, kM64, kM64G}) {
    const kl_batched_config cfg = describe(shape, 0);
    const int64_t t = cfg.tile_m;
    check_uniform<T, MMA>(name, shape, 5, t, t, t, false, false, 0.0, false, tol);
    check_uniform<T, MMA>(name, shape, 3, t - 3, t + 5, 2 * t + 3, true, false, 0.5, true, tol);
    check_uniform<T, MMA>(name, shape, 2, 2 * t + 1, t - 1, 7, false, true, 1.0, false, tol);
    check_uniform<T, MMA>(name, shape, 2, 1, 1, 1, true, true, 0.0, false, tol);
    check_uniform<T, MMA>(name, shape, 3, t + 1, t + 3, 9, false, false, 0.0, false, tol);
    check_uniform<T, MMA>(name, shape, 3, t + 1, t + 3, 9, true, true, 0.0, false, tol);
    check_variable<T, MMA>(name, shape, tol, false);
    check_variable<T, MMA>(name, shape, tol, true);
    check_packed<T, MMA>(name, shape, tol);
  }
}

int main() {
  if (kl::knob_set("KL_EMULATE_HALF_LARGE_ONLY")) {  // the half types' 128 x 128 checks only
    suite<__half, kHmma>("f16  hmma", 4e-3);
    suite<__nv_bfloat16, kHmma>("bf16 hmma", 2e-2);
    std::printf("%d failures\n", failures);
    return failures ? 1 : 0;
  }
  if (kl::knob_set("KL_EMULATE_LARGE_ONLY")) {  // the 128 x 128 kernel's checks only
    suite<double, kDmma16>("f64  dmma16", 1e-13);
    suite<float, kTf32x3>("f32  3xtf32", 2e-6);
    suite<__half, kHmma>("f16  hmma", 4e-3);
    suite<__nv_bfloat16, kHmma>("bf16 hmma", 2e-2);
    std::printf("%d failures\n", failures);
    return failures ? 1 : 0;
  }
  tiny_suite<double>("f64 ", 1e-13);
  tiny_suite<float>("f32 ", 2e-6);
  tiny_suite<__half>("f16 ", 4e-3);
  tiny_suite<__nv_bfloat16>("bf16", 2e-2);
  thin_suite<float>("f32 ", 2e-6);
  thin_suite<__half>("f16 ", 4e-3);
  thin_suite<__nv_bfloat16>("bf16", 2e-2);
  if (kl::knob_set("KL_EMULATE_TINY_ONLY")) {
    std::printf("%d failures\n", failures);
    return failures ? 1 : 0;
  }
  suite<double, kDmma>("f64  dmma", 1e-13);
  suite<double, kDmma16>("f64  dmma16", 1e-13);
  suite<float, kTf32x3>("f32  3xtf32", 2e-6);
  suite<float, kFfma>("f32  ffma", 2e-6);
  suite<__half, kHmma>("f16  hmma", 4e-3);
  suite<__nv_bfloat16, kHmma>("bf16 hmma", 2e-2);
  std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
