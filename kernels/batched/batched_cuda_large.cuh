// The large-tile kernel of the tensor-core dtypes (float16 / bfloat16 HMMA m16n8k16 and 3xTF32
// m16n8k8 with float32 accumulators, float64 m16n8k8 DMMA): 128 x 128 tiles of one product (8
// warps in a 2 x 4 grid, a warp computing 64 x 32; float64 16 warps of 32 x 32), or 64 x 64 tiles
// (4 warps of 32 x 32) for uniform stacks of middle orders; 64-byte k-panel rows in a 4-stage
// cp.async ring, ldmatrix.x4 fragment loads, an epilogue from registers.
//
// Why not the 64 x 64 kernel (batched_cuda_kernels.cuh) at orders >= 96: there a warp computes
// 16 x 64, so every k-step reads 2.5 KB of fragments for 8 MMAs (the shared-memory pipe, not the
// tensor cores, sets the pace: ~20 of its cycles for 8 of theirs); two buffers leave one panel in
// flight, the epilogue stages C through the buffer the next panel needs, 12 warps an SM hide
// little of it, and each 64 x 64 tile re-reads its row / column panels from L2 (1 MB a 256^3
// product).  Here a warp reads 3 KB for 16 MMAs (A: 4 ldmatrix.x4, B: 2 ldmatrix.x4.trans), three
// panels stay in flight, 2 blocks x 8 warps an SM, and the persistent ring runs across tiles: the
// next tile's panels stream in while this tile computes and stores (the epilogue needs no shared
// memory: a quad's accumulators are transposed by shuffles into 16-byte row segments).
//
// Work: uniform stacks walk tiles statically (blockIdx.x, + gridDim.x); variable batches take
// rows of tiles from a device-side list (built by bin_kernel from the size table: products of
// order >= the large-tile threshold here, the rest to the 64 x 64 kernel's list) with dynamic
// claims.  The stage ring carries each panel's tile tag and first/last flags, so the consumer
// side (the MMAs and the epilogue) needs no cursor of its own.
#ifndef KRONLINALG_BATCHED_CUDA_LARGE_CUH
#define KRONLINALG_BATCHED_CUDA_LARGE_CUH

#include "batched_cuda_kernels.cuh"

