// The CPU sliced-multiply kernel, written once and compiled once per instruction set
// (kron_cpu_avx512.cpp, kron_cpu_avx2.cpp, kron_cpu_generic.cpp define KL_ISA before including it).
//
// Layout of the work.  Factors are grouped into passes; a pass applies a run of consecutive
// factors (last first) to every "block instance": one row m of the current matrix and one prefix j
// of that row, whose Bin = prod(P) contiguous elements are transformed independently (FastKron's
// fusion, done in cache instead of shared memory).  LW instances are processed together, one per
// SIMD lane, so every step is a plain broadcast-FMA over lanes whatever P and Q are: no shuffles,
// no masks, no dependence on P being a multiple of the vector width.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "kron.h"
#include "cpu_threads.hpp"
#include "kron_cpu_plan.hpp"
#include "scratch.hpp"

#if KL_VEC_BYTES == 64 && defined(__AVX512F__)
#define KL_AVX512_PATHS 1
#include "transpose_avx512.hpp"
#endif

namespace kl {
namespace KL_ISA {

// A lane group is two native SIMD registers (KL_VEC_BYTES each, set per ISA build): enough
// independent FMA chains to hide latency while every accumulator stays in a register.
template <class T>
struct Lanes {
  static constexpr int width = 2 * KL_VEC_BYTES / int(sizeof(T));
  typedef T native __attribute__((vector_size(KL_VEC_BYTES)));
  struct vec {
    native lo, hi;
  };
};

template <class T>
using vec_t = typename Lanes<T>::vec;

// Columns of a factor handled together: each input vector is loaded once per qb outputs.  Eight
// (16 accumulators) only where there are 32 vector registers and enough columns to fill them.
inline int columns_per_block(int64_t Q) {
  if (KL_VEC_BYTES == 64 && (Q % 8 == 0 || Q >= 32)) return 8;
  if (Q % 4 == 0 || Q > 4) return 4;
  return int(Q);  // 1, 2 or 3: exact, no padded columns
}

// A factor packed for step(): blocks of qb columns, each block p-major with its qb values
// contiguous (zero-padded past Q), so the inner loop walks memory with unit stride.
template <class T>
static std::vector<T> pack_factor(const T *f, int64_t P, int64_t Q, int64_t rs, int64_t cs) {
  const int qb = columns_per_block(Q);
  const int64_t nb = (Q + qb - 1) / qb;
  note_alloc(size_t(nb * P * qb) * sizeof(T), "a packed factor");
  std::vector<T> out(size_t(nb * P * qb), T(0));
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t i = 0; i < qb && b * qb + i < Q; ++i)
        out[size_t((b * P + p) * qb + i)] = f[p * rs + (b * qb + i) * cs];
  return out;
}

// The next tile's input lines, fetched a few at a time between the steps' output blocks: spread
// over the tile's computation they overlap it, where all at once (the gather) they would wait on
// each other for the few misses a core can have in flight.
struct NextTile {
  const char *base = nullptr;
  int64_t outer_stride = 0, n_outer = 0, n_inner = 0;  // lines: n_outer runs of n_inner
  int64_t o = 0, i = 0;
  int per_block = 0;  // lines per output block of step()
  void fetch() {
    for (int k = 0; k < per_block && o < n_outer; ++k) {
      __builtin_prefetch(base + o * outer_stride + i * 64, 0, 3);
      if (++i == n_inner) i = 0, ++o;
    }
  }
};

// One step inside a block: out[q*R + r] = sum_p in[r*P + p] * F[p, q] (F packed by pack_factor).
// Writing q-major is what puts each output at its final place after the last step.
template <class T, int QB, bool Fetch>
static void step_qb(const vec_t<T> *__restrict in, vec_t<T> *__restrict out, int64_t R,
                    int64_t P, int64_t Q, const T *__restrict F, NextTile &next) {
  typedef typename Lanes<T>::native N;
  for (int64_t r = 0; r < R; ++r) {
    const vec_t<T> *a = in + r * P;
    for (int64_t q = 0; q < Q; q += QB) {
      N c[QB], d[QB];
      for (int i = 0; i < QB; ++i) c[i] = d[i] = N{};
      const T *f = F + q * P;  // block q / QB starts at (q / QB) * P * QB
      for (int64_t p = 0; p < P; ++p, f += QB) {
        const N lo = a[p].lo, hi = a[p].hi;
        for (int i = 0; i < QB; ++i) {
          c[i] += lo * f[i];
          d[i] += hi * f[i];
        }
      }
      vec_t<T> *o = out + q * R + r;
      const int64_t n = Q - q;  // constant trip count keeps c, d in registers
      for (int i = 0; i < QB; ++i)
        if (i < n) o[i * R] = {c[i], d[i]};
      if constexpr (Fetch) next.fetch();
    }
  }
}

template <class T>
static void step(const vec_t<T> *__restrict in, vec_t<T> *__restrict out, int64_t R, int64_t P,
                 int64_t Q, const T *__restrict F, NextTile &next) {
  if (next.per_block > 0) {
    switch (columns_per_block(Q)) {
      case 8: return step_qb<T, 8, true>(in, out, R, P, Q, F, next);
      case 4: return step_qb<T, 4, true>(in, out, R, P, Q, F, next);
      case 3: return step_qb<T, 3, true>(in, out, R, P, Q, F, next);
      case 2: return step_qb<T, 2, true>(in, out, R, P, Q, F, next);
      default: return step_qb<T, 1, true>(in, out, R, P, Q, F, next);
    }
  }
  switch (columns_per_block(Q)) {
    case 8: return step_qb<T, 8, false>(in, out, R, P, Q, F, next);
    case 4: return step_qb<T, 4, false>(in, out, R, P, Q, F, next);
    case 3: return step_qb<T, 3, false>(in, out, R, P, Q, F, next);
    case 2: return step_qb<T, 2, false>(in, out, R, P, Q, F, next);
    default: return step_qb<T, 1, false>(in, out, R, P, Q, F, next);
  }
}

// The three axes of block instances: rows m1, rows m2 and prefixes j, each with its input and
// output stride.  One axis runs across the SIMD lanes, the other two are walked per tile.
struct Axis {
  int64_t n, in, out;
};

struct TileMap {
  Axis lane, a, b;  // lanes, outer, middle
  int64_t chunks;   // tiles along the lane axis

