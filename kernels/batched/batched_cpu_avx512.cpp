// The CPU kernel compiled for one instruction set; batched_cpu.cpp picks the best one at run time.
#define KL_ISA avx512
#define KL_VEC_BYTES 64
#include "batched_cpu_impl.hpp"
