// CUDA block-sparse SpMM and SpGEMM on tensor cores.
//
// SpMM (KAMI's 1D pattern with Koanantakool's sparse-dense walk): a warp owns one work item
// (a block row, or a piece of a heavy one) and one tile of NT right-hand-side columns; it walks
// the item's blocks, staging each A block and the B block row it meets (BM x NT) through its own
// shared memory with cp.async, two stages deep, and multiplies them on tensor cores into C
// fragments held in registers for the whole walk.  Modes: FP16/BF16 mma m16n8k16 (FP32
// accumulate), FP32 as 3xTF32 (m16n8k8, x = hi + lo, lo·hi + hi·lo + hi·hi) or IEEE FMAs,
// FP64 DMMA m8n8k4.  The grid is (RHS tiles fastest) x (items / 4 warps): the CTAs that run
// together share A blocks in L2.
//
// SpGEMM: symbolic kernels (a CTA per block row of C; a bitmap of C's block columns in shared
// memory is the sparse accumulator: count, then list the set bits, which come out sorted) and a
// numeric kernel (a warp per block of C: for each A block of its row, a binary search for its
// column in the matching B row; hits are multiplied as in SpMM, with the C block in registers).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <string>
#include <type_traits>

#include "blocksparse.h"
#include "cuda_device.hpp"
#include "cuda_ptx.cuh"
#include "fp32_mode.hpp"
#include "knobs.hpp"

