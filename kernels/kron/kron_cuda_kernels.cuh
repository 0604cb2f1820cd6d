// The compiled kernel configurations, one table per storage dtype (each table lives in its own
// translation unit so that the build compiles them in parallel).  The host planner in
// kron_cuda.cu picks one entry per pass; see choose_config() there.
#ifndef KRONLINALG_KRON_CUDA_KERNELS_CUH
#define KRONLINALG_KRON_CUDA_KERNELS_CUH

#include <cuda_runtime.h>

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

// Each returns its table and sets *n to its length.
const KernelDesc *kernels_f32(int *n);
const KernelDesc *kernels_f64(int *n);
const KernelDesc *kernels_f16(int *n);
const KernelDesc *kernels_bf16(int *n);

}  // namespace cu
}  // namespace kl

#endif
