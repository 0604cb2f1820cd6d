// CUDA Kronecker-sparse kernel for half types, pipelined: per (i, j) block the product is a GEMM
// C[n][k] = Σ_l X[n, l] · K[k, l] over the batch, run on tensor cores (mma.sync m16n8k16, float32
// accumulation) with the operands streamed through a 3-stage shared-memory ring.
//
// A block owns BN batch rows × BK outputs k × TJ consecutive j of one slab i (8 warps: TJ groups
// of 8/TJ warps, each warp a 64 × 32 tile of one j).  The operands reach shared memory in the
// layout their fragments are read from with ldmatrix, l contiguous ([j][row][l]) or, for a
// batch_last X, n contiguous ([j][l][n], read with ldmatrix.trans):
//  - what is already in that order in global memory (X and K for d = 1, X batch_last) travels
//    by cp.async, two stages ahead of the one being multiplied;
//  - what has j fastest in global memory (K and the batch_first X for d > 1) is loaded one stage
//    ahead into registers as runs of TJ j's at l and l + 1, and stored as (l, l + 1) pairs per j
//    (one byte permute per pair): the transposition costs no extra pass over shared memory.
// The result is staged in shared memory in Y's order and leaves in 16-byte runs.
//
// Requirements (checked by the launcher, which otherwise runs ks_mma): 16-byte aligned x and K,
// x_ld and c multiples of 8, TJ dividing d.
#ifndef KRONLINALG_KS_CUDA_PIPE_CUH
#define KRONLINALG_KS_CUDA_PIPE_CUH

#include "cuda_ptx.cuh"
#include "cuda_wgmma.cuh"
#include "ks_cuda_kernels.cuh"

namespace kl {
namespace ks {

// WG: warpgroup MMAs (wgmma, sm_90a; half types, batch_first): a warpgroup per j and 64 rows n
// takes the whole BK, its operands read from swizzled rows of TL = 32 (64-byte swizzle) or 64
// (128-byte) elements.
template <int TJ, int BN, int BK, int TL, bool BF, int NT = kThreads, int ES = 2, bool WG = false>
struct PipeShape {
  static constexpr int kWarps = NT / 32;
  static constexpr int WPJ = kWarps / TJ;  // warps per j
  static constexpr int GN = BN / 64, GK = BK / 32;
  static_assert(TJ >= 1 && kWarps % TJ == 0, "TJ divides the warps");
  static_assert(WG || (GN * GK == WPJ && BN % 64 == 0 && BK % 32 == 0), "64 x 32 warp tiles");
  static_assert(!WG || (WPJ == 4 * GN && BN % 64 == 0 && (BK == 64 || BK == 128) && (TL == 32 || TL == 64) &&
                        ES == 2 && BF),
                "one warpgroup per 64 rows n of a j, N = BK, rows of 64 or 128 bytes");
  static_assert(TL % (32 / ES) == 0, "whole k steps (k16 for half, k8 for tf32)");
  // pitch of [row][l] tiles, rows padded by 16 bytes: 8 ldmatrix rows hit 8 bank groups (WG:
  // unpadded, swizzled instead)
  static constexpr int PL = WG ? TL : TL + 16 / ES;
  static constexpr int PN = BN + 8;  // pitch of [l][n] tiles (batch_last X)
  static constexpr int XE = BF ? TJ * BN * PL : TJ * TL * PN;
  static constexpr int KE = TJ * BK * PL;
  static constexpr int STAGE = XE + KE;
  // WG keeps one chunk's MMAs in flight (kOverlap) in 3 stages of 128-byte rows or 4 of 64-byte
  // rows where those fit in 128 KB; larger rings (d >= 3) cost 5-10 % on an H100 (less L1 for
  // the operands gathered through registers), so those wait for each chunk's MMAs in 3 stages
  static constexpr bool kBigRing = WG && TL == 32 && 4 * STAGE * ES > 128 * 1024;
  static constexpr int kStages = WG && TL == 32 && !kBigRing ? 4 : 3;
  static constexpr bool kOverlap = WG && !kBigRing;
  // staging of the result: rows n of (k, j) (batch_first) or rows (k, j) of n, padded
  static constexpr int OP = BF ? BK * TJ + 8 : BN + 8;
  static constexpr int OUT = BF ? BN * OP : BK * TJ * OP;
  static constexpr int elems = kStages * STAGE > OUT ? kStages * STAGE : OUT;
  // WG: + the swizzle pattern's period (TL · 16 bytes), to align the tiles to it (the kernel
  // rounds the base up)
  static constexpr int kAlign = WG ? TL * 16 : 0;
  static constexpr int smem_bytes() { return elems * ES + kAlign; }
};

// Where element (row, l) of a region of [row][l] operand rows lies in shared memory: rows of
// pitch P (PaddedRows), or wgmma's swizzle for rows of L = 32 or 64 two-byte elements
// (SwizzledRows: the C = L / 8 16-byte chunks of row r XORed with (r / (8 / C)) % C, as
// cu::wgmma_desc_swizzled<2 L> reads them; the region starts on a 16·L-byte boundary).
template <int P>
struct PaddedRows {
  static __device__ __forceinline__ int off(int row, int l) { return row * P + l; }
};
template <int L>
struct SwizzledRows {
  static constexpr int C = L / 8;
  static __device__ __forceinline__ int off(int row, int l) {
    return row * L + ((((l >> 3) ^ (row / (8 / C))) & (C - 1)) << 3) + (l & 7);
  }
};

// R rows of E elements (E a multiple of a 16-byte chunk) into shared rows laid out by Lay: row r
// starts at base + row_off(r) in global memory; elements >= emax and rows without row_ok(r) are
// zeros.
template <class T, int R, int E, class Lay, int NT, class RowOff, class RowOk>
__device__ __forceinline__ void async_rows(T *sm, const T *base, RowOff row_off, RowOk row_ok,
                                           int emax) {
  constexpr int VE = 16 / int(sizeof(T)), CPR = E / VE;
#pragma unroll
  for (int u0 = 0; u0 < R * CPR; u0 += NT) {
    const int u = u0 + int(threadIdx.x);
    if (R * CPR % NT != 0 && u >= R * CPR) break;
    const int r = u / CPR, e = (u % CPR) * VE;
    int valid = emax - e;
    valid = row_ok(r) ? (valid < 0 ? 0 : (valid > VE ? VE : valid)) : 0;
    const T *src = valid > 0 ? base + row_off(r) + e : base;
    cu::cp_async_16_part(sm + Lay::off(r, e), src, valid * int(sizeof(T)));
  }
}

// TJ consecutive half values as raw bits (TJ = 1, 2, 4, 8).
template <int TJ>
struct Run {
  uint32_t w[(TJ + 1) / 2];
};
template <int TJ>
__device__ __forceinline__ Run<TJ> load_run(const void *p) {
  Run<TJ> r;
  if constexpr (TJ == 8) {
    const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
    r.w[0] = v.x, r.w[1] = v.y, r.w[2] = v.z, r.w[3] = v.w;
  } else if constexpr (TJ == 4) {
    const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p));
    r.w[0] = v.x, r.w[1] = v.y;
  } else if constexpr (TJ == 2) {
    r.w[0] = __ldg(reinterpret_cast<const unsigned int *>(p));
  } else {
    r.w[0] = __ldg(reinterpret_cast<const unsigned short *>(p));
  }
  return r;
}

