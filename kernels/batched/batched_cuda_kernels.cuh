// The batched small-GEMM kernels: KAMI's communication-avoiding GEMM inside a thread block.
//
// A work item is one tile (BM x BN) of one product: a group of P = WGM x WGN warps computes it,
// and a block holds G groups (several products per block for the tiniest orders).  The warps are
// KAMI's processors and shared memory their network:
//  - 1D (WGN = 1): warp i owns the rows of A_i and C_i; B's k-panels (BK wide) are broadcast to
//    every warp through shared memory; only B is shared.  A passes through shared memory only as a
//    coalescing buffer that warp i alone reads.
//  - 2D (WGM = WGN = 2): warp (i, j) owns C_ij; A's row panel i and B's column panel j are
//    exchanged through shared memory.
// Products run on tensor cores through mma.sync: FP64 m8n8k4 (DMMA), FP16/BF16 m16n8k16 with
// float32 accumulators, float32 as 3xTF32 m16n8k8 (x = hi + lo, three products, float32
// accumulation: an error near float32's own) or IEEE FMAs on CUDA cores.
//
// Data movement: each k-panel of A and B is staged by the whole group with 16-byte loads where
// the operand's rows are contiguous and aligned (element loads in the order the operand is
// contiguous otherwise: transposed operands are read coalesced, never copied), zero-filled past
// the problem's edges, so the MMA loops never branch on sizes.  The epilogue stages alpha * C
// through shared memory and writes D with 16-byte stores (coalesced), reading beta * C likewise.
// Shared-memory pitches are chosen so that the fragment loads are free of bank conflicts.
//
// Uniform batches: items are (product, tile) pairs of one grid; a product's operands are found
// by splitting its index over the batch dimensions (broadcast = stride 0).  Variable batches: a
// group takes a product from the device-side table (kl_batched_entry) and walks its tiles.
#ifndef KRONLINALG_BATCHED_CUDA_KERNELS_CUH
#define KRONLINALG_BATCHED_CUDA_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "batched.h"
#include "batched_config.hpp"
#ifndef KL_BATCHED_EMULATE  // batched_cuda_emulate.cpp supplies these on the CPU
#include "cuda_device.hpp"
#include "cuda_ptx.cuh"
#endif

