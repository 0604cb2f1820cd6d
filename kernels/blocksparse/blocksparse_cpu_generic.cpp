// The CPU kernels compiled for one instruction set; blocksparse_cpu.cpp picks the best at run time.
#define KL_ISA generic
#define KL_VEC_BYTES 16
#include "blocksparse_cpu_impl.hpp"
