// The CUDA kernel configuration for one problem: which tile, how many warps, how many products a
// block holds.  Pure host code, shared by the CUDA launcher and kl_batched_cuda_config (built into
// the CPU library too, so the cost model can ask it on a machine without a GPU).
#ifndef KRONLINALG_BATCHED_CONFIG_HPP
#define KRONLINALG_BATCHED_CONFIG_HPP

#include <cstdint>

#include "batched.h"
#include "knobs.hpp"

namespace kl {
namespace batched {

// The kernel instances (batched_cuda_kernels.cuh instantiates one per mma kind):
//   kT16  16 x 16 tiles, one warp per product, four products per block (orders <= 16)
//   kS32  32 x 32, 1D: two warps split the rows, two products per block (orders <= 32)
//   kS32G 32 x 32, 2D: a 2 x 2 warp grid, one product per block
//   kM64  64 x 64 tiles, 1D: four warps split the rows (larger orders: tile by tile)
//   kM64G 64 x 64, 2D: 2 x 2 warp grid
//   kL128 128 x 128, a 2 x 4 warp grid (float64: 4 x 4), a 4-stage ring
//         (batched_cuda_large.cuh): tensor-core dtypes from order large_from() (float64 on
//         compute capability 9.0 and newer: m16n8k8 DMMA)
//   kL64  64 x 64 on the same kernel, a 2 x 2 warp grid: uniform stacks from order mid_from()
//         below large_from()
enum Shape { kT16 = 0, kS32 = 1, kS32G = 2, kM64 = 3, kM64G = 4, kL128 = 5, kL64 = 6 };
// kDmma16: float64 on sm_90's m16n8k8 DMMA (twice m8n8k4's work an instruction); the launcher
// takes it on compute capability 9.0 and newer, descriptions (no device at hand) say kDmma.
enum Mma { kFfma = 0, kDmma = 1, kHmma = 2, kTf32x3 = 3, kDmma16 = 4 };

inline int mma_kind(int dtype, int fp32_mode) {
  if (dtype == KL_BATCHED_F64) return kDmma;
  if (dtype == KL_BATCHED_F16 || dtype == KL_BATCHED_BF16) return kHmma;
  return fp32_mode == KL_BATCHED_FP32_IEEE ? kFfma : kTf32x3;
}

// The order from which float16 / bfloat16 / 3xTF32 float32 / float64 products (1D or auto)
// run on 128 x 128 tiles;
// KRONLINALG_BATCHED_LARGE (0: never).
inline int64_t large_from() { return kl::knob_int("KRONLINALG_BATCHED_LARGE", 96); }
// Whether the large-tile kernel stages unaligned rows of 2- and 4-byte variable batches in
// place (KRONLINALG_BATCHED_STAGING=1, the default: the aligned 16-byte chunks by cp.async into
// the stage, shifted into a compute buffer before use) or loads them synchronously (0).
// H100 (2026-11-27, 10⁴ packed products of orders 8..256): staged float16 / bfloat16 3.24 /
// 3.20 ms, synchronous 3.37 / 3.41; 3xTF32 6.50 / 6.49 (an earlier staging variant with 3 stages
// and two staging areas took 4.10 ms where synchronous loads took 3.52).
inline bool staging() { return kl::knob_int("KRONLINALG_BATCHED_STAGING", 1) != 0; }
// ... and on its 64 x 64 tiles (uniform stacks), from KRONLINALG_BATCHED_MID (0: never).
inline int64_t mid_from() { return kl::knob_int("KRONLINALG_BATCHED_MID", 48); }
// Whether uniform stacks of dense products of orders <= 32 take the tiny-product kernel
// (batched_cuda_tiny.cuh); KRONLINALG_BATCHED_TINY=0 sends them to the tile kernels.
inline bool tiny_on() { return kl::knob_int("KRONLINALG_BATCHED_TINY", 1) != 0; }

// Which tiny-product kernel a dense stack of (m, n, k) takes (elements of `elem` bytes, an MMA
// kind the kernel has: float16 / bfloat16, 3xTF32, float64): 16 / 32 for the square orders of
// the fixed kernel, 0 for the generic one (float16 / bfloat16 / float32 up to order 16, where it
// measured faster than the tile kernels), -1 for neither.
inline int tiny_variant(int64_t m, int64_t n, int64_t k, int elem) {
  if (m < 1 || n < 1 || k < 1) return -1;
  if (m == n && n == k && (m == 16 || m == 32)) return int(m);
  if (elem <= 4 && m <= 16 && n <= 16 && k <= 16) return 0;
  return -1;
}

// Whether a dense stack of (m, n, k) takes the thin-product kernel (batched_cuda_thin.cuh): a
// short inner dimension (k <= 32, at most half the smaller order, which is 32 or more) from order
// 64, elements of 2 or 4 bytes (its MMA kinds: half types, 3xTF32), rows of A, B and D that are
// whole 16-byte pieces.  KRONLINALG_BATCHED_THIN=0 sends these stacks to the tile kernels.
inline bool thin_on() { return kl::knob_int("KRONLINALG_BATCHED_THIN", 1) != 0; }
inline bool thin_variant(int64_t m, int64_t n, int64_t k, int elem) {
  if ((elem != 2 && elem != 4) || k < 1 || k > 32 || (k * elem) % 16 || (n * elem) % 16)
    return false;
  const int64_t lo = m < n ? m : n, hi = m > n ? m : n;
  return lo >= 32 && hi >= 64 && 2 * k <= lo;
}
// ... and where the launcher and the cost model take it: the half types wherever it fits (H100,
// 10⁴ products of 64 x 16 x 64: 0.73 of copy bandwidth against the tile kernels' 0.47), float32
// from order 128 or with k <= 16 (its 3xTF32 MMAs run on every column of a 128-wide tile: at
// 64 x 32 x 64 the tile kernels measured 0.71 against its 0.68; 64 x 16 x 64 0.72 against 0.79).
inline bool thin_pays(int64_t m, int64_t n, int64_t k, int elem) {
  return thin_variant(m, n, k, elem) && (elem == 2 || k <= 16 || (m < n ? m : n) >= 128);
}

inline int pick_shape(int64_t m, int64_t n, int algo, int mma = -1) {
  const int64_t order = m > n ? m : n;
  if (algo == KL_BATCHED_2D) return order <= 32 ? kS32G : kM64G;
  // uniform float64 stays on the small-tile kernels: on the H100 the large tiles ran slower
  // (orders 64 / 128 / 256: 398 / 1844 / 12421 µs against 367 / 1671 / 11774, batch 10⁴; its
  // variable batches still split, 6.57 ms against 7.42)
  if (mma == kHmma || mma == kTf32x3) {
    const int64_t from = large_from(), mid = mid_from();
    if (from > 0 && order >= from) return kL128;
    if (mid > 0 && order >= mid) return kL64;
  }
  if (order <= 16) return kT16;
  if (order <= 32) return kS32;
  return kM64;
}

inline kl_batched_config describe(int shape, int mma) {
  kl_batched_config c{};
  c.tile_k = 16;
  c.mma = mma;
  // the launch bounds' blocks an SM (batched_cuda_kernels.cuh Cfg::MIN_BLOCKS; the large-tile
  // kernel's LargeCfgT::MIN_BLOCKS below)
  c.blocks_per_sm = shape == kM64 || shape == kM64G ? 3 : 4;
  switch (shape) {
    case kT16: c.tile_m = c.tile_n = 16; c.warps = 1; c.items_per_block = 4; c.dims = 1; break;
    case kS32: c.tile_m = c.tile_n = 32; c.warps = 2; c.items_per_block = 2; c.dims = 1; break;
    case kS32G: c.tile_m = c.tile_n = 32; c.warps = 4; c.items_per_block = 1; c.dims = 2; break;
    case kM64: c.tile_m = c.tile_n = 64; c.warps = 4; c.items_per_block = 1; c.dims = 1; break;
    case kL128: c.tile_m = c.tile_n = 128; c.warps = 8; c.items_per_block = 1; c.dims = 2; break;
    case kL64: c.tile_m = c.tile_n = 64; c.warps = 4; c.items_per_block = 1; c.dims = 2; break;
    default: c.tile_m = c.tile_n = 64; c.warps = 4; c.items_per_block = 1; c.dims = 2; break;
  }
  if (shape == kL128 || shape == kL64) {  // (float64: compute capability 9.0, the launcher)
    const bool f64 = mma == kDmma || mma == kDmma16;
    c.tile_k = mma == kHmma ? 32 : 16;
    if (shape == kL128) c.warps = f64 ? 16 : 8;
    c.blocks_per_sm = shape == kL64 ? 4 : f64 ? 1 : 2;
    return c;
  }
  if (c.tile_m == 64) c.tile_k = mma == kHmma ? 64 : 32;  // 64-byte panels (launch_shape's kBigK)
  return c;
}

}  // namespace batched
}  // namespace kl

#endif
