// Run-time choice of the CPU kernel's instruction set, so one build is fast on any x86-64.
#include "cpu_isa.hpp"
#include "kron.h"
#include "kron_cpu_plan.hpp"

namespace kl {
#define KL_DECLARE_ISA(isa)                                                    \
  namespace isa {                                                              \
  int kron_matmul_entry(const kl_kron_problem *p, int dtype, int num_threads); \
  int lane_bytes(int dtype);                                                   \
  }
#ifdef KL_X86_ISAS
KL_DECLARE_ISA(avx512)
KL_DECLARE_ISA(avx2)
#endif
KL_DECLARE_ISA(generic)
#undef KL_DECLARE_ISA

namespace {
const CpuIsa kIsa = best_cpu_isa();

bool valid(const kl_kron_problem *p) {
  if (!p || p->nfactors < 1 || p->m1 < 0 || p->m2 < 0) return false;
  for (int i = 0; i < p->nfactors; ++i)
    if (p->P[i] < 1 || p->Q[i] < 1 || !p->F[i]) return false;
  return p->x && p->y;
}
}  // namespace
}  // namespace kl

extern "C" int kl_kron_matmul_cpu(const kl_kron_problem *p, int dtype, int num_threads) {
  using namespace kl;
  if (!valid(p)) return fail(KL_ERR_INVALID, "kron_matmul_cpu: invalid problem description");
  if (p->m1 == 0 || p->m2 == 0) return KL_OK;
#ifdef KL_X86_ISAS
  if (kIsa == CpuIsa::avx512) return avx512::kron_matmul_entry(p, dtype, num_threads);
  if (kIsa == CpuIsa::avx2) return avx2::kron_matmul_entry(p, dtype, num_threads);
#endif
  return generic::kron_matmul_entry(p, dtype, num_threads);
}

extern "C" int kl_kron_cpu_pass_counts(const kl_kron_problem *p, int dtype, int *counts,
                                       int max_counts) {
  using namespace kl;
  if (!valid(p)) return -1;
  // the plan the dispatched kernel makes: its lane width decides how far it fuses
  int lb = generic::lane_bytes(dtype);
#ifdef KL_X86_ISAS
  if (kIsa == CpuIsa::avx512) lb = avx512::lane_bytes(dtype);
  if (kIsa == CpuIsa::avx2) lb = avx2::lane_bytes(dtype);
#endif
  const std::vector<PassPlan> plan = plan_passes(p, lb, lb / (dtype == KL_FLOAT32 ? 4 : 8));
  for (size_t k = 0; counts && k < plan.size() && int(k) < max_counts; ++k)
    counts[k] = plan[k].count;
  return int(plan.size());
}
