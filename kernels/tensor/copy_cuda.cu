// Shard mode's strided slab copies (tensor.h, kl_tensor_copy_rows): a block of columns of a
// row-major matrix (the mode-1 slab X[:, j0:j1, ...] of a C-order tensor is `height` rows of
// `width` contiguous bytes, `src_pitch` apart) into a dense device buffer, one
// cudaMemcpy2DAsync on the caller's stream — from pinned host memory or from the device.
// torch copies a non-contiguous host view through a contiguous host copy first, synchronously.
#include <cuda_runtime.h>

#include "cuda_device.hpp"
#include "tensor.h"

extern "C" int kl_tensor_copy_rows(void *dst, int64_t dst_pitch, const void *src,
                                   int64_t src_pitch, int64_t width, int64_t height,
                                   void *stream) {
  if (width < 0 || height < 0 || dst_pitch < width || src_pitch < width || !dst || !src)
    return kl::fail(KL_ERR_INVALID, "tensor copy rows: inconsistent pitches or sizes");
  if (width == 0 || height == 0) return KL_OK;
  const cudaError_t e =
      cudaMemcpy2DAsync(dst, size_t(dst_pitch), src, size_t(src_pitch), size_t(width),
                        size_t(height), cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? KL_OK : kl::fail(KL_ERR_CUDA, cudaGetErrorString(e));
}