// An [R][TL][TJ] tile (element (r, l, j) at base[r·rs + l·d + j]) loaded as runs of TJ j's at
// l and l + 1, stored transposed as rows [j][r] of l (laid out by Lay): word j of a unit is
// (l, l + 1) of j.
template <class T, int R, int TL, int TJ, class Lay, int NT>
struct TransposingLoader {
  static constexpr int U = R * TL / 2, G = (U + NT - 1) / NT;
  Run<TJ> lo[G], hi[G];

  __device__ __forceinline__ void load(const T *base, int64_t rs, int64_t d, int rmax, int lmax) {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int u = int(threadIdx.x) + s * NT;
      const int r = u / (TL / 2), l = 2 * (u % (TL / 2));
      const T *src = base + r * rs + l * d;
      const bool in = u < U && r < rmax;
#pragma unroll
      for (int w = 0; w < (TJ + 1) / 2; ++w) lo[s].w[w] = hi[s].w[w] = 0;
      if (in && l < lmax) lo[s] = load_run<TJ>(src);
      if (in && l + 1 < lmax) hi[s] = load_run<TJ>(src + d);
    }
  }

  __device__ __forceinline__ void store(T *sm) const {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int u = int(threadIdx.x) + s * NT;
      if (U % NT != 0 && u >= U) break;
      const int r = u / (TL / 2), l = 2 * (u % (TL / 2));
#pragma unroll
      for (int j = 0; j < TJ; ++j) {
        const uint32_t a = lo[s].w[j / 2], b = hi[s].w[j / 2];
        const uint32_t pair = __byte_perm(a, b, (j & 1) ? 0x7632 : 0x5410);
        *reinterpret_cast<uint32_t *>(sm + Lay::off(j * R + r, l)) = pair;
      }
    }
  }
};

