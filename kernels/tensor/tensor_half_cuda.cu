// The one-pass MTTKRP of a tensor's first mode with the tensor stored in float16 or bfloat16
// (tensor.h, dtype 1 / 2): CP-ALS's half-precision storage reads the tensor once per pass in
// the half type, where the library path reads it in a cuBLAS GEMM, writes a float32
// (R, J*K) intermediate and reads that again twice.
//
// As the float32 kernel (tensor_cuda.cu), but: 64 p per pipeline stage (128 bytes of a row of
// X), three stages (two blocks of 128 threads a multiprocessor), the A fragments loaded with
// ldmatrix, and mma.sync m16n8k16 (float16 or bfloat16 inputs, float32 sums).  The Khatri-Rao
// rows W[p, r] = U[a, r] V[b, r] are formed in float32 from the staged float32 factor rows and
// rounded to the half type in registers; the caller scales U and V so that W fits float16's
// range (kl_tensor_mttkrp.dscale undoes it on the output), or passes their Gram matrices and
// the kernel scales W by a bound of their largest magnitudes (no launches before it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "cuda_ptx.cuh"
#include "tensor.h"
#include "tensor_internal.hpp"

namespace {

using kl::cu::cp_async_16;
using kl::cu::cp_async_commit;
using kl::cu::cp_async_wait;
using kl::cu::ldsm_x4;
using kl::cu::mma_16816;

constexpr int BK = 64;      // p per pipeline stage
constexpr int RP = 64;      // the rank, padded
constexpr int NS = 3;       // pipeline stages
constexpr int LDX = BK + 8; // X staged [m][p] in halves: ldmatrix rows 144 bytes apart (no conflicts)
constexpr int LDV = RP + 4; // V staged [p][r] in floats: rows 2t of a fragment on banks 8t + g

// WARPS_M warps along the output rows, two along the 64 ranks, MT m16 tiles a warp: 128 rows
// a block of 4 warps (variant 0, two blocks a multiprocessor) or 256 rows a block of 8 warps
// (variant 1: each staged row of V serves twice the rows of X; V's rows come from L2 as
// many bytes as X's from memory in variant 0)
template <int WARPS_M, int MT_>
struct HalfTile {
  static constexpr int THREADS = 64 * WARPS_M;
  static constexpr int MT = MT_;
  static constexpr int BM = 16 * MT * WARPS_M;
  static constexpr int MIN_BLOCKS = BM == 128 ? 2 : 1;
  static constexpr int X_BYTES = BM * LDX * 2;
  static constexpr int V_OFF = X_BYTES;                     // bytes
  static constexpr int U_OFF = V_OFF + BK * LDV * 4;        // bytes
  static constexpr int STAGE = U_OFF + 2 * RP * 4;          // bytes
  static constexpr size_t SMEM = size_t(NS) * STAGE;
};

struct HalfArgs {
  const uint16_t *x;
  const float *u, *v;
  float *part;
  int64_t m, red, ia, ib, stages, mpad;
  int32_t splits;
  int64_t nb, sa;  // variant 2: chunks of 64 b, and ranges of a (splits = nb * sa)
  // the Gram scale (tensor.h): gv non-null: U and V come unscaled, every warp bounds their
  // largest magnitudes by the square roots of their Grams' largest diagonal entries
  const float *gu, *gv;
  int32_t gr;
  float *scale_out;
};

// W's headroom under the Gram scale: |U V| <= su sv, so W * 2^8 / (su sv) <= 256, far inside
// float16's range, and the column-norm bound's slack (up to sqrt(I) above the largest
// magnitude) costs no subnormal W
constexpr float GRAM_HEADROOM = 256.f;

__device__ __forceinline__ float largest_diag(const float *g, int r) {
  float d = 0.f;
  for (int k = threadIdx.x & 31; k < r; k += 32) d = fmaxf(d, g[int64_t(k) * r + k]);
#pragma unroll
  for (int o = 16; o; o >>= 1) d = fmaxf(d, __shfl_xor_sync(0xffffffffu, d, o));
  return sqrtf(fmaxf(d, 1e-30f));
}

// the factor W is multiplied by before rounding: 1, or under the Gram scale 2^8 / (su sv)
// (block (0, 0) writes su sv / 2^8 for the reduction); every thread of a warp calls it
__device__ __forceinline__ float gram_inverse_scale(const HalfArgs &a) {
  if (!a.gv) return 1.f;
  const float s = (a.gu ? largest_diag(a.gu, a.gr) : 1.f) * largest_diag(a.gv, a.gr);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) a.scale_out[0] = s / GRAM_HEADROOM;
  return GRAM_HEADROOM / s;
}

