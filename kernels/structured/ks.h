/* Kronecker-sparse matrix multiplication: launch functions shared by the CPU and CUDA kernels.
 *
 * A factor K of pattern (a, b, c, d) has support I_a ⊗ 1_{b×c} ⊗ I_d: value K[i, k, l, j] sits at
 * row i·b·d + k·d + j and column i·c·d + l·d + j, so K is (a·b·d) × (a·c·d).  One call computes
 *
 *   batch_first:  Y = X Kᵀ   with X (B, a·c·d) and Y (B, a·b·d), rows of length x_ld / y_ld apart
 *   batch_last:   Y = K X    with X (a·c·d, B) and Y (a·b·d, B), rows x_ld / y_ld apart
 *
 * in one pass over X and Y: the work is split along the (i, j) ∈ [a]×[d] blocks, each a small GEMM
 * over the batch between the columns {i·c·d + l·d + j} of X and the rows {i·b·d + k·d + j} of Y, so
 * no permuted copy of X or Y is ever made.  The batch axis (batch_last) or the feature axis
 * (batch_first) must be contiguous; K may have any strides.  Y is written, never read, and must not
 * overlap X.  Chains K1…KL are one call per factor.
 */
#ifndef KRONLINALG_KS_H
#define KRONLINALG_KS_H

#include <stdint.h>

#include "kronlinalg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kl_ks_layout { KL_KS_BATCH_FIRST = 0, KL_KS_BATCH_LAST = 1 };

/* Element types.  The CPU kernel takes float32/float64; the CUDA kernel float32 and the half types
 * (float16/bfloat16 in and out, float32 accumulation on tensor cores). */
enum kl_ks_dtype { KL_KS_FLOAT32 = 0, KL_KS_FLOAT64 = 1, KL_KS_FLOAT16 = 2, KL_KS_BFLOAT16 = 3 };

typedef struct kl_ks_problem {
  int64_t a, b, c, d;  /* pattern, all >= 1 */
  int64_t batch;       /* B >= 0 */
  int32_t layout;      /* kl_ks_layout */
  const void *values;  /* K[i, k, l, j] at values + i*vs[0] + k*vs[1] + l*vs[2] + j*vs[3] */
  int64_t vs[4];       /* in elements */
  const void *x;       /* batch_first: X[n, col] at x + n*x_ld + col; batch_last: x + col*x_ld + n */
  int64_t x_ld;
  void *y;             /* likewise with y_ld */
  int64_t y_ld;
} kl_ks_problem;

/* CPU (OpenMP over (i, j) blocks and batch tiles); num_threads <= 0: OpenMP's default. */
int kl_ks_matmul_cpu(const kl_ks_problem *p, int dtype, int num_threads);

/* CUDA: enqueues on `stream` (a cudaStream_t, 0 = legacy default) without synchronising.
 * x, y and values are device pointers. */
int kl_ks_matmul_cuda(const kl_ks_problem *p, int dtype, void *stream);
/* The device this thread's launches go to (cudaGetDevice), or -1: a replay checks it against
 * its arrays' device before enqueueing. */
int kl_ks_cuda_current_device(void);

/* The tile kl_ks_matmul_cuda would launch for *p (its pattern, batch, layout, leading dimensions
 * and pointers' alignment; the pointers may be null) with `dtype`, in the current float32 mode
 * (kl_ks_float32_mode): the same dispatch, run in a probe mode that launches, allocates and
 * synchronises nothing.  out = {TN, TK, TL, TJ, kind}: batch rows, outputs k, inputs l per
 * chunk and j of one tile, and the kernel, KL_KS_TILE_*.  units > 0: a device of that many SMs
 * without wgmma (no GPU needed); units < 0: -units SMs on an sm_90 (wgmma shapes where the build
 * has sm_90a code); units == 0: the current device (its SMs and compute capability). */
enum kl_ks_tile_kind {
  KL_KS_TILE_SIMPLE = 0,   /* one-stage kernels: float32 CUDA-core FFMA, half-type mma.sync */
  KL_KS_TILE_PIPE = 1,     /* the pipelined tensor-core kernel (float32 as 3xTF32), wide or not */
  KL_KS_TILE_NATURAL = 2,  /* the natural-layout kernel (half types batch_first, d = 2, 3) */
  KL_KS_TILE_WGMMA = 3     /* the pipelined kernel's warpgroup-MMA shapes (sm_90) */
};
int kl_ks_cuda_tile(const kl_ks_problem *p, int dtype, int units, int64_t out[5]);

/* The values (p->a..d, p->values, contiguous) copied to out as (a, d, b, c) contiguous, enqueued
 * on `stream` (the "strided" algorithm's GEMM operand). */
int kl_ks_transpose_values_cuda(const kl_ks_problem *p, void *out, int dtype, void *stream);

/* The values (contiguous) as the a dense diagonal blocks of the factor, (a, b·d, c·d) contiguous:
 * out[i][k·d + j][l·d + j'] = values[i, k, l, j] where j == j', else 0; enqueued on `stream` (the
 * "block_dense" algorithm's GEMM operand). */
int kl_ks_dense_slabs_cuda(const kl_ks_problem *p, void *out, int dtype, void *stream);

/* The "strided" algorithm's planar copies for batch_first with d > 1, enqueued on `stream`.
 * split != 0: src holds `batch` rows of pitch `ld` (elements), each a x n x d (the blocks
 * interleaved as (i, l, j)); dst receives them as a contiguous (a, d, batch, n) array.
 * split == 0: the reverse, src (a, d, batch, n) contiguous into dst's rows of pitch `ld`. */
int kl_ks_planar_cuda(int split, int64_t batch, int64_t a, int64_t n, int64_t d, const void *src,
                      void *dst, int64_t ld, int dtype, void *stream);

/* How the CUDA kernel computes float32: on tensor cores as three TF32 products per product
 * (KL_KS_FP32_TF32X3, the default; relative error within float32's test tolerance) or with
 * CUDA-core FMAs (KL_KS_FP32_IEEE; also the default when KRONLINALG_KS_FP32=ffma).  Sets the mode
 * for the whole process and returns the previous one; a negative mode only asks. */
enum kl_ks_fp32_mode { KL_KS_FP32_TF32X3 = 0, KL_KS_FP32_IEEE = 1 };
int kl_ks_float32_mode(int mode);

#ifdef __cplusplus
}
#endif

#endif
