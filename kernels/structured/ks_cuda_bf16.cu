// bfloat16 instantiations of the tensor-core kernel.
#include "ks_cuda_launch.cuh"

int kl::ks::launch_bf16(const kl_ks_problem *p, cudaStream_t s) { return launch_half<__nv_bfloat16>(p, s); }
