// CP-ALS's factor update in one launch (tensor.h, kl_tensor_spd_solve): the Hadamard product of
// the other modes' Gram matrices, its ridge, its factorization and the solve against the MTTKRP.
//
// Why not cuSOLVER: at rank 64 the system is 64 x 64 with ~640 right-hand sides, ~20 MFLOP, yet
// torch's solve_ex (getrf + getrs) took ~0.19 ms of an H100 per update, plus ~8 small launches
// for the Hadamard product and the ridge: ~0.5 ms of a 1.55 ms CP-ALS iteration at 640^3 rank
// 64.  Here every block redoes the (tiny) factorization in shared memory and solves its own 32
// right-hand sides, so nothing waits for another block.
//
// The factorization is L D L^T without pivoting, one __syncthreads a column.  V + rho I (V
// positive semi-definite, rho = eps * max diag V) has every pivot >= rho in exact arithmetic
// (the Schur complements of a matrix >= rho I are >= rho I), so a pivot that rounding pushed
// below rho is raised to rho; NaN and infinity pass through to the result, where CP-ALS sees a
// non-finite fit and redoes the sweep by pseudo-inverses.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_device.hpp"
#include "tensor.h"

namespace {

constexpr int RP = KL_TENSOR_MAX_RANK;  // 64: rows held by a warp, two a lane
constexpr int LD = RP + 1;              // row stride of the staged matrix: columns conflict-free
constexpr int WARPS = 8;
constexpr int THREADS = 32 * WARPS;
constexpr int COLS = 4;                 // right-hand sides a warp
constexpr int BLOCK_COLS = WARPS * COLS;

template <typename T>
struct Args {
  const T *g[KL_TENSOR_SOLVE_MAX_GRAMS];
  int32_t count, rank;
  const T *rhs;
  T *out;
  int64_t n, ld_rhs, ld_out;
  T eps;
  T *ws;  // PHASE 1 writes, PHASE 2 reads: the unit lower factor (R x R) and 1 / D (R)
};

// *p = max(*p, v) for non-negative (or NaN) v, through the bits' unsigned order
__device__ __forceinline__ void atomic_max_bits(float *p, float v) {
  atomicMax(reinterpret_cast<unsigned int *>(p), __float_as_uint(v));
}
__device__ __forceinline__ void atomic_max_bits(double *p, double v) {
  atomicMax(reinterpret_cast<unsigned long long *>(p),
            static_cast<unsigned long long>(__double_as_longlong(v)));
}

// (L D L^T) x = z for a warp's COLS right-hand sides, rows lane and lane + 32 of each in z:
// L (unit lower, below the diagonal of A) and 1 / D from the factorization
template <typename T>
__device__ __forceinline__ void substitute(const T *A, const T *inv_d, int R, int lane,
                                           T (&z)[2][COLS]) {
  // L z = y
  for (int k = 0; k < R; ++k) {
    T zk[COLS];
#pragma unroll
    for (int q = 0; q < COLS; ++q)
      zk[q] = __shfl_sync(0xffffffffu, k < 32 ? z[0][q] : z[1][q], k & 31);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane + 32 * h;
      if (row > k && row < R) {
        const T l = A[row * LD + k];
#pragma unroll
        for (int q = 0; q < COLS; ++q) z[h][q] -= l * zk[q];
      }
    }
  }
  // D w = z
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = lane + 32 * h;
    const T s = row < R ? inv_d[row] : T(0);
#pragma unroll
    for (int q = 0; q < COLS; ++q) z[h][q] *= s;
  }
  // L^T x = w, from the last row up
  for (int k = R - 1; k > 0; --k) {
    T xk[COLS];
#pragma unroll
    for (int q = 0; q < COLS; ++q)
      xk[q] = __shfl_sync(0xffffffffu, k < 32 ? z[0][q] : z[1][q], k & 31);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane + 32 * h;
      if (row < k) {
        const T l = A[k * LD + row];
#pragma unroll
        for (int q = 0; q < COLS; ++q) z[h][q] -= l * xk[q];
      }
    }
  }
}

