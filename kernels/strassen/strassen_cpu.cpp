// CPU side of strassen_matmul: the element-wise passes of the schedule and the addition of a
// leaf's product (formed by BLAS in Python) into its signed C targets, over strided blocks.
#include <cstdint>

#include "cpu_threads.hpp"
#include "strassen.h"

namespace {

// One row of the passes, for the A quadrants (r0..r3 = A0..A3) and the B quadrants alike.
template <typename T>
inline void s1_a(T *a0, T *a1, T *a2, const T *a3, int64_t w) {
  for (int64_t j = 0; j < w; ++j) {
    a2[j] += a3[j];
    a1[j] += a0[j];
  }
}
template <typename T>
inline void s1_b(const T *b0, T *b1, T *b2, const T *b3, int64_t w) {
  for (int64_t j = 0; j < w; ++j) {
    b1[j] -= b3[j];
    b2[j] -= b0[j];
  }
}
template <typename T>
inline void s34_a(T *a0, T *a1, T *a2, const T *a3, int64_t w) {
  for (int64_t j = 0; j < w; ++j) {
    T s = a0[j] + a3[j];
    a0[j] = s;
    a2[j] -= s;
    a1[j] -= s;
  }
}
template <typename T>
inline void s34_b(T *b0, T *b1, T *b2, const T *b3, int64_t w) {
  for (int64_t j = 0; j < w; ++j) {
    T s = b0[j] + b3[j];
    b0[j] = s;
    b1[j] += s;
    b2[j] += s;
  }
}
template <typename T>
inline void s67_a(T *a0, T *a1, T *a2, const T *a3, int64_t w) {
  for (int64_t j = 0; j < w; ++j) {
    T r = a0[j] - a3[j];
    a0[j] = r;
    a1[j] += a3[j];
    a2[j] += r;
  }
}
template <typename T>
inline void s67_b(T *b0, T *b1, T *b2, const T *b3, int64_t w) {
  for (int64_t j = 0; j < w; ++j) {
    T r = b0[j] - b3[j];
    b0[j] = r;
    b1[j] -= r;
    b2[j] -= b3[j];
  }
}

template <typename T>
void pass_rows(int stage, T *base, int64_t ld, int64_t rows, int64_t cols, int64_t i, bool is_a) {
  T *q0 = base + i * ld, *q1 = q0 + cols, *q2 = q0 + rows * ld, *q3 = q2 + cols;
  if (is_a) {
    if (stage == 1) s1_a(q0, q1, q2, q3, cols);
    else if (stage == 2) s34_a(q0, q1, q2, q3, cols);
    else s67_a(q0, q1, q2, q3, cols);
  } else {
    if (stage == 1) s1_b(q0, q1, q2, q3, cols);
    else if (stage == 2) s34_b(q0, q1, q2, q3, cols);
    else s67_b(q0, q1, q2, q3, cols);
  }
}

template <typename T>
int run_pass(const kl_strassen_pass *p, int num_threads) {
  // rows of all blocks, A's then B's, as one index space
  const int64_t ra = p->mh, rb = p->kh;
  const int64_t per = ra + rb, total = per * p->count;
  const double work = double(p->count) * double(p->mh * p->kh + p->kh * p->nh) * 7.0;
  const int threads = kl::cpu_threads(num_threads, work * 4.0);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < total; ++r) {
    const int64_t blk = r / per, i = r % per;
    if (i < ra)
      pass_rows<T>(p->stage, static_cast<T *>(p->a[blk]), p->lda, p->mh, p->kh, i, true);
    else
      pass_rows<T>(p->stage, static_cast<T *>(p->b[blk]), p->ldb, p->kh, p->nh, i - ra, false);
  }
  return KL_OK;
}

template <typename T>
int run_targets(const kl_strassen_leaves *p, int num_threads) {
  const int64_t m = p->m, n = p->n;
  const T beta = T(p->beta);
  const bool first = p->first != 0, read_c = !first || p->beta != 0.0;
  int64_t total_targets = 0;
  for (int l = 0; l < p->count; ++l) total_targets += p->leaf[l].ntargets;
  const int threads = kl::cpu_threads(num_threads, double(total_targets * m * n) * 8.0);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < p->count * m; ++r) {
    const kl_strassen_leaf &lf = p->leaf[r / m];
    const int64_t i = r % m;
    const T *mrow = static_cast<const T *>(lf.x) + i * p->ldx;
    for (int t = 0; t < lf.ntargets; ++t) {
      const T coef = T((lf.negative >> t) & 1u ? -p->alpha : p->alpha);
      T *c = static_cast<T *>(lf.c[t]) + i * p->ldc;
      if (!read_c) {
        for (int64_t j = 0; j < n; ++j) c[j] = coef * mrow[j];
      } else if (first) {
        for (int64_t j = 0; j < n; ++j) c[j] = beta * c[j] + coef * mrow[j];
      } else {
        for (int64_t j = 0; j < n; ++j) c[j] += coef * mrow[j];
      }
    }
  }
  return KL_OK;
}

bool pass_ok(const kl_strassen_pass *p) {
  return p->count >= 0 && p->count <= KL_STRASSEN_MAX_BATCH && p->stage >= 1 && p->stage <= 3 &&
         p->mh >= 0 && p->kh >= 0 && p->nh >= 0;
}

bool leaves_ok(const kl_strassen_leaves *p) {
  if (p->count < 0 || p->count > KL_STRASSEN_MAX_BATCH || p->m < 0 || p->n < 0 || p->k < 0)
    return false;
  for (int l = 0; l < p->count; ++l)
    if (p->leaf[l].ntargets < 0 || p->leaf[l].ntargets > KL_STRASSEN_MAX_TARGETS) return false;
  return true;
}

}  // namespace

extern "C" int kl_strassen_pass_cpu(const kl_strassen_pass *p, int dtype, int num_threads) {
  if (!pass_ok(p)) return kl::fail(KL_ERR_INVALID, "strassen pass: invalid sizes or stage");
  if (dtype == 0) return run_pass<float>(p, num_threads);
  if (dtype == 1) return run_pass<double>(p, num_threads);
  return kl::fail(KL_ERR_INVALID, "strassen: only float32 and float64 are supported");
}

extern "C" int kl_strassen_targets_cpu(const kl_strassen_leaves *p, int dtype, int num_threads) {
  if (!leaves_ok(p)) return kl::fail(KL_ERR_INVALID, "strassen leaves: invalid sizes or count");
  if (dtype == 0) return run_targets<float>(p, num_threads);
  if (dtype == 1) return run_targets<double>(p, num_threads);
  return kl::fail(KL_ERR_INVALID, "strassen: only float32 and float64 are supported");
}
