// Tensor-core fused sliced multiply for float16 / bfloat16 (mma.sync m16n8k16, float32
// accumulation).  Same tiles, line table and transposed shared-memory layout as the CUDA-core
// kernel (kron_cuda_common.cuh), with 8 elements per 16-byte chunk:
//  - A (16 rows rho x 16 p) comes from the [p][rho] layout through ldmatrix.trans (8 p-rows of
//    one chunk: the row padding puts them in 8 different banks);
//  - B is the factor, stored transposed Ft[q][p] so that ldmatrix (no .trans) yields its
//    fragments;
//  - C (rho x q) goes back through stmatrix.trans (sm_90; scalar stores elsewhere): for a fixed q,
//    8 consecutive rho are 8 consecutive lines, i.e. one 16-byte chunk of the next step's input.
// Steps ping-pong between two buffers; the last step stages its result as [k][line] and a final
// copy (kron_cuda_tc.cuh) writes 16-byte runs of consecutive instances (or rows) to y with
// alpha/beta.
// Intermediates between steps are rounded to the storage type, as between passes.
#ifndef KRONLINALG_KRON_CUDA_MMA_CUH
#define KRONLINALG_KRON_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kron_cuda_common.cuh"
#include "kron_cuda_tc.cuh"

namespace kl {
namespace cu {

template <class H>
struct HalfOps;

template <>
struct HalfOps<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ float tof(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 fromf(float v) { return __float2bfloat16_rn(v); }
  static constexpr bool kBf16 = true;
};

template <>
struct HalfOps<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ float tof(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half fromf(float v) { return __float2half_rn(v); }
  static constexpr bool kBf16 = false;
};

// Position of element (p, rho) of a step input laid out with pitch ld (8 elements per chunk).
__device__ __forceinline__ int hpos(int pp, int ld, int rho) {
  return pp * ld + phys_chunk_tc(rho >> 3) * 8 + (rho & 7);
}

template <class H>
__device__ void load_factors_t(const PassP &p, H *Fs) {
  for (int si = 0; si < p.nsteps; ++si) {
    const StepP &s = p.st[si];
    const H *F = static_cast<const H *>(s.F);
    const int n = s.Qpad * s.P;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int q = i / s.P, pp = i - q * s.P;
      Fs[s.f_off + q * s.f_ld + pp] = q < s.Q ? F[pp * s.frs + q * s.fcs] : H(0.0f);
    }
  }
}

template <class H>
__device__ void load_tile_half(const PassP &p, H *buf, const int64_t *xoff, const int64_t *xch) {
  const StepP &s0 = p.st[0];
  const H *x = static_cast<const H *>(p.x);
  const int amask = (1 << p.a_log2) - 1;
  if (p.x_chunk) {
    // lines adjacent in x: element e of 8 consecutive lines is one 16-byte chunk in x and in
    // shared memory, copied asynchronously (the caller waits); chunks at a tile edge go through
    // registers
    const int lcn = p.L >> 3, units = lcn * p.Bin;
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      const int e = int(p.div_lc.div(uint32_t(u)));
      const int l = (u - e * lcn) << 3;
      const int r = int(p.div_p0.div(uint32_t(e)));
      H *dst = buf + hpos(e - r * s0.P, s0.ld, r * p.L + l);
      const int64_t x0 = xch[l >> 3];
      if (x0 != kNoLine) {
        cp_async_16(dst, x + x0 + e * p.xes, true);
      } else {
        uint4 v;
        H *vh = reinterpret_cast<H *>(&v);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int64_t xo = xoff[l + i];
          vh[i] = xo != kNoLine ? x[xo + e * p.xes] : H(0.0f);
        }
        *reinterpret_cast<uint4 *>(dst) = v;
      }
    }
  } else if (p.x_vec) {
    // units of 8 consecutive elements (8 consecutive p of one row r) of one line: lanes take
    // 2^a_log2 lines x consecutive r at one p group, so a warp's 2-byte stores fill whole
    // chunks of one p-row; eight 16-byte loads are in flight before their stores
    const int units = p.L * (p.Bin >> 3);
    constexpr int kBatch = 8;
    for (int u0 = threadIdx.x; u0 < units; u0 += kBatch * blockDim.x) {
      uint4 v[kBatch];
      int dst[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int u = u0 + b * blockDim.x;
        v[b] = make_uint4(0, 0, 0, 0);
        dst[b] = -1;
        if (u < units) {
          int l, rr, p0;
          run_unit(p, u, &l, &rr, &p0);
          const int64_t xo = xoff[l];
          if (xo != kNoLine) v[b] = *reinterpret_cast<const uint4 *>(x + xo + rr * s0.P + p0);
          dst[b] = hpos(p0, s0.ld, rr * p.L + l);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (dst[b] < 0) continue;
        const H *h = reinterpret_cast<const H *>(&v[b]);
#pragma unroll
        for (int i = 0; i < 8; ++i) buf[dst[b] + i * s0.ld] = h[i];
      }
    }
  } else {
    const int total = p.L * p.Bin;
    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
      const int a = idx & amask, t = idx >> p.a_log2;
      const int lg = int(p.div_bin.div(uint32_t(t)));
      const int e = t - lg * p.Bin;
      const int l = (lg << p.a_log2) + a;
      const int r = int(p.div_p0.div(uint32_t(e)));
      const int pp = e - r * s0.P;
      const int64_t xo = xoff[l];
      buf[hpos(pp, s0.ld, r * p.L + l)] = xo != kNoLine ? x[xo + e * p.xes] : H(0.0f);
    }
  }
}