struct Walk {
  int64_t p0, a0, b0;
  __device__ void start(int64_t s, int64_t ib) {
    p0 = s * BK;
    a0 = p0 / ib;
    b0 = p0 - a0 * ib;
  }
  __device__ __forceinline__ void next(int64_t ib) {  // (ib >= 64: at most one wrap of b)
    p0 += BK;
    b0 += BK;
    if (b0 >= ib) {
      b0 -= ib;
      ++a0;
    }
  }
};

template <class T>
__device__ __forceinline__ void load_stage(const HalfArgs &a, unsigned char *st, const Walk &w,
                                           int64_t mbase, int tid) {
  constexpr int BM = T::BM;
  // X: 128 rows i of 64 halves, 8 chunks of 16 bytes a row (red % 8 == 0: a chunk is all in
  // or all out)
#pragma unroll
  for (int c = tid; c < BM * (BK / 8); c += T::THREADS) {
    const int row = c / (BK / 8), col = (c % (BK / 8)) * 8;
    const int64_t i = mbase + row, p = w.p0 + col;
    const bool ok = i < a.m && p < a.red;
    cp_async_16(st + (row * LDX + col) * 2, ok ? a.x + i * a.red + p : a.x, ok);
  }
  // V's rows b = b0 + row, wrapped once at ib
  float *vs = reinterpret_cast<float *>(st + T::V_OFF);
#pragma unroll
  for (int c = tid; c < BK * (RP / 4); c += T::THREADS) {
    const int row = c / (RP / 4), col = (c % (RP / 4)) * 4;
    int64_t b = w.b0 + row;
    if (b >= a.ib) b -= a.ib;
    const bool ok = w.p0 + row < a.red;
    cp_async_16(vs + row * LDV + col, ok ? a.v + b * RP + col : a.v, ok);
  }
  // U's rows a0 and a0 + 1
  float *us = reinterpret_cast<float *>(st + T::U_OFF);
  if (tid < 2 * (RP / 4)) {
    const int which = tid / (RP / 4), col = (tid % (RP / 4)) * 4;
    const int64_t ua = w.a0 + which;
    const bool ok = ua < a.ia;
    cp_async_16(us + which * RP + col, ok ? a.u + ua * RP + col : a.u, ok);
  }
}

template <bool BF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (BF16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  } else {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  }
}

