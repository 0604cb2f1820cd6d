// The one-pass MTTKRP of a tensor's first or last mode (tensor.h): the tensor streams through a
// four-deep cp.async ring once, the Khatri-Rao rows W[p, r] = U[a, r] V[b, r] are formed in
// registers from the staged rows of V and the (at most two) rows of U of each block of 32 p,
// and mma.sync m16n8k8 TF32 accumulates a 128 x 64 output tile per thread block in float32.
//
// Why not cuBLAS: the GEMM over the tensor has 64 output rows and K = 640; cuBLAS runs it at
// 2.0-2.3 TB/s on an H100 and must write the (R, I*J) intermediate that a second batched
// product reads again.  Here the sum over p is split over enough blocks to fill the GPU once;
// each writes its 128 x 64 partial and a second launch adds the partials in a fixed order.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "cuda_device.hpp"
#include "cuda_ptx.cuh"
#include "tensor.h"
#include "tensor_internal.hpp"

namespace {

using kl::cu::cp_async_16;
using kl::cu::cp_async_commit;
using kl::cu::cp_async_wait;
using kl::cu::mma_tf32;

constexpr int BM = 128;      // output rows (the mode's index) per block
constexpr int BK = 32;       // p per pipeline stage
constexpr int RP = 64;       // the rank, padded
constexpr int NS = 4;        // pipeline stages
constexpr int LDV = RP + 8;  // V's staged rows: row t of a fragment lands on banks 8t..8t+7

// WARPS_M warps along the 128 output rows, two along the 64 ranks: 2 (4 warps, 64 x 32 each)
// or 4 (8 warps, 32 x 32 each: more warps to hide the shared-memory and MMA latencies)
template <bool LAST, int WARPS_M>
struct Tile {
  static constexpr int THREADS = 64 * WARPS_M;
  static constexpr int MT = BM / 16 / WARPS_M;  // m16 tiles a warp
  // LAST: X staged as [p][m] (a fragment's rows t on banks 8t + g); else [m][p] (4g + t)
  static constexpr int LDX = LAST ? BM + 8 : BK + 4;
  static constexpr int X_FLOATS = LAST ? BK * LDX : BM * LDX;
  static constexpr int V_OFF = X_FLOATS;
  static constexpr int U_OFF = V_OFF + BK * LDV;
  static constexpr int STAGE = U_OFF + 2 * RP;
  static constexpr size_t SMEM = size_t(NS) * STAGE * sizeof(float);
};

struct Args {
  const float *x, *u, *v;
  float *part;
  int64_t m, red, ia, ib, stages, mpad;
  int32_t splits;
};

__device__ __forceinline__ uint32_t tf32(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
}

// Where a stage of 32 p starts: p0, and p0 = a0 * ib + b0 (ib >= 32: the next stage is at
// most one wrap of b away, so the walk needs no division after its start)
struct Walk {
  int64_t p0, a0, b0;
  __device__ void start(int64_t s, int64_t ib) {
    p0 = s * BK;
    a0 = p0 / ib;
    b0 = p0 - a0 * ib;
  }
  __device__ __forceinline__ void next(int64_t ib) {
    p0 += BK;
    b0 += BK;
    if (b0 >= ib) {
      b0 -= ib;
      ++a0;
    }
  }
};

template <bool LAST, int WARPS_M>
__device__ __forceinline__ void load_stage(const Args &a, float *st, const Walk &w,
                                           int64_t mbase, int tid) {
  using T = Tile<LAST, WARPS_M>;
  if (LAST) {  // 32 rows p of 128 floats: 32 chunks of 16 bytes a row
#pragma unroll
    for (int c = tid; c < BK * (BM / 4); c += T::THREADS) {
      const int row = c / (BM / 4), col = (c % (BM / 4)) * 4;
      const int64_t p = w.p0 + row, k = mbase + col;
      const bool ok = p < a.red && k < a.m;
      cp_async_16(st + row * T::LDX + col, ok ? a.x + p * a.m + k : a.x, ok);
    }
  } else {  // 128 rows i of 32 floats: 8 chunks a row
#pragma unroll
    for (int c = tid; c < BM * (BK / 4); c += T::THREADS) {
      const int row = c / (BK / 4), col = (c % (BK / 4)) * 4;
      const int64_t i = mbase + row, p = w.p0 + col;
      const bool ok = i < a.m && p < a.red;
      cp_async_16(st + row * T::LDX + col, ok ? a.x + i * a.red + p : a.x, ok);
    }
  }
  // V's rows b = b0 + row, wrapped once at ib
#pragma unroll
  for (int c = tid; c < BK * (RP / 4); c += T::THREADS) {
    const int row = c / (RP / 4), col = (c % (RP / 4)) * 4;
    int64_t b = w.b0 + row;
    if (b >= a.ib) b -= a.ib;
    const bool ok = w.p0 + row < a.red;
    cp_async_16(st + T::V_OFF + row * LDV + col, ok ? a.v + b * RP + col : a.v, ok);
  }
  // U's rows a0 and a0 + 1
  if (tid < 2 * (RP / 4)) {
    const int which = tid / (RP / 4), col = (tid % (RP / 4)) * 4;
    const int64_t ua = w.a0 + which;
    const bool ok = ua < a.ia;
    cp_async_16(st + T::U_OFF + which * RP + col, ok ? a.u + ua * RP + col : a.u, ok);
  }
}

template <bool LAST, int WARPS_M>
__global__ void __launch_bounds__(Tile<LAST, WARPS_M>::THREADS, 2)
    mttkrp_kernel(Args a) {
  using T = Tile<LAST, WARPS_M>;
  constexpr int MT = T::MT;
  KL_DYNAMIC_SMEM(smem_raw);
  float *smem = reinterpret_cast<float *>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp % WARPS_M) * (16 * MT), wn = (warp / WARPS_M) * 32;
  const int64_t mbase = int64_t(blockIdx.x) * BM;
  const int split = blockIdx.y;
  const int64_t s_begin = a.stages * split / a.splits;
  const int n_it = int(a.stages * (split + 1) / a.splits - s_begin);

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
      load_stage<LAST, WARPS_M>(a, smem + s * T::STAGE, ld, mbase, tid);
      ld.next(a.ib);
    }
    cp_async_commit();
  }
  for (int it = 0; it < n_it; ++it) {
    cp_async_wait<NS - 2>();
    __syncthreads();  // stage `it` landed for every thread; slot (it - 1) % NS is free
    if (it + NS - 1 < n_it) {
      load_stage<LAST, WARPS_M>(a, smem + ((it + NS - 1) % NS) * T::STAGE, ld, mbase, tid);
      ld.next(a.ib);
    }
    cp_async_commit();
    const float *xs = smem + (it % NS) * T::STAGE;
    const float *vs = xs + T::V_OFF;
    const float *us = xs + T::U_OFF;
    const int64_t qb64 = a.ib - cw.b0;  // rows >= qb take U's second row
    const int qb = qb64 > BK ? BK : int(qb64);
    cw.next(a.ib);
    float u_lo[4], u_hi[4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      u_lo[nt] = us[wn + nt * 8 + g];
      u_hi[nt] = us[RP + wn + nt * 8 + g];
    }
#pragma unroll
    for (int ks = 0; ks < BK / 8; ++ks) {
      const int r0 = ks * 8 + t, r1 = r0 + 4;
      uint32_t bf[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = wn + nt * 8 + g;
        bf[nt][0] = tf32(vs[r0 * LDV + col] * (r0 >= qb ? u_hi[nt] : u_lo[nt]));
        bf[nt][1] = tf32(vs[r1 * LDV + col] * (r1 >= qb ? u_hi[nt] : u_lo[nt]));
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int m0 = wm + mt * 16 + g;
        uint32_t af[4];
        if (LAST) {  // A[m][p] = X[p][m]
          af[0] = tf32(xs[r0 * T::LDX + m0]);
          af[1] = tf32(xs[r0 * T::LDX + m0 + 8]);
          af[2] = tf32(xs[r1 * T::LDX + m0]);
          af[3] = tf32(xs[r1 * T::LDX + m0 + 8]);
        } else {  // A[m][p] = X[m][p]
          af[0] = tf32(xs[m0 * T::LDX + r0]);
          af[1] = tf32(xs[(m0 + 8) * T::LDX + r0]);
          af[2] = tf32(xs[m0 * T::LDX + r1]);
          af[3] = tf32(xs[(m0 + 8) * T::LDX + r1]);
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_tf32(acc[mt][nt], af, bf[nt][0], bf[nt][1]);
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

// out[r, i] = alpha * sum over the splits of part[s][r][i], in split order
__global__ void mttkrp_reduce_kernel(const float *part, int32_t splits, int64_t mpad, int64_t m,
                                     int32_t rank, float *out, int64_t os_r, int64_t os_m,
                                     float alpha, const float *dscale) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(rank) * m) return;
  const int64_t r = idx / m, i = idx % m;
  const float *p = part + r * mpad + i;
  float s = 0.f;
  for (int32_t k = 0; k < splits; ++k) s += p[int64_t(k) * RP * mpad];
  out[r * os_r + i * os_m] = (dscale ? alpha * *dscale : alpha) * s;
}

template <bool LAST, int WARPS_M>
cudaError_t blocks_per_sm(int dev, int *out) {
  // the shared-memory opt-in is a per-device attribute of the kernel: set once per device
  using T = Tile<LAST, WARPS_M>;
  static std::mutex mu;
  static std::map<int, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it == cache.end()) {
    cudaError_t e = cudaFuncSetAttribute(mttkrp_kernel<LAST, WARPS_M>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(T::SMEM));
    if (e != cudaSuccess) return e;
    int n = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mttkrp_kernel<LAST, WARPS_M>,
                                                      T::THREADS, T::SMEM);
    if (e != cudaSuccess) return e;
    it = cache.emplace(dev, n > 0 ? n : 1).first;
  }
  *out = it->second;
  return cudaSuccess;
}

