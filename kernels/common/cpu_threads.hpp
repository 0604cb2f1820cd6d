// How many OpenMP threads a CPU kernel call takes: the rule the kron and Kronecker-sparse
// kernels share.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kl {

// Products under this many flops stay on the caller's thread.  A parallel region costs a wake-up
// and a join, and far more where the other cores are busy: a BLAS library's threads spin for a
// while after each call, and on 2 cores right after a NumPy matmul, 150 x 4^5 kron took 3.3 ms
// on two threads against 0.34 on one, and the (1,64,256,1) batch_last Kronecker-sparse product
// 15.9 ms against 1.1.  ~1e8 flops is a few ms on one core.
constexpr double kThreadMinFlops = 1.0e8;

// num_threads <= 0: OpenMP's default.
inline int cpu_threads(int num_threads, double flops) {
#ifdef _OPENMP
  if (flops < kThreadMinFlops) return 1;
  return num_threads > 0 ? num_threads : omp_get_max_threads();
#else
  (void)num_threads;
  (void)flops;
  return 1;
#endif
}

}  // namespace kl
