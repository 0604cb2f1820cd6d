// The CPU kernels compiled for one instruction set; blocksparse_cpu.cpp picks the best at run time.
#define KL_ISA avx512
#define KL_VEC_BYTES 64
#include "blocksparse_cpu_impl.hpp"