// FAST: the factorization's loads issued ahead of its stores (variant 1); else a row at a time
// (variant 0, the first version: 66 us a rank-64 solve on an H100).  PHASE 0: all in one
// launch; 1: one block factorizes and writes the factor to ws (CP-ALS runs it on a side stream
// while the tensor pass before the update runs); 2: each block loads the factor from ws and
// solves its right-hand sides; 3: as 1, but the block then solves against the identity and
// writes V^-1 (R x R) to ws (and zero to ws[R * R]); 4: each block loads V^-1 from ws and
// multiplies its right-hand sides by it (and the result's largest magnitude to ws[R * R]) (64 independent multiply-adds a row where the substitutions are two chains of 64
// dependent steps: CP-ALS's update after a tensor pass shrinks to a product).
template <typename T, bool FAST, int PHASE>
__global__ void __launch_bounds__(THREADS) spd_solve_kernel(Args<T> a) {
  __shared__ T A[RP * LD];
  __shared__ T inv_d[RP];
  __shared__ T rho_s;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int R = a.rank;
  if (PHASE == 2 || PHASE == 4) {  // (4: A holds V^-1)
    for (int idx = tid; idx < R * R; idx += THREADS) {
      const int i = idx / R;
      A[i * LD + idx - i * R] = a.ws[idx];
    }
    if (PHASE == 2 && tid < R) inv_d[tid] = a.ws[R * R + tid];
    __syncthreads();
  } else {

  // V = the Hadamard product of the Gram matrices (row-major R x R; its lower half is used)
  if (FAST) {  // all of a thread's loads in flight at once (up to 16 elements, 8 matrices)
    constexpr int PER = RP * RP / THREADS;
    T v[PER];
#pragma unroll
    for (int s = 0; s < PER; ++s) {
      const int idx = tid + s * THREADS;
      v[s] = idx < R * R ? a.g[0][idx] : T(0);
    }
#pragma unroll
    for (int k = 1; k < KL_TENSOR_SOLVE_MAX_GRAMS; ++k)  // (constant indices: no local copy)
      if (k < a.count) {
#pragma unroll
        for (int s = 0; s < PER; ++s) {
          const int idx = tid + s * THREADS;
          if (idx < R * R) v[s] *= a.g[k][idx];
        }
      }
#pragma unroll
    for (int s = 0; s < PER; ++s) {
      const int idx = tid + s * THREADS;
      if (idx < R * R) {
        const int i = idx / R;
        A[i * LD + idx - i * R] = v[s];
      }
    }
  } else {
    for (int idx = tid; idx < R * R; idx += THREADS) {
      const int i = idx / R, j = idx - i * R;
      T v = a.g[0][idx];
#pragma unroll
      for (int k = 1; k < KL_TENSOR_SOLVE_MAX_GRAMS; ++k)
        if (k < a.count) v *= a.g[k][idx];
      A[i * LD + j] = v;
    }
  }
  __syncthreads();
  if (warp == 0) {  // rho = eps * the largest diagonal entry (at least 1e-30)
    T d = T(1e-30);
    for (int i = lane; i < R; i += 32) d = A[i * LD + i] > d ? A[i * LD + i] : d;
    for (int o = 16; o; o >>= 1) {
      const T e = __shfl_xor_sync(0xffffffffu, d, o);
      d = e > d ? e : d;
    }
    if (lane == 0) rho_s = a.eps * d;
  }
  __syncthreads();
  const T rho = rho_s;
  if (tid < R) A[tid * LD + tid] += rho;
  __syncthreads();

  // L D L^T, unscaled: step k subtracts A[i][k] A[j][k] / d_k from the trailing lower triangle
  // (it reads column k, writes only columns > k: one barrier a step)
  for (int k = 0; k < R; ++k) {
    T d = A[k * LD + k];
    if (d < rho) d = rho;  // (NaN stays NaN)
    const T inv = T(1) / d;
    if (tid == 0) inv_d[k] = inv;
    if (FAST) {
      // lane: columns j0 = k + 1 + lane and j0 + 32; warp: rows k + 1 + warp + 8 r.  Every
      // load of the step is issued before its first store (a row at a time, the chain of
      // dependent shared-memory round trips made the step ~1000 cycles: 66 us a solve)
      const int j0 = k + 1 + lane, j1 = j0 + 32;
      const T ajk0 = j0 < R ? A[j0 * LD + k] : T(0);
      const T ajk1 = j1 < R ? A[j1 * LD + k] : T(0);
      constexpr int ROWS = RP / WARPS;
      T aik[ROWS], x0[ROWS], x1[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int i = k + 1 + warp + WARPS * r;
        aik[r] = i < R ? A[i * LD + k] * inv : T(0);
        x0[r] = i < R && j0 <= i ? A[i * LD + j0] : T(0);
        x1[r] = i < R && j1 <= i ? A[i * LD + j1] : T(0);
      }
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int i = k + 1 + warp + WARPS * r;
        if (i < R && j0 <= i) A[i * LD + j0] = x0[r] - aik[r] * ajk0;
        if (i < R && j1 <= i) A[i * LD + j1] = x1[r] - aik[r] * ajk1;
      }
    } else {
      for (int i = k + 1 + warp; i < R; i += WARPS) {
        const T aik = A[i * LD + k] * inv;
        for (int j = k + 1 + lane; j <= i; j += 32) A[i * LD + j] -= aik * A[j * LD + k];
      }
    }
    __syncthreads();
  }
  // the unit lower factor: l_ik = A[i][k] / d_k
  for (int idx = tid; idx < R * R; idx += THREADS) {
    const int i = idx / R, k = idx - i * R;
    if (k < i) A[i * LD + k] *= inv_d[k];
  }
  __syncthreads();
  if (PHASE == 1) {
    for (int idx = tid; idx < R * R; idx += THREADS) {
      const int i = idx / R;
      a.ws[idx] = A[i * LD + idx - i * R];
    }
    if (tid < R) a.ws[R * R + tid] = inv_d[tid];
    return;
  }
  if (PHASE == 3) {  // V^-1 = the solves against the identity's columns, COLS a warp a pass
    if (tid == 0) a.ws[R * R] = T(0);  // (phase 4's largest magnitude, an atomic max from 0)
    for (int c0 = warp * COLS; c0 < R; c0 += BLOCK_COLS) {
      T z[2][COLS];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < COLS; ++q) z[h][q] = lane + 32 * h == c0 + q ? T(1) : T(0);
      substitute(A, inv_d, R, lane, z);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < COLS; ++q) {
          const int row = lane + 32 * h;
          if (row < R && c0 + q < R) a.ws[row * R + c0 + q] = z[h][q];
        }
    }
    return;
  }
  }  // (PHASE != 2, 4)

  // this warp's right-hand sides, rows lane and lane + 32 of each in registers
  const int64_t c0 = int64_t(blockIdx.x) * BLOCK_COLS + warp * COLS;
  T z[2][COLS];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < COLS; ++q) {
      const int row = lane + 32 * h;
      const int64_t col = c0 + q;
      z[h][q] = row < R && col < a.n ? a.rhs[row * a.ld_rhs + col] : T(0);
    }
  if (PHASE == 4) {  // x = V^-1 y: independent products, no chain of dependent steps
    T x[2][COLS];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int q = 0; q < COLS; ++q) x[h][q] = T(0);
    for (int k = 0; k < R; ++k) {
      T yk[COLS];
#pragma unroll
      for (int q = 0; q < COLS; ++q)
        yk[q] = __shfl_sync(0xffffffffu, k < 32 ? z[0][q] : z[1][q], k & 31);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = lane + 32 * h;
        const T v = row < R ? A[row * LD + k] : T(0);
#pragma unroll
        for (int q = 0; q < COLS; ++q) x[h][q] += v * yk[q];
      }
    }
    // the result's largest magnitude into ws[R * R] (zeroed by phase 3): CP-ALS scales the
    // factor's half copy by it with no pass of its own (the bits of non-negative floats
    // order as unsigned integers; NaN's above infinity's)
    T m = T(0);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int q = 0; q < COLS; ++q) {
        z[h][q] = x[h][q];
        const bool ok = lane + 32 * h < R && c0 + q < a.n;
        const T v = ok ? fabs(x[h][q]) : T(0);  // (fabs: no -0.0, whose sign bit orders last)
        m = v > m || v != v ? v : m;
      }
