// Instantiations of the natural-order 3xTF32 kernel (kron_cuda_natural.cuh), one per factor size.
#include "kron_cuda_kernels.cuh"
#include "kron_cuda_natural.cuh"

namespace kl {
namespace cu {
namespace {
template <int P, int WN, int MAXT>
cudaError_t launch_nat(const NatP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_tf32_natural_kernel<P, WN, MAXT><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
// (P = 64 in two column groups of 32: all 64 columns in one warp item took 224 registers, one
// block per SM; so its passes have no in-place step, at most two factors)
#define KL_NAT(NAME, P, WN, MAXT)                                                          \
  {"f32.tf32x3.natural.p" #P NAME,                                                         \
   reinterpret_cast<const void *>(&kron_tf32_natural_kernel<P, WN, MAXT>), P, P / 8 / WN, MAXT, \
   &launch_nat<P, WN, MAXT>}
// (the first entry of each P is its default; "w8": 8-warp blocks, one per SM, for column tiles
// of 16 i, whose rows are 64-byte runs of x)
const NatKernelDesc table[] = {KL_NAT("", 8, 1, 128), KL_NAT("", 16, 2, 256),
                               KL_NAT("", 32, 4, 128), KL_NAT("", 64, 4, 128),
                               KL_NAT(".w8", 32, 4, 256)};
}  // namespace
const NatKernelDesc *nat_kernel_f32(int P, bool wide) {
  for (const NatKernelDesc &k : table)
    if (k.P == P && (!wide || k.max_threads == 256)) return &k;
  return nullptr;
}
}  // namespace cu
}  // namespace kl