namespace kl {
namespace bs {

Fp32Mode g_fp32("KRONLINALG_BS_FP32");

enum Mode { kHalf = 0, kBf16 = 1, kTf32x3 = 2, kIeee = 3, kF64 = 4 };
constexpr int kWarps = 4;

template <int M> struct ModeT;
template <> struct ModeT<kHalf> { using T = __half; };
template <> struct ModeT<kBf16> { using T = __nv_bfloat16; };
template <> struct ModeT<kTf32x3> { using T = float; };
template <> struct ModeT<kIeee> { using T = float; };
template <> struct ModeT<kF64> { using T = double; };

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ double to_f(double v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(double v);
template <> __device__ __forceinline__ float from_f<float>(double v) { return float(v); }
template <> __device__ __forceinline__ double from_f<double>(double v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(double v) { return __float2half(float(v)); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(double v) {
  return __float2bfloat16(float(v));
}

__device__ __forceinline__ void atomic_add(float *p, double v) { atomicAdd(p, float(v)); }
__device__ __forceinline__ void atomic_add(double *p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__half *p, double v) { atomicAdd(p, __float2half(float(v))); }
__device__ __forceinline__ void atomic_add(__nv_bfloat16 *p, double v) {
  atomicAdd(p, __float2bfloat16(float(v)));
}

using cu::dmma_884;  // (cuda_ptx.cuh)

// One C element of an SpMM epilogue, x with alpha applied: added atomically (a piece of a split
// heavy row), added to C (accumulate), blended with beta, or stored.
template <class T>
__device__ __forceinline__ void store_c(T *c, double x, const kl_bs_spmm_problem &p, bool split) {
  if (split) atomic_add(c, x);
  else if (p.accumulate) *c = from_f<T>(double(to_f(*c)) + x);
  else if (p.beta != 0.0) *c = from_f<T>(x + p.beta * double(to_f(*c)));
  else *c = from_f<T>(x);
}

// Shapes of one mode: shared-memory pitches (elements) chosen so that the fragment loads of a
// warp hit distinct banks, and the accumulator array (C fragments of a BM x NT tile).
template <int MODE, int BM, int NT>
struct Tile {
  using T = typename ModeT<MODE>::T;
  static constexpr bool kHalfLike = MODE == kHalf || MODE == kBf16;
  static constexpr int AP = BM + (kHalfLike ? 8 : 4);
  static constexpr int BP = NT + (MODE == kF64 ? 4 : 8);
  static constexpr int kStage = BM * AP + BM * BP;  // elements of one stage (A block, B rows)
  static constexpr int kElem16 = 16 / int(sizeof(T));  // elements per 16-byte chunk
  // FP64: m8 tiles, 2 values per n8 tile; the rest: m16 tiles, 4 values per n8 tile
  static constexpr int MT = MODE == kF64 ? BM / 8 : BM / 16;
  static constexpr int NV = MODE == kF64 ? 2 : 4;
  using Acc = typename std::conditional<MODE == kF64, double, float>::type;
  static constexpr size_t smem_bytes() { return size_t(kWarps) * 2 * kStage * sizeof(T); }
};

// Position (row, col) in the BM x NT tile of accumulator value v of (m tile i, n tile j).
template <int MODE>
__device__ __forceinline__ void acc_pos(int i, int j, int v, int &row, int &col) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  if (MODE == kF64) {
    row = i * 8 + g;
    col = j * 8 + 2 * t + v;
  } else {
    row = i * 16 + g + (v >> 1) * 8;
    col = j * 8 + 2 * t + (v & 1);
  }
}

// acc += As (BM x BM, pitch AP) @ Bs (BM x NT, pitch BP), both in shared memory.  The pitches
// default to Tile's; the panel kernel passes those of its CTA-wide B stage.
template <int MODE, int BM, int NT, int AP = Tile<MODE, BM, NT>::AP,
          int BP = Tile<MODE, BM, NT>::BP>
__device__ __forceinline__ void tile_mma(const typename ModeT<MODE>::T *As,
                                         const typename ModeT<MODE>::T *Bs,
                                         typename Tile<MODE, BM, NT>::Acc (&acc)[Tile<MODE, BM, NT>::MT][NT / 8][Tile<MODE, BM, NT>::NV]) {
  using TL = Tile<MODE, BM, NT>;
  constexpr int MT = TL::MT, NTL = NT / 8;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  if constexpr (MODE == kHalf || MODE == kBf16) {
#pragma unroll
    for (int ks = 0; ks < BM / 16; ++ks) {
      uint32_t a[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const auto *base = As + (i * 16 + g) * AP + ks * 16 + 2 * t;
        a[i][0] = *reinterpret_cast<const uint32_t *>(base);
        a[i][1] = *reinterpret_cast<const uint32_t *>(base + 8 * AP);
        a[i][2] = *reinterpret_cast<const uint32_t *>(base + 8);
        a[i][3] = *reinterpret_cast<const uint32_t *>(base + 8 * AP + 8);
      }
#pragma unroll
      for (int jp = 0; jp < NTL / 2; ++jp) {
        uint32_t r[4];
        cu::ldsm_x4_trans(r, Bs + (ks * 16 + (lane & 15)) * BP + jp * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          cu::mma_16816<MODE == kBf16>(acc[i][2 * jp], a[i], r[0], r[1]);
          cu::mma_16816<MODE == kBf16>(acc[i][2 * jp + 1], a[i], r[2], r[3]);
        }
      }
    }
  } else if constexpr (MODE == kTf32x3) {
    // the tensor cores add a block's products (BM terms) into part, which is then added to acc
    // with an IEEE FADD: their truncating accumulation never sees the long sum over a row's
    // blocks (measured on H100 with acc alone: relative error 3e-5 at 256 blocks per row)
    float part[MT][NTL][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NTL; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) part[i][j][v] = 0.f;
#pragma unroll
    for (int ks = 0; ks < BM / 8; ++ks) {
      uint32_t ah[MT][4], al[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const float *base = As + (i * 16 + g) * AP + ks * 8 + t;
        const float v[4] = {base[0], base[8 * AP], base[4], base[8 * AP + 4]};
#pragma unroll
        for (int e = 0; e < 4; ++e) cu::split_tf32(__float_as_uint(v[e]), ah[i][e], al[i][e]);
      }
#pragma unroll
      for (int j = 0; j < NTL; ++j) {
        const float *bb = Bs + (ks * 8 + t) * BP + j * 8 + g;
        uint32_t bh0, bl0, bh1, bl1;
        cu::split_tf32(__float_as_uint(bb[0]), bh0, bl0);
        cu::split_tf32(__float_as_uint(bb[4 * BP]), bh1, bl1);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          cu::mma_tf32(part[i][j], al[i], bh0, bh1);
          cu::mma_tf32(part[i][j], ah[i], bl0, bl1);
          cu::mma_tf32(part[i][j], ah[i], bh0, bh1);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NTL; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[i][j][v] += part[i][j][v];
  } else if constexpr (MODE == kIeee) {
#pragma unroll 4
    for (int kk = 0; kk < BM; ++kk) {
      float a[MT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        a[i][0] = As[(i * 16 + g) * AP + kk];
        a[i][1] = As[(i * 16 + g + 8) * AP + kk];
      }
#pragma unroll
      for (int j = 0; j < NTL; ++j) {
        const float2 bv = *reinterpret_cast<const float2 *>(Bs + kk * BP + j * 8 + 2 * t);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          acc[i][j][0] = fmaf(a[i][0], bv.x, acc[i][j][0]);
          acc[i][j][1] = fmaf(a[i][0], bv.y, acc[i][j][1]);
          acc[i][j][2] = fmaf(a[i][1], bv.x, acc[i][j][2]);
          acc[i][j][3] = fmaf(a[i][1], bv.y, acc[i][j][3]);
        }
      }
    }
  } else {  // FP64 DMMA
#pragma unroll
    for (int ks = 0; ks < BM / 4; ++ks) {
      double a[MT];
#pragma unroll
      for (int i = 0; i < MT; ++i) a[i] = As[(i * 8 + g) * AP + ks * 4 + t];
#pragma unroll
      for (int j = 0; j < NTL; ++j) {
        const double bv = Bs[(ks * 4 + t) * BP + j * 8 + g];
#pragma unroll
        for (int i = 0; i < MT; ++i) dmma_884(acc[i][j], a[i], bv);
      }
    }
  }
}

// Stage the A block at `a` (BM x BM contiguous) and the B rows [k0, k0 + BM) x [n0, n0 + NT)
// (rows past K and columns past N zero-filled) into one warp's stage.  B's rows are 16-byte
// aligned (the caller pads ldb).
template <int MODE, int BM, int NT>
__device__ __forceinline__ void load_stage(typename ModeT<MODE>::T *st,
                                           const typename ModeT<MODE>::T *a,
                                           const typename ModeT<MODE>::T *B, int64_t ldb,
                                           int64_t k0, int64_t K, int64_t n0, int64_t N) {
  using TL = Tile<MODE, BM, NT>;
  using T = typename TL::T;
  constexpr int E = TL::kElem16;
  const int lane = threadIdx.x & 31;
  constexpr int ACH = BM / E;  // chunks per A row
#pragma unroll
  for (int c = lane; c < BM * ACH; c += 32) {
    const int r = c / ACH, cc = c % ACH;
    cu::cp_async_16(st + r * TL::AP + cc * E, a + r * BM + cc * E, true);
  }
  T *bs = st + BM * TL::AP;
  constexpr int BCH = NT / E;  // chunks per B row
#pragma unroll 4
  for (int c = lane; c < BM * BCH; c += 32) {
    const int r = c / BCH, cc = c % BCH;
    const int64_t row = k0 + r, col = n0 + int64_t(cc) * E;
    int bytes = 0;
    const T *src = B;
    if (row < K && col < N) {
      bytes = int(N - col < E ? N - col : int64_t(E)) * int(sizeof(T));
      src = B + row * ldb + col;
    }
    cu::cp_async_16_part(bs + r * TL::BP + cc * E, src, bytes);
  }
}

template <int MODE, int BM, int NT>
__global__ void __launch_bounds__(kWarps * 32) spmm_kernel(kl_bs_spmm_problem p, int64_t ntn) {
  using TL = Tile<MODE, BM, NT>;
  using T = typename TL::T;
  KL_DYNAMIC_SMEM(smem_raw);
  const int warp = threadIdx.x >> 5;
  const int64_t tile_n = blockIdx.x % ntn;
  const int64_t item = (blockIdx.x / ntn) * kWarps + warp;
  if (item >= p.nitems) return;
  T *st0 = reinterpret_cast<T *>(smem_raw) + size_t(warp) * 2 * TL::kStage;
  const int64_t enc = p.items[3 * item], start = p.items[3 * item + 1],
                end = p.items[3 * item + 2];
  const bool split = enc < 0;
  const int64_t r = split ? -enc - 1 : enc;
  const int64_t n0 = tile_n * NT;
  const T *val = static_cast<const T *>(p.val);
  const T *B = static_cast<const T *>(p.B);

  typename TL::Acc acc[TL::MT][NT / 8][TL::NV];
#pragma unroll
  for (int i = 0; i < TL::MT; ++i)
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int v = 0; v < TL::NV; ++v) acc[i][j][v] = 0;

  const int64_t nblk = end - start;
  auto stage_load = [&](int s, int64_t tb) {
    const int64_t blk = p.perm ? p.perm[tb] : tb;
    load_stage<MODE, BM, NT>(st0 + s * TL::kStage, val + blk * BM * BM, B, p.ldb,
                             p.col_idx[tb] * BM, p.k, n0, p.n);
  };
  if (nblk > 0) stage_load(0, start);
  cu::cp_async_commit();
  for (int64_t i = 0; i < nblk; ++i) {
    if (i + 1 < nblk) stage_load(int((i + 1) & 1), start + i + 1);
    cu::cp_async_commit();
    cu::cp_async_wait<1>();
    __syncwarp();
    const T *s = st0 + (i & 1) * TL::kStage;
    tile_mma<MODE, BM, NT>(s, s + BM * TL::AP, acc);
    __syncwarp();
  }
  cu::cp_async_wait_all();

  T *C = static_cast<T *>(p.C);
#pragma unroll
  for (int i = 0; i < TL::MT; ++i)
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int v = 0; v < TL::NV; ++v) {
        int rr, cc;
        acc_pos<MODE>(i, j, v, rr, cc);
        const int64_t row = r * BM + rr, col = n0 + cc;
        if (row >= p.m || col >= p.n) continue;
        store_c(C + row * p.ldc + col, p.alpha * double(acc[i][j][v]), p, split);
      }
}

// A work list read ahead through shared memory: the E int64 entries of step t come from one of
// two 32-step chunks; chunk c + 1 is loaded into registers when step 32 c is issued and stored
// 16 steps later, so no cp.async waits on an index fetched from memory.  (The panel kernels'
// first version fetched the next step's indices one step ahead: every step then waited one
// L2/DRAM round trip, ~1.2 us on the H100, whatever the pipeline depth.)  Callers pass
// src(t, e), the entry's value, and call advance() after each iteration's barrier.
template <int E, int NTH>
struct IndexRing {
  static constexpr int kSteps = 32, kEnt = kSteps * E, K = (kEnt + NTH - 1) / NTH;
  static constexpr size_t bytes() { return size_t(2) * kEnt * sizeof(int64_t); }
  int64_t *buf;  // shared: two chunks
  int64_t reg[K];
  __device__ __forceinline__ int64_t get(int t, int e) const {
    return buf[((t >> 5) & 1) * kEnt + (t & 31) * E + e];
  }
  template <class F>
  __device__ __forceinline__ void fetch(int c, int nsteps, F src) {
#pragma unroll
    for (int q = 0; q < K; ++q) {
      const int j = int(threadIdx.x) + q * NTH, t = c * kSteps + j / E;
      reg[q] = j < kEnt && t < nsteps ? src(t, j % E) : int64_t(-1);
    }
  }
  __device__ __forceinline__ void store(int c) {
#pragma unroll
    for (int q = 0; q < K; ++q) {
      const int j = int(threadIdx.x) + q * NTH;
      if (j < kEnt) buf[(c & 1) * kEnt + j] = reg[q];
    }
  }
  template <class F>
  __device__ __forceinline__ void prime(int nsteps, F src) {  // chunks 0 and 1, then a barrier
    fetch(0, nsteps, src);
    store(0);
    if (nsteps > kSteps) {
      fetch(1, nsteps, src);
      store(1);
    }
    __syncthreads();
  }
  template <class F>
  __device__ __forceinline__ void advance(int t, int nsteps, F src) {  // t: the step just issued
    if (t >= kSteps && (t & 31) == 0 && ((t >> 5) + 1) * kSteps < nsteps)
      fetch((t >> 5) + 1, nsteps, src);
    else if (t >= kSteps + kSteps / 2 && (t & 31) == 16 && ((t >> 5) + 1) * kSteps < nsteps)
      store((t >> 5) + 1);
  }
};

// Options of the half-precision panel kernel, for A/B runs (kl_bs_spmm_panel_opts, or
// KRONLINALG_BS_PANEL read at the first use): bit 0 stages C through shared memory and stores
// it as 16-byte row vectors (else each thread stores its fragments, 2 bytes at a time); bit 1
// reads A's blocks (streamed once per RHS tile) with an L2 evict-first policy, so that they do
// not push B's rows (re-read by every block that meets them) out of L2; bit 3 runs the
// persistent form where it applies (below); bits 4-7 the pipeline depth of the 256-column tile
// (4, 8 or 12 stages; 0: 4); bits 8-15, when not 0, cap the persistent grid (tests).
// Bit 2 (kPanelStripMajor, also the 2D kernel's) orders the grid by RHS column strip when X
// (k x n) is larger than the L2 (the launcher clears it otherwise): see x_exceeds_l2.
// Bit 16 (kStripForce) takes the strip-major grid whatever X's size (tests).
constexpr int kPanelStageC = 1, kPanelEvictA = 2, kPanelStripMajor = 4, kPanelPersistent = 8;
constexpr int kStripForce = 1 << 16;
// The default: C staged, A evict-first, 4 stages, not persistent.  H100, FP16, N = 16384, RHS
// 256, two runs: 0.1036-0.1051 ms at density 0.05 against 0.113-0.118 for the first version
// (0 | 4 << 4), 0.197-0.198 against 0.205-0.209 at 0.1; 8 and 12 stages 2-9 % slower; the
// persistent form within 1 % of it (0.1050 / 0.1975 / 0.4662 against 0.1036 / 0.1967 / 0.4676).
constexpr int kPanelDefault = kPanelStageC | kPanelEvictA | kPanelStripMajor | (4 << 4);
std::atomic<int> g_panel_opts{-1};  // -1: the knob not read yet

int panel_opts() {
  int v = g_panel_opts.load(std::memory_order_relaxed);
  if (v < 0) {
    v = knob_int("KRONLINALG_BS_PANEL", kPanelDefault);
    if (v < 0) v = kPanelDefault;
    g_panel_opts.store(v, std::memory_order_relaxed);
  }
  return v;
}

// cp.async of 16 bytes with an L2 cache policy (createpolicy's 64-bit handle).
__device__ __forceinline__ void cp_async_16_policy(void *dst, const void *src, uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, 16, %2;\n" ::"r"(
                   cu::smem_u32(dst)),
               "l"(src), "l"(pol)
               : "memory");
}

// The panel SpMM kernel (b = 16, RHS wider than 32; the default): a CTA of 4 warps owns one work
// item and an RHS tile of 4 * WN columns, warp w the columns [w WN, (w + 1) WN).  The CTA stages
// each A block once for its four warps and the B block row it meets across the whole tile, S
// stages deep (one barrier per block), so S - 1 blocks per CTA are in flight from L2 while the
// warps multiply.  The warp-per-row kernel above had one block in flight per warp, and each
// load first waited for the column index it needed (an L2 round trip per block); here the
// next block's column and storage position are fetched into registers a block ahead.
template <int MODE, int BM, int WN, int S>
struct Panel {
  using TL = Tile<MODE, BM, WN>;
  using T = typename TL::T;
  static constexpr int NTC = kWarps * WN;  // columns of the CTA's RHS tile
  static constexpr int AP = TL::AP;
  static constexpr int BP = NTC + (MODE == kF64 ? 4 : 8);  // conflict-free fragment loads
  static constexpr int kStage = BM * AP + BM * BP;
  using Ring = IndexRing<2, kWarps * 32>;  // (column, storage position) per block
  static constexpr size_t smem_bytes() { return size_t(S) * kStage * sizeof(T) + Ring::bytes(); }
};

template <int MODE, int BM, int WN, int S>
__global__ void __launch_bounds__(kWarps * 32, 4)
    spmm_panel_kernel(kl_bs_spmm_problem p, int64_t ntn, int opts) {
  using PL = Panel<MODE, BM, WN, S>;
  using TL = typename PL::TL;
  using T = typename PL::T;
  constexpr int E = TL::kElem16, ACH = BM / E, BCH = PL::NTC / E, NTH = kWarps * 32;
  constexpr int ROWS_PER_PASS = NTH / BCH, BPASSES = BM * BCH / NTH;
  static_assert(NTH % BCH == 0 && (BM * BCH) % NTH == 0, "B chunks must tile the CTA");
  static_assert(BM * ACH <= NTH, "one A chunk per thread at most");
  KL_DYNAMIC_SMEM(smem_raw);
  T *st = reinterpret_cast<T *>(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5;
  // grid order: RHS tiles fastest (the CTAs that run together share A's blocks in L2), or with
  // kPanelStripMajor, where the launcher found X larger than the L2, items fastest (the
  // CTAs that run together share one X column strip, which stays in L2)
  const bool strip_major = (opts & kPanelStripMajor) != 0;
  const int64_t tile_n = strip_major ? blockIdx.x / p.nitems : blockIdx.x % ntn;
  const int64_t item = strip_major ? blockIdx.x % p.nitems : blockIdx.x / ntn;
  const int64_t enc = p.items[3 * item], start = p.items[3 * item + 1];
  const int nblk = int(p.items[3 * item + 2] - start);
  const bool split = enc < 0;
  const int64_t r = split ? -enc - 1 : enc;
  const int64_t n0 = tile_n * PL::NTC;
  const T *val = static_cast<const T *>(p.val);
  const T *B = static_cast<const T *>(p.B);

  // this thread's chunks: B column chunk bc of rows br0 + ROWS_PER_PASS * pass; A chunk tid
  const int bc = tid % BCH, br0 = tid / BCH;
  const int64_t bcol = n0 + int64_t(bc) * E;
  const int bbytes =
      bcol < p.n ? int(p.n - bcol < E ? p.n - bcol : int64_t(E)) * int(sizeof(T)) : 0;
  const int ar = tid / ACH, ac = tid % ACH;
  const bool evict_a = TL::kHalfLike && (opts & kPanelEvictA) != 0;  // FP32/FP64 as before
  uint64_t pol_a = 0;
  if (evict_a) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol_a));
  auto load = [&](int slot, int64_t kcol, int64_t blk) {
    T *sa = st + slot * PL::kStage;
    if (tid < BM * ACH) {
      T *dst = sa + ar * PL::AP + ac * E;
      const T *srca = val + blk * BM * BM + ar * BM + ac * E;
      if (evict_a) cp_async_16_policy(dst, srca, pol_a);
      else cu::cp_async_16(dst, srca, true);
    }
    T *sb = sa + BM * PL::AP;
    const int64_t k0 = kcol * BM;
#pragma unroll
    for (int q = 0; q < BPASSES; ++q) {
      const int rr = br0 + q * ROWS_PER_PASS;
      const bool ok = k0 + rr < p.k && bbytes > 0;
      cu::cp_async_16_part(sb + rr * PL::BP + bc * E, ok ? B + (k0 + rr) * p.ldb + bcol : B,
                           ok ? bbytes : 0);
    }
  };
  auto src = [&](int t, int e) -> int64_t {
    return e == 0 ? __ldg(p.col_idx + start + t) : p.perm ? __ldg(p.perm + start + t) : start + t;
  };
  typename PL::Ring ring;
  ring.buf = reinterpret_cast<int64_t *>(st + S * PL::kStage);
  ring.prime(nblk, src);

