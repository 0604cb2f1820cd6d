/* Block-sparse matrices with dense b x b blocks (row_ptr / col_idx / val, KAMI's RowPtr,
 * ColBlkIdx, Val): sparse x dense (SpMM) and sparse x sparse (SpGEMM), CPU and CUDA.
 * Index arrays are int64; val (nnz_blocks, b, b) row-major blocks; dense operands row-major
 * with a leading dimension.  Dtype codes: kronlinalg/common/dtypes.py KERNEL_CODE. */
#ifndef KRONLINALG_BLOCKSPARSE_H
#define KRONLINALG_BLOCKSPARSE_H

#include <stdint.h>

#include "kronlinalg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C = alpha * A @ B + beta * C, A m x k block-sparse (block rows in row order: block t of row
 * r is t in [row_ptr[r], row_ptr[r+1]), column col_idx[t], values val[perm ? perm[t] : t]),
 * B k x n, C m x n.  With beta == 0, C is not read.
 * CUDA: items (3 int64 per item: row, first block, end block) are the work list (rows split
 * into pieces where heavy); a negative row -(r+1) marks a piece of a split row, which adds
 * its part atomically; accumulate != 0 means C already holds beta * C (then every item adds
 * alpha * its part).  CPU ignores items. */
typedef struct {
  int64_t m, k, n;
  int32_t b;
  const int64_t *row_ptr;
  const int64_t *col_idx;
  const int64_t *perm;
  const void *val;
  const void *B;
  int64_t ldb;
  void *C;
  int64_t ldc;
  double alpha, beta;
  const int64_t *items;
  int64_t nitems;
  int32_t accumulate;
  /* the 2D kernel: tile = P, the block rows of a panel (kl_bs_spmm2d_rows), tile_rows =
   * ceil(R / P) panels; tile_row_ptr (tile_rows + 1) indexes tiles, the steps: 1 + P int64 per
   * block column present in a panel, by panel then column (the column, then the storage
   * position in val of each of the panel's block rows' block in it, -1 where none).  row_idx
   * unused; so are row_ptr, col_idx and perm. */
  int32_t tile;
  int64_t tile_rows;
  const int64_t *tile_row_ptr;
  const int64_t *tiles;
  const int64_t *row_idx;
} kl_bs_spmm_problem;

/* SpGEMM C = A @ B of block-sparse matrices (A R x K blocks, B K x ncols blocks), in three
 * phases: 0 counts the blocks of each row of C into c_counts (R entries); 1 writes each row's
 * sorted block columns into c_col at c_row_ptr (the caller scanned the counts); 2 computes
 * c_val (c_row: the row of each block of C, CUDA only).  perms as in SpMM (NULL: identity). */
typedef struct {
  int64_t R, ncols;
  int32_t b;
  const int64_t *a_row_ptr, *a_col, *a_perm;
  const void *a_val;
  const int64_t *b_row_ptr, *b_col, *b_perm;
  const void *b_val;
  int64_t *c_counts;
  const int64_t *c_row_ptr;
  int64_t *c_col;
  const int64_t *c_row;
  int64_t c_nnz;
  void *c_val;
} kl_bs_spgemm_problem;

int kl_bs_spmm_cpu(const kl_bs_spmm_problem *p, int dtype, int num_threads);
int kl_bs_spgemm_cpu(const kl_bs_spgemm_problem *p, int phase, int dtype, int num_threads);

int kl_bs_spmm_cuda(const kl_bs_spmm_problem *p, int dtype, void *stream);
/* The 2D kernel (b = 16): a CTA per panel of P block rows stages each B block row the panel
 * meets once, and every block row of the panel reuses it (see the fields above). */
int kl_bs_spmm2d_cuda(const kl_bs_spmm_problem *p, int dtype, void *stream);
/* The panel height P the 2D kernel takes for (dtype, n); 0: none. */
int kl_bs_spmm2d_rows(int dtype, int64_t n);
int kl_bs_spgemm_cuda(const kl_bs_spgemm_problem *p, int phase, int dtype, void *stream);
/* The right-hand-side tile width the CUDA SpMM kernel takes for (dtype, b, n); 0 when no
 * kernel runs that (dtype, b). */
