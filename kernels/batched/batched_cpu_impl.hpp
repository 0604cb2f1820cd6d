// The CPU batched-matmul kernel, written once and compiled once per instruction set
// (batched_cpu_avx512.cpp, batched_cpu_avx2.cpp, batched_cpu_generic.cpp define KL_ISA and
// KL_VEC_BYTES before including it).
//
// Small products are where NumPy loses: its matmul makes one BLAS call per matrix of a stack,
// whose overhead dwarfs a 16 x 16 product.  Here one call runs the whole stack: OpenMP over
// products, each product packed into two panels (A in row blocks of MR, k-major; B k-major with
// its columns padded to the vector width) and multiplied by a register-blocked micro-kernel of
// MR rows x NV vectors whose accumulators never leave registers.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <cstring>
#include <utility>
#include <vector>

#include "batched.h"
#include "batched_cpu_pool.hpp"
#include "cpu_threads.hpp"

#if KL_VEC_BYTES == 64 && defined(__AVX512F__) && defined(__AVX512VL__)
#include <immintrin.h>
#define KL_BATCHED_MASKS 1  // B's last partial vector by a masked load, not a padded copy
#endif

namespace kl {
namespace KL_ISA {

template <class T, int BYTES = KL_VEC_BYTES>
struct V {
  static constexpr int width = BYTES / int(sizeof(T));
  typedef T native __attribute__((vector_size(BYTES)));
};

constexpr int MR = 4;  // rows of the micro-kernel: 4 x 2 vectors = 8 accumulators

struct Operands {
  int64_t m, n, k;
  const void *a;
  int64_t a_rs, a_cs;
  const void *b;
  int64_t b_rs, b_cs;
  const void *c;
  int64_t c_rs, c_cs;
  void *d;
  int64_t d_rs, d_cs;
};

// Per-thread panels, grown as needed and kept for the thread's next products.
template <class T>
struct Panels {
  std::vector<T> ap, bp;
};

// acc[r][v] over kk of A[r][kk] * B[kk][v-th vector of this column block]; rows < R valid.
template <class T, int NV, int R>
static inline void micro(const T *__restrict ap, const T *__restrict bp, int64_t k, int64_t ldb,
                         typename V<T>::native (&acc)[MR][NV]) {
  typedef typename V<T>::native N;
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = N{};
  for (int64_t kk = 0; kk < k; ++kk) {
    N bv[NV];
    std::memcpy(bv, bp + kk * ldb, sizeof(bv));
    const T *a = ap + kk * MR;
    for (int r = 0; r < R; ++r) {
      const T s = a[r];
      for (int v = 0; v < NV; ++v) acc[r][v] += s * bv[v];
    }
  }
}

template <class T, int NV>
static void product(const Operands &o, T alpha, T beta, Panels<T> &pan) {
  typedef typename V<T>::native N;
  constexpr int W = V<T>::width;
  constexpr int NB = NV * W;  // columns per block
  const int64_t m = o.m, n = o.n, k = o.k;
  const T *A = static_cast<const T *>(o.a);
  const T *B = static_cast<const T *>(o.b);
  const T *C = static_cast<const T *>(o.c);
  T *D = static_cast<T *>(o.d);
  const int64_t nblk = (n + NB - 1) / NB, ldb = nblk * NB;
  const int64_t mblk = (m + MR - 1) / MR;
  if (int64_t(pan.bp.size()) < k * ldb) pan.bp.resize(size_t(k * ldb));
  if (int64_t(pan.ap.size()) < mblk * MR * k) pan.ap.resize(size_t(mblk * MR * k));
  T *bp = pan.bp.data(), *ap = pan.ap.data();
  // B: k-major rows of ldb columns (zero past n); A: row blocks of MR, k-major, zero past m
  for (int64_t kk = 0; kk < k; ++kk) {
    T *row = bp + kk * ldb;
    const T *src = B + kk * o.b_rs;
    if (o.b_cs == 1) {
      std::memcpy(row, src, size_t(n) * sizeof(T));
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] = src[j * o.b_cs];
    }
    for (int64_t j = n; j < ldb; ++j) row[j] = T(0);
  }
  for (int64_t ib = 0; ib < mblk; ++ib) {
    T *blk = ap + ib * MR * k;
    for (int r = 0; r < MR; ++r) {
      const int64_t i = ib * MR + r;
      if (i < m) {
        const T *src = A + i * o.a_rs;
        for (int64_t kk = 0; kk < k; ++kk) blk[kk * MR + r] = src[kk * o.a_cs];
      } else {
        for (int64_t kk = 0; kk < k; ++kk) blk[kk * MR + r] = T(0);
      }
    }
  }
  alignas(64) T tile[MR][NB];
  for (int64_t ib = 0; ib < mblk; ++ib) {
    const int rows = int(std::min<int64_t>(MR, m - ib * MR));
    for (int64_t jb = 0; jb < nblk; ++jb) {
      N acc[MR][NV];
      const T *b0 = bp + jb * NB;
      const T *a0 = ap + ib * MR * k;
      switch (rows) {
        case 4: micro<T, NV, 4>(a0, b0, k, ldb, acc); break;
        case 3: micro<T, NV, 3>(a0, b0, k, ldb, acc); break;
        case 2: micro<T, NV, 2>(a0, b0, k, ldb, acc); break;
        default: micro<T, NV, 1>(a0, b0, k, ldb, acc); break;
      }
      const int cols = int(std::min<int64_t>(NB, n - jb * NB));
      for (int r = 0; r < rows; ++r) std::memcpy(tile[r], acc[r], sizeof(acc[r]));
      for (int r = 0; r < rows; ++r) {
        const int64_t i = ib * MR + r;
        T *drow = D + i * o.d_rs + jb * NB * o.d_cs;
        if (beta != T(0)) {
          const T *crow = C + i * o.c_rs + jb * NB * o.c_cs;
          for (int j = 0; j < cols; ++j)
            drow[j * o.d_cs] = alpha * tile[r][j] + beta * crow[j * o.c_cs];
        } else if (o.d_cs == 1) {
          for (int j = 0; j < cols; ++j) drow[j] = alpha * tile[r][j];
        } else {
          for (int j = 0; j < cols; ++j) drow[j * o.d_cs] = alpha * tile[r][j];
        }
      }
    }
  }
}

// The direct path (B's rows contiguous, the common layout): no packing.  B's full column blocks
// are read in place with unaligned vector loads, A's elements broadcast from where they are;
// only a tail of fewer than NB columns is copied (zero-padded) into the thread's panel.
#ifdef KL_BATCHED_MASKS
// The first lanes of `mask` from p (the others zero; memory past them is never touched).
template <class T, int BY>
static inline typename V<T, BY>::native masked_load(const T *p, unsigned mask) {
  typedef typename V<T, BY>::native N;
  if constexpr (std::is_same_v<T, float> && BY == 64)
    return (N)_mm512_maskz_loadu_ps(__mmask16(mask), p);
  else if constexpr (std::is_same_v<T, float>)
    return (N)_mm256_maskz_loadu_ps(__mmask8(mask), p);
  else if constexpr (BY == 64)
    return (N)_mm512_maskz_loadu_pd(__mmask8(mask), p);
  else
    return (N)_mm256_maskz_loadu_pd(__mmask8(mask), p);
}
#endif

template <class T, int BY, int NV, int R, bool MASKED = false>
__attribute__((always_inline)) static inline void micro_direct(
    const T *__restrict A, int64_t a_cs, const T *__restrict B, int64_t ldb, int64_t k,
    typename V<T, BY>::native (&acc)[8][NV], int64_t a_rs, unsigned mask = 0) {
  typedef typename V<T, BY>::native N;
  N c[R][NV];  // local: the accumulators stay in registers
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = N{};
  const T *ar[R];
  for (int r = 0; r < R; ++r) ar[r] = A + r * a_rs;
  for (int64_t kk = 0; kk < k; ++kk) {
    N bv[NV];
#ifdef KL_BATCHED_MASKS
    if constexpr (MASKED) {
      if constexpr (NV > 1) std::memcpy(bv, B + kk * ldb, sizeof(N) * (NV - 1));
      bv[NV - 1] = masked_load<T, BY>(B + kk * ldb + (NV - 1) * V<T, BY>::width, mask);
    } else {
      std::memcpy(bv, B + kk * ldb, sizeof(bv));
    }
#else
    (void)mask;
    std::memcpy(bv, B + kk * ldb, sizeof(bv));
#endif
    const int64_t ak = kk * a_cs;
    for (int r = 0; r < R; ++r) {
      const T s = ar[r][ak];
      for (int v = 0; v < NV; ++v) c[r][v] += s * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = c[r][v];
}

// Rows per micro-tile for NV vectors of columns: about 12 accumulators with 32 vector registers
// (AVX-512), 8-9 with 16.
template <int NV>
constexpr int rows_for() {
  return KL_VEC_BYTES == 64 ? (NV == 1 ? 8 : NV == 2 ? 6 : NV == 3 ? 5 : 4)
                            : (NV == 1 ? 8 : NV == 2 ? 4 : NV == 3 ? 3 : 2);
}

// D[:, j0 : j0 + cols] from NV vectors of BY bytes of columns of B (rows ldb apart; cols <=
// NV * W).
template <class T, int BY, int NV, bool MASKED = false>
static void column_block(const Operands &o, const T *Bb, int64_t ldb, int64_t j0, int cols,
                         T alpha, T beta, unsigned mask = 0) {
  typedef typename V<T, BY>::native N;
  constexpr int W = V<T, BY>::width, NB = NV * W, MRD = rows_for<NV>();
  const T *A = static_cast<const T *>(o.a);
  const T *C = static_cast<const T *>(o.c);
  T *D = static_cast<T *>(o.d);
  alignas(64) T tile[8][NB];
  N acc[8][NV];
  for (int64_t i0 = 0; i0 < o.m; i0 += MRD) {
    const int rows = int(std::min<int64_t>(MRD, o.m - i0));
    const T *Ai = A + i0 * o.a_rs;
    switch (rows) {
#define KL_ROWS(R) \
  case R: if constexpr (R <= MRD) micro_direct<T, BY, NV, R, MASKED>(Ai, o.a_cs, Bb, ldb, o.k, acc, o.a_rs, mask); break;
      KL_ROWS(8) KL_ROWS(7) KL_ROWS(6) KL_ROWS(5) KL_ROWS(4) KL_ROWS(3) KL_ROWS(2)
#undef KL_ROWS
      default: micro_direct<T, BY, NV, 1, MASKED>(Ai, o.a_cs, Bb, ldb, o.k, acc, o.a_rs, mask); break;
    }
    T *Dj = D + i0 * o.d_rs + j0 * o.d_cs;
    if (cols == NB && o.d_cs == 1 && beta == T(0)) {  // straight from the registers
      for (int r = 0; r < rows; ++r) {
        N out[NV];
        for (int v = 0; v < NV; ++v) out[v] = acc[r][v] * alpha;
        std::memcpy(Dj + r * o.d_rs, out, sizeof(out));
      }
      continue;
    }
#ifdef KL_BATCHED_MASKS
    if (MASKED && o.d_cs == 1 && beta == T(0)) {  // the last vector by a masked store
      for (int r = 0; r < rows; ++r) {
        N out[NV];
        for (int v = 0; v < NV; ++v) out[v] = acc[r][v] * alpha;
        T *dr = Dj + r * o.d_rs;
        if constexpr (NV > 1) std::memcpy(dr, out, sizeof(N) * (NV - 1));
        T *last = dr + (NV - 1) * W;
        if constexpr (std::is_same_v<T, float> && BY == 64)
          _mm512_mask_storeu_ps(last, __mmask16(mask), (__m512)out[NV - 1]);
        else if constexpr (std::is_same_v<T, float>)
          _mm256_mask_storeu_ps(last, __mmask8(mask), (__m256)out[NV - 1]);
        else if constexpr (BY == 64)
          _mm512_mask_storeu_pd(last, __mmask8(mask), (__m512d)out[NV - 1]);
        else
          _mm256_mask_storeu_pd(last, __mmask8(mask), (__m256d)out[NV - 1]);
      }
      continue;
    }
#endif
    for (int r = 0; r < rows; ++r) std::memcpy(tile[r], acc[r], sizeof(acc[r]));
    const T *Cj = C ? C + i0 * o.c_rs + j0 * o.c_cs : nullptr;
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) {
        T v = alpha * tile[r][j];
        if (beta != T(0)) v += beta * Cj[r * o.c_rs + j * o.c_cs];
        Dj[r * o.d_rs + j * o.d_cs] = v;
      }
  }
}

template <class T, int BY, bool MASKED = false>
static void column_block_n(int nv, const Operands &o, const T *Bb, int64_t ldb, int64_t j0,
                           int cols, T alpha, T beta, unsigned mask = 0) {
  switch (nv) {
    case 1: column_block<T, BY, 1, MASKED>(o, Bb, ldb, j0, cols, alpha, beta, mask); break;
    case 2: column_block<T, BY, 2, MASKED>(o, Bb, ldb, j0, cols, alpha, beta, mask); break;
    case 3: column_block<T, BY, 3, MASKED>(o, Bb, ldb, j0, cols, alpha, beta, mask); break;
    default: column_block<T, BY, 4, MASKED>(o, Bb, ldb, j0, cols, alpha, beta, mask); break;
  }
}

template <class T, int BY>
static void product_direct(const Operands &o, T alpha, T beta, Panels<T> &pan) {
  constexpr int W = V<T, BY>::width;
  const T *B = static_cast<const T *>(o.b);
  const int64_t n = o.n, k = o.k;
  int64_t j = 0;
  for (; n - j >= 4 * W; j += 4 * W) column_block<T, BY, 4>(o, B + j, o.b_rs, j, 4 * W, alpha, beta);
  const int64_t rest = n - j;
  if (rest == 0) return;
  const int full = int(rest / W), tail = int(rest % W);
  if (tail == 0) {
    column_block_n<T, BY>(full, o, B + j, o.b_rs, j, int(rest), alpha, beta);
    return;
  }
#ifdef KL_BATCHED_MASKS
  // the last vector by masked loads, in place
  column_block_n<T, BY, true>(full + 1, o, B + j, o.b_rs, j, int(rest), alpha, beta,
                              (1u << tail) - 1u);
  (void)pan;
  (void)k;
  return;
#endif
  // the last columns, zero-padded to whole vectors, in the thread's panel
  const int nb = (full + 1) * W;
  if (int64_t(pan.bp.size()) < k * nb) pan.bp.resize(size_t(k * nb));
  T *tp = pan.bp.data();
  for (int64_t kk = 0; kk < k; ++kk) {
    const T *src = B + kk * o.b_rs + j;
    T *dst = tp + kk * nb;
    for (int64_t c = 0; c < rest; ++c) dst[c] = src[c];
    for (int64_t c = rest; c < nb; ++c) dst[c] = T(0);
  }
  column_block_n<T, BY>(full + 1, o, tp, nb, j, int(rest), alpha, beta);
}

// Tiny square products (m = n = k <= 4): sizes known at compile time, fully unrolled, no
// packing and no column blocks (the per-product overhead is what NumPy loses to at these sizes).
template <class T, int S>
static void tiny(const Operands &o, T alpha, T beta) {
  const T *A = static_cast<const T *>(o.a);
  const T *B = static_cast<const T *>(o.b);
  const T *C = static_cast<const T *>(o.c);
  T *D = static_cast<T *>(o.d);
  T b[S][S], acc[S][S];
  for (int kk = 0; kk < S; ++kk)
    for (int j = 0; j < S; ++j) b[kk][j] = B[kk * o.b_rs + j * o.b_cs];
  for (int i = 0; i < S; ++i) {
    for (int j = 0; j < S; ++j) acc[i][j] = T(0);
    for (int kk = 0; kk < S; ++kk) {
      const T a = A[i * o.a_rs + kk * o.a_cs];
      for (int j = 0; j < S; ++j) acc[i][j] += a * b[kk][j];
    }
  }
  for (int i = 0; i < S; ++i)
    for (int j = 0; j < S; ++j) {
      T v = alpha * acc[i][j];
      if (beta != T(0)) v += beta * C[i * o.c_rs + j * o.c_cs];
      D[i * o.d_rs + j * o.d_cs] = v;
    }
}

template <class T>
static bool run_tiny(const Operands &o, T alpha, T beta) {
  if (o.m != o.n || o.n != o.k) return false;
  switch (o.m) {
    case 1: tiny<T, 1>(o, alpha, beta); return true;
    case 2: tiny<T, 2>(o, alpha, beta); return true;
    case 3: tiny<T, 3>(o, alpha, beta); return true;
    case 4: tiny<T, 4>(o, alpha, beta); return true;
    default: return false;
  }
}

template <class T>
static void run_one(const Operands &o, T alpha, T beta, Panels<T> &pan) {
  if (o.m == 0 || o.n == 0) return;
  if (o.k == 0) {  // no product term: D = beta * C (BLAS: C not read when beta == 0)
    T *D = static_cast<T *>(o.d);
    const T *C = static_cast<const T *>(o.c);
    for (int64_t i = 0; i < o.m; ++i)
      for (int64_t j = 0; j < o.n; ++j)
        D[i * o.d_rs + j * o.d_cs] = beta != T(0) ? beta * C[i * o.c_rs + j * o.c_cs] : T(0);
    return;
  }
  if (o.m <= 4 && run_tiny<T>(o, alpha, beta)) return;
  if (o.b_cs == 1) {
#if KL_VEC_BYTES == 64
    // half-width vectors for short rows (float32 orders <= 8, float64 <= 7: measured, 512-bit
    // masked rows of 5-7 doubles ran 2-3x slower than two 256-bit vectors)
    constexpr int H = V<T>::width / 2;
    if (o.n <= (sizeof(T) == 8 ? 2 * H - 1 : H)) {
      product_direct<T, 32>(o, alpha, beta, pan);
      return;
    }
#endif
    product_direct<T, KL_VEC_BYTES>(o, alpha, beta, pan);
  } else if (o.n <= V<T>::width) {
    product<T, 1>(o, alpha, beta, pan);
  } else {
    product<T, 2>(o, alpha, beta, pan);
  }
}

// Threads for a variable-size batch (OpenMP): the project's rule (kernels/common/cpu_threads.hpp:
// parallel from 1e8 flops).  A lower threshold (1e7) doubled small stacks on an idle 2-core
// machine, and made them 10-100x slower on a busy one: a woken OpenMP thread waits for a time
// slice (~4-8 ms).  Uniform stacks use batched_cpu_pool.hpp instead, which does not wait.
inline int batch_threads(int num_threads, double flops, int64_t count) {
  return int(std::max<int64_t>(1, std::min<int64_t>(cpu_threads(num_threads, flops), count)));
}

// Square products of order S <= 8 with B's and D's rows contiguous and no C (the replayed
// call's case), a whole stack in one loop: each row of B one vector of the smallest width that
// holds it (masked loads and stores on AVX-512), A's elements broadcast, one accumulator a row,
// nothing packed and nothing dispatched per product.  The general path spent ~15-20 ns a 4 x 4
// product in dispatch and scalar strided loops; NumPy takes ~40 ns.
template <class T, int S>
struct SmallRow {
  static constexpr int W = S <= 2 ? 2 : S <= 4 ? 4 : 8;  // lanes
  static constexpr int BY = W * int(sizeof(T)) < 16 ? 16 : W * int(sizeof(T));
  static constexpr int L = BY / int(sizeof(T));  // lanes of the vector type (>= W)
  typedef T native __attribute__((vector_size(BY)));
};

template <class T, int S>
__attribute__((always_inline)) static inline typename SmallRow<T, S>::native small_load(
    const T *p) {
  typedef SmallRow<T, S> R;
  typename R::native v;
  if constexpr (S == R::L) {
    std::memcpy(&v, p, sizeof(v));
  } else {
#ifdef KL_BATCHED_MASKS
    constexpr unsigned mask = (1u << S) - 1u;
    if constexpr (std::is_same_v<T, float> && R::BY == 16)
      v = (typename R::native)_mm_maskz_loadu_ps(__mmask8(mask), p);
    else if constexpr (std::is_same_v<T, float>)
      v = (typename R::native)_mm256_maskz_loadu_ps(__mmask8(mask), p);
    else if constexpr (R::BY == 16)
      v = (typename R::native)_mm_maskz_loadu_pd(__mmask8(mask), p);
    else if constexpr (R::BY == 32)
      v = (typename R::native)_mm256_maskz_loadu_pd(__mmask8(mask), p);
    else {  // (a full 256-bit half and a masked one: 512-bit masked rows ran ~2x slower)
      typedef double H __attribute__((vector_size(32)));
      const H lo = (H)_mm256_loadu_pd(p), hi = (H)_mm256_maskz_loadu_pd(__mmask8(mask >> 4), p + 4);
      v = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
    }
#else
    v = typename R::native{};
    std::memcpy(&v, p, S * sizeof(T));
#endif
  }
  return v;
}

template <class T, int S>
__attribute__((always_inline)) static inline void small_store(T *p,
                                                              typename SmallRow<T, S>::native v) {
  typedef SmallRow<T, S> R;
  if constexpr (S == R::L) {
    std::memcpy(p, &v, sizeof(v));
  } else {
#ifdef KL_BATCHED_MASKS
    constexpr unsigned mask = (1u << S) - 1u;
    if constexpr (std::is_same_v<T, float> && R::BY == 16)
      _mm_mask_storeu_ps(p, __mmask8(mask), (__m128)v);
    else if constexpr (std::is_same_v<T, float>)
      _mm256_mask_storeu_ps(p, __mmask8(mask), (__m256)v);
    else if constexpr (R::BY == 16)
      _mm_mask_storeu_pd(p, __mmask8(mask), (__m128d)v);
    else if constexpr (R::BY == 32)
      _mm256_mask_storeu_pd(p, __mmask8(mask), (__m256d)v);
    else {
      _mm256_storeu_pd(p, (__m256d)__builtin_shufflevector(v, v, 0, 1, 2, 3));
      _mm256_mask_storeu_pd(p + 4, __mmask8(mask >> 4),
                            (__m256d)__builtin_shufflevector(v, v, 4, 5, 6, 7));
    }
#else
    std::memcpy(p, &v, S * sizeof(T));
#endif
  }
}

// The offsets of product i of a uniform batch (elements) in a, b, d.
struct Offsets {
  int64_t a, b, d;
};
static inline Offsets offsets(const kl_batched_problem *p, int64_t i) {
  if (p->ndim == 1) return {i * p->a_bs[0], i * p->b_bs[0], i * p->d_bs[0]};
  Offsets o{0, 0, 0};
  for (int d = p->ndim - 1; d >= 0; --d) {
    const int64_t idx = i % p->shape[d];
    i /= p->shape[d];
    o.a += idx * p->a_bs[d];
    o.b += idx * p->b_bs[d];
    o.d += idx * p->d_bs[d];
  }
  return o;
}

template <class T, int S>
static void small_square(const kl_batched_problem *p, int64_t begin, int64_t end, T alpha) {
  typedef typename SmallRow<T, S>::native N;
  const T *A = static_cast<const T *>(p->a);
  const T *B = static_cast<const T *>(p->b);
  T *D = static_cast<T *>(p->d);
  const int64_t a_rs = p->a_rs, a_cs = p->a_cs, b_rs = p->b_rs, d_rs = p->d_rs;
  for (int64_t i = begin; i < end; ++i) {
    const Offsets o = offsets(p, i);
    const T *a = A + o.a;
    const T *b = B + o.b;
    T *d = D + o.d;
    N bv[S];
    for (int kk = 0; kk < S; ++kk) bv[kk] = small_load<T, S>(b + kk * b_rs);
    for (int r = 0; r < S; ++r) {
      const T *ar = a + r * a_rs;
      N acc = ar[0] * bv[0];
      for (int kk = 1; kk < S; ++kk) acc += ar[kk * a_cs] * bv[kk];
      small_store<T, S>(d + r * d_rs, acc * alpha);
    }
  }
}

// Order 1: an elementwise product over the batch.
template <class T>
static void order_one(const kl_batched_problem *p, int64_t begin, int64_t end, T alpha) {
  const T *A = static_cast<const T *>(p->a);
  const T *B = static_cast<const T *>(p->b);
  T *D = static_cast<T *>(p->d);
  if (p->ndim == 1 && p->a_bs[0] == 1 && p->b_bs[0] == 1 && p->d_bs[0] == 1) {
    for (int64_t i = begin; i < end; ++i) D[i] = A[i] * B[i] * alpha;  // (vectorised)
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    const Offsets o = offsets(p, i);
    D[o.d] = A[o.a] * B[o.b] * alpha;
  }
}

// The lanes of v summed pairwise, lane[l] += lane[l + w] for w = W/2, ..., 1 (log2(W) dependent
// adds, not W), lane 0 the sum.  With __builtin_shufflevector each level is one lane rotation
// and one vector add in registers (the same adds, so the same bits); through memory, the store
// and W scalar reloads took most of a 1 x 32 x 1 product's ~24 cycles.
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
template <class N, int W, int w, size_t... I>
static inline N rotate_lanes(N v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, int((I + w) % W)...);
}
template <class T, int W, int w = W / 2, class N>
static inline T lane_sum(N v) {
  if constexpr (w == 0) {
    return v[0];
  } else {
    return lane_sum<T, W, w / 2>(v + rotate_lanes<N, W, w>(v, std::make_index_sequence<W>{}));
  }
}
#else
template <class T, int W, class N>
static inline T lane_sum(N v) {
  T lane[W];
  std::memcpy(lane, &v, sizeof(lane));
  for (int w = W / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0];
}
#endif

// One column (n = 1): each row of D a dot product of A's row and B's column, contiguous ones
// by vectors (two accumulators, then the lanes summed pairwise in a fixed order: deterministic,
// whatever thread runs it).  The
// general path ran a masked one-lane vector per k step: ~0.06x NumPy at 1 x 32 x 1.
template <class T>
static void one_column(const kl_batched_problem *p, int64_t begin, int64_t end, T alpha) {
  typedef typename V<T>::native N;
  constexpr int W = V<T>::width;
  const T *A = static_cast<const T *>(p->a);
  const T *B = static_cast<const T *>(p->b);
  T *D = static_cast<T *>(p->d);
  const int64_t m = p->m, k = p->k, a_rs = p->a_rs, a_cs = p->a_cs, b_rs = p->b_rs,
                d_rs = p->d_rs;
  const bool unit = a_cs == 1 && b_rs == 1;
  for (int64_t i = begin; i < end; ++i) {
    const Offsets o = offsets(p, i);
    const T *b = B + o.b;
    for (int64_t r = 0; r < m; ++r) {
      const T *a = A + o.a + r * a_rs;
      T sum = T(0);
      int64_t kk = 0;
      if (unit && k >= W) {
        N acc0{}, acc1{};
        for (; kk + 2 * W <= k; kk += 2 * W) {
          N x0, x1, y0, y1;
          std::memcpy(&x0, a + kk, sizeof(N));
          std::memcpy(&x1, a + kk + W, sizeof(N));
          std::memcpy(&y0, b + kk, sizeof(N));
          std::memcpy(&y1, b + kk + W, sizeof(N));
          acc0 += x0 * y0;
          acc1 += x1 * y1;
        }
        for (; kk + W <= k; kk += W) {
          N x0, y0;
          std::memcpy(&x0, a + kk, sizeof(N));
          std::memcpy(&y0, b + kk, sizeof(N));
          acc0 += x0 * y0;
        }
        acc0 += acc1;
        sum = lane_sum<T, W>(acc0);
      }
      for (; kk < k; ++kk) sum += a[kk * a_cs] * b[kk * b_rs];
      D[o.d + r * d_rs] = sum * alpha;
    }
  }
}

// small_square where a row of order S fits one vector register of this build (the AVX2 and
// baseline builds leave the larger orders to the general path: a vector wider than the ISA's
// would be split, and passed in memory between functions); false otherwise.
template <class T, int S>
static bool small_square_fits(const kl_batched_problem *p, int64_t begin, int64_t end,
                              T alpha) {
  if constexpr (SmallRow<T, S>::BY <= KL_VEC_BYTES) {
    small_square<T, S>(p, begin, end, alpha);
    return true;
  } else {
    (void)p, (void)begin, (void)end, (void)alpha;
    return false;
  }
}

// The stack-level kernels above, when they apply (returns false otherwise).
template <class T>
static bool run_small(const kl_batched_problem *p, int64_t begin, int64_t end, T alpha, T beta) {
  if (beta != T(0)) return false;
  if (p->n == 1 && p->k > 1 && p->m >= 1) {
    one_column<T>(p, begin, end, alpha);
    return true;
  }
  if (p->m != p->n || p->n != p->k || p->m > 8 || p->m < 1) return false;
  if (p->m == 1) {
    order_one<T>(p, begin, end, alpha);
    return true;
  }
  if (p->b_cs != 1 || p->d_cs != 1) return false;
  switch (p->m) {
    case 2: return small_square_fits<T, 2>(p, begin, end, alpha);
    case 3: return small_square_fits<T, 3>(p, begin, end, alpha);
    case 4: return small_square_fits<T, 4>(p, begin, end, alpha);
    case 5: return small_square_fits<T, 5>(p, begin, end, alpha);
    case 6: return small_square_fits<T, 6>(p, begin, end, alpha);
    case 7: return small_square_fits<T, 7>(p, begin, end, alpha);
    default: return small_square_fits<T, 8>(p, begin, end, alpha);
  }
}

// Products [begin, end) of a uniform batch.
template <class T>
static void run_products(const kl_batched_problem *p, int64_t begin, int64_t end, T alpha,
                         T beta, Panels<T> &pan) {
  if (run_small<T>(p, begin, end, alpha, beta)) return;
  for (int64_t i = begin; i < end; ++i) {
    int64_t rem = i, oa = 0, ob = 0, oc = 0, od = 0;
    if (p->ndim == 1) {  // the common stack: no divisions
      oa = i * p->a_bs[0];
      ob = i * p->b_bs[0];
      oc = i * p->c_bs[0];
      od = i * p->d_bs[0];
      rem = 0;
    }
    for (int d = rem ? p->ndim - 1 : -1; d >= 0; --d) {
      const int64_t idx = rem % p->shape[d];
      rem /= p->shape[d];
      oa += idx * p->a_bs[d];
      ob += idx * p->b_bs[d];
      oc += idx * p->c_bs[d];
      od += idx * p->d_bs[d];
    }
    Operands o{p->m, p->n, p->k,
               static_cast<const T *>(p->a) + oa, p->a_rs, p->a_cs,
               static_cast<const T *>(p->b) + ob, p->b_rs, p->b_cs,
               p->c ? static_cast<const T *>(p->c) + oc : nullptr, p->c_rs, p->c_cs,
               static_cast<T *>(p->d) + od, p->d_rs, p->d_cs};
    run_one<T>(o, alpha, beta, pan);
  }
}

template <class T>
struct UniformJob {
  const kl_batched_problem *p;
  T alpha, beta;
};

template <class T>
static void run_uniform_range(void *job, int64_t begin, int64_t end) {
  const UniformJob<T> &j = *static_cast<const UniformJob<T> *>(job);
  Panels<T> pan;
  run_products<T>(j.p, begin, end, j.alpha, j.beta, pan);
}

// Threads: batched_cpu_pool.hpp (from ~2 us of work, where OMP_NUM_THREADS allows; the caller
// never waits for a helper that has not started).
template <class T>
static int run_uniform(const kl_batched_problem *p, int num_threads) {
  int64_t count = 1;
  for (int d = 0; d < p->ndim; ++d) count *= p->shape[d];
  if (count == 0) return KL_OK;
  const double flops = 2.0 * double(count) * double(p->m) * double(p->n) * double(p->k);
  // the pool's threshold's terms; a one-column product (a dot product a row: its lane sum, not
  // its 2k flops, sets its time, ~5 ns) counts 400 more (1 x 32 x 1 float64 batch 1000: 64e3
  // flops, 5.7 us on one core)
  const double f64_flops = flops * double(sizeof(T)) / 8.0 +
                           (p->n == 1 && p->k > 1 ? 400.0 * double(count) * double(p->m) : 0.0);
  const int threads =
      int(std::min<int64_t>(batched::pool_threads(num_threads, f64_flops), count));
  UniformJob<T> job{p, T(p->alpha), T(p->beta)};
  if (threads == 1) {  // no parallel machinery at all: even a one-thread OpenMP region costs
    run_uniform_range<T>(&job, 0, count);  // ~0.3 us, a third of a 4 x 4 x 4 call
    return KL_OK;
  }
  batched::parallel_for(count, threads, f64_flops, &run_uniform_range<T>, &job);
  return KL_OK;
}

template <class T>
static int run_var(const kl_batched_entry *t, int64_t count, double alpha_, double beta_,
                   int num_threads) {
  double flops = 0;
  for (int64_t i = 0; i < count; ++i) flops += 2.0 * double(t[i].m) * double(t[i].n) * double(t[i].k);
  const int threads = batch_threads(num_threads, flops, count);
  const T alpha = T(alpha_), beta = T(beta_);
  auto one = [&](int64_t i, Panels<T> &pan) {
    const kl_batched_entry &e = t[i];
    Operands o{e.m, e.n, e.k,
               reinterpret_cast<const T *>(e.a), e.a_rs, e.a_cs,
               reinterpret_cast<const T *>(e.b), e.b_rs, e.b_cs,
               reinterpret_cast<const T *>(e.c), e.c_rs, e.c_cs,
               reinterpret_cast<T *>(e.d), e.d_rs, e.d_cs};
    run_one<T>(o, alpha, beta, pan);
  };
  if (threads == 1) {
    Panels<T> pan;
    for (int64_t i = 0; i < count; ++i) one(i, pan);
    return KL_OK;
  }
#pragma omp parallel num_threads(threads)
  {
    Panels<T> pan;
#pragma omp for schedule(dynamic, 4)
    for (int64_t i = 0; i < count; ++i) one(i, pan);
  }
  return KL_OK;
}

int batched_entry(const kl_batched_problem *p, int dtype, int num_threads) {
  if (dtype == KL_BATCHED_F64) return run_uniform<double>(p, num_threads);
  return run_uniform<float>(p, num_threads);
}

int batched_var_entry(const kl_batched_entry *t, int64_t count, double alpha, double beta,
                      int dtype, int num_threads) {
  if (dtype == KL_BATCHED_F64) return run_var<double>(t, count, alpha, beta, num_threads);
  return run_var<float>(t, count, alpha, beta, num_threads);
}

}  // namespace KL_ISA
}  // namespace kl