  typename TL::Acc acc[TL::MT][WN / 8][TL::NV];
#pragma unroll
  for (int i = 0; i < TL::MT; ++i)
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int v = 0; v < TL::NV; ++v) acc[i][j][v] = 0;

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nblk) load(s, ring.get(s, 0), ring.get(s, 1));
    cu::cp_async_commit();
  }
  for (int i = 0; i < nblk; ++i) {
    cu::cp_async_wait<S - 2>();
    __syncthreads();  // block i landed for every thread; slot (i - 1) % S is free
    const int nx = i + S - 1;
    if (nx < nblk) load(nx % S, ring.get(nx, 0), ring.get(nx, 1));
    cu::cp_async_commit();
    ring.advance(nx, nblk, src);
    const T *sa = st + (i % S) * PL::kStage;
    tile_mma<MODE, BM, WN, PL::AP, PL::BP>(sa, sa + BM * PL::AP + warp * WN, acc);
  }
  cu::cp_async_wait_all();

  T *C = static_cast<T *>(p.C);
  if constexpr (TL::kHalfLike) {
    // C through shared memory (the stages are free once every warp is past its last block):
    // each warp writes its 16 x WN fragments as element pairs, then stores whole 16-byte row
    // pieces -- an eighth of the store instructions, full 32-byte sectors
    const bool staged = (opts & kPanelStageC) && !split && !p.accumulate && p.beta == 0.0 &&
                        p.ldc % 8 == 0 && reinterpret_cast<uintptr_t>(p.C) % 16 == 0;
    if (staged) {
      __syncthreads();
      using T2 = typename std::conditional<MODE == kBf16, __nv_bfloat162, __half2>::type;
      T *cs = st + warp * WN;  // the warp's columns of a BM x NTC tile, pitch BP
      const int lane = tid & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int i = 0; i < TL::MT; ++i)
#pragma unroll
        for (int j = 0; j < WN / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float x0 = float(p.alpha * double(acc[i][j][2 * h]));
            const float x1 = float(p.alpha * double(acc[i][j][2 * h + 1]));
            T2 v;
            if constexpr (MODE == kBf16) v = __floats2bfloat162_rn(x0, x1);
            else v = __floats2half2_rn(x0, x1);
            *reinterpret_cast<T2 *>(cs + (i * 16 + g + 8 * h) * PL::BP + j * 8 + 2 * t) = v;
          }
      __syncwarp();
      constexpr int CH = WN / 8;  // 16-byte pieces per row of the warp's strip
#pragma unroll
      for (int c = lane; c < BM * CH; c += 32) {
        const int rr = c / CH, cc = c % CH;
        const int64_t row = r * BM + rr, col = n0 + warp * WN + cc * 8;
        if (row >= p.m || col >= p.n) continue;
        const T *src = cs + rr * PL::BP + cc * 8;
        T *dst = C + row * p.ldc + col;
        if (col + 8 <= p.n) {
          *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
        } else {
          for (int e = 0; col + e < p.n; ++e) dst[e] = src[e];
        }
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < TL::MT; ++i)
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int v = 0; v < TL::NV; ++v) {
        int rr, cc;
        acc_pos<MODE>(i, j, v, rr, cc);
        const int64_t row = r * BM + rr, col = n0 + warp * WN + cc;
        if (row >= p.m || col >= p.n) continue;
        store_c(C + row * p.ldc + col, p.alpha * double(acc[i][j][v]), p, split);
      }
}

// The persistent form of the half-precision panel kernel (one RHS tile of 4 x WN columns, b =
// 16): a grid of as many CTAs as the SMs hold, CTA c taking the work items c, c + G, c + 2G, ...
// as one stream of blocks, so its pipeline stays full across its items; at an item's last
// block each warp stores its C strip (through its own shared-memory scratch, 16-byte row
// pieces, when C allows) and starts the next item from zero.  Tried because the panel kernel
// pays a pipeline fill and drain per item (a block row of ~50 blocks at N = 16384, density
// 0.05) and an L2 -> shared memory probe of the same access pattern runs at 7.5 TB/s where the
// kernel reaches 4.4; measured within 1 % of the panel kernel (H100, FP16, RHS 256), so fill,
// drain and tail are not that gap, and the form stays behind kPanelPersistent (off).
template <int MODE, int WN, int S>
struct Persistent {
  using PL = Panel<MODE, 16, WN, S>;
  static constexpr int CP = WN + 8;  // the warps' C scratch pitch
  static constexpr size_t smem_bytes(int jmax) {  // stages, ring, C scratch, item table
    return size_t(S) * PL::kStage * 2 + PL::Ring::bytes() + size_t(kWarps) * 16 * CP * 2 +
           size_t(jmax) * 16 + size_t(jmax + 1) * 4;
  }
};

