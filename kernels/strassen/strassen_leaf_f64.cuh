// The FP64 leaf of strassen_matmul on the sm_90 DMMA tensor cores (mma.sync m16n8k8 /
// m16n8k16 .f64: on the H100 the larger shapes feed the FP64 tensor cores, m8n8k4 runs at
// about half their rate).  One CTA computes a 128 x 128 tile of X (m x k) . Y (k x n) through an
// ST-stage cp.async ring of BK-deep k slices, 8 warps of 64 x 32 each; the epilogue adds the
// tile into the leaf's table of signed C blocks (beta on a target's first write, no atomics).
//
// Operand sums ("Strassen reloaded"): X may be a signed sum of up to SA source blocks and Y of
// up to SB (same leading dimension).  Each source has its own slice of the ring; the fragments
// are summed in registers as they are read, so the sums never exist in memory and the inputs
// are only read.  Sources past a leaf's count are zero-filled (cp.async with 0 valid bytes).
//
// Fragments (PTX m16n8k8 .f64 = tf32 m16n8k8 with 64-bit registers; g = lane / 4, t = lane % 4):
// A a0 (g, slot t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); B b0 (slot t, col g),
// b1 (t + 4, g); C c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1).  The k
// order inside a k8 step is free (the product sums over it): slot t holds k = 2t and slot t + 4
// holds k = 2t + 1, so a lane reads a0/a2 (and a1/a3) as one 16-byte pair.  m16n8k16 is two
// such k8 steps in one instruction (a4..a7, b2, b3: slots 8..15).
#ifndef KRONLINALG_STRASSEN_LEAF_F64_CUH
#define KRONLINALG_STRASSEN_LEAF_F64_CUH

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_ptx.cuh"
#include "strassen.h"

