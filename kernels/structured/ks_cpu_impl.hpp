// The CPU Kronecker-sparse kernel, written once and compiled once per instruction set
// (ks_cpu_avx512.cpp, ks_cpu_avx2.cpp, ks_cpu_generic.cpp define KL_ISA and KL_VEC_BYTES before
// including it).
//
// Every (i, j) block of the pattern is a small GEMM over the batch.  Both layouts are computed in
// place on the strided columns of X and Y (no permuted copies), GotoBLAS-style: a register tile of
// accumulators, a micro-panel of one operand kept in L1 across the tiles of the other, which
// streams from L2.
//
// batch_last  (X is (a·c·d, B)): lanes run along the batch.  Y_ij[k, n] += K[i,k,l,j] · X_ij[l, n]
//   is a broadcast of one K value times a vector of X: the kron kernel's broadcast-FMA step.
// batch_first (X is (B, a·c·d)): lanes run along the contiguous output axis of slab i, the
//   flattened (k, j) of length b·d.  Output vector v covers positions p = v·LW + t (k = p / d,
//   j = p mod d), so its X operand is the row X[n, i, l, (v·LW + t) mod d]: that depends on v only
//   through e = v mod D with D = d / gcd(d, LW).  All vectors of one residue e share it, so a tile
//   takes NV vectors of one residue and one operand vector per (row, l):
//     d == 1:       a broadcast of X[n, i·c + l]                        (a plain GEMM)
//     d < LW:       X[n, i, l, 0:LW] permuted in registers (lane t takes (e·LW + t) mod d)
//     otherwise:    X[n, i, l, s:s+LW], s = e·LW mod d, wrapped round by a two-source shuffle
//                   where the run crosses d; packed with the other rows of the tile into an L1
//                   buffer first (power-of-two row strides would otherwise share cache sets)
//   K is packed once per call in tiles of NV vectors of one residue, each tile's (l, t) panel
//   contiguous, zero past b·d.
#include <algorithm>
#include <atomic>
#include <array>
#include <cstdint>
#include <cstring>
#include <new>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu_threads.hpp"
#include "ks.h"
#include "scratch.hpp"

#ifndef KL_VEC_BYTES
#error "define KL_VEC_BYTES (the ISA's vector width) before including ks_cpu_impl.hpp"
#endif

namespace kl {
namespace KL_ISA {
namespace ks {

template <class T>
struct Vec {
  static constexpr int lanes = KL_VEC_BYTES / int(sizeof(T));
  typedef T type __attribute__((vector_size(KL_VEC_BYTES)));
  // for loads and stores at any element-aligned address
  typedef T unaligned __attribute__((vector_size(KL_VEC_BYTES), aligned(sizeof(T)), may_alias));
};

// Register tile: rows (broadcast or expanded operand) x vectors.  Accumulators + one vector per
// column + one row operand must fit the register file (32 zmm, 16 ymm/xmm).
constexpr int kRows = 6;
constexpr int kVecs = KL_VEC_BYTES >= 64 ? 4 : 2;
// Bytes of the K micro-panel kept in L1 while broadcast rows stream past it, and of a packed
// row tile plus one K micro-panel, which share L1 when the rows are vectors.
constexpr int64_t kL1Panel = 24 * 1024;
constexpr int64_t kL1Tiles = 32 * 1024;

template <class T>
static inline typename Vec<T>::type loadu(const T *p) {
  return *reinterpret_cast<const typename Vec<T>::unaligned *>(p);
}
template <class T>
static inline void storeu(T *p, typename Vec<T>::type v) {
  *reinterpret_cast<typename Vec<T>::unaligned *>(p) = v;
}

// Builds the row operand of residue e from the row X[n, i, l, 0:d] (the vector whose lane t is
// src[(e·LW + t) mod d]) with one load and one shuffle, or two loads and a two-source shuffle.
template <class T>
struct Expander {
  typedef typename Vec<T>::type V;
  typedef typename std::conditional<sizeof(T) == 4, int32_t, int64_t>::type I;
  typedef I IV __attribute__((vector_size(KL_VEC_BYTES)));
  static constexpr int LW = Vec<T>::lanes;