cudaError_t blocks_per_sm(bool last, int variant, int dev, int *out) {
  if (last) return variant ? blocks_per_sm<true, 4>(dev, out) : blocks_per_sm<true, 2>(dev, out);
  return variant ? blocks_per_sm<false, 4>(dev, out) : blocks_per_sm<false, 2>(dev, out);
}

template <bool LAST, int WARPS_M>
void launch(const Args &a, dim3 grid, cudaStream_t s) {
  using T = Tile<LAST, WARPS_M>;
  mttkrp_kernel<LAST, WARPS_M><<<grid, T::THREADS, T::SMEM, s>>>(a);
}

int cuda_fail(cudaError_t e) { return kl::fail(KL_ERR_CUDA, cudaGetErrorString(e)); }

}  // namespace

extern "C" int kl_tensor_mttkrp_plan(int32_t last, int32_t variant, int32_t dtype, int64_t m,
                                     int64_t red, int64_t ib, int32_t *splits, int64_t *mpad,
                                     int32_t *per_sm) {
  if (m <= 0 || red <= 0 || ib <= 0 || red % ib)
    return kl::fail(KL_ERR_INVALID, "tensor mttkrp: empty problem or inner size not dividing");
  if (dtype < 0 || dtype > 2 || (dtype && last) || variant < 0 || variant > (dtype ? 2 : 1))
    return kl::fail(KL_ERR_INVALID, "tensor mttkrp: half storage runs the first mode only; "
                                    "variants 0-1 (float32), 0-2 (half)");
  kl::DeviceInfo dev;
  cudaError_t e = kl::query_device(&dev);
  if (e != cudaSuccess) return kl::fail(KL_ERR_NO_DEVICE, cudaGetErrorString(e));
  int blocks = 1;
  e = dtype ? kl::tensor::half_blocks_per_sm(dtype, variant, dev.id, &blocks)
            : blocks_per_sm(last, variant, dev.id, &blocks);
  if (e != cudaSuccess) return cuda_fail(e);
  const int bk = dtype ? kl::tensor::HALF_BK : BK;
  const int bm = dtype ? kl::tensor::half_rows(variant) : BM;
  const int64_t tiles = (m + bm - 1) / bm, stages = (red + bk - 1) / bk;
  int64_t s = int64_t(dev.sms) * blocks / tiles;  // one wave of blocks
  if (dtype && variant == 2) {  // whole chunks of b times ranges of a (at most ia of them)
    const int64_t nb = (ib + bk - 1) / bk, ia = red / ib;
    int64_t sa = s / nb;
    if (sa < 1) sa = 1;
    if (sa > ia) sa = ia;
    if (sa * nb > 65535) sa = 65535 / nb;
    s = sa * nb;
  }
  if (s < 1) s = 1;
  if (s > stages && !(dtype && variant == 2)) s = stages;
  if (s > 65535) s = 65535;
  *splits = int32_t(s);
  *mpad = tiles * bm;
  *per_sm = blocks;
  return KL_OK;
}

