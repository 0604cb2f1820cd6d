/* kronlinalg.tensor's kernel: the MTTKRP of a tensor's first or last mode in one pass over the
 * tensor, the Khatri-Rao rows of the other modes formed on chip (never in global memory),
 * float32 storage on TF32 tensor cores with float32 sums.
 *
 * The reduction index of the contraction is p = a * ib + b over the other modes (C order), and
 * the Khatri-Rao row W[p, r] = U[a, r] * V[b, r]:
 *   last = 1: X viewed (red, m) row-major:  out[r, k] = alpha * sum_p X[p, k] W[p, r]
 *   last = 0: X viewed (m, red) row-major:  out[r, i] = alpha * sum_p X[i, p] W[p, r]
 * U (ia x 64) and V (ib x 64) are row-major and zero in the columns r >= rank.  Requirements
 * (the caller checks; KL_ERR_INVALID otherwise): rank <= 64, ib >= 32 (a block of 32
 * consecutive p spans at most two a), the row length of X's view a multiple of 4 floats and X,
 * U, V 16-byte aligned.  The sum over p is split over `splits` thread blocks per output tile
 * (kl_tensor_mttkrp_plan); their partial sums go to `part` and one more launch adds them in a
 * fixed order (deterministic).
 *
 * dtype 1 / 2 (float16 / bfloat16 storage of X, tensor_half_cuda.cu): the first mode only
 * (last = 0), X's elements in the half type, U and V float32 as above; W is rounded to the half
 * type (the caller scales U and V so that it fits float16's range), products on m16n8k16 tensor
 * cores with float32 sums.  Requires ib >= 64 (a stage of 64 p spans at most two a) and red a
 * multiple of 8 halves; variant 2 (a block a 64-wide chunk of b and a range of a: V staged
 * once per block) also ib a multiple of 8 and the plan's splits.  dscale (device, may be NULL): one float the output is multiplied by
 * besides alpha (the inverse of U's and V's scales, without a host synchronization). */
#ifndef KRONLINALG_TENSOR_H
#define KRONLINALG_TENSOR_H

#include <stdint.h>

#include "kronlinalg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_TENSOR_MAX_RANK 64
#define KL_TENSOR_MIN_INNER 32
#define KL_TENSOR_MIN_INNER_HALF 64

typedef struct {
  int32_t last;
  int32_t variant;                 /* float32: 0 (4 warps of 64 x 32 outputs), 1 (8 warps of
                                      32 x 32); half: 0 (128 rows a block), 1 (256), 2 (b-major) */
  int32_t dtype;                   /* X's type: 0 float32, 1 float16, 2 bfloat16 */
  int64_t m, red, ia, ib;
  int32_t rank;
  const void *x;
  const float *u, *v;
  float *part;                     /* splits * 64 * mpad floats (kl_tensor_mttkrp_plan) */
  int32_t splits;
  float *out;                      /* element (r, i) at out[r * out_stride_r + i * out_stride_m] */
  int64_t out_stride_r, out_stride_m;
  float alpha;
  const float *dscale;
  /* the Gram scale (half storage; gram_v non-NULL, dscale NULL): U and V unscaled, gram_u /
   * gram_v their R x R Gram matrices (U^T U, V^T V; gram_u NULL where U is all ones); the
   * kernel bounds their largest magnitudes by the square roots of the Grams' largest diagonal
   * entries, rounds W * 2^8 / (su sv) and writes su sv / 2^8 to scale_out[0], which the
   * reduction multiplies the output by (no launch before the kernel, no host synchronization) */
  const float *gram_u, *gram_v;
  float *scale_out;
} kl_tensor_mttkrp;

/* The split of the sum over p that fills the GPU once (one wave of per_sm blocks a
 * multiprocessor), and the padded output length mpad. */
int kl_tensor_mttkrp_plan(int32_t last, int32_t variant, int32_t dtype, int64_t m, int64_t red,
                          int64_t ib, int32_t *splits, int64_t *mpad, int32_t *per_sm);
int kl_tensor_mttkrp_cuda(const kl_tensor_mttkrp *c, void *stream);
int kl_tensor_cuda_check(void);

/* CP-ALS's half intermediate (tensor_half_cuda.cu): Y (r, j, k) row-major in float16 (dtype 1)
 * or bfloat16 (2), contracted with the float32 rank-first factor f, float32 sums and output:
 *   leading = 0: out[r, j] = sum_k Y[r, j, k] f[r, k]   (f: r x k)
 *   leading = 1: out[r, k] = sum_j f[r, j] Y[r, j, k]   (f: r x j)
 * k a multiple of 8, Y 16-byte aligned, everything contiguous.  The sums are multiplied by
 * alpha and, where scale is non-NULL, by the device float scale[0] (CP-ALS's pending scale of
 * the intermediate, applied here instead of by a launch of its own). */