template <int MODE, int WN, int S>
__global__ void __launch_bounds__(kWarps * 32, 4)
    spmm_persistent_kernel(kl_bs_spmm_problem p, int opts) {
  constexpr int BM = 16;
  using PS = Persistent<MODE, WN, S>;
  using PL = typename PS::PL;
  using TL = typename PL::TL;
  using T = typename PL::T;
  using T2 = typename std::conditional<MODE == kBf16, __nv_bfloat162, __half2>::type;
  constexpr int E = TL::kElem16, ACH = BM / E, BCH = PL::NTC / E, NTH = kWarps * 32;
  constexpr int ROWS_PER_PASS = NTH / BCH, BPASSES = BM * BCH / NTH, CP = PS::CP;
  static_assert(TL::MT == 1 && TL::kHalfLike, "half precision, b = 16");
  KL_DYNAMIC_SMEM(smem_raw);
  T *st = reinterpret_cast<T *>(smem_raw);
  int64_t *ringbuf = reinterpret_cast<int64_t *>(st + S * PL::kStage);
  T *cscr = reinterpret_cast<T *>(ringbuf + 2 * PL::Ring::kEnt);
  const int64_t G = gridDim.x;
  const int J = int((p.nitems - blockIdx.x + G - 1) / G);  // this CTA's items (>= 1)
  int64_t *s_start = reinterpret_cast<int64_t *>(cscr + kWarps * BM * CP);
  int64_t *s_enc = s_start + J;  // item j's row (encoded: negative for a piece of a split row)
  int *s_cum = reinterpret_cast<int *>(s_enc + J);  // blocks before item j
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  for (int j = tid; j < J; j += NTH) {
    const int64_t it = blockIdx.x + j * G;
    s_enc[j] = p.items[3 * it];
    s_start[j] = p.items[3 * it + 1];
    s_cum[j + 1] = int(p.items[3 * it + 2] - p.items[3 * it + 1]);
  }
  __syncthreads();
  if (tid == 0) {
    s_cum[0] = 0;
    for (int j = 0; j < J; ++j) s_cum[j + 1] += s_cum[j];
  }
  __syncthreads();
  const int nsteps = s_cum[J];
  const T *val = static_cast<const T *>(p.val);
  const T *B = static_cast<const T *>(p.B);
  T *C = static_cast<T *>(p.C);

  const int bc = tid % BCH, br0 = tid / BCH;
  const int64_t bcol = int64_t(bc) * E;
  const int bbytes =
      bcol < p.n ? int(p.n - bcol < E ? p.n - bcol : int64_t(E)) * int(sizeof(T)) : 0;
  const int ar = tid / ACH, ac = tid % ACH;
  const bool evict_a = (opts & kPanelEvictA) != 0;
  uint64_t pol_a = 0;
  if (evict_a) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol_a));
  auto load = [&](int slot, int64_t kcol, int64_t blk) {
    T *sa = st + slot * PL::kStage;
    if (tid < BM * ACH) {
      T *dst = sa + ar * PL::AP + ac * E;
      const T *srca = val + blk * BM * BM + ar * BM + ac * E;
      if (evict_a) cp_async_16_policy(dst, srca, pol_a);
      else cu::cp_async_16(dst, srca, true);
    }
    T *sb = sa + BM * PL::AP;
    const int64_t k0 = kcol * BM;
#pragma unroll
    for (int q = 0; q < BPASSES; ++q) {
      const int rr = br0 + q * ROWS_PER_PASS;
      const bool ok = k0 + rr < p.k && bbytes > 0;
      cu::cp_async_16_part(sb + rr * PL::BP + bc * E, ok ? B + (k0 + rr) * p.ldb + bcol : B,
                           ok ? bbytes : 0);
    }
  };
  // step t of the CTA's stream: item j with s_cum[j] <= t < s_cum[j + 1] (the last such j,
  // which skips empty items), block s_start[j] + t - s_cum[j] in row order
  auto src = [&](int t, int e) -> int64_t {
    int lo = 0, hi = J - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (s_cum[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    const int64_t tb = s_start[lo] + (t - s_cum[lo]);
    return e == 0 ? __ldg(p.col_idx + tb) : p.perm ? __ldg(p.perm + tb) : tb;
  };
  typename PL::Ring ring;
  ring.buf = ringbuf;
  ring.prime(nsteps, src);

  typename TL::Acc acc[1][WN / 8][4];
#pragma unroll
  for (int j = 0; j < WN / 8; ++j)
#pragma unroll
    for (int v = 0; v < 4; ++v) acc[0][j][v] = 0;

  const bool staged = (opts & kPanelStageC) && !p.accumulate && p.beta == 0.0 &&
                      p.ldc % 8 == 0 && reinterpret_cast<uintptr_t>(p.C) % 16 == 0;
  T *cs = cscr + warp * BM * CP;
  // the warp's strip of item j's C (its accumulators), then the accumulators zeroed
  auto flush = [&](int j) {
    const int64_t enc = s_enc[j];
    const bool split = enc < 0;
    const int64_t r = split ? -enc - 1 : enc;
    if (staged && !split) {
#pragma unroll
      for (int jj = 0; jj < WN / 8; ++jj)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float x0 = float(p.alpha * double(acc[0][jj][2 * h]));
          const float x1 = float(p.alpha * double(acc[0][jj][2 * h + 1]));
          T2 v;
          if constexpr (MODE == kBf16) v = __floats2bfloat162_rn(x0, x1);
          else v = __floats2half2_rn(x0, x1);
          *reinterpret_cast<T2 *>(cs + (g + 8 * h) * CP + jj * 8 + 2 * t4) = v;
        }
      __syncwarp();
      constexpr int CH = WN / 8;
#pragma unroll
      for (int c = lane; c < BM * CH; c += 32) {
        const int rr = c / CH, cc = c % CH;
        const int64_t row = r * BM + rr, col = warp * WN + cc * 8;
        if (row >= p.m || col >= p.n) continue;
        const T *sp = cs + rr * CP + cc * 8;
        T *dst = C + row * p.ldc + col;
        if (col + 8 <= p.n) {
          *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(sp);
        } else {
          for (int e = 0; col + e < p.n; ++e) dst[e] = sp[e];
        }
      }
      __syncwarp();  // the scratch is rewritten at the next item
    } else {
#pragma unroll
      for (int jj = 0; jj < WN / 8; ++jj)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          int rr, cc;
          acc_pos<MODE>(0, jj, v, rr, cc);
          const int64_t row = r * BM + rr, col = warp * WN + cc;
          if (row >= p.m || col >= p.n) continue;
          store_c(C + row * p.ldc + col, p.alpha * double(acc[0][jj][v]), p, split);
        }
    }
#pragma unroll
    for (int jj = 0; jj < WN / 8; ++jj)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[0][jj][v] = 0;
  };

  int j = 0;
  while (j < J && s_cum[j + 1] == 0) flush(j++);  // leading empty items: zeros
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nsteps) load(s, ring.get(s, 0), ring.get(s, 1));
    cu::cp_async_commit();
  }
  for (int i = 0; i < nsteps; ++i) {
    cu::cp_async_wait<S - 2>();
    __syncthreads();  // block i landed for every thread; slot (i - 1) % S is free
    const int nx = i + S - 1;
    if (nx < nsteps) load(nx % S, ring.get(nx, 0), ring.get(nx, 1));
    cu::cp_async_commit();
    ring.advance(nx, nsteps, src);
    const T *sa = st + (i % S) * PL::kStage;
    tile_mma<MODE, BM, WN, PL::AP, PL::BP>(sa, sa + BM * PL::AP + warp * WN, acc);
    if (i + 1 == s_cum[j + 1]) {  // item j's last block: store it, then any empty items
      flush(j++);
      while (j < J && s_cum[j + 1] == s_cum[j]) flush(j++);
    }
  }
  cu::cp_async_wait_all();
}

// The 2D kernel (b = 16): a CTA of NW warps owns a panel of P block rows (one or two Morton
// tile rows) and an RHS tile of NW * WN columns.  Its work list holds one step per block column
// present in the panel: the step stages that column's B block row once, with the panel's blocks
// of that column (up to one per block row), and every warp multiplies each staged block into the
// C tile of its block row over its WN columns.  A B block row met by r block rows of the panel is
// read from L2 once, not r times (the 1D kernels' cost: on random patterns the L2 -> shared
// memory traffic, ~4.5 TB/s on the H100, bounds them); pipelined S stages deep like the panel
// kernel.
template <int MODE, int BM, int WN, int S, int P, int NW>
struct Panel2d {
  using TL = Tile<MODE, BM, WN>;
  using T = typename TL::T;
  static constexpr int NTC = NW * WN;
  static constexpr int AP = TL::AP;
  static constexpr int BP = NTC + (MODE == kF64 ? 4 : 8);
  static constexpr int kStage = BM * BP + P * BM * AP;  // B block row, then P blocks
  using Ring = IndexRing<1 + P, NW * 32>;  // a step: the column, P storage positions
  static constexpr size_t smem_bytes() {  // stages, the ring, a mask per stage
    return size_t(S) * kStage * sizeof(T) + Ring::bytes() + size_t(S) * sizeof(int);
  }
};

