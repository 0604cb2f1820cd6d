// float16 and bfloat16 batched kernels (HMMA m16n8k16, float32 accumulators).
#include "batched_cuda_launch.cuh"

namespace kl {
namespace batched {
cudaError_t launch_f16(int shape, bool bf16, const Args &args, cudaStream_t stream) {
  if (bf16) return launch_shape<__nv_bfloat16, kHmma>(shape, args, stream);
  return launch_shape<__half, kHmma>(shape, args, stream);
}
cudaError_t launch_f16_split(bool bf16, const Args &args, const SplitPlan &plan,
                             unsigned long long *scratch, cudaStream_t stream) {
  if (bf16) return launch_variable_split<__nv_bfloat16, kHmma>(args, plan, scratch, stream);
  return launch_variable_split<__half, kHmma>(args, plan, scratch, stream);
}
}  // namespace batched
}  // namespace kl
