// The warpgroup-MMA kernel of the half types (wgmma m64n128k16, float32 accumulators; sm_90a):
// 128 x 128 tiles of one product, two warpgroups of 64 rows each, both operands read by the
// tensor cores straight from shared memory.
//
// Why: the 128 x 128 mma.sync kernel (batched_cuda_large.cuh) is issue-bound, not memory-bound
// (ncu, float16 256^3: one HMMA in twenty instructions, DRAM at 38 % of peak; 0.50 of copy
// bandwidth where torch.bmm reaches 0.96).  Each of its warps reads its fragments by ldmatrix
// and issues 16 MMAs a k16 step; here a warpgroup issues one wgmma a k16 step and no fragment
// loads, so the instruction stream that paced that kernel is gone.
//
// Layout: A's k-panel (128 rows x 64 halves) K-major with the 128-byte swizzle; B's (64 rows of
// k x 128 columns) MN-major (wgmma's transposed operand), two 64-column halves each 64 rows of
// 128 bytes with the same swizzle: the row-major operands land by 16-byte cp.async without any
// transposition.  Six 32 KB stages (one block an SM) filled by a producer warpgroup (wg_kernel
// says how the ring's mbarriers work); the work sources (uniform stacks, variable batches) are
// the 128 x 128 kernel's; rows at any offset (packed odd orders) load synchronously, realigned,
// or in the staged form (WgStaged) as aligned chunks shifted in shared memory; strided operands
// element by element.  The epilogue is the 128 x 128 kernel's, on a warp's
// 16 x 128 accumulators as four 16 x 32 parts.
//
// Where it runs (wgmma_level, the launcher): uniform half-type stacks of 16-byte aligned rows
// with orders from 96 and k >= 64, and the products of variable batches whose rows are all
// aligned.  H100, 2026-11-27, loops of calls, batch 10^4, µs (fraction of copy bandwidth), this
// kernel / the mma.sync kernel / torch.bmm: float16 128^3 367 (0.90) / 495 / 342; 256^3 1,704
// (0.78) / 2,661 / 1,376; variable, orders 8..256 a multiple of 8, 1,027 / 1,414 (padding to 256
// and torch.bmm: 1,369); below it stays on the mma.sync kernel: order 64 169 / 112, low rank
// k = 16 and 32 (benchmarks/batched_wgmma_ab.py, benchmarks/data/batched_wgmma_ab_h100_
// 2026-11-27_s14d.*; the low-rank rows _s13g).  What the versions before taught
// (same data, runs s13a-f): a block barrier a panel instead of the producer warpgroup, 0.46 at
// order 256; one producer warp, 0.34 (2,048 cp.async a stage from 32 lanes); skipping the copies
// past the valid k, a test a chunk, 0.47 against 0.64 without; every wgmma under a branch
// (warpgroup rows past the tile's, k-steps past the valid k) serialised by ptxas (C7520), 0.64
// against 0.70 without.
#ifndef KRONLINALG_BATCHED_CUDA_WGMMA_CUH
#define KRONLINALG_BATCHED_CUDA_WGMMA_CUH

#include "batched_cuda_large.cuh"
#ifndef KL_BATCHED_EMULATE  // (batched_cuda_emulate.cpp supplies the wgmma wrappers on the CPU)
#include "cuda_wgmma.cuh"
#endif