  // Lanes go along the axis whose outputs are contiguous (a vector store), unless it fills less
  // than three quarters of them (a partial group is stored with masks in the AVX-512 build;
  // 1024 x 3^7 float32 puts 27 prefixes on 32 lanes: one pass fewer, 6.2 -> 2.4 ms on one core);
  // then along the longest axis.
  TileMap(Axis m1, Axis m2, Axis j, int lw) {
    Axis ax[3] = {m1, m2, j};
    int pick = -1;
    for (int i = 2; i >= 0; --i)
      if (ax[i].out == 1 && 4 * ax[i].n >= 3 * lw) pick = i;
    if (pick < 0) {
      pick = 2;
      for (int i = 1; i >= 0; --i)
        if (ax[i].n > ax[pick].n) pick = i;
    }
    lane = ax[pick];
    int k = 0;
    Axis rest[2];
    for (int i = 0; i < 3; ++i)
      if (i != pick) rest[k++] = ax[i];
    a = rest[0];
    b = rest[1];
    chunks = (lane.n + lw - 1) / lw;
  }
  int64_t tiles() const { return a.n * b.n * chunks; }
};

// Per-thread tile buffers that persist across calls: a fresh 100 KB+ allocation per call is an
// mmap, and its page faults cost more than a small product's whole computation.
struct TileBuffers {
  void *ptr[2] = {nullptr, nullptr};
  size_t bytes[2] = {0, 0};
  ~TileBuffers() {
    for (void *p : ptr) ::operator delete(p, std::align_val_t(64));
  }
};

template <class V>
static V *tile_buffer(int which, size_t count) {
  thread_local TileBuffers tb;
  const size_t need = count * sizeof(V);
  if (tb.bytes[which] < need) {
    ::operator delete(tb.ptr[which], std::align_val_t(64));
    tb.ptr[which] = nullptr;
    tb.bytes[which] = 0;
    tb.ptr[which] = ::operator new(need, std::align_val_t(64));
    tb.bytes[which] = need;
  }
  return static_cast<V *>(tb.ptr[which]);
}

template <class T>
struct PassArgs {
  int64_t m1, m2, S, Bin, Bout, maxblock;
  int nsteps;
  const int64_t *P, *Q;  // per step, in application order
  const T *const *F;     // packed row-major factors, per step
  const T *in;
  int64_t irs1, irs2, ies;
  T *out;
  int64_t ors1, ors2, oes;
  T alpha, beta;
  bool stream_out;  // output far larger than the caches: non-temporal stores
};

template <class T>
static void gather(const PassArgs<T> &a, const T *src, int64_t ls, int nv, vec_t<T> *buf) {
  constexpr int LW = Lanes<T>::width;
  T *b = reinterpret_cast<T *>(buf);
  if (nv == LW && ls == 1) {  // lanes contiguous (left products): whole-vector loads
    for (int64_t e = 0; e < a.Bin; ++e) std::memcpy(b + e * LW, src + e * a.ies, sizeof(vec_t<T>));
    return;
  }
#ifdef KL_AVX512_PATHS
  if (a.ies == 1) {
    // LW/2 lanes x LW/2 elements at a time, transposed in registers: lanes past nv read as zeros
    // (idle lanes compute on zeros), a last run of fewer elements through masked loads.
    constexpr int H = LW / 2;
    for (int64_t e0 = 0; e0 < a.Bin; e0 += H) {
      const int ne = int(std::min<int64_t>(H, a.Bin - e0));
      const unsigned mask = (1u << ne) - 1;
      for (int h = 0; h < 2; ++h) {
        const int rows = std::max(0, std::min(H, nv - h * H));
        if constexpr (sizeof(T) == 4) {
          __m512 r[16];
          for (int i = 0; i < 16; ++i)
            r[i] = i >= rows  ? _mm512_setzero_ps()
                   : ne == H ? _mm512_loadu_ps(src + (h * 16 + i) * ls + e0)
                             : _mm512_maskz_loadu_ps(__mmask16(mask), src + (h * 16 + i) * ls + e0);
          transpose16(r);
          for (int i = 0; i < ne; ++i) _mm512_store_ps(b + (e0 + i) * LW + h * 16, r[i]);
        } else {
          __m512d r[8];
          for (int i = 0; i < 8; ++i)
            r[i] = i >= rows  ? _mm512_setzero_pd()
                   : ne == H ? _mm512_loadu_pd(src + (h * 8 + i) * ls + e0)
                             : _mm512_maskz_loadu_pd(__mmask8(mask), src + (h * 8 + i) * ls + e0);
          transpose8(r);
          for (int i = 0; i < ne; ++i) _mm512_store_pd(b + (e0 + i) * LW + h * 8, r[i]);
        }
      }
    }
    return;
  }
#endif
  if (a.ies == 1) {
    // Each lane reads a contiguous block (right products): transpose in chunks of one cache
    // line per lane, so the stores stay within a few lines of L1 instead of Bin of them.
    constexpr int64_t C = 64 / sizeof(T);
    for (int64_t e0 = 0; e0 < a.Bin; e0 += C) {
      const int64_t e1 = std::min<int64_t>(a.Bin, e0 + C);
      for (int l = 0; l < nv; ++l) {
        const T *row = src + l * ls;
        for (int64_t e = e0; e < e1; ++e) b[e * LW + l] = row[e];
      }
    }
  } else {
    for (int l = 0; l < nv; ++l) {
      const T *row = src + l * ls;
      for (int64_t e = 0; e < a.Bin; ++e) b[e * LW + l] = row[e * a.ies];
    }
  }
  if (nv < LW)  // idle lanes compute on zeros and are never stored
    for (int64_t e = 0; e < a.Bin; ++e)
      for (int l = nv; l < LW; ++l) b[e * LW + l] = T(0);
}

template <class T>
static void scatter(const PassArgs<T> &a, T *dst0, int64_t ls, int nv, const vec_t<T> *buf) {
  constexpr int LW = Lanes<T>::width;
  const T *b = reinterpret_cast<const T *>(buf);
  const int64_t ks = a.S * a.oes;  // output element k of an instance sits k*S*oes further on
  if (nv == LW && ls == 1) {
    T *dst = dst0;
    typedef typename Lanes<T>::native N;
    constexpr int H = LW / 2;
    const T alpha = a.alpha, beta = a.beta;
    if (beta == T(0)) {
#ifdef KL_AVX512_PATHS
      // Big outputs bypass the cache: every line is written whole, so reading it first (the
      // write-allocate a normal store does) would only add a third to the memory traffic.
      if (a.stream_out && (reinterpret_cast<uintptr_t>(dst) % 64) == 0 && (ks * sizeof(T)) % 64 == 0) {
        for (int64_t k = 0; k < a.Bout; ++k) {
          const N lo = buf[k].lo * alpha, hi = buf[k].hi * alpha;
          if constexpr (sizeof(T) == 4) {
            _mm512_stream_ps(dst + k * ks, (__m512)lo);
            _mm512_stream_ps(dst + k * ks + H, (__m512)hi);
          } else {
            _mm512_stream_pd(dst + k * ks, (__m512d)lo);
            _mm512_stream_pd(dst + k * ks + H, (__m512d)hi);
          }
        }
        return;
      }
#endif
      for (int64_t k = 0; k < a.Bout; ++k) {
        const N lo = buf[k].lo * alpha, hi = buf[k].hi * alpha;
        std::memcpy(dst + k * ks, &lo, sizeof(N));
        std::memcpy(dst + k * ks + H, &hi, sizeof(N));
      }
    } else {
      for (int64_t k = 0; k < a.Bout; ++k) {
        N lo, hi;
        std::memcpy(&lo, dst + k * ks, sizeof(N));
        std::memcpy(&hi, dst + k * ks + H, sizeof(N));
        lo = buf[k].lo * alpha + lo * beta;
        hi = buf[k].hi * alpha + hi * beta;
        std::memcpy(dst + k * ks, &lo, sizeof(N));
        std::memcpy(dst + k * ks + H, &hi, sizeof(N));
      }
    }
    return;
  }
#ifdef KL_AVX512_PATHS
  if (ls == 1) {  // a partial group of contiguous lanes: masked vector stores
    constexpr int H = LW / 2;
    const unsigned mlo = (1u << std::min(nv, H)) - 1, mhi = (1u << std::max(0, nv - H)) - 1;
    for (int64_t k = 0; k < a.Bout; ++k) {
      T *d = dst0 + k * ks;
      if constexpr (sizeof(T) == 4) {
        __m512 lo = _mm512_mul_ps((__m512)buf[k].lo, _mm512_set1_ps(a.alpha));
        __m512 hi = _mm512_mul_ps((__m512)buf[k].hi, _mm512_set1_ps(a.alpha));
        if (a.beta != T(0)) {
          lo = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(__mmask16(mlo), d), _mm512_set1_ps(a.beta), lo);
          hi = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(__mmask16(mhi), d + H), _mm512_set1_ps(a.beta), hi);
        }
        _mm512_mask_storeu_ps(d, __mmask16(mlo), lo);
        _mm512_mask_storeu_ps(d + H, __mmask16(mhi), hi);
      } else {
        __m512d lo = _mm512_mul_pd((__m512d)buf[k].lo, _mm512_set1_pd(a.alpha));
        __m512d hi = _mm512_mul_pd((__m512d)buf[k].hi, _mm512_set1_pd(a.alpha));
        if (a.beta != T(0)) {
          lo = _mm512_fmadd_pd(_mm512_maskz_loadu_pd(__mmask8(mlo), d), _mm512_set1_pd(a.beta), lo);
          hi = _mm512_fmadd_pd(_mm512_maskz_loadu_pd(__mmask8(mhi), d + H), _mm512_set1_pd(a.beta), hi);
        }
        _mm512_mask_storeu_pd(d, __mmask8(mlo), lo);
        _mm512_mask_storeu_pd(d + H, __mmask8(mhi), hi);
      }
    }
    return;
  }
  if (ks == 1) {
    // Lanes on rows, each lane's outputs contiguous: transposed back in registers, LW/2 lanes x
    // LW/2 elements at a time, a last run of fewer elements through masked stores.
    constexpr int H = LW / 2;
    const T alpha = a.alpha, beta = a.beta;
    for (int64_t k0 = 0; k0 < a.Bout; k0 += H) {
      const int ne = int(std::min<int64_t>(H, a.Bout - k0));
      const unsigned mask = (1u << ne) - 1;
      for (int h = 0; h < 2 && h * H < nv; ++h) {
        const int rows = std::min(H, nv - h * H);
        if constexpr (sizeof(T) == 4) {
          __m512 r[16];
          for (int i = 0; i < 16; ++i)
            r[i] = i < ne ? _mm512_load_ps(b + (k0 + i) * LW + h * 16) : _mm512_setzero_ps();
          transpose16(r);
          const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
          for (int i = 0; i < rows; ++i) {
            float *d = dst0 + (h * 16 + i) * ls + k0;
            __m512 v = _mm512_mul_ps(r[i], va);
            if (ne == H) {
              if (beta != T(0)) v = _mm512_fmadd_ps(_mm512_loadu_ps(d), vb, v);
              _mm512_storeu_ps(d, v);
              continue;
            }
            if (beta != T(0)) v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(__mmask16(mask), d), vb, v);
            _mm512_mask_storeu_ps(d, __mmask16(mask), v);
          }
        } else {
          __m512d r[8];
          for (int i = 0; i < 8; ++i)
            r[i] = i < ne ? _mm512_load_pd(b + (k0 + i) * LW + h * 8) : _mm512_setzero_pd();
          transpose8(r);
          const __m512d va = _mm512_set1_pd(alpha), vb = _mm512_set1_pd(beta);
          for (int i = 0; i < rows; ++i) {
            double *d = dst0 + (h * 8 + i) * ls + k0;
            __m512d v = _mm512_mul_pd(r[i], va);
            if (ne == H) {
              if (beta != T(0)) v = _mm512_fmadd_pd(_mm512_loadu_pd(d), vb, v);
              _mm512_storeu_pd(d, v);
              continue;
            }
            if (beta != T(0)) v = _mm512_fmadd_pd(_mm512_maskz_loadu_pd(__mmask8(mask), d), vb, v);
            _mm512_mask_storeu_pd(d, __mmask8(mask), v);
          }
        }
      }
    }
    return;
  }
