// CUDA Kronecker-sparse kernel for half types, batch_first, whole (l, j) spans (any d with a
// conflict-free row pitch; instantiated for d = 2, 3 in ks_cuda_launch.cuh): both operands kept in
// shared memory as they lie in global memory, so that nothing passes through registers on its way
// there and the copies run several chunks ahead.
//
// Per slab i the product is, for every j, a GEMM Y[n][k, j] = Σ_l X[n][l, j] · K[k][l, j] whose
// operands have j fastest: a row of X (of K) holds its (l, j) span contiguously.  A block owns BN
// rows n × BK outputs k × all d j; each chunk of TL l brings BN X rows and BK K rows of TL·d
// elements into a ring of NS stages by cp.async (16-byte copies, zero-filled past the ends).
//
// The fragments come from those rows directly.  mma.m16n8k16 lets lane (g, t) hold reduction
// indices 2t, 2t + 1, 2t + 8 and 2t + 9; any one-to-one map from them to l works when A and B
// use the same one, so lane t takes the four consecutive l = 4t .. 4t + 3 of the k16 step:
// one contiguous run of 4·d elements of its row (one to three 8- or 16-byte shared loads), from
// which a byte permute per register picks the (l, l + 1) pair of each j.  The A fragments (rows
// n) and the B fragments (rows k) are built the same way; the row pitch is padded so that the
// lanes of each load phase hit distinct banks (checked at compile time).
//
// Requirements (checked by the launcher): 16-byte aligned x and K, x_ld and c multiples of 8.
#ifndef KRONLINALG_KS_CUDA_NATURAL_CUH
#define KRONLINALG_KS_CUDA_NATURAL_CUH

#include "cuda_ptx.cuh"
#include "ks_cuda_kernels.cuh"
#include "ks_cuda_pipe.cuh"

