// Instantiations of the natural-order 3xTF32 kernel (kron_cuda_natural.cuh), one per factor size,
// and of its ring form (kron_cuda_natural_ring.cuh) for P = 16 and 32.
#include "kron_cuda_kernels.cuh"
#include "kron_cuda_natural.cuh"
#include "kron_cuda_natural_ring.cuh"

namespace kl {
namespace cu {
namespace {
template <int P, int WN>
cudaError_t launch_nat(const NatP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_tf32_natural_kernel<P, WN><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
template <int P, int WN>
cudaError_t launch_ring(const NatP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_tf32_natural_ring_kernel<P, WN><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
// (P = 64 in two column groups of 32: all 64 columns in one warp item took 224 registers, one
// block per SM; so its passes have no in-place step, at most two factors)
#define KL_NAT(P, WN)                                                                      \
  {"f32.tf32x3.natural.p" #P, reinterpret_cast<const void *>(&kron_tf32_natural_kernel<P, WN>), \
   P, P / 8 / WN, nat_max_threads(P), 4, 2, &launch_nat<P, WN>}
#define KL_NAT_RING(P)                                                                       \
  {"f32.tf32x3.natural_ring.p" #P,                                                          \
   reinterpret_cast<const void *>(&kron_tf32_natural_ring_kernel<P, P / 8>), P, 1,          \
   nat_ring_threads(P), 4, 2, &launch_ring<P, P / 8>}
const NatKernelDesc table[] = {KL_NAT(8, 1), KL_NAT(16, 2), KL_NAT(32, 4), KL_NAT(64, 4)};
const NatKernelDesc ring_table[] = {KL_NAT_RING(16), KL_NAT_RING(32)};

const NatKernelDesc *find(const NatKernelDesc *begin, const NatKernelDesc *end, int P) {
  for (const NatKernelDesc *k = begin; k != end; ++k)
    if (k->P == P) return k;
  return nullptr;
}
}  // namespace
const NatKernelDesc *nat_kernel_f32(int P) { return find(table, table + 4, P); }
const NatKernelDesc *nat_ring_kernel_f32(int P) {
  return find(ring_table, ring_table + 2, P);
}
}  // namespace cu
}  // namespace kl
