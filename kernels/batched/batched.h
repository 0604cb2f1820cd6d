/* Batched small matrix products: D_i = alpha * A_i @ B_i + beta * C_i for stacks of products.
 *
 * Two descriptions of a batch:
 *  - uniform (kl_batched_problem): every product is m x k times k x n; product i's operands sit
 *    at a batch offset found by splitting i over up to KL_BATCHED_MAX_DIMS batch dimensions, each
 *    with its own stride per operand (0 = broadcast), as matmul broadcasting needs;
 *  - variable (kl_batched_entry table): one row per product with its own sizes, addresses and
 *    strides.  The CUDA entry point reads the table from device memory (sizes computed on the
 *    GPU never visit the host); the CPU entry point from host memory.
 * Strides are in elements and may be any value (transposed and broadcast operands need no copy).
 * beta == 0 means C is not read (it may be NULL).  Orders up to KL_BATCHED_MAX_ORDER run on one
 * thread block each (tiles of 64 beyond 64); larger ones still compute correctly, tile by tile.
 */
#ifndef KRONLINALG_BATCHED_H
#define KRONLINALG_BATCHED_H

#include <stdint.h>

#include "kronlinalg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_BATCHED_MAX_DIMS 8
#define KL_BATCHED_MAX_ORDER 256

typedef struct kl_batched_problem {
  int64_t m, n, k;
  int32_t ndim; /* batch dimensions, 0..KL_BATCHED_MAX_DIMS; product count = prod(shape) */
  int64_t shape[KL_BATCHED_MAX_DIMS];
  int64_t a_bs[KL_BATCHED_MAX_DIMS], b_bs[KL_BATCHED_MAX_DIMS];
  int64_t c_bs[KL_BATCHED_MAX_DIMS], d_bs[KL_BATCHED_MAX_DIMS];
  const void *a; /* A[r, c] at a + batch offset + r*a_rs + c*a_cs */
  int64_t a_rs, a_cs;
  const void *b;
  int64_t b_rs, b_cs;
  const void *c; /* read only when beta != 0 */
  int64_t c_rs, c_cs;
  void *d; /* the result; may equal c when both have the same layout */
  int64_t d_rs, d_cs;
  double alpha, beta;
} kl_batched_problem;

/* One product of a variable-size batch: sizes, then (address, row stride, column stride) of
 * A, B, C (address 0 when beta == 0) and D.  15 int64 words; addresses as integers. */
typedef struct kl_batched_entry {
  int64_t m, n, k;
  int64_t a, a_rs, a_cs;
  int64_t b, b_rs, b_cs;
  int64_t c, c_rs, c_cs;
  int64_t d, d_rs, d_cs;
} kl_batched_entry;

/* dtype codes: the shared table (kronlinalg/common/dtypes.py KERNEL_CODE); the CPU computes
 * float32 and float64 only (half types are converted to float32 by the caller). */
enum kl_batched_dtype { KL_BATCHED_F32 = 0, KL_BATCHED_F64 = 1, KL_BATCHED_F16 = 2,
                        KL_BATCHED_BF16 = 3 };

/* CPU: OpenMP over products (num_threads <= 0: OpenMP's default; small batches stay on one
 * thread).  Register-blocked micro-kernel on packed panels. */
int kl_batched_matmul_cpu(const kl_batched_problem *p, int dtype, int num_threads);
int kl_batched_matmul_cpu_var(const kl_batched_entry *table, int64_t count, double alpha,
                              double beta, int dtype, int num_threads);

/* CUDA kernel arrangements (KAMI): 1D = the warps of a product split its rows (warp i keeps
 * A_i and C_i, B's k-panels are broadcast through shared memory); 2D = a 2 x 2 warp grid (A's
 * row panels and B's column panels through shared memory).  KL_BATCHED_AUTO: the launcher's
 * choice (1D). */
enum kl_batched_algo { KL_BATCHED_AUTO = 0, KL_BATCHED_1D = 1, KL_BATCHED_2D = 2 };