namespace kl {
namespace batched {

// What a launch passes to the kernel (by value).
struct Args {
  kl_batched_problem p;               // uniform form (sizes, strides, pointers, alpha, beta)
  int64_t count;                      // products
  const kl_batched_entry *table;      // variable form (nullptr: uniform)
  int64_t tm_max;                     // variable form: row tiles of the largest product
  unsigned long long *counter;        // variable form: zeroed work counter (nullptr: static)
  // variable form split by size (bin_kernel, batched_cuda_large.cuh): this kernel's rows of
  // tiles, (product << 20) | row, their number at *list_count (nullptr: every row of the table)
  const int64_t *list;
  const unsigned long long *list_count;
};

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

template <class T>
__device__ __forceinline__ float to_f(T x) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
  else return float(x);
}
template <class T, class A>
__device__ __forceinline__ T from_acc(A x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(float(x));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(float(x));
  else return T(x);
}
template <class A, class T>
__device__ __forceinline__ A to_acc(T x) {
  if constexpr (std::is_same_v<T, double>) return x;
  else return A(to_f(x));
}

#ifndef KL_BATCHED_EMULATE
// the float64 MMAs (m8n8k4; m16n8k8 on sm_90, the launcher takes kDmma16 on cc >= 9.0 only)
using cu::dmma_1688;
using cu::dmma_884;
#endif

template <int MMA, int BK_, int BM_, int BN_, int WGM_, int WGN_, int G_, class T,
          bool RAW_ = false>
struct Cfg {
  using Raw = Cfg<MMA, BK_, BM_, BN_, WGM_, WGN_, G_, T, true>;  // with the staging area
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WGM = WGM_, WGN = WGN_, G = G_;
  static constexpr int P = WGM * WGN, GT = 32 * P, THREADS = GT * G;
  static constexpr int WM = BM / WGM, WN = BN / WGN;
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  static constexpr int MM = MMA == kDmma ? 8 : 16;  // rows of one MMA (FFMA: 8 lanes x TM)
  static constexpr int KS = MMA == kDmma ? 4 : MMA == kHmma ? 16 : MMA == kFfma ? 4 : 8;
  static constexpr bool F64 = MMA == kDmma || MMA == kDmma16;
  static constexpr int MI = WM / MM, NI = WN / 8;
  // pitches (elements): fragment loads conflict-free (DMMA: ≡ 4 mod 16 doubles; TF32: A ≡ 4,
  // B ≡ 8 mod 32 floats; HMMA: A ≡ 8 mod 64 halves for 32-bit loads, B rows in distinct
  // 16-byte bank groups for ldmatrix), every row start 16-byte aligned
  static constexpr int PA = MMA == kHmma ? BK + 8 : BK + 4;
  static constexpr int PB = F64 ? BN + 4 : BN + 8;
  static constexpr int PC = BN + (sizeof(Acc) == 8 ? 2 : 4);
  static constexpr int STAGE = (BM * PA + BK * PB) * int(sizeof(T));
  // Raw (the variable form's kernels), 2- and 4-byte types, 64 x 64 tiles: a staging area per
  // buffer where rows at any offset land by 16-byte cp.async as the aligned chunks that hold
  // them (pitches: a panel row plus a chunk), shifted into place once they are in
  // (realign_panel).  Not in uniform stacks: there the doubled buffers cost more occupancy than
  // they gained (H100: order 64 float16 133 -> 146 µs, order 256 3.9 -> 4.4 ms); float64 takes
  // 8-byte cp.async instead (its two buffers already fill an SM with 3 blocks).
  static constexpr int VEC = 16 / int(sizeof(T));
  static constexpr bool RAW = RAW_ && sizeof(T) <= 4 && BM >= 64;
  static constexpr int RPA = BK + VEC, RPB = BN + VEC;
  static constexpr int RAWBYTES = RAW ? (BM * RPA + BK * RPB) * int(sizeof(T)) : 0;
  static constexpr int CBYTES = BM * PC * int(sizeof(Acc));
  // two buffers a group: one k-panel is computed while the next streams in (cp.async); the
  // epilogue's C tile reuses the buffer just computed
  static constexpr int BUF = ((STAGE + RAWBYTES > CBYTES ? STAGE + RAWBYTES : CBYTES) + 15) / 16 * 16;
  static constexpr int GROUP_BYTES = 2 * BUF;
  static constexpr int SMEM = G * GROUP_BYTES;
  // registers (the current and the next tile's descriptors, the accumulators): up to 128 a
  // thread on the small tiles (4 blocks), 168 on 64 x 64 tiles (3 blocks; at 128 their 64-byte
  // panels spilled 270-300 bytes); shared memory allows 3-6 blocks an SM anyway
  static constexpr int MIN_BLOCKS = BM >= 64 ? 3 : 4;
  static_assert(WM % MM == 0 && WN % 8 == 0 && BK % KS == 0, "tile shape");
};

template <int P, int G>
__device__ __forceinline__ void group_sync(int grp) {
  if constexpr (P == 1) {
    __syncwarp();
  } else if constexpr (G == 1) {
    __syncthreads();
  } else {
#ifdef KL_BATCHED_EMULATE
    emu_named_barrier(grp + 1, P * 32);
#else
    asm volatile("bar.sync %0, %1;\n" ::"r"(grp + 1), "r"(P * 32) : "memory");
#endif
  }
}

// Elements row[c .. c+VEC) of a row of 2- or 4-byte elements at any element offset (those from
// cv on read as zero) as one 16-byte vector: the one or two aligned 16-byte chunks that hold
// them, shifted into place.  A chunk is read only where it holds an element below cv, so no read
// leaves the 16-byte granules of the operand's own elements (allocations are 16-byte aligned).
// From global memory these are synchronous loads (cp.async cannot shift), 16 bytes each where
// element loads moved 2; from a staging area (stage_rows) they are shared-memory reads.
// load_realigned is in two halves, so that a caller can issue several chunks' loads before it
// waits on the first (fetch_realign: the loads; realign: the shift).
struct RealignChunk {
  uint4 lo, hi;
  int shift, nb;  // bytes: the elements' offset in lo, and how many are wanted (2..16)
};
template <class T>
__device__ __forceinline__ RealignChunk fetch_realign(const T *row, int c, int cv) {
  constexpr int VEC = 16 / int(sizeof(T));
  const uintptr_t at = reinterpret_cast<uintptr_t>(row + c);
  RealignChunk k;
  k.shift = int(at & 15);  // even
  const uint4 *q = reinterpret_cast<const uint4 *>(at - uintptr_t(k.shift));
  k.nb = (cv - c < VEC ? cv - c : VEC) * int(sizeof(T));
  k.lo = *q;
  k.hi = k.shift + k.nb > 16 ? q[1] : make_uint4(0, 0, 0, 0);
  return k;
}
__device__ __forceinline__ uint4 realign(const RealignChunk &k) {
  const uint32_t w[8] = {k.lo.x, k.lo.y, k.lo.z, k.lo.w, k.hi.x, k.hi.y, k.hi.z, k.hi.w};
  const int ws = k.shift >> 2, bits = (k.shift & 2) * 8;  // whole words, then 0 or 16 bits
  // v[i] = w[i + ws] by two levels of selects (by 2 words, then by 1: 11 selects where a
  // select chain per output word took 24), not a dynamically indexed (local-memory) array
  uint32_t u[6], v[5], o[4];
#pragma unroll
  for (int i = 0; i < 6; ++i) u[i] = (ws & 2) ? w[i + 2] : w[i];
#pragma unroll
  for (int i = 0; i < 5; ++i) v[i] = (ws & 1) ? u[i + 1] : u[i];
#pragma unroll
  for (int j = 0; j < 4; ++j) o[j] = uint32_t(((uint64_t(v[j + 1]) << 32) | v[j]) >> bits);
  if (k.nb < 16) {  // zero the bytes past cv
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (4 * j >= k.nb) o[j] = 0;
      else if (4 * j + 2 >= k.nb) o[j] &= 0xffffu;
    }
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}
template <class T>
__device__ __forceinline__ uint4 load_realigned(const T *row, int c, int cv) {
  return realign(fetch_realign(row, c, cv));
}

// dst[r][c] (pitch DP) = src[r*rs + c*cs] for r < rv, c < cv, zero elsewhere in R x C, all by
// cp.async where the layout allows (asynchronous: the caller commits and waits): 16-byte copies
// for rows of aligned contiguous elements, else one copy per element (4- and 8-byte types) or
// per pair (2-byte types with contiguous, 4-byte aligned pairs), in the order the operand is
// contiguous; element loads otherwise (2-byte types at odd offsets).
template <class T, int R, int C, int GT, int DP>
__device__ __forceinline__ void load_tile(T *__restrict dst, const T *__restrict src, int64_t rs,
                                          int64_t cs, int rv, int cv, int gtid) {
  constexpr int VEC = 16 / int(sizeof(T));
  const uintptr_t addr = reinterpret_cast<uintptr_t>(src);
  if (cs == 1 && cv % VEC == 0 && rs % VEC == 0 && (addr & 15) == 0) {
    constexpr int CV = C / VEC;
#pragma unroll 1  // asynchronous copies: nothing to gain from unrolling, registers to lose
    for (int i = gtid; i < R * CV; i += GT) {
      const int r = i / CV, c = (i - r * CV) * VEC;
      if (r < rv && c < cv)
        kl::cu::cp_async_16(dst + r * DP + c, src + r * rs + c, true);
      else
        *reinterpret_cast<uint4 *>(dst + r * DP + c) = make_uint4(0, 0, 0, 0);
    }
  } else if constexpr (sizeof(T) >= 4) {
    constexpr int B = int(sizeof(T));
    if (rs == 1 && cs != 1) {  // contiguous down the columns (a transposed operand): r fastest
#pragma unroll 2
      for (int i = gtid; i < R * C; i += GT) {
        const int c = i / R, r = i - c * R;
        if (r < rv && c < cv)
          kl::cu::cp_async_elem<B>(dst + r * DP + c, src + r + c * cs, true);
        else
          dst[r * DP + c] = T(0.0f);
      }
    } else {
#pragma unroll 2
      for (int i = gtid; i < R * C; i += GT) {
        const int r = i / C, c = i - r * C;
        if (r < rv && c < cv)
          kl::cu::cp_async_elem<B>(dst + r * DP + c, src + r * rs + c * cs, true);
        else
          dst[r * DP + c] = T(0.0f);
      }
    }
  } else if (cs == 1 && cv % 2 == 0 && rs % 2 == 0 && (addr & 3) == 0) {  // 2-byte pairs
    constexpr int CP = C / 2;
#pragma unroll 2
    for (int i = gtid; i < R * CP; i += GT) {
      const int r = i / CP, c = (i - r * CP) * 2;
      if (r < rv && c < cv)
        kl::cu::cp_async_elem<4>(dst + r * DP + c, src + r * rs + c, true);
      else
        *reinterpret_cast<uint32_t *>(dst + r * DP + c) = 0u;
    }
  } else if (cs == 1) {  // 2-byte rows at any offset (packed odd sizes): realigned 16-byte loads
#pragma unroll 2
    for (int i = gtid; i < R * (C / VEC); i += GT) {
      const int r = i / (C / VEC), c = (i - r * (C / VEC)) * VEC;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < rv && c < cv) v = load_realigned(src + r * rs, c, cv);
      *reinterpret_cast<uint4 *>(dst + r * DP + c) = v;
    }
  } else if (rs == 1) {  // contiguous down the columns (a transposed operand): r fastest
#pragma unroll 4
    for (int i = gtid; i < R * C; i += GT) {
      const int c = i / R, r = i - c * R;
      dst[r * DP + c] = (r < rv && c < cv) ? src[r + c * cs] : T(0.0f);
    }
  } else {
#pragma unroll 4
    for (int i = gtid; i < R * C; i += GT) {
      const int r = i / C, c = i - r * C;
      dst[r * DP + c] = (r < rv && c < cv) ? src[r * rs + c * cs] : T(0.0f);
    }
  }
}