extern "C" int kl_tensor_mttkrp_cuda(const kl_tensor_mttkrp *c, void *stream) {
  if (c->rank < 1 || c->rank > KL_TENSOR_MAX_RANK || c->ib < KL_TENSOR_MIN_INNER ||
      c->ia < 1 || c->m < 1 || c->red != c->ia * c->ib || c->splits < 1 || c->splits > 65535)
    return kl::fail(KL_ERR_INVALID, "tensor mttkrp: rank above 64, inner size below 32 or "
                                    "inconsistent sizes");
  if (c->dtype < 0 || c->dtype > 2 || (c->dtype && (c->last || c->ib < KL_TENSOR_MIN_INNER_HALF)) ||
      c->variant < 0 || c->variant > (c->dtype ? 2 : 1))
    return kl::fail(KL_ERR_INVALID, "tensor mttkrp: half storage runs the first mode only, "
                                    "with an inner size of at least 64; variants 0-1 "
                                    "(float32), 0-2 (half)");
  if (c->dtype && c->variant == 2 &&
      (c->ib % 8 || c->splits % ((c->ib + 63) / 64) || c->splits / ((c->ib + 63) / 64) > c->ia))
    return kl::fail(KL_ERR_INVALID, "tensor mttkrp: half variant 2 needs an inner size that is "
                                    "a multiple of 8 and whole chunks of it per split (the plan)");
  if (c->gram_v && (!c->dtype || !c->scale_out || c->dscale))
    return kl::fail(KL_ERR_INVALID, "tensor mttkrp: the Gram scale runs on half storage, with "
                                    "scale_out and without dscale");
  const int64_t row = c->last ? c->m : c->red;
  if (row % (c->dtype ? 8 : 4) ||
      (reinterpret_cast<uintptr_t>(c->x) | reinterpret_cast<uintptr_t>(c->u) |
       reinterpret_cast<uintptr_t>(c->v)) % 16)
    return kl::fail(KL_ERR_INVALID, "tensor mttkrp: rows of the tensor's view must be 16-byte "
                                    "multiples and every operand 16-byte aligned");
  const int bm = c->dtype ? kl::tensor::half_rows(c->variant) : BM;
  const int64_t tiles = (c->m + bm - 1) / bm;
  const int bk = c->dtype ? kl::tensor::HALF_BK : BK;
  const int64_t stages = (c->red + bk - 1) / bk;
  if (tiles > 0x7fffffff || stages / c->splits > 0x3fffffff)
    return kl::fail(KL_ERR_INVALID, "tensor mttkrp: problem too large for one launch");
  kl::DeviceInfo dev;
  cudaError_t e = kl::query_device(&dev);
  if (e != cudaSuccess) return kl::fail(KL_ERR_NO_DEVICE, cudaGetErrorString(e));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (c->dtype) {
    if ((e = kl::tensor::launch_half_mttkrp(c, stages, tiles * bm, tiles, dev.id, s)) !=
        cudaSuccess)
      return cuda_fail(e);
  } else {
    int blocks = 1;
    if ((e = blocks_per_sm(c->last, c->variant, dev.id, &blocks)) != cudaSuccess)
      return cuda_fail(e);
    Args a{static_cast<const float *>(c->x), c->u, c->v, c->part, c->m, c->red, c->ia, c->ib,
           stages, tiles * BM, c->splits};
    dim3 grid(unsigned(tiles), unsigned(c->splits));
    if (c->last)
      c->variant ? launch<true, 4>(a, grid, s) : launch<true, 2>(a, grid, s);
    else
      c->variant ? launch<false, 4>(a, grid, s) : launch<false, 2>(a, grid, s);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_fail(e);
  }
  const int64_t n = int64_t(c->rank) * c->m;
  mttkrp_reduce_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(
      c->part, c->splits, tiles * bm, c->m, c->rank, c->out, c->out_stride_r, c->out_stride_m,
      c->alpha, c->gram_v ? c->scale_out : c->dscale);
  if ((e = cudaGetLastError()) != cudaSuccess) return cuda_fail(e);
  return KL_OK;
}

extern "C" int kl_tensor_cuda_check(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    return kl::fail(KL_ERR_NO_DEVICE, e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
  return KL_OK;
}
