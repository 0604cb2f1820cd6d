// float32 instantiations: the CUDA-core kernel (register tiles of 4 lines x {4, 8, 16} columns)
// and the 3xTF32 tensor-core kernel (warp tile 32 rho x {8, 16, 32} columns) for passes whose
// factors all have P % 8 == 0 (pick_kernel in kron_cuda.cu, unless the float32 mode is IEEE).
#include "kron_cuda_ffma.cuh"
#include "kron_cuda_kernels.cuh"
#include "kron_cuda_tf32.cuh"

namespace kl {
namespace cu {
namespace {
template <int RQ, int MAXT, int MINB>
cudaError_t launch(const PassP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_ffma_kernel<float, float, RQ, MAXT, MINB><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
template <int WN>
cudaError_t launch_tf32(const PassP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_tf32_kernel<WN><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
#define KL_FFMA(RQ, MAXT, MINB)                                                             \
  {"f32.ffma.rq" #RQ, reinterpret_cast<const void *>(&kron_ffma_kernel<float, float, RQ, MAXT, MINB>), \
   kFfma, RQ, 4, MAXT, 4, 4, &launch<RQ, MAXT, MINB>}
// (a 64-column tile, 8 n-tiles per warp, needs over 128 registers: 256-thread blocks, and ran
// slower on the H100 than this 32-column one at Q = 64 and 128)
#define KL_TF32(WN)                                                                        \
  {"f32.tf32x3.wn" #WN, reinterpret_cast<const void *>(&kron_tf32_kernel<WN>), kMma, 8 * WN, 32, \
   512, 4, 4, &launch_tf32<WN>}
const KernelDesc table[] = {KL_FFMA(4, 512, 1), KL_FFMA(8, 512, 1), KL_FFMA(16, 256, 1),
                            KL_TF32(1), KL_TF32(2), KL_TF32(4)};
}  // namespace
const KernelDesc *kernels_f32(int *n) {
  *n = int(sizeof(table) / sizeof(table[0]));
  return table;
}
}  // namespace cu
}  // namespace kl
