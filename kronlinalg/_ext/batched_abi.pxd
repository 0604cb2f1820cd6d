# Declarations of kernels/batched/batched.h, shared by the CPU and CUDA wrappers.
from libc.stdint cimport int32_t, int64_t, uintptr_t

cdef extern from "batched.h" nogil:
    enum:
        KL_BATCHED_MAX_DIMS

    ctypedef struct kl_batched_problem:
        int64_t m, n, k
        int32_t ndim
        int64_t shape[8]
        int64_t a_bs[8]
        int64_t b_bs[8]
        int64_t c_bs[8]
        int64_t d_bs[8]
        const void *a
        int64_t a_rs, a_cs
        const void *b
        int64_t b_rs, b_cs
        const void *c
        int64_t c_rs, c_cs
        void *d
        int64_t d_rs, d_cs
        double alpha, beta

    ctypedef struct kl_batched_entry:
        int64_t m, n, k

    ctypedef struct kl_batched_config:
        int32_t tile_m, tile_n, tile_k, warps, items_per_block, mma, dims
        int32_t blocks_per_sm, tiny, thin

    int kl_batched_matmul_cpu(const kl_batched_problem *p, int dtype, int num_threads)
    int kl_batched_matmul_cpu_var(const kl_batched_entry *table, int64_t count, double alpha,
                                  double beta, int dtype, int num_threads)
    int kl_batched_cuda_config(int64_t m, int64_t n, int64_t k, int dtype, int algo,
                               int fp32_mode, kl_batched_config *out)
    int kl_batched_matmul_cuda(const kl_batched_problem *p, int dtype, int algo, void *stream)
    int kl_batched_matmul_cuda_var(const void *table, int64_t count, int64_t max_order,
                                   double alpha, double beta, int dtype, int algo, void *stream)
    int kl_batched_var_table_cuda(const int64_t *sizes, int ncols, int64_t count, const void *a,
                                  int64_t a_len, const void *b, int64_t b_len, const void *c,
                                  int64_t c_len, void *d, int64_t d_len, int elem,
                                  int64_t *table, void *stream)
    int kl_batched_float32_mode(int mode)
    int kl_batched_cuda_device_check()
    int kl_batched_cuda_current_device()
    const char *kl_last_error()


cdef inline int fill_problem(kl_batched_problem *c, int64_t m, int64_t n, int64_t k, shape,
                             a, b, cc, d, double alpha, double beta) except -1:
    # shape: batch dims; a, b, cc, d: (address, batch strides, row stride, column stride), all in
    # elements (cc's address 0 when beta == 0)
    cdef Py_ssize_t nd = len(shape), i
    if nd > KL_BATCHED_MAX_DIMS:
        raise ValueError(f"shape: at most {KL_BATCHED_MAX_DIMS} batch dimensions, got {nd}")
    c.m = m
    c.n = n
    c.k = k
    c.ndim = <int32_t> nd
    for i in range(nd):
        c.shape[i] = shape[i]
        c.a_bs[i] = a[1][i]
        c.b_bs[i] = b[1][i]
        c.c_bs[i] = cc[1][i]
        c.d_bs[i] = d[1][i]
    c.a = <const void *> <uintptr_t> a[0]
    c.a_rs, c.a_cs = a[2], a[3]
    c.b = <const void *> <uintptr_t> b[0]
    c.b_rs, c.b_cs = b[2], b[3]
    c.c = <const void *> <uintptr_t> cc[0]
    c.c_rs, c.c_cs = cc[2], cc[3]
    c.d = <void *> <uintptr_t> d[0]
    c.d_rs, c.d_cs = d[2], d[3]
    c.alpha = alpha
    c.beta = beta
    return 0


cdef inline dict config_dict(kl_batched_config *cfg):
    return {"tile_m": cfg.tile_m, "tile_n": cfg.tile_n, "tile_k": cfg.tile_k,
            "warps": cfg.warps, "items_per_block": cfg.items_per_block,
            "mma": ("cuda-cores", "dmma-m8n8k4", "hmma-m16n8k16", "3xtf32-m16n8k8")[cfg.mma],
            "dims": cfg.dims, "blocks_per_sm": cfg.blocks_per_sm,
            "tiny": (None, "generic", "fixed")[cfg.tiny], "thin": bool(cfg.thin)}
