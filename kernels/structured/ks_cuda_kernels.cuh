// CUDA Kronecker-sparse kernels: one launch per factor, one thread block per tile of
// TN batch rows × TK output indices k × TJ consecutive j of one slab i.  Over its l loop a block
// reads its X tile once and writes its Y tile once; TJ consecutive j make the global accesses
// contiguous runs (j is the fastest axis of X and Y in both layouts apart from the batch).
//
//   main loop:  global → registers (16-byte loads where aligned) → shared stage s^1 while the
//               block computes on stage s (double buffer, one barrier per l chunk)
//   float32:    CUDA cores, an 8×8 register tile per thread, operands [l][j][n|k] in shared
//   half types: mma.sync m16n8k16 (float32 accumulation), operands [j][n|k][l] in shared, an
//               epilogue through shared memory so Y is written in contiguous runs
//
// Tile shapes are template parameters; ks_cuda.cu picks one per pattern (kl::ks::pick_*).
#ifndef KRONLINALG_KS_CUDA_KERNELS_CUH
#define KRONLINALG_KS_CUDA_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ks.h"

namespace kl {
namespace ks {

constexpr int kThreads = 256;

struct Params {
  int64_t a, b, c, d, B;
  const void *K;  // contiguous (a, b, c, d)
  const void *X;
  int64_t x_ld;
  void *Y;
  int64_t y_ld;
  int64_t nN, nK, nJ;  // tiles along the batch, k and j
};

struct TileId {
  int64_t i, n0, k0, j0;
};

// k tiles vary fastest, so the blocks that share an X tile run together (it stays in L2)
template <int TN, int TK, int TJ>
__device__ __forceinline__ TileId tile_id(const Params &p) {
  int64_t f = blockIdx.x;
  TileId t;
  t.k0 = (f % p.nK) * TK;
  f /= p.nK;
  t.n0 = (f % p.nN) * TN;
  f /= p.nN;
  t.j0 = (f % p.nJ) * TJ;
  t.i = f / p.nJ;
  return t;
}

template <class T>
struct Elem;
template <>
struct Elem<float> {
  __device__ static float to_f(float v) { return v; }
  __device__ static float from_f(float v) { return v; }
};
template <>
struct Elem<__half> {
  __device__ static float to_f(__half v) { return __half2float(v); }
  __device__ static __half from_f(float v) { return __float2half_rn(v); }
};
template <>
struct Elem<__nv_bfloat16> {
  __device__ static float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
};

template <class T>
__device__ __forceinline__ T zero() {
  return Elem<T>::from_f(0.f);
}

// ---------------------------------------------------------------------------------------------
// Tile loaders: global → registers in groups of V = 16/sizeof(T) elements taken in global-memory
// order (consecutive threads read consecutive 16 bytes), registers → shared memory through an
// index function of the tile coordinates.  A group that is contiguous, in bounds and 16-byte
// aligned is one vector load; any other goes element by element through a function that is
// never inlined, so none of its address arithmetic is hoisted into the main loop's registers.

template <class T>
union Pack {
  uint4 u;
  T e[16 / sizeof(T)];
};

// (r, l, j) at base[r·rs + l·d + j], valid for r < rmax, l < lmax, j < jmax: the group walks
// (l, j) of one row r (tiles are built so a group never spans two rows).
template <class T, int TL, int TJ>
__device__ __noinline__ uint4 gather_rows(const T *base, int64_t rs, int64_t d, int r, int l,
                                          int j, int rmax, int lmax, int jmax) {
  Pack<T> v;
  for (int e = 0; e < int(16 / sizeof(T)); ++e) {
    const int x = l * TJ + j + e, le = x / TJ, je = x % TJ;
    v.e[e] = r < rmax && le < lmax && je < jmax ? base[r * rs + le * d + je] : zero<T>();
  }
  return v.u;
}

// (n, l, j) at base[(l·d + j)·ld + n], valid for n < nmax (l, j checked by the caller): a run
// of one row of a batch_last X.
template <class T>
__device__ __noinline__ uint4 gather_run(const T *src, int avail) {
  Pack<T> v;
  for (int e = 0; e < int(16 / sizeof(T)); ++e) v.e[e] = e < avail ? src[e] : zero<T>();
  return v.u;
}

// A tile of R rows × TL × TJ whose element (r, l, j) is base[r·rs + l·d + j]: the batch_first X
// (rows = batch rows) and K (rows = k, rs = c·d).  Groups stay in one row because TL·TJ % V == 0.
template <class T, int R, int TL, int TJ, int NT = kThreads>
struct RowLoader {
  static constexpr int V = 16 / sizeof(T);
  static constexpr int E = R * TL * TJ;
  static constexpr int G = (E / V + NT - 1) / NT;
  static_assert(TL * TJ % V == 0, "a vector group must stay in one row");
  uint4 reg[G];

