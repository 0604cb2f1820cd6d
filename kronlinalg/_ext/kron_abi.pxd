# Declarations of kernels/kron/kron.h, shared by the CPU and CUDA wrappers.
from cpython.array cimport array
from libc.stdint cimport int32_t, int64_t, uintptr_t

cdef extern from "kron.h" nogil:
    ctypedef struct kl_kron_problem:
        int64_t m1, m2
        int32_t nfactors
        const int64_t *P
        const int64_t *Q
        const void *const *F
        const int64_t *F_rs
        const int64_t *F_cs
        const void *x
        int64_t x_rs1, x_rs2, x_es
        void *y
        int64_t y_rs1, y_rs2, y_es
        double alpha, beta
        int32_t max_fused

    int kl_kron_matmul_cpu(const kl_kron_problem *p, int dtype, int num_threads)
    int kl_kron_cpu_pass_counts(const kl_kron_problem *p, int dtype, int *counts, int max_counts)
    int kl_kron_matmul_cuda(const kl_kron_problem *p, int dtype, void *scratch0,
                            void *scratch1, int64_t scratch_elems, void *stream)
    int64_t kl_kron_cuda_scratch_elems(const kl_kron_problem *p)
    int kl_kron_float32_mode(int mode)
    int kl_cuda_device_check()
    const char *kl_last_error()


cdef inline tuple fill_problem(kl_kron_problem *c, int64_t m1, int64_t m2, factors, x, y,
                                        double alpha, double beta, int max_fused):
    # factors: sequence of (ptr, P, Q, row_stride, col_stride); x, y: (ptr, rs1, rs2, es).
    # Returns the arrays c points into: the caller keeps them alive while c is used.
    cdef Py_ssize_t n = len(factors)
    cdef array shapes = array('q', [f[k] for k in (1, 2, 3, 4) for f in factors])
    cdef array ptrs = array('Q', [f[0] for f in factors])
    cdef int64_t *s = <int64_t *> shapes.data.as_longlongs
    c.m1 = m1
    c.m2 = m2
    c.nfactors = <int32_t> n
    c.P = s
    c.Q = s + n
    c.F_rs = s + 2 * n
    c.F_cs = s + 3 * n
    c.F = <const void *const *> ptrs.data.as_ulonglongs
    c.x = <const void *> <uintptr_t> x[0]
    c.x_rs1, c.x_rs2, c.x_es = x[1], x[2], x[3]
    c.y = <void *> <uintptr_t> y[0]
    c.y_rs1, c.y_rs2, c.y_es = y[1], y[2], y[3]
    c.alpha = alpha
    c.beta = beta
    c.max_fused = max_fused
    return shapes, ptrs


cdef inline tuple pack_layout(m1, m2, factors, x, y):
    # A problem's shapes and strides packed once, for repeated launches with new pointers.
    # factors: (P, Q, row stride, col stride); x, y: (row stride 1, row stride 2, element stride)
    cdef Py_ssize_t n = len(factors)
    cdef array shapes = array('q', [f[k] for k in range(4) for f in factors])
    return (int(m1), int(m2), n, shapes, tuple([int(v) for v in x]), tuple([int(v) for v in y]))


cdef inline void fill_packed(kl_kron_problem *c, tuple packed, array ptrs, uintptr_t xptr,
                             uintptr_t yptr, double alpha, double beta):
    # c points into `packed` and `ptrs`: the caller keeps both alive while c is used
    cdef array shapes = packed[3]
    cdef int64_t *s = <int64_t *> shapes.data.as_longlongs
    cdef Py_ssize_t n = packed[2]
    c.m1 = packed[0]
    c.m2 = packed[1]
    c.nfactors = <int32_t> n
    c.P = s
    c.Q = s + n
    c.F_rs = s + 2 * n
    c.F_cs = s + 3 * n
    c.F = <const void *const *> (ptrs.data.as_ulonglongs if ptrs is not None else NULL)
    c.x = <const void *> xptr
    c.x_rs1, c.x_rs2, c.x_es = packed[4]
    c.y = <void *> yptr
    c.y_rs1, c.y_rs2, c.y_es = packed[5]
    c.alpha = alpha
    c.beta = beta
    c.max_fused = 0
