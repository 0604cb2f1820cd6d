# cython: language_level=3
"""Thin wrapper of strassen_matmul's CUDA kernels: pointers, sizes, stream in; status out."""
from .status cimport check_status
from libc.stdint cimport uintptr_t

from .strassen_abi cimport (fill_leaves, fill_pass, fill_sum_leaves, kl_strassen_sum_leaves,
                            kl_strassen_sum_leaf_cuda, kl_last_error, kl_strassen_cuda_check,
                            kl_strassen_cuda_leaf_kernel, kl_strassen_cuda_leaf_tile,
                            kl_strassen_leaf_cuda,
                            kl_strassen_leaves, kl_strassen_pass, kl_strassen_pass_cuda,
                            kl_strassen_targets_cuda)


cdef _check(int status):
    check_status(status)


def run_pass(int stage, mh, kh, nh, lda, ldb, a_ptrs, b_ptrs, int dtype, uintptr_t stream,
             uintptr_t src_a=0, uintptr_t src_b=0, lds_a=0, lds_b=0):
    """One element-wise pass (1: S1, 2: S3+S4, 3: S6+S7) over the operand blocks, in place;
    4: S1 from src_a / src_b (leading dimensions lds_a, lds_b) into one pair of blocks."""
    cdef kl_strassen_pass c
    fill_pass(&c, stage, mh, kh, nh, lda, ldb, a_ptrs, b_ptrs, src_a, src_b, lds_a, lds_b)
    cdef int status
    with nogil:
        status = kl_strassen_pass_cuda(&c, dtype, <void *> stream)
    _check(status)


def leaf(m, n, k, ldx, ldy, ldc, double alpha, double beta, bint first, leaves, int dtype,
         uintptr_t stream):
    """One batched launch of leaf products, each added into its targets:
    leaves = [(x ptr, y ptr, ((c ptr, sign), ...)), ...]."""
    cdef kl_strassen_leaves c
    fill_leaves(&c, m, n, k, ldx, ldy, ldc, alpha, beta, first, leaves)
    cdef int status
    with nogil:
        status = kl_strassen_leaf_cuda(&c, dtype, <void *> stream)
    _check(status)


def sum_leaf(m, n, k, ldx, ldy, ldc, double alpha, double beta, leaves, int dtype,
             uintptr_t stream):
    """One launch of Strassen-reloaded leaves (float64, sm_90): each X and Y a signed sum of
    1-2 source blocks formed while loading, the product added into its targets:
    leaves = [(((x ptr, sign), ...), ((y ptr, sign), ...), ((c ptr, sign, fresh), ...)), ...]."""
    cdef kl_strassen_sum_leaves c
    fill_sum_leaves(&c, m, n, k, ldx, ldy, ldc, alpha, beta, leaves)
    cdef int status
    with nogil:
        status = kl_strassen_sum_leaf_cuda(&c, dtype, <void *> stream)
    _check(status)


def add_targets(m, n, ldm, ldc, double alpha, double beta, bint first, leaves, int dtype,
                uintptr_t stream):
    """C_t = (first ? beta C_t : C_t) + sign_t alpha M for each (M ptr, 0, targets)."""
    cdef kl_strassen_leaves c
    fill_leaves(&c, m, n, 0, ldm, 0, ldc, alpha, beta, first, leaves)
    cdef int status
    with nogil:
        status = kl_strassen_targets_cuda(&c, dtype, <void *> stream)
    _check(status)


def leaf_tile(int dtype):
    """(rows, columns) of the leaf kernel's output tile."""
    cdef int tile[2]
    _check(kl_strassen_cuda_leaf_tile(dtype, tile))
    return (tile[0], tile[1])


def leaf_kernel(int dtype):
    """0: the own leaf kernel runs for dtype; 1-3: a CUTLASS mainloop (FP64, sm_90)."""
    return kl_strassen_cuda_leaf_kernel(dtype)


def device_check():
    """None, or RuntimeError when no usable GPU is present."""
    _check(kl_strassen_cuda_check())
