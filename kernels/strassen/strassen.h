/* strassen_matmul's kernels: the element-wise passes of the MSMES schedule and the batched leaf
 * GEMM whose epilogue adds its product into a table of signed C blocks.  The schedule itself
 * (which blocks, in which order) is planned in Python (kronlinalg/planner/costs/strassen.py);
 * these entry points run one launch of it.  Matrices are row-major with unit column stride:
 * element (i, j) of a block at p with leading dimension ld is p[i * ld + j]. */
#ifndef KRONLINALG_STRASSEN_H
#define KRONLINALG_STRASSEN_H

#include <stdint.h>

#include "kronlinalg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_STRASSEN_MAX_BATCH 16   /* leaf products in one launch (2^levels, levels <= 4) */
#define KL_STRASSEN_MAX_TARGETS 16 /* signed C blocks one leaf adds into */

/* Passes over `count` operand pairs: a[i] is a (2 mh) x (2 kh) block of A (quadrants
 * A0 A1 / A2 A3), b[i] a (2 kh) x (2 nh) block of B.  stage 1: S1; 2: S3+S4; 3: S6+S7;
 * 4 (CUDA, count 1): S1 out of place, the default mode's private copy fused with S1: reads
 * src_a (leading dimension lds_a) and src_b, writes all four quadrants of a[0] and b[0];
 * 5 (CUDA, count 5): the five operand sums of Strassen's original products from src_a's
 * quadrants into the mh x kh blocks a[0..4] (A0+A3, A2+A3, A0+A1, A2-A0, A1-A3; leading
 * dimension lda) and from src_b's into b[0..4] (B0+B3, B1-B3, B2-B0, B0+B1, B2+B3);
 * 6 (CUDA, count 4): the four operand sums of Winograd's form, likewise: a[0..3] = S1..S4
 * (A2+A3, S1-A0, A0-A2, A1-S2), b[0..3] = T1..T4 (B1-B0, B3-T1, B3-B1, T2-B2);
 * 7 (CUDA, count 1): Winograd's combination in C: a[0] is C's core (leading dimension lda,
 * mh x nh quadrants) holding P1, P6, P7, P5; afterwards P1, U2+P5, U2+P7, U2+P7+P5 with
 * U2 = P1+P6 (kh, b and ldb unused). */
typedef struct {
  int32_t stage;
  int32_t count;
  int64_t mh, kh, nh;
  int64_t lda, ldb;
  void *a[KL_STRASSEN_MAX_BATCH];
  void *b[KL_STRASSEN_MAX_BATCH];
  const void *src_a, *src_b;
  int64_t lds_a, lds_b;
} kl_strassen_pass;

/* One leaf product X (m x k) . Y (k x n), added into its targets:
 * C_t = (first ? beta C_t : C_t) + sign_t alpha X Y, sign_t = bit t of `negative` ? -1 : +1.
 * With first and beta == 0, C_t is not read (BLAS convention). */
typedef struct {
  const void *x;
  const void *y;
  int32_t ntargets;
  uint32_t negative;
  void *c[KL_STRASSEN_MAX_TARGETS];
  uint32_t fresh; /* CUDA target update: bit t, target t's first write (as `first`) */
} kl_strassen_leaf;

typedef struct {
  int32_t count;     /* products in this launch */
  int32_t first;     /* the first write of every target (beta applies) */
  int64_t m, n, k;
  int64_t ldx, ldy, ldc;
  double alpha, beta;
  kl_strassen_leaf leaf[KL_STRASSEN_MAX_BATCH];
} kl_strassen_leaves;

/* A leaf product whose operands are signed sums of source blocks (Strassen reloaded: the sums
 * are formed while the leaf loads its tiles, never stored): X = sum_s (-1)^(bit s of xneg) x[s]
 * over nx sources, Y likewise; added into its targets with per-target signs, beta applied where
 * bit t of `fresh` is set (the first write of that target).  FP64 only. */
#define KL_STRASSEN_MAX_SOURCES 4
typedef struct {
  const void *x[KL_STRASSEN_MAX_SOURCES];
  const void *y[KL_STRASSEN_MAX_SOURCES];
  int32_t nx, ny;
  uint32_t xneg, yneg;
  int32_t ntargets;
  uint32_t negative;
  uint32_t fresh;
  void *c[KL_STRASSEN_MAX_TARGETS];
} kl_strassen_sum_leaf;

typedef struct {
  int32_t count;
  int64_t m, n, k;
  int64_t ldx, ldy, ldc; /* ldx: every x source's, ldy: every y source's */
  double alpha, beta;
  kl_strassen_sum_leaf leaf[KL_STRASSEN_MAX_BATCH];
} kl_strassen_sum_leaves;

/* dtype: KL codes (0 float32, 1 float64; others are KL_ERR_INVALID). */
int kl_strassen_pass_cpu(const kl_strassen_pass *p, int dtype, int num_threads);
/* The CPU leaf: x of each leaf is the product M itself (formed by BLAS), m x n with leading
 * dimension ldx; adds it into the targets. */
int kl_strassen_targets_cpu(const kl_strassen_leaves *p, int dtype, int num_threads);

int kl_strassen_pass_cuda(const kl_strassen_pass *p, int dtype, void *stream);
int kl_strassen_leaf_cuda(const kl_strassen_leaves *p, int dtype, void *stream);
/* The sum leaves (dtype 1 only; needs sm_90). */
int kl_strassen_sum_leaf_cuda(const kl_strassen_sum_leaves *p, int dtype, void *stream);
/* As kl_strassen_targets_cpu, on the GPU (strassen_cublas: M from cuBLAS). */
int kl_strassen_targets_cuda(const kl_strassen_leaves *p, int dtype, void *stream);
/* The leaf kernel's output tile for dtype: tile[0] rows x tile[1] columns. */
int kl_strassen_cuda_leaf_tile(int dtype, int *tile);
/* Which FP64/FP32 leaf kernel runs: 0 the own kernel, 1-2 a CUTLASS mainloop
 * (KRONLINALG_STRASSEN_LEAF; FP64 on sm_90 in a build with CUTLASS only). */
int kl_strassen_cuda_leaf_kernel(int dtype);
int kl_strassen_cuda_check(void); /* KL_OK, or KL_ERR_NO_DEVICE with a message */

#ifdef __cplusplus
}
#endif

#endif