#pragma unroll
    for (int o = 16; o; o >>= 1) {
      const T e = __shfl_xor_sync(0xffffffffu, m, o);
      m = e > m || e != e ? e : m;
    }
    if (lane == 0) atomic_max_bits(a.ws + R * R, m);
  } else {
    substitute(A, inv_d, R, lane, z);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < COLS; ++q) {
      const int row = lane + 32 * h;
      const int64_t col = c0 + q;
      if (row < R && col < a.n) a.out[row * a.ld_out + col] = z[h][q];
    }
}

template <typename T>
int launch(const kl_tensor_spd_solve *c, cudaStream_t s) {
  Args<T> a;
  for (int k = 0; k < KL_TENSOR_SOLVE_MAX_GRAMS; ++k)
    a.g[k] = static_cast<const T *>(k < c->count ? c->grams[k] : nullptr);
  a.count = c->count;
  a.rank = c->rank;
  a.rhs = static_cast<const T *>(c->rhs);
  a.out = static_cast<T *>(c->out);
  a.n = c->n;
  a.ld_rhs = c->ld_rhs;
  a.ld_out = c->ld_out;
  a.eps = T(c->eps);
  a.ws = static_cast<T *>(c->ws);
  const bool factor_only = c->phase == 1 || c->phase == 3;
  const int64_t blocks = factor_only ? 1 : (c->n + BLOCK_COLS - 1) / BLOCK_COLS;
  if (c->phase == 1)
    c->variant ? spd_solve_kernel<T, true, 1><<<1, THREADS, 0, s>>>(a)
               : spd_solve_kernel<T, false, 1><<<1, THREADS, 0, s>>>(a);
  else if (c->phase == 3)
    spd_solve_kernel<T, true, 3><<<1, THREADS, 0, s>>>(a);
  else if (c->phase == 2)  // (the factorization's variant does not matter here)
    spd_solve_kernel<T, true, 2><<<unsigned(blocks), THREADS, 0, s>>>(a);
  else if (c->phase == 4)
    spd_solve_kernel<T, true, 4><<<unsigned(blocks), THREADS, 0, s>>>(a);
  else if (c->variant)
    spd_solve_kernel<T, true, 0><<<unsigned(blocks), THREADS, 0, s>>>(a);
  else
    spd_solve_kernel<T, false, 0><<<unsigned(blocks), THREADS, 0, s>>>(a);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : kl::fail(KL_ERR_CUDA, cudaGetErrorString(e));
}

}  // namespace