// Two half values, elements e1 and e2 of the raw words w (two per word), as one word (e1 low).
__device__ __forceinline__ uint32_t pick_halves(const uint32_t *w, int e1, int e2) {
  const unsigned sel = (e1 & 1 ? 0x32u : 0x10u) | (e2 & 1 ? 0x7600u : 0x5400u);
  return __byte_perm(w[e1 / 2], w[e2 / 2], sel);
}

// The same tile for TJ = d in {2, 3, 4, 6} (whole d: a row's (l, j) span is contiguous): units of
// UE = lcm(8, 2d) elements (UP = UE / 2d pairs of l) loaded as 16-byte vectors, each (l, l + 1)
// pair of a j picked out by a byte permute.  Units never straddle the valid l range (c and TL
// are multiples of 8, a unit spans at most 8 l).
constexpr int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }

template <class T, int R, int TL, int D, class Lay, int NT>
struct SpanLoader {
  static constexpr int UE = 2 * D * (8 / gcd(8, 2 * D));  // lcm(8, 2d)
  static_assert(UE <= 32, "at most 4 chunks per unit");
  static constexpr int UC = UE / 8, UP = UE / (2 * D);
  static constexpr int UR = TL * D / UE;  // units per row
  static constexpr int U = R * UR, G = (U + NT - 1) / NT;
  static_assert(TL * D % UE == 0 && UE % (2 * D) == 0, "whole units per row");
  uint32_t w[G][UC * 4];

  __device__ __forceinline__ void load(const T *base, int64_t rs, int64_t, int rmax, int lmax) {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int u = int(threadIdx.x) + s * NT;
      const int r = u / UR, e0 = (u % UR) * UE;
      const bool in = u < U && r < rmax && e0 / D < lmax;
      const uint4 *src = reinterpret_cast<const uint4 *>(base + r * rs + e0);
#pragma unroll
      for (int cc = 0; cc < UC; ++cc) {
        const uint4 v = in ? __ldg(src + cc) : make_uint4(0, 0, 0, 0);
        w[s][4 * cc] = v.x, w[s][4 * cc + 1] = v.y, w[s][4 * cc + 2] = v.z, w[s][4 * cc + 3] = v.w;
      }
    }
  }

  __device__ __forceinline__ void store(T *sm) const {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int u = int(threadIdx.x) + s * NT;
      if (U % NT != 0 && u >= U) break;
      const int r = u / UR, l0 = (u % UR) * UE / D;
#pragma unroll
      for (int lp = 0; lp < UP; ++lp)
#pragma unroll
        for (int j = 0; j < D; ++j) {
          const int e1 = 2 * lp * D + j, e2 = e1 + D;  // elements (l, j) and (l + 1, j)
          const uint32_t pair = pick_halves(w[s], e1, e2);
          *reinterpret_cast<uint32_t *>(sm + Lay::off(j * R + r, l0 + 2 * lp)) = pair;
        }
    }
  }
};

// Half types, TJ = d = 3: the K tile and, batch_first, the X tile together, in units of 8 l of
// one row (d 16-byte chunks of its (l, j) span, loaded as they lie): the 8 l of each j are
// gathered by byte permutes into one 16-byte word and stored as one vector, a quarter of the
// shared stores of (l, l + 1) pairs (the transposition kept L1 ~88 % busy on an H100).  One unit
// numbering over both tiles spreads them evenly over the threads: RX = 0 when X is not loaded
// here (batch_last: cp.async).  Units never straddle the valid l range (c and TL are multiples
// of 8).  For d = 2, 4, 6 SpanLoader's units (one chunk for d = 2, 4) keep the global loads
// coalesced, which paid more on an H100 (this loader: 0.89-0.95x there).
template <class T, int RX, int RK, int TL, int D, class Lay, int NT>
struct SpanTiles {
  static constexpr int UPR = TL / 8;                  // units per row
  static constexpr int UX = RX * UPR, U = UX + RK * UPR, G = (U + NT - 1) / NT;
  static_assert(TL % 8 == 0, "whole units per row");
  uint32_t w[G > 0 ? G : 1][4 * D];

