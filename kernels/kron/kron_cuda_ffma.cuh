// The CUDA-core fused sliced-multiply kernel (float32 / float64, and the float32-compute fallback
// for half-precision storage).  See kron_cuda_common.cuh for the shared-memory layout.
//
// One persistent block loops over tiles.  Per tile: line table, one asynchronous load of the
// tile into the transposed layout, then each step of the group as a small GEMM out of shared
// memory — thread register tile = V lines x RQ factor columns, factor rows broadcast to the warp —
// and either an in-place write of the step's result as the next step's input (all threads hold
// their accumulators across a barrier, so one buffer suffices), or, on the last step, alpha/beta
// and one store per result straight to its final index.
#ifndef KRONLINALG_KRON_CUDA_FFMA_CUH
#define KRONLINALG_KRON_CUDA_FFMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kron_cuda_common.cuh"

namespace kl {
namespace cu {

template <class T>
struct Chunk16;
template <>
struct Chunk16<float> {
  using type = float4;
};
template <>
struct Chunk16<double> {
  using type = double2;
};

template <class S>
__device__ __forceinline__ float load_as_float(const S *p) {
  return float(*p);
}
template <>
__device__ __forceinline__ float load_as_float<__nv_bfloat16>(const __nv_bfloat16 *p) {
  return __bfloat162float(*p);
}
template <>
__device__ __forceinline__ float load_as_float<__half>(const __half *p) {
  return __half2float(*p);
}

template <class S, class T>
__device__ __forceinline__ S convert_out(T v) {
  return S(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 convert_out<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half convert_out<__half, float>(float v) {
  return __float2half_rn(v);
}

template <class S, class T>
__device__ __forceinline__ T load_elem(const S *p) {
  if constexpr (std::is_same<S, T>::value) {
    return *p;
  } else {
    return T(load_as_float(p));
  }
}

// Factors of the pass (all of them, or the q tile qt of a single-step pass), zero-padded columns.
template <class S, class T>
__device__ void load_factors(const PassP &p, T *Fs, int qt) {
  for (int si = 0; si < p.nsteps; ++si) {
    const StepP &s = p.st[si];
    const S *F = static_cast<const S *>(s.F);
    const int q0 = p.nqt > 1 ? qt * p.TQ : 0;
    const int n = s.P * s.f_ld;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int pp = i / s.f_ld, c = i - pp * s.f_ld, q = q0 + c;
      Fs[s.f_off + i] = q < s.Q ? load_elem<S, T>(F + pp * s.frs + q * s.fcs) : T(0);
    }
  }
}

// Tile -> shared memory, transposed.  Lanes take 2^a_log2 lines x consecutive elements, so a
// warp reads whole 32-byte sectors along the contiguous direction (elements for x @ kron, lines
// for the transposed x of kron @ x) and writes distinct banks.
// Issues the copies; the caller waits (cp.async) before the data is read.  PermTc: the chunk
// permutation of the tensor-core kernels (the 3xTF32 kernel loads its tiles here too).
template <class S, class T, bool PermTc = false>
__device__ void load_tile(const PassP &p, T *buf, const int64_t *xoff) {
  constexpr int V = 16 / sizeof(T);
  const StepP &s0 = p.st[0];
  const S *x = static_cast<const S *>(p.x);
  const int amask = (1 << p.a_log2) - 1;
  if constexpr (std::is_same<S, T>::value) {
    if (p.x_chunk) {
      // lines adjacent in x (a transposed layout): element e of V consecutive lines is one
      // 16-byte chunk both in x and in shared memory; lanes take consecutive line chunks
      const int lcn = p.L / V, units = lcn * p.Bin;
      for (int u = threadIdx.x; u < units; u += blockDim.x) {
        const int e = int(p.div_lc.div(uint32_t(u)));
        const int l = (u - e * lcn) * V;
        const int r = int(p.div_p0.div(uint32_t(e)));
        const int pp = e - r * s0.P;
        T *dst = buf + pp * s0.ld + phys_chunk_of<PermTc>((r * p.L + l) / V) * V;
        const int64_t x0 = xoff[l], x1 = xoff[l + V - 1];
        if (x0 != kNoLine && x1 == x0 + (V - 1) && x0 % V == 0) {
          cp_async_16(dst, x + x0 + e * p.xes, true);
        } else {  // a tile edge: lines past the matrix or across a row block
#pragma unroll
          for (int i = 0; i < V; ++i) {
            const int64_t xo = xoff[l + i];
            cp_async_elem<sizeof(T)>(dst + i, xo != kNoLine ? x + xo + e * p.xes : x,
                                     xo != kNoLine);
          }
        }
      }
      return;
    }
    if (p.x_run) {
      // runs of 8 consecutive elements (8 consecutive p of one row r) of one line, one index
      // decomposition per run; lanes: 2^a_log2 lines x consecutive r at one p, so the 8 stores
      // of a run go to 8 p-rows and a warp's stores to distinct banks
      const int units = p.L * (p.Bin >> 3);
      for (int u = threadIdx.x; u < units; u += blockDim.x) {
        int l, rr, p0;
        run_unit(p, u, &l, &rr, &p0);
        const int rho = rr * p.L + l;
        T *dst = buf + p0 * s0.ld + phys_chunk_of<PermTc>(rho / V) * V + (rho & (V - 1));
        const int64_t xo = xoff[l];
        const bool ok = xo != kNoLine;
        const S *src = ok ? x + xo + (rr * s0.P + p0) : x;
#pragma unroll
        for (int i = 0; i < 8; ++i) cp_async_elem<sizeof(T)>(dst + i * s0.ld, src + (ok ? i : 0), ok);
      }
      return;
    }
  }
  const int total = p.L * p.Bin;
  for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
    const int a = idx & amask, t = idx >> p.a_log2;
    const int lg = int(p.div_bin.div(uint32_t(t)));
    const int e = t - lg * p.Bin;
    const int l = (lg << p.a_log2) + a;
    const int r = int(p.div_p0.div(uint32_t(e)));
    const int pp = e - r * s0.P;
    const int rho = r * p.L + l;
    T *dst = buf + pp * s0.ld + phys_chunk_of<PermTc>(rho / V) * V + (rho & (V - 1));
    const int64_t xo = xoff[l];
    const bool ok = xo != kNoLine;
    const S *src = ok ? x + xo + e * p.xes : x;
    if constexpr (std::is_same<S, T>::value) {
      cp_async_elem<sizeof(T)>(dst, src, ok);
    } else {
      *dst = ok ? load_elem<S, T>(src) : T(0);
    }
  }
}

template <class T, int RQ>
struct Ffma {
  static constexpr int V = 16 / sizeof(T);
  using VT = typename Chunk16<T>::type;
  // enough loads in flight to cover shared-memory latency, within 128 registers
  static constexpr int kUnroll = V * RQ >= 64 ? 2 : 4;

