// The planar copies of the "strided" algorithm for batch_first with d > 1 (structured.py): a row
// of x holds the factor's blocks interleaved as (i, l, j), so no GEMM can read block (i, j) in
// place; one launch copies x to planar order (a, d, B, c), one cuBLAS strided-batched GEMM
// multiplies every block, and one launch copies its (a, d, B, b) result back into y's rows.
//   split: src = x, B rows of pitch ld, each (a, n, d)  ->  dst (a, d, B, n) contiguous
//   merge: src (a, d, B, n) contiguous  ->  dst = y, B rows of pitch ld, each (a, n, d)
// A thread moves a run of V = 16 / sizeof(E) consecutive l (k) of one (row, i): 16-byte accesses
// on both sides and the transpose in registers.  d = 2, 3, 4, 6, 12 and d = V: all d j's at once,
// d vectors each way; other multiples of V: V j's at once, a V x V transpose.
// Other d, rows not 16-byte aligned or n % V != 0: one element per thread.
#ifndef KRONLINALG_KS_CUDA_PLANAR_CUH
#define KRONLINALG_KS_CUDA_PLANAR_CUH

#include <cuda_runtime.h>

#include <cstdint>

namespace kl {
namespace ks {

struct PlanarDims {
  int64_t B, a, n, d;  // rows, blocks per row, run length (c for split, b for merge), d
  int64_t ld;          // pitch of the interleaved rows (elements)
};

__device__ __forceinline__ uint32_t lane_word(const uint4 &v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// Element e of the vectors v, zero-extended (ES bytes per element; indices are compile-time
// constants once the callers' loops unroll, so this folds to register moves and byte permutes).
template <int ES, int NV>
__device__ __forceinline__ uint32_t elem_of(const uint4 (&v)[NV], int e) {
  if constexpr (ES == 4) {
    return lane_word(v[e >> 2], e & 3);
  } else {
    const uint32_t w = lane_word(v[e >> 3], (e >> 1) & 3);
    return (e & 1) ? (w >> 16) : (w & 0xffffu);
  }
}

// in: R x C elements, row-major, in NV vectors; out: the C x R transpose.
template <int ES, int R, int C>
__device__ __forceinline__ void transpose_regs(const uint4 (&in)[R * C * ES / 16],
                                               uint4 (&out)[R * C * ES / 16]) {
  constexpr int NV = R * C * ES / 16, V = 16 / ES;
  const auto src = [](int e) { return (e % R) * C + e / R; };  // out element e = (c, r)
#pragma unroll
  for (int o = 0; o < NV; ++o) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (ES == 4) {
        w[k] = elem_of<ES, NV>(in, src(o * V + k));
      } else {
        w[k] = elem_of<ES, NV>(in, src(o * V + 2 * k)) |
               (elem_of<ES, NV>(in, src(o * V + 2 * k + 1)) << 16);
      }
    }
    out[o] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

constexpr int kPlanarThreads = 128;

// All D j's of a run (d < V, d == V, or d not a multiple of V): split reads the run's V x D
// elements (contiguous) and writes one vector to each of the D planes; merge the reverse.  The
// interleaved side goes through shared memory, so that the block's loads (split) or stores
// (merge) there are consecutive 16-byte pieces (a thread's own D vectors are a D·16-byte stride
// apart: the direct accesses took twice the time of the planar side's on an H100 at d = 12).
// A thread's D vectors sit SD = D | 1 vectors apart in the stage: an odd stride puts the 8
// threads of each 128-byte phase on 8 distinct bank groups (a stride of D = 8 put them all on
// one, D = 4, 12 on two; on an H100 within noise either way: the copies move 2.2-2.9 TB/s of
// the 2.65-3.0 a plain copy of the same bytes does, benchmarks/ks_planar_bw.py).
template <int ES, int D, bool SPLIT>
__global__ void __launch_bounds__(kPlanarThreads) planar_whole(const void *__restrict__ src_,
                                                               void *__restrict__ dst_,
                                                               PlanarDims s) {
  constexpr int V = 16 / ES, T = kPlanarThreads, SD = D | 1;
  __shared__ uint4 stage[T * SD];
  __shared__ int64_t base[T];  // each run's first interleaved element
  const int64_t runs = s.n / V, units = s.B * s.a * runs, u0 = int64_t(blockIdx.x) * T;
  const int t = threadIdx.x;
  const int64_t u = u0 + t, plane = s.B * s.n;
  const bool live = u < units;
  int64_t planar = 0;
  if (live) {
    const int64_t r = u % runs, bi = u / runs, i = bi % s.a, row = bi / s.a;
    base[t] = row * s.ld + (i * s.n + r * V) * D;
    planar = (i * D * s.B + row) * s.n + r * V;
  }
  const int nv = int(units - u0 < T ? units - u0 : T) * D;
  const char *src = static_cast<const char *>(src_);
  char *dst = static_cast<char *>(dst_);
  uint4 in[D], out[D];
  if constexpr (SPLIT) {
    __syncthreads();
    for (int q = t; q < nv; q += T)
      stage[q / D * SD + q % D] =
          __ldg(reinterpret_cast<const uint4 *>(src + (base[q / D] + (q % D) * V) * ES));
    __syncthreads();
    if (!live) return;
#pragma unroll
    for (int m = 0; m < D; ++m) in[m] = stage[t * SD + m];
    transpose_regs<ES, V, D>(in, out);
#pragma unroll
    for (int m = 0; m < D; ++m)
      *reinterpret_cast<uint4 *>(dst + (planar + m * plane) * ES) = out[m];
  } else {
    if (live) {
#pragma unroll
      for (int m = 0; m < D; ++m)
        in[m] = __ldg(reinterpret_cast<const uint4 *>(src + (planar + m * plane) * ES));
      transpose_regs<ES, D, V>(in, out);
#pragma unroll
      for (int m = 0; m < D; ++m) stage[t * SD + m] = out[m];
    }
    __syncthreads();
    for (int q = t; q < nv; q += T)
      *reinterpret_cast<uint4 *>(dst + (base[q / D] + (q % D) * V) * ES) =
          stage[q / D * SD + q % D];
  }
}

// d a multiple of V (2V and more): a thread takes V j's (group g) of a run, V vectors each way.
// Units run g fastest, so a warp's accesses on the interleaved side are runs of d / V vectors.
template <int ES, bool SPLIT>
__global__ void __launch_bounds__(256) planar_groups(const void *__restrict__ src_,
                                                     void *__restrict__ dst_, PlanarDims s) {
  constexpr int V = 16 / ES;
  const int64_t groups = s.d / V, runs = s.n / V;
  const int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= s.B * s.a * runs * groups) return;
  const int64_t g = u % groups, rest = u / groups, r = rest % runs, bi = rest / runs;
  const int64_t i = bi % s.a, row = bi / s.a;
  const int64_t inter = row * s.ld + (i * s.n + r * V) * s.d + g * V;
  const int64_t plane = s.B * s.n, planar = ((i * s.d + g * V) * s.B + row) * s.n + r * V;
  const char *src = static_cast<const char *>(src_);
  char *dst = static_cast<char *>(dst_);
  uint4 in[V], out[V];
#pragma unroll
  for (int m = 0; m < V; ++m)
    in[m] = __ldg(reinterpret_cast<const uint4 *>(
        src + (SPLIT ? inter + m * s.d : planar + m * plane) * ES));
  transpose_regs<ES, V, V>(in, out);
#pragma unroll
  for (int m = 0; m < V; ++m)
    *reinterpret_cast<uint4 *>(dst + (SPLIT ? planar + m * plane : inter + m * s.d) * ES) = out[m];
}

// Any shape and alignment: one element per thread, in the interleaved side's order.
template <class E, bool SPLIT>
__global__ void __launch_bounds__(256) planar_elems(const void *__restrict__ src_,
                                                    void *__restrict__ dst_, PlanarDims s) {
  const E *src = static_cast<const E *>(src_);
  E *dst = static_cast<E *>(dst_);
  const int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= s.B * s.a * s.n * s.d) return;
  const int64_t j = u % s.d, rest = u / s.d, l = rest % s.n, bi = rest / s.n;
  const int64_t i = bi % s.a, row = bi / s.a;
  const int64_t inter = row * s.ld + (i * s.n + l) * s.d + j;
  const int64_t planar = ((i * s.d + j) * s.B + row) * s.n + l;
  if constexpr (SPLIT)
    dst[planar] = src[inter];
  else
    dst[inter] = src[planar];
}

template <class K>
inline cudaError_t launch_units(K kernel, int64_t units, const void *src, void *dst,
                                const PlanarDims &s, cudaStream_t st, int threads = 256) {
  const int64_t blocks = (units + threads - 1) / threads;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  kernel<<<unsigned(blocks), threads, 0, st>>>(src, dst, s);
  return cudaGetLastError();
}

template <int ES, int D, bool SPLIT>
cudaError_t launch_whole(int64_t runs, const void *src, void *dst, const PlanarDims &s,
                         cudaStream_t st) {
  return launch_units(planar_whole<ES, D, SPLIT>, runs, src, dst, s, st, kPlanarThreads);
}

template <int ES, bool SPLIT>
cudaError_t launch_planar_vec(const PlanarDims &s, const void *src, void *dst, cudaStream_t st) {
  constexpr int V = 16 / ES;
  const int64_t runs = s.B * s.a * (s.n / V);
  switch (s.d) {
    case 2: return launch_whole<ES, 2, SPLIT>(runs, src, dst, s, st);
    case 3: return launch_whole<ES, 3, SPLIT>(runs, src, dst, s, st);
    case 4: return launch_whole<ES, 4, SPLIT>(runs, src, dst, s, st);
    case 6: return launch_whole<ES, 6, SPLIT>(runs, src, dst, s, st);
    case 12: return launch_whole<ES, 12, SPLIT>(runs, src, dst, s, st);
  }
  if (s.d == V) return launch_whole<ES, V, SPLIT>(runs, src, dst, s, st);  // halves: d = 8
  if (s.d % V == 0) return launch_units(planar_groups<ES, SPLIT>, runs * (s.d / V), src, dst, s, st);
  return cudaErrorNotSupported;
}

// Whether the 16-byte paths apply: both sides 16-byte aligned, runs of whole vectors, and a
// d they have code for (launch_planar_vec: whole-d runs or groups of V j's; else the element
// path).
inline bool planar_vectors(const PlanarDims &s, int es, const void *src, const void *dst) {
  const int V = 16 / es;
  const auto aligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const bool whole_d = s.d == 2 || s.d == 3 || s.d == 4 || s.d == 6 || s.d == 12 || s.d == V;
  return es <= 4 && (whole_d || s.d % V == 0) && aligned(src) && aligned(dst) &&
         s.n % V == 0 && (s.B <= 1 || (s.ld * es) % 16 == 0);
}

template <bool SPLIT>
cudaError_t launch_planar(const PlanarDims &s, int es, const void *src, void *dst, cudaStream_t st) {
  if (planar_vectors(s, es, src, dst))
    return es == 2 ? launch_planar_vec<2, SPLIT>(s, src, dst, st)
                   : launch_planar_vec<4, SPLIT>(s, src, dst, st);
  const int64_t units = s.B * s.a * s.n * s.d;
  switch (es) {
    case 2: return launch_units(planar_elems<uint16_t, SPLIT>, units, src, dst, s, st);
    case 4: return launch_units(planar_elems<uint32_t, SPLIT>, units, src, dst, s, st);
    case 8: return launch_units(planar_elems<uint64_t, SPLIT>, units, src, dst, s, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace ks
}  // namespace kl

#endif
