// float32 batched kernels: 3xTF32 tensor cores, or IEEE FMAs on CUDA cores.
#include "batched_cuda_launch.cuh"

namespace kl {
namespace batched {
cudaError_t launch_f32(int shape, int mma, const Args &args, cudaStream_t stream) {
  if (mma == kFfma) return launch_shape<float, kFfma>(shape, args, stream);
  return launch_shape<float, kTf32x3>(shape, args, stream);
}
cudaError_t launch_f32_split(const Args &args, const SplitPlan &plan, unsigned long long *scratch,
                             cudaStream_t stream) {
  return launch_variable_split<float, kTf32x3>(args, plan, scratch, stream);
}
}  // namespace batched
}  // namespace kl
