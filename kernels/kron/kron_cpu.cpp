// Run-time choice of the CPU kernel's instruction set, so one build is fast on any x86-64.
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
enum class Isa { generic, avx2, avx512 };

Isa best_isa() {
#ifdef KL_X86_ISAS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
  return Isa::generic;
}

const Isa kIsa = best_isa();

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
  if (kIsa == Isa::avx512) return avx512::kron_matmul_entry(p, dtype, num_threads);
  if (kIsa == Isa::avx2) return avx2::kron_matmul_entry(p, dtype, num_threads);
#endif
  return generic::kron_matmul_entry(p, dtype, num_threads);
}

extern "C" int kl_kron_cpu_passes(const kl_kron_problem *p, int dtype) {
  using namespace kl;
  if (!valid(p)) return -1;
  // The lane width is the same on every ISA build (two 512-bit registers' worth).
  const int lb = generic::lane_bytes(dtype);
  return int(plan_passes(p, lb).size());
}
