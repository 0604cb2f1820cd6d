# Declarations of kernels/strassen/strassen.h, shared by the CPU and CUDA wrappers.
from libc.stdint cimport int32_t, int64_t, uint32_t, uintptr_t

cdef extern from "strassen.h" nogil:
    enum:
        KL_STRASSEN_MAX_BATCH
        KL_STRASSEN_MAX_TARGETS

    ctypedef struct kl_strassen_pass:
        int32_t stage
        int32_t count
        int64_t mh, kh, nh
        int64_t lda, ldb
        void *a[16]
        void *b[16]
        const void *src_a
        const void *src_b
        int64_t lds_a, lds_b

    ctypedef struct kl_strassen_leaf:
        const void *x
        const void *y
        int32_t ntargets
        uint32_t negative
        void *c[16]
        uint32_t fresh

    ctypedef struct kl_strassen_leaves:
        int32_t count
        int32_t first
        int64_t m, n, k
        int64_t ldx, ldy, ldc
        double alpha, beta
        kl_strassen_leaf leaf[16]

    ctypedef struct kl_strassen_sum_leaf:
        const void *x[4]
        const void *y[4]
        int32_t nx, ny
        uint32_t xneg, yneg
        int32_t ntargets
        uint32_t negative
        uint32_t fresh
        void *c[16]

    ctypedef struct kl_strassen_sum_leaves:
        int32_t count
        int64_t m, n, k
        int64_t ldx, ldy, ldc
        double alpha, beta
        kl_strassen_sum_leaf leaf[16]

    int kl_strassen_sum_leaf_cuda(const kl_strassen_sum_leaves *p, int dtype, void *stream)
    int kl_strassen_pass_cpu(const kl_strassen_pass *p, int dtype, int num_threads)
    int kl_strassen_targets_cpu(const kl_strassen_leaves *p, int dtype, int num_threads)
    int kl_strassen_pass_cuda(const kl_strassen_pass *p, int dtype, void *stream)
    int kl_strassen_leaf_cuda(const kl_strassen_leaves *p, int dtype, void *stream)
    int kl_strassen_targets_cuda(const kl_strassen_leaves *p, int dtype, void *stream)
    int kl_strassen_cuda_leaf_tile(int dtype, int *tile)
    int kl_strassen_cuda_leaf_kernel(int dtype)
    int kl_strassen_cuda_check()
    const char *kl_last_error()


cdef inline int fill_pass(kl_strassen_pass *c, int stage, int64_t mh, int64_t kh, int64_t nh,
                          int64_t lda, int64_t ldb, a_ptrs, b_ptrs, uintptr_t src_a=0,
                          uintptr_t src_b=0, int64_t lds_a=0, int64_t lds_b=0) except -1:
    # a_ptrs, b_ptrs: the blocks' addresses (ints); src_*: stage 4's sources
    c.src_a = <const void *> src_a
    c.src_b = <const void *> src_b
    c.lds_a, c.lds_b = lds_a, lds_b
    cdef Py_ssize_t n = len(a_ptrs), i
    if n > KL_STRASSEN_MAX_BATCH or len(b_ptrs) != n:
        raise ValueError("strassen pass: too many blocks in one launch")
    c.stage = stage
    c.count = <int32_t> n
    c.mh, c.kh, c.nh, c.lda, c.ldb = mh, kh, nh, lda, ldb
    for i in range(n):
        c.a[i] = <void *> <uintptr_t> a_ptrs[i]
        c.b[i] = <void *> <uintptr_t> b_ptrs[i]
    return 0


cdef inline int fill_leaves(kl_strassen_leaves *c, int64_t m, int64_t n, int64_t k, int64_t ldx,
                            int64_t ldy, int64_t ldc, double alpha, double beta, bint first,
                            leaves) except -1:
    # leaves: [(x ptr, y ptr, ((c ptr, sign[, fresh]), ...)), ...] (fresh: that target's first
    # write, beta applies, as with `first`; CUDA target update only)
    cdef Py_ssize_t nl = len(leaves), i, t
    cdef uint32_t neg, fresh
    if nl > KL_STRASSEN_MAX_BATCH:
        raise ValueError("strassen leaves: too many products in one launch")
    c.count = <int32_t> nl
    c.first = 1 if first else 0
    c.m, c.n, c.k, c.ldx, c.ldy, c.ldc = m, n, k, ldx, ldy, ldc
    c.alpha, c.beta = alpha, beta
    for i in range(nl):
        x, y, targets = leaves[i]
        if len(targets) > KL_STRASSEN_MAX_TARGETS:
            raise ValueError("strassen leaves: too many targets")
        c.leaf[i].x = <const void *> <uintptr_t> x
        c.leaf[i].y = <const void *> <uintptr_t> y
        c.leaf[i].ntargets = <int32_t> len(targets)
        neg = 0
        fresh = 0
        for t in range(len(targets)):
            c.leaf[i].c[t] = <void *> <uintptr_t> targets[t][0]
            if targets[t][1] < 0:
                neg |= (<uint32_t> 1) << t
            if len(targets[t]) > 2 and targets[t][2]:
                fresh |= (<uint32_t> 1) << t
        c.leaf[i].negative = neg
        c.leaf[i].fresh = fresh
    return 0


cdef inline uint32_t _sources(const void **ptrs, srcs, int32_t *count) except? 0xffffffff:
    # srcs: ((ptr, sign), ...), at most 4; returns the minus-sign bits
    cdef Py_ssize_t i, n = len(srcs)
    cdef uint32_t neg = 0
    if n < 1 or n > 4:
        raise ValueError("strassen sum leaves: 1 to 4 sources per operand")
    for i in range(n):
        ptrs[i] = <const void *> <uintptr_t> srcs[i][0]
        if srcs[i][1] < 0:
            neg |= (<uint32_t> 1) << i
    count[0] = <int32_t> n
    return neg


cdef inline int fill_sum_leaves(kl_strassen_sum_leaves *c, int64_t m, int64_t n, int64_t k,
                                int64_t ldx, int64_t ldy, int64_t ldc, double alpha, double beta,
                                leaves) except -1:
    # leaves: [(((x ptr, sign), ...), ((y ptr, sign), ...), ((c ptr, sign, fresh), ...)), ...]
    cdef Py_ssize_t nl = len(leaves), i, t
    cdef uint32_t neg, fresh
    if nl > KL_STRASSEN_MAX_BATCH:
        raise ValueError("strassen sum leaves: too many products in one launch")
    c.count = <int32_t> nl
    c.m, c.n, c.k, c.ldx, c.ldy, c.ldc = m, n, k, ldx, ldy, ldc
    c.alpha, c.beta = alpha, beta
    for i in range(nl):
        xs, ys, targets = leaves[i]
        if len(targets) > KL_STRASSEN_MAX_TARGETS:
            raise ValueError("strassen sum leaves: too many targets")
        c.leaf[i].xneg = _sources(c.leaf[i].x, xs, &c.leaf[i].nx)
        c.leaf[i].yneg = _sources(c.leaf[i].y, ys, &c.leaf[i].ny)
        c.leaf[i].ntargets = <int32_t> len(targets)
        neg = 0
        fresh = 0
        for t in range(len(targets)):
            c.leaf[i].c[t] = <void *> <uintptr_t> targets[t][0]
            if targets[t][1] < 0:
                neg |= (<uint32_t> 1) << t
            if targets[t][2]:
                fresh |= (<uint32_t> 1) << t
        c.leaf[i].negative = neg
        c.leaf[i].fresh = fresh
    return 0