#endif
  for (int l = 0; l < nv; ++l) {
    T *dst = dst0 + l * ls;
    if (a.beta != T(0)) {
      for (int64_t k = 0; k < a.Bout; ++k)
        dst[k * ks] = a.alpha * b[k * LW + l] + a.beta * dst[k * ks];
    } else {
      for (int64_t k = 0; k < a.Bout; ++k) dst[k * ks] = a.alpha * b[k * LW + l];
    }
  }
}

// Pass inputs beyond this many bytes have the next tile's input fetched ahead (NextTile).
constexpr double kPrefetchBytes = 4.0 * 1024 * 1024;

template <class T>
static void run_pass(const PassArgs<T> &a, int num_threads, double product_flops) {
  constexpr int LW = Lanes<T>::width;
  typedef vec_t<T> V;
  const int64_t ninst = a.m1 * a.m2 * a.S;
  if (ninst == 0) return;
  const TileMap map(Axis{a.m1, a.irs1, a.ors1}, Axis{a.m2, a.irs2, a.ors2},
                    Axis{a.S, a.Bin * a.ies, a.oes}, LW);
  const int64_t ntiles = map.tiles();
  // (Static runs of tiles: dynamic ones, which a descheduled thread would hold up less, cost
  // 5-60 % in the steady state on 2 cores, 16 x 32^4 and 64 x 8^6 float32: neighbouring tiles
  // read and write neighbouring memory.)
  // The whole product's flops decide the threads (cpu_threads' rule is about products): a pass
  // of a product split in several is short, and on one thread each pass of 16 x 128^2 (2 x 67
  // Mflop) took 0.65 ms where pyfastkron's two threads took 0.35.
  const int threads = cpu_threads(num_threads, product_flops);
  auto tile_src = [&](int64_t tile) {
    const int64_t c = tile % map.chunks, ab = tile / map.chunks;
    return a.in + (ab / map.b.n) * map.a.in + (ab % map.b.n) * map.b.in + c * LW * map.lane.in;
  };
  // The next tile's input lines and how many to fetch per output block of a step (see NextTile).
  // Only where the input is far from fitting the caches and a tile's lanes hold several lines
  // each: on cache-resident or short blocks the fetches cost more than they save (16 x 2^10
  // 10 -> 12 us, 1024 x 3^7 5.9 -> 6.8 ms, against 64 x 8^6 16.4 -> 12.8 ms on 2 cores).
  NextTile prefetch;
  const double in_bytes = double(a.m1 * a.m2) * double(a.S * a.Bin) * sizeof(T);
  if (in_bytes < kPrefetchBytes || a.Bin * int64_t(sizeof(T)) < 256) {
    // none
  } else if (a.ies == 1) {  // each lane one run of Bin elements
    prefetch.outer_stride = map.lane.in * int64_t(sizeof(T));
    prefetch.n_outer = LW;
    prefetch.n_inner = (a.Bin * int64_t(sizeof(T)) + 63) / 64;
  } else if (map.lane.in == 1) {  // the lanes side by side, Bin runs of them
    prefetch.outer_stride = a.ies * int64_t(sizeof(T));
    prefetch.n_outer = a.Bin;
    prefetch.n_inner = (LW * int64_t(sizeof(T)) + 63) / 64;
  }
  {
    int64_t blocks = 0;
    for (int64_t s = 0, size = a.Bin; s < a.nsteps; size = size / a.P[s] * a.Q[s], ++s)
      blocks += size / a.P[s] * ((a.Q[s] + columns_per_block(a.Q[s]) - 1) / columns_per_block(a.Q[s]));
    const int64_t lines = prefetch.n_outer * prefetch.n_inner;
    prefetch.per_block =
        int(std::min<int64_t>(64, (lines + blocks - 1) / std::max<int64_t>(1, blocks)));
  }
  // Each thread's tile buffers are allocated by the thread (they are thread_local and kept
  // across calls); an exception must not leave an OpenMP region (std::terminate), so a thread
  // that cannot get its buffers says so here and every thread skips the remaining tiles.
  std::atomic<bool> no_memory{false};
  // Tiles [t0, t1) on the calling thread, with its own buffers.
  auto run_tiles = [&](int64_t t0, int64_t t1) {
    V *buf0 = nullptr, *buf1 = nullptr;
    try {
      buf0 = tile_buffer<V>(0, size_t(a.maxblock));
      buf1 = tile_buffer<V>(1, size_t(a.maxblock));
    } catch (const std::bad_alloc &) {
      no_memory.store(true, std::memory_order_relaxed);
    }
    for (int64_t tile = t0; tile < t1; ++tile) {
      if (no_memory.load(std::memory_order_relaxed)) break;
      const int64_t c = tile % map.chunks, ab = tile / map.chunks;
      const int64_t ib = ab % map.b.n, ia = ab / map.b.n;
      const int64_t f0 = c * LW;
      const int nv = int(std::min<int64_t>(LW, map.lane.n - f0));
      const T *src = a.in + ia * map.a.in + ib * map.b.in + f0 * map.lane.in;
      T *dst = a.out + ia * map.a.out + ib * map.b.out + f0 * map.lane.out;
      gather(a, src, map.lane.in, nv, buf0);
      NextTile next = prefetch;
      if (next.per_block > 0 && tile + 1 < t1)
        next.base = reinterpret_cast<const char *>(tile_src(tile + 1));
      else
        next.per_block = 0;
      V *cur = buf0, *nxt = buf1;
      int64_t size = a.Bin;
      for (int s = 0; s < a.nsteps; ++s) {
        const int64_t R = size / a.P[s];
        step<T>(cur, nxt, R, a.P[s], a.Q[s], a.F[s], next);
        size = R * a.Q[s];
        std::swap(cur, nxt);
      }
      scatter(a, dst, map.lane.out, nv, cur);
    }
#ifdef KL_AVX512_PATHS
    _mm_sfence();  // order this thread's streaming stores before the pass ends
#endif
  };
  if (threads > 1) {
    // static runs of tiles, one contiguous run a thread (the first ntiles % nth take one more)
#pragma omp parallel num_threads(threads)
    {
      int64_t tid = 0, nth = 1;
#ifdef _OPENMP
      tid = omp_get_thread_num();
      nth = omp_get_num_threads();
#endif
      const int64_t q = ntiles / nth, r = ntiles % nth;
      const int64_t t0 = tid * q + std::min(tid, r);
      run_tiles(t0, t0 + q + (tid < r ? 1 : 0));
    }
  } else {
    // (no OpenMP region: a one-thread team cost a tiny product ~0.4-0.6 us a pass: 1 x 5^4
    // float64 5.5 -> 4.0 us a call, 8 x 8^3 float32 10.4 -> 8.1-8.5, Zen 4)
    run_tiles(0, ntiles);
  }
  if (no_memory.load()) {
    note_alloc(2 * size_t(a.maxblock) * sizeof(V), "each thread's two tile buffers");
    throw std::bad_alloc();
  }
}