namespace kl {
namespace ks {

// A lane's run per row and k16 step: 4 l × d two-byte elements, read in pieces of 16 bytes
// (or 8 where 8·d is not a multiple of 16).
constexpr int natural_piece(int d) { return (8 * d) % 16 == 0 ? 16 : 8; }

// Whether rows of `pitch` bytes let every load phase of the lanes' runs (lane (g, t): row g,
// bytes 8·d·t + piece·m) reach distinct banks: phases of 128 / piece lanes.
constexpr bool natural_conflict_free(int d, int pitch) {
  const int piece = natural_piece(d), loads = 8 * d / piece, lanes = 128 / piece;
  for (int m = 0; m < loads; ++m)
    for (int ph = 0; ph < 32; ph += lanes) {
      int owner[32] = {};  // bank -> 1 + the byte address that holds it
      for (int lane = ph; lane < ph + lanes; ++lane) {
        const int addr = (lane / 4) * pitch + 8 * d * (lane % 4) + piece * m;
        for (int w = 0; w < piece / 4; ++w) {
          const int bank = (addr / 4 + w) % 32;
          if (owner[bank] != 0 && owner[bank] != addr + 4 * w + 1) return false;
          owner[bank] = addr + 4 * w + 1;
        }
      }
    }
  return true;
}

// The least pitch (in two-byte elements) of a row of TL·d elements that is conflict free,
// padded in 16-byte steps (cp.async keeps 16-byte alignment); 0 when none within 128 bytes.
constexpr int natural_pitch(int d, int tl) {
  for (int pad = 0; pad < 128; pad += 16)
    if (natural_conflict_free(d, tl * d * 2 + pad)) return (tl * d * 2 + pad) / 2;
  return 0;
}

// Warps WN (rows) × WK (outputs k), each an (MI·16 rows) × (NI·8 k) × d tile; l chunks of TL;
// NS stages.
template <int D, int MI, int NI, int WN, int WK, int TL, int NS>
struct NaturalShape {
  static constexpr int NT = 32 * WN * WK;
  static constexpr int BN = 16 * MI * WN, BK = 8 * NI * WK;
  static constexpr int SPAN = TL * D;  // elements of a row per chunk
  static constexpr int P = natural_pitch(D, TL);
  static_assert(P > 0, "a conflict-free row pitch");
  static_assert(TL % 16 == 0 && SPAN % 8 == 0, "whole k16 steps, whole 16-byte copies");
  static constexpr int XE = BN * P, KE = BK * P, STAGE = XE + KE;
  static constexpr int OP = BK * D + 8;  // staged result rows n of (k, j), padded
  static constexpr int elems = NS * STAGE > BN * OP ? NS * STAGE : BN * OP;
  static constexpr int smem_bytes() { return elems * 2; }
};

// A lane's run of 4·D elements (2·D registers) at `src` in shared memory.
template <int D>
__device__ __forceinline__ void load_natural_run(uint32_t (&w)[2 * D], const void *src) {
  constexpr int piece = natural_piece(D);
  if constexpr (piece == 16) {
#pragma unroll
    for (int q = 0; q < D / 2; ++q) {
      const uint4 v = reinterpret_cast<const uint4 *>(src)[q];
      w[4 * q] = v.x, w[4 * q + 1] = v.y, w[4 * q + 2] = v.z, w[4 * q + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int q = 0; q < D; ++q) {
      const uint2 v = reinterpret_cast<const uint2 *>(src)[q];
      w[2 * q] = v.x, w[2 * q + 1] = v.y;
    }
  }
}

// The (l, l + 1) pair of j for l = 2·h (h = 0, 1) of a run: elements (2h)·D + j and that + D.
template <int D>
__device__ __forceinline__ uint32_t natural_pair(const uint32_t (&w)[2 * D], int h, int j) {
  return pick_halves(w, 2 * h * D + j, 2 * h * D + j + D);
}

template <class T, int D, int MI, int NI, int WN, int WK, int TL, int NS, int MINB>
__global__ void __launch_bounds__(32 * WN * WK, MINB) ks_natural(Params p) {
  typedef NaturalShape<D, MI, NI, WN, WK, TL, NS> S;
  constexpr int NT = S::NT, BN = S::BN, BK = S::BK, P = S::P;
  constexpr bool kBf16 = std::is_same<T, __nv_bfloat16>::value;
  T *smem = reinterpret_cast<T *>(dynamic_smem());

  // k tiles fastest: the blocks that read one X tile run together (it stays in L2)
  int64_t f = blockIdx.x;
  const int64_t k0 = (f % p.nK) * BK;
  f /= p.nK;
  const int64_t n0 = (f % p.nN) * BN, i = f / p.nN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp / WK, wk = warp % WK, g = lane / 4, t = lane % 4;
  const int nmax = int(p.B - n0 < BN ? p.B - n0 : BN);
  const int kmax = int(p.b - k0 < BK ? p.b - k0 : BK);
  const T *X = static_cast<const T *>(p.X);
  const T *K = static_cast<const T *>(p.K);
  const int64_t c = p.c, x_ld = p.x_ld;
  const int64_t nl = (c + TL - 1) / TL;

  // chunk `it`: X rows n at (n0 + n)·x_ld + (i·c + l0)·D, K rows k at ((i·b + k0 + k)·c + l0)·D
  auto issue = [&](int st, int64_t it) {
    T *xs = smem + st * S::STAGE, *ks = xs + S::XE;
    const int64_t l0 = it * TL;
    const int emax = int(c - l0 < TL ? c - l0 : TL) * D;
    async_rows<T, BN, S::SPAN, PaddedRows<P>, NT>(
        xs, X + n0 * x_ld + (i * c + l0) * D, [&](int r) { return r * x_ld; },
        [&](int r) { return r < nmax; }, emax);
    async_rows<T, BK, S::SPAN, PaddedRows<P>, NT>(
        ks, K + ((i * p.b + k0) * c + l0) * D, [&](int r) { return r * c * D; },
        [&](int r) { return r < kmax; }, emax);
  };

  float acc[D][MI][NI][4] = {};

#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < nl) issue(s, s);
    cu::cp_async_commit();
  }
  cu::cp_async_wait<NS - 2>();
  __syncthreads();

  for (int64_t it = 0; it < nl; ++it) {
    // chunk it + NS - 1 goes to the buffer chunk it - 1 used, free since the last barrier
    if (it + NS - 1 < nl) issue(int((it + NS - 1) % NS), it + NS - 1);
    cu::cp_async_commit();

    const T *xs = smem + int(it % NS) * S::STAGE, *ks = xs + S::XE;
    const T *xrow = xs + (wn * MI * 16 + g) * P + 4 * t * D;
    const T *krow = ks + (wk * NI * 8 + g) * P + 4 * t * D;
#pragma unroll
    for (int kk = 0; kk < TL; kk += 16) {
      uint32_t ar[MI][2][2 * D], br[NI][2 * D];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) load_natural_run<D>(ar[mi][h], xrow + (mi * 16 + 8 * h) * P + kk * D);
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) load_natural_run<D>(br[ni], krow + ni * 8 * P + kk * D);
#pragma unroll
      for (int j = 0; j < D; ++j) {
        uint32_t bf[NI][2];
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
          bf[ni][0] = natural_pair<D>(br[ni], 0, j), bf[ni][1] = natural_pair<D>(br[ni], 1, j);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          // rows g, g + 8; reduction slots (2t, 2t + 1) = l 4t, 4t + 1 and (2t + 8, 2t + 9) =
          // l 4t + 2, 4t + 3
          const uint32_t af[4] = {natural_pair<D>(ar[mi][0], 0, j), natural_pair<D>(ar[mi][1], 0, j),
                                  natural_pair<D>(ar[mi][0], 1, j), natural_pair<D>(ar[mi][1], 1, j)};
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) cu::mma_16816<kBf16>(acc[j][mi][ni], af, bf[ni][0], bf[ni][1]);
        }
      }
    }
    cu::cp_async_wait<NS - 2>();
    __syncthreads();
  }
  cu::cp_async_wait<0>();
  __syncthreads();

  // epilogue: staged as rows n of (k, j), Y's order, then 16-byte runs of each row
  T *cs = smem;
#pragma unroll
  for (int j = 0; j < D; ++j)
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = wn * MI * 16 + mi * 16 + g + 8 * (e >> 1);
          const int k = wk * NI * 8 + ni * 8 + 2 * t + (e & 1);
          cs[n * S::OP + k * D + j] = Elem<T>::from_f(acc[j][mi][ni][e]);
        }
  __syncthreads();

  store_staged_rows<T, 8, BN, BK * D, D, NT>(cs, S::OP, static_cast<T *>(p.Y), p.y_ld, n0,
                                           (i * p.b + k0) * D, D, nmax, kmax);
}

}  // namespace ks
}  // namespace kl

#endif