namespace kl {
namespace batched {

struct WgCfg {
  static constexpr int BM = 128, BN = 128, BK = 64, STAGES = 6;
  // two consumer warpgroups and a producer warpgroup (one producer warp issued a 32 KB stage's
  // 2,048 cp.async in ~3.2 µs, slower than the DRAM's share of an SM: float16 order 256 ran at
  // 0.34 of copy bandwidth, H100, 2026-11-27, session 13)
  static constexpr int CONSUMERS = 256, PRODUCERS = 128, THREADS = CONSUMERS + PRODUCERS;
  static constexpr int A_ELEMS = BM * BK, B_ELEMS = BK * BN;
  static constexpr int B_HALF = BK * 64;               // elements between B's 64-column halves
  static constexpr int STAGE = (A_ELEMS + B_ELEMS) * 2;  // bytes (32 KB)
  static constexpr int SMEM = STAGES * STAGE + 1024;   // + the rounding to a swizzle atom
};

// The 128 x 128 kernel's epilogue on one 16 x 32 part of a warp's accumulators.
struct WgEpilogue {
  using Acc = float;
  static constexpr int MI = 1, NI = 4;
};

// Element offsets in a stage: A (row r, k c) and B (k row k, column n), the 16-byte chunks of a
// 128-byte row XORed with the row's index mod 8 (the swizzle the descriptors name).
__device__ __forceinline__ int wg_a_off(int r, int c) {
  return r * 64 + ((((c >> 3) ^ r) & 7) << 3) + (c & 7);
}
__device__ __forceinline__ int wg_b_off(int k, int n) {
  return (n >> 6) * WgCfg::B_HALF + k * 64 + ((((n >> 3) ^ k) & 7) << 3) + (n & 7);
}

// A producer thread's chunks of a panel: chunk j is row r0 + j RSTEP at column c (the same c,
// and the same swizzle term -- RSTEP is a multiple of the swizzle's 8 rows -- for every j), so
// its shared-memory offset is dst0 + j DSTEP and its source src0 + j RSTEP rs.  Written out
// because the compiler did not reduce it: the producer warps' instruction stream, ~770
// instructions a panel a warp (48 a 16-byte copy), set the kernel's pace (ncu, float16 variable
// batches, H100, 2026-11-27: the consumers waited on full stages).
template <bool B_SIDE>
struct WgChunks {
  static constexpr int CPR = B_SIDE ? 16 : 8;              // chunks a row: B 128 columns, A 64 k
  static constexpr int N = 1024 / WgCfg::PRODUCERS;        // chunks a thread
  static constexpr int RSTEP = WgCfg::PRODUCERS / CPR;     // rows between them: 16 (A), 8 (B)
  static constexpr int DSTEP = RSTEP * 64;                 // elements between them in the stage
  static_assert(RSTEP % 8 == 0, "the swizzle term must not change between a thread's chunks");
  int r0, c;
  __device__ __forceinline__ explicit WgChunks(int ptid) : r0(ptid / CPR), c((ptid % CPR) * 8) {}
  __device__ __forceinline__ int dst0() const { return B_SIDE ? wg_b_off(r0, c) : wg_a_off(r0, c); }
};

// 16-byte aligned rows (panel16) by the producer warpgroup: 1024 chunks a panel, 8 a thread,
// zero past rv rows and cv columns (a chunk crossing cv reads only its valid bytes), the whole
// panel also past the valid k (skipping those chunks, a test a chunk, ran float16 order 256 at
// 2,806 µs where whole panels took 2,092: H100, 2026-11-27).  DEAD (variable batches): a
// partial tile's rows of A past rv and columns of B past cv are left unwritten -- they make only
// rows and columns of D that are not stored, whatever an earlier panel left there, NaN included
// (the k tail is zero-filled on both sides: a product past the valid k must be 0, not 0 times a
// stale value).  Both tests are a thread's, not a chunk's: B's column is the thread's, A's rows
// end the loop.
template <class T, bool B_SIDE, bool DEAD>
__device__ __forceinline__ void wg_load16(T *dst, const T *src, int64_t rs, int rv, int cv,
                                          int ptid) {
  using W = WgChunks<B_SIDE>;
  const W w(ptid);
  if (DEAD && B_SIDE && w.c >= cv) return;
  const int left = (cv - w.c) * 2;
  const int cbytes = left < 0 ? 0 : left > 16 ? 16 : left;
  T *d = dst + w.dst0();
  const T *s = src + w.r0 * rs + w.c;
  const int64_t sstep = W::RSTEP * rs;
#pragma unroll
  for (int j = 0; j < W::N; ++j) {
    const int r = w.r0 + j * W::RSTEP;
    if (DEAD && !B_SIDE && r >= rv) break;
    const int bytes = r < rv ? cbytes : 0;
    kl::cu::cp_async_16_part(d + j * W::DSTEP, bytes ? s : src, bytes);
    s += sstep;
  }
}

// Contiguous rows at any element offset (packed odd orders): each 16-byte piece of a row from
// the one or two aligned chunks that hold it (synchronous loads: a thread's eight in two rounds
// of four, each round's loads issued before its first piece is shifted -- all eight at once
// spilled), then one 16-byte shared store each; DEAD as wg_load16's.  Variable float16 batches
// of orders 8..256 (H100, 2026-11-27): 5,175 µs with one piece loaded and stored at a time, where
// element loads took 18,934 and the mma.sync kernel, which stages such rows by cp.async, 3,632.
template <class T, bool B_SIDE, bool DEAD>
__device__ __forceinline__ void wg_load_rows(T *dst, const T *src, int64_t rs, int rv, int cv,
                                             int ptid) {
  using W = WgChunks<B_SIDE>;
  constexpr int ROUND = 4;
  const W w(ptid);
  if (DEAD && B_SIDE && w.c >= cv) return;
  const bool col_ok = w.c < cv;
  T *d = dst + w.dst0();
  const T *s = src + w.r0 * rs;
  const int64_t sstep = W::RSTEP * rs;
#pragma unroll
  for (int j0 = 0; j0 < W::N; j0 += ROUND) {
    RealignChunk got[ROUND];
#pragma unroll
    for (int j = 0; j < ROUND; ++j) {
      const int r = w.r0 + (j0 + j) * W::RSTEP;
      if (r < rv && col_ok) got[j] = fetch_realign(s + (j0 + j) * sstep, w.c, cv);
    }
#pragma unroll
    for (int j = 0; j < ROUND; ++j) {
      const int r = w.r0 + (j0 + j) * W::RSTEP;
      if (DEAD && !B_SIDE && r >= rv) break;
      *reinterpret_cast<uint4 *>(d + (j0 + j) * W::DSTEP) =
          r < rv && col_ok ? realign(got[j]) : make_uint4(0, 0, 0, 0);
    }
  }
}

// Any strides: element by element (synchronous loads, plain shared stores).
template <class T, bool B_SIDE>
__device__ __forceinline__ void wg_load_any(T *dst, const T *src, int64_t rs, int64_t cs, int rv,
                                            int cv, int ptid) {
  constexpr int COLS = B_SIDE ? 128 : 64;
  for (int i = ptid; i < 8192; i += WgCfg::PRODUCERS) {
    const int r = i / COLS, c = i % COLS;
    const T v = (r < rv && c < cv) ? src[r * rs + c * cs] : T(0.0f);
    dst[B_SIDE ? wg_b_off(r, c) : wg_a_off(r, c)] = v;
  }
}

// The staged producer (wg_kernel's STAGED form, for variable products whose rows sit at 2-byte
// offsets): a panel's rows land as the aligned 16-byte chunks that hold them, by cp.async, in one
// of two raw areas, and are shifted into the swizzled stage one panel later -- where the direct
// producer loads them synchronously (wg_load_rows: 3,558 µs for variable float16 batches of
// every order, against the mma.sync kernel's 2,334, H100, 2026-11-27; the staged form 2,025).
// The copies go chunk-major (wg_stage_chunks); each producer thread then shifts whole rows (A
// row ptid; half ptid % 2 of B row ptid / 2, its nine chunks overlapping the other half's by
// one), after the producers' barrier.  Four ring stages and the two raw areas fill the 227 KB
// (a second panel of copies in flight, three raw areas and three stages, ran 2,596).
struct WgStaged {
  static constexpr int STAGES = 4;
  static constexpr int ROW = 9 * 16;  // bytes: 64 halves at any 2-byte offset lie in 9 chunks
  static constexpr int RAW_A = 128 * ROW, RAW = RAW_A + 64 * 2 * ROW;
  static constexpr int SMEM = STAGES * WgCfg::STAGE + 2 * RAW + 1024;
};

// One staged row piece of 64 halves (A's row, or half a row of B) into the stage: piece p (8
// halves) from raw chunks p and p + 1, shifted; `bytes` valid from the row's start (zeros past
// it), pieces from `live_pieces` on left unwritten (dead: past the tile's columns).  zero: the
// row is past the valid k (all zeros).
template <class T, bool B_SIDE>
__device__ __forceinline__ void wg_shift_row(T *stage, const unsigned char *raw, int row, int col0,
                                             int shift, int bytes, int live_pieces, bool zero) {
  uint4 ch[9];
#pragma unroll
  for (int j = 0; j < 9; ++j)
    ch[j] = !zero && 16 * j < shift + bytes ? *reinterpret_cast<const uint4 *>(raw + 16 * j)
                                            : make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    if (p >= live_pieces) break;
    const int nb = bytes - 16 * p;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (!zero && nb > 0) v = realign(RealignChunk{ch[p], ch[p + 1], shift, nb < 16 ? nb : 16});
    const int c = col0 + 8 * p;
    *reinterpret_cast<uint4 *>(stage + (B_SIDE ? wg_b_off(row, c) : wg_a_off(row, c))) = v;
  }
}

// Issues the cp.async of a panel's 128 staged row pieces (A's rows, or B's half rows), chunk-
// major: thread t takes chunks t, t + 128, ... of the 128 x 9, so a warp's copy covers a few
// rows' contiguous runs (a row a thread put 32 rows in each warp instruction: the staged form
// ran variable float16 batches of every order only 8 % faster than the mma.sync kernel, H100,
// 2026-11-27).  piece(r, at, bytes): piece r's first element's address and its valid bytes (0:
// none); only the chunks that hold valid bytes are read (none leaves the operand's granules).
template <class Piece>
__device__ __forceinline__ void wg_stage_chunks(unsigned char *raw, int ptid, Piece piece) {
#pragma unroll
  for (int u = 0; u < 9; ++u) {
    const int i = ptid + u * WgCfg::PRODUCERS, r = i / 9, j = i - 9 * r;
    uintptr_t at;
    int bytes;
    piece(r, at, bytes);
    const int shift = int(at & 15);
    if (bytes > 0 && 16 * j < shift + bytes)
      kl::cu::cp_async_16(raw + r * WgStaged::ROW + 16 * j,
                          reinterpret_cast<const void *>(at - uintptr_t(shift) + 16 * j), true);
  }
}

// Columns 32 CG .. 32 CG + 31 of a warp's 16 x 128 accumulators (compile-time indices: the
// accumulators stay in registers).
template <class T, int CG>
__device__ __forceinline__ void wg_store(const float (&acc)[64], const Tile<T> &tl, int wr0,
                                         int lane, float alpha, float beta) {
  if (CG * 32 >= tl.nv) return;
  float part[1][4][4];
#pragma unroll
  for (int ni = 0; ni < 4; ++ni)
#pragma unroll
    for (int v = 0; v < 4; ++v) part[0][ni][v] = acc[(CG * 4 + ni) * 4 + v];
  large_epilogue<T, WgEpilogue>(part, tl, wr0, CG * 32, lane, alpha, beta);
}

// The producer's state: the tile whose panels it requests (all of it: the stage of its last
// panel carries C and D to the epilogue, decoded once), its tag, the next panel's k.
template <class T>
using WgState = ProdState<T, Tile<T>>;

// The producer warpgroup's own barrier (named barrier 1: its 128 threads only).
__device__ __forceinline__ void wg_producer_sync() {
#ifdef KL_BATCHED_EMULATE
  emu_named_barrier(1, WgCfg::PRODUCERS);
#else
  asm volatile("bar.sync 1, %0;\n" ::"n"(WgCfg::PRODUCERS) : "memory");
#endif
}

// Warp-specialised: warps 8-11 are the producer (they walk the tiles and their k-panels, fill
// the six-stage ring by cp.async and label each stage), warps 0-7 the consumers (two
// warpgroups, rows 0-63 and 64-127 of every tile).  No block barrier after the start: a stage's
// `full` mbarrier completes when the 128 producer threads have each seen their copies land
// (cp.async arrivals) and arrived once more after the stage's labels and any plain stores (256
// arrivals); its `empty` mbarrier when the 256 consumer threads are done with it.  The producer
// runs up to six panels ahead, through the consumers' epilogues.
template <class T, class Src, bool STAGED = false>
__global__ void __launch_bounds__(WgCfg::THREADS, 1) wg_kernel(const Args args) {
  using K = WgCfg;
  constexpr int S = STAGED ? WgStaged::STAGES : K::STAGES;
  constexpr bool BF16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr bool DEAD = std::is_same_v<Src, LargeVariableSrc<T>>;  // (wg_load16)
  KL_DYNAMIC_SMEM(smem_raw);
  // the swizzle is a function of the shared-memory address: stages start on 1024-byte boundaries
  unsigned char *smem = smem_raw + ((1024 - (kl::cu::smem_u32(smem_raw) & 1023)) & 1023);
  __shared__ uint64_t full[S], empty[S];
  __shared__ long long meta_tag[S];
  __shared__ int meta_flags[S];
  __shared__ Tile<T> meta_tile[S];
  __shared__ WgState<T> prod;  // the producer's state (its thread 0 writes, all read)
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  if (tid == 0) {
    for (int i = 0; i < S; ++i) {
      kl::cu::mbar_init(&full[i], (STAGED ? 1 : 2) * K::PRODUCERS);
      kl::cu::mbar_init(&empty[i], K::CONSUMERS);
    }
  }
  __syncthreads();
  // (every producer thread) panel q's state, once its stage is free
  auto panel_state = [&](int q, int slot) {
    if (q >= S) kl::cu::mbar_wait_parity(&empty[slot], uint32_t((q / S - 1) & 1));
    wg_producer_sync();  // the state thread 0 wrote last step is seen ...
    const WgState<T> P = prod;
    wg_producer_sync();  // ... and read by all before it advances it
    return P;
  };
  // (the producer's thread 0) a stage's labels -- its tile's tag, first / last flags and, for
  // the tile's last panel, the tile for the epilogue -- and the state moved to the next panel
  auto label_and_advance = [&](const WgState<T> &P, int slot, int flags, Src &src) {
    meta_tag[slot] = P.tag;
    meta_flags[slot] = flags;
    if (flags & 2) meta_tile[slot] = P.lt;
    WgState<T> nx = P;
    nx.k0 = P.k0 + K::BK;
    if (nx.k0 >= P.lt.k) {
      nx.k0 = 0;
      nx.live = src.next(P.tag, nx.lt, nx.tag);
    }
    prod = nx;
  };

  if (STAGED && tid >= K::CONSUMERS) {  // ---- the staged producer (WgStaged)
    const int ptid = tid - K::CONSUMERS;
    Src src(args);
    if (ptid == 0) prod = first_state<T, Tile<T>>(src);
    unsigned char *raw0 = smem + S * K::STAGE;
    const int bk = ptid >> 1, bh = ptid & 1;  // this thread's B row and half (A: row ptid)
    // the previous panel's stage (-1: none) and what this thread shifts into it: A's valid bytes
    // (-1: dead row or loaded directly), B's valid columns in the half (-1: loaded directly)
    int prev = -1, a_shift = 0, a_bytes = -1, b_shift = 0, b_cols = -1, b_bytes = 0;
    bool b_zero = true;
#pragma unroll 1
    for (int q = 0;; ++q) {
      const int slot = q % S;
      const WgState<T> P = panel_state(q, slot);
      unsigned char *raw = raw0 + (q & 1) * WgStaged::RAW;
      int na_shift = 0, na_bytes = -1, nb_shift = 0, nb_cols = -1, nb_bytes = 0;
      bool nb_zero = true;
      if (P.live) {
        T *As = reinterpret_cast<T *>(smem + slot * K::STAGE);
        T *Bs = As + K::A_ELEMS;
        const Tile<T> &lt = P.lt;
        const int64_t lk0 = P.k0;
        const int kv = int(lt.k - lk0 < K::BK ? lt.k - lk0 : K::BK);
        const T *a = lt.A + lk0 * lt.a_cs, *b = lt.B + lk0 * lt.b_rs;
        const int flags = (lk0 == 0 ? 1 : 0) | (lk0 + K::BK >= lt.k ? 2 : 0);
        if (lt.a_cs != 1) {
          wg_load_any<T, false>(As, a, lt.a_rs, lt.a_cs, lt.mv, kv, ptid);
        } else {
          wg_stage_chunks(raw, ptid, [&](int r, uintptr_t &at, int &bytes) {
            at = reinterpret_cast<uintptr_t>(a + r * lt.a_rs);
            bytes = r < lt.mv ? 2 * kv : 0;  // (rows past the tile's: dead)
          });
          if (ptid < lt.mv) {
            na_bytes = 2 * kv;
            na_shift = int(reinterpret_cast<uintptr_t>(a + ptid * lt.a_rs) & 15);
          }
        }
        if (lt.b_cs != 1) {
          wg_load_any<T, true>(Bs, b, lt.b_rs, lt.b_cs, kv, lt.nv, ptid);
        } else {
          auto half_cols = [&](int h) {
            const int cols = lt.nv - 64 * h;
            return cols < 0 ? 0 : cols > 64 ? 64 : cols;
          };
          wg_stage_chunks(raw + WgStaged::RAW_A, ptid, [&](int r, uintptr_t &at, int &bytes) {
            const int k = r >> 1, h = r & 1;  // (rows past the valid k: zeros, none loaded)
            at = reinterpret_cast<uintptr_t>(b + k * lt.b_rs + 64 * h);
            bytes = k < kv ? 2 * half_cols(h) : 0;
          });
          nb_cols = half_cols(bh);
          nb_zero = bk >= kv;
          nb_bytes = 2 * nb_cols;
          nb_shift = int(reinterpret_cast<uintptr_t>(b + bk * lt.b_rs + 64 * bh) & 15);
        }
        if (ptid == 0) label_and_advance(P, slot, flags, src);
      }
      kl::cu::cp_async_commit();
      if (prev >= 0) {  // the previous panel: its chunks landed (every thread's), shifted
        kl::cu::cp_async_wait<1>();
        wg_producer_sync();
        const unsigned char *praw = raw0 + ((q - 1) & 1) * WgStaged::RAW;
        T *As = reinterpret_cast<T *>(smem + prev * K::STAGE);
        if (a_bytes >= 0)
          wg_shift_row<T, false>(As, praw + ptid * WgStaged::ROW, ptid, 0, a_shift, a_bytes, 8,
                                 false);
        if (b_cols >= 0)
          wg_shift_row<T, true>(As + K::A_ELEMS, praw + WgStaged::RAW_A + ptid * WgStaged::ROW,
                                bk, 64 * bh, b_shift, b_bytes, (b_cols + 7) / 8, b_zero);
        kl::cu::mbar_arrive(&full[prev]);  // its shifted rows, plain stores and labels
      }
      if (!P.live) {
        if (ptid == 0) meta_tag[slot] = -1;  // the consumers' stop
        kl::cu::mbar_arrive(&full[slot]);
        break;
      }
      prev = slot, a_shift = na_shift, a_bytes = na_bytes, b_shift = nb_shift, b_cols = nb_cols;
      b_bytes = nb_bytes, b_zero = nb_zero;
    }
    kl::cu::cp_async_wait<0>();
    return;
  }

  if (!STAGED && tid >= K::CONSUMERS) {  // ---- the producer warpgroup
    const int ptid = tid - K::CONSUMERS;
    Src src(args);
    if (ptid == 0) prod = first_state<T, Tile<T>>(src);
#pragma unroll 1
    for (int q = 0;; ++q) {
      const int slot = q % S;
      const WgState<T> P = panel_state(q, slot);
      T *As = reinterpret_cast<T *>(smem + slot * K::STAGE);
      T *Bs = As + K::A_ELEMS;
      if (P.live) {
        const Tile<T> &lt = P.lt;
        const int64_t lk0 = P.k0;
        const int kv = int(lt.k - lk0 < K::BK ? lt.k - lk0 : K::BK);
        const T *a = lt.A + lk0 * lt.a_cs, *b = lt.B + lk0 * lt.b_rs;
        const int flags = (lk0 == 0 ? 1 : 0) | (lk0 + K::BK >= lt.k ? 2 : 0);
        if (panel16(a, lt.a_rs, lt.a_cs)) wg_load16<T, false, DEAD>(As, a, lt.a_rs, lt.mv, kv, ptid);
        else if (lt.a_cs == 1) wg_load_rows<T, false, DEAD>(As, a, lt.a_rs, lt.mv, kv, ptid);
        else wg_load_any<T, false>(As, a, lt.a_rs, lt.a_cs, lt.mv, kv, ptid);
        if (panel16(b, lt.b_rs, lt.b_cs)) wg_load16<T, true, DEAD>(Bs, b, lt.b_rs, kv, lt.nv, ptid);
        else if (lt.b_cs == 1) wg_load_rows<T, true, DEAD>(Bs, b, lt.b_rs, kv, lt.nv, ptid);
        else wg_load_any<T, true>(Bs, b, lt.b_rs, lt.b_cs, kv, lt.nv, ptid);
        if (ptid == 0) label_and_advance(P, slot, flags, src);
      } else if (ptid == 0) {
        meta_tag[slot] = -1;  // the consumers' stop
      }
      kl::cu::cp_async_mbar_arrive(&full[slot]);  // when this thread's copies have landed
      kl::cu::mbar_arrive(&full[slot]);           // and its labels / plain stores
      if (!P.live) break;
    }
    kl::cu::cp_async_wait<0>();
    return;
  }

  // ---- the consumers: warpgroup wg computes rows 64 wg .. 64 wg + 63 of every tile
  const int wg = warp >> 2;
  const int wr0 = wg * 64 + (warp & 3) * 16;  // the warp's first accumulator row
  const float alpha = float(args.p.alpha), beta = float(args.p.beta);
  float acc[64];
#pragma unroll
  for (int e = 0; e < 64; ++e) acc[e] = 0.0f;
#pragma unroll 1
  for (int q = 0;; ++q) {
    const int slot = q % S;
    kl::cu::mbar_wait_parity(&full[slot], uint32_t((q / S) & 1));
    __syncwarp();  // (wgmma is warp-aligned: the lanes leave the wait together)
    kl::cu::fence_proxy_async_shared();  // the stage's bytes, seen here, to the tensor cores
    const long long tag = meta_tag[slot];
    if (tag < 0) break;
    const int flags = meta_flags[slot];
    {  // (every warpgroup, also on rows past the tile's: a wgmma under a branch is serialised
       // by ptxas, C7520; the rows past mv were filled with zeros or hold values only rows of
       // D past mv see)
      const T *As = reinterpret_cast<const T *>(smem + slot * K::STAGE);
      const T *Bs = As + K::A_ELEMS;
      const uint64_t da = kl::cu::wgmma_desc_swizzled<128>(As + wg * 64 * K::BK);
      const uint64_t db = kl::cu::wgmma_desc_mn128(Bs, K::B_HALF * 2);
      kl::cu::wgmma_fence_operands(acc);
      kl::cu::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < K::BK / 16; ++kk)
        kl::cu::wgmma_ss<128, BF16, true>(acc, da + 2 * kk, db + 128 * kk);
      kl::cu::wgmma_commit();
      // (waiting for the previous panel's group instead, wait_group 1, and releasing its stage
      // one panel later: float16 128^3 370 -> 351 µs but 256^3 2,029 -> 2,298 and variable
      // batches slower: the ring a stage shorter, H100, 2026-11-27)
      kl::cu::wgmma_wait<0>();
      kl::cu::wgmma_fence_operands(acc);
    }
    if (flags & 2) {  // the tile's last panel: store it, start the next one from zero
      const Tile<T> &tl = meta_tile[slot];
      if (wr0 < tl.mv) {
        wg_store<T, 0>(acc, tl, wr0, lane, alpha, beta);
        wg_store<T, 1>(acc, tl, wr0, lane, alpha, beta);
        wg_store<T, 2>(acc, tl, wr0, lane, alpha, beta);
        wg_store<T, 3>(acc, tl, wr0, lane, alpha, beta);
      }
#pragma unroll
      for (int e = 0; e < 64; ++e) acc[e] = 0.0f;
    }
    kl::cu::mbar_arrive(&empty[slot]);  // the stage (and its labels) may be refilled
  }
}

