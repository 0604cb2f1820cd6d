// float64 batched kernels (DMMA m16n8k8 on sm_90, m8n8k4 before): one translation unit per dtype,
// compiled in parallel.
#include "batched_cuda_launch.cuh"

namespace kl {
namespace batched {
cudaError_t launch_f64(int shape, int mma, const Args &args, cudaStream_t stream) {
  if (mma == kDmma16) return launch_shape<double, kDmma16>(shape, args, stream);
  return launch_shape<double, kDmma>(shape, args, stream);
}
cudaError_t launch_f64_split(const Args &args, const SplitPlan &plan, unsigned long long *scratch,
                             cudaStream_t stream) {
  return launch_variable_split<double, kDmma16>(args, plan, scratch, stream);
}
}  // namespace batched
}  // namespace kl
