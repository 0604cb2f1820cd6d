// The CPU kernel compiled for one instruction set; ks_cpu.cpp picks the best one at run time.
#define KL_ISA generic
#define KL_VEC_BYTES 16
#include "ks_cpu_impl.hpp"
