/* Kronecker-matrix multiplication: launch functions shared by the CPU and CUDA kernels.
 *
 * Computes, for every row m of X, Y[m, :] = alpha * X[m, :] @ (F_0 ⊗ … ⊗ F_{n-1}) + beta * Y[m, :]
 * with the sliced multiply of FastKron: factors are applied last to first, each output element is
 * one P_i-slice of the current row times one factor column, written straight to its final index.
 * Rows are addressed in two levels, m = (m1, m2), so a batched left product (kron @ X, seen as
 * Xᵀ @ kron(Fᵀ)) needs no transpose copy: the caller passes Xᵀ's strides and the factors' transposes
 * as strides.  beta == 0 means Y is not read (it may hold garbage).
 */
#ifndef KRONLINALG_KRON_H
#define KRONLINALG_KRON_H

#include <stdint.h>

#include "kronlinalg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FLOAT16 / BFLOAT16: CUDA only (storage in half precision, products accumulated in float32). */
enum kl_dtype { KL_FLOAT32 = 0, KL_FLOAT64 = 1, KL_FLOAT16 = 2, KL_BFLOAT16 = 3 };

typedef struct kl_kron_problem {
  int64_t m1, m2;              /* row index m = m1 * m2 (outer, inner); either may be 0 */
  int32_t nfactors;            /* >= 1 */
  const int64_t *P, *Q;        /* factor i is P[i] x Q[i] */
  const void *const *F;        /* factor data pointers */
  const int64_t *F_rs, *F_cs;  /* factor row / column strides, in elements */
  const void *x;               /* X[m1, m2, k] at x + m1*x_rs1 + m2*x_rs2 + k*x_es */
  int64_t x_rs1, x_rs2, x_es;
  void *y;                     /* Y[m1, m2, l] likewise */
  int64_t y_rs1, y_rs2, y_es;
  double alpha, beta;
  int32_t max_fused;           /* most factors fused per memory pass; 0 = kernel's own choice */
} kl_kron_problem;

/* CPU (OpenMP; num_threads <= 0: OpenMP's default).  Scratch for intermediates between fused
 * passes is allocated internally. */
int kl_kron_matmul_cpu(const kl_kron_problem *p, int dtype, int num_threads);

/* Number of memory passes the CPU kernel makes for this problem (for the cost model); with
 * `counts` (room for `max_counts`, or NULL), the number of factors of each pass, in the order
 * they run (the first takes the last factors). */
int kl_kron_cpu_pass_counts(const kl_kron_problem *p, int dtype, int *counts, int max_counts);

/* CUDA: enqueues on `stream` (a cudaStream_t, 0 = legacy default) without synchronising.
 * scratch0/scratch1 each hold scratch_elems elements of the dtype, at least what
 * kl_kron_cuda_workspace() asks for (may be NULL when it asks for none); the call fails where the
 * plan needs more (scratch_elems < 0: not checked). */
int kl_kron_matmul_cuda(const kl_kron_problem *p, int dtype, void *scratch0, void *scratch1,
                        int64_t scratch_elems, void *stream);
int64_t kl_kron_cuda_scratch_elems(const kl_kron_problem *p);
/* A replay's plan: kl_kron_cuda_bind plans p once (its shapes, strides and its pointers'
 * 16-byte alignment; the pointers themselves are not read) and returns a handle, or NULL where
 * every call must go through kl_kron_matmul_cuda; kl_kron_cuda_launch_bound enqueues that plan
 * on p's pointers (p as bound, new pointers) without planning again; kl_kron_cuda_unbind frees. */
void *kl_kron_cuda_bind(const kl_kron_problem *p, int dtype);
int kl_kron_cuda_launch_bound(const void *bound, const kl_kron_problem *p, int dtype,
                              void *scratch0, void *scratch1, int64_t scratch_elems,
                              void *stream);
void kl_kron_cuda_unbind(void *bound);
/* The device this thread's launches go to (cudaGetDevice), or -1: a replay checks it against
 * its arrays' device before enqueueing. */
int kl_kron_cuda_current_device(void);
/* Exact scratch the CUDA plan needs for this dtype: *nbufs buffers (0-2) of *elems elements.
 * The plan depends on x's and y's pointers only through their 16-byte alignment (both aligned
 * or not): ask with pointers of each kind. */
int kl_kron_cuda_workspace(const kl_kron_problem *p, int dtype, int64_t *elems, int *nbufs);
/* The plan the CUDA path picks (passes, kernel, tile, threads, grid) as text in buf (NUL-terminated,
 * truncated to len); returns a status. */
int kl_kron_cuda_config(const kl_kron_problem *p, int dtype, char *buf, int len);
/* Tuning overrides for benchmarks (0 = automatic): lines per tile, column tile, threads,
 * shared-memory budget in KiB, kernel kind (-1 auto, 0 CUDA cores, 1 tensor cores). */
int kl_kron_cuda_tune(int lines, int tile_q, int threads, int smem_budget_kb, int kind);
/* float32 on the GPU: 3xTF32 tensor cores for passes whose factors all have P % 8 == 0
 * (KL_KRON_FP32_TF32X3, the default; x = hi + lo in TF32, three products, float32 accumulation,
 * error near float32's own) or IEEE FMAs on CUDA cores (KL_KRON_FP32_IEEE; also the default when
 * KRONLINALG_KRON_FP32=ffma).  Sets the mode when it is one of these (-1 only queries); returns
 * the previous one. */
enum kl_kron_fp32_mode { KL_KRON_FP32_TF32X3 = 0, KL_KRON_FP32_IEEE = 1 };
int kl_kron_float32_mode(int mode);
/* 0 if a CUDA device is usable, else KL_ERR_NO_DEVICE with kl_last_error() saying why. */
int kl_cuda_device_check(void);

#ifdef __cplusplus
}
#endif

#endif
