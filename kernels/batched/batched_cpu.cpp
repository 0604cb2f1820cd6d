// Run-time choice of the CPU kernel's instruction set, and the CUDA configuration query (host
// code: the cost model asks it in CPU-only builds too).
#include "batched.h"
#include "batched_config.hpp"
#include "cpu_isa.hpp"

namespace kl {
KL_PER_ISA(int batched_entry(const kl_batched_problem *p, int dtype, int num_threads);
           int batched_var_entry(const kl_batched_entry *t, int64_t count, double alpha,
                                 double beta, int dtype, int num_threads);)

namespace {
bool valid(const kl_batched_problem *p, int dtype) {
  if (!p || p->m < 0 || p->n < 0 || p->k < 0 || p->ndim < 0 || p->ndim > KL_BATCHED_MAX_DIMS)
    return false;
  if (dtype != KL_BATCHED_F32 && dtype != KL_BATCHED_F64) return false;
  for (int d = 0; d < p->ndim; ++d)
    if (p->shape[d] < 0) return false;
  return p->d && (p->k == 0 || (p->a && p->b)) && (p->beta == 0.0 || p->c);
}
}  // namespace
}  // namespace kl

extern "C" int kl_batched_matmul_cpu(const kl_batched_problem *p, int dtype, int num_threads) {
  using namespace kl;
  if (!valid(p, dtype)) return fail(KL_ERR_INVALID, "batched_matmul_cpu: invalid problem description");
  if (p->m == 0 || p->n == 0) return KL_OK;
  return KL_ISA_CALL(batched_entry, p, dtype, num_threads);
}

extern "C" int kl_batched_matmul_cpu_var(const kl_batched_entry *t, int64_t count, double alpha,
                                         double beta, int dtype, int num_threads) {
  using namespace kl;
  if (count < 0 || (count > 0 && !t) || (dtype != KL_BATCHED_F32 && dtype != KL_BATCHED_F64))
    return fail(KL_ERR_INVALID, "batched_matmul_cpu_var: invalid problem table");
  for (int64_t i = 0; i < count; ++i)
    if (t[i].m < 0 || t[i].n < 0 || t[i].k < 0 ||
        (t[i].m > 0 && t[i].n > 0 && (!t[i].d || (t[i].k > 0 && (!t[i].a || !t[i].b)) ||
                                      (beta != 0.0 && !t[i].c))))
      return fail(KL_ERR_INVALID, "batched_matmul_cpu_var: invalid row in the problem table");
  return KL_ISA_CALL(batched_var_entry, t, count, alpha, beta, dtype, num_threads);
}

extern "C" int kl_batched_cuda_config(int64_t m, int64_t n, int64_t k, int dtype, int algo,
                                      int fp32_mode, kl_batched_config *out) {
  using namespace kl;
  if (!out || m < 0 || n < 0 || k < 0 || dtype < 0 || dtype > 3 || algo < 0 || algo > 2)
    return fail(KL_ERR_INVALID, "batched_cuda_config: invalid arguments");
  const int mma = batched::mma_kind(dtype, fp32_mode);
  *out = batched::describe(batched::pick_shape(m, n, algo, mma), mma);
  const int elem = dtype == KL_BATCHED_F64 ? 8 : dtype == KL_BATCHED_F32 ? 4 : 2;
  const int variant = batched::tiny_variant(m, n, k, elem);
  out->tiny = algo == KL_BATCHED_2D || mma == batched::kFfma || variant < 0 ? 0
              : variant == 0                                               ? 1
                                                                           : 2;
  out->thin = algo != KL_BATCHED_2D &&
              (mma == batched::kHmma || mma == batched::kTf32x3) &&
              batched::thin_pays(m, n, k, elem);
  return KL_OK;
}