  // acc[i][j] = sum_p in[p, chunk*V + i] * F[p, qg*RQ + j]
  static __device__ __forceinline__ void item(const T *buf, const T *Fs, const StepP &s, int ch,
                                              int qg, T (&acc)[V][RQ]) {
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int j = 0; j < RQ; ++j) acc[i][j] = T(0);
    const T *xp = buf + phys_chunk(ch) * V;
    const T *fp = Fs + s.f_off + qg * RQ;
    const int P = s.P, ld = s.ld, fld = s.f_ld;
#pragma unroll(kUnroll)
    for (int pp = 0; pp < P; ++pp) {
      const VT xv = *reinterpret_cast<const VT *>(xp);
      const T *xa = reinterpret_cast<const T *>(&xv);
      T f[RQ];
#pragma unroll
      for (int j = 0; j < RQ; j += V)
        *reinterpret_cast<VT *>(&f[j]) = *reinterpret_cast<const VT *>(fp + j);
#pragma unroll
      for (int i = 0; i < V; ++i)
#pragma unroll
        for (int j = 0; j < RQ; ++j) acc[i][j] = fma(xa[i], f[j], acc[i][j]);
      xp += ld;
      fp += fld;
    }
  }

  // Result of step `s` -> the next step's input, in place (after a barrier).
  static __device__ __forceinline__ void store_next(const PassP &p, T *buf, const StepP &s,
                                                    const StepP &n, int ch, int qg,
                                                    const T (&acc)[V][RQ]) {
    const int rho0 = ch * V;
    const int r = int(p.div_l.div(uint32_t(rho0)));
    const int l0 = rho0 - r * p.L;
    const int rq = int(s.div_pn.div(uint32_t(r)));
    const int rp = r - rq * n.P;  // p' = r mod P' since P' divides R
    T *row = buf + rp * n.ld;
#pragma unroll
    for (int j = 0; j < RQ; ++j) {
      const int q = qg * RQ + j;
      if (q < s.Q) {
        const int rho = (q * s.Rn + rq) * p.L + l0;
        VT v;
        T *va = reinterpret_cast<T *>(&v);
#pragma unroll
        for (int i = 0; i < V; ++i) va[i] = acc[i][j];
        *reinterpret_cast<VT *>(row + phys_chunk(rho / V) * V) = v;
      }
    }
  }