  __device__ __forceinline__ void load(const T *base, int64_t rs, int64_t d, int rmax, int lmax,
                                       int jmax) {
    const bool contiguous = TJ % V == 0 || d == TJ;
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int q = threadIdx.x + s * NT;
      if (q >= E / V) break;
      const int r = q * V / (TL * TJ), x = q * V % (TL * TJ);
      const int l = x / TJ, j = x % TJ, xl = x + V - 1;
      const T *src = base + r * rs + l * d + j;
      if (contiguous && r < rmax && xl / TJ < lmax && (TJ % V == 0 ? j + V - 1 : xl % TJ) < jmax &&
          (reinterpret_cast<uintptr_t>(src) & 15) == 0)
        reg[s] = __ldg(reinterpret_cast<const uint4 *>(src));
      else
        reg[s] = gather_rows<T, TL, TJ>(base, rs, d, r, l, j, rmax, lmax, jmax);
    }
  }

  template <class SmemIdx>
  __device__ __forceinline__ void store(T *smem, SmemIdx idx) const {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int q = threadIdx.x + s * NT;
      if (q >= E / V) break;
      const T *v = reinterpret_cast<const T *>(&reg[s]);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int x = q * V % (TL * TJ) + e;
        smem[idx(q * V / (TL * TJ), x / TJ, x % TJ)] = v[e];
      }
    }
  }
};

// The batch_last X tile: element (n, l, j) at base[(l·d + j)·ld + n]; groups run along n.
template <class T, int TN, int TL, int TJ, int NT = kThreads>
struct RunLoader {
  static constexpr int V = 16 / sizeof(T);
  static constexpr int E = TN * TL * TJ;
  static constexpr int G = (E / V + NT - 1) / NT;
  static_assert(TN % V == 0, "a vector group must stay in one row");
  uint4 reg[G];

  __device__ __forceinline__ void load(const T *base, int64_t ld, int64_t d, int nmax, int lmax,
                                       int jmax) {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int q = threadIdx.x + s * NT;
      if (q >= E / V) break;
      const int n = q * V % TN, row = q * V / TN, l = row / TJ, j = row % TJ;
      const T *src = base + (l * d + j) * ld + n;
      const bool rok = l < lmax && j < jmax;
      if (rok && n + V <= nmax && (reinterpret_cast<uintptr_t>(src) & 15) == 0)
        reg[s] = __ldg(reinterpret_cast<const uint4 *>(src));
      else
        reg[s] = gather_run<T>(src, rok ? nmax - n : 0);
    }
  }

  template <class SmemIdx>
  __device__ __forceinline__ void store(T *smem, SmemIdx idx) const {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int q = threadIdx.x + s * NT;
      if (q >= E / V) break;
      const T *v = reinterpret_cast<const T *>(&reg[s]);
      const int n = q * V % TN, row = q * V / TN;
#pragma unroll
      for (int e = 0; e < V; ++e) smem[idx(n + e, row / TJ, row % TJ)] = v[e];
    }
  }
};

// Both operands of one l chunk: X (batch_first or batch_last) and K, loaded together.
template <class T, int TN, int TK, int TL, int TJ, bool BF, int NT = kThreads>
struct Operands {
  typename std::conditional<BF, RowLoader<T, TN, TL, TJ, NT>, RunLoader<T, TN, TL, TJ, NT>>::type x;
  RowLoader<T, TK, TL, TJ, NT> k;