/* The CUDA kernel configuration for a problem, as the launcher would pick it (pure host code,
 * also in CPU-only builds, so the cost model can ask it): tile rows x columns per work item,
 * k-panel width, warps per item, items (products or tiles) per block, and the tensor-core
 * instruction (0 CUDA cores, 1 DMMA m8n8k4 -- on sm_90 the launcher runs 64 x 64 tiles on
 * m16n8k8 instead --, 2 HMMA m16n8k16, 3 3xTF32 m16n8k8).  max(m, n) of a
 * variable batch: pass its largest order (or KL_BATCHED_MAX_ORDER when unknown). */
typedef struct kl_batched_config {
  int32_t tile_m, tile_n, tile_k, warps, items_per_block, mma, dims;
  int32_t blocks_per_sm; /* the launch bounds' resident blocks an SM */
  /* kl_batched_cuda_config (1D / auto): the tiny-product kernel a stack of these sizes takes when
   * its products are each one row-major block a fixed stride apart, 16-byte aligned: 0 none, 1
   * the generic variant, 2 the square orders' fixed one (float64: compute capability 9.0) */
  int32_t tiny;
  /* ... and whether it takes the thin-product kernel (a short k: low-rank products; same layout,
   * every row a whole number of 16-byte pieces, float16 / bfloat16 / 3xTF32 float32): 0 or 1 */
  int32_t thin;
} kl_batched_config;
int kl_batched_cuda_config(int64_t m, int64_t n, int64_t k, int dtype, int algo, int fp32_mode,
                           kl_batched_config *out);

/* CUDA: enqueues on `stream` (cudaStream_t; 0 = legacy default) without synchronising.
 * The variable form reads `count` kl_batched_entry rows from device memory at `table`;
 * max_order bounds max(m, n) of every row (it picks the tile; KL_BATCHED_MAX_ORDER is safe);
 * it allocates an 8-byte work counter on the stream (cudaMallocAsync, freed after the kernel). */
int kl_batched_matmul_cuda(const kl_batched_problem *p, int dtype, int algo, void *stream);
int kl_batched_matmul_cuda_var(const void *table, int64_t count, int64_t max_order, double alpha,
                               double beta, int dtype, int algo, void *stream);
/* The variable form's table built on the GPU (count x 15 int64 at `table`, device memory) from
 * a size table there: `sizes` count x ncols int64, row-major; ncols 3 (m, n, k: the products
 * packed one after another, offsets by exclusive sums) or 6 (m, n, k and the offsets of A, B,
 * D in elements).  a, b, c, d: the buffers' device addresses and lengths in elements (c may be
 * NULL); elem: bytes an element.  Rows whose output or C leaves its buffer get m = 0, rows whose
 * A or B leaves its buffer k = 0.  Enqueued on `stream`; no host synchronisation. */
int kl_batched_var_table_cuda(const int64_t *sizes, int ncols, int64_t count, const void *a,
                              int64_t a_len, const void *b, int64_t b_len, const void *c,
                              int64_t c_len, void *d, int64_t d_len, int elem, int64_t *table,
                              void *stream);
/* float32 on the GPU: 3xTF32 tensor cores (KL_BATCHED_FP32_TF32X3, the default) or IEEE FMAs
 * (KL_BATCHED_FP32_IEEE; the default when KRONLINALG_BATCHED_FP32=ffma).  Sets the mode when it
 * is one of these (-1 only queries); returns the previous one.  In CPU builds: query only. */
enum kl_batched_fp32_mode { KL_BATCHED_FP32_TF32X3 = 0, KL_BATCHED_FP32_IEEE = 1 };
int kl_batched_float32_mode(int mode);
/* 0 if a CUDA device of compute capability >= 8.0 is usable, else KL_ERR_NO_DEVICE. */
int kl_batched_cuda_device_check(void);
/* The device this thread's launches go to (cudaGetDevice), or -1: a replay checks it against
 * its arrays' device before enqueueing. */
int kl_batched_cuda_current_device(void);

#ifdef __cplusplus
}
#endif

#endif
