// What tensor_cuda.cu's launcher calls in tensor_half_cuda.cu (the half-precision one-pass
// MTTKRP of the first mode); not part of the C interface.
#ifndef KRONLINALG_TENSOR_INTERNAL_HPP
#define KRONLINALG_TENSOR_INTERNAL_HPP

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor.h"

namespace kl {
namespace tensor {

constexpr int HALF_BK = 64;  // p per pipeline stage of the half kernel

// output rows a block of the half kernel's variant covers (128 or 256)
int half_rows(int variant);
// blocks of the half kernel (dtype 1: float16, 2: bfloat16; variant 0 / 1) a multiprocessor
// holds; sets the kernel's shared-memory opt-in on device `dev` first
cudaError_t half_blocks_per_sm(int dtype, int variant, int dev, int *out);
// the partial sums of c (checked by kl_tensor_mttkrp_cuda) into c->part
cudaError_t launch_half_mttkrp(const kl_tensor_mttkrp *c, int64_t stages, int64_t mpad,
                               int64_t tiles, int dev, cudaStream_t s);

}  // namespace tensor
}  // namespace kl

#endif