namespace kl {
namespace batched {

// The variable form's tile (the bin kernel's rows, the tags).
struct LargeCfg {
  static constexpr int BM = 128, BN = 128;
};

// One element type's kernel on TILE x TILE tiles: 64-byte k-panel rows (32 halves, 16 floats;
// float64 128 bytes, 16 doubles); TILE 128: 8 warps in a 2 x 4 grid (a warp computes 64 x 32),
// 2 blocks an SM; float64 16 warps in a 4 x 4 grid (32 x 32 a warp: its 32 double accumulators
// take 64 registers), one block; TILE 64 (uniform orders below the 128 x 128 switch): 4 warps
// in a 2 x 2 grid of 32 x 32, 4 blocks an SM.
template <class T, bool RAW_ = false, int TILE = 128>
struct LargeCfgT {
  static constexpr int BM = TILE, BN = TILE;
  static constexpr bool RAW = RAW_;
  static constexpr bool F64 = sizeof(T) == 8;
  using Acc = std::conditional_t<F64, double, float>;
  static constexpr int THREADS = TILE == 64 ? 128 : F64 ? 512 : 256;
  static constexpr int MIN_BLOCKS = TILE == 64 ? 4 : F64 ? 1 : 2;
  static constexpr int WGN = TILE == 64 ? 2 : 4, WGM = THREADS / 32 / WGN, WM = BM / WGM,
                       WN = BN / WGN;
  static constexpr int MI = WM / 16, NI = WN / 8;
  static_assert(NI == 4, "the epilogue's quad transpose takes 4 column fragments");
  // RAW: operands whose rows sit at any offset (packed odd orders) land by 16-byte cp.async as
  // the aligned chunks that hold them, in the stage itself (its pitches hold a row's chunks:
  // one 16-byte chunk past the row), and are shifted into one compute buffer just before the
  // stage is computed (one block barrier more): four stages and the buffer keep two blocks an
  // SM (5 x 18.5 KB).  (float64 rows at any 8-byte offset stream by 8-byte cp.async: no
  // staging.)
  // (128-byte k-panel rows in three stages, half the barriers a flop, were measured and did not
  // pay: H100 2026-11-27, float16 128^3 485 -> 538 us, 256^3 2,845 -> 2,687, low rank float32
  // slower; commit 99b371b holds them)
  static constexpr int E = int(sizeof(T)), VEC = 16 / E;
  static constexpr int BK = F64 ? 16 : 64 / E, STAGES = 4;
  static constexpr int KS = E == 2 ? 16 : 8;  // k of one MMA (m16n8k16 HMMA, m16n8k8 TF32/DMMA)
  // pitches: 80-byte A rows put the 8 rows an ldmatrix phase reads in distinct 16-byte bank
  // groups; B rows of BN + 8 elements do the same for ldmatrix.trans (halves, 272 bytes) and
  // for the TF32 B fragment's scalar loads (floats: rows t, t+4 at 8-bank offsets); float64
  // (scalar 8-byte fragment loads, 16 lanes a phase): both pitches = 4 mod 16 doubles.  All
  // 16-byte aligned, and at least one 16-byte chunk past a row (the staged rows' chunks).
  static constexpr int PA = F64 ? BK + 4 : BK + VEC, PB = F64 ? BN + 4 : BN + 8;
  static_assert(F64 || (PA >= BK + VEC && PB >= BN + VEC), "a staged row's chunks fit its pitch");
  static constexpr int A_ELEMS = BM * PA, STAGE = (BM * PA + BK * PB) * E;
  static constexpr int SMEM = (STAGES + (RAW ? 1 : 0)) * STAGE;
  static_assert(!(RAW && F64), "float64 needs no staging");
};

// Where a staged panel came from (realign_rows needs each row's address for its shift).
template <class T>
struct LargeRawInfo {
  const T *a, *b;
  int64_t a_rs, b_rs;
  int a_rv, a_cv, b_rv, b_cv;
};

// list entries: (product << kRowBits) | tile row
constexpr int kRowBits = 20;
// tags of the variable form: (product << 24) | (tile row << 12) | tile column
constexpr int kTagBits = 12;
constexpr int64_t kLargeMaxSide = int64_t(1) << 19;  // 128 * 4096: tile indices fit 12 bits

#ifndef KL_BATCHED_EMULATE  // (batched_cuda_emulate.cpp supplies it on the CPU)
// D = A * B, m16n8k8 TF32 into a fresh fragment (a zero accumulator operand: no zeroing moves
// for the 3xTF32 k-step's first product).
__device__ __forceinline__ void mma_tf32_fresh(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}
#endif

// acc += A·B in 3xTF32 (A = ah + al, B = bh + bl): the three products into a fresh fragment,
// small terms first, then one IEEE add (the tensor cores' accumulation truncates: see
// batched_cuda_kernels.cuh).  Shared with the tiny-product kernel.
__device__ __forceinline__ void mma_3xtf32(float (&acc)[4], const uint32_t (&ah)[4],
                                           const uint32_t (&al)[4], uint32_t bh0, uint32_t bh1,
                                           uint32_t bl0, uint32_t bl1) {
  float p[4];
  mma_tf32_fresh(p, al, bh0, bh1);
  kl::cu::mma_tf32(p, ah, bl0, bl1);
  kl::cu::mma_tf32(p, ah, bh0, bh1);
#pragma unroll
  for (int e = 0; e < 4; ++e) acc[e] += p[e];
}

// ---- the work sources: which tile a stage belongs to -----------------------------------------

// What the producer side keeps of a tile (C and D are the epilogue's: it decodes them from the
// stage's tag; registers are what the 64 accumulators a thread leave scarce).
template <class T>
struct LoadTile {
  const T *A, *B;
  int64_t a_rs, a_cs, b_rs, b_cs, k;
  int mv, nv;
  __device__ void set(const Tile<T> &t) {
    A = t.A, B = t.B, a_rs = t.a_rs, a_cs = t.a_cs, b_rs = t.b_rs, b_cs = t.b_cs, k = t.k;
    mv = t.mv, nv = t.nv;
  }
};

// The producer side's state: the tile whose panels are being requested, its tag, the next
// panel's k.  Block-uniform, so it lives in shared memory (two copies: the one a step reads and
// the one thread 0 writes for the next step), not in every thread's registers, which the 64
// accumulators a thread leave scarce.
// (Kept: what of the tile it keeps, LoadTile or, for the warpgroup-MMA kernel, all of it.)
template <class T, class Kept = LoadTile<T>>
struct ProdState {
  Kept lt;
  long long tag;
  int64_t k0;
  int live;
};

// The state at a block's first tile.
template <class T, class Kept, class Src>
__device__ __forceinline__ ProdState<T, Kept> first_state(Src &src) {
  ProdState<T, Kept> p0;
  p0.k0 = 0;
  p0.tag = 0;
  p0.live = src.first(p0.lt, p0.tag);
  return p0;
}

// A decoded tile into what the producer keeps: the loader's part (LoadTile) or all of it (the
// warpgroup-MMA kernel keeps C and D too, so no thread decodes the tile a second time).
template <class T>
__device__ __forceinline__ void put_tile(LoadTile<T> &out, const Tile<T> &t) { out.set(t); }
template <class T>
__device__ __forceinline__ void put_tile(Tile<T> &out, const Tile<T> &t) { out = t; }

// The work sources, run by thread 0 alone: the first tile, and the tile after a tag.
// Uniform stacks: tiles blockIdx.x, + gridDim.x (every tile costs the same).
template <class T, int TILE_ = 128>
struct LargeUniformSrc {
  static constexpr int TILE = TILE_;
  using K = LargeCfgT<T, false, TILE>;
  const Args &args;
  __device__ explicit LargeUniformSrc(const Args &a) : args(a) {}
  template <class Out>
  __device__ bool at(long long it, Out &out, long long &tag) {
    UniformCursor<T, K> cur(args, it, int64_t(gridDim.x));
    if (!cur.valid()) return false;
    Tile<T> t;
    cur.tile(t);
    put_tile(out, t);
    tag = it;
    return true;
  }
  template <class Out>
  __device__ bool first(Out &out, long long &tag) { return at(blockIdx.x, out, tag); }
  template <class Out>
  __device__ bool next(long long prev, Out &out, long long &tag) {
    return at(prev + gridDim.x, out, tag);
  }
  // the tile of a tag, for the epilogue (every thread)
  __device__ void tile_of(long long tag, Tile<T> &t) const {
    UniformCursor<T, K> cur(args, tag, 1);
    cur.tile(t);
  }
};

template <class T>
__device__ __forceinline__ void large_var_tile(const Args &args, long long tag, Tile<T> &t) {
  const int64_t pi = tag >> (2 * kTagBits);
  const int64_t tr = (tag >> kTagBits) & ((1 << kTagBits) - 1), tn = tag & ((1 << kTagBits) - 1);
  const kl_batched_entry *e = args.table + pi;
  const int64_t r0 = tr * LargeCfg::BM, c0 = tn * LargeCfg::BN;
  t.a_rs = e->a_rs, t.a_cs = e->a_cs;
  t.A = reinterpret_cast<const T *>(e->a) + r0 * t.a_rs;
  t.b_rs = e->b_rs, t.b_cs = e->b_cs;
  t.B = reinterpret_cast<const T *>(e->b) + c0 * t.b_cs;
  t.c_rs = e->c_rs, t.c_cs = e->c_cs;
  t.C = e->c ? reinterpret_cast<const T *>(e->c) + r0 * t.c_rs + c0 * t.c_cs : nullptr;
  t.d_rs = e->d_rs, t.d_cs = e->d_cs;
  t.D = reinterpret_cast<T *>(e->d) + r0 * t.d_rs + c0 * t.d_cs;
  t.mv = int(min64(LargeCfg::BM, e->m - r0));
  t.nv = int(min64(LargeCfg::BN, e->n - c0));
  t.k = e->k;
}

// Variable batches: rows of tiles from args.list (count at *args.list_count), claimed through
// args.counter; a row item with tm == tm_max - 1 also takes the rows past it.  Thread 0 claims
// the next item as soon as it starts one, so the atomic's answer is long in when it is used.
template <class T>
struct LargeVariableSrc {
  static constexpr int TILE = LargeCfg::BM;
  const Args &args;
  int64_t items = 0;
  long long pending = 0;
  __device__ explicit LargeVariableSrc(const Args &a) : args(a) {}
  template <class Out>
  __device__ bool emit(long long tag, Out &lt, long long &out) {
    Tile<T> t;
    large_var_tile<T>(args, tag, t);
    put_tile(lt, t);
    out = tag;
    return true;
  }
  template <class Out>
  __device__ bool take(Out &lt, long long &tag) {
    const long long item = pending;
    if (item >= items) return false;
    pending = (long long)atomicAdd(args.counter, 1ull);
    const int64_t v = args.list[item];
    const int64_t pi = v >> kRowBits, tm = v & ((1 << kRowBits) - 1);
    return emit((pi << (2 * kTagBits)) | (tm << kTagBits), lt, tag);
  }
  template <class Out>
  __device__ bool first(Out &lt, long long &tag) {
    items = int64_t(*args.list_count);
    pending = (long long)atomicAdd(args.counter, 1ull);
    return take(lt, tag);
  }
  template <class Out>
  __device__ bool next(long long prev, Out &lt, long long &tag) {
    const int64_t pi = prev >> (2 * kTagBits);
    const int tr = int((prev >> kTagBits) & ((1 << kTagBits) - 1));
    const int tn = int(prev & ((1 << kTagBits) - 1));
    const kl_batched_entry *e = args.table + pi;
    if (int64_t(tn + 1) * LargeCfg::BN < e->n) return emit(prev + 1, lt, tag);
    const long long row0 = (pi << (2 * kTagBits)) | (int64_t(tr + 1) << kTagBits);
    if (tr >= args.tm_max - 1 && int64_t(tr + 1) * LargeCfg::BM < e->m) return emit(row0, lt, tag);
    return take(lt, tag);
  }
  __device__ void tile_of(long long tag, Tile<T> &t) const { large_var_tile<T>(args, tag, t); }
};

// ---- the epilogue --------------------------------------------------------------------------

template <class A>
__device__ __forceinline__ A pick4(const A (&w)[4], int i) {
  A r = w[0];
  if (i == 1) r = w[1];
  if (i == 2) r = w[2];
  if (i == 3) r = w[3];
  return r;
}

// Lane t of each quad holds w[j] = column pair j's value; afterwards x[j] = lane j's w[t]
// (a 4 x 4 transpose across the quad: three exchanges).
template <class A>
__device__ __forceinline__ void quad_transpose(const A (&w)[4], A (&x)[4], int t) {
#pragma unroll
  for (int j = 0; j < 4; ++j) x[j] = w[j];  // x[t] = w[t] stays; the others are replaced
#pragma unroll
  for (int s = 1; s < 4; ++s) {
    const A recv = __shfl_xor_sync(0xffffffffu, pick4(w, t ^ s), s);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j == (t ^ s)) x[j] = recv;
  }
}

// D = alpha * acc + beta * C for one warp's WM x 32 part of a tile.  Lane (g, t) ends with row
// g (+8, +16 ...) and the 8 columns wc0 + 8t .. +7: 16-byte stores where D's rows are
// contiguous and aligned (a quad writes 8 x 4 contiguous elements), element stores elsewhere.
template <class T, class K>
__device__ __forceinline__ void large_epilogue(
    const typename K::Acc (&acc)[K::MI][K::NI][4], const Tile<T> &tl, int wr0, int wc0, int lane,
    typename K::Acc alpha, typename K::Acc beta) {
  using Acc = typename K::Acc;
  const int g = lane >> 2, t = lane & 3;
  const int c = wc0 + 8 * t;
#pragma unroll
  for (int mi = 0; mi < K::MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      Acc w0[4], w1[4], x0[4], x1[4];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        w0[ni] = acc[mi][ni][2 * h];
        w1[ni] = acc[mi][ni][2 * h + 1];
      }
      quad_transpose(w0, x0, t);
      quad_transpose(w1, x1, t);
      const int r = wr0 + mi * 16 + g + 8 * h;
      if (r >= tl.mv || c >= tl.nv) continue;
      Acc v[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[2 * j] = alpha * x0[j];
        v[2 * j + 1] = alpha * x1[j];
      }
      const int cn = tl.nv - c < 8 ? tl.nv - c : 8;
      if (beta != Acc(0)) {
        const T *crow = tl.C + r * tl.c_rs + c * tl.c_cs;
        // one row segment's C at a time: left free, the compiler hoisted the C loads of all
        // eight segments ahead of the first (float32: 1 KB of spills)
        asm volatile("" : "+l"(crow)::"memory");
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (j < cn) v[j] += beta * to_acc<Acc>(crow[j * tl.c_cs]);
      }
      T *drow = tl.D + r * tl.d_rs + c * tl.d_cs;
      if (cn == 8 && tl.d_cs == 1 && (reinterpret_cast<uintptr_t>(drow) & 15) == 0) {
        constexpr int NV = 8 * int(sizeof(T)) / 16;  // 16-byte stores a row segment
        union {
          uint4 u[NV];
          T e[8];
        } out;
#pragma unroll
        for (int j = 0; j < 8; ++j) out.e[j] = from_acc<T>(v[j]);
#pragma unroll
        for (int q = 0; q < NV; ++q) reinterpret_cast<uint4 *>(drow)[q] = out.u[q];
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (j < cn) drow[j * tl.d_cs] = from_acc<T>(v[j]);
      }
    }
}

