// Shared by the tensor-core kernels of every storage type (float32 under 3xTF32, float16,
// bfloat16): the line tables of a tile, and the copy-out of the last step's results, staged in
// shared memory as [k][line] in 16-byte chunks of V = 16 / sizeof(E) lines (permuted by
// phys_chunk_tc), to y with alpha and beta, in 16-byte runs where lines are consecutive in y.
#ifndef KRONLINALG_KRON_CUDA_TC_CUH
#define KRONLINALG_KRON_CUDA_TC_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kron_cuda_common.cuh"

namespace kl {
namespace cu {

// Line tables of a tile: every line's offsets (xoff, yoff) and, per chunk of V lines, the
// offset of its first line where the V lines are adjacent and V-aligned in y (ych) and, with
// XCH, in x (xch); else kNoLine.  The chunked copies then read one table entry per chunk
// (lanes reading entries V lines apart would hit the same banks).  Whole warps run the loop: a
// chunk's lines are V lanes of one warp.
template <int V, bool XCH>
__device__ __forceinline__ void fill_lines_chunked(const PassP &p, const Tile &t, int64_t *xoff,
                                                   int64_t *yoff, int64_t *xch, int64_t *ych) {
  constexpr unsigned kAll = 0xffffffffu, kChunk = (1u << V) - 1;
  const int lane = threadIdx.x & 31, iv = lane & (V - 1);
  for (int l0 = threadIdx.x & ~31; l0 < p.L; l0 += blockDim.x) {
    const int l = l0 + lane;
    int64_t xo = kNoLine, yo = kNoLine;
    if (l < p.L) {
      line_offsets(p, t, l, &xo, &yo);
      xoff[l] = xo;
      yoff[l] = yo;
    }
    const int64_t y0 = __shfl_sync(kAll, yo, lane & ~(V - 1));
    const bool yv = p.y_vec && yo != kNoLine && yo == y0 + iv && y0 % V == 0;
    const unsigned yb = __ballot_sync(kAll, yv);
    int64_t x0 = kNoLine;
    unsigned xb = 0;
    if constexpr (XCH) {
      x0 = __shfl_sync(kAll, xo, lane & ~(V - 1));
      xb = __ballot_sync(kAll, xo != kNoLine && xo == x0 + iv && x0 % V == 0);
    }
    if (iv == 0 && l < p.L) {
      if constexpr (XCH) xch[l / V] = ((xb >> lane) & kChunk) == kChunk ? x0 : kNoLine;
      ych[l / V] = ((yb >> lane) & kChunk) == kChunk ? y0 : kNoLine;
    }
  }
}

// float conversions of a stored element
template <class E>
struct ElemF;
template <>
struct ElemF<float> {
  static __device__ __forceinline__ float tof(float v) { return v; }
  static __device__ __forceinline__ float fromf(float v) { return v; }
};
template <>
struct ElemF<__half> {
  static __device__ __forceinline__ float tof(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half fromf(float v) { return __float2half_rn(v); }
};
template <>
struct ElemF<__nv_bfloat16> {
  static __device__ __forceinline__ float tof(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 fromf(float v) { return __float2bfloat16_rn(v); }
};

// d[0..V-1] = alpha * h + beta * d (beta == 0: d is not read), one 16-byte load and store.
template <class E>
__device__ __forceinline__ void store_chunk_scaled(E *d, const E *h, float alpha, float beta) {
  constexpr int V = 16 / int(sizeof(E));
  uint4 o = make_uint4(0, 0, 0, 0);
  if (beta != 0.f) o = *reinterpret_cast<const uint4 *>(d);
  const E *oh = reinterpret_cast<const E *>(&o);
  uint4 w;
  E *wh = reinterpret_cast<E *>(&w);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    float f = alpha * ElemF<E>::tof(h[i]);
    if (beta != 0.f) f += beta * ElemF<E>::tof(oh[i]);
    wh[i] = ElemF<E>::fromf(f);
  }
  *reinterpret_cast<uint4 *>(d) = w;
}

template <class E>
__device__ __forceinline__ void store_one_scaled(E *d, E v, float alpha, float beta) {
  float f = alpha * ElemF<E>::tof(v);
  if (beta != 0.f) f += beta * ElemF<E>::tof(*d);
  *d = ElemF<E>::fromf(f);
}

// stage [k][line] -> y; yoff: every line's output offset, ych: per chunk of V lines the offset
// of its first line where the V are adjacent and 16-byte aligned in y, else kNoLine.
template <class E>
__device__ void copy_out_staged(const PassP &p, const E *stage, const int64_t *yoff,
                                const int64_t *ych) {
  constexpr int V = 16 / int(sizeof(E)), LV = V == 8 ? 3 : 2;
  static_assert(V == 1 << LV, "4 or 8 elements per chunk");
  E *y = static_cast<E *>(p.y);
  const float alpha = float(p.alpha), beta = float(p.beta);
  const int L = p.L, Lc = L >> LV;
  if (p.rows_fast || p.S > 1) {
    const int total = p.Bout * Lc;
    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
      const int k = int(p.div_l.div(uint32_t(idx) << LV));
      const int c = idx - k * Lc;
      const uint4 v = *reinterpret_cast<const uint4 *>(stage + phys_chunk_tc(k * Lc + c) * V);
      const E *h = reinterpret_cast<const E *>(&v);
      const int64_t koff = int64_t(k) * p.S * p.yes;
      const int64_t y0 = ych[c];
      if (y0 != kNoLine) {
        store_chunk_scaled<E>(y + y0 + koff, h, alpha, beta);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const int64_t yo = yoff[c * V + i];
          if (yo != kNoLine) store_one_scaled<E>(y + yo + koff, h[i], alpha, beta);
        }
      }
    }
  } else if (V == 4 && p.y_rowvec) {
    // float (3xTF32): a thread reads one chunk (V lines at one k, one 16-byte load) and stores
    // its V values; lanes run along k, so each store of a warp writes 128 contiguous bytes of
    // one line.  (Gathering V k of one line instead, as below, costs V permuted 4-byte loads
    // per 16-byte store: 1-2 % slower on the H100 for 1024 x 32^4, 16 x 32^5, 1024 x 64^3.)
    const int total = p.Bout * Lc;
    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
      const int lc = int(p.div_bout.div(uint32_t(idx)));
      const int k = idx - lc * p.Bout;
      const uint4 v = *reinterpret_cast<const uint4 *>(stage + phys_chunk_tc(k * Lc + lc) * V);
      const E *h = reinterpret_cast<const E *>(&v);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int64_t yo = yoff[lc * V + i];
        if (yo != kNoLine) store_one_scaled<E>(y + yo + k, h[i], alpha, beta);
      }
    }
  } else if (p.y_rowvec) {
    // one instance per row (S == 1), rows 16-byte aligned: a thread gathers V consecutive k of
    // one line (stride L in the staging) into one 16-byte store; lane pairs take the two halves
    // of a 32-byte sector, then lines
    const int kc_n = p.Bout >> LV, wl = (kc_n & 1) ? 0 : 1;
    const int total = kc_n * L;
    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
      const int rest = idx >> wl;
      const int kh = int(p.div_l.div(uint32_t(rest)));
      const int l = rest - kh * L;
      const int kc = (kh << wl) + (idx & wl);
      const int64_t yo = yoff[l];
      if (yo == kNoLine) continue;
      const int c0 = kc * L + (l >> LV);  // chunk of (k = V kc, l)
      uint4 v;
      E *vh = reinterpret_cast<E *>(&v);
#pragma unroll
      for (int i = 0; i < V; ++i) vh[i] = stage[phys_chunk_tc(c0 + i * Lc) * V + (l & (V - 1))];
      store_chunk_scaled<E>(y + yo + (kc << LV), vh, alpha, beta);
    }
  } else {
    // one instance per row (S == 1): lanes along k, which is contiguous in y
    const int total = p.Bout * L;
    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
      const int l = int(p.div_bout.div(uint32_t(idx)));
      const int k = idx - l * p.Bout;
      const int64_t yo = yoff[l];
      if (yo == kNoLine) continue;
      const int e = k * L + l;
      const E v = stage[phys_chunk_tc(e >> LV) * V + (e & (V - 1))];
      store_one_scaled<E>(y + yo + int64_t(k) * p.yes, v, alpha, beta);
    }
  }
}

}  // namespace cu
}  // namespace kl

#endif
