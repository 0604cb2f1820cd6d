// CUDA side of strassen_matmul: the element-wise passes of the MSMES schedule over strided
// quadrants, the batched leaf GEMM whose epilogue adds its tile into a table of signed C blocks
// (FP64 on the DMMA tensor cores: on sm_90 CUTLASS's mainloop where the build found CUTLASS,
// strassen_leaf_cutlass.cu, else our m16n8k8 kernel, strassen_leaf_f64.cuh; m8n8k4 before sm_90;
// FP32 IEEE on CUDA cores), the sum leaves of Strassen reloaded (FP64, sm_90), and the target
// update of the cuBLAS-leaf variant.  No atomics: the schedule gives the leaves of one launch disjoint
// targets, so every C element has one writer per launch and the result is bitwise repeatable.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cuda_ptx.cuh"
#include "strassen.h"
#include "strassen_leaf_f64.cuh"
#ifdef KL_HAVE_CUTLASS
#include "strassen_leaf_cutlass.h"
#endif

namespace {

using kl::cu::cp_async_16;
using kl::cu::cp_async_commit;
using kl::cu::cp_async_elem;
using kl::cu::cp_async_wait;

int cuda_fail(cudaError_t err, const char *what) {
  char msg[256];
  std::snprintf(msg, sizeof msg, "strassen %s: %s", what, cudaGetErrorString(err));
  return kl::fail(KL_ERR_CUDA, msg);
}

// ---------------------------------------------------------------------------------------------
// passes: blockIdx.z = 2 * block + (0: A quadrants, 1: B quadrants); x over columns, y over rows

// stage 5: the five sums of Strassen's original products, out of place
template <typename T>
__device__ __forceinline__ void sums_rows(const kl_strassen_pass &p, bool is_a) {
  const int64_t rows = is_a ? p.mh : p.kh, cols = is_a ? p.kh : p.nh;
  const int64_t ld = is_a ? p.lda : p.ldb, lds = is_a ? p.lds_a : p.lds_b;
  const T *src = static_cast<const T *>(is_a ? p.src_a : p.src_b);
  T *const *dst = reinterpret_cast<T *const *>(is_a ? p.a : p.b);
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    const T *s0 = src + i * lds + j, *s2 = s0 + rows * lds;
    const T v0 = s0[0], v1 = s0[cols], v2 = s2[0], v3 = s2[cols];
    const int64_t o = i * ld + j;
    if (is_a) {
      dst[0][o] = v0 + v3;
      dst[1][o] = v2 + v3;
      dst[2][o] = v0 + v1;
      dst[3][o] = v2 - v0;
      dst[4][o] = v1 - v3;
    } else {
      dst[0][o] = v0 + v3;
      dst[1][o] = v1 - v3;
      dst[2][o] = v2 - v0;
      dst[3][o] = v0 + v1;
      dst[4][o] = v2 + v3;
    }
  }
}

// stage 6: the four operand sums of Winograd's form, out of place (S1 = A2 + A3, S2 = S1 - A0,
// S3 = A0 - A2, S4 = A1 - S2; T1 = B1 - B0, T2 = B3 - T1, T3 = B3 - B1, T4 = T2 - B2)
template <typename T>
__device__ __forceinline__ void winograd_sums_rows(const kl_strassen_pass &p, bool is_a) {
  const int64_t rows = is_a ? p.mh : p.kh, cols = is_a ? p.kh : p.nh;
  const int64_t ld = is_a ? p.lda : p.ldb, lds = is_a ? p.lds_a : p.lds_b;
  const T *src = static_cast<const T *>(is_a ? p.src_a : p.src_b);
  T *const *dst = reinterpret_cast<T *const *>(is_a ? p.a : p.b);
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    const T *s0 = src + i * lds + j, *s2 = s0 + rows * lds;
    const T v0 = s0[0], v1 = s0[cols], v2 = s2[0], v3 = s2[cols];
    const int64_t o = i * ld + j;
    if (is_a) {
      const T s1 = v2 + v3, s2v = s1 - v0;
      dst[0][o] = s1;
      dst[1][o] = s2v;
      dst[2][o] = v0 - v2;
      dst[3][o] = v1 - s2v;
    } else {
      const T t1 = v1 - v0, t2 = v3 - t1;
      dst[0][o] = t1;
      dst[1][o] = t2;
      dst[2][o] = v3 - v1;
      dst[3][o] = t2 - v2;
    }
  }
}

