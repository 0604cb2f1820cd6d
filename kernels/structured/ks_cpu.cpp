// Run-time choice of the CPU kernel's instruction set, so one build is fast on any x86-64.
#include "cpu_isa.hpp"
#include "ks.h"

namespace kl {
KL_PER_ISA(int ks_matmul_entry(const kl_ks_problem *p, int dtype, int num_threads);)

namespace {
const char *check(const kl_ks_problem *p) {
  if (!p) return "ks_matmul_cpu: no problem description";
  if (p->a < 1 || p->b < 1 || p->c < 1 || p->d < 1) return "ks_matmul_cpu: pattern entries must be >= 1";
  if (p->batch < 0) return "ks_matmul_cpu: negative batch size";
  if (p->layout != KL_KS_BATCH_FIRST && p->layout != KL_KS_BATCH_LAST)
    return "ks_matmul_cpu: layout must be KL_KS_BATCH_FIRST or KL_KS_BATCH_LAST";
  if (p->batch > 0 && (!p->x || !p->y || !p->values)) return "ks_matmul_cpu: null pointer";
  const int64_t rows_in = p->a * p->c * p->d, rows_out = p->a * p->b * p->d;
  const bool first = p->layout == KL_KS_BATCH_FIRST;
  // the leading dimension must at least cover one row, so rows never overlap
  if (p->batch > 1 && (p->x_ld < (first ? rows_in : p->batch) || p->y_ld < (first ? rows_out : p->batch)))
    return "ks_matmul_cpu: leading dimension of x or y shorter than a row";
  return nullptr;
}
}  // namespace
}  // namespace kl

extern "C" int kl_ks_matmul_cpu(const kl_ks_problem *p, int dtype, int num_threads) {
  using namespace kl;
  if (const char *msg = check(p)) return fail(KL_ERR_INVALID, msg);
  if (p->batch == 0) return KL_OK;
  return KL_ISA_CALL(ks_matmul_entry, p, dtype, num_threads);
}
