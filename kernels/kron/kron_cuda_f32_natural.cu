// Instantiations of the natural-order 3xTF32 kernel (kron_cuda_natural.cuh), one per factor size.
#include "kron_cuda_kernels.cuh"
#include "kron_cuda_natural.cuh"

namespace kl {
namespace cu {
namespace {
template <int P, int WN>
cudaError_t launch_nat(const NatP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_tf32_natural_kernel<P, WN><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
// (P = 64 in two column groups of 32: all 64 columns in one warp item took 224 registers, one
// block per SM; so its passes have no in-place step, at most two factors)
#define KL_NAT(P, WN)                                                                      \
  {"f32.tf32x3.natural.p" #P, reinterpret_cast<const void *>(&kron_tf32_natural_kernel<P, WN>), \
   P, P / 8 / WN, nat_max_threads(P), &launch_nat<P, WN>}
const NatKernelDesc table[] = {KL_NAT(8, 1), KL_NAT(16, 2), KL_NAT(32, 4), KL_NAT(64, 4)};
}  // namespace
const NatKernelDesc *nat_kernel_f32(int P) {
  for (const NatKernelDesc &k : table)
    if (k.P == P) return &k;
  return nullptr;
}
}  // namespace cu
}  // namespace kl
