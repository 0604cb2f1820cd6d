// The half path's operand preparation in one launch (tensor.h, kl_tensor_scaled_copy): a
// rank-first float32 factor (R, n) divided by its largest magnitude (optional) and written as
// the MTTKRP kernel's padded (n, 64) float32 rows or as a half-type copy of the same layout.
// torch's route is 3-4 launches (an abs-max reduction of 6-9 us on an H100 at 64 x 640, a
// clamp, a division, a cast) on the sweep's critical path.  One block: the data is 160 KB.
// With the factor's Gram matrix (CP-ALS has it), the scale is a bound from its diagonal and
// the copy takes a grid of blocks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_device.hpp"
#include "tensor.h"

namespace {

constexpr int THREADS = 1024;

__global__ void __launch_bounds__(THREADS) scaled_copy_kernel(kl_tensor_scaled_copy c) {
  __shared__ float part[THREADS / 32];
  __shared__ float inv_s;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t count = int64_t(c.rows) * c.n;
  if (c.scale) {  // max |in| (a max: the same whatever the order)
    float m = 0.f;
    for (int64_t i = tid; i < count; i += THREADS) m = fmaxf(m, fabsf(c.in[i]));
#pragma unroll
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) part[warp] = m;
    __syncthreads();
    if (tid == 0) {
      float s = 1e-30f;
      for (int w = 0; w < THREADS / 32; ++w) s = fmaxf(s, part[w]);
      c.scale[0] = s;
      inv_s = 1.f / s;
    }
    __syncthreads();
  }
  const float f = c.scale ? inv_s : 1.f;
  if (c.pad64) {  // out[i][r] = in[r][i] * f, zeros for r >= rows
    float *out = static_cast<float *>(c.out);
    for (int64_t k = tid; k < c.n * KL_TENSOR_MAX_RANK; k += THREADS) {
      const int64_t i = k / KL_TENSOR_MAX_RANK;
      const int r = int(k - i * KL_TENSOR_MAX_RANK);
      out[k] = r < c.rows ? c.in[int64_t(r) * c.n + i] * f : 0.f;
    }
  } else if (c.dtype_out == 1) {
    __half *out = static_cast<__half *>(c.out);
    for (int64_t i = tid; i < count; i += THREADS) out[i] = __float2half_rn(c.in[i] * f);
  } else if (c.dtype_out == 2) {
    __nv_bfloat16 *out = static_cast<__nv_bfloat16 *>(c.out);
    for (int64_t i = tid; i < count; i += THREADS) out[i] = __float2bfloat16_rn(c.in[i] * f);
  } else {
    float *out = static_cast<float *>(c.out);
    for (int64_t i = tid; i < count; i += THREADS) out[i] = c.in[i] * f;
  }
}

// The Gram-scaled copy: s from the Gram's diagonal (every warp reads it: 64 floats from L2),
// so no block waits for another; a thread converts 4 consecutive elements.
constexpr int GRAM_THREADS = 256;

__global__ void __launch_bounds__(GRAM_THREADS) gram_scaled_copy_kernel(kl_tensor_scaled_copy c) {
  float s;
  if (c.gram) {
    float d = 0.f;
    for (int k = threadIdx.x & 31; k < c.rows; k += 32)
      d = fmaxf(d, c.gram[int64_t(k) * c.rows + k]);
#pragma unroll
    for (int o = 16; o; o >>= 1) d = fmaxf(d, __shfl_xor_sync(0xffffffffu, d, o));
    s = sqrtf(fmaxf(d, 1e-30f));
  } else {  // (a NaN largest stays NaN: the copy and the fit show it)
    const float l = c.largest[0];
    s = l != l ? l : fmaxf(l, 1e-30f);
  }
  const float f = 1.f / s;
  if (blockIdx.x == 0 && threadIdx.x == 0 && c.scale) c.scale[0] = s;
  const int64_t count = int64_t(c.rows) * c.n;
  const int64_t i0 = (int64_t(blockIdx.x) * GRAM_THREADS + threadIdx.x) * 4;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t i = i0 + e;
    if (i >= count) break;
    const float v = c.in[i] * f;
    if (c.dtype_out == 1)
      static_cast<__half *>(c.out)[i] = __float2half_rn(v);
    else if (c.dtype_out == 2)
      static_cast<__nv_bfloat16 *>(c.out)[i] = __float2bfloat16_rn(v);
    else
      static_cast<float *>(c.out)[i] = v;
  }
}

}  // namespace

extern "C" int kl_tensor_scaled_copy_cuda(const kl_tensor_scaled_copy *c, void *stream) {
  if (c->rows < 1 || c->n < 1 || !c->in || !c->out || c->dtype_out < 0 || c->dtype_out > 2 ||
      (c->pad64 && (c->rows > KL_TENSOR_MAX_RANK || c->dtype_out != 0)))
    return kl::fail(KL_ERR_INVALID, "tensor scaled copy: empty, null, dtype not 0-2, or a "
                                    "padded copy of more than 64 rows or not float32");
  if (c->gram || c->largest) {
    if (c->pad64)
      return kl::fail(KL_ERR_INVALID, "tensor scaled copy: the Gram scale makes no padded copy");
    const int64_t count = int64_t(c->rows) * c->n;
    const int64_t blocks = (count + 4 * GRAM_THREADS - 1) / (4 * GRAM_THREADS);
    if (blocks > 0x7fffffff)
      return kl::fail(KL_ERR_INVALID, "tensor scaled copy: too large for one launch");
    gram_scaled_copy_kernel<<<unsigned(blocks), GRAM_THREADS, 0,
                              static_cast<cudaStream_t>(stream)>>>(*c);
  } else {
    scaled_copy_kernel<<<1, THREADS, 0, static_cast<cudaStream_t>(stream)>>>(*c);
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : kl::fail(KL_ERR_CUDA, cudaGetErrorString(e));
}