  int64_t d, s;   // row length; rotation (e·LW) mod d
  IV idx;
  bool plain;     // a straight load of src + s (d >= LW and no wrap inside the vector)

  Expander(int64_t d_, int64_t e) : d(d_), s((e * LW) % d_), plain(d_ >= LW && s + LW <= d_) {
    I ix[LW];
    for (int t = 0; t < LW; ++t)
      ix[t] = d < LW ? I((s + t) % d) : I(t < d - s ? t : LW + t - (d - s));
    std::memcpy(&idx, ix, sizeof(idx));
  }

  // src: X[n, i, l, 0]; `safe`: whole vectors may be loaded from src and src + s (else the
  // elements past the row come from a bounded copy: the row may end the array).
  V operator()(const T *src, bool safe) const {
    if (plain) return loadu(src + s);
    if (!safe) {
      T tmp[2 * LW] = {};
      std::memcpy(tmp, src, size_t(std::min<int64_t>(d, 2 * LW)) * sizeof(T));
      T out[LW];
      for (int t = 0; t < LW; ++t) out[t] = d < LW ? tmp[(s + t) % d] : src[(s + t) % d];
      V v;
      std::memcpy(&v, out, sizeof(v));
      return v;
    }
    if (d < LW) return __builtin_shuffle(loadu(src), idx);
    return __builtin_shuffle(loadu(src + s), loadu(src), idx);
  }
};

// --------------------------------------------------------------------------------------------
// batch_first micro-kernel: acc[r][t] = sum_l E(r, l) * Kp[l][t]; Y[r][t] = (Y +) acc.

template <class T>
struct BfTile {
  int64_t kl;              // l iterations
  const T *e;              // row operand of row 0, l = 0
  int64_t e_rs, e_ls;      // its row and l strides (elements)
  const T *kp;             // packed K vectors of l = 0 (64-byte aligned)
  int64_t kp_ls;           // elements between l rows of kp
  T *y;                    // output vector (row 0, t = 0)
  int64_t y_rs, y_vs;      // row and vector strides of y
  int partial_t;           // tile vector that holds the last, partial output vector, or -1
  int partial_lanes;
  bool accumulate;         // add to Y (later l blocks) instead of storing
  typename Expander<T>::IV idx;  // Mode::shuffle: lane t of the operand is e[idx[t]]
};

// How a tile gets its row operand for (row r, column l): a broadcast of one X element (d == 1),
// a vector load from a packed buffer, or a load of X[n, i, l, 0:LW] shuffled in registers
// (d < LW: the repeated d-run of residue e).
enum class Mode { bcast, load, shuffle };

template <class T, Mode M, int NR, int NV>
static void micro_bf(const BfTile<T> &a) {
  typedef typename Vec<T>::type V;
  constexpr int LW = Vec<T>::lanes;
  V acc[NR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < NV; ++t) acc[r][t] = V{};
  const T *__restrict e = a.e;
  const T *__restrict kp = a.kp;
  for (int64_t l = 0; l < a.kl; ++l) {
    V kv[NV];
#pragma GCC unroll 8
    for (int t = 0; t < NV; ++t) kv[t] = *reinterpret_cast<const V *>(kp + t * LW);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      if (M == Mode::bcast) {
        const T s = e[r * a.e_rs];
#pragma GCC unroll 8
        for (int t = 0; t < NV; ++t) acc[r][t] += kv[t] * s;
      } else {
        V ev = loadu(e + r * a.e_rs);
        if (M == Mode::shuffle) ev = __builtin_shuffle(ev, a.idx);
#pragma GCC unroll 8
        for (int t = 0; t < NV; ++t) acc[r][t] += kv[t] * ev;
      }
    }
    e += a.e_ls;
    kp += a.kp_ls;
  }
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < NV; ++t) {
      T *dst = a.y + r * a.y_rs + t * a.y_vs;
      if (t == a.partial_t) {
        T tmp[LW];
        std::memcpy(tmp, &acc[r][t], sizeof(tmp));
        for (int q = 0; q < a.partial_lanes; ++q) dst[q] = a.accumulate ? dst[q] + tmp[q] : tmp[q];
      } else {
        storeu(dst, a.accumulate ? loadu(dst) + acc[r][t] : acc[r][t]);
      }
    }
  }
}