template <class H, int WM, int WN>
struct Mma {
  using Ops = HalfOps<H>;

  static __device__ __forceinline__ void compute(const H *in, const H *Fs, const StepP &s, int mg,
                                                 int ng, int nmt, float (&acc)[WM][WN][4]) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, row = lane & 7;
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
      for (int j = 0; j < WN; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.f;
    // per-lane row addresses of the A chunks and B rows, advanced along p
    const H *arow[WM];
#pragma unroll
    for (int i = 0; i < WM; ++i) {
      const int mt = min(mg * WM + i, nmt - 1);  // out-of-range tiles reread the last one
      arow[i] = in + phys_chunk_tc(mt * 2 + (mi & 1)) * 8;
    }
    const H *brow[WN / 2];
#pragma unroll
    for (int jp = 0; jp < WN / 2; ++jp)
      brow[jp] = Fs + s.f_off + ((ng * WN + 2 * jp) * 8 + (mi >> 1) * 8 + row) * s.f_ld;
    const int P = s.P, ld = s.ld;
    int kk = 0;
    for (; kk + 16 <= P; kk += 16) {
      uint32_t a[WM][4], b[WN][2];
#pragma unroll
      for (int i = 0; i < WM; ++i) ldsm_x4_trans(a[i], arow[i] + (kk + (mi >> 1) * 8 + row) * ld);
#pragma unroll
      for (int jp = 0; jp < WN / 2; ++jp) {
        uint32_t t4[4];
        ldsm_x4(t4, brow[jp] + kk + (mi & 1) * 8);
        b[2 * jp][0] = t4[0];
        b[2 * jp][1] = t4[1];
        b[2 * jp + 1][0] = t4[2];
        b[2 * jp + 1][1] = t4[3];
      }
#pragma unroll
      for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j) mma_16816<Ops::kBf16>(acc[i][j], a[i], b[j][0], b[j][1]);
    }
    if (kk < P) {  // P = 8 mod 16: one k8 step
      uint32_t a0[WM], a1[WM], b[WN];
#pragma unroll
      for (int i = 0; i < WM; ++i) ldsm_x2_trans(a0[i], a1[i], arow[i] + (kk + row) * ld);
#pragma unroll
      for (int jp = 0; jp < WN / 2; ++jp) {
        // matrices: n-tile 2jp and 2jp+1, p = kk..kk+7 (lanes 0-15 give the addresses)
        const H *bp = Fs + s.f_off + ((ng * WN + 2 * jp + (mi & 1)) * 8 + row) * s.f_ld + kk;
        ldsm_x2(b[2 * jp], b[2 * jp + 1], bp);
      }
#pragma unroll
      for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j) mma_1688<Ops::kBf16>(acc[i][j], a0[i], a1[i], b[j]);
    }
  }

  // Results -> `out`: the next step's input (pitch ldn, P' = pn), or on the last step the
  // staging layout [k][line] (pn = 1, Rn = R).
  static __device__ __forceinline__ void store(const PassP &p, H *out, const StepP &s, int ldn,
                                               int pn, int mg, int ng, int nmt, int RL,
                                               const float (&acc)[WM][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int L = p.L;
#pragma unroll
    for (int i = 0; i < WM; ++i) {
      const int mt = mg * WM + i;
      if (mt >= nmt) continue;
      const int rho_base = mt * 16;
#pragma unroll
      for (int jp = 0; jp < WN / 2; ++jp) {
        const int q_base = (ng * WN + 2 * jp) * 8;
#if KL_HAS_STMATRIX
        if (rho_base + 16 <= RL && q_base + 16 <= s.Q) {
          const int mi = lane >> 3, row = lane & 7;
          const int q = q_base + (mi >> 1) * 8 + row;
          const int rho = rho_base + (mi & 1) * 8;
          const int r = int(p.div_l.div(uint32_t(rho)));
          const int l0 = rho - r * L;
          const int rq = int(s.div_pn.div(uint32_t(r)));
          const int rp = r - rq * pn;
          H *dst = out + hpos(rp, ldn, (q * s.Rn + rq) * L + l0);
          const uint32_t r0 = Ops::pack(acc[i][2 * jp][0], acc[i][2 * jp][1]);
          const uint32_t r1 = Ops::pack(acc[i][2 * jp][2], acc[i][2 * jp][3]);
          const uint32_t r2 = Ops::pack(acc[i][2 * jp + 1][0], acc[i][2 * jp + 1][1]);
          const uint32_t r3 = Ops::pack(acc[i][2 * jp + 1][2], acc[i][2 * jp + 1][3]);
          stsm_x4_trans(dst, r0, r1, r2, r3);
          continue;
        }
#endif
#pragma unroll
        for (int jj = 0; jj < 2; ++jj)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int rho = rho_base + g + 8 * (c >> 1);
            const int q = q_base + 8 * jj + 2 * tq + (c & 1);
            if (rho >= RL || q >= s.Q) continue;
            const int r = int(p.div_l.div(uint32_t(rho)));
            const int l = rho - r * L;
            const int rq = int(s.div_pn.div(uint32_t(r)));
            const int rp = r - rq * pn;
            out[hpos(rp, ldn, (q * s.Rn + rq) * L + l)] = Ops::fromf(acc[i][2 * jp + jj][c]);
          }
      }
    }
  }
};