template <bool BF16, int WARPS_M, int MT_>
__global__ void __launch_bounds__(HalfTile<WARPS_M, MT_>::THREADS,
                                  HalfTile<WARPS_M, MT_>::MIN_BLOCKS)
    mttkrp_half_kernel(HalfArgs a) {
  using T = HalfTile<WARPS_M, MT_>;
  constexpr int MT = T::MT, BM = T::BM;
  KL_DYNAMIC_SMEM(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp % WARPS_M) * (16 * MT), wn = (warp / WARPS_M) * 32;
  const int64_t mbase = int64_t(blockIdx.x) * BM;
  const int split = blockIdx.y;
  const int64_t s_begin = a.stages * split / a.splits;
  const int n_it = int(a.stages * (split + 1) / a.splits - s_begin);
  // ldmatrix.x4 of a 16 x 16 A tile: lanes 0-15 address rows 0-15 at column 0, lanes 16-31 the
  // same rows at column 8 (registers a0..a3 of mma m16n8k16)
  const int lrow = lane & 15, lcol = (lane >> 4) * 8;
  const float inv = gram_inverse_scale(a);

  float acc[MT][4][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;

  Walk ld, cw;
  ld.start(s_begin, a.ib);
  cw = ld;
#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < n_it) {
      load_stage<T>(a, smem + s * T::STAGE, ld, mbase, tid);
      ld.next(a.ib);
    }
    cp_async_commit();
  }
  for (int it = 0; it < n_it; ++it) {
    cp_async_wait<NS - 2>();
    __syncthreads();  // stage `it` landed for every thread; slot (it - 1) % NS is free
    if (it + NS - 1 < n_it) {
      load_stage<T>(a, smem + ((it + NS - 1) % NS) * T::STAGE, ld, mbase, tid);
      ld.next(a.ib);
    }
    cp_async_commit();
    const unsigned char *st = smem + (it % NS) * T::STAGE;
    const float *vs = reinterpret_cast<const float *>(st + T::V_OFF);
    const float *us = reinterpret_cast<const float *>(st + T::U_OFF);
    const int64_t qb64 = a.ib - cw.b0;  // rows >= qb take U's second row
    const int qb = qb64 > BK ? BK : int(qb64);
    cw.next(a.ib);
    float u_lo[4], u_hi[4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      u_lo[nt] = us[wn + nt * 8 + g] * inv;
      u_hi[nt] = us[RP + wn + nt * 8 + g] * inv;
    }
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      // B fragment (k16 x n8, col): b0 = W[2t, 2t + 1][g], b1 = W[2t + 8, 2t + 9][g]
      const int k0 = ks * 16 + 2 * t;
      uint32_t bf[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = wn + nt * 8 + g;
        float w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int k = k0 + (e & 1) + (e >> 1) * 8;
          w[e] = vs[k * LDV + col] * (k >= qb ? u_hi[nt] : u_lo[nt]);
        }
        bf[nt][0] = pack2<BF16>(w[0], w[1]);
        bf[nt][1] = pack2<BF16>(w[2], w[3]);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t af[4];
        ldsm_x4(af, st + ((wm + mt * 16 + lrow) * LDX + ks * 16 + lcol) * 2);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_16816<BF16>(acc[mt][nt], af, bf[nt][0], bf[nt][1]);
      }
    }
  }
  cp_async_wait<0>();
  // the partial sums, [split][r][mpad]: c0/c1 at (m = g, r = 2t, 2t + 1), c2/c3 at m = g + 8
  float *out = a.part + int64_t(split) * RP * a.mpad + mbase;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int m = wm + mt * 16 + g, r = wn + nt * 8 + 2 * t;
      out[int64_t(r) * a.mpad + m] = acc[mt][nt][0];
      out[int64_t(r + 1) * a.mpad + m] = acc[mt][nt][1];
      out[int64_t(r) * a.mpad + m + 8] = acc[mt][nt][2];
      out[int64_t(r + 1) * a.mpad + m + 8] = acc[mt][nt][3];
    }
}

// Variant 2 ("b-major"): a block takes one 64-wide chunk of b and a range of a, so the chunk's
// rows of V are staged once (V's bytes from L2 vanish; variants 0 / 1 stage 64 rows of V with
// every 64 p) and each stage is one a: 128 rows of X at p = a * ib + b0 ... b0 + 63, and one row
// of U.  The block's partial sums go to part[bc + nb * as].  Requires ib % 8 == 0.
struct BTile {
  static constexpr int THREADS = 128, MT = 4, BM = 128;
  static constexpr int X_BYTES = BM * LDX * 2;
  static constexpr int V_BYTES = BK * LDV * 4;
  static constexpr int STAGE = X_BYTES + RP * 4;  // X, then U's row
  static constexpr size_t SMEM = size_t(V_BYTES) + size_t(NS) * STAGE;
};

__device__ __forceinline__ void load_bstage(const HalfArgs &a, unsigned char *st, int64_t ua,
                                            int64_t b0, int64_t mbase, int tid) {
  using T = BTile;
#pragma unroll
  for (int c = tid; c < T::BM * (BK / 8); c += T::THREADS) {
    const int row = c / (BK / 8), col = (c % (BK / 8)) * 8;
    const int64_t i = mbase + row;
    const bool ok = i < a.m && b0 + col < a.ib;
    cp_async_16(st + (row * LDX + col) * 2, ok ? a.x + i * a.red + ua * a.ib + b0 + col : a.x,
                ok);
  }
  if (tid < RP / 4)
    cp_async_16(st + T::X_BYTES + tid * 16, a.u + ua * RP + tid * 4, true);
}

