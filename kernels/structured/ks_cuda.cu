// CUDA Kronecker-sparse kernel: float32 instantiations and the entry point (the half types are
// instantiated in ks_cuda_f16.cu and ks_cuda_bf16.cu, compiled in parallel).
#include <string>

#include "fp32_mode.hpp"
#include "ks_cuda_launch.cuh"
#include "ks_cuda_planar.cuh"

namespace kl {
namespace ks {

thread_local TileProbe *g_tile_probe = nullptr;

namespace {

// float32 goes to the pipelined tensor-core kernel as 3xTF32 (ks_cuda_pipe.cuh) where its
// alignment holds, unless the mode says IEEE (kl_ks_float32_mode; KRONLINALG_KS_FP32=ffma sets
// that default): then the CUDA-core kernel below (exact float32 FMAs).
Fp32Mode g_fp32("KRONLINALG_KS_FP32");
static_assert(Fp32Mode::kTf32x3 == KL_KS_FP32_TF32X3 && Fp32Mode::kIeee == KL_KS_FP32_IEEE,
              "one numbering");

// float32 on CUDA cores: 8×8 outputs per thread.  d = 3, 6: whole-d tiles (TJ = d), so the (l, j) span of an X
// row, a K row and a Y row is contiguous and loads in 16-byte vectors whatever d is.  Other d:
// TJ from pick_tj, but 8 where it says 16 (a 64×32 GEMM per j instead of 64×16: half the L2
// traffic per flop).  TL per shape as measured on an H100 (TL = 8 spills on the TJ = 8 shape).
template <int TN, int TK, int TJ, int TL, int NT>
int launch_f32_shape(const kl_ks_problem *p, cudaStream_t s) {
  if (probed(TN, TK, TL, TJ, KL_KS_TILE_SIMPLE)) return KL_OK;
  const Params q = make_params(p, TN, TK, TJ);
  const int smem = F32Shape<TN, TK, TJ, TL, NT>::smem_bytes();
  return p->layout == KL_KS_BATCH_FIRST
             ? launch_checked(q, ks_f32<TN, TK, TJ, TL, NT, true>, smem, s, NT)
             : launch_checked(q, ks_f32<TN, TK, TJ, TL, NT, false>, smem, s, NT);
}

int launch_f32(const kl_ks_problem *p, cudaStream_t s) {
  if (pipe_applies(p) && g_fp32.get() == KL_KS_FP32_TF32X3)
    return p->layout == KL_KS_BATCH_FIRST ? launch_pipe<float, true>(p, s)
                                          : launch_pipe<float, false>(p, s);
  const int64_t d = p->d;
  if (d == 3) return launch_f32_shape<64, 64, 3, 8, 192>(p, s);
  if (d == 6) return launch_f32_shape<64, 64, 6, 8, 384>(p, s);
  int tj = pick_tj(d);
  if (tj == 16) tj = 8;
  static const int tk1[] = {32, 128}, tk4[] = {16, 64};
  switch (tj) {
    case 1:
      return pick_tk(p->b, tk1, 2) == 32 ? launch_f32_shape<512, 32, 1, 8, 256>(p, s)
                                         : launch_f32_shape<128, 128, 1, 8, 256>(p, s);
    case 2: return launch_f32_shape<128, 64, 2, 8, 256>(p, s);
    case 4:
      return pick_tk(p->b, tk4, 2) == 16 ? launch_f32_shape<256, 16, 4, 8, 256>(p, s)
                                         : launch_f32_shape<64, 64, 4, 8, 256>(p, s);
    case 8: return launch_f32_shape<64, 32, 8, 4, 256>(p, s);
  }
  return fail(KL_ERR_INVALID, "ks_matmul_cuda: no tile shape for this pattern");
}

// The launch of a checked problem by element type (kl_ks_matmul_cuda, kl_ks_cuda_tile's probe).
int dispatch(const kl_ks_problem *p, int dtype, cudaStream_t s) {
  switch (dtype) {
    case KL_KS_FLOAT32: return launch_f32(p, s);
    case KL_KS_FLOAT16: return launch_f16(p, s);
    case KL_KS_BFLOAT16: return launch_bf16(p, s);
    default: return fail(KL_ERR_INVALID, "ks_matmul_cuda: unsupported dtype (float32, float16, bfloat16)");
  }
}

}  // namespace
}  // namespace ks
}  // namespace kl

extern "C" int kl_ks_cuda_current_device(void) { return kl::current_device(); }

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
  return ks::dispatch(p, dtype, static_cast<cudaStream_t>(stream));
}

