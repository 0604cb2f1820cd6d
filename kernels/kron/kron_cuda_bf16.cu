// bf16 instantiations: tensor-core kernels (warp tile 32 rho x {16, 32} columns) and the
// CUDA-core fallback (float32 compute) for factors whose P is not a multiple of 8.
#include "kron_cuda_ffma.cuh"
#include "kron_cuda_kernels.cuh"
#include "kron_cuda_mma.cuh"

namespace kl {
namespace cu {
namespace {
template <int WN>
cudaError_t launch_mma(const PassP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_mma_kernel<__nv_bfloat16, 2, WN><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
cudaError_t launch_ffma(const PassP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_ffma_kernel<__nv_bfloat16, float, 8, 512, 1><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
#define KL_MMA(WN)                                                                         \
  {"bf16.mma.wn" #WN, reinterpret_cast<const void *>(&kron_mma_kernel<__nv_bfloat16, 2, WN>), kMma, \
   8 * WN, 32, 512, 2, 2, &launch_mma<WN>}
const KernelDesc table[] = {
    KL_MMA(2), KL_MMA(4),
    {"bf16.ffma.rq8", reinterpret_cast<const void *>(&kron_ffma_kernel<__nv_bfloat16, float, 8, 512, 1>),
     kFfma, 8, 4, 512, 4, 2, &launch_ffma}};
}  // namespace
const KernelDesc *kernels_bf16(int *n) {
  *n = int(sizeof(table) / sizeof(table[0]));
  return table;
}
}  // namespace cu
}  // namespace kl
