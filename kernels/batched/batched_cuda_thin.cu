// The thin-product kernel (batched_cuda_thin.cuh) in each element type it takes.
#include "batched_cuda_launch.cuh"

namespace kl {
namespace batched {
cudaError_t launch_thin_dtype(int dtype, const kl_batched_problem &p, int64_t count,
                              const int64_t *strides, cudaStream_t stream) {
  switch (dtype) {
    case KL_BATCHED_F32: return launch_thin<float>(p, count, strides, stream);
    case KL_BATCHED_F16: return launch_thin<__half>(p, count, strides, stream);
    case KL_BATCHED_BF16: return launch_thin<__nv_bfloat16>(p, count, strides, stream);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace batched
}  // namespace kl
