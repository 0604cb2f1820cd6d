// Tensor-core fused sliced multiply for float32 as 3xTF32 (mma.sync m16n8k8 tf32, float32
// accumulation): each operand x = hi + lo (hi = tf32(x), lo = x - hi, which the mma truncates) and
// acc += a_lo*b_hi + a_hi*b_lo + a_hi*b_hi, small terms first; the dropped lo*lo term leaves an
// error near float32's own.  Passes whose factors all have P % 8 == 0 (kron_cuda.cu pick_kernel
// takes it where every Q >= 16 too; below that the CUDA cores are as fast).
//
// Same tiles, line tables and float32 shared-memory layout ([p][rho], 4-float chunks, see
// kron_cuda_common.cuh) as the CUDA-core kernel, and its tile loader except for lines of
// contiguous elements (load_tile_raw below).  The next tile always streams in (cp.async) while
// this one is computed; steps ping-pong between two buffers and the last one is staged as
// [k][line] for a vectorised copy-out, as in the half tensor-core kernel (kron_cuda_mma.cuh).
//  - A (rho x p): a warp item is 32 rho = 8 chunks; lane (g, t) = (lane / 4, lane % 4) reads
//    chunk g at p = kk + t and kk + t + 4 (two 16-byte loads) and uses its 4 rho as rows g and
//    g + 8 of two m16 tiles.  The permutation of rows is undone on the way out: the
//    accumulators of a lane then hold 4 consecutive rho per column, one 16-byte store.  With the
//    row pitch = 8 (mod 32) floats the loads of each quarter-warp hit 8 distinct bank groups.
//  - B (p x q) is the factor stored transposed Ft[q][p] (pitch P + 4: 8 rows of an ldmatrix
//    fall in 8 bank groups); an 8 x 4-float ldmatrix tile gives lane (g, t) Ft[g][t], the tf32
//    B fragment.  Small factors are split into hi and lo once, when loaded (StepP::f_lo); large
//    ones, which would crowd out the data, are stored once and split per use.
#ifndef KRONLINALG_KRON_CUDA_TF32_CUH
#define KRONLINALG_KRON_CUDA_TF32_CUH

#include "kron_cuda_common.cuh"
#include "kron_cuda_tc.cuh"
#include "kron_cuda_ffma.cuh"  // load_tile<float, float>