  __device__ __forceinline__ void load(const T *xb, int64_t xrs, int xrmax, const T *kb,
                                       int64_t krs, int krmax, int lmax) {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int u = int(threadIdx.x) + s * NT;
      const bool isx = u < UX;
      const int v = isx ? u : u - UX, r = v / UPR, l0 = (v % UPR) * 8;
      const bool in = u < U && r < (isx ? xrmax : krmax) && l0 < lmax;
      const uint4 *src =
          reinterpret_cast<const uint4 *>((isx ? xb + r * xrs : kb + r * krs) + l0 * D);
#pragma unroll
      for (int cc = 0; cc < D; ++cc) {
        const uint4 q = in ? __ldg(src + cc) : make_uint4(0, 0, 0, 0);
        w[s][4 * cc] = q.x, w[s][4 * cc + 1] = q.y, w[s][4 * cc + 2] = q.z, w[s][4 * cc + 3] = q.w;
      }
    }
  }

  __device__ __forceinline__ void store(T *xs, T *ks) const {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int u = int(threadIdx.x) + s * NT;
      if (U % NT != 0 && u >= U) break;
      const bool isx = u < UX;
      const int v = isx ? u : u - UX, r = v / UPR, l0 = (v % UPR) * 8;
      T *tile = isx ? xs : ks;
      const int rows = isx ? RX : RK;
#pragma unroll
      for (int j = 0; j < D; ++j) {
        uint32_t q[4];
#pragma unroll
        for (int lp = 0; lp < 4; ++lp) {
          const int e1 = 2 * lp * D + j, e2 = e1 + D;  // elements (l, j) and (l + 1, j)
          q[lp] = pick_halves(w[s], e1, e2);
        }
        *reinterpret_cast<uint4 *>(tile + Lay::off(j * rows + r, l0)) = make_uint4(q[0], q[1], q[2], q[3]);
      }
    }
  }
};

// float32: the same tiles element by element (no pairs to form): runs of TJ floats at (r, l)
// (TransposingLoader's case), or 16-byte chunks of a whole-d span, each element (l, j) = (e / d,
// e % d) of the span stored at [j][r][l] (SpanLoader's case, any d).  PAIR (the batch_first X,
// the operand that streams from DRAM): runs longer than 16 bytes are split into 16-byte pieces
// on neighbouring lanes, so that one load instruction reads whole 32-byte sectors; K, read from
// L2, keeps whole runs per thread (fewer registers: the split costs its kernels spills).
template <int R, int TL, int TJ, class Lay, int NT, bool SPAN, bool PAIR>
struct FloatLoader {
  static constexpr int UE = SPAN || (PAIR && TJ > 4) ? 4 : TJ;  // elements per unit
  static constexpr int H = SPAN ? 1 : TJ / UE;                   // units per run
  static constexpr int UR = SPAN ? TL * TJ / 4 : TL * H;         // units per row
  static constexpr int U = R * UR, G = (U + NT - 1) / NT;
  static_assert(!SPAN || TL * TJ % 4 == 0, "whole chunks per row");
  static_assert(SPAN || TJ == 1 || TJ == 2 || TJ == 4 || TJ == 8, "vector runs");
  float v[G][UE];

  __device__ __forceinline__ void load(const float *base, int64_t rs, int64_t d, int rmax,
                                       int lmax) {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int u = int(threadIdx.x) + s * NT;
      const int r = u / UR, x = u % UR;
      // SPAN: chunk x of the row's contiguous span; else piece x % H of the run at l = x / H
      const bool in = u < U && r < rmax && (SPAN ? x * 4 / TJ : x / H) < lmax;
      const float *src =
          base + r * rs + (SPAN ? int64_t(x) * 4 : (x / H) * d + (x % H) * UE);
#pragma unroll
      for (int e = 0; e < UE; e += 4) {
        if constexpr (UE % 4 == 0) {
          const float4 f = in ? __ldg(reinterpret_cast<const float4 *>(src + e))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
          v[s][e] = f.x, v[s][e + 1] = f.y, v[s][e + 2] = f.z, v[s][e + 3] = f.w;
        } else if constexpr (UE == 2) {
          const float2 f = in ? __ldg(reinterpret_cast<const float2 *>(src)) : make_float2(0.f, 0.f);
          v[s][0] = f.x, v[s][1] = f.y;
        } else {
          v[s][0] = in ? __ldg(src) : 0.f;
        }
      }
    }
  }

  __device__ __forceinline__ void store(float *sm) const {
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int u = int(threadIdx.x) + s * NT;
      if (U % NT != 0 && u >= U) break;
      const int r = u / UR, x = u % UR;
#pragma unroll
      for (int e = 0; e < UE; ++e) {
        const int l = SPAN ? (x * 4 + e) / TJ : x / H;
        const int j = SPAN ? (x * 4 + e) % TJ : (x % H) * UE + e;
        sm[Lay::off(j * R + r, l)] = v[s][e];
      }
    }
  }
};