  __device__ __forceinline__ void load(const Params &p, const TileId &t, int64_t l0) {
    const int lmax = int(p.c - l0 < TL ? p.c - l0 : TL);
    const int jmax = int(p.d - t.j0 < TJ ? p.d - t.j0 : TJ);
    const int nmax = int(p.B - t.n0 < TN ? p.B - t.n0 : TN);
    const int kmax = int(p.b - t.k0 < TK ? p.b - t.k0 : TK);
    const T *X = static_cast<const T *>(p.X);
    if (BF)
      x.load(X + t.n0 * p.x_ld + (t.i * p.c + l0) * p.d + t.j0, p.x_ld, p.d, nmax, lmax, jmax);
    else
      x.load(X + ((t.i * p.c + l0) * p.d + t.j0) * p.x_ld + t.n0, p.x_ld, p.d, nmax, lmax, jmax);
    const T *K = static_cast<const T *>(p.K) + ((t.i * p.b + t.k0) * p.c + l0) * p.d + t.j0;
    k.load(K, p.c * p.d, p.d, kmax, lmax, jmax);
  }
};

// ---------------------------------------------------------------------------------------------
// float32 on CUDA cores.  NT threads (TN/8)·(TK/8)·TJ, thread = (jj, tk, tn) with jj fastest for
// batch_first (Y's j runs are contiguous) and tn fastest for batch_last (Y's batch runs are); it
// owns n ∈ {4tn..4tn+3, TN/2+4tn..} × k ∈ {4tk.., TK/2+4tk..} of one j.  TL l values per stage
// (one barrier per stage).  Shared rows are padded to 4 mod 32 words: the 16-byte reads of 8
// consecutive rows hit distinct banks.  When TJ == d (the whole-d tiles for d = 3, 6) the
// (l, j) span of one X row or K row is contiguous, so it loads in 16-byte vectors whatever d is.

// dynamic shared memory (the emulator, KL_KS_EMULATE, supplies its own)
#ifndef KL_KS_EMULATE
__device__ __forceinline__ unsigned char *dynamic_smem() {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  return smem_raw;
}
#endif

template <int TN, int TK, int TJ, int TL, int NT>
struct F32Shape {
  static constexpr int SN = TN + 4, SK = TK + 4;
  static constexpr int XS = TL * TJ * SN, KS = TL * TJ * SK;
  static_assert((TN / 8) * (TK / 8) * TJ == NT, "one 8x8 tile per thread");
  static_assert(TN % 8 == 0 && TK % 8 == 0 && NT % 32 == 0, "whole warps, 8x8 thread tiles");
  static constexpr int smem_bytes() { return 2 * (XS + KS) * 4; }
};

