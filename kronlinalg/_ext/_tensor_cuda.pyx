# cython: language_level=3
"""Thin wrapper of kronlinalg.tensor's CUDA kernel (kernels/tensor/tensor.h): pointers, sizes,
stream in; status out.  kronlinalg/tensor/fused.py decides when it runs and makes its buffers."""
from .status cimport check_status
from libc.stdint cimport int32_t, int64_t, uintptr_t


cdef extern from "tensor.h" nogil:
    ctypedef struct kl_tensor_mttkrp:
        int32_t last
        int32_t variant
        int64_t m, red, ia, ib
        int32_t rank
        const float *x
        const float *u
        const float *v
        float *part
        int32_t splits
        float *out
        int64_t out_stride_r, out_stride_m
        float alpha
    int kl_tensor_mttkrp_plan(int32_t last, int32_t variant, int64_t m, int64_t red,
                              int32_t *splits, int64_t *mpad, int32_t *per_sm)
    int kl_tensor_mttkrp_cuda(const kl_tensor_mttkrp *c, void *stream)
    int kl_tensor_cuda_check()


MAX_RANK = 64
MIN_INNER = 32


def plan(bint last, int variant, int64_t m, int64_t red):
    """(splits, mpad, blocks per SM): the split of the sum that fills the current GPU once,
    the padded output length (the partial sums take splits * 64 * mpad floats), and how many
    blocks of the variant a multiprocessor holds."""
    cdef int32_t splits = 0, per_sm = 0
    cdef int64_t mpad = 0
    check_status(kl_tensor_mttkrp_plan(last, variant, m, red, &splits, &mpad, &per_sm))
    return splits, mpad, per_sm


def mttkrp(bint last, int variant, int64_t m, int64_t ia, int64_t ib, int32_t rank, uintptr_t x,
           uintptr_t u, uintptr_t v, uintptr_t part, int32_t splits, uintptr_t out,
           int64_t out_stride_r, int64_t out_stride_m, float alpha, uintptr_t stream):
    """out[r, i] = alpha * the MTTKRP of the first (last=False) or the last mode; see tensor.h."""
    cdef kl_tensor_mttkrp c
    c.last = last
    c.variant = variant
    c.m = m
    c.red = ia * ib
    c.ia = ia
    c.ib = ib
    c.rank = rank
    c.x = <const float *> x
    c.u = <const float *> u
    c.v = <const float *> v
    c.part = <float *> part
    c.splits = splits
    c.out = <float *> out
    c.out_stride_r = out_stride_r
    c.out_stride_m = out_stride_m
    c.alpha = alpha
    cdef int status
    with nogil:
        status = kl_tensor_mttkrp_cuda(&c, <void *> stream)
    check_status(status)


def device_check():
    """None, or RuntimeError when no usable GPU is present."""
    check_status(kl_tensor_cuda_check())