template <class T>
using BfFn = void (*)(const BfTile<T> &);

template <class T, Mode M, size_t... I>
static constexpr std::array<BfFn<T>, sizeof...(I)> bf_table(std::index_sequence<I...>) {
  return {&micro_bf<T, M, int(I) / kVecs + 1, int(I) % kVecs + 1>...};
}

// --------------------------------------------------------------------------------------------
// batch_last micro-kernel: acc[r][t] = sum_l Kp[l][r] * X[l][t]  (r: output row k, t: batch vec)

template <class T>
struct BlTile {
  int64_t kl;
  const T *kp;      // packed K: kp[l * kp_ls + r]
  int64_t kp_ls;
  const T *x;       // X row of l = 0 at the tile's first batch column
  int64_t x_ls;     // elements between the X rows of consecutive l
  T *y;             // Y row of the tile's first k at the tile's first batch column
  int64_t y_ks;     // elements between the Y rows of consecutive k
  bool accumulate;
};

template <class T, int KR, int NV>
static void micro_bl(const BlTile<T> &a) {
  typedef typename Vec<T>::type V;
  constexpr int LW = Vec<T>::lanes;
  V acc[KR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < KR; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < NV; ++t) acc[r][t] = V{};
  const T *__restrict x = a.x;
  const T *__restrict kp = a.kp;
  for (int64_t l = 0; l < a.kl; ++l) {
    V xv[NV];
#pragma GCC unroll 8
    for (int t = 0; t < NV; ++t) xv[t] = loadu(x + t * LW);
#pragma GCC unroll 8
    for (int r = 0; r < KR; ++r) {
      const T s = kp[r];
#pragma GCC unroll 8
      for (int t = 0; t < NV; ++t) acc[r][t] += xv[t] * s;
    }
    x += a.x_ls;
    kp += a.kp_ls;
  }
#pragma GCC unroll 8
  for (int r = 0; r < KR; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < NV; ++t) {
      T *dst = a.y + r * a.y_ks + t * LW;
      storeu(dst, a.accumulate ? loadu(dst) + acc[r][t] : acc[r][t]);
    }
}

template <class T>
using BlFn = void (*)(const BlTile<T> &);

template <class T, size_t... I>
static constexpr std::array<BlFn<T>, sizeof...(I)> bl_table(std::index_sequence<I...>) {
  return {&micro_bl<T, int(I) / kVecs + 1, int(I) % kVecs + 1>...};
}

// --------------------------------------------------------------------------------------------

static inline int64_t cdiv(int64_t x, int64_t y) { return (x + y - 1) / y; }

// Splits n into pieces of at most `most`, all about the same size.
static inline int64_t balanced(int64_t n, int64_t most) { return n <= 0 ? 1 : cdiv(n, cdiv(n, most)); }

template <class T>
static inline T kval(const kl_ks_problem *p, const T *v, int64_t i, int64_t k, int64_t l, int64_t j) {
  return v[i * p->vs[0] + k * p->vs[1] + l * p->vs[2] + j * p->vs[3]];
}