template <int TN, int TK, int TJ, int TL, int NT, bool BF>
__global__ void __launch_bounds__(NT, NT <= 256 ? 2 : 1) ks_f32(Params p) {
  typedef F32Shape<TN, TK, TJ, TL, NT> S;
  constexpr int SN = S::SN, SK = S::SK, XS = S::XS, KS = S::KS;
  float *smem = reinterpret_cast<float *>(dynamic_smem());

  const TileId t = tile_id<TN, TK, TJ>(p);
  const int tid = threadIdx.x;
  int jj, tk, tn;
  if (BF) {
    jj = tid % TJ;
    tk = (tid / TJ) % (TK / 8);
    tn = tid / (TJ * (TK / 8));
  } else {
    tn = tid % (TN / 8);
    tk = (tid / (TN / 8)) % (TK / 8);
    jj = tid / ((TN / 8) * (TK / 8));
  }

  Operands<float, TN, TK, TL, TJ, BF, NT> ops;
  auto xidx = [](int n, int l, int j) { return (l * TJ + j) * SN + n; };
  auto kidx = [](int k, int l, int j) { return (l * TJ + j) * SK + k; };

  float acc[8][8];
#pragma unroll
  for (int u = 0; u < 8; ++u)
#pragma unroll
    for (int v = 0; v < 8; ++v) acc[u][v] = 0.f;

  const int64_t nl = (p.c + TL - 1) / TL;
  ops.load(p, t, 0);
  ops.x.store(smem, xidx);
  ops.k.store(smem + XS, kidx);
  __syncthreads();
  for (int64_t it = 0; it < nl; ++it) {
    const int stage = int(it & 1);
    if (it + 1 < nl) ops.load(p, t, (it + 1) * TL);  // in flight while this chunk is computed
    const float *xs = smem + stage * (XS + KS) + jj * SN + 4 * tn;
    const float *kss = smem + stage * (XS + KS) + XS + jj * SK + 4 * tk;
#pragma unroll
    for (int l = 0; l < TL; ++l) {
      const float *xr = xs + l * TJ * SN;
      const float *kr = kss + l * TJ * SK;
      const float4 x0 = *reinterpret_cast<const float4 *>(xr);
      const float4 x1 = *reinterpret_cast<const float4 *>(xr + TN / 2);
      const float4 k0 = *reinterpret_cast<const float4 *>(kr);
      const float4 k1 = *reinterpret_cast<const float4 *>(kr + TK / 2);
      const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      const float kv[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
      for (int u = 0; u < 8; ++u)
#pragma unroll
        for (int v = 0; v < 8; ++v) acc[u][v] = fmaf(xv[u], kv[v], acc[u][v]);
    }
    if (it + 1 < nl) {
      float *next = smem + (stage ^ 1) * (XS + KS);
      ops.x.store(next, xidx);
      ops.k.store(next + XS, kidx);
    }
    __syncthreads();
  }

  // epilogue: four consecutive n (batch_last) or k (batch_first, d == 1) are one 16-byte store
  float *Y = static_cast<float *>(p.Y);
  const int64_t j = t.j0 + jj;
  if (j >= p.d) return;
#pragma unroll
  for (int u = 0; u < 8; ++u) {
#pragma unroll
    for (int v = 0; v < 8; v += 4) {
      const int64_t n0 = t.n0 + (u < 4 ? 4 * tn + u : TN / 2 + 4 * tn + u - 4);
      const int64_t k0 = t.k0 + (v < 4 ? 4 * tk : TK / 2 + 4 * tk);
      if (BF) {
        if (n0 >= p.B) continue;
        float *dst = Y + n0 * p.y_ld + (t.i * p.b + k0) * p.d + j;
        if (p.d == 1 && k0 + 3 < p.b && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
          *reinterpret_cast<float4 *>(dst) =
              make_float4(acc[u][v], acc[u][v + 1], acc[u][v + 2], acc[u][v + 3]);
        } else {
#pragma unroll
          for (int w = 0; w < 4; ++w)
            if (k0 + w < p.b) dst[w * p.d] = acc[u][v + w];
        }
      }
    }
  }
  if (!BF) {
#pragma unroll
    for (int v = 0; v < 8; ++v) {
      const int64_t k = t.k0 + (v < 4 ? 4 * tk + v : TK / 2 + 4 * tk + v - 4);
      if (k >= p.b) continue;
      float *row = Y + ((t.i * p.b + k) * p.d + j) * p.y_ld;
#pragma unroll
      for (int u = 0; u < 8; u += 4) {
        const int64_t n = t.n0 + (u < 4 ? 4 * tn : TN / 2 + 4 * tn);
        float *dst = row + n;
        if (n + 3 < p.B && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
          *reinterpret_cast<float4 *>(dst) =
              make_float4(acc[u][v], acc[u + 1][v], acc[u + 2][v], acc[u + 3][v]);
        } else {
#pragma unroll
          for (int w = 0; w < 4; ++w)
            if (n + w < p.B) dst[w] = acc[u + w][v];
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// half types on tensor cores.  Per j, C[n][k] += A[n][l] · B[l][k] in m16n8k16 tiles; a block
// of TN·TK·TJ = 8192 outputs has 64 such tiles per 16-wide l step, 8 per warp (WJ j's × WN n16
// tiles × WK k8 tiles).  Shared rows hold 16 l values padded to 24 (12 words): the fragment
// reads of 8 rows × 4 words hit 32 distinct banks.

template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]);

// KL_KS_EMULATE: a host build that runs these kernels thread by thread to check their indexing
// (ks_cuda_emulate.cpp) supplies its own mma16816.
#ifndef KL_KS_EMULATE

template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                        const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

template <int TN, int TK, int TJ>
struct MmaShape {
  static constexpr int TL = 16, SL = 24;
  static constexpr int NT = TN / 16, KT = TK / 8;
  static constexpr int WK = KT < 4 ? KT : 4;
  static constexpr int WN = NT < 8 / WK ? NT : 8 / WK;
  static constexpr int WJ = 8 / (WK * WN);
  static_assert(TN * TK * TJ == 8192, "8192 outputs per block");
  static_assert(WJ * WN * WK == 8 && TJ % WJ == 0 && NT % WN == 0 && KT % WK == 0,
                "8 mma tiles per warp");
  static constexpr int XS = TJ * TN * SL, KS = TJ * TK * SL;
  static constexpr int smem_bytes() {
    return (2 * (XS + KS) * 2 > TN * TK * TJ * 2) ? 2 * (XS + KS) * 2 : TN * TK * TJ * 2;
  }
};

// (n, k, j) of element g of the staged output tile, which is stored in Y's order: n slowest
// (batch_first, k then j inside a row) or k, j slowest (batch_last, n contiguous).
template <bool BF, int TN, int TK, int TJ>
__device__ __forceinline__ void staged_coords(int g, int *n, int *k, int *j) {
  if (BF) {
    *n = g / (TK * TJ);
    *k = (g / TJ) % TK;
    *j = g % TJ;
  } else {
    *n = g % TN;
    *k = g / (TN * TJ);
    *j = (g / TN) % TJ;
  }
}

template <class T, int TN, int TK, int TJ, bool BF>
__global__ void __launch_bounds__(kThreads, 2) ks_mma(Params p) {
  typedef MmaShape<TN, TK, TJ> S;
  constexpr int TL = S::TL, SL = S::SL;
  T *smem = reinterpret_cast<T *>(dynamic_smem());

  const TileId t = tile_id<TN, TK, TJ>(p);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  // warp -> (wj, wn, wk) blocks of WJ j's, WN n16 tiles, WK k8 tiles
  const int wk = warp % (S::KT / S::WK);
  const int wn = (warp / (S::KT / S::WK)) % (S::NT / S::WN);
  const int wj = warp / ((S::KT / S::WK) * (S::NT / S::WN));

  Operands<T, TN, TK, TL, TJ, BF> ops;
  auto xidx = [](int n, int l, int j) { return (j * TN + n) * SL + l; };
  auto kidx = [](int k, int l, int j) { return (j * TK + k) * SL + l; };

  float acc[S::WJ][S::WN][S::WK][4];
#pragma unroll
  for (int a = 0; a < S::WJ; ++a)
#pragma unroll
    for (int b = 0; b < S::WN; ++b)
#pragma unroll
      for (int c = 0; c < S::WK; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][b][c][e] = 0.f;

  const int64_t nl = (p.c + TL - 1) / TL;
  ops.load(p, t, 0);
  ops.x.store(smem, xidx);
  ops.k.store(smem + S::XS, kidx);
  __syncthreads();
  for (int64_t it = 0; it < nl; ++it) {
    const int stage = int(it & 1);
    if (it + 1 < nl) ops.load(p, t, (it + 1) * TL);
    const T *xs = smem + stage * (S::XS + S::KS);
    const T *kss = xs + S::XS;
#pragma unroll
    for (int a = 0; a < S::WJ; ++a) {
      const int jj = wj * S::WJ + a;
      uint32_t af[S::WN][4], bf[S::WK][2];
#pragma unroll
      for (int b = 0; b < S::WN; ++b) {
        const T *r0 = xs + (jj * TN + (wn * S::WN + b) * 16 + g) * SL + 2 * q;
        const T *r1 = r0 + 8 * SL;
        af[b][0] = *reinterpret_cast<const uint32_t *>(r0);
        af[b][1] = *reinterpret_cast<const uint32_t *>(r1);
        af[b][2] = *reinterpret_cast<const uint32_t *>(r0 + 8);
        af[b][3] = *reinterpret_cast<const uint32_t *>(r1 + 8);
      }
#pragma unroll
      for (int c = 0; c < S::WK; ++c) {
        const T *r = kss + (jj * TK + (wk * S::WK + c) * 8 + g) * SL + 2 * q;
        bf[c][0] = *reinterpret_cast<const uint32_t *>(r);
        bf[c][1] = *reinterpret_cast<const uint32_t *>(r + 8);
      }
#pragma unroll
      for (int b = 0; b < S::WN; ++b)
#pragma unroll
        for (int c = 0; c < S::WK; ++c) mma16816<T>(acc[a][b][c], af[b], bf[c]);
    }
    if (it + 1 < nl) {
      T *next = smem + (stage ^ 1) * (S::XS + S::KS);
      ops.x.store(next, xidx);
      ops.k.store(next + S::XS, kidx);
    }
    __syncthreads();
  }

  // epilogue: the tile goes to shared memory in Y's order ((n, k, j) or (k, j, n)), then out in
  // 16-byte runs where Y's layout allows
  T *cs = smem;
  auto cidx = [](int n, int k, int j) { return BF ? (n * TK + k) * TJ + j : (k * TJ + j) * TN + n; };
#pragma unroll
  for (int a = 0; a < S::WJ; ++a)
#pragma unroll
    for (int b = 0; b < S::WN; ++b)
#pragma unroll
      for (int c = 0; c < S::WK; ++c) {
        const int jj = wj * S::WJ + a;
        const int n = (wn * S::WN + b) * 16 + g, k = (wk * S::WK + c) * 8 + 2 * q;
        cs[cidx(n, k, jj)] = Elem<T>::from_f(acc[a][b][c][0]);
        cs[cidx(n, k + 1, jj)] = Elem<T>::from_f(acc[a][b][c][1]);
        cs[cidx(n + 8, k, jj)] = Elem<T>::from_f(acc[a][b][c][2]);
        cs[cidx(n + 8, k + 1, jj)] = Elem<T>::from_f(acc[a][b][c][3]);
      }
  __syncthreads();
  constexpr int V = 8, E = TN * TK * TJ;
  T *Y = static_cast<T *>(p.Y);
  for (int g0 = threadIdx.x * V; g0 < E; g0 += kThreads * V) {
    // g0 .. g0+V-1 in Y order share n (batch_first: TK·TJ % 8 == 0) or a row (batch_last)
    int n, k, j;
    staged_coords<BF, TN, TK, TJ>(g0, &n, &k, &j);
    const int64_t gn = t.n0 + n, gk = t.k0 + k, gj = t.j0 + j;
    T *dst = BF ? Y + gn * p.y_ld + (t.i * p.b + gk) * p.d + gj
                : Y + ((t.i * p.b + gk) * p.d + gj) * p.y_ld + gn;
    bool whole;
    if (BF) {  // contiguous when the run stays in one k (TJ % 8 == 0) or j spans all of d
      const int kl_ = (g0 + V - 1) / TJ % TK;
      const int jl = (g0 + V - 1) % TJ;
      whole = gn < p.B && (TJ % V == 0 || p.d == TJ) && t.k0 + kl_ < p.b && t.j0 + jl < p.d &&
              gk < p.b && gj < p.d;
    } else {
      whole = gk < p.b && gj < p.d && gn + V - 1 < p.B;
    }
    if (whole && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
      *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(cs + g0);
      continue;
    }
    for (int e = 0; e < V; ++e) {
      const int ge = g0 + e;
      int ne, ke, je;
      staged_coords<BF, TN, TK, TJ>(ge, &ne, &ke, &je);
      const int64_t yn = t.n0 + ne, yk = t.k0 + ke, yj = t.j0 + je;
      if (yn < p.B && yk < p.b && yj < p.d) {
        T *o = BF ? Y + yn * p.y_ld + (t.i * p.b + yk) * p.d + yj
                  : Y + ((t.i * p.b + yk) * p.d + yj) * p.y_ld + yn;
        *o = cs[ge];
      }
    }
  }
}

}  // namespace ks
}  // namespace kl

#endif
