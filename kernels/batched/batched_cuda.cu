// The CUDA entry points of batched.h: validation, the configuration (batched_config.hpp), the
// float32 mode, and the launch on the caller's stream.
#include <cuda_runtime.h>

#include <cstdio>

#include "batched.h"
#include "batched_config.hpp"
#include "batched_cuda_launch.cuh"
#include "cuda_device.hpp"
#include "fp32_mode.hpp"

namespace kl {
namespace batched {
namespace {

Fp32Mode g_fp32("KRONLINALG_BATCHED_FP32");

int cuda_fail(cudaError_t e, const char *what) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "batched_matmul: %s: %s", what, cudaGetErrorString(e));
  return fail(KL_ERR_CUDA, buf);
}

int check_device() {
  DeviceInfo d;
  const cudaError_t e = query_device(&d);
  if (e != cudaSuccess) return fail(KL_ERR_NO_DEVICE, "batched_matmul: no usable CUDA device");
  if (d.cc_major < 8)
    return fail(KL_ERR_NO_DEVICE,
                "batched_matmul: the CUDA kernels need compute capability 8.0 or newer");
  return KL_OK;
}

int launch(int shape, int dtype, int mma, const Args &args, cudaStream_t stream) {
  cudaError_t e;
  DeviceInfo d;
  // m16n8k8 on 64 x 64 tiles only: order 256 ran 1.4x faster (16.3 -> 11.7 ms, batch 10⁴), but
  // the one-warp 16 x 16 tiles ran 2.1x slower (25.8 -> 54.6 µs at order 16, H100)
  if (mma == kDmma && (shape == kM64 || shape == kM64G) && query_device(&d) == cudaSuccess &&
      d.cc_major >= 9)
    mma = kDmma16;
  if (mma == kDmma && (shape == kL128 || shape == kL64)) {  // float64: m16n8k8 (sm_90) only
    if (query_device(&d) == cudaSuccess && d.cc_major >= 9) mma = kDmma16;
    else shape = kM64;
  }
  switch (dtype) {
    case KL_BATCHED_F64: e = launch_f64(shape, mma, args, stream); break;
    case KL_BATCHED_F32: e = launch_f32(shape, mma, args, stream); break;
    case KL_BATCHED_F16: e = launch_f16(shape, false, args, stream); break;
    case KL_BATCHED_BF16: e = launch_f16(shape, true, args, stream); break;
    default: return fail(KL_ERR_INVALID, "batched_matmul_cuda: unknown dtype code");
  }
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "kernel launch");
}

}  // namespace
}  // namespace batched
}  // namespace kl

extern "C" int kl_batched_matmul_cuda(const kl_batched_problem *p, int dtype, int algo,
                                      void *stream) {
  using namespace kl;
  using namespace kl::batched;
  if (!p || p->m < 0 || p->n < 0 || p->k < 0 || p->ndim < 0 || p->ndim > KL_BATCHED_MAX_DIMS ||
      algo < 0 || algo > 2 || !p->d || (p->k > 0 && (!p->a || !p->b)) ||
      (p->beta != 0.0 && !p->c))
    return fail(KL_ERR_INVALID, "batched_matmul_cuda: invalid problem description");
  int64_t count = 1;
  for (int d = 0; d < p->ndim; ++d) {
    if (p->shape[d] < 0) return fail(KL_ERR_INVALID, "batched_matmul_cuda: negative batch size");
    count *= p->shape[d];
  }
  if (count == 0 || p->m == 0 || p->n == 0) return KL_OK;
  if (const int s = check_device()) return s;
  const int mma = mma_kind(dtype, g_fp32.get());
  const int elem = dtype == KL_BATCHED_F64 ? 8 : dtype == KL_BATCHED_F32 ? 4 : 2;
  int64_t strides[4];
  if (algo != KL_BATCHED_2D) {
    // dense products of orders <= 32 on tensor cores: the tiny-product kernel
    DeviceInfo d;
    const bool tc = mma == kHmma || mma == kTf32x3 ||
                    (mma == kDmma && query_device(&d) == cudaSuccess && d.cc_major >= 9);
    if (tc && tiny_on() && tiny_variant(p->m, p->n, p->k, elem) >= 0 &&
        tiny_layout(*p, count, elem, strides)) {
      const cudaError_t e =
          launch_tiny_dtype(dtype, *p, count, strides, static_cast<cudaStream_t>(stream));
      return e == cudaSuccess ? KL_OK : cuda_fail(e, "kernel launch");
    }
    // low-rank products (k <= 32 from order 64): the thin-product kernel
    if ((mma == kHmma || mma == kTf32x3) && thin_on() && thin_pays(p->m, p->n, p->k, elem) &&
        thin_layout(*p, count, elem, strides)) {
      const cudaError_t e =
          launch_thin_dtype(dtype, *p, count, strides, static_cast<cudaStream_t>(stream));
      return e == cudaSuccess ? KL_OK : cuda_fail(e, "kernel launch");
    }
  }
  Args args{*p, count, nullptr, 0};
  return launch(pick_shape(p->m, p->n, algo, mma), dtype, mma, args,
                static_cast<cudaStream_t>(stream));
}