// Whether a panel of contiguous rows (cs == 1) misses load_tile's 16-byte path: with a staging
// area (K::RAW) it then goes through stage_rows / realign_rows.
template <class T>
__device__ __forceinline__ bool unaligned_rows(const T *src, int64_t rs, int64_t cs, int cv) {
  constexpr int VEC = 16 / int(sizeof(T));
  return cs == 1 &&
         !(cv % VEC == 0 && rs % VEC == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0);
}

// Row r < rv of the panel: the aligned 16-byte chunks holding src[r*rs .. r*rs + cv) into raw
// row r (pitch RP elements), asynchronously.
template <class T, int R, int C, int GT, int RP>
__device__ __forceinline__ void stage_rows(T *__restrict raw, const T *__restrict src, int64_t rs,
                                           int rv, int cv, int gtid) {
  constexpr int VEC = 16 / int(sizeof(T)), CH = C / VEC + 1;
#pragma unroll 1
  for (int i = gtid; i < R * CH; i += GT) {
    const int r = i / CH, j = i - r * CH;
    if (r >= rv) continue;
    const uintptr_t at = reinterpret_cast<uintptr_t>(src + r * rs);
    const int shift = int(at & 15);
    if (j * 16 < shift + cv * int(sizeof(T)))  // the chunk holds a wanted element
      kl::cu::cp_async_16(raw + r * RP + j * VEC, reinterpret_cast<const void *>(at - shift + 16 * j), true);
  }
}

// The staged rows shifted into place: dst[r][c] (pitch DP) = src[r*rs + c] for r < rv, c < cv,
// zero elsewhere in R x C.
template <class T, int R, int C, int GT, int DP, int RP>
__device__ __forceinline__ void realign_rows(T *__restrict dst, const T *__restrict raw,
                                             const T *src, int64_t rs, int rv, int cv, int gtid) {
  constexpr int VEC = 16 / int(sizeof(T));
#pragma unroll 2
  for (int i = gtid; i < R * (C / VEC); i += GT) {
    const int r = i / (C / VEC), c = (i - r * (C / VEC)) * VEC;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rv && c < cv) {
      const int shift = int(reinterpret_cast<uintptr_t>(src + r * rs) & 15);
      v = load_realigned(reinterpret_cast<const T *>(
                             reinterpret_cast<const unsigned char *>(raw + r * RP) + shift), c, cv);
    }
    *reinterpret_cast<uint4 *>(dst + r * DP + c) = v;
  }
}