namespace kl {
namespace cu {

// Factors transposed, zero-padded columns: split into hi (at f_off) and lo (at f_off + f_lo)
// where f_lo > 0, else as they are.
__device__ inline void load_factors_tf32(const PassP &p, float *Fs) {
  for (int si = 0; si < p.nsteps; ++si) {
    const StepP &s = p.st[si];
    const float *F = static_cast<const float *>(s.F);
    const int n = s.Qpad * s.P;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int q = i / s.P, pp = i - q * s.P;
      const float v = q < s.Q ? F[pp * s.frs + q * s.fcs] : 0.f;
      float *d = Fs + s.f_off + q * s.f_ld + pp;
      if (s.f_lo) {
        uint32_t hi, lo;
        split_tf32(__float_as_uint(v), hi, lo);
        d[0] = __uint_as_float(hi);
        d[s.f_lo] = __uint_as_float(lo);
      } else {
        d[0] = v;
      }
    }
  }
}

// x = hi + lo with hi = x rounded to TF32 (nearest, ties away, as cvt.rna.tf32.f32 does for
// finite x) in integer arithmetic, and lo = x - hi exactly, left unrounded: the tensor core reads
// a TF32 operand's top 19 bits, so lo is truncated there, an error below 2^-21 |x|.  Three
// instructions, two of them dependent, instead of cvt.rna's expansion with its infinity test (an
// infinite x gives hi = x and a NaN lo, as NaN propagates).
__device__ __forceinline__ void split_tf32_int(uint32_t x, uint32_t &hi, uint32_t &lo) {
  hi = (x + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(__uint_as_float(x) - __uint_as_float(hi));
}

template <int WN>
struct Tf32 {
  // acc[i][j]: m16 tile i, n8 tile j of the warp item (mg: 32 rho, ng: 8 * WN columns)
  static __device__ __forceinline__ void compute(const float *in, const float *Fs, const StepP &s,
                                                 int mg, int ng, int nch,
                                                 float (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < WN; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.f;
    const int ld = s.ld;
    // chunks past the step's rows reread the last one (their results are not stored)
    const float *ap = in + phys_chunk_tc(min(mg * 8 + g, nch - 1)) * 4 + t * ld;
    constexpr int NB = WN >= 2 ? WN / 2 : 1;  // ldmatrix x4 (two n-tiles) or x2 (one)
    const float *bh[NB];
#pragma unroll
    for (int jp = 0; jp < NB; ++jp) {
      const int nt = WN >= 2 ? ng * WN + 2 * jp + (mi >> 1) : ng;
      bh[jp] = Fs + s.f_off + (nt * 8 + r8) * s.f_ld + (mi & 1) * 4;
    }
    const int lo_off = s.f_lo;
    const int P = s.P;
#pragma unroll 2
    for (int kk = 0; kk < P; kk += 8) {
      const float4 v0 = *reinterpret_cast<const float4 *>(ap + kk * ld);
      const float4 v1 = *reinterpret_cast<const float4 *>(ap + (kk + 4) * ld);
      const uint32_t raw[2][4] = {
          {__float_as_uint(v0.x), __float_as_uint(v0.y), __float_as_uint(v1.x), __float_as_uint(v1.y)},
          {__float_as_uint(v0.z), __float_as_uint(v0.w), __float_as_uint(v1.z), __float_as_uint(v1.w)}};
      uint32_t ah[2][4], al[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) split_tf32_int(raw[i][e], ah[i][e], al[i][e]);
      uint32_t bhi[WN][2], blo[WN][2];
#pragma unroll
      for (int jp = 0; jp < NB; ++jp) {
        uint32_t th[4], tl[4];
        if constexpr (WN >= 2) {
          ldsm_x4(th, bh[jp] + kk);
          if (lo_off) ldsm_x4(tl, bh[jp] + lo_off + kk);
        } else {
          ldsm_x2(th[0], th[1], bh[jp] + kk);
          if (lo_off) ldsm_x2(tl[0], tl[1], bh[jp] + lo_off + kk);
        }
        if (!lo_off) {  // a large factor, stored once: split here
#pragma unroll
          for (int e = 0; e < (WN >= 2 ? 4 : 2); ++e) split_tf32_int(th[e], th[e], tl[e]);
        }
#pragma unroll
        for (int e = 0; e < (WN >= 2 ? 4 : 2); ++e) {
          bhi[2 * jp + e / 2][e % 2] = th[e];
          blo[2 * jp + e / 2][e % 2] = tl[e];
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j) {  // small terms first
          mma_tf32(acc[i][j], al[i], bhi[j][0], bhi[j][1]);
          mma_tf32(acc[i][j], ah[i], blo[j][0], blo[j][1]);
          mma_tf32(acc[i][j], ah[i], bhi[j][0], bhi[j][1]);
        }
    }
  }

  // Results -> `out`: the next step's input (pitch ldn, P' = pn), or on the last step the
  // staging layout [k][line] (pn = 1, Rn = R).  A lane's chunk g holds rho 4g..4g+3 of the item:
  // rows g, g + 8 of tile 0, then of tile 1.
  static __device__ __forceinline__ void store(const PassP &p, float *out, const StepP &s, int ldn,
                                               int pn, int mg, int ng, int nch,
                                               const float (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ch = mg * 8 + g;
    if (ch >= nch) return;
    const int L = p.L;
    const int rho0 = ch * 4;
    const int r = int(p.div_l.div(uint32_t(rho0)));
    const int l0 = rho0 - r * L;
    const int rq = int(s.div_pn.div(uint32_t(r)));
    const int rp = r - rq * pn;
    float *row = out + rp * ldn;
    const int base = rq * L + l0;
#pragma unroll
    for (int j = 0; j < WN; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = (ng * WN + j) * 8 + 2 * t + h;
        if (q >= s.Q) continue;
        const float4 v = make_float4(acc[0][j][h], acc[0][j][2 + h], acc[1][j][h], acc[1][j][2 + h]);
        *reinterpret_cast<float4 *>(row + phys_chunk_tc((q * s.Rn * L + base) >> 2) * 4) = v;
      }
  }
};

// Passes whose lines are runs of contiguous elements of x (p.x_run): the tile is copied as it
// lies, line after line ([l][e], line pitch Bin), in 16-byte pieces (a warp reads 512 contiguous
// bytes; the CUDA-core loader's 4-byte copies to 8 p-rows keep L1 busy for 32 sectors per
// instruction), and transpose_tile() then moves it into the [p][rho] layout.  Lines outside the
// matrix are zero-filled; a line not 16-byte aligned in x is copied in 4-byte pieces.
__device__ inline void load_tile_raw(const PassP &p, float *raw, const int64_t *xoff) {
  const float *x = static_cast<const float *>(p.x);
  const int per_line = p.Bin >> 2, units = p.L * per_line;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    const int l = int(p.div_bin.div(uint32_t(u) << 2));
    const int c = u - l * per_line;
    float *dst = raw + l * p.Bin + c * 4;
    const int64_t xo = xoff[l];
    if (xo == kNoLine) {
      cp_async_16(dst, x, false);
    } else if (reinterpret_cast<uintptr_t>(x + xo) % 16 == 0) {
      cp_async_16(dst, x + xo + c * 4, true);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) cp_async_elem<4>(dst + i, x + xo + c * 4 + i, true);
    }
  }
}

// [l][e] -> element (p, rho = r * L + l) of the step-0 layout, e = r * P + p: a thread gathers
// one e of 4 consecutive lines (lanes along e: conflict-free loads) into one 16-byte store.
__device__ inline void transpose_tile(const PassP &p, const float *raw, float *buf) {
  const StepP &s0 = p.st[0];
  const int Lc = p.L >> 2, total = Lc * p.Bin;
  for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
    const int lc = int(p.div_bin.div(uint32_t(idx)));
    const int e = idx - lc * p.Bin;
    const int r = int(p.div_p0.div(uint32_t(e)));
    const int pp = e - r * s0.P;
    const float *src = raw + lc * 4 * p.Bin + e;
    const float4 v = make_float4(src[0], src[p.Bin], src[2 * p.Bin], src[3 * p.Bin]);
    *reinterpret_cast<float4 *>(buf + pp * s0.ld + phys_chunk_tc(r * Lc + lc) * 4) = v;
  }
}

// Persistent blocks over tiles, as kron_mma_kernel: with p.prefetch a third buffer takes the
// next tile's copies while this tile is computed (double-buffered line tables); otherwise each
// tile loads, computes and stores in turn.
template <int WN>
__global__ void __launch_bounds__(512, 1) kron_tf32_kernel(const __grid_constant__ PassP p) {
  using K = Tf32<WN>;
  KL_DYNAMIC_SMEM(smem_raw);
  float *Fs = reinterpret_cast<float *>(smem_raw);
  float *in0 = Fs + p.fs_elems;
  float *scr = in0 + p.buf_elems;
  float *pf = scr + p.buf_elems;
  const int nbuf = p.prefetch ? 3 : 2;
  int64_t *tab = reinterpret_cast<int64_t *>(in0 + int64_t(nbuf) * p.buf_elems);
  const int tab_len = 2 * p.L + (p.L >> 2);  // xoff, yoff, ych
  int64_t *tab_n = p.prefetch ? tab + tab_len : tab;
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  // (x_run passes: the next tile lands in pf as it lies in x, and is transposed into in0 when
  // its turn comes)
  const bool raw = p.prefetch && p.x_run && !p.x_chunk;
  int64_t t = blockIdx.x;
  if (t < p.ntiles) load_factors_tf32(p, Fs);
  if (p.prefetch && t < p.ntiles) {
    fill_lines_chunked<4, false>(p, decode_tile(p, t), tab, tab + p.L, nullptr, tab + 2 * p.L);
    __syncthreads();
    if (raw)
      load_tile_raw(p, pf, tab);
    else
      load_tile<float, float, true>(p, in0, tab);
  }
  for (; t < p.ntiles; t += gridDim.x) {
    if (p.prefetch) {
      const int64_t tn = t + gridDim.x;
      if (tn < p.ntiles)
        fill_lines_chunked<4, false>(p, decode_tile(p, tn), tab_n, tab_n + p.L, nullptr,
                                     tab_n + 2 * p.L);
      cp_async_wait_all();  // this tile has landed
      __syncthreads();
      if (raw) {
        transpose_tile(p, pf, in0);
        __syncthreads();
      }
      // the next tile streams in while this one is computed
      if (tn < p.ntiles) {
        if (raw)
          load_tile_raw(p, pf, tab_n);
        else
          load_tile<float, float, true>(p, pf, tab_n);
      }
    } else {
      __syncthreads();
      fill_lines_chunked<4, false>(p, decode_tile(p, t), tab, tab + p.L, nullptr, tab + 2 * p.L);
      __syncthreads();
      load_tile<float, float, true>(p, in0, tab);
      cp_async_wait_all();
      __syncthreads();
    }
    float *in = in0, *out = scr;
    for (int si = 0; si < p.nsteps; ++si) {
      const StepP &s = p.st[si];
      const bool last = si + 1 == p.nsteps;
      const int ldn = last ? 0 : p.st[si + 1].ld;
      const int pn = last ? 1 : p.st[si + 1].P;
      const int nch = (s.R * p.L) >> 2;
      const int mgroups = (nch + 7) >> 3;
      const int items = mgroups * (s.Qpad / (8 * WN));
      for (int w = warp; w < items; w += nwarps) {
        const int ng = int(s.div_chunks.div(uint32_t(w)));
        const int mg = w - ng * mgroups;
        float acc[2][WN][4];
        K::compute(in, Fs, s, mg, ng, nch, acc);
        K::store(p, out, s, ldn, pn, mg, ng, nch, acc);
      }
      __syncthreads();
      float *tmp = in;
      in = out;
      out = tmp;
    }
    copy_out_staged<float>(p, in, tab + p.L, tab + 2 * p.L);
    if (p.prefetch) {
      __syncthreads();  // this tile's buffers and tables are free again
      float *tb = in0;
      in0 = raw ? in0 : pf;  // (raw: pf keeps receiving, in0 keeps the transposed tile)
      pf = raw ? pf : tb;
      int64_t *tt = tab;
      tab = tab_n;
      tab_n = tt;
    }
  }
}

}  // namespace cu
}  // namespace kl

#endif