extern "C" int kl_tensor_spd_solve_cuda(const kl_tensor_spd_solve *c, void *stream) {
  if (c->phase < 0 || c->phase > 4 || (c->phase && !c->ws))
    return kl::fail(KL_ERR_INVALID, "tensor spd solve: phase not 0-4, or no workspace");
  const bool factors = c->phase != 2 && c->phase != 4, solves = c->phase != 1 && c->phase != 3;
  if (c->rank < 1 || c->rank > KL_TENSOR_MAX_RANK || (c->dtype != 0 && c->dtype != 1) ||
      (factors && (c->count < 1 || c->count > KL_TENSOR_SOLVE_MAX_GRAMS)) ||
      (solves && (c->n < 1 || c->ld_rhs < c->n || c->ld_out < c->n)))
    return kl::fail(KL_ERR_INVALID, "tensor spd solve: rank above 64, 0 or more than 8 Gram "
                                    "matrices, an empty or inconsistent right-hand side");
  if (solves && (c->n + BLOCK_COLS - 1) / BLOCK_COLS > 0x7fffffff)
    return kl::fail(KL_ERR_INVALID, "tensor spd solve: too many right-hand sides");
  for (int k = 0; factors && k < c->count; ++k)
    if (!c->grams[k]) return kl::fail(KL_ERR_INVALID, "tensor spd solve: a null Gram matrix");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return c->dtype == 0 ? launch<float>(c, s) : launch<double>(c, s);
}