// The 3xTF32 B fragments of one m16n8k8 k-step for a warp's K::NI column fragments (B in
// shared memory at pitch K::PB, the warp's columns from wc0; lane (g, t)): each float split
// once into its TF32 high and low parts, used by every row fragment.  (Both tile kernels.)
template <class K>
__device__ __forceinline__ void tf32_b_fragments(const void *Bs, int kk, int wc0, int g, int t,
                                                 uint32_t (&bh)[K::NI][2], uint32_t (&bl)[K::NI][2]) {
#pragma unroll
  for (int ni = 0; ni < K::NI; ++ni) {
    const float *c0 = reinterpret_cast<const float *>(Bs) + (kk + t) * K::PB + wc0 + ni * 8 + g;
    kl::cu::split_tf32(__float_as_uint(c0[0]), bh[ni][0], bl[ni][0]);
    kl::cu::split_tf32(__float_as_uint(c0[4 * K::PB]), bh[ni][1], bl[ni][1]);
  }
}

// One tile of one product as a group's loop sees it: A and B at the tile's first row / column,
// C and D at its first element, the valid rows (mv) and columns (nv), the product's k.
template <class T>
struct Tile {
  const T *A;
  int64_t a_rs, a_cs;
  const T *B;
  int64_t b_rs, b_cs;
  const T *C;
  int64_t c_rs, c_cs;
  T *D;
  int64_t d_rs, d_cs;
  int mv, nv;
  int64_t k;
};

// Requests k-panel [k0, k0 + BK) of tile t into a buffer (As then Bs).
template <class T, class K>
__device__ __forceinline__ void issue_panel(unsigned char *buf, const Tile<T> &t, int64_t k0,
                                            int gtid) {
  T *As = reinterpret_cast<T *>(buf);
  T *Bs = As + K::BM * K::PA;
  const int kv = int(t.k - k0 < K::BK ? t.k - k0 : K::BK);
  const T *a = t.A + k0 * t.a_cs, *b = t.B + k0 * t.b_rs;
  if constexpr (K::RAW) {
    T *rawA = reinterpret_cast<T *>(buf + K::STAGE), *rawB = rawA + K::BM * K::RPA;
    if (unaligned_rows(a, t.a_rs, t.a_cs, kv))
      stage_rows<T, K::BM, K::BK, K::GT, K::RPA>(rawA, a, t.a_rs, t.mv, kv, gtid);
    else
      load_tile<T, K::BM, K::BK, K::GT, K::PA>(As, a, t.a_rs, t.a_cs, t.mv, kv, gtid);
    if (unaligned_rows(b, t.b_rs, t.b_cs, t.nv))
      stage_rows<T, K::BK, K::BN, K::GT, K::RPB>(rawB, b, t.b_rs, kv, t.nv, gtid);
    else
      load_tile<T, K::BK, K::BN, K::GT, K::PB>(Bs, b, t.b_rs, t.b_cs, kv, t.nv, gtid);
  } else {
    load_tile<T, K::BM, K::BK, K::GT, K::PA>(As, a, t.a_rs, t.a_cs, t.mv, kv, gtid);
    load_tile<T, K::BK, K::BN, K::GT, K::PB>(Bs, b, t.b_rs, t.b_cs, kv, t.nv, gtid);
  }
}

// After panel k0 of tile t has landed in buf: shifts its staged rows into place (K::RAW only).
// Returns whether it did (the caller then synchronises the group before reading the panel).
template <class T, class K>
__device__ __forceinline__ bool realign_panel(unsigned char *buf, const Tile<T> &t, int64_t k0,
                                              int gtid) {
  if constexpr (!K::RAW) {
    return false;
  } else {
    T *As = reinterpret_cast<T *>(buf);
    T *Bs = As + K::BM * K::PA;
    const T *rawA = reinterpret_cast<const T *>(buf + K::STAGE), *rawB = rawA + K::BM * K::RPA;
    const int kv = int(t.k - k0 < K::BK ? t.k - k0 : K::BK);
    const T *a = t.A + k0 * t.a_cs, *b = t.B + k0 * t.b_rs;
    bool did = false;
    if (unaligned_rows(a, t.a_rs, t.a_cs, kv)) {
      realign_rows<T, K::BM, K::BK, K::GT, K::PA, K::RPA>(As, rawA, a, t.a_rs, t.mv, kv, gtid);
      did = true;
    }
    if (unaligned_rows(b, t.b_rs, t.b_cs, t.nv)) {
      realign_rows<T, K::BK, K::BN, K::GT, K::PB, K::RPB>(Bs, rawB, b, t.b_rs, kv, t.nv, gtid);
      did = true;
    }
    return did;
  }
}

