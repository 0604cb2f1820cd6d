// CP-ALS's fit terms in one launch (tensor.h, kl_tensor_fit_terms): ||X^||^2 = w^T (o Grams) w
// and <X, X^> = sum_r w_r sum_i Y[r, i] F[r, i], summed in float64 in a fixed order.  The
// library route is ~12 launches of a few microseconds each at rank 64 — more than their work
// in the CUDA graph of a 1 ms sweep.
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
  double *out;
};

template <typename T>
__global__ void __launch_bounds__(THREADS) fit_terms_kernel(FitArgs<T> a) {
  __shared__ double part[2][THREADS / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int R = a.rank;
  double rec = 0.0, ip = 0.0;
  for (int idx = tid; idx < R * R; idx += THREADS) {
    const int i = idx / R, j = idx - i * R;
    T v = a.g[0][idx];
    for (int k = 1; k < a.count; ++k) v *= a.g[k][idx];  // (the library's order, in T)
    rec += double(a.w[i]) * double(v) * double(a.w[j]);
  }
  for (int r = 0; r < R; ++r) {  // rows of Y and F: coalesced across the block
    double s = 0.0;
    for (int64_t i = tid; i < a.n; i += THREADS) s += double(a.y[r * a.n + i] * a.f[r * a.n + i]);
    ip += s * double(a.w[r]);
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    rec += __shfl_xor_sync(0xffffffffu, rec, o);
    ip += __shfl_xor_sync(0xffffffffu, ip, o);
  }
  if (lane == 0) {
    part[0][warp] = rec;
    part[1][warp] = ip;
  }
  __syncthreads();
  if (tid < 2) {
    double s = 0.0;
    for (int w = 0; w < THREADS / 32; ++w) s += part[tid][w];
    a.out[tid] = s;
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
  fit_terms_kernel<T><<<1, THREADS, 0, s>>>(a);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : kl::fail(KL_ERR_CUDA, cudaGetErrorString(e));
}

}  // namespace

extern "C" int kl_tensor_fit_terms_cuda(const kl_tensor_fit_terms *c, void *stream) {
  if (c->rank < 1 || c->rank > KL_TENSOR_MAX_RANK || c->count < 1 ||
      c->count > KL_TENSOR_SOLVE_MAX_GRAMS || c->n < 1 || (c->dtype != 0 && c->dtype != 1) ||
      !c->w || !c->y || !c->f || !c->out)
    return kl::fail(KL_ERR_INVALID, "tensor fit terms: rank above 64, 0 or more than 8 Gram "
                                    "matrices, an empty factor or a null pointer");
  for (int k = 0; k < c->count; ++k)
    if (!c->grams[k]) return kl::fail(KL_ERR_INVALID, "tensor fit terms: a null Gram matrix");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return c->dtype == 0 ? launch<float>(c, s) : launch<double>(c, s);
}