template <bool BF16>
__global__ void __launch_bounds__(BTile::THREADS, 3) mttkrp_half_bmajor_kernel(HalfArgs a) {
  using T = BTile;
  constexpr int MT = T::MT, WARPS_M = 2;
  KL_DYNAMIC_SMEM(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp % WARPS_M) * (16 * MT), wn = (warp / WARPS_M) * 32;
  const int64_t mbase = int64_t(blockIdx.x) * T::BM;
  const int split = blockIdx.y;  // bc + nb * as
  const int64_t bc = split % a.nb, as = split / a.nb;
  const int64_t b0 = bc * BK;
  const int64_t a_begin = a.ia * as / a.sa;
  const int n_it = int(a.ia * (as + 1) / a.sa - a_begin);
  const int lrow = lane & 15, lcol = (lane >> 4) * 8;
  const float inv = gram_inverse_scale(a);
  float *vs = reinterpret_cast<float *>(smem);
  unsigned char *stages = smem + T::V_BYTES;

  float acc[MT][4][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;

  // the chunk's rows of V (zeros beyond ib), in the first group with stage 0
#pragma unroll
  for (int c = tid; c < BK * (RP / 4); c += T::THREADS) {
    const int row = c / (RP / 4), col = (c % (RP / 4)) * 4;
    const bool ok = b0 + row < a.ib;
    cp_async_16(vs + row * LDV + col, ok ? a.v + (b0 + row) * RP + col : a.v, ok);
  }
#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < n_it) load_bstage(a, stages + s * T::STAGE, a_begin + s, b0, mbase, tid);
    cp_async_commit();
  }
  for (int it = 0; it < n_it; ++it) {
    cp_async_wait<NS - 2>();
    __syncthreads();  // stage `it` (and V) landed for every thread; slot (it - 1) % NS is free
    if (it + NS - 1 < n_it)
      load_bstage(a, stages + ((it + NS - 1) % NS) * T::STAGE, a_begin + it + NS - 1, b0, mbase,
                  tid);
    cp_async_commit();
    const unsigned char *st = stages + (it % NS) * T::STAGE;
    const float *us = reinterpret_cast<const float *>(st + T::X_BYTES);
    float u[4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) u[nt] = us[wn + nt * 8 + g] * inv;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      const int k0 = ks * 16 + 2 * t;
      uint32_t bf[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = wn + nt * 8 + g;
        bf[nt][0] = pack2<BF16>(vs[k0 * LDV + col] * u[nt], vs[(k0 + 1) * LDV + col] * u[nt]);
        bf[nt][1] = pack2<BF16>(vs[(k0 + 8) * LDV + col] * u[nt],
                                vs[(k0 + 9) * LDV + col] * u[nt]);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t af[4];
        ldsm_x4(af, st + ((wm + mt * 16 + lrow) * LDX + ks * 16 + lcol) * 2);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_16816<BF16>(acc[mt][nt], af, bf[nt][0], bf[nt][1]);
      }
    }
  }
  cp_async_wait<0>();
  float *out = a.part + int64_t(split) * RP * a.mpad + mbase;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int m = wm + mt * 16 + g, r = wn + nt * 8 + 2 * t;
      out[int64_t(r) * a.mpad + m] = acc[mt][nt][0];
      out[int64_t(r + 1) * a.mpad + m] = acc[mt][nt][1];
      out[int64_t(r) * a.mpad + m + 8] = acc[mt][nt][2];
      out[int64_t(r + 1) * a.mpad + m + 8] = acc[mt][nt][3];
    }
}

template <bool BF16>
cudaError_t bmajor_blocks(int dev, int *out) {
  static std::mutex mu;
  static std::map<int, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it == cache.end()) {
    cudaError_t e = cudaFuncSetAttribute(mttkrp_half_bmajor_kernel<BF16>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(BTile::SMEM));
    if (e != cudaSuccess) return e;
    int n = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mttkrp_half_bmajor_kernel<BF16>,
                                                      BTile::THREADS, BTile::SMEM);
    if (e != cudaSuccess) return e;
    it = cache.emplace(dev, n > 0 ? n : 1).first;
  }
  *out = it->second;
  return cudaSuccess;
}