// One tile of one product: D = alpha * A @ B + beta * C on rows < mv, columns < nv of the tile.
// The pipeline: on entry, panel 0 of t (if t.k > 0) is already requested into buffer `cur`;
// each step requests the next panel, of this tile or of the next tile `nx`, into the other
// buffer before computing this one; on exit the next tile's panel 0 is requested into `cur`.
template <class T, int MMA, class K>
__device__ __forceinline__ void run_tile(unsigned char *smem, int grp, int gtid, const Tile<T> &tl,
                                         const Tile<T> &nx, bool has_next, int &cur,
                                         typename K::Acc alpha,
                                         typename K::Acc beta) {
  using Acc = typename K::Acc;
  const int mv = tl.mv, nv = tl.nv;
  const int lane = gtid & 31, warp = gtid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int wr0 = (warp / K::WGN) * K::WM, wc0 = (warp % K::WGN) * K::WN;
  const bool active = wr0 < mv && wc0 < nv;  // warps past a small product's edge idle
  const int mi_n = active ? min(K::MI, (mv - wr0 + K::MM - 1) / K::MM) : 0;
  const int ni_n = active ? min(K::NI, (nv - wc0 + 7) / 8) : 0;

  constexpr int NACC = MMA == kDmma ? 2 : 4;
  constexpr int FM = MMA == kFfma ? K::WM / 8 : K::MI;  // FFMA: rows per lane
  constexpr int FN = MMA == kFfma ? K::WN / 4 : K::NI;  // FFMA: columns per lane
  Acc acc[FM][FN][MMA == kFfma ? 1 : NACC];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
      for (int e = 0; e < (MMA == kFfma ? 1 : NACC); ++e) acc[i][j][e] = Acc(0);

  if (tl.k == 0) {  // no panels: only the next tile's first one to request, into the buffer
    // that then becomes `cur` (the epilogue below stages C in the other one)
    group_sync<K::P, K::G>(grp);
    if (has_next && nx.k > 0) issue_panel<T, K>(smem + (cur ^ 1) * K::BUF, nx, 0, gtid);
    kl::cu::cp_async_commit();
    cur ^= 1;
  }
  for (int64_t k0 = 0; k0 < tl.k; k0 += K::BK) {
    const int kv = int(tl.k - k0 < K::BK ? tl.k - k0 : K::BK);
    const int kc = (kv + K::KS - 1) / K::KS * K::KS;
    group_sync<K::P, K::G>(grp);  // the other buffer is no longer read (compute or epilogue)
    unsigned char *other = smem + (cur ^ 1) * K::BUF;
    if (k0 + K::BK < tl.k)
      issue_panel<T, K>(other, tl, k0 + K::BK, gtid);
    else if (has_next && nx.k > 0)
      issue_panel<T, K>(other, nx, 0, gtid);
    kl::cu::cp_async_commit();
    kl::cu::cp_async_wait<1>();  // this panel's copies (all but the newest group) have landed
    group_sync<K::P, K::G>(grp);
    if (realign_panel<T, K>(smem + cur * K::BUF, tl, k0, gtid)) group_sync<K::P, K::G>(grp);
    const T *As = reinterpret_cast<const T *>(smem + cur * K::BUF);
    const T *Bs = As + K::BM * K::PA;
    cur ^= 1;
    if (!active) continue;
    const int t = t4;
    if constexpr (MMA == kDmma) {
      for (int kk = 0; kk < kc; kk += 4) {
        double a[K::MI], b[K::NI];
#pragma unroll
        for (int mi = 0; mi < K::MI; ++mi) a[mi] = As[(wr0 + mi * 8 + g) * K::PA + kk + t];
#pragma unroll
        for (int ni = 0; ni < K::NI; ++ni) b[ni] = Bs[(kk + t) * K::PB + wc0 + ni * 8 + g];
#pragma unroll
        for (int mi = 0; mi < K::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < K::NI; ++ni)
            if (mi < mi_n && ni < ni_n) dmma_884(acc[mi][ni], a[mi], b[ni]);
      }
    } else if constexpr (MMA == kDmma16) {
#pragma unroll 1  // unrolled, the fragments of several k-steps spilled (168 registers)
      for (int kk = 0; kk < kc; kk += 8) {
        double a[K::MI][4], b[K::NI][2];
#pragma unroll
        for (int mi = 0; mi < K::MI; ++mi) {
          const double *r0 = As + (wr0 + mi * 16 + g) * K::PA + kk + t;
          const double *r1 = r0 + 8 * K::PA;
          a[mi][0] = r0[0];
          a[mi][1] = r1[0];
          a[mi][2] = r0[4];
          a[mi][3] = r1[4];
        }
#pragma unroll
        for (int ni = 0; ni < K::NI; ++ni) {
          const double *c0 = Bs + (kk + t) * K::PB + wc0 + ni * 8 + g;
          b[ni][0] = c0[0];
          b[ni][1] = c0[4 * K::PB];
        }
#pragma unroll
        for (int mi = 0; mi < K::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < K::NI; ++ni)
            if (mi < mi_n && ni < ni_n) dmma_1688(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
      }
    } else if constexpr (MMA == kHmma) {
      for (int kk = 0; kk < kc; kk += 16) {
        uint32_t a[K::MI][4], b[K::NI][2];
#pragma unroll
        for (int mi = 0; mi < K::MI; ++mi) {
          const T *r0 = As + (wr0 + mi * 16 + g) * K::PA + kk + 2 * t;
          const T *r1 = r0 + 8 * K::PA;
          a[mi][0] = *reinterpret_cast<const uint32_t *>(r0);
          a[mi][1] = *reinterpret_cast<const uint32_t *>(r1);
          a[mi][2] = *reinterpret_cast<const uint32_t *>(r0 + 8);
          a[mi][3] = *reinterpret_cast<const uint32_t *>(r1 + 8);
        }
#pragma unroll
        for (int ni = 0; ni < K::NI; ++ni)
          kl::cu::ldsm_x2_trans(b[ni][0], b[ni][1], Bs + (kk + (lane & 15)) * K::PB + wc0 + ni * 8);
#pragma unroll
        for (int mi = 0; mi < K::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < K::NI; ++ni)
            if (mi < mi_n && ni < ni_n)
              kl::cu::mma_16816<std::is_same_v<T, __nv_bfloat16>>(acc[mi][ni], a[mi], b[ni][0],
                                                                  b[ni][1]);
      }
    } else if constexpr (MMA == kTf32x3) {
      for (int kk = 0; kk < kc; kk += 8) {
        uint32_t ah[K::MI][4], al[K::MI][4], bh[K::NI][2], bl[K::NI][2];
#pragma unroll
        for (int mi = 0; mi < K::MI; ++mi) {
          const float *r0 = reinterpret_cast<const float *>(As) + (wr0 + mi * 16 + g) * K::PA + kk + t;
          const float *r1 = r0 + 8 * K::PA;
          const float x[4] = {r0[0], r1[0], r0[4], r1[4]};
#pragma unroll
          for (int e = 0; e < 4; ++e) kl::cu::split_tf32(__float_as_uint(x[e]), ah[mi][e], al[mi][e]);
        }
        tf32_b_fragments<K>(Bs, kk, wc0, g, t, bh, bl);
#pragma unroll
        for (int mi = 0; mi < K::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < K::NI; ++ni)
            if (mi < mi_n && ni < ni_n) {
              // the three products of one k-step into a fresh fragment (small terms first),
              // then one IEEE add: the tensor cores round their accumulation toward zero, so
              // chaining every step into acc would truncate at the magnitude of the whole sum
              float p[4] = {0.f, 0.f, 0.f, 0.f};
              kl::cu::mma_tf32(p, al[mi], bh[ni][0], bh[ni][1]);
              kl::cu::mma_tf32(p, ah[mi], bl[ni][0], bl[ni][1]);
              kl::cu::mma_tf32(p, ah[mi], bh[ni][0], bh[ni][1]);
#pragma unroll
              for (int e = 0; e < 4; ++e) acc[mi][ni][e] += p[e];
            }
      }
    } else {  // IEEE float32 FMAs: lane (g, t) owns rows wr0 + g + 8i, columns wc0 + t + 4j
      const float *Af = reinterpret_cast<const float *>(As);
      const float *Bf = reinterpret_cast<const float *>(Bs);
      for (int kk = 0; kk < kv; ++kk) {
        float a[FM], b[FN];
#pragma unroll
        for (int i = 0; i < FM; ++i) a[i] = Af[(wr0 + g + 8 * i) * K::PA + kk];
#pragma unroll
        for (int j = 0; j < FN; ++j) b[j] = Bf[kk * K::PB + wc0 + t + 4 * j];
#pragma unroll
        for (int i = 0; i < FM; ++i)
#pragma unroll
          for (int j = 0; j < FN; ++j) acc[i][j][0] = fmaf(a[i], b[j], acc[i][j][0]);
      }
    }
  }

  group_sync<K::P, K::G>(grp);  // every warp is done with the panel: Cs reuses its buffer
  Acc *Cs = reinterpret_cast<Acc *>(smem + (cur ^ 1) * K::BUF);
  const int t = t4;
  if (active) {
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        if constexpr (MMA == kFfma) {
          Cs[(wr0 + g + 8 * i) * K::PC + wc0 + t + 4 * j] = acc[i][j][0];
        } else if constexpr (MMA == kDmma) {
          Acc *c = Cs + (wr0 + i * 8 + g) * K::PC + wc0 + j * 8 + 2 * t;
          c[0] = acc[i][j][0];
          c[1] = acc[i][j][1];
        } else {
          Acc *c = Cs + (wr0 + i * 16 + g) * K::PC + wc0 + j * 8 + 2 * t;
          c[0] = acc[i][j][0];
          c[1] = acc[i][j][1];
          c[8 * K::PC] = acc[i][j][2];
          c[8 * K::PC + 1] = acc[i][j][3];
        }
      }
  }
  group_sync<K::P, K::G>(grp);

  // epilogue: D = alpha * Cs + beta * C over the tile's valid part, coalesced
  constexpr int VEC = 16 / int(sizeof(T));
  const bool zero_beta = beta == Acc(0);
  const T *C = tl.C;
  T *D = tl.D;
  const int64_t c_rs = tl.c_rs, c_cs = tl.c_cs, d_rs = tl.d_rs, d_cs = tl.d_cs;
  if (d_cs == 1 && nv % VEC == 0 && d_rs % VEC == 0 && (reinterpret_cast<uintptr_t>(D) & 15) == 0) {
    constexpr int CV = K::BN / VEC;
    for (int i = gtid; i < K::BM * CV; i += K::GT) {
      const int r = i / CV, c = (i - r * CV) * VEC;
      if (r >= mv || c >= nv) continue;
      union {
        uint4 u;
        T e[VEC];
      } out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        Acc v = alpha * Cs[r * K::PC + c + j];
        if (!zero_beta) v += beta * to_acc<Acc>(C[r * c_rs + (c + j) * c_cs]);
        out.e[j] = from_acc<T>(v);
      }
      *reinterpret_cast<uint4 *>(D + r * d_rs + c) = out.u;
    }
  } else {
    const bool rows_fast = d_rs == 1 && d_cs != 1;
    for (int i = gtid; i < K::BM * K::BN; i += K::GT) {
      int r, c;
      if (rows_fast) {
        c = i / K::BM;
        r = i - c * K::BM;
      } else {
        r = i / K::BN;
        c = i - r * K::BN;
      }
      if (r >= mv || c >= nv) continue;
      Acc v = alpha * Cs[r * K::PC + c];
      if (!zero_beta) v += beta * to_acc<Acc>(C[r * c_rs + c * c_cs]);
      D[r * d_rs + c * d_cs] = from_acc<T>(v);
    }
  }
}