extern "C" int kl_batched_matmul_cuda_var(const void *table, int64_t count, int64_t max_order,
                                          double alpha, double beta, int dtype, int algo,
                                          void *stream) {
  using namespace kl;
  using namespace kl::batched;
  if (count < 0 || (count > 0 && !table) || algo < 0 || algo > 2)
    return fail(KL_ERR_INVALID, "batched_matmul_cuda_var: invalid problem table");
  if (count == 0) return KL_OK;
  if (const int s = check_device()) return s;
  if (max_order <= 0) max_order = KL_BATCHED_MAX_ORDER;
  const int mma = mma_kind(dtype, g_fp32.get());
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t from = large_from();
  DeviceInfo dev;
  const bool sm90 = query_device(&dev) == cudaSuccess && dev.cc_major >= 9;
  if ((mma == kHmma || mma == kTf32x3 || (mma == kDmma && sm90)) && algo != KL_BATCHED_2D &&
      from > 0 && max_order >= from) {
    // split by size (launch_variable_split): 128 x 128 tiles for the large products, the
    // small-tile kernel of orders below `from` for the rest
    const int small_shape = pick_shape(from - 1, from - 1, algo);
    Args args{};
    args.p.alpha = alpha;
    args.p.beta = beta;
    args.count = count;
    args.table = static_cast<const kl_batched_entry *>(table);
    const SplitPlan plan =
        split_plan(from, max_order, small_shape, mma, mma == kHmma ? variable_wg_mode() : 0);
    const size_t bytes = size_t(plan.words(count)) * 8;
    void *scratch = nullptr;
    if (cudaMallocAsync(&scratch, bytes, s) == cudaSuccess) {
      cudaError_t e = cudaMemsetAsync(scratch, 0, kSplitHeader * 8, s);
      unsigned long long *words = static_cast<unsigned long long *>(scratch);
      if (e == cudaSuccess)
        e = mma == kTf32x3 ? launch_f32_split(args, plan, words, s)
            : mma == kDmma ? launch_f64_split(args, plan, words, s)
                           : launch_f16_split(dtype == KL_BATCHED_BF16, args, plan, words, s);
      (void)cudaFreeAsync(scratch, s);
      return e == cudaSuccess ? KL_OK : cuda_fail(e, "kernel launch");
    }
    (void)cudaGetLastError();  // no stream-ordered allocation here: the single launch below
  }
  const int shape = pick_shape(max_order, max_order, algo);
  const kl_batched_config cfg = describe(shape, 0);
  Args args{};
  args.p.alpha = alpha;
  args.p.beta = beta;
  args.count = count;
  args.table = static_cast<const kl_batched_entry *>(table);
  args.tm_max = (max_order + cfg.tile_m - 1) / cfg.tile_m;
  // the groups' work counter (VariableCursor: dynamic claims), stream-ordered: concurrent calls
  // on other streams get their own; without one the kernel splits the items statically
  void *counter = nullptr;
  if (cudaMallocAsync(&counter, sizeof(unsigned long long), s) != cudaSuccess) {
    (void)cudaGetLastError();
    counter = nullptr;
  } else if (cudaMemsetAsync(counter, 0, sizeof(unsigned long long), s) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFreeAsync(counter, s);
    counter = nullptr;
  }
  args.counter = static_cast<unsigned long long *>(counter);
  const int status = launch(shape, dtype, mma, args, s);
  if (counter) (void)cudaFreeAsync(counter, s);
  return status;
}

extern "C" int kl_batched_float32_mode(int mode) { return kl::batched::g_fp32.set(mode); }

extern "C" int kl_batched_cuda_device_check(void) { return kl::batched::check_device(); }

extern "C" int kl_batched_cuda_current_device(void) { return kl::current_device(); }