// One warp's B fragments of a 16 x 16 slice of a staged B block row (pitch BP), for the 2D
// kernel's k2dShareB: load() once per step, then mma() per block of the step, each doing exactly
// tile_mma<MODE, 16, 16>'s products in its order (the same bits).
template <int MODE> struct BFrag;
template <int MODE> struct BFragHalf {
  uint32_t r[4];
  template <class T> __device__ __forceinline__ void load(const T *Bs, int BP) {
    const int lane = threadIdx.x & 31;
    cu::ldsm_x4_trans(r, Bs + (lane & 15) * BP + (lane >> 4) * 8);
  }
  template <int AP, class T>
  __device__ __forceinline__ void mma(const T *As, float (&acc)[1][2][4]) const {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const T *base = As + g * AP + 2 * t;
    uint32_t a[4];
    a[0] = *reinterpret_cast<const uint32_t *>(base);
    a[1] = *reinterpret_cast<const uint32_t *>(base + 8 * AP);
    a[2] = *reinterpret_cast<const uint32_t *>(base + 8);
    a[3] = *reinterpret_cast<const uint32_t *>(base + 8 * AP + 8);
    cu::mma_16816<MODE == kBf16>(acc[0][0], a, r[0], r[1]);
    cu::mma_16816<MODE == kBf16>(acc[0][1], a, r[2], r[3]);
  }
};
template <> struct BFrag<kHalf> : BFragHalf<kHalf> {};
template <> struct BFrag<kBf16> : BFragHalf<kBf16> {};
template <> struct BFrag<kTf32x3> {
  uint32_t h[2][2][2], l[2][2][2];  // [k step][n tile][row t / t + 4]: hi and lo TF32 parts
  __device__ __forceinline__ void load(const float *Bs, int BP) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float *bb = Bs + (ks * 8 + t) * BP + j * 8 + g;
        cu::split_tf32(__float_as_uint(bb[0]), h[ks][j][0], l[ks][j][0]);
        cu::split_tf32(__float_as_uint(bb[4 * BP]), h[ks][j][1], l[ks][j][1]);
      }
  }
  template <int AP>
  __device__ __forceinline__ void mma(const float *As, float (&acc)[1][2][4]) const {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float part[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const float *base = As + g * AP + ks * 8 + t;
      const float v[4] = {base[0], base[8 * AP], base[4], base[8 * AP + 4]};
      uint32_t ah[4], al[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) cu::split_tf32(__float_as_uint(v[e]), ah[e], al[e]);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        cu::mma_tf32(part[j], al, h[ks][j][0], h[ks][j][1]);
        cu::mma_tf32(part[j], ah, l[ks][j][0], l[ks][j][1]);
        cu::mma_tf32(part[j], ah, h[ks][j][0], h[ks][j][1]);
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[0][j][v] += part[j][v];
  }
};
template <> struct BFrag<kF64> {
  double b[4][2];  // [k step][n tile]
  __device__ __forceinline__ void load(const double *Bs, int BP) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
      for (int j = 0; j < 2; ++j) b[ks][j] = Bs[(ks * 4 + t) * BP + j * 8 + g];
  }
  template <int AP>
  __device__ __forceinline__ void mma(const double *As, double (&acc)[2][2][2]) const {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      double a[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) a[i] = As[(i * 8 + g) * AP + ks * 4 + t];
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int i = 0; i < 2; ++i) dmma_884(acc[i][j], a[i], b[ks][j]);
    }
  }
};

// Options of the 2D kernel (kl_bs_spmm2d_opts), for A/B runs: bit 0 (k2dStageC) stores C, in
// half precision, through shared memory as 16-byte row pieces (else 2-byte stores from the
// fragments); bit 1 (k2dShareB) loads each warp's B fragments once per step for all the
// panel's blocks of that step (every mode but IEEE FP32; else once per block); bit 2
// (kPanelStripMajor) the strip-major grid where X does not fit the L2 (bit 16 always); bits
// 4-7 the pipeline depth of the 8-row panels (spmm2d_mode; 0: 6 stages in half precision, 4
// otherwise).
// Bit 8 (k2dNarrowCta): half precision's 8-row panels with 4 warps; bit 9 (k2dWideF64): FP64's
// 4-row panels with 8 warps (spmm2d_mode).
constexpr int k2dStageC = 1, k2dShareB = 2, k2dNarrowCta = 1 << 8, k2dWideF64 = 1 << 9;
// The default (H100, 2026-11-27, benchmarks/blocksparse_morton.py, kernel times): C staged and
// B fragments once per step took the banded FP16 / 256 case from 0.0764 to 0.0512 ms (1D:
// 0.0982) and FP32 / 256 from 0.251 to 0.198 (1D 0.242); FP64's 8-warp form 0.287 -> 0.283
// banded, 0.521 -> 0.445 random at 256 columns; 10 / 5 stages and the 4-warp half form gained
// nothing (within 2 %, or slower: 0.0648 banded FP16 / 256).
constexpr int k2dDefault = k2dStageC | k2dShareB | kPanelStripMajor | k2dWideF64;
std::atomic<int> g_2d_opts{k2dDefault};

template <int MODE, int BM, int WN, int S, int P, int NW>
__global__ void __launch_bounds__(NW * 32, NW == 8 ? 2 : P == 8 ? 4 : 3)
    spmm2d_kernel(kl_bs_spmm_problem p, int64_t ntn, int opts) {
  using PL = Panel2d<MODE, BM, WN, S, P, NW>;
  using TL = typename PL::TL;
  using T = typename PL::T;
  constexpr int Q = P, E = TL::kElem16, ACH = BM / E, BCH = PL::NTC / E, NTH = NW * 32;
  constexpr int ROWS_PER_PASS = NTH / BCH, BPASSES = BM * BCH / NTH;
  constexpr int APASSES = Q * BM * ACH / NTH;
  static_assert(NTH % BCH == 0 && (BM * BCH) % NTH == 0, "B chunks must tile the CTA");
  static_assert((Q * BM * ACH) % NTH == 0, "A chunks must tile the CTA");
  KL_DYNAMIC_SMEM(smem_raw);
  T *st = reinterpret_cast<T *>(smem_raw);
  typename PL::Ring ring;
  ring.buf = reinterpret_cast<int64_t *>(st + S * PL::kStage);
  int *mask = reinterpret_cast<int *>(ring.buf + 2 * PL::Ring::kEnt);
  const int tid = threadIdx.x, warp = tid >> 5;
  const bool strip_major = (opts & kPanelStripMajor) != 0;  // as the panel kernel's
  const int64_t tile_n = strip_major ? blockIdx.x / p.tile_rows : blockIdx.x % ntn;
  const int64_t ti = strip_major ? blockIdx.x % p.tile_rows : blockIdx.x / ntn;
  const int64_t n0 = tile_n * PL::NTC;
  const int64_t s0 = p.tile_row_ptr[ti];
  const int nsteps = int(p.tile_row_ptr[ti + 1] - s0);
  const int64_t *steps = p.tiles + s0 * (1 + Q);
  const T *val = static_cast<const T *>(p.val);
  const T *B = static_cast<const T *>(p.B);

  const int bc = tid % BCH, br0 = tid / BCH;
  const int64_t bcol = n0 + int64_t(bc) * E;
  const int bbytes =
      bcol < p.n ? int(p.n - bcol < E ? p.n - bcol : int64_t(E)) * int(sizeof(T)) : 0;
  auto load = [&](int slot, int t) {  // step t's B block row and blocks into slot
    T *sb = st + slot * PL::kStage;
    T *sa = sb + BM * PL::BP;
    const int64_t k0 = ring.get(t, 0) * BM;
#pragma unroll
    for (int q = 0; q < BPASSES; ++q) {
      const int rr = br0 + q * ROWS_PER_PASS;
      const bool ok = k0 + rr < p.k && bbytes > 0;
      cu::cp_async_16_part(sb + rr * PL::BP + bc * E, ok ? B + (k0 + rr) * p.ldb + bcol : B,
                           ok ? bbytes : 0);
    }
#pragma unroll
    for (int q = 0; q < APASSES; ++q) {
      const int c = tid + q * NTH, l = c / (BM * ACH), rem = c % (BM * ACH);
      const int ar = rem / ACH, ac = rem % ACH;
      const int64_t pos = ring.get(t, 1 + l);
      if (pos >= 0)
        cu::cp_async_16(sa + (l * BM + ar) * PL::AP + ac * E,
                        val + pos * BM * BM + ar * BM + ac * E, true);
    }
    if (tid == 0) {
      int m = 0;
#pragma unroll
      for (int l = 0; l < Q; ++l) m |= int(ring.get(t, 1 + l) >= 0) << l;
      mask[slot] = m;
    }
  };
  auto src = [&](int t, int e) -> int64_t { return __ldg(steps + int64_t(t) * (1 + Q) + e); };
  ring.prime(nsteps, src);

  typename TL::Acc acc[Q][TL::MT][WN / 8][TL::NV];
#pragma unroll
  for (int l = 0; l < Q; ++l)
#pragma unroll
    for (int i = 0; i < TL::MT; ++i)
#pragma unroll
      for (int j = 0; j < WN / 8; ++j)
#pragma unroll
        for (int v = 0; v < TL::NV; ++v) acc[l][i][j][v] = 0;

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nsteps) load(s, s);
    cu::cp_async_commit();
  }
  for (int i = 0; i < nsteps; ++i) {
    cu::cp_async_wait<S - 2>();
    __syncthreads();  // step i landed for every thread; slot (i - 1) % S is free
    const int nx = i + S - 1;
    if (nx < nsteps) load(nx % S, nx);
    cu::cp_async_commit();
    ring.advance(nx, nsteps, src);
    const T *sb = st + (i % S) * PL::kStage;
    const T *sa = sb + BM * PL::BP;
    const int m = mask[i % S];
    bool shared_b = false;
    if constexpr (BM == 16 && WN == 16 && MODE != kIeee) {
      // the warp's B fragments loaded once per step for every block of the step: on clustered
      // patterns a step holds up to P blocks, and reloading them per block was half of the
      // multiply's shared-memory reads (the products and their order are tile_mma's)
      if (opts & k2dShareB) {
        shared_b = true;
        BFrag<MODE> bf;
        bf.load(sb + warp * WN, PL::BP);
#pragma unroll
        for (int l = 0; l < Q; ++l)
          if ((m >> l) & 1) bf.template mma<PL::AP>(sa + l * BM * PL::AP, acc[l]);
      }
    }
    if (!shared_b) {
#pragma unroll
      for (int l = 0; l < Q; ++l)
        if ((m >> l) & 1)
          tile_mma<MODE, BM, WN, PL::AP, PL::BP>(sa + l * BM * PL::AP, sb + warp * WN, acc[l]);
    }
  }
  cu::cp_async_wait_all();

  T *C = static_cast<T *>(p.C);
  if constexpr (TL::kHalfLike) {
    // C through shared memory as in the panel kernel: the P x 16 x NTC tile (pitch NTC + 8) fits
    // in the stages, which are free once every warp is past its last step; then the CTA stores
    // whole 16-byte row pieces (full 32-byte sectors) in place of 2-byte stores
    constexpr int CP = PL::NTC + 8;
    static_assert(size_t(Q) * BM * CP <= size_t(S) * PL::kStage, "C tile must fit the stages");
    const bool staged = (opts & k2dStageC) && !p.accumulate && p.beta == 0.0 && p.ldc % 8 == 0 &&
                        reinterpret_cast<uintptr_t>(p.C) % 16 == 0;
    if (staged) {
      __syncthreads();
      using T2 = typename std::conditional<MODE == kBf16, __nv_bfloat162, __half2>::type;
      const int lane = tid & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int l = 0; l < Q; ++l)
#pragma unroll
        for (int i = 0; i < TL::MT; ++i)
#pragma unroll
          for (int j = 0; j < WN / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float x0 = float(p.alpha * double(acc[l][i][j][2 * h]));
              const float x1 = float(p.alpha * double(acc[l][i][j][2 * h + 1]));
              T2 v;
              if constexpr (MODE == kBf16) v = __floats2bfloat162_rn(x0, x1);
              else v = __floats2half2_rn(x0, x1);
              *reinterpret_cast<T2 *>(st + (l * BM + i * 16 + g + 8 * h) * CP + warp * WN +
                                      j * 8 + 2 * t) = v;
            }
      __syncthreads();
      constexpr int CH = PL::NTC / 8;  // 16-byte pieces per row of the tile
      for (int c = tid; c < Q * BM * CH; c += NTH) {
        const int rr = c / CH, cc = c % CH;
        const int64_t row = ti * Q * BM + rr, col = n0 + cc * 8;
        if (row >= p.m || col >= p.n) continue;
        const T *srcc = st + rr * CP + cc * 8;
        T *dst = C + row * p.ldc + col;
        if (col + 8 <= p.n) {
          *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(srcc);
        } else {
          for (int e = 0; col + e < p.n; ++e) dst[e] = srcc[e];
        }
      }
      return;
    }
  }
