// Instantiations of the natural-order tensor-core kernel (kron_cuda_natural_mma.cuh) for float64
// (DMMA), float16 and bfloat16, one per factor size, with the float32 kernel's warp items
// (P = 64 in two column groups of 32: its passes have no in-place step, at most two factors),
// and the half types' ring form (kron_cuda_natural_mma_ring.cuh) for P = 16 and 32.
#include "kron_cuda_kernels.cuh"
#include "kron_cuda_natural_mma.cuh"
#include "kron_cuda_natural_mma_ring.cuh"

namespace kl {
namespace cu {
namespace {
template <class T, int P, int WN>
cudaError_t launch_nat(const NatP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_mma_natural_kernel<T, P, WN><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
#define KL_NATM(T, NAME, P, WN)                                                             \
  {NAME ".natural.p" #P, reinterpret_cast<const void *>(&kron_mma_natural_kernel<T, P, WN>), \
   P, P / 8 / WN, natm_max_threads<T>(P), int(sizeof(T)), 1, &launch_nat<T, P, WN>}
#define KL_NATM_TABLE(T, NAME) \
  {KL_NATM(T, NAME, 8, 1), KL_NATM(T, NAME, 16, 2), KL_NATM(T, NAME, 32, 4), KL_NATM(T, NAME, 64, 4)}
const NatKernelDesc f64_table[] = KL_NATM_TABLE(double, "f64.dmma");
const NatKernelDesc f16_table[] = KL_NATM_TABLE(__half, "f16.mma");
const NatKernelDesc bf16_table[] = KL_NATM_TABLE(__nv_bfloat16, "bf16.mma");

template <class T, int P>
cudaError_t launch_ring(const NatP &p, int grid, int block, size_t smem, cudaStream_t st) {
  kron_mma_natural_ring_kernel<T, P><<<grid, block, smem, st>>>(p);
  return cudaGetLastError();
}
#define KL_NATM_RING(T, NAME, P)                                                        \
  {NAME ".natural_ring.p" #P, reinterpret_cast<const void *>(&kron_mma_natural_ring_kernel<T, P>), \
   P, 1, natm_ring_threads(P), int(sizeof(T)), 1, &launch_ring<T, P>}
const NatKernelDesc f16_ring_table[] = {KL_NATM_RING(__half, "f16.mma", 16),
                                        KL_NATM_RING(__half, "f16.mma", 32)};
const NatKernelDesc bf16_ring_table[] = {KL_NATM_RING(__nv_bfloat16, "bf16.mma", 16),
                                         KL_NATM_RING(__nv_bfloat16, "bf16.mma", 32)};

template <size_t N>
const NatKernelDesc *find(const NatKernelDesc (&tab)[N], int P) {
  for (const NatKernelDesc &k : tab)
    if (k.P == P) return &k;
  return nullptr;
}
}  // namespace
const NatKernelDesc *nat_kernel_f64(int P) { return find(f64_table, P); }
const NatKernelDesc *nat_kernel_f16(int P) { return find(f16_table, P); }
const NatKernelDesc *nat_kernel_bf16(int P) { return find(bf16_table, P); }
const NatKernelDesc *nat_ring_kernel_f16(int P) { return find(f16_ring_table, P); }
const NatKernelDesc *nat_ring_kernel_bf16(int P) { return find(bf16_ring_table, P); }
}  // namespace cu
}  // namespace kl
