// The tiny-product kernel: uniform stacks of products with m, n, k <= 32 whose operands are each
// one dense row-major block (A m x k, B k x n, D and C m x n), the products a fixed stride apart.
//
// Why a kernel of its own: at these orders a product is 0.75-24 KB of traffic and a few dozen
// MMAs, so the time is all memory latency, and what matters is how many products' bytes are in
// flight.  The tile kernels (batched_cuda_kernels.cuh) carry the general machinery (any strides,
// batch dimensions split per product, k-panels, a group barrier a panel): 128 registers with
// 150-300 bytes of spills, one product in flight a warp, ~20 µs for 10⁴ float16 products of order
// 16 (H100, 0.26 of copy bandwidth).  Here one warp owns a product at a time and keeps STAGES
// products in flight: each operand is one contiguous chunk, copied by 16-byte cp.async into the
// warp's ring (no layout change), the fragments are read from it element by element (the reads
// cost far less than the bytes' latency at these sizes), and the result goes back through the
// consumed stage as accumulators, then out with 16-byte stores (beta * C read the same way).
// Only the warp's own barrier (__syncwarp) is ever needed.
//
// MMAs: float16 / bfloat16 m16n8k16 (float32 accumulators), float32 as 3xTF32 m16n8k8, float64
// m16n8k8 DMMA (sm_90); the launcher takes this kernel only for those.
#ifndef KRONLINALG_BATCHED_CUDA_TINY_CUH
#define KRONLINALG_BATCHED_CUDA_TINY_CUH

#include "batched_cuda_large.cuh"