#pragma unroll
  for (int l = 0; l < Q; ++l)
#pragma unroll
    for (int i = 0; i < TL::MT; ++i)
#pragma unroll
      for (int j = 0; j < WN / 8; ++j)
#pragma unroll
        for (int v = 0; v < TL::NV; ++v) {
          int rr, cc;
          acc_pos<MODE>(i, j, v, rr, cc);
          const int64_t row = (ti * Q + l) * BM + rr, col = n0 + warp * WN + cc;
          if (row >= p.m || col >= p.n) continue;
          store_c(C + row * p.ldc + col, p.alpha * double(acc[l][i][j][v]), p, false);
        }
}

// -- SpGEMM ------------------------------------------------------------------------------------

__global__ void spgemm_symbolic(kl_bs_spgemm_problem p, int phase, int words) {
  extern __shared__ uint32_t bm[];
  __shared__ unsigned long long total;
  const int64_t r = blockIdx.x;
  for (int w = threadIdx.x; w < words; w += blockDim.x) bm[w] = 0;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  for (int64_t t = p.a_row_ptr[r]; t < p.a_row_ptr[r + 1]; ++t) {
    const int64_t kb = p.a_col[t];
    for (int64_t u = p.b_row_ptr[kb] + threadIdx.x; u < p.b_row_ptr[kb + 1]; u += blockDim.x) {
      const int64_t j = p.b_col[u];
      atomicOr(&bm[j >> 5], 1u << (j & 31));
    }
  }
  __syncthreads();
  if (phase == 0) {
    unsigned long long c = 0;
    for (int w = threadIdx.x; w < words; w += blockDim.x) c += __popc(bm[w]);
    atomicAdd(&total, c);
    __syncthreads();
    if (threadIdx.x == 0) p.c_counts[r] = int64_t(total);
    return;
  }
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  int64_t base = p.c_row_ptr[r];
  for (int w0 = 0; w0 < words; w0 += 32) {
    uint32_t word = w0 + lane < words ? bm[w0 + lane] : 0u;
    const int c = __popc(word);
    int incl = c;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += o;
    }
    int64_t pos = base + incl - c;
    while (word) {
      const int bit = __ffs(word) - 1;
      p.c_col[pos++] = int64_t(w0 + lane) * 32 + bit;
      word &= word - 1;
    }
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
}

template <int MODE, int BM>
__global__ void __launch_bounds__(kWarps * 32) spgemm_numeric(kl_bs_spgemm_problem p) {
  using TL = Tile<MODE, BM, BM>;
  using T = typename TL::T;
  KL_DYNAMIC_SMEM(smem_raw);
  const int warp = threadIdx.x >> 5;
  const int64_t q = int64_t(blockIdx.x) * kWarps + warp;
  if (q >= p.c_nnz) return;
  T *st = reinterpret_cast<T *>(smem_raw) + size_t(warp) * TL::kStage;
  const int64_t r = p.c_row[q], j = p.c_col[q];
  const T *av = static_cast<const T *>(p.a_val);
  const T *bv = static_cast<const T *>(p.b_val);
  typename TL::Acc acc[TL::MT][BM / 8][TL::NV];
#pragma unroll
  for (int i = 0; i < TL::MT; ++i)
#pragma unroll
    for (int jj = 0; jj < BM / 8; ++jj)
#pragma unroll
      for (int v = 0; v < TL::NV; ++v) acc[i][jj][v] = 0;
  for (int64_t t = p.a_row_ptr[r]; t < p.a_row_ptr[r + 1]; ++t) {
    const int64_t kb = p.a_col[t];
    int64_t lo = p.b_row_ptr[kb], hi = p.b_row_ptr[kb + 1];
    while (lo < hi) {  // first position with b_col >= j
      const int64_t mid = (lo + hi) >> 1;
      if (p.b_col[mid] < j) lo = mid + 1;
      else hi = mid;
    }
    if (lo >= p.b_row_ptr[kb + 1] || p.b_col[lo] != j) continue;
    const int64_t ablk = p.a_perm ? p.a_perm[t] : t;
    const int64_t bblk = p.b_perm ? p.b_perm[lo] : lo;
    // a B block is a BM x BM panel of "rows" of BM columns: load_stage with K = N = BM
    load_stage<MODE, BM, BM>(st, av + ablk * BM * BM, bv + bblk * BM * BM, BM, 0, BM, 0, BM);
    cu::cp_async_wait_all();
    __syncwarp();
    tile_mma<MODE, BM, BM>(st, st + BM * TL::AP, acc);
    __syncwarp();
  }
  T *C = static_cast<T *>(p.c_val) + q * BM * BM;
#pragma unroll
  for (int i = 0; i < TL::MT; ++i)
#pragma unroll
    for (int jj = 0; jj < BM / 8; ++jj)
#pragma unroll
      for (int v = 0; v < TL::NV; ++v) {
        int rr, cc;
        acc_pos<MODE>(i, jj, v, rr, cc);
        C[rr * BM + cc] = from_f<T>(double(acc[i][jj][v]));
      }
}

// -- launchers ---------------------------------------------------------------------------------

int mode_of(int dtype) {
  switch (dtype) {
    case 0: return g_fp32.get() == Fp32Mode::kIeee ? kIeee : kTf32x3;
    case 1: return kF64;
    case 2: return kHalf;
    case 3: return kBf16;
    default: return -1;
  }
}

// Which SpMM kernel runs b = 16 with an RHS wider than 32: 0 the panel kernel (default), 1 the
// warp-per-row kernel, 2 the panel kernel with half-width half-precision tiles (for comparison).
std::atomic<int> g_variant{0};

// The panel kernel's columns per warp (its CTA tile is 4 x that; 0: the panel kernel does not
// take this case) and its pipeline depth.
int panel_wn(int mode, int b, int64_t n) {
  const int v = g_variant.load(std::memory_order_relaxed);
  if (b != 16 || n <= 32 || v == 1) return 0;
  if (mode == kHalf || mode == kBf16) return n > 128 && v != 2 ? 64 : n > 64 ? 32 : 16;
  // FP32 at 64 columns or fewer: the warp kernel ran 1.11-1.26x faster in all three H100 runs
  // of 2026-11-26 (the panel's 16-column warps do a third as many TF32 MMAs per staged block)
  if (mode == kTf32x3 || mode == kIeee) return n > 64 ? 32 : 0;
  return n > 64 ? 32 : 16;
}

