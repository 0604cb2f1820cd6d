// CP-ALS's fit terms in one launch (tensor.h, kl_tensor_fit_terms): ||X^||^2 = w^T (o Grams) w
// and <X, X^> = sum_r w_r sum_i Y[r, i] F[r, i], summed in float64 in a fixed order.  The
// library route is ~12 launches of a few microseconds each at rank 64 (~20 us in the CUDA graph
// of a sweep).  A block a rank index r writes its two partial sums; the last block to finish
// (a ticket counter) adds them in order of r and resets the counter.  With `gram`, block r
// also forms row r of the last factor's Gram matrix first (CP-ALS's Gram launch before the fit,
// a cuBLAS GEMM and its split-K reduction, ~9 us on an H100 at rank 64 x 640, disappears).  (A first version with
// one block for everything took 44.5 us on an H100 at rank 64 x 640: one multiprocessor read
// both 64 x 640 arrays.)
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_device.hpp"
#include "tensor.h"

namespace {

constexpr int THREADS = 256;

template <typename T>
struct FitArgs {
  const T *g[KL_TENSOR_SOLVE_MAX_GRAMS];
  int32_t count, rank;
  const T *w, *y, *f;
  int64_t n;
  double *out, *part;
  unsigned int *ticket;
  T *gram;  // non-null: f f^T formed here (row r by block r), the Hadamard product's last factor
};

__device__ __forceinline__ void block_sum2(double &a, double &b, double (*red)[THREADS / 32]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if (lane == 0) {
    red[0][warp] = a;
    red[1][warp] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a = b = 0.0;
    for (int w = 0; w < THREADS / 32; ++w) {
      a += red[0][w];
      b += red[1][w];
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(THREADS) fit_terms_kernel(FitArgs<T> a) {
  __shared__ double red[2][THREADS / 32];
  __shared__ T grow[KL_TENSOR_MAX_RANK];
  __shared__ bool last;
  const int tid = threadIdx.x, r = blockIdx.x, R = a.rank;
  const int lane = tid & 31, warp = tid >> 5;
  const double wr = double(a.w[r]);
  double rec = 0.0, ip = 0.0;
  const T *yr = a.y + r * a.n, *fr = a.f + r * a.n;
  if (a.gram) {  // row r of f f^T: a warp the columns j = warp + 8 t (eight sums in flight),
                 // lanes over i, a fixed shuffle tree (the same order in block j for (j, r):
                 // symmetric bit for bit)
    constexpr int WARPS = THREADS / 32, JW = KL_TENSOR_MAX_RANK / WARPS;
    T s[JW];
#pragma unroll
    for (int t = 0; t < JW; ++t) s[t] = T(0);
    for (int64_t i = lane; i < a.n; i += 32) {
      const T fi = fr[i];
#pragma unroll
      for (int t = 0; t < JW; ++t) {
        const int j = warp + WARPS * t;
        if (j < R) s[t] += fi * a.f[j * a.n + i];
      }
    }
#pragma unroll
    for (int t = 0; t < JW; ++t) {
      T v = s[t];
#pragma unroll
      for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      const int j = warp + WARPS * t;
      if (lane == 0 && j < R) {
        grow[j] = v;
        a.gram[r * R + j] = v;
      }
    }
    __syncthreads();
  }
  for (int j = tid; j < R; j += THREADS) {  // row r of the Hadamard product
    T v = a.g[0][r * R + j];
    for (int k = 1; k < a.count; ++k) v *= a.g[k][r * R + j];  // (the library's order, in T)
    if (a.gram) v *= grow[j];
    rec += wr * double(v) * double(a.w[j]);
  }
  for (int64_t i = tid; i < a.n; i += THREADS) ip += double(yr[i] * fr[i]);
  block_sum2(rec, ip, red);
  if (tid == 0) {
    a.part[2 * r] = rec;
    a.part[2 * r + 1] = ip * wr;
    __threadfence();
    last = atomicAdd(a.ticket, 1u) == unsigned(R - 1);
  }
  __syncthreads();
  if (last && tid == 0) {  // every block's partials are visible (their fences, then the ticket)
    __threadfence();
    double s0 = 0.0, s1 = 0.0;
    for (int q = 0; q < R; ++q) {
      s0 += reinterpret_cast<volatile double *>(a.part)[2 * q];
      s1 += reinterpret_cast<volatile double *>(a.part)[2 * q + 1];
    }
    a.out[0] = s0;
    a.out[1] = s1;
    *a.ticket = 0u;
  }
}

template <typename T>
int launch(const kl_tensor_fit_terms *c, cudaStream_t s) {
  FitArgs<T> a;
  for (int k = 0; k < KL_TENSOR_SOLVE_MAX_GRAMS; ++k)
    a.g[k] = static_cast<const T *>(k < c->count ? c->grams[k] : nullptr);
  a.count = c->count;
  a.rank = c->rank;
  a.w = static_cast<const T *>(c->w);
  a.y = static_cast<const T *>(c->y);
  a.f = static_cast<const T *>(c->f);
  a.n = c->n;
  a.out = c->out;
  a.part = c->work;
  a.ticket = reinterpret_cast<unsigned int *>(c->work + 2 * c->rank);
  a.gram = static_cast<T *>(c->gram);
  fit_terms_kernel<T><<<unsigned(c->rank), THREADS, 0, s>>>(a);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : kl::fail(KL_ERR_CUDA, cudaGetErrorString(e));
}

}  // namespace

extern "C" int kl_tensor_fit_terms_cuda(const kl_tensor_fit_terms *c, void *stream) {
  if (c->rank < 1 || c->rank > KL_TENSOR_MAX_RANK || c->count < 1 ||
      c->count + (c->gram ? 1 : 0) > KL_TENSOR_SOLVE_MAX_GRAMS || c->n < 1 ||
      (c->dtype != 0 && c->dtype != 1) ||
      !c->w || !c->y || !c->f || !c->out || !c->work)
    return kl::fail(KL_ERR_INVALID, "tensor fit terms: rank above 64, 0 or more than 8 Gram "
                                    "matrices, an empty factor or a null pointer");
  for (int k = 0; k < c->count; ++k)
    if (!c->grams[k]) return kl::fail(KL_ERR_INVALID, "tensor fit terms: a null Gram matrix");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return c->dtype == 0 ? launch<float>(c, s) : launch<double>(c, s);
}