// A group's work in a uniform batch: items (product, tile) it, it + stride, ...
template <class T, class K>
struct UniformCursor {
  const Args &args;
  int64_t it, stride, items, per, tn_count;
  __device__ UniformCursor(const Args &a, int64_t first, int64_t step) : args(a), it(first), stride(step) {
    tn_count = (a.p.n + K::BN - 1) / K::BN;
    per = (a.p.m + K::BM - 1) / K::BM * tn_count;
    items = a.count * per;
  }
  __device__ bool valid() const { return it < items; }
  __device__ bool next() {
    it += stride;
    return it < items;
  }
  __device__ void tile(Tile<T> &t) const {
    const kl_batched_problem &p = args.p;
    // 32-bit divisions where the tile count allows (a fifth of the 64-bit ones' instructions:
    // one thread decodes every tile of a block in the large-tile kernels)
    const bool narrow = items <= 0x7fffffff;
    int64_t pi, tm, tn;
    if (narrow) {
      const uint32_t i = uint32_t(it), pr = uint32_t(per), tc = uint32_t(tn_count);
      const uint32_t q = i / pr, rest = i - q * pr, r = rest / tc;
      pi = q, tm = r, tn = rest - r * tc;
    } else {
      pi = it / per;
      const int64_t rest = it - pi * per;
      tm = rest / tn_count, tn = rest - tm * tn_count;
    }
    int64_t rem = pi, oa = 0, ob = 0, oc = 0, od = 0;
#pragma unroll
    for (int j = 0; j < KL_BATCHED_MAX_DIMS; ++j) {  // static indices: the arrays stay params
      const int d = KL_BATCHED_MAX_DIMS - 1 - j;
      if (d < p.ndim) {
        int64_t idx;
        if (narrow) {  // (every batch extent divides into the tile count: it fits too)
          const uint32_t r32 = uint32_t(rem), s32 = uint32_t(p.shape[d]), q32 = r32 / s32;
          idx = r32 - q32 * s32;
          rem = q32;
        } else {
          idx = rem % p.shape[d];
          rem /= p.shape[d];
        }
        oa += idx * p.a_bs[d];
        ob += idx * p.b_bs[d];
        oc += idx * p.c_bs[d];
        od += idx * p.d_bs[d];
      }
    }
    const int64_t r0 = tm * K::BM, c0 = tn * K::BN;
    t.A = static_cast<const T *>(p.a) + oa + r0 * p.a_rs;
    t.a_rs = p.a_rs, t.a_cs = p.a_cs;
    t.B = static_cast<const T *>(p.b) + ob + c0 * p.b_cs;
    t.b_rs = p.b_rs, t.b_cs = p.b_cs;
    t.C = p.c ? static_cast<const T *>(p.c) + oc + r0 * p.c_rs + c0 * p.c_cs : nullptr;
    t.c_rs = p.c_rs, t.c_cs = p.c_cs;
    t.D = static_cast<T *>(p.d) + od + r0 * p.d_rs + c0 * p.d_cs;
    t.d_rs = p.d_rs, t.d_cs = p.d_cs;
    t.mv = int(min64(K::BM, p.m - r0));
    t.nv = int(min64(K::BN, p.n - c0));
    t.k = p.k;
  }
};

