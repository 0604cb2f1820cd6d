// The tiny-product kernel (batched_cuda_tiny.cuh) in each element type.
#include "batched_cuda_launch.cuh"

namespace kl {
namespace batched {
cudaError_t launch_tiny_dtype(int dtype, const kl_batched_problem &p, int64_t count,
                              const int64_t *strides, cudaStream_t stream) {
  switch (dtype) {
    case KL_BATCHED_F64: return launch_tiny<double>(p, count, strides, stream);
    case KL_BATCHED_F32: return launch_tiny<float>(p, count, strides, stream);
    case KL_BATCHED_F16: return launch_tiny<__half>(p, count, strides, stream);
    case KL_BATCHED_BF16: return launch_tiny<__nv_bfloat16>(p, count, strides, stream);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace batched
}  // namespace kl