// Outputs beyond this many bytes are written with streaming stores.  A tile writes Bout lines
// S elements apart, each line whole: a normal store first reads the line (write-allocate), and
// an intermediate past L2 is mostly gone from the caches before the next pass reads it anyway
// (4 MiB rather than L3's 32: 64 x 64^3 float32 on one core 14.9 -> 11.7 ms, 16^5 29.3 -> 28.6).
constexpr double kStreamBytes = 4.0 * 1024 * 1024;

template <class T>
static int kron_matmul(const kl_kron_problem *p, int num_threads) {
  constexpr int LW = Lanes<T>::width;
  const int n = p->nfactors;
  const int64_t M = p->m1 * p->m2;
  std::vector<std::vector<T>> packed(n);
  for (int i = 0; i < n; ++i)
    packed[i] = pack_factor(static_cast<const T *>(p->F[i]), p->P[i], p->Q[i], p->F_rs[i], p->F_cs[i]);
  const std::vector<PassPlan> passes = plan_passes(p, sizeof(T) * LW, LW);
  double product_flops = 0;  // 2 M sum_i (L_i / P_i) P_i Q_i, L_i the row length before factor i
  {
    double len = 1;
    for (int i = 0; i < n; ++i) len *= double(p->P[i]);
    for (int i = n - 1; i >= 0; --i) {
      product_flops += 2.0 * double(M) * len * double(p->Q[i]);
      len = len / double(p->P[i]) * double(p->Q[i]);
    }
  }

  // Intermediates follow the output's layout so each pass's writes stay contiguous.
  const bool row_layout = p->y_es == 1 || p->m2 == 1;
  int64_t scratch = 0;
  for (size_t g = 0; g + 1 < passes.size(); ++g) scratch = std::max(scratch, passes[g].len_out);
  const size_t scratch_bytes =
      passes.size() > 1 ? size_t(scratch * M) * sizeof(T) * (passes.size() > 2 ? 2 : 1) : 0;
  note_alloc(scratch_bytes, "intermediates between passes");
  ScratchLease lease(scratch_bytes);
  T *tmp[2] = {static_cast<T *>(lease.data()), static_cast<T *>(lease.data()) + scratch * M};

  const T *in = static_cast<const T *>(p->x);
  int64_t irs1 = p->x_rs1, irs2 = p->x_rs2, ies = p->x_es;
  for (size_t g = 0; g < passes.size(); ++g) {
    const PassPlan &pp = passes[g];
    const bool last = g + 1 == passes.size();
    PassArgs<T> a;
    a.m1 = p->m1;
    a.m2 = p->m2;
    a.S = pp.S;
    a.Bin = pp.Bin;
    a.Bout = pp.Bout;
    a.maxblock = pp.maxblock;
    a.nsteps = pp.count;
    std::vector<int64_t> P(pp.count), Q(pp.count);
    std::vector<const T *> F(pp.count);
    for (int s = 0; s < pp.count; ++s) {
      const int i = pp.last - s;  // last factor of the group first
      P[s] = p->P[i];
      Q[s] = p->Q[i];
      F[s] = packed[i].data();
    }
    a.P = P.data();
    a.Q = Q.data();
    a.F = F.data();
    a.in = in;
    a.irs1 = irs1;
    a.irs2 = irs2;
    a.ies = ies;
    if (last) {
      a.out = static_cast<T *>(p->y);
      a.ors1 = p->y_rs1;
      a.ors2 = p->y_rs2;
      a.oes = p->y_es;
      a.alpha = T(p->alpha);
      a.beta = T(p->beta);
    } else {
      a.out = tmp[g % 2];
      if (row_layout) {
        a.ors1 = p->m2 * pp.len_out;
        a.ors2 = pp.len_out;
        a.oes = 1;
      } else {
        a.ors1 = p->m2 * pp.len_out;
        a.ors2 = 1;
        a.oes = p->m2;
      }
      a.alpha = T(1);
      a.beta = T(0);
    }
    a.stream_out = double(M) * double(pp.len_out) * sizeof(T) > kStreamBytes;
    run_pass(a, num_threads, product_flops);
    in = a.out;
    irs1 = a.ors1;
    irs2 = a.ors2;
    ies = a.oes;
  }
  return KL_OK;
}

int kron_matmul_entry(const kl_kron_problem *p, int dtype, int num_threads) {
  try {
    if (dtype == KL_FLOAT32) return kron_matmul<float>(p, num_threads);
    if (dtype == KL_FLOAT64) return kron_matmul<double>(p, num_threads);
    return fail(KL_ERR_INVALID, "kron_matmul_cpu: unsupported dtype");
  } catch (const std::bad_alloc &) {
    return fail_alloc("kron_matmul");
  }
}

int lane_bytes(int dtype) { return dtype == KL_FLOAT32 ? sizeof(float) * Lanes<float>::width : sizeof(double) * Lanes<double>::width; }

}  // namespace KL_ISA
}  // namespace kl