// ---- the kernel ----------------------------------------------------------------------------

// An R x C panel of contiguous rows that start 16-byte aligned (src aligned, rs a multiple of
// 16 bytes) into dst (pitch DP) by 16-byte cp.async, zero past rv rows and cv columns (a chunk
// that crosses cv reads only its valid bytes).  A thread's chunks sit at fixed places in the
// panel, so the loop unrolls and the bounds are byte counts, not branches: load_tile's general
// loop spent ~30 instructions a chunk (ncu, float16 256^3).
template <class T, int R, int C, int GT, int DP>
__device__ __forceinline__ void load_panel16(T *__restrict dst, const T *__restrict src, int64_t rs,
                                             int rv, int cv, int tid) {
  constexpr int VEC = 16 / int(sizeof(T)), CV = C / VEC, N = R * CV;
  static_assert(N % GT == 0, "whole chunks a thread");
#pragma unroll
  for (int j = 0; j < N / GT; ++j) {
    const int i = tid + j * GT, r = i / CV, c = (i - r * CV) * VEC;
    const int left = (cv - c) * int(sizeof(T));
    const int bytes = r < rv ? (left < 0 ? 0 : left > 16 ? 16 : left) : 0;
    kl::cu::cp_async_16_part(dst + r * DP + c, bytes ? src + r * rs + c : src, bytes);
  }
}