template <bool BF16, int WARPS_M, int MT>
cudaError_t blocks_for(int dev, int *out) {
  using T = HalfTile<WARPS_M, MT>;
  static std::mutex mu;
  static std::map<int, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it == cache.end()) {
    cudaError_t e = cudaFuncSetAttribute(mttkrp_half_kernel<BF16, WARPS_M, MT>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(T::SMEM));
    if (e != cudaSuccess) return e;
    int n = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mttkrp_half_kernel<BF16, WARPS_M, MT>,
                                                      T::THREADS, T::SMEM);
    if (e != cudaSuccess) return e;
    it = cache.emplace(dev, n > 0 ? n : 1).first;
  }
  *out = it->second;
  return cudaSuccess;
}

template <bool BF16, int WARPS_M, int MT>
cudaError_t launch_half(const HalfArgs &a, dim3 grid, cudaStream_t s, int dev) {
  using T = HalfTile<WARPS_M, MT>;
  int blocks = 0;
  cudaError_t e = blocks_for<BF16, WARPS_M, MT>(dev, &blocks);  // (sets the smem opt-in)
  if (e != cudaSuccess) return e;
  mttkrp_half_kernel<BF16, WARPS_M, MT><<<grid, T::THREADS, T::SMEM, s>>>(a);
  return cudaGetLastError();
}

}  // namespace

namespace kl {
namespace tensor {

int half_rows(int variant) { return variant == 1 ? HalfTile<4, 4>::BM : HalfTile<2, 4>::BM; }

cudaError_t half_blocks_per_sm(int dtype, int variant, int dev, int *out) {
  if (variant == 2) return dtype == 2 ? bmajor_blocks<true>(dev, out) : bmajor_blocks<false>(dev, out);
  if (dtype == 2)
    return variant ? blocks_for<true, 4, 4>(dev, out) : blocks_for<true, 2, 4>(dev, out);
  return variant ? blocks_for<false, 4, 4>(dev, out) : blocks_for<false, 2, 4>(dev, out);
}

cudaError_t launch_half_mttkrp(const kl_tensor_mttkrp *c, int64_t stages, int64_t mpad,
                               int64_t tiles, int dev, cudaStream_t s) {
  HalfArgs a{static_cast<const uint16_t *>(c->x), c->u, c->v, c->part, c->m, c->red, c->ia,
             c->ib, stages, mpad, c->splits, 0, 0, c->gram_u, c->gram_v, c->rank,
             c->scale_out};
  dim3 grid(unsigned(tiles), unsigned(c->splits));
  if (c->variant == 2) {  // (splits = nb * sa, checked by the caller)
    a.nb = (c->ib + BK - 1) / BK;
    a.sa = c->splits / a.nb;
    int blocks = 0;
    cudaError_t e = c->dtype == 2 ? bmajor_blocks<true>(dev, &blocks)
                                  : bmajor_blocks<false>(dev, &blocks);
    if (e != cudaSuccess) return e;
    if (c->dtype == 2)
      mttkrp_half_bmajor_kernel<true><<<grid, BTile::THREADS, BTile::SMEM, s>>>(a);
    else
      mttkrp_half_bmajor_kernel<false><<<grid, BTile::THREADS, BTile::SMEM, s>>>(a);
    return cudaGetLastError();
  }
  if (c->dtype == 2)
    return c->variant ? launch_half<true, 4, 4>(a, grid, s, dev)
                      : launch_half<true, 2, 4>(a, grid, s, dev);
  return c->variant ? launch_half<false, 4, 4>(a, grid, s, dev)
                    : launch_half<false, 2, 4>(a, grid, s, dev);
}

}  // namespace tensor
}  // namespace kl

// ---------------------------------------------------------------------------------------------
// CP-ALS's half intermediate (tensor.h, kl_tensor_half_contract): Y (R, J, K) in the half type,
// contracted over K or over J with a float32 rank-first factor, float32 sums.  Bandwidth-bound;
// every sum in a fixed order (deterministic).
namespace {

template <bool BF16>
__device__ __forceinline__ void unpack8(const uint4 &q, float (&v)[8]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if constexpr (BF16) {
      __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162 *>(&w[e]);
      const float2 f = __bfloat1622float2(h);
      v[2 * e] = f.x;
      v[2 * e + 1] = f.y;
    } else {
      __half2 h = *reinterpret_cast<const __half2 *>(&w[e]);
      const float2 f = __half22float2(h);
      v[2 * e] = f.x;
      v[2 * e + 1] = f.y;
    }
  }
}