// A group's work in a variable batch: items are rows of tiles (product pi, tile row tm) of the
// device-side table; the last row item of a product also takes rows past tm_max tiles (a
// product larger than the caller's max_order is slower, never wrong).  The table row is read
// field by field where used (a copy of all 15 words would spill).
// With a work counter (args.counter) groups claim items as they finish the last one, the rows
// of the last tile row first (only the largest products have them), so the large items go out
// first and the small ones fill the end: sizes vary too much for a static split (grid-stride
// left groups 1.6x their mean work, simulated on orders uniform in 8..256).  Thread 0 of the
// group claims, skipping empty items, and hands the item over through shared memory.
template <class T, class K>
struct VariableCursor {
  const Args &args;
  int64_t it, stride, items, tr, tm_end, tn, tn_count;
  const kl_batched_entry *e;
  long long *slot;  // dynamic claims: the group's two shared hand-over words, used in turn (a
  int grp, gtid, turn = 0;  // claim may follow the last at once: a lagging thread still reads)
  __device__ VariableCursor(const Args &a, int64_t first, int64_t step, long long *slot_, int grp_,
                            int gtid_)
      : args(a), stride(step), slot(slot_), grp(grp_), gtid(gtid_) {
    items = a.list ? int64_t(*a.list_count) : a.count * a.tm_max;
    if (a.counter)
      claim();
    else
      seek(first);
  }
  // item -> (product, tile row); false for an empty item
  __device__ bool decode(int64_t item, int64_t &pi, int64_t &tm) const {
    if (args.list) {  // the list holds non-empty rows only (the last row item: see start)
      const int64_t v = args.list[item];
      pi = v >> 20;
      tm = v & ((1 << 20) - 1);
      return true;
    }
    if (args.counter) {  // rows from the last tile row down, products in order within a row
      const int64_t rr = item / args.count;
      pi = item - rr * args.count;
      tm = args.tm_max - 1 - rr;
    } else {
      pi = item / args.tm_max;
      tm = item - pi * args.tm_max;
    }
    const kl_batched_entry *x = args.table + pi;
    return x->m > 0 && x->n > 0 && tm * K::BM < x->m;
  }
  __device__ void start(int64_t pi, int64_t tm) {
    e = args.table + pi;
    tn_count = (e->n + K::BN - 1) / K::BN;
    tm_end = tm == args.tm_max - 1 ? (e->m + K::BM - 1) / K::BM : tm + 1;
    tr = tm;
    tn = 0;
  }
  __device__ bool claim() {
    if (gtid == 0) {
      int64_t c, pi, tm;
      do {
        c = int64_t(atomicAdd(args.counter, 1ull));
      } while (c < items && !decode(c, pi, tm));
      slot[turn] = c;
    }
    group_sync<K::P, K::G>(grp);
    it = slot[turn];
    turn ^= 1;
    if (it >= items) return false;
    int64_t pi, tm;
    decode(it, pi, tm);
    start(pi, tm);
    return true;
  }
  __device__ bool seek(int64_t from) {
    for (it = from; it < items; it += stride) {
      int64_t pi, tm;
      if (!decode(it, pi, tm)) continue;
      start(pi, tm);
      return true;
    }
    return false;
  }
  __device__ bool valid() const { return it < items; }
  __device__ bool next() {
    if (++tn < tn_count) return true;
    tn = 0;
    if (++tr < tm_end) return true;
    return args.counter ? claim() : seek(it + stride);
  }
  __device__ void tile(Tile<T> &t) const {
    const int64_t r0 = tr * K::BM, c0 = tn * K::BN;
    t.a_rs = e->a_rs, t.a_cs = e->a_cs;
    t.A = reinterpret_cast<const T *>(e->a) + r0 * t.a_rs;
    t.b_rs = e->b_rs, t.b_cs = e->b_cs;
    t.B = reinterpret_cast<const T *>(e->b) + c0 * t.b_cs;
    t.c_rs = e->c_rs, t.c_cs = e->c_cs;
    t.C = e->c ? reinterpret_cast<const T *>(e->c) + r0 * t.c_rs + c0 * t.c_cs : nullptr;
    t.d_rs = e->d_rs, t.d_cs = e->d_cs;
    t.D = reinterpret_cast<T *>(e->d) + r0 * t.d_rs + c0 * t.d_cs;
    t.mv = int(min64(K::BM, e->m - r0));
    t.nv = int(min64(K::BN, e->n - c0));
    t.k = e->k;
  }
};