int kl_bs_spmm_cuda_tile_n(int dtype, int b, int64_t n);
/* The float32 mode (0: 3xTF32, 1: IEEE; anything else only queries); the previous mode. */
int kl_bs_float32_mode(int mode);
/* Which CUDA kernel runs b = 16 SpMM with more than 32 RHS columns: 0 the panel kernel (the
 * default), 1 the warp-per-row kernel, 2 the panel kernel with 128-column half-precision tiles;
 * sets it when 0..2 (anything else only queries); the previous. */
int kl_bs_spmm_variant(int variant);
/* The half-precision panel kernel's options (bit 0: C staged through shared memory for 16-byte
 * stores; bit 1: A read with an L2 evict-first policy; bit 3: the persistent form where it
 * applies; bits 4-7: the 256-column tile's pipeline depth, 4, 8 or 12; bits 8-15: a cap on the
 * persistent grid, for tests; bit 2: the strip-major grid where X is larger than the L2,
 * every mode; bit 16: that grid whatever X's size), for comparisons; sets them when
 * opts >= 0; the previous.  The first use reads KRONLINALG_BS_PANEL. */
int kl_bs_spmm_panel_opts(int opts);
/* The 2D kernel's options (bit 0: C staged for 16-byte stores, half precision; bit 1: B
 * fragments loaded once per step, all but IEEE FP32; bit 2: the strip-major grid where X is
 * larger than the L2; bit 16: that grid whatever X's size; bits 4-7: the 8-row panels'
 * pipeline depth, 10 (half) or 5 (4-byte types) when at least that; bit 8: half precision's
 * 8-row panels with 4 warps; bit 9: FP64's 4-row panels with 8 warps, more than 64 columns);
 * sets them when opts >= 0; the previous. */
int kl_bs_spmm2d_opts(int opts);
int kl_bs_cuda_device_check(void);

/* Batched SpMM over matrices that share one block pattern: C[i] = alpha * A[i] @ X[i] for
 * i < batch.  A[i] is m x k with 16 x 16 blocks, the pattern row_ptr / col_idx (row order,
 * sorted columns) and the values val + i * nnzb * 256 (row-major blocks, edge padding zero);
 * X[i] (k x n, leading dimension ldx) starts at X + i * x_stride, C[i] (m x n, ldc) at
 * C + i * c_stride (elements).  CUDA, FP16/BF16 (dtype 2/3), m, k <= 256: n, ldx and x_stride
 * multiples of 8, X and val 16-byte aligned. */
typedef struct {
  int64_t batch, m, k, n, nnzb;
  const int64_t *row_ptr;
  const int64_t *col_idx;
  const void *val;
  const void *X;
  int64_t ldx, x_stride;
  void *C;
  int64_t ldc, c_stride;
  double alpha;
} kl_bs_batched_problem;

int kl_bs_batched_cuda(const kl_bs_batched_problem *p, int dtype, void *stream);
/* The RHS tile (64, 32, 16 or, n <= 8, 8 columns) the batched kernel takes for these sizes; 0:
 * none runs them (another dtype, an order over 256, or the blocks and the X tile overflow shared
 * memory).  The kernel takes n = 4 itself on the 8-column tile, else n a multiple of 8. */
int kl_bs_batched_cuda_tile_n(int dtype, int64_t m, int64_t k, int64_t n, int64_t nnzb);
/* The widest RHS tile the batched kernel may take (64 by default; 16 or 32 to compare), set
 * when cap is 16, 32 or 64 (anything else only queries); the previous. */
int kl_bs_batched_tile_cap(int cap);
/* The batched kernel's pipeline: 0 (default) the depth (2-4 stages) that keeps the most bytes in
 * flight per SM; 1 two stages (the first version, to compare).  Sets it when 0 or 1 (anything
 * else only queries); the previous. */
int kl_bs_batched_pipeline(int pipeline);
/* Whether the batched kernel stages C through shared memory for 16-byte stores (1, the default)
 * or stores its fragments directly (0, the first version); sets it when 0 or 1; the previous. */
int kl_bs_batched_c_stage(int stage);
/* The batched kernel's forms for narrow right-hand sides, bits: 1 the 8-column tile for n <= 8,
 * 2 bulk (TMA) loads where they apply (compute capability 9.0, n = 8 or 16, X's rows packed);
 * 3 (both) the default.  Sets them when 0-3 (anything else only queries); the previous. */
int kl_bs_batched_narrow(int forms);

#ifdef __cplusplus
}
#endif

#endif
