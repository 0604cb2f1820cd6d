# Declarations of kernels/blocksparse/blocksparse.h, shared by the CPU and CUDA wrappers.
from libc.stdint cimport int32_t, int64_t, uintptr_t

cdef extern from "blocksparse.h" nogil:
    ctypedef struct kl_bs_spmm_problem:
        int64_t m, k, n
        int32_t b
        const int64_t *row_ptr
        const int64_t *col_idx
        const int64_t *perm
        const void *val
        const void *B
        int64_t ldb
        void *C
        int64_t ldc
        double alpha, beta
        const int64_t *items
        int64_t nitems
        int32_t accumulate
        int32_t tile
        int64_t tile_rows
        const int64_t *tile_row_ptr
        const int64_t *tiles
        const int64_t *row_idx

    ctypedef struct kl_bs_spgemm_problem:
        int64_t R, ncols
        int32_t b
        const int64_t *a_row_ptr
        const int64_t *a_col
        const int64_t *a_perm
        const void *a_val
        const int64_t *b_row_ptr
        const int64_t *b_col
        const int64_t *b_perm
        const void *b_val
        int64_t *c_counts
        const int64_t *c_row_ptr
        int64_t *c_col
        const int64_t *c_row
        int64_t c_nnz
        void *c_val

    ctypedef struct kl_bs_batched_problem:
        int64_t batch, m, k, n, nnzb
        const int64_t *row_ptr
        const int64_t *col_idx
        const void *val
        const void *X
        int64_t ldx, x_stride
        void *C
        int64_t ldc, c_stride
        double alpha

    int kl_bs_spmm_cpu(const kl_bs_spmm_problem *p, int dtype, int num_threads)
    int kl_bs_spgemm_cpu(const kl_bs_spgemm_problem *p, int phase, int dtype, int num_threads)
    int kl_bs_spmm_cuda(const kl_bs_spmm_problem *p, int dtype, void *stream)
    int kl_bs_spmm2d_cuda(const kl_bs_spmm_problem *p, int dtype, void *stream)
    int kl_bs_spgemm_cuda(const kl_bs_spgemm_problem *p, int phase, int dtype, void *stream)
    int kl_bs_spmm_cuda_tile_n(int dtype, int b, int64_t n)
    int kl_bs_float32_mode(int mode)
    int kl_bs_spmm_variant(int variant)
    int kl_bs_spmm_panel_opts(int opts)
    int kl_bs_spmm2d_opts(int opts)
    int kl_bs_spmm2d_rows(int dtype, int64_t n)
    int kl_bs_batched_cuda(const kl_bs_batched_problem *p, int dtype, void *stream)
    int kl_bs_batched_cuda_tile_n(int dtype, int64_t m, int64_t k, int64_t n, int64_t nnzb)
    int kl_bs_batched_tile_cap(int cap)
    int kl_bs_batched_pipeline(int pipeline)
    int kl_bs_batched_c_stage(int stage)
    int kl_bs_batched_narrow(int forms)
    int kl_bs_cuda_device_check()
    const char *kl_last_error()


cdef inline void fill_spmm(kl_bs_spmm_problem *c, tuple dims, tuple ptrs, tuple lds,
                           double alpha, double beta, int64_t nitems, int accumulate):
    # dims: (m, k, n, b); ptrs: (row_ptr, col_idx, perm, val, B, C, items); lds: (ldb, ldc)
    c.m, c.k, c.n, c.b = dims[0], dims[1], dims[2], dims[3]
    c.row_ptr = <const int64_t *> <uintptr_t> ptrs[0]
    c.col_idx = <const int64_t *> <uintptr_t> ptrs[1]
    c.perm = <const int64_t *> <uintptr_t> ptrs[2]
    c.val = <const void *> <uintptr_t> ptrs[3]
    c.B = <const void *> <uintptr_t> ptrs[4]
    c.C = <void *> <uintptr_t> ptrs[5]
    c.items = <const int64_t *> <uintptr_t> ptrs[6]
    c.ldb, c.ldc = lds[0], lds[1]
    c.alpha = alpha
    c.beta = beta
    c.nitems = nitems
    c.accumulate = accumulate
    c.tile = 0
    c.tile_rows = 0
    c.tile_row_ptr = NULL
    c.tiles = NULL
    c.row_idx = NULL


cdef inline void fill_tiles(kl_bs_spmm_problem *c, int tile, int64_t tile_rows, tuple ptrs):
    # ptrs: (tile_row_ptr, tiles, row_idx); col_idx (fill_spmm) is then in storage order
    c.tile = tile
    c.tile_rows = tile_rows
    c.tile_row_ptr = <const int64_t *> <uintptr_t> ptrs[0]
    c.tiles = <const int64_t *> <uintptr_t> ptrs[1]
    c.row_idx = <const int64_t *> <uintptr_t> ptrs[2]


cdef inline void fill_spgemm(kl_bs_spgemm_problem *c, tuple dims, tuple ptrs):
    # dims: (R, ncols, b, c_nnz); ptrs: (a_row_ptr, a_col, a_perm, a_val, b_row_ptr, b_col,
    # b_perm, b_val, c_counts, c_row_ptr, c_col, c_row, c_val)
    c.R, c.ncols, c.b, c.c_nnz = dims[0], dims[1], dims[2], dims[3]
    c.a_row_ptr = <const int64_t *> <uintptr_t> ptrs[0]
    c.a_col = <const int64_t *> <uintptr_t> ptrs[1]
    c.a_perm = <const int64_t *> <uintptr_t> ptrs[2]
    c.a_val = <const void *> <uintptr_t> ptrs[3]
    c.b_row_ptr = <const int64_t *> <uintptr_t> ptrs[4]
    c.b_col = <const int64_t *> <uintptr_t> ptrs[5]
    c.b_perm = <const int64_t *> <uintptr_t> ptrs[6]
    c.b_val = <const void *> <uintptr_t> ptrs[7]
    c.c_counts = <int64_t *> <uintptr_t> ptrs[8]
    c.c_row_ptr = <const int64_t *> <uintptr_t> ptrs[9]
    c.c_col = <int64_t *> <uintptr_t> ptrs[10]
    c.c_row = <const int64_t *> <uintptr_t> ptrs[11]
    c.c_val = <void *> <uintptr_t> ptrs[12]