namespace kl {
namespace batched {

constexpr int kTinyMax = 32;     // largest m, n, k
constexpr int kTinyWarps = 4;    // warps a block

// One launch's description: product i's A at a + i * a_bs (elements), and so on.
struct TinyArgs {
  const void *a, *b, *c;
  void *d;
  int64_t a_bs, b_bs, c_bs, d_bs;
  int64_t count;
  int m, n, k, stages;
  int stage_bytes;  // a stage: A's chunk, B's (each rounded up to 16 bytes), or the m x n
                    // accumulators of the epilogue, whichever is larger
  double alpha, beta;
};

template <class T>
struct TinyTraits {
  static constexpr bool F64 = std::is_same_v<T, double>;
  static constexpr bool TF32 = std::is_same_v<T, float>;
  static constexpr bool BF16 = std::is_same_v<T, __nv_bfloat16>;
  using Acc = std::conditional_t<F64, double, float>;
  static constexpr int KS = sizeof(T) == 2 ? 16 : 8;  // k of one MMA
};

__host__ __device__ inline int round16(int64_t bytes) { return int((bytes + 15) / 16 * 16); }

// The bytes of one stage for (m, n, k) in T (accumulators in Acc).
template <class T>
inline int tiny_stage_bytes(int m, int n, int k) {
  const int ab = round16(int64_t(m) * k * int(sizeof(T))) + round16(int64_t(k) * n * int(sizeof(T)));
  const int acc = round16(int64_t(m) * n * int(sizeof(typename TinyTraits<T>::Acc)));
  return ab > acc ? ab : acc;
}

// `bytes` bytes from src to dst (both 16-byte aligned) by the warp's lanes, 16 at a time (the
// last piece zero-filled past the end).
__device__ __forceinline__ void tiny_copy_in(unsigned char *dst, const unsigned char *src,
                                             int bytes, int lane) {
  for (int off = lane * 16; off < bytes; off += 32 * 16) {
    const int left = bytes - off;
    kl::cu::cp_async_16_part(dst + off, src + off, left < 16 ? left : 16);
  }
}

// The element (r, c) of a row-major block with `cols` columns, or zero outside rows x cols.
template <class T>
__device__ __forceinline__ T tiny_at(const T *x, int r, int c, int rows, int cols) {
  return (r < rows && c < cols) ? x[r * cols + c] : T(0.0f);
}

template <class T>
__device__ __forceinline__ uint32_t tiny_pair(T lo, T hi) {
  uint16_t l, h;
  memcpy(&l, &lo, 2);
  memcpy(&h, &hi, 2);
  return uint32_t(l) | (uint32_t(h) << 16);
}

// acc[mi][ni] += A (rows mi*16..) x B (columns ni*8..), the whole k, from one stage.
template <class T>
__device__ __forceinline__ void tiny_mma(typename TinyTraits<T>::Acc (&acc)[2][4][4],
                                         const T *As, const T *Bs, int m, int n, int k,
                                         int lane) {
  using Tr = TinyTraits<T>;
  const int g = lane >> 2, t = lane & 3;
  const int mi_n = (m + 15) / 16, ni_n = (n + 7) / 8;
#pragma unroll 1
  for (int kk = 0; kk < k; kk += Tr::KS) {
    if constexpr (sizeof(T) == 2) {
      uint32_t b[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = ni * 8 + g, r = kk + 2 * t;
        b[ni][0] = tiny_pair(tiny_at(Bs, r, c, k, n), tiny_at(Bs, r + 1, c, k, n));
        b[ni][1] = tiny_pair(tiny_at(Bs, r + 8, c, k, n), tiny_at(Bs, r + 9, c, k, n));
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        if (mi >= mi_n) continue;
        const int r0 = mi * 16 + g, c0 = kk + 2 * t;
        const uint32_t a[4] = {
            tiny_pair(tiny_at(As, r0, c0, m, k), tiny_at(As, r0, c0 + 1, m, k)),
            tiny_pair(tiny_at(As, r0 + 8, c0, m, k), tiny_at(As, r0 + 8, c0 + 1, m, k)),
            tiny_pair(tiny_at(As, r0, c0 + 8, m, k), tiny_at(As, r0, c0 + 9, m, k)),
            tiny_pair(tiny_at(As, r0 + 8, c0 + 8, m, k), tiny_at(As, r0 + 8, c0 + 9, m, k))};
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          if (ni < ni_n) kl::cu::mma_16816<Tr::BF16>(acc[mi][ni], a, b[ni][0], b[ni][1]);
      }
    } else if constexpr (Tr::F64) {
      double b[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = ni * 8 + g;
        b[ni][0] = tiny_at(Bs, kk + t, c, k, n);
        b[ni][1] = tiny_at(Bs, kk + t + 4, c, k, n);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        if (mi >= mi_n) continue;
        const int r0 = mi * 16 + g;
        const double a[4] = {tiny_at(As, r0, kk + t, m, k), tiny_at(As, r0 + 8, kk + t, m, k),
                             tiny_at(As, r0, kk + t + 4, m, k),
                             tiny_at(As, r0 + 8, kk + t + 4, m, k)};
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          if (ni < ni_n) dmma_1688(acc[mi][ni], a, b[ni][0], b[ni][1]);
      }
    } else {  // 3xTF32, as the large-tile kernel: small terms first, then one IEEE add
      uint32_t bh[4][2], bl[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = ni * 8 + g;
        kl::cu::split_tf32(__float_as_uint(tiny_at(Bs, kk + t, c, k, n)), bh[ni][0], bl[ni][0]);
        kl::cu::split_tf32(__float_as_uint(tiny_at(Bs, kk + t + 4, c, k, n)), bh[ni][1],
                           bl[ni][1]);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        if (mi >= mi_n) continue;
        const int r0 = mi * 16 + g;
        const float x[4] = {tiny_at(As, r0, kk + t, m, k), tiny_at(As, r0 + 8, kk + t, m, k),
                            tiny_at(As, r0, kk + t + 4, m, k),
                            tiny_at(As, r0 + 8, kk + t + 4, m, k)};
        uint32_t ah[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) kl::cu::split_tf32(__float_as_uint(x[e]), ah[e], al[e]);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          if (ni < ni_n) {
            float p[4];
            mma_tf32_fresh(p, al, bh[ni][0], bh[ni][1]);
            kl::cu::mma_tf32(p, ah, bl[ni][0], bl[ni][1]);
            kl::cu::mma_tf32(p, ah, bh[ni][0], bh[ni][1]);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][ni][e] += p[e];
          }
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kTinyWarps * 32) tiny_kernel(const TinyArgs args) {
  using Tr = TinyTraits<T>;
  using Acc = typename Tr::Acc;
  KL_DYNAMIC_SMEM(smem);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int m = args.m, n = args.n, k = args.k, S = args.stages, SB = args.stage_bytes;
  const int a_bytes = m * k * int(sizeof(T)), b_bytes = k * n * int(sizeof(T));
  const int b_off = round16(a_bytes);
  unsigned char *ring = smem + size_t(warp) * S * SB;
  const int64_t first = int64_t(blockIdx.x) * kTinyWarps + warp;
  const int64_t step = int64_t(gridDim.x) * kTinyWarps;
  const Acc alpha = Acc(args.alpha), beta = Acc(args.beta);

  // one commit group a product (empty past the end), into stage j % S
  auto issue = [&](int64_t j) {
    const int64_t p = first + j * step;
    if (p < args.count) {
      unsigned char *st = ring + (j % S) * SB;
      tiny_copy_in(st, static_cast<const unsigned char *>(args.a) + p * args.a_bs * int64_t(sizeof(T)),
                   a_bytes, lane);
      tiny_copy_in(st + b_off,
                   static_cast<const unsigned char *>(args.b) + p * args.b_bs * int64_t(sizeof(T)),
                   b_bytes, lane);
    }
    kl::cu::cp_async_commit();
  };
#pragma unroll 1
  for (int j = 0; j < S - 1; ++j) issue(j);

#pragma unroll 1
  for (int64_t j = 0;; ++j) {
    const int64_t p = first + j * step;
    if (p >= args.count) break;
    unsigned char *st = ring + (j % S) * SB;
    issue(j + S - 1);  // into the stage consumed last step
    // all but the S - 1 newest groups are in: this product's
    switch (S) {  // (wait_group takes an immediate)
      case 2: kl::cu::cp_async_wait<1>(); break;
      case 3: kl::cu::cp_async_wait<2>(); break;
      default: kl::cu::cp_async_wait<3>(); break;
    }
    __syncwarp();
    Acc acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = Acc(0);
    tiny_mma<T>(acc, reinterpret_cast<const T *>(st), reinterpret_cast<const T *>(st + b_off), m,
                n, k, lane);
    __syncwarp();  // every lane is done reading the operands: the stage takes the accumulators
    Acc *cs = reinterpret_cast<Acc *>(st);
    {
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = mi * 16 + g + (e >> 1) * 8, c = ni * 8 + 2 * t + (e & 1);
            if (r < m && c < n) cs[r * n + c] = acc[mi][ni][e];
          }
    }
    __syncwarp();
    // D = alpha * acc + beta * C, VEC elements (16 bytes) a lane at a time
    constexpr int VEC = 16 / int(sizeof(T));
    const int mn = m * n;
    T *d = static_cast<T *>(args.d) + p * args.d_bs;
    const T *c = beta != Acc(0) ? static_cast<const T *>(args.c) + p * args.c_bs : nullptr;
    for (int i0 = lane * VEC; i0 < mn; i0 += 32 * VEC) {
      union {
        uint4 u;
        T e[VEC];
      } cv, dv;
      const bool full = i0 + VEC <= mn;
      if (c) {
        if (full) cv.u = *reinterpret_cast<const uint4 *>(c + i0);
        else
          for (int e = 0; e < VEC; ++e) cv.e[e] = i0 + e < mn ? c[i0 + e] : T(0.0f);
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        Acc v = i0 + e < mn ? alpha * cs[i0 + e] : Acc(0);
        if (c) v += beta * to_acc<Acc>(cv.e[e]);
        dv.e[e] = from_acc<T>(v);
      }
      if (full) *reinterpret_cast<uint4 *>(d + i0) = dv.u;
      else
        for (int e = 0; e < VEC && i0 + e < mn; ++e) d[i0 + e] = dv.e[e];
    }
    __syncwarp();  // the stage is free for the copies issued next step
  }
  kl::cu::cp_async_wait<0>();
}

// Whether a uniform problem fits this kernel, and its per-product strides: every operand one
// dense row-major block, the batch dimensions one fixed stride each (broadcast: stride 0 over
// all of them), every address and stride a multiple of 16 bytes.  (The kernel's MMA kinds are
// the launcher's check.)
inline bool tiny_layout(const kl_batched_problem &p, int64_t count, int elem, int64_t *strides) {
  if (p.m < 1 || p.n < 1 || p.k < 1 || p.m > kTinyMax || p.n > kTinyMax || p.k > kTinyMax)
    return false;
  const bool with_c = p.beta != 0.0;
  if (p.a_cs != 1 || p.a_rs != p.k || p.b_cs != 1 || p.b_rs != p.n || p.d_cs != 1 ||
      p.d_rs != p.n || (with_c && (p.c_cs != 1 || p.c_rs != p.n)))
    return false;
  // a single stride s with offset(i) = i * s over the batch dimensions (row-major index)
  auto flat = [&](const int64_t *bs, int64_t *s) {
    int64_t expect = -1;
    *s = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
      if (p.shape[d] == 1) continue;
      if (expect < 0) *s = expect = bs[d];
      else if (bs[d] != expect) return false;
      expect *= p.shape[d];
    }
    return true;
  };
  const void *ptrs[4] = {p.a, p.b, with_c ? p.c : nullptr, p.d};
  const int64_t *bss[4] = {p.a_bs, p.b_bs, p.c_bs, p.d_bs};
  for (int i = 0; i < 4; ++i) {
    strides[i] = 0;
    if (i == 2 && !with_c) continue;
    if (!flat(bss[i], &strides[i])) return false;
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16) return false;
    if (count > 1 && (strides[i] * elem) % 16) return false;
  }
  return true;
}

// Launches the tiny kernel for a problem tiny_layout accepted.
template <class T>
cudaError_t launch_tiny(const kl_batched_problem &p, int64_t count, const int64_t *strides,
                        cudaStream_t stream) {
  TinyArgs a{};
  a.a = p.a, a.b = p.b, a.c = p.c, a.d = p.d;
  a.a_bs = strides[0], a.b_bs = strides[1], a.c_bs = strides[2], a.d_bs = strides[3];
  a.count = count;
  a.m = int(p.m), a.n = int(p.n), a.k = int(p.k);
  a.alpha = p.alpha, a.beta = p.beta;
  a.stage_bytes = tiny_stage_bytes<T>(a.m, a.n, a.k);
  // as many stages as fit 24 KB a warp (two to four): four 4-warp blocks of small products an
  // SM, one of 16 KB float64 order-32 stages
  const int per_warp = 24 * 1024;
  a.stages = per_warp / a.stage_bytes;
  a.stages = a.stages < 2 ? 2 : a.stages > 4 ? 4 : a.stages;
  const int smem = kTinyWarps * a.stages * a.stage_bytes;
  const int64_t blocks = (count + kTinyWarps - 1) / kTinyWarps;
#ifdef KL_BATCHED_EMULATE
  (void)stream;
  const int64_t grid = blocks > 3 ? 3 : blocks;  // several products a warp
  emu_launch(unsigned(grid), kTinyWarps * 32, smem, [a] { tiny_kernel<T>(a); });
  return cudaSuccess;
#else
  if (smem > 48 * 1024) {
    const cudaError_t e = opt_in_smem(reinterpret_cast<const void *>(tiny_kernel<T>), smem);
    if (e != cudaSuccess) return e;
  }
  // resident blocks an SM for this shared-memory size (asked once per size: a few sizes occur)
  static int cached_smem[8] = {-1, -1, -1, -1, -1, -1, -1, -1}, cached_cap[8];
  int cap = 0;
  for (int i = 0; i < 8 && !cap; ++i)
    if (cached_smem[i] == smem) cap = cached_cap[i];
  if (!cap) {
    int per_sm = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tiny_kernel<T>,
                                                                  kTinyWarps * 32, smem);
    DeviceInfo dev;
    if (e == cudaSuccess) e = query_device(&dev);
    if (e != cudaSuccess) return e;
    cap = (per_sm > 0 ? per_sm : 1) * dev.sms;
    static int next = 0;
    cached_cap[next % 8] = cap;  // (the size last: a reader that matches it finds the cap)
    cached_smem[next % 8] = smem;
    ++next;
  }
  const int64_t grid = blocks < cap ? blocks : cap;
  tiny_kernel<T><<<unsigned(grid), kTinyWarps * 32, smem, stream>>>(a);
  return cudaGetLastError();
#endif
}

}  // namespace batched
}  // namespace kl

#endif
