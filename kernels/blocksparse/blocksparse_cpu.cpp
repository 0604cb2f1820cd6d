// CPU block-sparse SpMM and SpGEMM: the entry points, dispatching to the kernels compiled for
// the best instruction set this CPU runs (blocksparse_cpu_impl.hpp).
#include "blocksparse.h"
#include "cpu_isa.hpp"

namespace kl {
namespace bs_cpu {
#define KL_DECLARE(isa)                                                        \
  namespace isa {                                                              \
  template <typename T> int spmm(const kl_bs_spmm_problem &, int);             \
  template <typename T> int spgemm(const kl_bs_spgemm_problem &, int, int);    \
  extern template int spmm<float>(const kl_bs_spmm_problem &, int);            \
  extern template int spmm<double>(const kl_bs_spmm_problem &, int);           \
  extern template int spgemm<float>(const kl_bs_spgemm_problem &, int, int);   \
  extern template int spgemm<double>(const kl_bs_spgemm_problem &, int, int);  \
  }
KL_DECLARE(generic)
#ifdef KL_X86_ISAS
KL_DECLARE(avx2)
KL_DECLARE(avx512)
#endif
#undef KL_DECLARE

template <typename T>
int spmm_best(const kl_bs_spmm_problem &p, int threads) {
#ifdef KL_X86_ISAS
  static const CpuIsa isa = best_cpu_isa();
  if (isa == CpuIsa::avx512) return avx512::spmm<T>(p, threads);
  if (isa == CpuIsa::avx2) return avx2::spmm<T>(p, threads);
#endif
  return generic::spmm<T>(p, threads);
}

template <typename T>
int spgemm_best(const kl_bs_spgemm_problem &p, int phase, int threads) {
#ifdef KL_X86_ISAS
  static const CpuIsa isa = best_cpu_isa();
  if (isa == CpuIsa::avx512) return avx512::spgemm<T>(p, phase, threads);
  if (isa == CpuIsa::avx2) return avx2::spgemm<T>(p, phase, threads);
#endif
  return generic::spgemm<T>(p, phase, threads);
}

bool valid_block(int b) { return b == 8 || b == 16 || b == 32 || b == 64; }

}  // namespace bs_cpu
}  // namespace kl

extern "C" int kl_bs_spmm_cpu(const kl_bs_spmm_problem *p, int dtype, int num_threads) {
  using namespace kl::bs_cpu;
  if (!p || !valid_block(p->b) || p->m < 0 || p->k < 0 || p->n < 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse spmm: invalid problem");
  if (p->m == 0 || p->n == 0) return KL_OK;
  switch (dtype) {
    case 0: return spmm_best<float>(*p, num_threads);
    case 1: return spmm_best<double>(*p, num_threads);
    default: return kl::fail(KL_ERR_INVALID, "blocksparse spmm (CPU): dtype must be float32 or float64");
  }
}

extern "C" int kl_bs_spgemm_cpu(const kl_bs_spgemm_problem *p, int phase, int dtype,
                                int num_threads) {
  using namespace kl::bs_cpu;
  if (!p || !valid_block(p->b) || phase < 0 || phase > 2 || p->R < 0 || p->ncols < 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse spgemm: invalid problem");
  if (p->R == 0) return KL_OK;
  switch (dtype) {
    case 0: return spgemm_best<float>(*p, phase, num_threads);
    case 1: return spgemm_best<double>(*p, phase, num_threads);
    default: return kl::fail(KL_ERR_INVALID, "blocksparse spgemm (CPU): dtype must be float32 or float64");
  }
}
