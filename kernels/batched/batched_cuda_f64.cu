// float64 batched kernels (DMMA m8n8k4): one translation unit per dtype, compiled in parallel.
#include "batched_cuda_kernels.cuh"

namespace kl {
namespace batched {
cudaError_t launch_f64(int shape, const Args &args, cudaStream_t stream) {
  return launch_shape<double, kDmma>(shape, args, stream);
}
}  // namespace batched
}  // namespace kl