// The RHS tile of the SpMM kernel: as wide as the registers allow (one pass over A per tile),
// narrower for narrow right-hand sides (fewer idle columns).
int tile_n(int mode, int b, int64_t n) {
  if (b != 16 && b != 32) return 0;
  if (const int wn = panel_wn(mode, b, n)) return kWarps * wn;
  const bool half = mode == kHalf || mode == kBf16;
  if (half && b == 16 && n > 64) return 128;
  if (n > 32 && !(mode == kF64 && b == 32)) return 64;
  return 32;
}

int cuda_fail(cudaError_t e, const char *what) {
  std::string msg = std::string("blocksparse ") + what + ": " + cudaGetErrorString(e);
  return fail(KL_ERR_CUDA, msg.c_str());
}

template <int MODE, int BM, int NT>
int launch_spmm(const kl_bs_spmm_problem &p, cudaStream_t stream) {
  using TL = Tile<MODE, BM, NT>;
  const size_t smem = TL::smem_bytes();
  static bool configured = false;  // benign race: every caller sets the same value
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(spmm_kernel<MODE, BM, NT>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return cuda_fail(e, "spmm: shared memory");
    configured = true;
  }
  const int64_t ntn = (p.n + NT - 1) / NT;
  const int64_t groups = (p.nitems + kWarps - 1) / kWarps;
  const int64_t blocks = ntn * groups;
  if (blocks > 0x7fffffffLL) return fail(KL_ERR_INVALID, "blocksparse spmm: grid too large");
  spmm_kernel<MODE, BM, NT><<<unsigned(blocks), kWarps * 32, smem, stream>>>(p, ntn);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "spmm launch");
}

template <int MODE, int BM>
int spmm_bm(const kl_bs_spmm_problem &p, cudaStream_t s) {
  switch (tile_n(MODE, BM, p.n)) {
    case 32: return launch_spmm<MODE, BM, 32>(p, s);
    case 64:
      if constexpr (!(MODE == kF64 && BM == 32)) return launch_spmm<MODE, BM, 64>(p, s);
      break;
    case 128:
      if constexpr ((MODE == kHalf || MODE == kBf16) && BM == 16)
        return launch_spmm<MODE, BM, 128>(p, s);
      break;
  }
  return fail(KL_ERR_INVALID, "blocksparse spmm: no kernel for this tile");
}

// Whether X (k x n) is larger than the device's L2: then a grid with the RHS tiles fastest
// streams every X block row a block row meets from DRAM again for each (random patterns reuse
// a block row of X across block rows far apart in the grid), and the strip-major order keeps
// one k x tile strip of X resident instead, re-reading A once per strip.
bool x_exceeds_l2(const kl_bs_spmm_problem &p, size_t item) {
  static std::atomic<int64_t> l2{-1};
  int64_t bytes = l2.load(std::memory_order_relaxed);
  if (bytes < 0) {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev) != cudaSuccess)
      v = 50 << 20, (void)cudaGetLastError();
    bytes = v;
    l2.store(bytes, std::memory_order_relaxed);
  }
  return double(p.k) * double(p.n) * double(item) > double(bytes);
}

template <int MODE, int BM, int WN, int S>
int launch_panel(const kl_bs_spmm_problem &p, cudaStream_t stream) {
  using PL = Panel<MODE, BM, WN, S>;
  const size_t smem = PL::smem_bytes();
  static bool configured = false;  // benign race: every caller sets the same value
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(spmm_panel_kernel<MODE, BM, WN, S>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return cuda_fail(e, "spmm panel: shared memory");
    configured = true;
  }
  const int64_t ntn = (p.n + PL::NTC - 1) / PL::NTC;
  const int64_t blocks = ntn * p.nitems;
  if (blocks > 0x7fffffffLL) return fail(KL_ERR_INVALID, "blocksparse spmm: grid too large");
  int opts = panel_opts();
  if (ntn == 1 || (!(opts & kStripForce) && !x_exceeds_l2(p, sizeof(typename PL::T))))
    opts &= ~kPanelStripMajor;
  spmm_panel_kernel<MODE, BM, WN, S><<<unsigned(blocks), kWarps * 32, smem, stream>>>(
      p, ntn, opts);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "spmm panel launch");
}

// The persistent form (kPanelPersistent) where it applies: one RHS tile (n <= 4 WN) and at most
// 1024 items per CTA; returns -1 where it does not (the caller runs the panel kernel).
template <int MODE, int WN, int S>
int launch_persistent(const kl_bs_spmm_problem &p, cudaStream_t stream) {
  using PS = Persistent<MODE, WN, S>;
  if (p.n > kWarps * WN) return -1;
  auto kernel = spmm_persistent_kernel<MODE, WN, S>;
  DeviceInfo d;
  cudaError_t e = query_device(&d);
  if (e != cudaSuccess) return cuda_fail(e, "spmm persistent: device");
  static std::atomic<int> per_sm{0};  // CTAs an SM holds (the item table is a few bytes)
  static std::atomic<int64_t> configured{0};
  int k = per_sm.load(std::memory_order_relaxed);
  if (k == 0) {
    const size_t smem = PS::smem_bytes(64);
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return cuda_fail(e, "spmm persistent: shared memory");
    configured.store(int64_t(smem), std::memory_order_relaxed);
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k, kernel, kWarps * 32, smem);
    if (e != cudaSuccess) return cuda_fail(e, "spmm persistent: occupancy");
    if (k < 1) k = 1;
    per_sm.store(k, std::memory_order_relaxed);
  }
  int64_t grid = int64_t(d.sms) * k;
  const int cap = (panel_opts() >> 8) & 255;  // a smaller grid, for tests (more items a CTA)
  if (cap > 0 && grid > cap) grid = cap;
  if (grid > p.nitems) grid = p.nitems;
  const int64_t jmax = (p.nitems + grid - 1) / grid;
  if (jmax > 1024) return -1;
  const size_t smem = PS::smem_bytes(int(jmax));
  if (int64_t(smem) > configured.load(std::memory_order_relaxed)) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return cuda_fail(e, "spmm persistent: shared memory");
    configured.store(int64_t(smem), std::memory_order_relaxed);
  }
  kernel<<<unsigned(grid), kWarps * 32, smem, stream>>>(p, panel_opts());
  e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "spmm persistent launch");
}

// Pipeline depth: about 9-10 KB a stage for 2-byte and 4-byte types, 4 stages (5-6 CTAs an
// SM); FP64's wide tile is 19 KB a stage, 3 stages.  The half-precision 256-column tile takes
// the depth of panel_opts (4, 8: 3 CTAs an SM, 12: 2), to compare.
template <int MODE>
int spmm_panel(const kl_bs_spmm_problem &p, cudaStream_t s) {
  switch (panel_wn(MODE, 16, p.n)) {
    case 16: return launch_panel<MODE, 16, 16, 4>(p, s);
    case 32:
      if constexpr (MODE == kF64) return launch_panel<MODE, 16, 32, 3>(p, s);
      else return launch_panel<MODE, 16, 32, 4>(p, s);
    case 64:
      if constexpr (MODE == kHalf || MODE == kBf16) {
        if (panel_opts() & kPanelPersistent) {
          const int rc = launch_persistent<MODE, 64, 4>(p, s);
          if (rc >= 0) return rc;
        }
        switch ((panel_opts() >> 4) & 15) {
          case 8: return launch_panel<MODE, 16, 64, 8>(p, s);
          case 12: return launch_panel<MODE, 16, 64, 12>(p, s);
          default: return launch_panel<MODE, 16, 64, 4>(p, s);
        }
      }
      break;
  }
  return fail(KL_ERR_INVALID, "blocksparse spmm: no panel kernel for this tile");
}

template <int MODE>
int spmm_mode(const kl_bs_spmm_problem &p, cudaStream_t s) {
  if (panel_wn(MODE, p.b, p.n)) return spmm_panel<MODE>(p, s);
  return p.b == 16 ? spmm_bm<MODE, 16>(p, s) : spmm_bm<MODE, 32>(p, s);
}

template <int MODE, int WN, int S, int P, int NW>
int launch_spmm2d(const kl_bs_spmm_problem &p, cudaStream_t stream) {
  using PL = Panel2d<MODE, 16, WN, S, P, NW>;
  const size_t smem = PL::smem_bytes();
  static bool configured = false;
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(spmm2d_kernel<MODE, 16, WN, S, P, NW>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return cuda_fail(e, "spmm2d: shared memory");
    configured = true;
  }
  const int64_t ntn = (p.n + PL::NTC - 1) / PL::NTC;
  const int64_t blocks = ntn * p.tile_rows;
  if (blocks > 0x7fffffffLL) return fail(KL_ERR_INVALID, "blocksparse spmm2d: grid too large");
  int opts = g_2d_opts.load(std::memory_order_relaxed);
  if (ntn == 1 || (!(opts & kStripForce) && !x_exceeds_l2(p, sizeof(typename PL::T))))
    opts &= ~kPanelStripMajor;
  spmm2d_kernel<MODE, 16, WN, S, P, NW><<<unsigned(blocks), NW * 32, smem, stream>>>(p, ntn,
                                                                                      opts);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "spmm2d launch");
}