// Whether this build and device run the kernel, and the caller wants it
// (KRONLINALG_BATCHED_WGMMA: 0 never; 1, the default, uniform stacks of 16-byte aligned rows on
// 128 x 128 tiles with k >= 64, and the products of variable batches whose rows are all 16-byte
// aligned, any order; 2 every product of order >= 96 of variable batches too (rows at other
// offsets load synchronously, realigned: 1.4x the mma.sync kernel's time on packed odd orders);
// 3 as 2, and any uniform stack of aligned rows, the 64 x 64 tiles' orders and low rank too).
// The emulator runs it only when the knob is set.
inline int wgmma_level() {
#ifdef KL_BATCHED_EMULATE
  return kl::knob_int("KRONLINALG_BATCHED_WGMMA", 0);
#elif defined(KL_WGMMA_BUILT)
  const int level = kl::knob_int("KRONLINALG_BATCHED_WGMMA", 1);
  if (level <= 0) return 0;
  DeviceInfo d;
  return query_device(&d) == cudaSuccess && d.cc_major == 9 && d.cc_minor == 0 ? level : 0;
#else
  return 0;
#endif
}

// SplitPlan::wg for variable batches of the half types: 1 the aligned products, 2 every product
// of order >= from as well (wgmma_level above).
inline int variable_wg_mode() {
  const int level = wgmma_level();
  return level <= 0 ? 0 : level == 1 ? 1 : 2;
}

template <class T, class Src, bool STAGED = false>
cudaError_t launch_wg(const Args &args, int64_t items, cudaStream_t stream) {
  return launch_persistent<wg_kernel<T, Src, STAGED>, WgCfg::THREADS,
                           STAGED ? WgStaged::SMEM : WgCfg::SMEM>(args, items, stream);
}

// Whether variable batches' products of order >= 96 whose rows sit at other offsets take the
// staged form of the kernel (KRONLINALG_BATCHED_WG_STAGED, on by default with the kernel), not
// the mma.sync kernel: float16 / bfloat16 orders 8..256, 2,456 / 2,680 µs against 2,784 / 3,001
// (H100, 2026-11-27, run s14f).
inline bool wg_staged() { return kl::knob_int("KRONLINALG_BATCHED_WG_STAGED", 1) != 0; }

}  // namespace batched
}  // namespace kl

#endif