// Persistent blocks over tiles.  With p.prefetch (passes whose lines are adjacent in x) a third
// buffer takes the next tile's copies (cp.async) while this tile is computed, and the line
// tables are double-buffered; otherwise each tile loads, computes and stores in turn.
template <class H, int WM, int WN>
__global__ void __launch_bounds__(512, 1) kron_mma_kernel(const __grid_constant__ PassP p) {
  using K = Mma<H, WM, WN>;
  KL_DYNAMIC_SMEM(smem_raw);
  H *Fs = reinterpret_cast<H *>(smem_raw);
  H *in0 = Fs + p.fs_elems;
  H *scr = in0 + p.buf_elems;
  H *pf = scr + p.buf_elems;
  const int nbuf = p.prefetch ? 3 : 2;
  int64_t *tab = reinterpret_cast<int64_t *>(in0 + int64_t(nbuf) * p.buf_elems);
  const int tab_len = 2 * p.L + 2 * (p.L >> 3);  // xoff, yoff, xch, ych
  int64_t *tab_n = p.prefetch ? tab + tab_len : tab;
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  int64_t t = blockIdx.x;
  if (t < p.ntiles) load_factors_t<H>(p, Fs);
  if (p.prefetch && t < p.ntiles) {
    fill_lines_chunked<8, true>(p, decode_tile(p, t), tab, tab + p.L, tab + 2 * p.L,
                   tab + 2 * p.L + (p.L >> 3));
    __syncthreads();
    load_tile_half<H>(p, in0, tab, tab + 2 * p.L);
  }
  for (; t < p.ntiles; t += gridDim.x) {
    if (p.prefetch) {
      const int64_t tn = t + gridDim.x;
      if (tn < p.ntiles)
        fill_lines_chunked<8, true>(p, decode_tile(p, tn), tab_n, tab_n + p.L, tab_n + 2 * p.L,
                       tab_n + 2 * p.L + (p.L >> 3));
      cp_async_wait_all();  // this tile has landed
      __syncthreads();
      // the next tile streams in while this one is computed
      if (tn < p.ntiles) load_tile_half<H>(p, pf, tab_n, tab_n + 2 * p.L);
    } else {
      __syncthreads();
      fill_lines_chunked<8, true>(p, decode_tile(p, t), tab, tab + p.L, tab + 2 * p.L,
                     tab + 2 * p.L + (p.L >> 3));
      __syncthreads();
      load_tile_half<H>(p, in0, tab, tab + 2 * p.L);
      cp_async_wait_all();
      __syncthreads();
    }
    H *in = in0, *out = scr;
    for (int si = 0; si < p.nsteps; ++si) {
      const StepP &s = p.st[si];
      const bool last = si + 1 == p.nsteps;
      const int ldn = last ? 0 : p.st[si + 1].ld;
      const int pn = last ? 1 : p.st[si + 1].P;
      const int RL = s.R * p.L;
      const int nmt = (RL + 15) >> 4;
      const int mgroups = (nmt + WM - 1) / WM;
      const int items = mgroups * (s.Qpad / (8 * WN));
      for (int w = warp; w < items; w += nwarps) {
        const int ng = int(s.div_chunks.div(uint32_t(w)));
        const int mg = w - ng * mgroups;
        float acc[WM][WN][4];
        K::compute(in, Fs, s, mg, ng, nmt, acc);
        K::store(p, out, s, ldn, pn, mg, ng, nmt, RL, acc);
      }
      __syncthreads();
      H *tmp = in;
      in = out;
      out = tmp;
    }
    copy_out_staged<H>(p, in, tab + p.L, tab + 2 * p.L + (p.L >> 3));
    if (p.prefetch) {
      __syncthreads();  // this tile's buffers and tables are free again
      H *tb = in0;
      in0 = pf;
      pf = tb;
      int64_t *tt = tab;
      tab = tab_n;
      tab_n = tt;
    }
  }
}

}  // namespace cu
}  // namespace kl

#endif
