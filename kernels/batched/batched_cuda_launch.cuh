// The launchers over the kernels of batched_cuda_kernels.cuh (small tiles) and
// batched_cuda_large.cuh (128 x 128 tiles): one shape of a uniform stack, and a variable batch
// split by size between the two kernels.
#ifndef KRONLINALG_BATCHED_CUDA_LAUNCH_CUH
#define KRONLINALG_BATCHED_CUDA_LAUNCH_CUH

#include "batched_cuda_kernels.cuh"
#include "batched_cuda_large.cuh"
#include "batched_cuda_thin.cuh"
#include "batched_cuda_tiny.cuh"
#include "batched_cuda_wgmma.cuh"

namespace kl {
namespace batched {

// The seven shapes of batched_config.hpp for one element type and MMA kind.
// Whether some product of a uniform stack has an operand whose contiguous rows are not all
// 16-byte aligned (the loaders' staging / realigning paths).
inline bool rows_unaligned(const kl_batched_problem &p, int elem) {
  const int vec = 16 / elem;
  auto bad = [&](const void *x, int64_t rs, int64_t cs, const int64_t *bs) {
    if (cs != 1) return false;
    if (rs % vec || reinterpret_cast<uintptr_t>(x) % 16) return true;
    for (int d = 0; d < p.ndim; ++d)
      if (p.shape[d] > 1 && bs[d] % vec) return true;
    return false;
  };
  return bad(p.a, p.a_rs, p.a_cs, p.a_bs) || bad(p.b, p.b_rs, p.b_cs, p.b_bs);
}

// A uniform stack on the TILE x TILE kernel of batched_cuda_large.cuh (tensor cores only:
// pick_shape; float64 as m16n8k8, the launcher).
template <class T, int MMA, int TILE>
cudaError_t launch_large_uniform(const Args &args, cudaStream_t stream) {
  if constexpr (MMA == kHmma || MMA == kTf32x3 || MMA == kDmma16) {
    if (args.table) return cudaErrorInvalidValue;  // variable batches: launch_variable_split
    auto items = [&](int64_t tile) {
      return args.count * ((args.p.m + tile - 1) / tile) * ((args.p.n + tile - 1) / tile);
    };
    if constexpr (sizeof(T) < 8) {
      const bool unaligned = rows_unaligned(args.p, int(sizeof(T)));
      if constexpr (sizeof(T) == 2) {  // the warpgroup-MMA kernel where it runs and is the
                                       // faster (128 x 128 tiles, k >= 64; level 3: everywhere)
        const int level = wgmma_level();
        const bool fits = TILE == 128 && args.p.k >= 64;
        if ((fits ? level >= 1 : level >= 3) && args.p.a_cs == 1 && args.p.b_cs == 1 &&
            !unaligned)
          return launch_wg<T, LargeUniformSrc<T, 128>>(args, items(128), stream);
      }
      if (unaligned)  // (odd orders): the staging variant
        return launch_large<T, LargeUniformSrc<T, TILE>, true>(args, items(TILE), stream);
    }
    return launch_large<T, LargeUniformSrc<T, TILE>, false>(args, items(TILE), stream);
  } else {
    return cudaErrorInvalidValue;
  }
}

template <class T, int MMA>
cudaError_t launch_shape(int shape, const Args &args, cudaStream_t stream) {
  // 64 x 64 tiles take k-panels of 64 bytes a row (32 doubles or floats, 64 halves): a quarter
  // to half the barriers and panel turns of 16-wide panels, whose one or two MMA k-steps a warp
  // could not hide a panel's latency behind
  constexpr int kBigK = sizeof(T) == 2 ? 64 : 32;
  int64_t items = 0;
  auto count_items = [&](int bm, int bn) {
    if (args.table) return args.count * args.tm_max;  // variable: rows of tiles (see the kernel)
    return args.count * ((args.p.m + bm - 1) / bm) * ((args.p.n + bn - 1) / bn);
  };
  switch (shape) {
    case kT16: {
      using K = Cfg<MMA, 16, 16, 16, 1, 1, 4, T>;
      items = count_items(K::BM, K::BN);
      return launch_one<T, MMA, K>(args, items, stream);
    }
    case kS32: {
      using K = Cfg<MMA, 16, 32, 32, 2, 1, 2, T>;
      items = count_items(K::BM, K::BN);
      return launch_one<T, MMA, K>(args, items, stream);
    }
    case kS32G: {
      using K = Cfg<MMA, 16, 32, 32, 2, 2, 1, T>;
      items = count_items(K::BM, K::BN);
      return launch_one<T, MMA, K>(args, items, stream);
    }
    case kM64: {
      using K = Cfg<MMA, kBigK, 64, 64, 4, 1, 1, T>;
      items = count_items(K::BM, K::BN);
      return launch_one<T, MMA, K>(args, items, stream);
    }
    case kL128:
      return launch_large_uniform<T, MMA, 128>(args, stream);
    case kL64:
      return launch_large_uniform<T, MMA, 64>(args, stream);
    default: {
      using K = Cfg<MMA, kBigK, 64, 64, 2, 2, 1, T>;
      items = count_items(K::BM, K::BN);
      return launch_one<T, MMA, K>(args, items, stream);
    }
  }
}


// Scratch words of a split variable launch (zeroed by the caller): the large and small lists'
// work counters, the three lists' lengths (large, small, wgmma), the wgmma list's counter; then
// the lists.
constexpr int kSplitHeader = 6;
// The sizes of a split variable launch, fixed once a call: the scratch the caller allocates and
// the lists the kernels fill agree by construction.  wg: the half types' warpgroup-MMA kernel
// takes products too (variable_wg_mode: 1 those whose rows are all 16-byte aligned, 2 every
// product of order >= from as well), a third list of rows of 128.
struct SplitPlan {
  int64_t from, large_rows, small_rows;  // rows of 128 / small_bm a product, at most
  int small_shape, small_bm, wg;
  int64_t words(int64_t count) const {
    return kSplitHeader + count * (large_rows * (wg ? 2 : 1) + small_rows);
  }
};
inline SplitPlan split_plan(int64_t from, int64_t max_order, int small_shape, int mma,
                            int wg = 0) {
  const int small_bm = describe(small_shape, mma).tile_m;
  return {from, (max_order + 127) / 128, (from - 1 + small_bm - 1) / small_bm, small_shape,
          small_bm, wg};
}

// A variable batch of tensor-core products (float16 / bfloat16, 3xTF32 float32, m16n8k8
// float64) in three or four launches on one stream, no host synchronisation: bin_kernel sorts
// the table's rows of tiles into lists (BinLists), the warpgroup-MMA kernel takes its list
// (plan.wg, the half types), the 128 x 128 kernel -- or, for the half types, the staged form of
// the warpgroup-MMA kernel (wg_staged) -- products of order >= from, the small-tile kernel
// (shape small_shape, chosen for orders < from) the rest.  `args` as kl_batched_matmul_cuda_var
// fills it (counter unused); `scratch`: plan.words(count) words.
template <class T, int MMA>
cudaError_t launch_variable_split(const Args &args, const SplitPlan &plan,
                                  unsigned long long *scratch, cudaStream_t stream) {
  const int64_t from = plan.from, large_rows = plan.large_rows, small_rows = plan.small_rows;
  const int small_bm = plan.small_bm, small_shape = plan.small_shape;
  const int wg = sizeof(T) == 2 ? plan.wg : 0;
  int64_t *large_list = reinterpret_cast<int64_t *>(scratch + kSplitHeader);
  int64_t *small_list = large_list + args.count * large_rows;
  int64_t *wg_list = small_list + args.count * small_rows;
  const int64_t blocks = (args.count + 255) / 256;
  const BinLists lists{from, large_rows, small_bm, small_rows, wg, int(sizeof(T)), scratch + 2,
                       large_list, small_list, wg_list};
#ifdef KL_BATCHED_EMULATE
  emu_launch(unsigned(blocks), 256, 0, [=] { bin_kernel(args.table, args.count, lists); });
#else
  bin_kernel<<<unsigned(blocks), 256, 0, stream>>>(args.table, args.count, lists);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
#endif
  Args la = args;
  la.counter = scratch;
  la.list = large_list;
  la.list_count = scratch + 2;
  la.tm_max = large_rows;
  cudaError_t e2 = cudaSuccess;
  if constexpr (sizeof(T) == 2) {
    if (wg) {  // the warpgroup-MMA kernel's list first (KRONLINALG_BATCHED_WGMMA)
      Args wa = la;
      wa.counter = scratch + 5;
      wa.list = wg_list;
      wa.list_count = scratch + 4;
      e2 = launch_wg<T, LargeVariableSrc<T>>(wa, args.count * large_rows, stream);
      if (e2 != cudaSuccess) return e2;
    }
  }
  // the 128 x 128 mma.sync kernel: the staging variant for unaligned rows (float64: 8-byte
  // cp.async, none needed); KRONLINALG_BATCHED_STAGING=0: synchronous realigned loads instead
  if (wg < 2) {  // (at wg 2 the wgmma list took every product of order >= from)
    bool done = false;
    if constexpr (sizeof(T) == 2) {
      if (wg && wg_staged()) {  // the staged warpgroup-MMA kernel takes them instead
        e2 = launch_wg<T, LargeVariableSrc<T>, true>(la, args.count * large_rows, stream);
        done = true;
      }
    }
    if (!done) {
      if constexpr (sizeof(T) < 8) {
        if (staging())
          e2 = launch_large<T, LargeVariableSrc<T>, true>(la, args.count * large_rows, stream);
        else
          e2 = launch_large<T, LargeVariableSrc<T>, false>(la, args.count * large_rows, stream);
      } else {
        e2 = launch_large<T, LargeVariableSrc<T>, false>(la, args.count * large_rows, stream);
      }
    }
    if (e2 != cudaSuccess) return e2;
  }
  Args sa = args;
  sa.counter = scratch + 1;
  sa.list = small_list;
  sa.list_count = scratch + 3;
  sa.tm_max = small_rows;
  if constexpr (MMA == kDmma16) {  // m16n8k8 on 64 x 64 tiles only (batched_cuda.cu)
    if (small_shape != kM64 && small_shape != kM64G)
      return launch_shape<T, kDmma>(small_shape, sa, stream);
  }
  return launch_shape<T, MMA>(small_shape, sa, stream);
}

// per-dtype translation units (batched_cuda_f64.cu, _f32.cu, _f16.cu)
cudaError_t launch_f64(int shape, int mma, const Args &args, cudaStream_t stream);
cudaError_t launch_f32(int shape, int mma, const Args &args, cudaStream_t stream);
cudaError_t launch_f16(int shape, bool bf16, const Args &args, cudaStream_t stream);
cudaError_t launch_f16_split(bool bf16, const Args &args, const SplitPlan &plan,
                             unsigned long long *scratch, cudaStream_t stream);
cudaError_t launch_f32_split(const Args &args, const SplitPlan &plan, unsigned long long *scratch,
                             cudaStream_t stream);
// batched_cuda_tiny.cu: the tiny-product kernel in the problem's element type
cudaError_t launch_tiny_dtype(int dtype, const kl_batched_problem &p, int64_t count,
                              const int64_t *strides, cudaStream_t stream);
// batched_cuda_thin.cu: the thin-product kernel (float16, bfloat16, 3xTF32 float32)
cudaError_t launch_thin_dtype(int dtype, const kl_batched_problem &p, int64_t count,
                              const int64_t *strides, cudaStream_t stream);
cudaError_t launch_f64_split(const Args &args, const SplitPlan &plan, unsigned long long *scratch,
                             cudaStream_t stream);

}  // namespace batched
}  // namespace kl

#endif
