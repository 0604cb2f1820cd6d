// Run-time choice of the CPU kernel's instruction set, so one build is fast on any x86-64.
#include "cpu_isa.hpp"
#include "kron.h"
#include "kron_cpu_plan.hpp"

namespace kl {
KL_PER_ISA(int kron_matmul_entry(const kl_kron_problem *p, int dtype, int num_threads);
           int lane_bytes(int dtype);)

namespace {
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
  return KL_ISA_CALL(kron_matmul_entry, p, dtype, num_threads);
}

extern "C" int kl_kron_cpu_pass_counts(const kl_kron_problem *p, int dtype, int *counts,
                                       int max_counts) {
  using namespace kl;
  if (!valid(p)) return -1;
  // the plan the dispatched kernel makes: its lane width decides how far it fuses
  const int lb = KL_ISA_CALL(lane_bytes, dtype);
  const std::vector<PassPlan> plan = plan_passes(p, lb, lb / (dtype == KL_FLOAT32 ? 4 : 8));
  for (size_t k = 0; counts && k < plan.size() && int(k) < max_counts; ++k)
    counts[k] = plan[k].count;
  return int(plan.size());
}
