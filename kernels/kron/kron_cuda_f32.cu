// float32 instantiations of the CUDA-core kernel: register tiles of 4 lines x {4, 8, 16} columns.
#include "kron_cuda_ffma.cuh"
#include "kron_cuda_kernels.cuh"

namespace kl {
namespace cu {
namespace {
template <int RQ, int MAXT, int MINB>
cudaError_t launch(const PassP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_ffma_kernel<float, float, RQ, MAXT, MINB><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
#define KL_FFMA(RQ, MAXT, MINB)                                                             \
  {"f32.ffma.rq" #RQ, reinterpret_cast<const void *>(&kron_ffma_kernel<float, float, RQ, MAXT, MINB>), \
   kFfma, RQ, 4, MAXT, 4, 4, &launch<RQ, MAXT, MINB>}
const KernelDesc table[] = {KL_FFMA(4, 512, 1), KL_FFMA(8, 512, 1), KL_FFMA(16, 256, 1)};
}  // namespace
const KernelDesc *kernels_f32(int *n) {
  *n = int(sizeof(table) / sizeof(table[0]));
  return table;
}
}  // namespace cu
}  // namespace kl