template <bool SPAN, bool PAIR, class T, int R, int TL, int TJ, class Lay, int NT>
struct RegLoaderOf {
  using type = typename std::conditional<SPAN, SpanLoader<T, R, TL, TJ, Lay, NT>,
                                         TransposingLoader<T, R, TL, TJ, Lay, NT>>::type;
};
template <bool SPAN, bool PAIR, int R, int TL, int TJ, class Lay, int NT>
struct RegLoaderOf<SPAN, PAIR, float, R, TL, TJ, Lay, NT> {
  using type = FloatLoader<R, TL, TJ, Lay, NT, SPAN, PAIR>;
};
// PAIR: sector-whole loads for the operand streamed from DRAM (FloatLoader)
template <bool SPAN, bool PAIR, class T, int R, int TL, int TJ, class Lay, int NT>
using RegLoader = typename RegLoaderOf<SPAN, PAIR, T, R, TL, TJ, Lay, NT>::type;

// Stores N consecutive elements of `src` (shared) to `dst` (global, aligned to their size).
template <class T, int N>
__device__ __forceinline__ void store_vec(T *dst, const T *src) {
  constexpr int bytes = N * int(sizeof(T));
  if constexpr (bytes == 32) {
    reinterpret_cast<uint4 *>(dst)[0] = reinterpret_cast<const uint4 *>(src)[0];
    reinterpret_cast<uint4 *>(dst)[1] = reinterpret_cast<const uint4 *>(src)[1];
  } else if constexpr (bytes == 16) {
    *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
  } else if constexpr (bytes == 8) {
    *reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<const uint2 *>(src);
  } else if constexpr (bytes == 4) {
    *reinterpret_cast<uint32_t *>(dst) = *reinterpret_cast<const uint32_t *>(src);
  } else {
    *dst = *src;
  }
}

// The batch_first epilogue's second half: BN staged rows n (pitch OP) of RL elements, element e
// being output (k, j) = (e / TJ, e % TJ) at column col0 + k·d + j of Y's row n0 + n.  Each thread
// stores a piece of PV elements (a 16-byte vector at most, within one run of TJ j's), neighbouring
// lanes the next pieces of the row (whole 32-byte sectors per instruction where the runs are that
// long); rows n >= nmax and outputs k >= kmax are left out, cut or unaligned pieces go by element.
template <class T, int PV, int BN, int RL, int TJ, int NT>
__device__ __forceinline__ void store_staged_rows(const T *cs, int OP, T *Y, int64_t y_ld,
                                                  int64_t n0, int64_t col0, int64_t d, int nmax,
                                                  int kmax) {
  constexpr int CPR = RL / PV;
  static_assert(RL % PV == 0, "whole pieces per row");
  for (int u = threadIdx.x; u < BN * CPR; u += NT) {
    const int n = u / CPR, e = (u % CPR) * PV;
    const int kt = e / TJ, jt = e % TJ;
    if (n >= nmax || kt >= kmax) continue;
    const T *src = cs + n * OP + e;
    T *dst = Y + (n0 + n) * y_ld + col0 + kt * d + jt;
    if ((e + PV - 1) / TJ < kmax && (reinterpret_cast<uintptr_t>(dst) & (PV * sizeof(T) - 1)) == 0)
      store_vec<T, PV>(dst, src);
    else
      for (int t = 0; t < PV && (e + t) / TJ < kmax; ++t) dst[t] = src[t];
  }
}

// DJ: d > 1 (K and the batch_first X through registers); SPAN: TJ == d in {2, 3, 4, 6}, loaded
// as whole (l, j) spans; NT threads: 8 warps (6 for d = 3, 6), two blocks per SM, or the wide
// shapes' 16 (12) warps, one block per SM (the same 128 registers per thread either way).
// KT (TJ = 8 shapes): p.K is the factor transposed to [i][j][k][l] (transpose_values in
// ks_cuda_launch.cuh), so its tiles are l-contiguous rows that travel by cp.async like X's.
// WG (see PipeShape): the same operand pipeline feeding warpgroup MMAs that read both tiles from
// shared memory, one warpgroup per (j, 64 rows n), N = BK.
template <class T, bool BF, bool DJ, bool SPAN, int TJ, int BN, int BK, int TL, int NT,
          bool KT = false, bool WG = false>