typedef struct {
  int32_t dtype;
  int32_t leading;
  int64_t r, j, k;
  const void *y;
  const float *f;
  float *out;
  float alpha;
  const float *scale;
} kl_tensor_half_contract;

int kl_tensor_half_contract_cuda(const kl_tensor_half_contract *c, void *stream);

/* CP-ALS's factor update (solve_cuda.cu): out = (V + rho I)^-1 rhs with V the Hadamard product
 * of `count` R x R Gram matrices (row-major, contiguous, symmetric: the lower half is read) and
 * rho = eps * max(max diag V, 1e-30); rhs and out (R, n) row-major with row strides ld_rhs and
 * ld_out (out may not overlap rhs).  L D L^T in shared memory, pivots raised to at least rho;
 * NaN and infinity pass through.  dtype 0: float32, 1: float64.
 * phase 0: all in one launch; 1: the Hadamard product, ridge and factorization only, written
 * to ws (R * R + R elements of dtype; rhs, out and n unused); 2: the solve from ws (grams
 * unused): CP-ALS factorizes a mode's system on a side stream during the tensor pass that
 * precedes its update.  phase 3: as 1, then V's inverse (R * R, row-major) written to ws in
 * place of the factor, and ws[R * R] = 0; 4: out = that inverse times rhs (grams unused): a
 * product instead of two substitutions after the pass; ws[R * R] = max |out| (NaN if any). */
#define KL_TENSOR_SOLVE_MAX_GRAMS 8

typedef struct {
  int32_t dtype;
  int32_t variant;                 /* 1: the factorization's loads ahead of its stores; 0: not */
  int32_t rank;
  int32_t count;
  const void *grams[KL_TENSOR_SOLVE_MAX_GRAMS];
  const void *rhs;
  void *out;
  int64_t n, ld_rhs, ld_out;
  double eps;
  int32_t phase;
  void *ws;
} kl_tensor_spd_solve;

int kl_tensor_spd_solve_cuda(const kl_tensor_spd_solve *c, void *stream);

/* The half path's operand preparation (scale_cuda.cu), one block (without gram): in (rows, n) float32
 * row-major; scale non-NULL: s = max(max |in|, 1e-30) written to scale[0] and the copy
 * divided by it; pad64: out (n, 64) float32 with out[i][r] = in[r][i] (zeros for r >= rows,
 * rows <= 64), else out (rows, n) in dtype_out (0 float32, 1 float16, 2 bfloat16). */
typedef struct {
  int32_t dtype_out;
  int32_t pad64;
  int32_t rows;
  int64_t n;
  const float *in;
  void *out;
  float *scale;
  /* gram non-NULL (in's Gram matrix in * in^T, rows x rows; not pad64): s = the square root
   * of its largest diagonal entry (at least 1e-30), a bound of max |in| that needs no pass
   * over in, so that many blocks share the copy (one launch of a few microseconds); largest
 * non-NULL (and gram NULL): s = max(largest[0], 1e-30), a largest magnitude known already
 * (CP-ALS's factor update writes it), the same grid of blocks */
  const float *gram;
  const float *largest;
} kl_tensor_scaled_copy;

int kl_tensor_scaled_copy_cuda(const kl_tensor_scaled_copy *c, void *stream);

/* CP-ALS's fit terms (fit_cuda.cu), a block a rank index: out[0] = sum_ij w_i (o grams)_ij w_j
 * and out[1] = sum_r w_r sum_i y[r, i] f[r, i] (y, f: rank x n row-major, contiguous), float64
 * sums in a fixed order; dtype 0: float32, 1: float64 (grams, w, y, f).  work: 2 * rank + 1
 * doubles, the last one zero before the first call (a ticket counter the kernel leaves at
 * zero).  gram (non-NULL, dtype's type, rank x rank): f's own Gram matrix f f^T is formed too
 * (block r its row r, in a fixed order: symmetric bit for bit), written there and taken as the
 * last factor of the Hadamard product after the `count` given ones (count + 1 <= 8): CP-ALS's
 * last mode needs no Gram launch of its own before its fit. */
typedef struct {
  int32_t dtype;
  int32_t rank;
  int32_t count;
  const void *grams[KL_TENSOR_SOLVE_MAX_GRAMS];
  const void *w, *y, *f;
  int64_t n;
  double *out;
  double *work;
  void *gram;
} kl_tensor_fit_terms;

int kl_tensor_fit_terms_cuda(const kl_tensor_fit_terms *c, void *stream);

/* Shard mode (copy_cuda.cu): `height` rows of `width` bytes, `src_pitch` bytes apart in src
 * (pinned host or device memory), to dst rows `dst_pitch` apart, on `stream` (asynchronous). */
int kl_tensor_copy_rows(void *dst, int64_t dst_pitch, const void *src, int64_t src_pitch,
                        int64_t width, int64_t height, void *stream);

#ifdef __cplusplus
}
#endif

#endif
