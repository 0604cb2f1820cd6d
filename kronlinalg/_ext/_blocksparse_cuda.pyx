# cython: language_level=3
"""Thin wrapper of the CUDA block-sparse kernels: pointers, sizes and the stream in; status out."""
from .status cimport check_status
from libc.stdint cimport int64_t, uintptr_t

from .blocksparse_abi cimport (fill_spgemm, fill_spmm, fill_tiles, kl_bs_batched_cuda,
                               kl_bs_batched_cuda_tile_n, kl_bs_batched_problem,
                               kl_bs_batched_c_stage, kl_bs_batched_narrow,
                               kl_bs_batched_pipeline,
                               kl_bs_batched_tile_cap,
                               kl_bs_cuda_device_check,
                               kl_bs_float32_mode, kl_bs_spgemm_cuda, kl_bs_spgemm_problem,
                               kl_bs_spmm2d_cuda, kl_bs_spmm_cuda, kl_bs_spmm_cuda_tile_n,
                               kl_bs_spmm_problem,
                               kl_bs_spmm_panel_opts, kl_bs_spmm_variant, kl_bs_spmm2d_opts,
                               kl_bs_spmm2d_rows, kl_last_error)


def device_check():
    """RuntimeError when no usable CUDA device is current."""
    if kl_bs_cuda_device_check() != 0:
        raise RuntimeError(kl_last_error().decode())


def spmm(tuple dims, tuple ptrs, tuple lds, double alpha, double beta, long long nitems,
         int accumulate, int dtype, uintptr_t stream):
    """Enqueue C = alpha * A @ B + beta * C on `stream` (see blocksparse.h)."""
    cdef kl_bs_spmm_problem c
    fill_spmm(&c, dims, ptrs, lds, alpha, beta, nitems, accumulate)
    cdef int status
    with nogil:
        status = kl_bs_spmm_cuda(&c, dtype, <void *> stream)
    check_status(status)


def spmm2d(tuple dims, tuple ptrs, tuple lds, double alpha, double beta, int accumulate,
           int tile, long long tile_rows, tuple tile_ptrs, int dtype, uintptr_t stream):
    """Enqueue the 2D (Morton warp tile) kernel: tile_ptrs = (tile_row_ptr, tiles, row_idx)."""
    cdef kl_bs_spmm_problem c
    fill_spmm(&c, dims, ptrs, lds, alpha, beta, 0, accumulate)
    fill_tiles(&c, tile, tile_rows, tile_ptrs)
    cdef int status
    with nogil:
        status = kl_bs_spmm2d_cuda(&c, dtype, <void *> stream)
    check_status(status)


def spgemm(tuple dims, tuple ptrs, int phase, int dtype, uintptr_t stream):
    """Enqueue one SpGEMM phase on `stream` (0 count, 1 columns, 2 values)."""
    cdef kl_bs_spgemm_problem c
    fill_spgemm(&c, dims, ptrs)
    cdef int status
    with nogil:
        status = kl_bs_spgemm_cuda(&c, phase, dtype, <void *> stream)
    check_status(status)


def tile_n(int dtype, int b, long long n):
    """Right-hand-side columns per tile of the SpMM kernel for (dtype, b, n); 0: no kernel."""
    return kl_bs_spmm_cuda_tile_n(dtype, b, n)


def float32_mode(int mode=-1):
    """The float32 mode (0 3xTF32, 1 IEEE); sets it when mode is 0 or 1; returns the previous."""
    return kl_bs_float32_mode(mode)


def spmm_variant(int variant=-1):
    """Which kernel runs b = 16 SpMM wider than 32 columns (0 panel, 1 warp per row, 2 panel with
    half-width half-precision tiles); sets it when 0..2; returns the previous."""
    return kl_bs_spmm_variant(variant)


def spmm_panel_opts(int opts=-1):
    """The half-precision panel kernel's options (bit 0 C staged for 16-byte stores, bit 1 A read
    evict-first, bit 3 the persistent form, bits 4-7 the 256-column tile's depth 4/8/12, bits
    8-15 a cap on the persistent grid, bit 2 the strip-major grid where X is larger than the L2,
    bit 16 that grid whatever X's size); sets them when opts >= 0; returns the previous."""
    return kl_bs_spmm_panel_opts(opts)


def spmm2d_opts(int opts=-1):
    """The 2D kernel's options (bit 0 C staged for 16-byte stores, bit 1 B fragments once per
    step, bit 2 the strip-major grid where X is larger than the L2, bit 16 that grid whatever
    X's size, bits 4-7 the 8-row panels' depth, bit 8 half precision's 8-row panels with 4
    warps, bit 9 FP64's panels with 8 warps); sets them when opts >= 0; returns the previous."""
    return kl_bs_spmm2d_opts(opts)


def spmm2d_rows(int dtype, long long n):
    """The block rows of the 2D kernel's panel for (dtype, n): the steps' height; 0: none."""
    return kl_bs_spmm2d_rows(dtype, n)


def batched(tuple dims, tuple ptrs, tuple strides, double alpha, int dtype, uintptr_t stream):
    """Enqueue C[i] = alpha * A[i] @ X[i] over a shared block pattern (see blocksparse.h):
    dims (batch, m, k, n, nnzb); ptrs (row_ptr, col_idx, val, X, C); strides (ldx, x_stride,
    ldc, c_stride)."""
    cdef kl_bs_batched_problem c
    c.batch, c.m, c.k, c.n, c.nnzb = dims[0], dims[1], dims[2], dims[3], dims[4]
    c.row_ptr = <const int64_t *> <uintptr_t> ptrs[0]
    c.col_idx = <const int64_t *> <uintptr_t> ptrs[1]
    c.val = <const void *> <uintptr_t> ptrs[2]
    c.X = <const void *> <uintptr_t> ptrs[3]
    c.C = <void *> <uintptr_t> ptrs[4]
    c.ldx, c.x_stride, c.ldc, c.c_stride = strides[0], strides[1], strides[2], strides[3]
    c.alpha = alpha
    cdef int status
    with nogil:
        status = kl_bs_batched_cuda(&c, dtype, <void *> stream)
    check_status(status)


def batched_tile_n(int dtype, long long m, long long k, long long n, long long nnzb):
    """The RHS tile of the batched kernel for these sizes; 0: it does not run them."""
    return kl_bs_batched_cuda_tile_n(dtype, m, k, n, nnzb)


def batched_tile_cap(int cap=-1):
    """The widest RHS tile the batched kernel may take (64; 16 or 32 to compare); sets it when
    cap is 16, 32 or 64; returns the previous."""
    return kl_bs_batched_tile_cap(cap)


def batched_pipeline(int pipeline=-1):
    """The batched kernel's pipeline (0: 2-4 stages, the most bytes in flight; 1: two stages);
    sets it when 0 or 1; returns the previous."""
    return kl_bs_batched_pipeline(pipeline)


def batched_c_stage(int stage=-1):
    """Whether the batched kernel stages C through shared memory for 16-byte stores (1, default)
    or stores fragments directly (0); sets it when 0 or 1; returns the previous."""
    return kl_bs_batched_c_stage(stage)


def batched_narrow(int forms=-1):
    """The batched kernel's forms for narrow right-hand sides, bits: 1 the 8-column tile for
    n of 5-8 (n <= 4 takes it always, without padding to 8), 2 bulk (TMA) loads where they
    apply; 3 (both) the default; sets them when 0-3; returns the previous."""
    return kl_bs_batched_narrow(forms)