// The 2D kernel's shapes (kl_bs_spmm2d_rows says which P the caller builds steps for): 8 block
// rows, 8 warps of 16 columns for 2- and 4-byte types wider than 64 columns (the accumulators of
// 8 block rows fill the registers at 16 columns); otherwise 4 block rows, 4 warps (FP64 16
// columns, 3 stages of 19 KB).
int rows2d(int mode, int64_t n) { return mode != kF64 && n > 64 ? 8 : 4; }

template <int MODE>
int spmm2d_mode(const kl_bs_spmm_problem &p, cudaStream_t s) {
  if (p.tile != rows2d(MODE, p.n))
    return fail(KL_ERR_INVALID, "blocksparse spmm2d: steps built for another panel height");
  // depth (bits 4-7 of the options, 8-row panels): half precision 6 or 10 stages (10 x 10.5
  // KB: still two CTAs an SM), 4-byte types 4 or 5 (19 KB a stage)
  const int depth = (g_2d_opts.load(std::memory_order_relaxed) >> 4) & 15;
  if constexpr (MODE == kF64) {
    // k2dWideF64: 8 warps (128-column tiles: A staged half as often at 256 columns, 2 CTAs an
    // SM) in place of 4 (64 columns, 3 CTAs)
    if ((g_2d_opts.load(std::memory_order_relaxed) & k2dWideF64) && p.n > 64)
      return launch_spmm2d<MODE, 16, 3, 4, 8>(p, s);
    return launch_spmm2d<MODE, 16, 3, 4, 4>(p, s);
  }
  else if constexpr (MODE == kHalf || MODE == kBf16) {
    if (p.n <= 64) return launch_spmm2d<MODE, 16, 4, 4, 4>(p, s);
    // k2dNarrowCta: the 8-row panel with 4 warps (64-column tiles, A staged twice as often):
    // 4 CTAs an SM instead of 2, so a CTA waiting at its per-step barrier idles a quarter of the
    // SM's warps, not half
    if (g_2d_opts.load(std::memory_order_relaxed) & k2dNarrowCta)
      return launch_spmm2d<MODE, 16, 6, 8, 4>(p, s);
    return depth >= 10 ? launch_spmm2d<MODE, 16, 10, 8, 8>(p, s)
                       : launch_spmm2d<MODE, 16, 6, 8, 8>(p, s);
  } else {
    if (p.n <= 64) return launch_spmm2d<MODE, 16, 4, 4, 4>(p, s);
    return depth >= 5 ? launch_spmm2d<MODE, 16, 5, 8, 8>(p, s)
                      : launch_spmm2d<MODE, 16, 4, 8, 8>(p, s);
  }
}

template <int MODE, int BM>
int launch_numeric(const kl_bs_spgemm_problem &p, cudaStream_t stream) {
  using TL = Tile<MODE, BM, BM>;
  const size_t smem = size_t(kWarps) * TL::kStage * sizeof(typename TL::T);
  static bool configured = false;
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(spgemm_numeric<MODE, BM>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return cuda_fail(e, "spgemm: shared memory");
    configured = true;
  }
  const int64_t blocks = (p.c_nnz + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffffLL) return fail(KL_ERR_INVALID, "blocksparse spgemm: grid too large");
  spgemm_numeric<MODE, BM><<<unsigned(blocks), kWarps * 32, smem, stream>>>(p);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "spgemm numeric launch");
}

template <int MODE>
int numeric_mode(const kl_bs_spgemm_problem &p, cudaStream_t s) {
  return p.b == 16 ? launch_numeric<MODE, 16>(p, s) : launch_numeric<MODE, 32>(p, s);
}

}  // namespace bs
}  // namespace kl

extern "C" int kl_bs_cuda_device_check(void) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::string msg = "no GPU: ";
    msg += e != cudaSuccess ? cudaGetErrorString(e) : "the CUDA runtime sees no device";
    return kl::fail(KL_ERR_NO_DEVICE, msg.c_str());
  }
  return KL_OK;
}

extern "C" int kl_bs_float32_mode(int mode) { return kl::bs::g_fp32.set(mode); }

extern "C" int kl_bs_spmm2d_rows(int dtype, int64_t n) {
  const int mode = kl::bs::mode_of(dtype);
  return mode < 0 ? 0 : kl::bs::rows2d(mode, n);
}

extern "C" int kl_bs_spmm_variant(int variant) {
  const int prev = kl::bs::g_variant.load();
  if (variant >= 0 && variant <= 2) kl::bs::g_variant.store(variant);
  return prev;
}

extern "C" int kl_bs_spmm2d_opts(int opts) {
  const int prev = kl::bs::g_2d_opts.load();
  if (opts >= 0) kl::bs::g_2d_opts.store(opts);
  return prev;
}

extern "C" int kl_bs_spmm_panel_opts(int opts) {
  const int prev = kl::bs::panel_opts();
  if (opts >= 0) kl::bs::g_panel_opts.store(opts);
  return prev;
}

extern "C" int kl_bs_spmm_cuda_tile_n(int dtype, int b, int64_t n) {
  const int mode = kl::bs::mode_of(dtype);
  return mode < 0 ? 0 : kl::bs::tile_n(mode, b, n);
}

extern "C" int kl_bs_spmm_cuda(const kl_bs_spmm_problem *p, int dtype, void *stream) {
  using namespace kl::bs;
  if (!p || (p->b != 16 && p->b != 32) || p->m < 0 || p->k < 0 || p->n < 0 || p->nitems < 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse spmm (CUDA): invalid problem (b must be 16 or 32)");
  if (p->m == 0 || p->n == 0 || p->nitems == 0) return KL_OK;
  const int mode = mode_of(dtype);
  const size_t item = dtype == 1 ? 8 : dtype == 0 ? 4 : 2;
  if ((reinterpret_cast<uintptr_t>(p->B) | reinterpret_cast<uintptr_t>(p->val)) % 16 != 0 ||
      (p->ldb * item) % 16 != 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse spmm (CUDA): B and val must be 16-byte aligned");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (mode) {
    case kHalf: return spmm_mode<kHalf>(*p, s);
    case kBf16: return spmm_mode<kBf16>(*p, s);
    case kTf32x3: return spmm_mode<kTf32x3>(*p, s);
    case kIeee: return spmm_mode<kIeee>(*p, s);
    case kF64: return spmm_mode<kF64>(*p, s);
  }
  return kl::fail(KL_ERR_INVALID, "blocksparse spmm (CUDA): unknown dtype");
}

extern "C" int kl_bs_spmm2d_cuda(const kl_bs_spmm_problem *p, int dtype, void *stream) {
  using namespace kl::bs;
  if (!p || p->b != 16 || p->m < 0 || p->k < 0 || p->n < 0 || p->tile_rows < 0 ||
      !p->tile_row_ptr)
    return kl::fail(KL_ERR_INVALID, "blocksparse spmm2d (CUDA): invalid problem (b must be 16)");
  if (p->m == 0 || p->n == 0 || p->tile_rows == 0) return KL_OK;
  const size_t item = dtype == 1 ? 8 : dtype == 0 ? 4 : 2;
  if ((reinterpret_cast<uintptr_t>(p->B) | reinterpret_cast<uintptr_t>(p->val)) % 16 != 0 ||
      (p->ldb * item) % 16 != 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse spmm2d (CUDA): B and val must be 16-byte aligned");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (mode_of(dtype)) {
    case kHalf: return spmm2d_mode<kHalf>(*p, s);
    case kBf16: return spmm2d_mode<kBf16>(*p, s);
    case kTf32x3: return spmm2d_mode<kTf32x3>(*p, s);
    case kIeee: return spmm2d_mode<kIeee>(*p, s);
    case kF64: return spmm2d_mode<kF64>(*p, s);
  }
  return kl::fail(KL_ERR_INVALID, "blocksparse spmm2d (CUDA): unknown dtype");
}

extern "C" int kl_bs_spgemm_cuda(const kl_bs_spgemm_problem *p, int phase, int dtype,
                                 void *stream) {
  using namespace kl::bs;
  if (!p || (p->b != 16 && p->b != 32) || phase < 0 || phase > 2 || p->R < 0 || p->ncols < 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse spgemm (CUDA): invalid problem (b must be 16 or 32)");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (phase < 2) {
    if (p->R == 0) return KL_OK;
    const int64_t words = (p->ncols + 31) / 32;
    if (words * 4 > 48 * 1024)
      return kl::fail(KL_ERR_INVALID, "blocksparse spgemm (CUDA): more than 393216 block columns");
    if (p->R > 0x7fffffffLL) return kl::fail(KL_ERR_INVALID, "blocksparse spgemm: too many rows");
    spgemm_symbolic<<<unsigned(p->R), 128, size_t(words > 0 ? words : 1) * 4, s>>>(
        *p, phase, int(words));
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? KL_OK : cuda_fail(e, "spgemm symbolic launch");
  }
  if (p->c_nnz == 0) return KL_OK;
  if ((reinterpret_cast<uintptr_t>(p->a_val) | reinterpret_cast<uintptr_t>(p->b_val)) % 16 != 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse spgemm (CUDA): val must be 16-byte aligned");
  switch (mode_of(dtype)) {
    case kHalf: return numeric_mode<kHalf>(*p, s);
    case kBf16: return numeric_mode<kBf16>(*p, s);
    case kTf32x3: return numeric_mode<kTf32x3>(*p, s);
    case kIeee: return numeric_mode<kIeee>(*p, s);
    case kF64: return numeric_mode<kF64>(*p, s);
  }
  return kl::fail(KL_ERR_INVALID, "blocksparse spgemm (CUDA): unknown dtype");
}