template <class T>
__device__ __forceinline__ bool panel16(const T *src, int64_t rs, int64_t cs) {
  constexpr int VEC = 16 / int(sizeof(T));
  return cs == 1 && rs % VEC == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0;
}

// One k-panel's MMAs for a warp's WM x WN part of the tile.  FULL: the part lies inside the
// tile's valid rows and columns, every MMA runs unconditionally; otherwise the mi_n x ni_n
// fragments that hold valid ones (per-MMA predicates: a predicate word rebuilt every panel and
// a WARPSYNC before each MMA, a fifth of the instructions where every tile was full).
template <class T, class K, bool FULL>
__device__ __forceinline__ void large_panel(typename K::Acc (&acc)[K::MI][K::NI][4],
                                            const T *As, const T *Bs, int wr0, int wc0, int lane,
                                            int mi_n, int ni_n) {
  constexpr bool BF16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr bool TF32 = std::is_same_v<T, float>;  // float as 3xTF32
#pragma unroll
  for (int kk = 0; kk < K::BK; kk += K::KS) {
    if constexpr (K::F64) {
      // m16n8k8 DMMA: B's fragments for every ni, then A's per mi, scalar 8-byte loads
      const int g = lane >> 2, t = lane & 3;
      double b[K::NI][2];
#pragma unroll
      for (int ni = 0; ni < K::NI; ++ni) {
        const double *c0 = reinterpret_cast<const double *>(Bs) + (kk + t) * K::PB + wc0 + ni * 8 + g;
        b[ni][0] = c0[0];
        b[ni][1] = c0[4 * K::PB];
      }
#pragma unroll
      for (int mi = 0; mi < K::MI; ++mi) {
        if (!FULL && mi >= mi_n) continue;
        const double *r0 = reinterpret_cast<const double *>(As) + (wr0 + mi * 16 + g) * K::PA + kk + t;
        const double *r1 = r0 + 8 * K::PA;
        const double a[4] = {r0[0], r1[0], r0[4], r1[4]};
#pragma unroll
        for (int ni = 0; ni < K::NI; ++ni)
          if (FULL || ni < ni_n) dmma_1688(acc[mi][ni], a, b[ni][0], b[ni][1]);
      }
    } else if constexpr (!TF32) {
      uint32_t a[K::MI][4], b[K::NI][2];
#pragma unroll
      for (int mi = 0; mi < K::MI; ++mi)
        kl::cu::ldsm_x4(a[mi], As + (wr0 + mi * 16 + (lane & 15)) * K::PA + kk + (lane >> 4) * 8);
#pragma unroll
      for (int nj = 0; nj < K::NI / 2; ++nj) {
        uint32_t r[4];
        kl::cu::ldsm_x4_trans(r, Bs + (kk + (lane & 15)) * K::PB + wc0 + nj * 16 + (lane >> 4) * 8);
        b[2 * nj][0] = r[0];
        b[2 * nj][1] = r[1];
        b[2 * nj + 1][0] = r[2];
        b[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < K::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < K::NI; ++ni)
          if (FULL || (mi < mi_n && ni < ni_n))
            kl::cu::mma_16816<BF16>(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    } else {
      // 3xTF32: B's fragments (split once, used by every mi), then per mi A's by ldmatrix
      // (an 8 x 8 matrix of 16-bit pairs is 8 rows of 4 floats: lane (g, t) gets A[g][t])
      const int g = lane >> 2, t = lane & 3;
      uint32_t bh[K::NI][2], bl[K::NI][2];
      tf32_b_fragments<K>(Bs, kk, wc0, g, t, bh, bl);
#pragma unroll
      for (int mi = 0; mi < K::MI; ++mi) {
        if (!FULL && mi >= mi_n) continue;
        uint32_t x[4], ah[4], al[4];
        kl::cu::ldsm_x4(x, As + (wr0 + mi * 16 + (lane & 15)) * K::PA + kk + (lane >> 4) * 4);
#pragma unroll
        for (int e = 0; e < 4; ++e) kl::cu::split_tf32(x[e], ah[e], al[e]);
#pragma unroll
        for (int ni = 0; ni < K::NI; ++ni)
          if (FULL || ni < ni_n)
            mma_3xtf32(acc[mi][ni], ah, al, bh[ni][0], bh[ni][1], bl[ni][0], bl[ni][1]);
      }
    }
  }
}

template <class T, class Src, bool RAW>
__global__ void __launch_bounds__(LargeCfgT<T, RAW, Src::TILE>::THREADS,
                                  LargeCfgT<T, RAW, Src::TILE>::MIN_BLOCKS)
    large_kernel(const Args args) {
  using K = LargeCfgT<T, RAW, Src::TILE>;
  using Acc = typename K::Acc;
  KL_DYNAMIC_SMEM(smem);
  // per stage: its tile's tag, flags (1 first panel, 2 last, 4 / 8 A / B staged), valid rows
  // and columns, and for a last panel the tile itself (the epilogue's C and D): written by
  // thread 0 as it issues the stage, so no thread decodes a tag (the variable form's table
  // reads, the uniform form's divisions) where the MMAs wait
  __shared__ long long meta_tag[K::STAGES];
  __shared__ int meta_flags[K::STAGES], meta_mv[K::STAGES], meta_nv[K::STAGES];
  __shared__ Tile<T> meta_tile[K::STAGES];
  __shared__ ProdState<T> prod[2];  // step s reads prod[s & 1], thread 0 writes the other
  __shared__ LargeRawInfo<T> raw_info[RAW ? K::STAGES : 1];
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int wr0 = (warp / K::WGN) * K::WM, wc0 = (warp % K::WGN) * K::WN;
  const Acc alpha = Acc(args.p.alpha), beta = Acc(args.p.beta);

  Src src(args);
  if (tid == 0) prod[0] = first_state<T, LoadTile<T>>(src);

  // every thread requests its share of the next panel into stage `slot` (one commit group a
  // call, empty once the work is out); thread 0 labels the stage and advances the state
  auto issue = [&](int stage) {
    const int slot = stage % K::STAGES;
    T *As = reinterpret_cast<T *>(smem + slot * K::STAGE);
    T *Bs = As + K::A_ELEMS;
    const ProdState<T> &P = prod[stage & 1];
    if (P.live) {
      const LoadTile<T> lt = P.lt;
      const int64_t lk0 = P.k0;
      const int kv = int(lt.k - lk0 < K::BK ? lt.k - lk0 : K::BK);
      const T *a = lt.A + lk0 * lt.a_cs, *b = lt.B + lk0 * lt.b_rs;
      int flags = (lk0 == 0 ? 1 : 0) | (lk0 + K::BK >= lt.k ? 2 : 0);
      // rows at any offset (K::RAW): their aligned chunks into the stage, shifted at use
      bool raw_a = false, raw_b = false;
      if (panel16(a, lt.a_rs, lt.a_cs)) {
        load_panel16<T, K::BM, K::BK, K::THREADS, K::PA>(As, a, lt.a_rs, lt.mv, kv, tid);
      } else if (RAW && lt.a_cs == 1) {
        raw_a = true;
        if constexpr (RAW) stage_rows<T, K::BM, K::BK, K::THREADS, K::PA>(As, a, lt.a_rs, lt.mv, kv, tid);
      } else {
        load_tile<T, K::BM, K::BK, K::THREADS, K::PA>(As, a, lt.a_rs, lt.a_cs, lt.mv, kv, tid);
      }
      if (panel16(b, lt.b_rs, lt.b_cs)) {
        load_panel16<T, K::BK, K::BN, K::THREADS, K::PB>(Bs, b, lt.b_rs, kv, lt.nv, tid);
      } else if (RAW && lt.b_cs == 1) {
        raw_b = true;
        if constexpr (RAW) stage_rows<T, K::BK, K::BN, K::THREADS, K::PB>(Bs, b, lt.b_rs, kv, lt.nv, tid);
      } else {
        load_tile<T, K::BK, K::BN, K::THREADS, K::PB>(Bs, b, lt.b_rs, lt.b_cs, kv, lt.nv, tid);
      }
      if (tid == 0) {
        meta_tag[slot] = P.tag;
        meta_flags[slot] = flags | (raw_a ? 4 : 0) | (raw_b ? 8 : 0);
        meta_mv[slot] = lt.mv;
        meta_nv[slot] = lt.nv;
        if (flags & 2) src.tile_of(P.tag, meta_tile[slot]);
        if (raw_a || raw_b)
          raw_info[slot % (RAW ? K::STAGES : 1)] = {a, b, lt.a_rs, lt.b_rs, lt.mv, kv, kv, lt.nv};
        ProdState<T> nx = P;
        nx.k0 = lk0 + K::BK;
        if (nx.k0 >= lt.k) {
          nx.k0 = 0;
          nx.live = src.next(P.tag, nx.lt, nx.tag);
        }
        prod[(stage + 1) & 1] = nx;
      }
    } else if (tid == 0) {
      meta_tag[slot] = -1;
      prod[(stage + 1) & 1].live = 0;
    }
    kl::cu::cp_async_commit();
  };

  // one stage a step, each step after a block barrier (the state thread 0 wrote is then seen)
#pragma unroll 1
  for (int s = 0; s < K::STAGES - 1; ++s) {
    __syncthreads();
    issue(s);
  }

  Acc acc[K::MI][K::NI][4];
#pragma unroll
  for (int i = 0; i < K::MI; ++i)
#pragma unroll
    for (int j = 0; j < K::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = Acc(0);
  int mv = 0, nv = 0;

#pragma unroll 1
  for (int it = 0;; ++it) {
    const int slot = it % K::STAGES;
    kl::cu::cp_async_wait<K::STAGES - 2>();  // this stage's copies (all but the newest) are in
    __syncthreads();  // ... for every thread; and the stage consumed last step is free
    const long long tag = meta_tag[slot];
    const int flags = tag < 0 ? 0 : meta_flags[slot];
    const T *As = reinterpret_cast<const T *>(smem + slot * K::STAGE);
    const T *Bs = As + K::A_ELEMS;
    if constexpr (RAW) {
      if (flags & 12) {  // staged rows shifted into the compute buffer (every thread reads the
                         // block-wide flags; the buffer's last readers passed the barrier above)
        const LargeRawInfo<T> ri = raw_info[slot];
        T *cb = reinterpret_cast<T *>(smem + K::STAGES * K::STAGE);
        if (flags & 4) {
          realign_rows<T, K::BM, K::BK, K::THREADS, K::PA, K::PA>(cb, As, ri.a, ri.a_rs, ri.a_rv,
                                                                  ri.a_cv, tid);
          As = cb;
        }
        if (flags & 8) {
          realign_rows<T, K::BK, K::BN, K::THREADS, K::PB, K::PB>(cb + K::A_ELEMS, Bs, ri.b,
                                                                  ri.b_rs, ri.b_rv, ri.b_cv, tid);
          Bs = cb + K::A_ELEMS;
        }
        __syncthreads();
      }
    }
    issue(it + K::STAGES - 1);
    if (tag < 0) break;
    if (flags & 1) {  // a tile starts: its valid rows and columns (the MMAs skip the rest)
      mv = meta_mv[slot];
      nv = meta_nv[slot];
    }
    if (wr0 < mv && wc0 < nv) {
      const int mi_n = min(K::MI, (mv - wr0 + 15) / 16), ni_n = min(K::NI, (nv - wc0 + 7) / 8);
      if (mi_n == K::MI && ni_n == K::NI)
        large_panel<T, K, true>(acc, As, Bs, wr0, wc0, lane, mi_n, ni_n);
      else
        large_panel<T, K, false>(acc, As, Bs, wr0, wc0, lane, mi_n, ni_n);
    }
    if (flags & 2) {  // the tile's last panel: store it, start the next one from zero
      large_epilogue<T, K>(acc, meta_tile[slot], wr0, wc0, lane, alpha, beta);
#pragma unroll
      for (int i = 0; i < K::MI; ++i)
#pragma unroll
        for (int j = 0; j < K::NI; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = Acc(0);
    }
  }
  kl::cu::cp_async_wait<0>();
}

// What bin_kernel sorts into: products of order >= from (both sides < kLargeMaxSide) to the
// 128 x 128 kernel's list (rows of 128, the last of at most large_rows taking the rest), the
// others to the small-tile kernel's (rows of small_bm, at most small_rows likewise); with wg, to
// the warpgroup-MMA kernel's list (rows of 128) those whose rows are all 16-byte aligned (wg 1:
// where its loads are 16-byte cp.async; any order) or every product of order >= from as well
// (wg 2).  counts[0..2]: the three lists' lengths (zeroed by the caller).
struct BinLists {
  int64_t from, large_rows;
  int small_bm;
  int64_t small_rows;
  int wg, elem;
  unsigned long long *counts;
  int64_t *large, *small, *wgl;
};

// Whether a product's A and B rows are all 16-byte aligned and contiguous (wg_kernel's panel16).
__device__ __forceinline__ bool rows_aligned16(const kl_batched_entry &e, int elem) {
  return e.a_cs == 1 && e.b_cs == 1 && (e.a | (e.a_rs * elem) | e.b | (e.b_rs * elem)) % 16 == 0;
}

// Sorts the products of a variable batch into the kernels' lists of tile rows (BinLists); empty
// products to none.  A block adds its rows to each count with one atomic.
static __global__ void __launch_bounds__(256) bin_kernel(const kl_batched_entry *table,
                                                         int64_t count, BinLists L) {
  __shared__ unsigned s_count[3];
  __shared__ unsigned long long s_base[3];
  const int tid = int(threadIdx.x);
  if (tid < 3) s_count[tid] = 0;
  __syncthreads();
  const int64_t i = int64_t(blockIdx.x) * 256 + tid;
  int cls = -1;
  int64_t rows = 0;
  if (i < count) {
    const kl_batched_entry &e = table[i];
    const int64_t m = e.m, n = e.n;
    if (m > 0 && n > 0) {
      const int64_t order = m > n ? m : n;
      const bool fits = m < kLargeMaxSide && n < kLargeMaxSide;
      const bool big = order >= L.from && fits;
      if (L.wg && fits && ((L.wg >= 2 && big) || rows_aligned16(e, L.elem))) {
        cls = 2;
        rows = min64((m + LargeCfg::BM - 1) / LargeCfg::BM, L.large_rows);
      } else if (big) {
        cls = 0;
        rows = min64((m + LargeCfg::BM - 1) / LargeCfg::BM, L.large_rows);
      } else {
        cls = 1;
        rows = min64((m + L.small_bm - 1) / L.small_bm, L.small_rows);
      }
    }
  }
  unsigned local = 0;
  if (cls >= 0) local = atomicAdd(&s_count[cls], unsigned(rows));
  __syncthreads();
  if (tid < 3 && s_count[tid]) s_base[tid] = atomicAdd(&L.counts[tid], (unsigned long long)s_count[tid]);
  __syncthreads();
  if (cls >= 0) {
    int64_t *list = cls == 0 ? L.large : cls == 1 ? L.small : L.wgl;
    const int64_t base = int64_t(s_base[cls]) + local;
    for (int64_t r = 0; r < rows; ++r) list[base + r] = (i << kRowBits) | r;
  }
}

// A persistent kernel of `threads` threads and `smem` bytes of dynamic shared memory over
// `blocks` blocks' worth of work: as many blocks as that, at most as many as the GPU holds at once
// (the occupancy, asked once a kernel, device and size: resident_blocks).  Every batched kernel's
// launch: the large-tile kernels of this file and batched_cuda_wgmma.cuh (launch_persistent), the
// tiny- and thin-product kernels.  The emulator runs at most 3 blocks, so that blocks share the
// work as on the GPU.
template <class Kernel, class A>
cudaError_t launch_resident(Kernel kernel, const A &args, int threads, int smem, int64_t blocks,
                            cudaStream_t stream) {
  if (blocks <= 0) return cudaSuccess;
#ifdef KL_BATCHED_EMULATE
  (void)stream;
  emu_launch(unsigned(blocks > 3 ? 3 : blocks), threads, smem, [kernel, args] { kernel(args); });
  return cudaSuccess;
#else
  // (whatever the size: a kernel's static shared memory counts against the 48 KB a launch gets
  // without the opt-in -- the large-tile and wgmma kernels have some; opt_in_smem remembers)
  cudaError_t e = opt_in_smem(reinterpret_cast<const void *>(kernel), smem);
  if (e != cudaSuccess) return e;
  int cap = 0;
  e = resident_blocks(reinterpret_cast<const void *>(kernel), threads, smem, &cap);
  if (e != cudaSuccess) return e;
  kernel<<<unsigned(blocks < cap ? blocks : cap), threads, smem, stream>>>(args);
  return cudaGetLastError();
#endif
}

template <auto KERNEL, int THREADS, int SMEM>
cudaError_t launch_persistent(const Args &args, int64_t items, cudaStream_t stream) {
  return launch_resident(KERNEL, args, THREADS, SMEM, items, stream);
}

template <class T, class Src, bool RAW>
cudaError_t launch_large(const Args &args, int64_t items, cudaStream_t stream) {
  using K = LargeCfgT<T, RAW, Src::TILE>;
  return launch_persistent<large_kernel<T, Src, RAW>, K::THREADS, K::SMEM>(args, items, stream);
}

}  // namespace batched
}  // namespace kl

#endif