// Persistent blocks: each group walks its items (grid-stride), computing one tile while the
// next tile's first k-panel streams into its other buffer.
template <class T, int MMA, class K, bool VAR>
__global__ void __launch_bounds__(K::THREADS, K::MIN_BLOCKS) batched_kernel(const Args args) {
  KL_DYNAMIC_SMEM(smem_raw);
  const int grp = int(threadIdx.x) / K::GT, gtid = int(threadIdx.x) - grp * K::GT;
  unsigned char *smem = smem_raw + grp * K::GROUP_BYTES;
  const typename K::Acc alpha = typename K::Acc(args.p.alpha);
  const typename K::Acc beta = typename K::Acc(args.p.beta);
  __shared__ long long slots[2 * K::G];  // the variable form's hand-over words (two a group)
  const int64_t first = int64_t(blockIdx.x) * K::G + grp, step = int64_t(gridDim.x) * K::G;
  auto make_cursor = [&] {
    if constexpr (VAR)
      return VariableCursor<T, K>(args, first, step, slots + 2 * grp, grp, gtid);
    else
      return UniformCursor<T, K>(args, first, step);
  };
  auto cur_item = make_cursor();
  if (!cur_item.valid()) return;
  Tile<T> t, nx{};
  cur_item.tile(t);
  int cur = 0;
  if (t.k > 0) issue_panel<T, K>(smem, t, 0, gtid);
  kl::cu::cp_async_commit();
  for (;;) {
    const bool more = cur_item.next();
    if (more) cur_item.tile(nx);
    run_tile<T, MMA, K>(smem, grp, gtid, t, nx, more, cur, alpha, beta);
    if (!more) break;
    t = nx;
  }
  kl::cu::cp_async_wait<0>();
}

template <class T, int MMA, class K, bool VAR>
cudaError_t launch_kernel(const Args &args, int64_t items, cudaStream_t stream) {
  const int64_t blocks = (items + K::G - 1) / K::G;
  int64_t grid = blocks;
#ifdef KL_BATCHED_EMULATE
  (void)stream;
  if (grid > 3) grid = (grid + 1) / 2;  // persistent: some blocks take several items
  emu_launch(unsigned(grid), K::THREADS, K::SMEM, [args] { batched_kernel<T, MMA, K, VAR>(args); });
  return cudaSuccess;
#else
  static int resident = -1;  // blocks an SM holds (per kernel; the first launch asks)
  static int sms = 0;
  if (K::SMEM > 48 * 1024) {  // (per device: a launch on a second GPU needs its own opt-in)
    const cudaError_t e =
        opt_in_smem(reinterpret_cast<const void *>(batched_kernel<T, MMA, K, VAR>), K::SMEM);
    if (e != cudaSuccess) return e;
  }
  if (resident < 0) {
    cudaError_t e = cudaSuccess;
    int per_sm = 0;
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, batched_kernel<T, MMA, K, VAR>,
                                                        K::THREADS, K::SMEM);
    DeviceInfo d;
    if (e == cudaSuccess) e = query_device(&d);
    if (e != cudaSuccess) return e;
    sms = d.sms;
    resident = per_sm > 0 ? per_sm : 1;
  }
  const int64_t cap = int64_t(resident) * sms;
  if (cap > 0 && grid > cap) grid = cap;
  if (grid > 0x7fffffff) grid = 0x7fffffff;
  batched_kernel<T, MMA, K, VAR><<<unsigned(grid), K::THREADS, K::SMEM, stream>>>(args);
  return cudaGetLastError();
#endif
}

template <class T, int MMA, class K>
cudaError_t launch_one(const Args &args, int64_t items, cudaStream_t stream) {
  if (items <= 0) return cudaSuccess;
  if (args.table) return launch_kernel<T, MMA, typename K::Raw, true>(args, items, stream);
  return launch_kernel<T, MMA, K, false>(args, items, stream);
}

}  // namespace batched
}  // namespace kl

#endif
