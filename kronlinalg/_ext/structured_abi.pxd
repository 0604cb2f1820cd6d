# Declarations of kernels/structured/ks.h, shared by the CPU and CUDA wrappers.
from libc.stdint cimport int32_t, int64_t, uintptr_t

cdef extern from "ks.h" nogil:
    ctypedef struct kl_ks_problem:
        int64_t a, b, c, d
        int64_t batch
        int32_t layout
        const void *values
        int64_t vs[4]
        const void *x
        int64_t x_ld
        void *y
        int64_t y_ld

    int kl_ks_matmul_cpu(const kl_ks_problem *p, int dtype, int num_threads)
    int kl_ks_matmul_cuda(const kl_ks_problem *p, int dtype, void *stream)
    int kl_ks_cuda_current_device()
    int kl_ks_transpose_values_cuda(const kl_ks_problem *p, void *out, int dtype, void *stream)
    int kl_ks_dense_slabs_cuda(const kl_ks_problem *p, void *out, int dtype, void *stream)
    int kl_ks_planar_cuda(int split, int64_t batch, int64_t a, int64_t n, int64_t d,
                          const void *src, void *dst, int64_t ld, int dtype, void *stream)
    int kl_ks_float32_mode(int mode)
    int kl_ks_cuda_tile(const kl_ks_problem *p, int dtype, int units, int64_t *out)
    const char *kl_last_error()


cdef inline void fill_problem(kl_ks_problem *c, pattern, int64_t batch, int layout, values, x, y):
    # pattern: (a, b, c, d); values: (ptr, s0, s1, s2, s3) in elements; x, y: (ptr, leading dim).
    c.a, c.b, c.c, c.d = pattern
    c.batch = batch
    c.layout = layout
    c.values = <const void *> <uintptr_t> values[0]
    c.vs[0], c.vs[1], c.vs[2], c.vs[3] = values[1], values[2], values[3], values[4]
    c.x = <const void *> <uintptr_t> x[0]
    c.x_ld = x[1]
    c.y = <void *> <uintptr_t> y[0]
    c.y_ld = y[1]


cdef inline object factor_chain(factors, factor_type, chain_type):
    """A replay's factors argument as the sequence of its KSFactors: one KSFactor, a KSChain
    (or KSPacked) or a list / tuple of them (the replays of _structured_cpu and _cuda)."""
    if type(factors) is factor_type:
        return (factors,)
    if isinstance(factors, chain_type):
        return factors.factors
    return tuple(factors)