  // Last step: alpha * acc + beta * y, each result once to k * S + j.
  template <class S>
  static __device__ __forceinline__ void store_global(const PassP &p, const int64_t *yoff,
                                                      const StepP &s, int ch, int qg, int qt,
                                                      const T (&acc)[V][RQ]) {
    S *y = static_cast<S *>(p.y);
    const T alpha = T(p.alpha), beta = T(p.beta);
    const int rho0 = ch * V;
    const int r = int(p.div_l.div(uint32_t(rho0)));
    const int64_t *yl = yoff + (rho0 - r * p.L);
    const int64_t y0 = yl[0];
    bool vec = false;
    if constexpr (std::is_same<S, T>::value)
      vec = p.y_vec && y0 != kNoLine && yl[V - 1] == y0 + (V - 1) && y0 % V == 0;
    const int qbase = (p.nqt > 1 ? qt * p.TQ : 0) + qg * RQ;
    const int64_t kstride = p.S * p.yes;  // output k -> k * S in y
    const int64_t qstride = int64_t(s.R) * kstride;
    const int64_t kbase = (int64_t(qbase) * s.R + r) * kstride;
    const int nq = min(RQ, s.Q - qbase);
#pragma unroll
    for (int j = 0; j < RQ; ++j) {
      if (j >= nq) break;
      const int64_t koff = kbase + j * qstride;
      if constexpr (std::is_same<S, T>::value) {
        if (vec) {
          T *d = y + y0 + koff;
          VT v;
          T *va = reinterpret_cast<T *>(&v);
          if (beta != T(0)) {
            const VT old = *reinterpret_cast<const VT *>(d);
            const T *oa = reinterpret_cast<const T *>(&old);
#pragma unroll
            for (int i = 0; i < V; ++i) va[i] = alpha * acc[i][j] + beta * oa[i];
          } else {
#pragma unroll
            for (int i = 0; i < V; ++i) va[i] = alpha * acc[i][j];
          }
          *reinterpret_cast<VT *>(d) = v;
          continue;
        }
      }
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int64_t yo = yl[i];
        if (yo == kNoLine) continue;
        S *d = y + yo + koff;
        T v = alpha * acc[i][j];
        if (beta != T(0)) v += beta * load_elem<S, T>(d);
        *d = convert_out<S, T>(v);
      }
    }
  }
};

template <class S, class T, int RQ, int MAXT, int MINB>
__global__ void __launch_bounds__(MAXT, MINB) kron_ffma_kernel(const __grid_constant__ PassP p) {
  using K = Ffma<T, RQ>;
  constexpr int V = K::V;
  KL_DYNAMIC_SMEM(smem_raw);
  // factors | data buffer 0 | data buffer 1 | line tables 0 | line tables 1
  T *Fs = reinterpret_cast<T *>(smem_raw);
  T *buf_a = Fs + p.fs_elems;
  T *buf_b = buf_a + p.buf_elems;
  int64_t *tab_a = reinterpret_cast<int64_t *>(buf_b + p.buf_elems);
  int64_t *tab_b = tab_a + 2 * p.L;
  int loaded_qt = -1;
  int64_t t = blockIdx.x;
  if (t < p.ntiles) {
    fill_lines(p, decode_tile(p, t), tab_a, tab_a + p.L);
    __syncthreads();
    load_tile<S, T>(p, buf_a, tab_a);
  }
  for (; t < p.ntiles; t += gridDim.x) {
    const Tile tl = decode_tile(p, t);
    const int64_t tn = t + gridDim.x;
    if (tn < p.ntiles) fill_lines(p, decode_tile(p, tn), tab_b, tab_b + p.L);
    if (tl.qt != loaded_qt) {
      load_factors<S, T>(p, Fs, tl.qt);
      loaded_qt = tl.qt;
    }
    if constexpr (std::is_same<S, T>::value) cp_async_wait_all();  // this tile has landed
    __syncthreads();
    // the next tile streams in while this one is computed
    if (tn < p.ntiles) load_tile<S, T>(p, buf_b, tab_b);
    const int64_t *yoff = tab_a + p.L;
    for (int si = 0; si < p.nsteps; ++si) {
      const StepP &s = p.st[si];
      const int nch = s.R * p.L / V;
      const int items = nch * (s.Qpad / RQ);
      if (si + 1 < p.nsteps) {
        // the planner guarantees items <= blockDim.x: one register tile per thread, held
        // across the barrier so that the result can overwrite the input in place
        T acc[V][RQ];
        const int w = threadIdx.x;
        const bool have = w < items;
        int qg = 0, ch = 0;
        if (have) {
          qg = int(s.div_chunks.div(uint32_t(w)));
          ch = w - qg * nch;
          K::item(buf_a, Fs, s, ch, qg, acc);
        }
        __syncthreads();
        if (have) K::store_next(p, buf_a, s, p.st[si + 1], ch, qg, acc);
        __syncthreads();
      } else {
        for (int w = threadIdx.x; w < items; w += blockDim.x) {
          T acc[V][RQ];
          const int qg = int(s.div_chunks.div(uint32_t(w)));
          const int ch = w - qg * nch;
          K::item(buf_a, Fs, s, ch, qg, acc);
          K::template store_global<S>(p, yoff, s, ch, qg, tl.qt, acc);
        }
      }
    }
    __syncthreads();  // buf_a, its tables and Fs are free again
    T *tb = buf_a;
    buf_a = buf_b;
    buf_b = tb;
    int64_t *tt = tab_a;
    tab_a = tab_b;
    tab_b = tt;
  }
}

}  // namespace cu
}  // namespace kl

#endif