template <class T>
static int ks_batch_first(const kl_ks_problem *p, int num_threads) {
  typedef typename Vec<T>::type V;
  constexpr int LW = Vec<T>::lanes;
  const int64_t a = p->a, b = p->b, c = p->c, d = p->d, B = p->batch;
  const int64_t P = b * d, nvec = cdiv(P, LW);
  const int64_t D = d / std::gcd(d, int64_t(LW));
  const int64_t nkp = cdiv(nvec, D);  // vectors per residue (the last ones zero-padded)
  const bool bcast = d == 1;
  const T *vals = static_cast<const T *>(p->values);
  const T *X = static_cast<const T *>(p->x);
  T *Y = static_cast<T *>(p->y);
  const int threads = cpu_threads(num_threads, 2.0 * double(B) * double(a) * double(P) * double(c));

  // Blocking.  Broadcast rows (d == 1): the K micro-panel (kc x kVecs vectors) stays in L1 while
  // the row tiles of a chunk stream past it; the rows are read in place (few enough that
  // power-of-two row strides do not exhaust a cache set).  Vector rows: each row tile's operands
  // are packed into an L1 buffer just before use and stay there across all k tiles, while the
  // K micro-panels stream from L2; kc makes the tile and one K panel fit L1 together.
  const int64_t kc = bcast
      ? balanced(c, std::max<int64_t>(32, kL1Panel / (kVecs * KL_VEC_BYTES)))
      : balanced(c, std::max<int64_t>(16, kL1Tiles / ((kRows + kVecs) * KL_VEC_BYTES)));
  int64_t nc = bcast ? 32 * kRows : 64 * kRows;
  // Enough independent tasks for the threads: row chunks first, then ranges of k'.
  const int64_t want_chunks = cdiv(4 * threads, a);
  nc = std::clamp<int64_t>(cdiv(cdiv(B, want_chunks), kRows) * kRows, kRows, nc);
  const int64_t nchunks = cdiv(B, nc);
  const int64_t ksplit = std::min(cdiv(nkp, kVecs), std::max<int64_t>(1, cdiv(2 * threads, a * nchunks)));
  const int64_t kper = cdiv(cdiv(nkp, ksplit), kVecs) * kVecs;
  const int64_t ntasks = a * nchunks * ksplit;
  // loads of whole vectors from X are safe up to here (the last row may end the allocation)
  const T *x_end = X + (B - 1) * p->x_ld + a * c * d;

  // K packed per (i, e) in tiles of kVecs vectors, each tile's (l, t) micro-panel contiguous:
  // Kp[((i·D + e)·ntile + tile)·c + l][t] (zero vectors past b·d)
  const int64_t ntile = cdiv(nkp, kVecs);
  const size_t kp_elems = size_t(a * D * ntile * c * kVecs) * LW;
  note_alloc(kp_elems * sizeof(T), "the packed factor");
  ScratchLease lease(kp_elems * sizeof(T));
  std::atomic<bool> no_memory{false};
  T *Kp = static_cast<T *>(lease.data());
  std::vector<Expander<T>> expand;
  for (int64_t e = 0; e < D && !bcast; ++e) expand.emplace_back(d, e);

  static constexpr auto table_b =
      bf_table<T, Mode::bcast>(std::make_index_sequence<kRows * kVecs>{});
  static constexpr auto table_v =
      bf_table<T, Mode::load>(std::make_index_sequence<kRows * kVecs>{});
  static constexpr auto table_s =
      bf_table<T, Mode::shuffle>(std::make_index_sequence<kRows * kVecs>{});
  const bool in_regs = d < LW;  // shuffle X in registers instead of packing (no stores)

#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(static)
    for (int64_t row = 0; row < a * D * ntile * c; ++row) {  // pack K
      const int64_t l = row % c, r = row / c, tile = r % ntile, ie = r / ntile;
      const int64_t e = ie % D, i = ie / D;
      T *dst = Kp + size_t(row) * kVecs * LW;
      for (int64_t q = 0; q < kVecs; ++q) {
        const int64_t v = (tile * kVecs + q) * D + e;
        for (int t = 0; t < LW; ++t) {
          const int64_t pos = v * LW + t;
          dst[q * LW + t] = pos < P ? kval(p, vals, i, pos / d, l, pos % d) : T(0);
        }
      }
    }

    V *ebuf = nullptr;
    try {  // an exception must not leave the OpenMP region: flag it, skip the tasks
      if (!bcast) ebuf = static_cast<V *>(::operator new(sizeof(V) * size_t(kRows * kc), std::align_val_t(64)));
    } catch (const std::bad_alloc &) {
      no_memory.store(true, std::memory_order_relaxed);
    }
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < ntasks; ++task) {
      if (no_memory.load(std::memory_order_relaxed)) continue;
      const int64_t ks = task % ksplit, rest = task / ksplit;
      const int64_t chunk = rest % nchunks, i = rest / nchunks;
      const int64_t n0 = chunk * nc, n1 = std::min(B, n0 + nc);
      const int64_t kA = ks * kper, kB = std::min(nkp, kA + kper);
      for (int64_t l0 = 0; l0 < c; l0 += kc) {
        const int64_t kl = std::min(kc, c - l0);
        for (int64_t e = 0; e < D; ++e) {
          const int64_t cnt = std::min(kB, cdiv(nvec - e, D));  // k' with v = k'D + e < nvec
          if (kA >= cnt) continue;
          auto run = [&](int64_t k0, int64_t r0, Mode mode) {
            const int nv = int(std::min<int64_t>(kVecs, cnt - k0));
            const int nr = int(std::min<int64_t>(kRows, n1 - r0));
            BfTile<T> tile;
            tile.kl = kl;
            tile.kp = Kp + ((size_t(i * D + e) * ntile + k0 / kVecs) * c + l0) * kVecs * LW;
            tile.kp_ls = kVecs * LW;
            tile.y_rs = p->y_ld;
            tile.y_vs = D * LW;
            tile.partial_t = -1;
            tile.partial_lanes = LW;
            if (P % LW != 0 && (nvec - 1 - e) % D == 0) {
              const int64_t tl = (nvec - 1 - e) / D - k0;
              if (tl >= 0 && tl < nv) {
                tile.partial_t = int(tl);
                tile.partial_lanes = int(P % LW);
              }
            }
            tile.accumulate = l0 > 0;
            tile.y = Y + r0 * p->y_ld + i * P + (k0 * D + e) * LW;
            const int fn = (nr - 1) * kVecs + nv - 1;
            if (mode == Mode::bcast) {
              tile.e = X + r0 * p->x_ld + i * c + l0;
              tile.e_rs = p->x_ld;
              tile.e_ls = 1;
              table_b[fn](tile);
            } else if (mode == Mode::shuffle) {
              tile.e = X + r0 * p->x_ld + (i * c + l0) * d;
              tile.e_rs = p->x_ld;
              tile.e_ls = d;
              tile.idx = expand[size_t(e)].idx;
              table_s[fn](tile);
            } else {
              tile.e = reinterpret_cast<const T *>(ebuf);
              tile.e_rs = LW;
              tile.e_ls = kRows * LW;
              table_v[fn](tile);
            }
          };
          if (bcast) {
            for (int64_t k0 = kA; k0 < cnt; k0 += kVecs)
              for (int64_t r0 = n0; r0 < n1; r0 += kRows) run(k0, r0, Mode::bcast);
            continue;
          }
          const Expander<T> &ex = expand[size_t(e)];
          for (int64_t r0 = n0; r0 < n1; r0 += kRows) {
            const int64_t last = std::min(n1, r0 + kRows) - 1;  // whole-vector loads stay in X?
            if (in_regs && X + last * p->x_ld + (i * c + l0 + kl - 1) * d + LW <= x_end) {
              for (int64_t k0 = kA; k0 < cnt; k0 += kVecs) run(k0, r0, Mode::shuffle);
              continue;
            }
            // ebuf[l·R + r] = operand of row r0 + r, column l0 + l, residue e
            for (int64_t r = 0; r < std::min<int64_t>(kRows, n1 - r0); ++r) {
              const T *src = X + (r0 + r) * p->x_ld + (i * c + l0) * d;
              const bool safe = src + (kl - 1) * d + 2 * LW <= x_end;
              V *dst = ebuf + r;
              if (safe && ex.plain) {
                for (int64_t l = 0; l < kl; ++l) dst[l * kRows] = loadu(src + l * d + ex.s);
              } else {
                for (int64_t l = 0; l < kl; ++l) dst[l * kRows] = ex(src + l * d, safe);
              }
            }
            for (int64_t k0 = kA; k0 < cnt; k0 += kVecs) run(k0, r0, Mode::load);
          }
        }
      }
    }
    ::operator delete(ebuf, std::align_val_t(64));
  }
  if (no_memory.load()) {
    note_alloc(sizeof(V) * size_t(kRows * kc), "each thread's operand buffer");
    throw std::bad_alloc();
  }
  return KL_OK;
}

