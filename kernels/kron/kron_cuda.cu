// CUDA sliced multiply: one launch per factor, each output element one P-slice of a row of the
// current matrix times one factor column, written to its final index (no transpose pass).
// The fused, tiled kernels of the "CUDA kron_matmul" issue replace this on the hot shapes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kron.h"

namespace kl {
namespace {

struct Strides {
  int64_t rs1, rs2, es;
};

// out[m, q*S + j] = alpha * sum_p in[m, j*P + p] * F[p, q] + beta * out[m, q*S + j]
template <class T>
__global__ void sliced_multiply(int64_t m1n, int64_t m2n, int64_t S, int64_t P, int64_t Q,
                                const T *__restrict__ F, int64_t frs, int64_t fcs,
                                const T *__restrict__ in, Strides is, T *__restrict__ out,
                                Strides os, T alpha, T beta, bool j_fast) {
  const int64_t total = m1n * m2n * Q * S;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t m1, m2, q, j;
    if (j_fast) {  // consecutive threads write consecutive j: coalesced for row layouts
      j = t % S;
      int64_t u = t / S;
      q = u % Q;
      u /= Q;
      m2 = u % m2n;
      m1 = u / m2n;
    } else {  // consecutive threads take consecutive rows: coalesced for column layouts
      m2 = t % m2n;
      int64_t u = t / m2n;
      j = u % S;
      u /= S;
      q = u % Q;
      m1 = u / Q;
    }
    const T *x = in + m1 * is.rs1 + m2 * is.rs2 + j * P * is.es;
    const T *f = F + q * fcs;
    T acc = T(0);
    for (int64_t p = 0; p < P; ++p) acc += x[p * is.es] * f[p * frs];
    T *y = out + m1 * os.rs1 + m2 * os.rs2 + (q * S + j) * os.es;
    *y = beta == T(0) ? alpha * acc : alpha * acc + beta * *y;
  }
}

int cuda_fail(cudaError_t e, const char *what) {
  std::string msg = std::string("kron_matmul_cuda: ") + what + ": " + cudaGetErrorString(e);
  return fail(KL_ERR_CUDA, msg.c_str());
}

// Row length after the first `applied` factors (counted from the last) have been applied.
int64_t length_after(const kl_kron_problem *p, int applied) {
  int64_t len = 1;
  for (int i = 0; i < p->nfactors; ++i) len *= i >= p->nfactors - applied ? p->Q[i] : p->P[i];
  return len;
}

template <class T>
int launch_all(const kl_kron_problem *p, T *scratch[2], cudaStream_t stream) {
  const int n = p->nfactors;
  const bool row_layout = p->y_es == 1 || p->m2 == 1;
  const T *in = static_cast<const T *>(p->x);
  Strides is{p->x_rs1, p->x_rs2, p->x_es};
  for (int s = 0; s < n; ++s) {
    const int i = n - 1 - s;
    const bool last = s == n - 1;
    const int64_t len_in = length_after(p, s), len_out = length_after(p, s + 1);
    const int64_t S = len_in / p->P[i];
    T *out;
    Strides os;
    if (last) {
      out = static_cast<T *>(p->y);
      os = {p->y_rs1, p->y_rs2, p->y_es};
    } else {
      out = scratch[s % 2];
      os = row_layout ? Strides{p->m2 * len_out, len_out, 1} : Strides{p->m2 * len_out, 1, p->m2};
    }
    const int64_t total = p->m1 * p->m2 * p->Q[i] * S;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, int64_t(1) << 20);
    sliced_multiply<T><<<unsigned(blocks), threads, 0, stream>>>(
        p->m1, p->m2, S, p->P[i], p->Q[i], static_cast<const T *>(p->F[i]), p->F_rs[i],
        p->F_cs[i], in, is, out, os, last ? T(p->alpha) : T(1), last ? T(p->beta) : T(0),
        row_layout);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(e, "launch");
    in = out;
    is = os;
  }
  return KL_OK;
}

}  // namespace
}  // namespace kl

extern "C" int64_t kl_kron_cuda_scratch_elems(const kl_kron_problem *p) {
  int64_t most = 0;
  for (int s = 1; s < p->nfactors; ++s) most = std::max(most, kl::length_after(p, s));
  return most * p->m1 * p->m2;
}

extern "C" int kl_cuda_device_check(void) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::string msg = "no GPU: ";
    msg += e != cudaSuccess ? cudaGetErrorString(e) : "the CUDA runtime sees no device";
    return kl::fail(KL_ERR_NO_DEVICE, msg.c_str());
  }
  return KL_OK;
}

extern "C" int kl_kron_matmul_cuda(const kl_kron_problem *p, int dtype, void *scratch0,
                                   void *scratch1, void *stream) {
  using namespace kl;
  if (!p || p->nfactors < 1 || !p->x || !p->y)
    return fail(KL_ERR_INVALID, "kron_matmul_cuda: invalid problem description");
  if (p->m1 == 0 || p->m2 == 0) return KL_OK;
  if (p->nfactors > 1 && (!scratch0 || (p->nfactors > 2 && !scratch1)))
    return fail(KL_ERR_INVALID, "kron_matmul_cuda: scratch buffers missing");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == KL_FLOAT32) {
    float *scr[2] = {static_cast<float *>(scratch0), static_cast<float *>(scratch1)};
    return launch_all<float>(p, scr, s);
  }
  if (dtype == KL_FLOAT64) {
    double *scr[2] = {static_cast<double *>(scratch0), static_cast<double *>(scratch1)};
    return launch_all<double>(p, scr, s);
  }
  return fail(KL_ERR_INVALID, "kron_matmul_cuda: unsupported dtype");
}