namespace kl_strassen {

constexpr int kF64BM = 128, kF64BN = 128, kF64Threads = 256;

// Row pitches (doubles).  A: pitch = 8 (mod 16) makes the 16-byte fragment reads of a quarter
// warp (rows g, g + 1; k pairs t) hit 8 distinct 16-byte bank groups.  B: pitch = 2 (mod 8)
// makes the 8-byte reads of a half warp (k rows 2t, cols g) hit 16 distinct bank pairs.
// WM: warps along m (2: 128-row tiles, one CTA an SM; 1: 64-row tiles, two CTAs an SM)
template <int BK, int WM = 2>
struct F64Tile {
  static constexpr int BM = 64 * WM, THREADS = 128 * WM;
  static constexpr int PA = BK % 16 == 8 ? BK : BK + 8;
  static constexpr int PB = kF64BN + 2;
  static constexpr int A = BM * PA;  // doubles of one A slice
  static constexpr int B = BK * PB;
};

template <int BK, int ST, int SA, int SB, int WM = 2>
constexpr size_t f64_leaf_smem() {
  return size_t(ST) * (SA * F64Tile<BK, WM>::A + SB * F64Tile<BK, WM>::B) * sizeof(double);
}

__device__ __forceinline__ void mma_f64_k8(double (&d)[4], const double (&a)[4],
                                           const double (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
#else
  (void)d, (void)a, (void)b;
  __trap();  // sm_90 and newer only (the host entry checks the device)
#endif
}

__device__ __forceinline__ void mma_f64_k16(double (&d)[4], const double (&a)[8],
                                            const double (&b)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
      "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]),
        "d"(a[7]), "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

// One 16-byte chunk (2 doubles) of a slice: a vector copy where the chunk is inside the matrix
// and aligned, element copies (zero-filled outside) elsewhere; all zero when !live.
__device__ __forceinline__ void f64_chunk(double *dst, const double *src, int64_t ld, int64_t r,
                                          int64_t c, int64_t rows, int64_t cols, bool vec,
                                          bool live) {
  if (!live) {
    kl::cu::cp_async_16(dst, src, false);  // 0 bytes read: a zero chunk
    return;
  }
  if (r < rows && vec && c + 2 <= cols) {
    kl::cu::cp_async_16(dst, src + r * ld + c, true);
    return;
  }
  for (int e = 0; e < 2; ++e) {
    const bool ok = r < rows && c + e < cols;
    kl::cu::cp_async_elem<8>(dst + e, ok ? src + r * ld + c + e : src, ok);
  }
}

// The multi-target epilogue of two adjacent columns: C_t = (fresh_t ? beta C_t : C_t) +
// coef_t v (coef_t = ±alpha, the sources' leading signs folded in).
__device__ __forceinline__ void f64_epilogue_pair(const kl_strassen_sum_leaves &p,
                                                  const kl_strassen_sum_leaf &lf, double sign,
                                                  int64_t r, int64_t c, double v0, double v1,
                                                  bool pair_ok) {
  if (r >= p.m || c >= p.n) return;
  const bool two = c + 1 < p.n;
  for (int t = 0; t < lf.ntargets; ++t) {
    const bool fresh = (lf.fresh >> t) & 1u;
    const bool read_c = !fresh || p.beta != 0.0;
    const double keep = fresh ? p.beta : 1.0;
    const double coef = ((lf.negative >> t) & 1u) ? -sign * p.alpha : sign * p.alpha;
    double *dst = static_cast<double *>(lf.c[t]) + r * p.ldc + c;
    double o0 = coef * v0, o1 = coef * v1;
    if (two && pair_ok) {
      double2 *d = reinterpret_cast<double2 *>(dst);
      if (read_c) {
        const double2 old = *d;
        o0 += keep * old.x;
        o1 += keep * old.y;
      }
      *d = make_double2(o0, o1);
    } else {
      if (read_c) o0 += keep * dst[0];
      dst[0] = o0;
      if (two) {
        if (read_c) o1 += keep * dst[1];
        dst[1] = o1;
      }
    }
  }
}

// blockIdx.z: the leaf; (x, y): the output tile.  vec: every pointer and leading dimension
// allows 16-byte copies and pair stores (checked on the host).
template <int BK, int ST, bool K16, int SA, int SB, int WM = 2>
__global__ void __launch_bounds__(128 * WM, 2 / WM)
    leaf_f64_mma(const __grid_constant__ kl_strassen_sum_leaves p, int vec) {
  static_assert(BK % (K16 ? 16 : 8) == 0 && BK >= 8, "k slice");
  using Tile = F64Tile<BK, WM>;
  constexpr int PA = Tile::PA, PB = Tile::PB, BM = Tile::BM, NT = Tile::THREADS;
  constexpr int STAGE = SA * Tile::A + SB * Tile::B;  // doubles of one ring stage
  constexpr int ACH = BM * BK / 2 / NT;  // 16-byte chunks a thread copies per slice
  constexpr int BCH = BK * kF64BN / 2 / NT;
  constexpr int ACPR = BK / 2;                        // chunks per A row
  KL_DYNAMIC_SMEM(smem);
  double *ring = reinterpret_cast<double *>(smem);
  const kl_strassen_sum_leaf &lf = p.leaf[blockIdx.z];
  const int64_t bm = int64_t(blockIdx.y) * BM, bn = int64_t(blockIdx.x) * kF64BN;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;  // WM x 4 warps of 64 x 32
  const int g = lane >> 2, t = lane & 3;
  const int64_t ktiles = (p.k + BK - 1) / BK;
  const bool vecb = vec != 0;

  // relative signs of the sources (source 0's sign goes into the epilogue's coefficient)
  double xs[SA], ys[SB];
  const uint32_t x0 = lf.xneg & 1u, y0 = lf.yneg & 1u;
#pragma unroll
  for (int s = 0; s < SA; ++s) xs[s] = (((lf.xneg >> s) & 1u) ^ x0) ? -1.0 : 1.0;
#pragma unroll
  for (int s = 0; s < SB; ++s) ys[s] = (((lf.yneg >> s) & 1u) ^ y0) ? -1.0 : 1.0;
  const double lead_sign = (x0 ^ y0) ? -1.0 : 1.0;

  auto load_stage = [&](int64_t kt, int stage) {
    double *base = ring + stage * STAGE;
    const int64_t k0 = kt * BK;
#pragma unroll
    for (int s = 0; s < SA; ++s) {
      const bool live = s < lf.nx;
      const double *X = static_cast<const double *>(lf.x[live ? s : 0]);
#pragma unroll
      for (int i = 0; i < ACH; ++i) {
        const int ch = tid + i * NT, r = ch / ACPR, cc = (ch % ACPR) * 2;
        f64_chunk(base + s * Tile::A + r * PA + cc, X, p.ldx, bm + r, k0 + cc, p.m, p.k, vecb,
                  live);
      }
    }
#pragma unroll
    for (int s = 0; s < SB; ++s) {
      const bool live = s < lf.ny;
      const double *Y = static_cast<const double *>(lf.y[live ? s : 0]);
#pragma unroll
      for (int i = 0; i < BCH; ++i) {
        const int ch = tid + i * NT, r = ch >> 6, cc = (ch & 63) * 2;
        f64_chunk(base + SA * Tile::A + s * Tile::B + r * PB + cc, Y, p.ldy, k0 + r, bn + cc,
                  p.k, p.n, vecb, live);
      }
    }
  };

  double acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0;

#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    kl::cu::cp_async_commit();
  }

  // A fragment pair (rows g and g + 8 of m-fragment i, k pair 2t at kk) of every source, summed
  auto a_pair = [&](const double *as, int i, int kk, double2 &lo, double2 &hi) {
    const double *pa = as + (wm * 64 + i * 16 + g) * PA + kk + 2 * t;
    lo = *reinterpret_cast<const double2 *>(pa);
    hi = *reinterpret_cast<const double2 *>(pa + 8 * PA);
#pragma unroll
    for (int s = 1; s < SA; ++s) {
      const double2 l2 = *reinterpret_cast<const double2 *>(pa + s * Tile::A);
      const double2 h2 = *reinterpret_cast<const double2 *>(pa + s * Tile::A + 8 * PA);
      lo.x = fma(xs[s], l2.x, lo.x);
      lo.y = fma(xs[s], l2.y, lo.y);
      hi.x = fma(xs[s], h2.x, hi.x);
      hi.y = fma(xs[s], h2.y, hi.y);
    }
  };
  auto b_pair = [&](const double *bs, int j, int kk, double &b0, double &b1) {
    const double *pb = bs + (kk + 2 * t) * PB + wn * 32 + j * 8 + g;
    b0 = pb[0];
    b1 = pb[PB];
#pragma unroll
    for (int s = 1; s < SB; ++s) {
      b0 = fma(ys[s], pb[s * Tile::B], b0);
      b1 = fma(ys[s], pb[s * Tile::B + PB], b1);
    }
  };

  for (int64_t kt = 0; kt < ktiles; ++kt) {
    kl::cu::cp_async_wait<ST - 2>();
    __syncthreads();
    const int64_t next = kt + ST - 1;
    if (next < ktiles) load_stage(next, int(next % ST));
    kl::cu::cp_async_commit();
    const double *as = ring + int(kt % ST) * STAGE;
    const double *bs = as + SA * Tile::A;
    if constexpr (K16) {
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        double a[4][8], b[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          double2 lo, hi, lo2, hi2;
          a_pair(as, i, kk, lo, hi);
          a_pair(as, i, kk + 8, lo2, hi2);
          a[i][0] = lo.x, a[i][1] = hi.x, a[i][2] = lo.y, a[i][3] = hi.y;
          a[i][4] = lo2.x, a[i][5] = hi2.x, a[i][6] = lo2.y, a[i][7] = hi2.y;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          b_pair(bs, j, kk, b[j][0], b[j][1]);
          b_pair(bs, j, kk + 8, b[j][2], b[j][3]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_f64_k16(acc[i][j], a[i], b[j]);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < BK; kk += 8) {
        double a[4][4], b[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          double2 lo, hi;
          a_pair(as, i, kk, lo, hi);
          a[i][0] = lo.x, a[i][1] = hi.x, a[i][2] = lo.y, a[i][3] = hi.y;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) b_pair(bs, j, kk, b[j][0], b[j][1]);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_f64_k8(acc[i][j], a[i], b[j]);
      }
    }
  }
  kl::cu::cp_async_wait<0>();

  const bool pair_ok = vecb && (p.ldc % 2 == 0);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = bm + wm * 64 + i * 16 + g, c = bn + wn * 32 + j * 8 + 2 * t;
      f64_epilogue_pair(p, lf, lead_sign, r, c, acc[i][j][0], acc[i][j][1], pair_ok);
      f64_epilogue_pair(p, lf, lead_sign, r + 8, c, acc[i][j][2], acc[i][j][3], pair_ok);
    }
}

}  // namespace kl_strassen

#endif