template <class T>
static int ks_batch_last(const kl_ks_problem *p, int num_threads) {
  typedef typename Vec<T>::type V;
  constexpr int LW = Vec<T>::lanes;
  const int64_t a = p->a, b = p->b, c = p->c, d = p->d, B = p->batch;
  const T *vals = static_cast<const T *>(p->values);
  const T *X = static_cast<const T *>(p->x);
  T *Y = static_cast<T *>(p->y);
  const int threads =
      cpu_threads(num_threads, 2.0 * double(B) * double(a) * double(b) * double(c) * double(d));

  // The X micro-panel (kc rows x kVecs batch vectors) is packed contiguously and stays in L1
  // across the k tiles; K (kc x b of one block) streams from L2.
  const int64_t kc = balanced(c, std::max<int64_t>(32, kL1Panel / (kVecs * KL_VEC_BYTES)));
  const int64_t nfull = B / LW, rem = B % LW;  // full batch vectors, lanes of the partial one
  const int64_t nvecs = nfull + (rem ? 1 : 0);
  int64_t wv = std::max<int64_t>(kVecs, 512 / LW);  // batch vectors per task
  const int64_t blocks = a * d;
  if (blocks * cdiv(nvecs, wv) < 4 * threads)
    wv = std::max<int64_t>(1, cdiv(nvecs, cdiv(4 * threads, blocks)));
  const int64_t nchunks = cdiv(nvecs, wv);
  const int64_t ntasks = blocks * nchunks;

  // K packed per (i, j) in tiles of kRows k, each tile's (l, r) micro-panel contiguous
  const int64_t ntile = cdiv(b, kRows);
  const size_t kp_elems = size_t(a * d * ntile * c * kRows);
  note_alloc(kp_elems * sizeof(T), "the packed factor");
  ScratchLease lease(kp_elems * sizeof(T));
  std::atomic<bool> no_memory{false};
  T *Kp = static_cast<T *>(lease.data());

  static constexpr auto table = bl_table<T>(std::make_index_sequence<kRows * kVecs>{});

#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(static)
    for (int64_t row = 0; row < a * d * ntile * c; ++row) {  // pack K: [i][j][tile][l][r]
      const int64_t l = row % c, r = row / c, tile = r % ntile, ij = r / ntile;
      const int64_t j = ij % d, i = ij / d;
      T *dst = Kp + size_t(row) * kRows;
      for (int64_t q = 0; q < kRows; ++q) {
        const int64_t k = tile * kRows + q;
        dst[q] = k < b ? kval(p, vals, i, k, l, j) : T(0);
      }
    }

    V *xbuf = nullptr;
    try {  // an exception must not leave the OpenMP region: flag it, skip the tasks
      xbuf = static_cast<V *>(::operator new(sizeof(V) * size_t(kc * kVecs), std::align_val_t(64)));
    } catch (const std::bad_alloc &) {
      no_memory.store(true, std::memory_order_relaxed);
    }
    V ybuf[kRows * kVecs];  // output of the tile that holds the partial batch vector
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < ntasks; ++task) {
      if (no_memory.load(std::memory_order_relaxed)) continue;
      const int64_t chunk = task % nchunks, ij = task / nchunks;
      const int64_t j = ij % d, i = ij / d;
      const int64_t v0 = chunk * wv, v1 = std::min(nvecs, v0 + wv);
      const T *xij = X + (i * c * d + j) * p->x_ld;  // row (i, l=0, j)
      T *yij = Y + (i * b * d + j) * p->y_ld;        // row (i, k=0, j)
      const T *kij = Kp + size_t(ij) * size_t(ntile * c * kRows);
      const int64_t xs = d * p->x_ld, ys = d * p->y_ld;
      for (int64_t l0 = 0; l0 < c; l0 += kc) {
        const int64_t kl = std::min(kc, c - l0);
        for (int64_t vt = v0; vt < v1; vt += kVecs) {
          const int nv = int(std::min<int64_t>(kVecs, v1 - vt));
          const bool partial = rem && vt + nv > nfull;  // the tile's last vector is partial
          const int64_t lanes = (nv - 1) * LW + (partial ? rem : LW);
          const T *src = xij + l0 * xs + vt * LW;
          for (int64_t l = 0; l < kl; ++l, src += xs) {
            T *dst = reinterpret_cast<T *>(xbuf + l * kVecs);
            if (!partial) {
              for (int t = 0; t < nv; ++t) storeu(dst + t * LW, loadu(src + t * LW));
            } else {
              std::memset(dst, 0, sizeof(V) * size_t(nv));
              std::memcpy(dst, src, size_t(lanes) * sizeof(T));
            }
          }
          BlTile<T> tile;
          tile.kl = kl;
          tile.kp_ls = kRows;
          tile.x = reinterpret_cast<const T *>(xbuf);
          tile.x_ls = kVecs * LW;
          tile.accumulate = l0 > 0;
          for (int64_t k0 = 0; k0 < b; k0 += kRows) {
            const int kr = int(std::min<int64_t>(kRows, b - k0));
            T *dst = yij + k0 * ys + vt * LW;
            tile.kp = kij + (k0 / kRows * c + l0) * kRows;
            if (!partial) {
              tile.y = dst;
              tile.y_ks = ys;
              table[(kr - 1) * kVecs + nv - 1](tile);
              continue;
            }
            T *yb = reinterpret_cast<T *>(ybuf);
            for (int r = 0; r < kr; ++r) {
              std::memset(yb + r * kVecs * LW, 0, sizeof(V) * size_t(nv));
              if (tile.accumulate) std::memcpy(yb + r * kVecs * LW, dst + r * ys, size_t(lanes) * sizeof(T));
            }
            tile.y = yb;
            tile.y_ks = kVecs * LW;
            table[(kr - 1) * kVecs + nv - 1](tile);
            for (int r = 0; r < kr; ++r) std::memcpy(dst + r * ys, yb + r * kVecs * LW, size_t(lanes) * sizeof(T));
          }
        }
      }
    }
    ::operator delete(xbuf, std::align_val_t(64));
  }
  if (no_memory.load()) {
    note_alloc(sizeof(V) * size_t(kc * kVecs), "each thread's operand buffer");
    throw std::bad_alloc();
  }
  return KL_OK;
}

}  // namespace ks

int ks_matmul_entry(const kl_ks_problem *p, int dtype, int num_threads) {
  try {
    const bool first = p->layout == KL_KS_BATCH_FIRST;
    if (dtype == KL_KS_FLOAT32)
      return first ? ks::ks_batch_first<float>(p, num_threads) : ks::ks_batch_last<float>(p, num_threads);
    if (dtype == KL_KS_FLOAT64)
      return first ? ks::ks_batch_first<double>(p, num_threads) : ks::ks_batch_last<double>(p, num_threads);
    return fail(KL_ERR_INVALID, "ks_matmul_cpu: unsupported dtype (float32 and float64 only)");
  } catch (const std::bad_alloc &) {
    return fail_alloc("structured_matmul");
  }
}

}  // namespace KL_ISA
}  // namespace kl
