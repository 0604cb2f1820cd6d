// The CPU block-sparse kernels, compiled once per instruction set (blocksparse_cpu_<isa>.cpp
// defines KL_ISA and KL_VEC_BYTES, then includes this); blocksparse_cpu.cpp dispatches.
//
// SpMM: a block row's output strip (b rows x a tile of nt right-hand-side columns) lives in a
// thread-local buffer that stays in L1; each stored block adds its b x b product in register
// tiles of 4 rows x 2 vectors, accumulated over the block's b columns before they touch the
// buffer (one load and one store of the strip per block, not per column).
// SpGEMM: Gilbert's sparse accumulator per thread (a marker per block column of C) counts, then
// lists (sorted) the blocks of each C row; the numeric phase maps a column to its position in
// the row and adds each A block x B block product there.
#include <algorithm>
#include <cstring>
#include <vector>

#include "blocksparse.h"
#include "cpu_threads.hpp"

namespace kl {
namespace bs_cpu {
namespace KL_ISA {

constexpr int64_t kTileN = 256;  // right-hand-side columns per strip: b x 256 doubles = 32 KiB

template <typename T>
void spmm_strip(const kl_bs_spmm_problem &p, int64_t r, int64_t n0, int64_t nt, T *acc) {
  constexpr int JW = 2 * KL_VEC_BYTES / int(sizeof(T));  // two vectors of columns
  const int b = p.b;
  const T *val = static_cast<const T *>(p.val);
  const T *B = static_cast<const T *>(p.B);
  std::fill(acc, acc + b * nt, T(0));
  const int64_t nfull = nt / JW * JW;
  for (int64_t t = p.row_ptr[r]; t < p.row_ptr[r + 1]; ++t) {
    const int64_t blk = p.perm ? p.perm[t] : t;
    const int64_t c0 = p.col_idx[t] * b;
    const int kvalid = int(std::min<int64_t>(b, p.k - c0));
    const T *A = val + blk * b * b;
    const T *Bt = B + c0 * p.ldb + n0;
    for (int i = 0; i < b; i += 4) {
      const T *a0 = A + i * b, *a1 = a0 + b, *a2 = a1 + b, *a3 = a2 + b;
      for (int64_t j0 = 0; j0 < nfull; j0 += JW) {
        T s0[JW], s1[JW], s2[JW], s3[JW];
        for (int j = 0; j < JW; ++j) s0[j] = s1[j] = s2[j] = s3[j] = T(0);
        for (int kk = 0; kk < kvalid; ++kk) {
          const T *br = Bt + kk * p.ldb + j0;
          const T x0 = a0[kk], x1 = a1[kk], x2 = a2[kk], x3 = a3[kk];
#pragma omp simd
          for (int j = 0; j < JW; ++j) {
            const T v = br[j];
            s0[j] += x0 * v;
            s1[j] += x1 * v;
            s2[j] += x2 * v;
            s3[j] += x3 * v;
          }
        }
        T *o = acc + i * nt + j0;
#pragma omp simd
        for (int j = 0; j < JW; ++j) {
          o[j] += s0[j];
          o[nt + j] += s1[j];
          o[2 * nt + j] += s2[j];
          o[3 * nt + j] += s3[j];
        }
      }
      for (int kk = 0; kk < kvalid && nfull < nt; ++kk) {  // the last columns, unvectorised
        const T *br = Bt + kk * p.ldb;
        for (int64_t j = nfull; j < nt; ++j) {
          const T v = br[j];
          acc[i * nt + j] += a0[kk] * v;
          acc[(i + 1) * nt + j] += a1[kk] * v;
          acc[(i + 2) * nt + j] += a2[kk] * v;
          acc[(i + 3) * nt + j] += a3[kk] * v;
        }
      }
    }
  }
  const int rows = int(std::min<int64_t>(b, p.m - r * b));
  const T alpha = T(p.alpha), beta = T(p.beta);
  T *C = static_cast<T *>(p.C);
  for (int i = 0; i < rows; ++i) {
    T *c = C + (r * b + i) * p.ldc + n0;
    const T *a = acc + i * nt;
    if (p.beta == 0.0) {
#pragma omp simd
      for (int64_t j = 0; j < nt; ++j) c[j] = alpha * a[j];
    } else {
#pragma omp simd
      for (int64_t j = 0; j < nt; ++j) c[j] = alpha * a[j] + beta * c[j];
    }
  }
}

template <typename T>
int spmm(const kl_bs_spmm_problem &p, int num_threads) {
  const int64_t R = (p.m + p.b - 1) / p.b;
  const int64_t ntiles = (p.n + kTileN - 1) / kTileN;
  const int64_t nnzb = R ? p.row_ptr[R] : 0;
  const double flops = 2.0 * double(nnzb) * p.b * p.b * double(p.n);
  const int threads = kl::cpu_threads(num_threads, flops);
  bool failed = false;
#pragma omp parallel num_threads(threads)
  {
    std::vector<T> acc;
    try {
      acc.resize(size_t(p.b) * size_t(std::min<int64_t>(p.n, kTileN)));
    } catch (...) {
#pragma omp atomic write
      failed = true;
    }
    if (!acc.empty()) {
#pragma omp for schedule(dynamic, 4)
      for (int64_t w = 0; w < R * ntiles; ++w) {
        const int64_t r = w / ntiles, n0 = (w % ntiles) * kTileN;
        spmm_strip<T>(p, r, n0, std::min<int64_t>(kTileN, p.n - n0), acc.data());
      }
    }
  }
  if (failed) return kl::fail(KL_ERR_ALLOC, "blocksparse spmm: out of host memory");
  return KL_OK;
}

template <typename T>
void block_gemm(int b, const T *A, const T *B, T *C) {  // C += A @ B, b x b row-major
  for (int i = 0; i < b; ++i) {
    T *c = C + i * b;
    for (int kk = 0; kk < b; ++kk) {
      const T a = A[i * b + kk];
      const T *br = B + kk * b;
#pragma omp simd
      for (int j = 0; j < b; ++j) c[j] += a * br[j];
    }
  }
}

template <typename T>
int spgemm(const kl_bs_spgemm_problem &p, int phase, int num_threads) {
  const int64_t R = p.R;
  const int b = p.b;
  // the numeric phase does b^3 flops per pair of blocks; the symbolic ones a few per pair
  const double pairs = double(R) * 16.0;
  const int threads = kl::cpu_threads(num_threads, phase == 2 ? pairs * b * b * b : pairs * 1e3);
  bool failed = false;
#pragma omp parallel num_threads(threads)
  {
    std::vector<int64_t> mark;
    try {
      mark.assign(size_t(p.ncols), -1);
    } catch (...) {
#pragma omp atomic write
      failed = true;
    }
    if (!failed) {
#pragma omp for schedule(dynamic, 8)
      for (int64_t r = 0; r < R; ++r) {
        if (phase == 0 || phase == 1) {
          int64_t cnt = 0;
          int64_t *out = phase == 1 ? p.c_col + p.c_row_ptr[r] : nullptr;
          for (int64_t t = p.a_row_ptr[r]; t < p.a_row_ptr[r + 1]; ++t) {
            const int64_t kb = p.a_col[t];
            for (int64_t u = p.b_row_ptr[kb]; u < p.b_row_ptr[kb + 1]; ++u) {
              const int64_t j = p.b_col[u];
              if (mark[j] != r) {
                mark[j] = r;
                if (out) out[cnt] = j;
                ++cnt;
              }
            }
          }
          if (phase == 0) p.c_counts[r] = cnt;
          else std::sort(out, out + cnt);
        } else {
          const int64_t c0 = p.c_row_ptr[r], c1 = p.c_row_ptr[r + 1];
          for (int64_t t = c0; t < c1; ++t) mark[p.c_col[t]] = t;
          T *cval = static_cast<T *>(p.c_val);
          std::memset(cval + c0 * b * b, 0, sizeof(T) * size_t(c1 - c0) * b * b);
          const T *av = static_cast<const T *>(p.a_val);
          const T *bv = static_cast<const T *>(p.b_val);
          for (int64_t t = p.a_row_ptr[r]; t < p.a_row_ptr[r + 1]; ++t) {
            const int64_t kb = p.a_col[t];
            const T *A = av + (p.a_perm ? p.a_perm[t] : t) * b * b;
            for (int64_t u = p.b_row_ptr[kb]; u < p.b_row_ptr[kb + 1]; ++u) {
              const T *Bb = bv + (p.b_perm ? p.b_perm[u] : u) * b * b;
              block_gemm<T>(b, A, Bb, cval + mark[p.b_col[u]] * b * b);
            }
          }
        }
      }
    }
  }
  if (failed) return kl::fail(KL_ERR_ALLOC, "blocksparse spgemm: out of host memory");
  return KL_OK;
}

template int spmm<float>(const kl_bs_spmm_problem &, int);
template int spmm<double>(const kl_bs_spmm_problem &, int);
template int spgemm<float>(const kl_bs_spgemm_problem &, int, int);
template int spgemm<double>(const kl_bs_spgemm_problem &, int, int);

}  // namespace KL_ISA
}  // namespace bs_cpu
}  // namespace kl
