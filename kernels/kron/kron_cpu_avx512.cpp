// The CPU kernel compiled for one instruction set; kron_cpu.cpp picks the best one at run time.
#define KL_ISA avx512
#define KL_VEC_BYTES 64
#include "kron_cpu_impl.hpp"