__global__ void __launch_bounds__(NT, NT > 256 ? 1 : 2) ks_pipe(Params p) {
  typedef PipeShape<TJ, BN, BK, TL, BF, NT, int(sizeof(T)), WG> S;
  constexpr int PL = S::PL, PN = S::PN, NS = S::kStages;
  constexpr bool kBf16 = std::is_same<T, __nv_bfloat16>::value;
  constexpr bool kHalf = sizeof(T) == 2;
  using Lay = typename std::conditional<WG, SwizzledRows<TL>, PaddedRows<PL>>::type;
  T *smem = reinterpret_cast<T *>(dynamic_smem());
  if constexpr (WG) {  // the swizzle pattern repeats every kAlign bytes
    constexpr unsigned A = S::kAlign;
    smem += ((A - (cu::smem_u32(smem) & (A - 1))) & (A - 1)) / sizeof(T);
  }

  // tiles: batch_first runs j tiles fastest (neighbouring blocks share the sectors of X and Y
  // rows), batch_last k tiles (the blocks that read one X tile run together)
  int64_t f = blockIdx.x, i, n0, k0, j0;
  if (BF) {
    j0 = (f % p.nJ) * TJ, f /= p.nJ;
    k0 = (f % p.nK) * BK, f /= p.nK;
  } else {
    k0 = (f % p.nK) * BK, f /= p.nK;
    j0 = (f % p.nJ) * TJ, f /= p.nJ;
  }
  n0 = (f % p.nN) * BN;
  i = f / p.nN;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wj = warp / S::WPJ, wn = (warp % S::WPJ) / S::GK, wk = warp % S::GK;
  const int nmax = int(p.B - n0 < BN ? p.B - n0 : BN);
  const int kmax = int(p.b - k0 < BK ? p.b - k0 : BK);
  const T *X = static_cast<const T *>(p.X);
  const T *K = static_cast<const T *>(p.K);
  const int64_t c = p.c, d = p.d, x_ld = p.x_ld;
  const int64_t nl = (c + TL - 1) / TL;

  RegLoader<SPAN, true, T, BN, TL, TJ, Lay, NT> xr;   // used when BF && DJ
  RegLoader<SPAN, false, T, BK, TL, TJ, Lay, NT> kr;  // used when DJ

  auto lmax_of = [&](int64_t it) { return int(c - it * TL < TL ? c - it * TL : TL); };
  // the asynchronous operands of chunk `it` into stage buffer `st`
  auto issue_async = [&](int st, int64_t it) {
    T *xs = smem + st * S::STAGE, *ks = xs + S::XE;
    const int64_t l0 = it * TL;
    const int lmax = lmax_of(it);
    if (BF && !DJ) {  // X rows n: (i·c + l0 ..) contiguous
      const T *base = X + n0 * x_ld + i * c + l0;
      async_rows<T, BN, TL, Lay, NT>(
          xs, base, [&](int r) { return r * x_ld; }, [&](int r) { return r < nmax; }, lmax);
    }
    if (!BF) {  // X rows (j, l): ((i·c + l0 + l)·d + j0 + j)·x_ld + n0, n contiguous
      const T *base = X + ((i * c + l0) * d + j0) * x_ld + n0;
      async_rows<T, TJ * TL, BN, PaddedRows<PN>, NT>(
          xs, base, [&](int r) { return ((r % TL) * d + r / TL) * x_ld; },
          [&](int r) { return r % TL < lmax; }, nmax);
    }
    if (!DJ) {  // K rows k (d = 1): (i·b + k0 + k)·c + l0 ..
      const T *base = K + (i * p.b + k0) * c + l0;
      async_rows<T, BK, TL, Lay, NT>(
          ks, base, [&](int r) { return r * c; }, [&](int r) { return r < kmax; }, lmax);
    }
    if (DJ && KT) {  // transposed K rows (j, k): ((i·d + j0 + j)·b + k0 + k)·c + l0 ..
      const T *base = K + ((i * d + j0) * p.b + k0) * c + l0;
      async_rows<T, TJ * BK, TL, Lay, NT>(
          ks, base, [&](int r) { return ((r / BK) * p.b + r % BK) * c; },
          [&](int r) { return r % BK < kmax; }, lmax);
    }
  };
  constexpr bool kRegX = BF && DJ, kRegK = DJ && !KT;  // operands that pass through registers
  constexpr bool kSpanTiles = SPAN && kHalf && TJ == 3 && (kRegX || kRegK);  // see SpanTiles
  SpanTiles<T, (kRegX ? BN : 0), (kRegK ? BK : 0), TL, TJ, Lay, NT> sp;  // used when kSpanTiles

  auto load_regs = [&](int64_t it) {
    const int64_t l0 = it * TL;
    const int lmax = lmax_of(it);
    const T *xb = X + n0 * x_ld + (i * c + l0) * d + j0;
    const T *kb = K + ((i * p.b + k0) * c + l0) * d + j0;
    if constexpr (kSpanTiles) {
      sp.load(xb, x_ld, nmax, kb, c * d, kmax, lmax);
    } else {
      if (kRegX) xr.load(xb, x_ld, d, nmax, lmax);
      if (kRegK) kr.load(kb, c * d, d, kmax, lmax);
    }
  };
  auto store_regs = [&](int st) {
    T *xs = smem + st * S::STAGE;
    if constexpr (kSpanTiles) {
      sp.store(xs, xs + S::XE);
    } else {
      if (kRegX) xr.store(xs);
      if (kRegK) kr.store(xs + S::XE);
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.f;
  // WG: the warpgroup's (j, 64 rows n) tile, N = BK columns k
  constexpr int kWgAcc = WG ? BK / 2 : 1;
  float wacc[kWgAcc];
#pragma unroll
  for (int e = 0; e < kWgAcc; ++e) wacc[e] = 0.f;
  const int wg = threadIdx.x / 128, wg_j = wg / S::GN, wg_n = wg % S::GN;

  // AHEAD asynchronous chunks in flight: NS - 1, or NS - 2 where WG keeps the MMAs of one chunk
  // running while the next is multiplied (the buffer of chunk it - 1 is then free one chunk later)
  constexpr int AHEAD = S::kOverlap ? NS - 2 : NS - 1;
  static_assert(AHEAD >= 1, "a stage in flight");
  // prologue: chunks 0 .. AHEAD-1 in flight, chunk 0 of the register operands stored, chunk 1
  // loaded
#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {
    if (s < nl) issue_async(s, s);
    cu::cp_async_commit();
  }
  if (kRegX || kRegK) {
    load_regs(0);
    store_regs(0);
    if (nl > 1) load_regs(1);
  }
  cu::cp_async_wait<AHEAD - 1>();
  if constexpr (WG) cu::fence_proxy_async_shared();
  __syncthreads();

  const int mi_l = lane >> 3, r8 = lane & 7;
  for (int64_t it = 0; it < nl; ++it) {
    const int st = int(it % NS);
    // chunk it + AHEAD goes to the buffer chunk it - 1 (overlapping WG: it - 2) used, free since
    // the last barrier
    if (it + AHEAD < nl) issue_async(int((it + AHEAD) % NS), it + AHEAD);
    cu::cp_async_commit();

    const T *xs = smem + st * S::STAGE, *ks = xs + S::XE;
    if constexpr (WG) {
      // 64 rows n of j (A) and the BK rows k of j (B), both K-major: TL / 16 k steps of 32 bytes
      const T *a_tile = xs + (wg_j * BN + wg_n * 64) * TL, *b_tile = ks + wg_j * BK * TL;
      const uint64_t da = cu::wgmma_desc_swizzled<TL * 2>(a_tile);
      const uint64_t db = cu::wgmma_desc_swizzled<TL * 2>(b_tile);
      cu::wgmma_fence_operands(wacc);
      cu::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < TL / 16; ++kk) cu::wgmma_ss<BK, kBf16>(wacc, da + 2 * kk, db + 2 * kk);
      cu::wgmma_commit();
    } else if constexpr (kHalf) {
#pragma unroll
      for (int kk = 0; kk < TL; kk += 16) {
        uint32_t af[4][4], bfr[4][2];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          const int nb = wn * 64 + mi * 16;
          if (BF)
            cu::ldsm_x4(af[mi], xs + (wj * BN + nb + (lane & 15)) * PL + kk + (lane >> 4) * 8);
          else
            cu::ldsm_x4_trans(
                af[mi], xs + (wj * TL + kk + (mi_l >> 1) * 8 + r8) * PN + nb + (mi_l & 1) * 8);
        }
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t t4[4];
          cu::ldsm_x4(t4, ks + (wj * BK + wk * 32 + np * 16 + (mi_l >> 1) * 8 + r8) * PL + kk +
                              (mi_l & 1) * 8);
          bfr[2 * np][0] = t4[0], bfr[2 * np][1] = t4[1];
          bfr[2 * np + 1][0] = t4[2], bfr[2 * np + 1][1] = t4[3];
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
          for (int ni = 0; ni < 4; ++ni)
            cu::mma_16816<kBf16>(acc[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
      }
    } else {
      // float32, m16n8k8 TF32 fragments: 8 x 4-float ldmatrix tiles (A rows n / B rows k, l
      // contiguous) or, for the batch_last X ([l][n]), one 32-bit load per element
      const int g = lane / 4, q = lane % 4;
#pragma unroll
      for (int kk = 0; kk < TL; kk += 8) {
        uint32_t bh[4][2], bl[4][2];
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t t4[4];
          cu::ldsm_x4(t4, ks + (wj * BK + wk * 32 + np * 16 + (mi_l >> 1) * 8 + r8) * PL + kk +
                              (mi_l & 1) * 4);
#pragma unroll
          for (int e = 0; e < 4; ++e)
            cu::split_tf32(t4[e], bh[2 * np + e / 2][e % 2], bl[2 * np + e / 2][e % 2]);
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          const int nb = wn * 64 + mi * 16;
          uint32_t a[4], ah[4], al[4];
          if (BF) {
            cu::ldsm_x4(a, xs + (wj * BN + nb + (lane & 15)) * PL + kk + (lane >> 4) * 4);
          } else {
            const float *x0 = reinterpret_cast<const float *>(xs) + (wj * TL + kk + q) * PN + nb + g;
            a[0] = __float_as_uint(x0[0]);
            a[1] = __float_as_uint(x0[8]);
            a[2] = __float_as_uint(x0[4 * PN]);
            a[3] = __float_as_uint(x0[4 * PN + 8]);
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) cu::split_tf32(a[e], ah[e], al[e]);
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) {  // small terms first
            cu::mma_tf32(acc[mi][ni], al, bh[ni][0], bh[ni][1]);
            cu::mma_tf32(acc[mi][ni], ah, bl[ni][0], bl[ni][1]);
            cu::mma_tf32(acc[mi][ni], ah, bh[ni][0], bh[ni][1]);
          }
        }
      }
    }

    if ((kRegX || kRegK) && it + 1 < nl) {
      store_regs(int((it + 1) % NS));  // its buffer was last read in chunk it + 1 - NS
      if (it + 2 < nl) load_regs(it + 2);
    }
    if constexpr (WG) {  // the MMAs of chunk it (kOverlap: it - 1) are done, their buffer free
      cu::wgmma_wait<S::kOverlap ? 1 : 0>();  // after the barrier
      cu::wgmma_fence_operands(wacc);
    }
    cu::cp_async_wait<AHEAD - 1>();
    if constexpr (WG) cu::fence_proxy_async_shared();
    __syncthreads();
  }
  if constexpr (WG) {
    cu::wgmma_wait<0>();
    cu::wgmma_fence_operands(wacc);
  }
  cu::cp_async_wait<0>();
  __syncthreads();

  // epilogue: staged in Y's order, padded rows: batch_first [n][k·TJ + j], batch_last
  // [k·TJ + j][n]
  T *cs = smem;
  const int g = lane / 4, q = lane % 4;
  if constexpr (WG) {
#pragma unroll
    for (int e = 0; e < kWgAcc; ++e) {
      const int n = wg_n * 64 + (warp % 4) * 16 + g + 8 * ((e >> 1) & 1);
      const int k = (e >> 2) * 8 + 2 * q + (e & 1);
      cs[n * S::OP + k * TJ + wg_j] = Elem<T>::from_f(wacc[e]);
    }
  } else
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = wn * 64 + mi * 16 + g + 8 * (e >> 1);
        const int k = wk * 32 + ni * 8 + 2 * q + (e & 1);
        const int o = BF ? n * S::OP + k * TJ + wj : (k * TJ + wj) * S::OP + n;
        cs[o] = Elem<T>::from_f(acc[mi][ni][e]);
      }
  __syncthreads();

  T *Y = static_cast<T *>(p.Y);
  const int64_t y_ld = p.y_ld;
  if (BF) {
    // row n: (k, j) pairs, contiguous in Y when TJ == d, else runs of TJ j's d apart
    constexpr int V = 16 / int(sizeof(T)), RL = BK * TJ;
    const int64_t col0 = (i * p.b + k0) * d + j0;
    if (TJ == d)
      store_staged_rows<T, V, BN, RL, TJ, NT>(cs, S::OP, Y, y_ld, n0, col0, d, nmax, kmax);
    else
      store_staged_rows<T, (TJ < V ? TJ : V), BN, RL, TJ, NT>(cs, S::OP, Y, y_ld, n0, col0, d,
                                                              nmax, kmax);
  } else {
    constexpr int CPR = BN / 8;
    for (int u = threadIdx.x; u < BK * TJ * CPR; u += NT) {
      const int rr = u / CPR, n = (u % CPR) * 8;
      const int k = rr / TJ, j = rr % TJ;
      if (k >= kmax || n >= nmax) continue;
      const T *src = cs + rr * S::OP + n;
      T *dst = Y + ((i * p.b + k0 + k) * d + j0 + j) * y_ld + n0 + n;
      if (n + 8 <= nmax && (reinterpret_cast<uintptr_t>(dst) & 15) == 0)
        store_vec<T, 8>(dst, src);
      else
        for (int t = 0; t < 8 && n + t < nmax; ++t) dst[t] = src[t];
    }
  }
}

}  // namespace ks
}  // namespace kl

#endif