// out[r, j] = sum_k Y[r, j, k] f[r, k]: a warp a row (r, j), lanes over 8-element chunks of k,
// then a shuffle reduction
template <bool BF16>
__global__ void __launch_bounds__(256) half_trailing_kernel(const uint16_t *y, const float *f,
                                                            float *out, int64_t R, int64_t J,
                                                            int64_t K, float alpha,
                                                            const float *scale) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);  // r * J + j
  if (row >= R * J) return;
  const int64_t r = row / J;
  const uint16_t *yr = y + row * K;
  const float *fr = f + r * K;
  float s = 0.f;
  for (int64_t c = lane; c < K / 8; c += 32) {
    float v[8];
    unpack8<BF16>(*reinterpret_cast<const uint4 *>(yr + 8 * c), v);
#pragma unroll
    for (int e = 0; e < 8; ++e) s += v[e] * fr[8 * c + e];
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) out[row] = s * (scale ? alpha * *scale : alpha);
}

// out[r, k] = sum_j f[r, j] Y[r, j, k]: a block a (r, 256 k), a lane 8 consecutive k, the 8
// warps over j (4 rows in flight a warp), then the warps' sums added in order in shared memory
template <bool BF16>
__global__ void __launch_bounds__(256) half_leading_kernel(const uint16_t *y, const float *f,
                                                           float *out, int64_t J, int64_t K,
                                                           float alpha, const float *scale) {
  __shared__ float part[8][256];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = blockIdx.y;
  const int64_t k0 = int64_t(blockIdx.x) * 256 + lane * 8;
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.f;
  if (k0 < K) {
    const uint16_t *yr = y + r * J * K + k0;
    const float *fr = f + r * J;
    int64_t j = warp;
    for (; j + 24 < J; j += 32) {  // four rows in flight
      uint4 q[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) q[u] = *reinterpret_cast<const uint4 *>(yr + (j + 8 * u) * K);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float v[8];
        unpack8<BF16>(q[u], v);
        const float w = fr[j + 8 * u];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += w * v[e];
      }
    }
    for (; j < J; j += 8) {
      float v[8];
      unpack8<BF16>(*reinterpret_cast<const uint4 *>(yr + j * K), v);
      const float w = fr[j];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += w * v[e];
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) part[warp][lane * 8 + e] = acc[e];
  __syncthreads();
  const int64_t k = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (k < K) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) s += part[w][threadIdx.x];
    out[r * K + k] = s * (scale ? alpha * *scale : alpha);
  }
}

}  // namespace

extern "C" int kl_tensor_half_contract_cuda(const kl_tensor_half_contract *c, void *stream) {
  if ((c->dtype != 1 && c->dtype != 2) || c->r < 1 || c->j < 1 || c->k < 1 || c->k % 8 ||
      reinterpret_cast<uintptr_t>(c->y) % 16 || reinterpret_cast<uintptr_t>(c->f) % 4)
    return kl::fail(KL_ERR_INVALID, "tensor half contraction: dtype not float16/bfloat16, an "
                                    "empty size, K not a multiple of 8 or Y not 16-byte aligned");
  if (c->r > 65535 || (c->r * c->j + 7) / 8 > 0x7fffffff)
    return kl::fail(KL_ERR_INVALID, "tensor half contraction: too large for one launch");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const uint16_t *y = static_cast<const uint16_t *>(c->y);
  const bool bf = c->dtype == 2;
  if (c->leading) {
    dim3 grid(unsigned((c->k + 255) / 256), unsigned(c->r));
    bf ? half_leading_kernel<true><<<grid, 256, 0, s>>>(y, c->f, c->out, c->j, c->k, c->alpha,
                                                         c->scale)
       : half_leading_kernel<false><<<grid, 256, 0, s>>>(y, c->f, c->out, c->j, c->k, c->alpha,
                                                          c->scale);
  } else {
    const unsigned blocks = unsigned((c->r * c->j + 7) / 8);
    bf ? half_trailing_kernel<true><<<blocks, 256, 0, s>>>(y, c->f, c->out, c->r, c->j, c->k,
                                                           c->alpha, c->scale)
       : half_trailing_kernel<false><<<blocks, 256, 0, s>>>(y, c->f, c->out, c->r, c->j, c->k,
                                                            c->alpha, c->scale);
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : kl::fail(KL_ERR_CUDA, cudaGetErrorString(e));
}