extern "C" int kl_ks_cuda_tile(const kl_ks_problem *p, int dtype, int units, int64_t out[5]) {
  using namespace kl;
  if (!p || !out || p->a < 1 || p->b < 1 || p->c < 1 || p->d < 1 || p->batch < 0)
    return fail(KL_ERR_INVALID, "ks_cuda_tile: invalid problem description");
  if (p->layout != KL_KS_BATCH_FIRST && p->layout != KL_KS_BATCH_LAST)
    return fail(KL_ERR_INVALID, "ks_cuda_tile: layout must be KL_KS_BATCH_FIRST or KL_KS_BATCH_LAST");
  const int64_t rows_in = p->a * p->c * p->d, rows_out = p->a * p->b * p->d;
  const bool first = p->layout == KL_KS_BATCH_FIRST;
  if (p->batch > 1 && (p->x_ld < (first ? rows_in : p->batch) || p->y_ld < (first ? rows_out : p->batch)))
    return fail(KL_ERR_INVALID, "ks_cuda_tile: leading dimension of x or y shorter than a row");
  if (p->vs[3] != 1 || p->vs[2] != p->d || p->vs[1] != p->c * p->d || p->vs[0] != p->b * p->c * p->d)
    return fail(KL_ERR_INVALID, "ks_cuda_tile: the values must be C-contiguous (a, b, c, d)");
  if (p->b * p->c * p->d >= (int64_t(1) << 31))
    return fail(KL_ERR_INVALID, "ks_cuda_tile: b·c·d >= 2^31 (one slab of the factor) is not supported");
  ks::TileProbe probe;
  if (units == 0) {  // the current device, as a launch would see it
    DeviceInfo dev;
    const cudaError_t e = query_device(&dev);
    if (e != cudaSuccess) return ks::cuda_fail(e, "tile probe: no current device");
    probe.units = dev.sms;
    probe.wgmma = dev.cc_major == 9 && dev.cc_minor == 0;
  } else {  // a device of |units| SMs, an sm_90 (wgmma) where units < 0
    probe.units = units < 0 ? -units : units;
    probe.wgmma = units < 0;
  }
  ks::TileProbe *const outer = ks::g_tile_probe;
  ks::g_tile_probe = &probe;
  const int rc = ks::dispatch(p, dtype, nullptr);
  ks::g_tile_probe = outer;
  if (rc != KL_OK) return rc;
  if (!probe.hit) return fail(KL_ERR_INVALID, "ks_cuda_tile: no tile shape for this pattern");
  for (int t = 0; t < 5; ++t) out[t] = probe.out[t];
  return KL_OK;
}

namespace {

// The values' copies (transposed, or as dense blocks): a valid, contiguous pattern; only the
// element size matters.
template <template <class> class Launch>
int copy_values(const kl_ks_problem *p, void *out, int dtype, void *stream, const char *who) {
  using namespace kl;
  const std::string name(who);
  if (!p || p->a < 1 || p->b < 1 || p->c < 1 || p->d < 1)
    return fail(KL_ERR_INVALID, (name + ": invalid pattern").c_str());
  if (!p->values || !out) return fail(KL_ERR_INVALID, (name + ": null pointer").c_str());
  if (p->vs[3] != 1 || p->vs[2] != p->d || p->vs[1] != p->c * p->d || p->vs[0] != p->b * p->c * p->d)
    return fail(KL_ERR_INVALID, (name + ": the values must be C-contiguous (a, b, c, d)").c_str());
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case KL_KS_FLOAT64: Launch<uint64_t>::run(p, out, s); break;
    case KL_KS_FLOAT32: Launch<uint32_t>::run(p, out, s); break;
    case KL_KS_FLOAT16:
    case KL_KS_BFLOAT16: Launch<uint16_t>::run(p, out, s); break;
    default: return fail(KL_ERR_INVALID, (name + ": unsupported dtype").c_str());
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : ks::cuda_fail(e, "values copy launch");
}

template <class T>
struct Transposed {
  static void run(const kl_ks_problem *p, void *out, cudaStream_t s) { kl::ks::launch_transpose<T>(p, out, s); }
};
template <class T>
struct DenseSlabs {
  static void run(const kl_ks_problem *p, void *out, cudaStream_t s) { kl::ks::launch_dense_slabs<T>(p, out, s); }
};

}  // namespace

extern "C" int kl_ks_transpose_values_cuda(const kl_ks_problem *p, void *out, int dtype,
                                           void *stream) {
  return copy_values<Transposed>(p, out, dtype, stream, "ks_transpose_values_cuda");
}

extern "C" int kl_ks_dense_slabs_cuda(const kl_ks_problem *p, void *out, int dtype, void *stream) {
  return copy_values<DenseSlabs>(p, out, dtype, stream, "ks_dense_slabs_cuda");
}

extern "C" int kl_ks_planar_cuda(int split, int64_t batch, int64_t a, int64_t n, int64_t d,
                                 const void *src, void *dst, int64_t ld, int dtype, void *stream) {
  using namespace kl;
  if (a < 1 || n < 1 || d < 1 || batch < 0)
    return fail(KL_ERR_INVALID, "ks_planar_cuda: invalid sizes");
  if (batch == 0) return KL_OK;
  if (!src || !dst) return fail(KL_ERR_INVALID, "ks_planar_cuda: null pointer");
  if (batch > 1 && ld < a * n * d)
    return fail(KL_ERR_INVALID, "ks_planar_cuda: leading dimension shorter than a row");
  int es = 0;
  switch (dtype) {  // a copy: only the element size matters
    case KL_KS_FLOAT64: es = 8; break;
    case KL_KS_FLOAT32: es = 4; break;
    case KL_KS_FLOAT16:
    case KL_KS_BFLOAT16: es = 2; break;
    default: return fail(KL_ERR_INVALID, "ks_planar_cuda: unsupported dtype");
  }
  const ks::PlanarDims s{batch, a, n, d, ld};
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  const cudaError_t e = split ? ks::launch_planar<true>(s, es, src, dst, st)
                              : ks::launch_planar<false>(s, es, src, dst, st);
  return e == cudaSuccess ? KL_OK : ks::cuda_fail(e, "planar copy");
}

extern "C" int kl_ks_float32_mode(int mode) { return kl::ks::g_fp32.set(mode); }
