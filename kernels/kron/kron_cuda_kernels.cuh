// The compiled kernel configurations, one table per storage dtype (each table lives in its own
// translation unit so that the build compiles them in parallel).  The host planner in
// kron_cuda.cu picks one entry per pass; see choose_config() there.
#ifndef KRONLINALG_KRON_CUDA_KERNELS_CUH
#define KRONLINALG_KRON_CUDA_KERNELS_CUH

#include <cuda_runtime.h>

#include "kron.h"
#include "kron_cuda_common.cuh"

namespace kl {
namespace cu {

enum KernelKind { kFfma = 0, kMma = 1 };

struct KernelDesc {
  const char *name;
  const void *func;  // for occupancy queries and attributes
  int kind;          // kFfma or kMma
  int tile_q;        // RQ (CUDA-core: columns per thread) or 8 * WN (tensor core: per warp)
  int tile_rho;      // rho per register tile: V (CUDA core) or 16 * WM (tensor core)
  int max_threads;
  int elem_bytes;    // bytes of an element in shared memory
  int gmem_bytes;    // bytes of an element in global memory (x, factors, y)
  cudaError_t (*launch)(const PassP &, int grid, int block, size_t smem, cudaStream_t);
};

// The natural-order kernels: a pass of up to kNatMaxSteps P x P factors (P = 8, 16, 32, 64) over
// x and y with contiguous rows; float32 as 3xTF32 (kron_cuda_natural.cuh), float64 on DMMA and
// the half types on their tensor cores (kron_cuda_natural_mma.cuh).
constexpr int kNatMaxSteps = 4;

struct NatP {
  int nsteps;
  int line_tile;  // 1: T whole lines per tile (I == 1); 0: T consecutive i of one row r
  int T;
  int Bin, Bout;
  int64_t rows;   // lines (line tiles) or rows r (column tiles)
  int64_t I;      // modes after the group (column tiles; I % T == 0)
  int64_t ntiles;
  int buf1_elems, buf2_elems, fs_elems;
  int stages;     // buf1 copies (2 or 3): the tiles after this one stream in meanwhile (the
                  // ring kernel: slice slots)
  const float *x;  // (the dtype's elements: the float64 and half kernels cast)
  float *y;
  float alpha, beta;
  double alpha_d, beta_d;  // the same in double (the float64 and half kernels take these)
  const float *F[kNatMaxSteps];  // step s applies F[s] (the group's last factor first)
  int64_t frs[kNatMaxSteps], fcs[kNatMaxSteps];
};

struct NatKernelDesc {
  const char *name;
  const void *func;
  int P;
  int col_groups;  // warp items per 32 rows of a step (1: every step in place)
  int max_threads;
  int elem_bytes;  // bytes of an element (shared and global memory alike)
  int f_copies;    // factor copies per step in shared memory (3xTF32: hi and lo)
  cudaError_t (*launch)(const NatP &, int grid, int block, size_t smem, cudaStream_t);
};

// The natural-order kernel for P x P factors, or nullptr where none is compiled.
const NatKernelDesc *nat_kernel_f32(int P);
const NatKernelDesc *nat_kernel_f64(int P);   // DMMA: sm_90 and newer
const NatKernelDesc *nat_kernel_f16(int P);
const NatKernelDesc *nat_kernel_bf16(int P);
// Its ring form for tiles that do not fit two load buffers (kron_cuda_natural_ring.cuh): P = 16
// and 32; nullptr for the others.
const NatKernelDesc *nat_ring_kernel_f32(int P);
// The half types' ring form (kron_cuda_natural_mma_ring.cuh): P = 16 and 32.
const NatKernelDesc *nat_ring_kernel_f16(int P);
const NatKernelDesc *nat_ring_kernel_bf16(int P);
// The one-pass cluster kernel for six 8 x 8 float32 factors (kron_cuda_cluster.cu): the clusters
// it runs at once on this problem (0: it does not take it); its launch, false where it does not
// take the problem, else *rc is the launch's status.
int cluster_8x6_clusters(const kl_kron_problem *p, int dtype);
bool launch_cluster_8x6(const kl_kron_problem *p, int dtype, cudaStream_t stream, int *rc);

// Each returns its table and sets *n to its length.
const KernelDesc *kernels_f32(int *n);
const KernelDesc *kernels_f64(int *n);
const KernelDesc *kernels_f16(int *n);
const KernelDesc *kernels_bf16(int *n);

}  // namespace cu
}  // namespace kl

#endif
