// CUDA Kronecker-sparse kernel: float32 instantiations and the entry point (the half types are
// instantiated in ks_cuda_f16.cu and ks_cuda_bf16.cu, compiled in parallel).
#include "ks_cuda_launch.cuh"

namespace kl {
namespace ks {
namespace {

// float32: 16384 outputs per block (8×8 per thread); per TJ one or two (TK, TN) shapes.
int launch_f32(const kl_ks_problem *p, cudaStream_t s) {
  const int tj = pick_tj(p->d);
  const bool bf = p->layout == KL_KS_BATCH_FIRST;
  static const int tk1[] = {32, 128}, tk4[] = {16, 64};
  int tk = 0;
  if (tj == 1) tk = pick_tk(p->b, tk1, 2);
  if (tj == 4) tk = pick_tk(p->b, tk4, 2);
#define KL_KS_F32(TJ_, TK_, TN_)                                                            \
  if (tj == TJ_ && (tk == 0 || tk == TK_)) {                                                \
    const Params q = make_params(p, TN_, TK_, TJ_);                                         \
    return bf ? launch_checked(q, ks_f32<TN_, TK_, TJ_, true>, 0, s)                        \
              : launch_checked(q, ks_f32<TN_, TK_, TJ_, false>, 0, s);                      \
  }
  KL_KS_F32(1, 32, 512)
  KL_KS_F32(1, 128, 128)
  KL_KS_F32(2, 64, 128)
  KL_KS_F32(4, 16, 256)
  KL_KS_F32(4, 64, 64)
  KL_KS_F32(8, 32, 64)
  KL_KS_F32(16, 16, 64)
#undef KL_KS_F32
  return fail(KL_ERR_INVALID, "ks_matmul_cuda: no tile shape for this pattern");
}

}  // namespace
}  // namespace ks
}  // namespace kl

extern "C" int kl_ks_matmul_cuda(const kl_ks_problem *p, int dtype, void *stream) {
  using namespace kl;
  if (!p || p->a < 1 || p->b < 1 || p->c < 1 || p->d < 1 || p->batch < 0)
    return fail(KL_ERR_INVALID, "ks_matmul_cuda: invalid problem description");
  if (p->layout != KL_KS_BATCH_FIRST && p->layout != KL_KS_BATCH_LAST)
    return fail(KL_ERR_INVALID, "ks_matmul_cuda: layout must be KL_KS_BATCH_FIRST or KL_KS_BATCH_LAST");
  if (p->batch == 0) return KL_OK;
  if (!p->x || !p->y || !p->values) return fail(KL_ERR_INVALID, "ks_matmul_cuda: null pointer");
  const int64_t rows_in = p->a * p->c * p->d, rows_out = p->a * p->b * p->d;
  const bool first = p->layout == KL_KS_BATCH_FIRST;
  if (p->batch > 1 && (p->x_ld < (first ? rows_in : p->batch) || p->y_ld < (first ? rows_out : p->batch)))
    return fail(KL_ERR_INVALID, "ks_matmul_cuda: leading dimension of x or y shorter than a row");
  if (p->vs[3] != 1 || p->vs[2] != p->d || p->vs[1] != p->c * p->d || p->vs[0] != p->b * p->c * p->d)
    return fail(KL_ERR_INVALID, "ks_matmul_cuda: the values must be C-contiguous (a, b, c, d)");
  if (p->b * p->c * p->d >= (int64_t(1) << 31))
    return fail(KL_ERR_INVALID, "ks_matmul_cuda: b·c·d >= 2^31 (one slab of the factor) is not supported");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case KL_KS_FLOAT32: return ks::launch_f32(p, s);
    case KL_KS_FLOAT16: return ks::launch_f16(p, s);
    case KL_KS_BFLOAT16: return ks::launch_bf16(p, s);
    default: return fail(KL_ERR_INVALID, "ks_matmul_cuda: unsupported dtype (float32, float16, bfloat16)");
  }
}