// stage 7: Winograd's combination in C's quadrants (a[0], leading dimension lda, mh x nh
// quadrants) after C0 = P1, C1 = P6, C2 = P7, C3 = P5: U2 = C0 + C1, U3 = U2 + C2;
// C1 = U2 + C3 (U4), C2 = U3, C3 = U3 + C3 (U7); C0 keeps P1
template <typename T>
__global__ void winograd_combine_kernel(const __grid_constant__ kl_strassen_pass p) {
  T *base = static_cast<T *>(p.a[0]);
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= p.nh) return;
  for (int64_t i = blockIdx.y; i < p.mh; i += gridDim.y) {
    T *q0 = base + i * p.lda + j, *q1 = q0 + p.nh, *q2 = q0 + p.mh * p.lda, *q3 = q2 + p.nh;
    const T u2 = *q0 + *q1, c3 = *q3;
    const T u3 = u2 + *q2;
    *q1 = u2 + c3;
    *q2 = u3;
    *q3 = u3 + c3;
  }
}

template <typename T>
__global__ void pass_kernel(const __grid_constant__ kl_strassen_pass p) {
  const int blk = blockIdx.z >> 1;
  const bool is_a = (blockIdx.z & 1) == 0;
  const int64_t rows = is_a ? p.mh : p.kh, cols = is_a ? p.kh : p.nh;
  const int64_t ld = is_a ? p.lda : p.ldb;
  T *base = static_cast<T *>(is_a ? p.a[blk] : p.b[blk]);
  if (p.stage == 5) {
    sums_rows<T>(p, is_a);
    return;
  }
  if (p.stage == 6) {
    winograd_sums_rows<T>(p, is_a);
    return;
  }
  const bool copy = p.stage == 4;  // S1 from the source into the private copy
  const T *src = copy ? static_cast<const T *>(is_a ? p.src_a : p.src_b) : base;
  const int64_t lds = copy ? (is_a ? p.lds_a : p.lds_b) : ld;
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    T *q0 = base + i * ld + j, *q1 = q0 + cols, *q2 = q0 + rows * ld, *q3 = q2 + cols;
    const T *s0 = src + i * lds + j, *s2 = s0 + rows * lds;
    const T v0 = s0[0], v1 = s0[cols], v2 = s2[0], v3 = s2[cols];
    if (copy) {
      *q0 = v0;
      *q3 = v3;
    }
    if (is_a) {
      if (p.stage == 1 || copy) {  // A2 += A3; A1 += A0
        *q2 = v2 + v3;
        *q1 = v1 + v0;
      } else if (p.stage == 2) {  // A0 += A3; A2 -= A0; A1 -= A0
        const T s = v0 + v3;
        *q0 = s;
        *q2 = v2 - s;
        *q1 = v1 - s;
      } else {  // A0 -= A3; A1 += A3; A2 += A0
        const T r = v0 - v3;
        *q0 = r;
        *q1 = v1 + v3;
        *q2 = v2 + r;
      }
    } else {
      if (p.stage == 1 || copy) {  // B1 -= B3; B2 -= B0
        *q1 = v1 - v3;
        *q2 = v2 - v0;
      } else if (p.stage == 2) {  // B0 += B3; B1 += B0; B2 += B0
        const T s = v0 + v3;
        *q0 = s;
        *q1 = v1 + s;
        *q2 = v2 + s;
      } else {  // B0 -= B3; B1 -= B0; B2 -= B3
        const T r = v0 - v3;
        *q0 = r;
        *q1 = v1 - r;
        *q2 = v2 - v3;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// the multi-target epilogue: C_t = (first ? beta C_t : C_t) + sign_t alpha v, two adjacent
// columns per call (the mma accumulator layout)

template <typename T>
__device__ __forceinline__ void epilogue_pair(const kl_strassen_leaves &p, const kl_strassen_leaf &lf,
                                              int64_t r, int64_t c, T v0, T v1, bool pair_ok) {
  if (r >= p.m || c >= p.n) return;
  const bool two = c + 1 < p.n;
  const bool read_c = !p.first || p.beta != 0.0;
  const T beta = T(p.beta);
  for (int t = 0; t < lf.ntargets; ++t) {
    const T coef = T(((lf.negative >> t) & 1u) ? -p.alpha : p.alpha);
    T *dst = static_cast<T *>(lf.c[t]) + r * p.ldc + c;
    T o0 = coef * v0, o1 = coef * v1;
    if (two && pair_ok) {
      if (sizeof(T) == 8) {
        double2 *d = reinterpret_cast<double2 *>(dst);
        if (read_c) {
          double2 old = *d;
          o0 += p.first ? beta * T(old.x) : T(old.x);
          o1 += p.first ? beta * T(old.y) : T(old.y);
        }
        *d = make_double2(double(o0), double(o1));
      } else {
        float2 *d = reinterpret_cast<float2 *>(dst);
        if (read_c) {
          float2 old = *d;
          o0 += p.first ? beta * T(old.x) : T(old.x);
          o1 += p.first ? beta * T(old.y) : T(old.y);
        }
        *d = make_float2(float(o0), float(o1));
      }
    } else {
      if (read_c) o0 += p.first ? beta * dst[0] : dst[0];
      dst[0] = o0;
      if (two) {
        if (read_c) o1 += p.first ? beta * dst[1] : dst[1];
        dst[1] = o1;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// FP64 leaf before sm_90: 128 x 128 tiles, k steps of 16 through a 3-stage cp.async ring, 8
// warps of 64 x 32 (DMMA m8n8k4: 8 x 4 accumulator fragments a warp)

constexpr int kBM = 128, kBN = 128, kBK = 16, kStages = 3, kThreads = 256;
constexpr int kPadA = kBK + 4, kPadB = kBN + 4;  // conflict-free fragment loads
constexpr size_t kSmemF64 = size_t(kStages) * (kBM * kPadA + kBK * kPadB) * sizeof(double);

// One 16-byte chunk (2 doubles) of a tile: vector copy where the whole chunk is inside the
// matrix and aligned, element copies (zero-filled outside) elsewhere.
__device__ __forceinline__ void load_chunk_f64(double *dst, const double *src, int64_t ld,
                                               int64_t r, int64_t c, int64_t rows, int64_t cols,
                                               bool vec) {
  if (r < rows && vec && c + 2 <= cols) {
    cp_async_16(dst, src + r * ld + c, true);
    return;
  }
  for (int e = 0; e < 2; ++e) {
    const bool ok = r < rows && c + e < cols;
    cp_async_elem<8>(dst + e, ok ? src + r * ld + c + e : src, ok);
  }
}

__device__ __forceinline__ void dmma(double (&d)[2], double a, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a), "d"(b));
#else
  (void)d;
  (void)a;
  (void)b;
  __trap();
#endif
}

__global__ void __launch_bounds__(kThreads, 1) leaf_f64(const __grid_constant__ kl_strassen_leaves p, int vec) {
  KL_DYNAMIC_SMEM(smem);
  double *As = reinterpret_cast<double *>(smem);
  double *Bs = As + kStages * kBM * kPadA;
  const kl_strassen_leaf &lf = p.leaf[blockIdx.z];
  const double *X = static_cast<const double *>(lf.x);
  const double *Y = static_cast<const double *>(lf.y);
  const int64_t bm = int64_t(blockIdx.y) * kBM, bn = int64_t(blockIdx.x) * kBN;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;  // 2 x 4 warps
  const int64_t ktiles = (p.k + kBK - 1) / kBK;

  auto load_tile = [&](int64_t kt, int stage) {
    double *as = As + stage * kBM * kPadA, *bs = Bs + stage * kBK * kPadB;
    const int64_t k0 = kt * kBK;
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // A: 128 rows x 8 chunks
      const int ch = tid + i * kThreads, r = ch >> 3, cc = (ch & 7) * 2;
      load_chunk_f64(as + r * kPadA + cc, X, p.ldx, bm + r, k0 + cc, p.m, p.k, vec);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // B: 16 rows x 64 chunks
      const int ch = tid + i * kThreads, r = ch >> 6, cc = (ch & 63) * 2;
      load_chunk_f64(bs + r * kPadB + cc, Y, p.ldy, k0 + r, bn + cc, p.k, p.n, vec);
    }
  };

  double acc[8][4][2];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = 0.0;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load_tile(s, s);
    cp_async_commit();
  }
  const int fr = lane >> 2, fc = lane & 3;
  for (int64_t kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int64_t next = kt + kStages - 1;
    if (next < ktiles) load_tile(next, int(next % kStages));
    cp_async_commit();
    const double *as = As + int(kt % kStages) * kBM * kPadA + (wm * 64 + fr) * kPadA + fc;
    const double *bs = Bs + int(kt % kStages) * kBK * kPadB + fc * kPadB + wn * 32 + fr;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 4) {
      double a[8], b[4];
#pragma unroll
      for (int i = 0; i < 8; ++i) a[i] = as[i * 8 * kPadA + kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = bs[kk * kPadB + j * 8];
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) dmma(acc[i][j], a[i], b[j]);
    }
  }
  cp_async_wait<0>();

  const bool pair_ok = vec && (p.ldc % 2 == 0);
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      epilogue_pair<double>(p, lf, bm + wm * 64 + i * 8 + fr, bn + wn * 32 + j * 8 + fc * 2,
                            acc[i][j][0], acc[i][j][1], pair_ok);
}

// ---------------------------------------------------------------------------------------------
// FP32 leaf (IEEE FMAs on CUDA cores): 128 x 128 tiles, k steps of 8, 256 threads of 8 x 8
// outputs (two 4-row and two 4-column strips, 64 apart: conflict-free float4 smem reads),
// the next tile's loads in registers while this one computes

constexpr int kFBK = 8;

__global__ void __launch_bounds__(kThreads, 2) leaf_f32(const __grid_constant__ kl_strassen_leaves p, int vec) {
  __shared__ __align__(16) float As[2][kFBK][kBM];
  __shared__ __align__(16) float Bs[2][kFBK][kBN];
  const kl_strassen_leaf &lf = p.leaf[blockIdx.z];
  const float *X = static_cast<const float *>(lf.x);
  const float *Y = static_cast<const float *>(lf.y);
  const int64_t bm = int64_t(blockIdx.y) * kBM, bn = int64_t(blockIdx.x) * kBN;
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int ar = tid >> 1, ak = (tid & 1) * 4;   // A: row, first k of 4
  const int bk = tid >> 5, bc = (tid & 31) * 4;  // B: k row, first column of 4
  const int64_t ktiles = (p.k + kFBK - 1) / kFBK;
  float ra[4], rb[4];

  auto fetch = [&](int64_t kt) {
    const int64_t k0 = kt * kFBK;
    const int64_t r = bm + ar, kA = k0 + ak;
    if (vec && r < p.m && kA + 4 <= p.k) {
      const float4 v = *reinterpret_cast<const float4 *>(X + r * p.ldx + kA);
      ra[0] = v.x; ra[1] = v.y; ra[2] = v.z; ra[3] = v.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) ra[e] = (r < p.m && kA + e < p.k) ? X[r * p.ldx + kA + e] : 0.f;
    }
    const int64_t kB = k0 + bk, c = bn + bc;
    if (vec && kB < p.k && c + 4 <= p.n) {
      const float4 v = *reinterpret_cast<const float4 *>(Y + kB * p.ldy + c);
      rb[0] = v.x; rb[1] = v.y; rb[2] = v.z; rb[3] = v.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) rb[e] = (kB < p.k && c + e < p.n) ? Y[kB * p.ldy + c + e] : 0.f;
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int e = 0; e < 4; ++e) As[buf][ak + e][ar] = ra[e];
    *reinterpret_cast<float4 *>(&Bs[buf][bk][bc]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
  };

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  if (ktiles > 0) {
    fetch(0);
    store(0);
  }
  __syncthreads();
  for (int64_t kt = 0; kt < ktiles; ++kt) {
    const int buf = int(kt & 1);
    if (kt + 1 < ktiles) fetch(kt + 1);
#pragma unroll
    for (int kk = 0; kk < kFBK; ++kk) {
      float a[8], b[8];
      const float4 a0 = *reinterpret_cast<const float4 *>(&As[buf][kk][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4 *>(&As[buf][kk][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4 *>(&Bs[buf][kk][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4 *>(&Bs[buf][kk][64 + tx * 4]);
      a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w;
      a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
      b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w;
      b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (kt + 1 < ktiles) store(buf ^ 1);
    __syncthreads();
  }

  const bool pair_ok = vec && (p.ldc % 2 == 0);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t r = bm + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
#pragma unroll
    for (int j = 0; j < 8; j += 2) {
      const int64_t c = bn + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      epilogue_pair<float>(p, lf, r, c, acc[i][j], acc[i][j + 1], pair_ok);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// target update of the cuBLAS leaves: M (leaf.x, ldx) into the targets

template <typename T>
__global__ void targets_kernel(const __grid_constant__ kl_strassen_leaves p) {
  const kl_strassen_leaf &lf = p.leaf[blockIdx.z];
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= p.n) return;
  const T beta = T(p.beta);
  for (int64_t i = blockIdx.y; i < p.m; i += gridDim.y) {
    const T v = static_cast<const T *>(lf.x)[i * p.ldx + j];
    for (int t = 0; t < lf.ntargets; ++t) {
      const bool first = p.first || ((lf.fresh >> t) & 1u);
      const T coef = T(((lf.negative >> t) & 1u) ? -p.alpha : p.alpha);
      T *c = static_cast<T *>(lf.c[t]) + i * p.ldc + j;
      T o = coef * v;
      if (!first || p.beta != 0.0) o += first ? beta * *c : *c;
      *c = o;
    }
  }
}

bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

bool leaves_ok(const kl_strassen_leaves *p) {
  if (p->count < 0 || p->count > KL_STRASSEN_MAX_BATCH || p->m < 0 || p->n < 0 || p->k < 0)
    return false;
  for (int l = 0; l < p->count; ++l)
    if (p->leaf[l].ntargets < 0 || p->leaf[l].ntargets > KL_STRASSEN_MAX_TARGETS) return false;
  return true;
}

// Whether every pointer and leading dimension allows 16-byte vector access.
bool vector_ok(const kl_strassen_leaves *p, int elem) {
  const int64_t per = 16 / elem;
  if (p->ldx % per || p->ldy % per || p->ldc % 2) return false;
  for (int l = 0; l < p->count; ++l) {
    if (!aligned16(p->leaf[l].x) || !aligned16(p->leaf[l].y)) return false;
    for (int t = 0; t < p->leaf[l].ntargets; ++t)
      if ((reinterpret_cast<uintptr_t>(p->leaf[l].c[t]) & uintptr_t(2 * elem - 1)) != 0)
        return false;
  }
  return true;
}

// Whether the sum leaves allow 16-byte copies and pair stores.
bool sum_vector_ok(const kl_strassen_sum_leaves *p) {
  if (p->ldx % 2 || p->ldy % 2 || p->ldc % 2) return false;
  for (int l = 0; l < p->count; ++l) {
    const kl_strassen_sum_leaf &lf = p->leaf[l];
    for (int s = 0; s < lf.nx; ++s)
      if (!aligned16(lf.x[s])) return false;
    for (int s = 0; s < lf.ny; ++s)
      if (!aligned16(lf.y[s])) return false;
    for (int t = 0; t < lf.ntargets; ++t)
      if ((reinterpret_cast<uintptr_t>(lf.c[t]) & 15u) != 0) return false;
  }
  return true;
}

bool sm90_or_newer() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return false;
  return major >= 9;
}

// One launch of leaf_f64_mma<...>: the shared-memory attribute set once per instantiation.
template <int BK, int ST, bool K16, int SA, int SB, int WM = 2>
int launch_f64_mma(const kl_strassen_sum_leaves &p, cudaStream_t s) {
  constexpr size_t smem = kl_strassen::f64_leaf_smem<BK, ST, SA, SB, WM>();
  auto kernel = kl_strassen::leaf_f64_mma<BK, ST, K16, SA, SB, WM>;
  static bool attr = false;
  if (!attr) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (err != cudaSuccess) return cuda_fail(err, "leaf shared memory");
    attr = true;
  }
  const int64_t gy = (p.m + 64 * WM - 1) / (64 * WM);
  const int64_t gx = (p.n + kl_strassen::kF64BN - 1) / kl_strassen::kF64BN;
  const dim3 grid(unsigned(gx), unsigned(gy), unsigned(p.count));
  kernel<<<grid, 128 * WM, smem, s>>>(p, sum_vector_ok(&p) ? 1 : 0);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? KL_OK : cuda_fail(err, "leaf launch");
}

// The variant for the launch's source counts (every leaf of a launch has the same counts in the
// schedules; fewer sources than the variant's are zero-filled).  Picked on the H100: see
// docs/strassen_matmul.md's leaf table (benchmarks/strassen_leaf_bench.cu).
int launch_sum_leaves(const kl_strassen_sum_leaves &p, cudaStream_t s) {
  int sa = 1, sb = 1;
  for (int l = 0; l < p.count; ++l) {
    sa = p.leaf[l].nx > sa ? p.leaf[l].nx : sa;
    sb = p.leaf[l].ny > sb ? p.leaf[l].ny : sb;
  }
#ifdef KL_HAVE_CUTLASS
  cudaError_t err = cudaSuccess;  // CUTLASS's mainloop with our multi-target epilogue
  if (sa == 1 && sb == 1 && kl_strassen::cutlass_leaves_f64(p, s, &err))
    return err == cudaSuccess ? KL_OK : cuda_fail(err, "cutlass leaf launch");
#endif
  if (sa == 1 && sb == 1) return launch_f64_mma<32, 3, false, 1, 1>(p, s);
  if (sa <= 2 && sb == 1) return launch_f64_mma<16, 3, false, 2, 1>(p, s);
  if (sa == 1 && sb <= 2) return launch_f64_mma<16, 3, false, 1, 2>(p, s);
  if (sa <= 2 && sb <= 2) return launch_f64_mma<16, 2, false, 2, 2>(p, s);
  return kl::fail(KL_ERR_INVALID, "strassen sum leaves: more than 2 sources per operand");
}

dim3 rows_grid(int64_t cols, int64_t rows, int z) {
  const int64_t gx = (cols + 255) / 256;
  int64_t gy = rows < 1 ? 1 : rows;
  if (gy > 2048) gy = 2048;
  return dim3(unsigned(gx < 1 ? 1 : gx), unsigned(gy), unsigned(z));
}

}  // namespace

extern "C" int kl_strassen_pass_cuda(const kl_strassen_pass *p, int dtype, void *stream) {
  if (p->count < 0 || p->count > KL_STRASSEN_MAX_BATCH || p->stage < 1 || p->stage > 7 ||
      p->mh < 0 || p->kh < 0 || p->nh < 0 || (p->stage == 4 && p->count > 1) ||
      (p->stage == 5 && p->count != 5) || (p->stage == 6 && p->count != 4) ||
      (p->stage == 7 && p->count != 1))
    return kl::fail(KL_ERR_INVALID, "strassen pass: invalid sizes or stage");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p->stage == 7) {  // C's quadrants only
    if (p->mh == 0 || p->nh == 0) return KL_OK;
    const dim3 grid = rows_grid(p->nh, p->mh, 1);
    if (dtype == 0)
      winograd_combine_kernel<float><<<grid, 256, 0, s>>>(*p);
    else if (dtype == 1)
      winograd_combine_kernel<double><<<grid, 256, 0, s>>>(*p);
    else
      return kl::fail(KL_ERR_INVALID, "strassen: only float32 and float64 are supported");
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? KL_OK : cuda_fail(err, "combine launch");
  }
  if (p->count == 0 || (p->mh * p->kh == 0 && p->kh * p->nh == 0)) return KL_OK;
  const int64_t cols = p->kh > p->nh ? p->kh : p->nh, rows = p->mh > p->kh ? p->mh : p->kh;
  // 5, 6: one pair (the sums of A, of B)
  const dim3 grid = rows_grid(cols, rows, p->stage >= 5 ? 2 : 2 * p->count);
  if (dtype == 0)
    pass_kernel<float><<<grid, 256, 0, s>>>(*p);
  else if (dtype == 1)
    pass_kernel<double><<<grid, 256, 0, s>>>(*p);
  else
    return kl::fail(KL_ERR_INVALID, "strassen: only float32 and float64 are supported");
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? KL_OK : cuda_fail(err, "pass launch");
}

extern "C" int kl_strassen_leaf_cuda(const kl_strassen_leaves *p, int dtype, void *stream) {
  if (!leaves_ok(p)) return kl::fail(KL_ERR_INVALID, "strassen leaves: invalid sizes or count");
  if (p->count == 0 || p->m == 0 || p->n == 0) return KL_OK;
  const int64_t gy = (p->m + kBM - 1) / kBM, gx = (p->n + kBN - 1) / kBN;
  if (gy > 65535 || gx > 2147483647)
    return kl::fail(KL_ERR_INVALID, "strassen leaves: too many rows for one launch");
  if (p->k == 0) return kl::fail(KL_ERR_INVALID, "strassen leaves: k = 0 reached the kernel");
  const dim3 grid(unsigned(gx), unsigned(gy), unsigned(p->count));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == 1 && sm90_or_newer()) {  // the m16n8k8 kernel, one source per operand
    kl_strassen_sum_leaves q;
    q.count = p->count;
    q.m = p->m, q.n = p->n, q.k = p->k;
    q.ldx = p->ldx, q.ldy = p->ldy, q.ldc = p->ldc;
    q.alpha = p->alpha, q.beta = p->beta;
    for (int l = 0; l < p->count; ++l) {
      kl_strassen_sum_leaf &d = q.leaf[l];
      const kl_strassen_leaf &o = p->leaf[l];
      d.x[0] = o.x;
      d.y[0] = o.y;
      d.nx = d.ny = 1;
      d.xneg = d.yneg = 0;
      d.ntargets = o.ntargets;
      d.negative = o.negative;
      d.fresh = (p->first ? 0xffffffffu : 0u) | o.fresh;
      for (int t = 0; t < o.ntargets; ++t) d.c[t] = o.c[t];
    }
    return launch_sum_leaves(q, s);
  }
  if (dtype == 1) {
    static bool attr = false;  // set once per process (the attribute is per function)
    if (!attr) {
      const cudaError_t err =
          cudaFuncSetAttribute(leaf_f64, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemF64));
      if (err != cudaSuccess) return cuda_fail(err, "leaf shared memory");
      attr = true;
    }
    leaf_f64<<<grid, kThreads, kSmemF64, s>>>(*p, vector_ok(p, 8) ? 1 : 0);
  } else if (dtype == 0) {
    leaf_f32<<<grid, kThreads, 0, s>>>(*p, vector_ok(p, 4) ? 1 : 0);
  } else {
    return kl::fail(KL_ERR_INVALID, "strassen: only float32 and float64 are supported");
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? KL_OK : cuda_fail(err, "leaf launch");
}

extern "C" int kl_strassen_sum_leaf_cuda(const kl_strassen_sum_leaves *p, int dtype,
                                         void *stream) {
  if (p->count < 0 || p->count > KL_STRASSEN_MAX_BATCH || p->m < 0 || p->n < 0 || p->k < 0)
    return kl::fail(KL_ERR_INVALID, "strassen sum leaves: invalid sizes or count");
  for (int l = 0; l < p->count; ++l) {
    const kl_strassen_sum_leaf &lf = p->leaf[l];
    if (lf.ntargets < 0 || lf.ntargets > KL_STRASSEN_MAX_TARGETS || lf.nx < 1 || lf.ny < 1 ||
        lf.nx > KL_STRASSEN_MAX_SOURCES || lf.ny > KL_STRASSEN_MAX_SOURCES)
      return kl::fail(KL_ERR_INVALID, "strassen sum leaves: invalid sources or targets");
  }
  if (dtype != 1) return kl::fail(KL_ERR_INVALID, "strassen sum leaves: float64 only");
  if (!sm90_or_newer())
    return kl::fail(KL_ERR_INVALID, "strassen sum leaves: need an sm_90 GPU (DMMA m16n8k8)");
  if (p->count == 0 || p->m == 0 || p->n == 0) return KL_OK;
  if (p->k == 0) return kl::fail(KL_ERR_INVALID, "strassen sum leaves: k = 0 reached the kernel");
  if ((p->m + kl_strassen::kF64BM - 1) / kl_strassen::kF64BM > 65535)
    return kl::fail(KL_ERR_INVALID, "strassen sum leaves: too many rows for one launch");
  return launch_sum_leaves(*p, static_cast<cudaStream_t>(stream));
}

extern "C" int kl_strassen_targets_cuda(const kl_strassen_leaves *p, int dtype, void *stream) {
  if (!leaves_ok(p)) return kl::fail(KL_ERR_INVALID, "strassen leaves: invalid sizes or count");
  if (p->count == 0 || p->m == 0 || p->n == 0) return KL_OK;
  const dim3 grid = rows_grid(p->n, p->m, p->count);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == 0)
    targets_kernel<float><<<grid, 256, 0, s>>>(*p);
  else if (dtype == 1)
    targets_kernel<double><<<grid, 256, 0, s>>>(*p);
  else
    return kl::fail(KL_ERR_INVALID, "strassen: only float32 and float64 are supported");
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? KL_OK : cuda_fail(err, "targets launch");
}

extern "C" int kl_strassen_cuda_leaf_tile(int dtype, int *tile) {
#ifdef KL_HAVE_CUTLASS
  if (dtype == 1 && sm90_or_newer() && kl_strassen::cutlass_leaf_tile(tile)) return KL_OK;
#endif
  tile[0] = kBM;
  tile[1] = kBN;
  return KL_OK;
}

extern "C" int kl_strassen_cuda_leaf_kernel(int dtype) {
#ifdef KL_HAVE_CUTLASS
  int tile[2];
  if (dtype == 1 && sm90_or_newer() && kl_strassen::cutlass_leaf_tile(tile))
    return kl_strassen::cutlass_leaf_choice();
#endif
  (void)dtype;
  return 0;
}

extern "C" int kl_strassen_cuda_check(void) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0)
    return kl::fail(KL_ERR_NO_DEVICE, "strassen: no usable CUDA device");
  return KL_OK;
}
