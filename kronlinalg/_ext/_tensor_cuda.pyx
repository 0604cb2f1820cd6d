# cython: language_level=3
"""Thin wrapper of kronlinalg.tensor's CUDA kernel (kernels/tensor/tensor.h): pointers, sizes,
stream in; status out.  kronlinalg/tensor/fused.py decides when it runs and makes its buffers."""
from .status cimport check_status
from libc.stdint cimport int32_t, int64_t, uintptr_t


cdef extern from "tensor.h" nogil:
    ctypedef struct kl_tensor_mttkrp:
        int32_t last
        int32_t variant
        int32_t dtype
        int64_t m, red, ia, ib
        int32_t rank
        const void *x
        const float *u
        const float *v
        float *part
        int32_t splits
        float *out
        int64_t out_stride_r, out_stride_m
        float alpha
        const float *dscale
        const float *gram_u
        const float *gram_v
        float *scale_out
    int kl_tensor_mttkrp_plan(int32_t last, int32_t variant, int32_t dtype, int64_t m,
                              int64_t red, int64_t ib, int32_t *splits, int64_t *mpad,
                              int32_t *per_sm)
    int kl_tensor_mttkrp_cuda(const kl_tensor_mttkrp *c, void *stream)
    ctypedef struct kl_tensor_half_contract:
        int32_t dtype
        int32_t leading
        int64_t r, j, k
        const void *y
        const float *f
        float *out
        float alpha
        const float *scale
    int kl_tensor_half_contract_cuda(const kl_tensor_half_contract *c, void *stream)
    int kl_tensor_cuda_check()
    enum: KL_TENSOR_SOLVE_MAX_GRAMS
    ctypedef struct kl_tensor_spd_solve:
        int32_t dtype
        int32_t variant
        int32_t rank
        int32_t count
        const void *grams[KL_TENSOR_SOLVE_MAX_GRAMS]
        const void *rhs
        void *out
        int64_t n, ld_rhs, ld_out
        double eps
        int32_t phase
        void *ws
    int kl_tensor_spd_solve_cuda(const kl_tensor_spd_solve *c, void *stream)
    ctypedef struct kl_tensor_fit_terms:
        int32_t dtype
        int32_t rank
        int32_t count
        const void *grams[KL_TENSOR_SOLVE_MAX_GRAMS]
        const void *w
        const void *y
        const void *f
        int64_t n
        double *out
        double *work
        void *gram
    int kl_tensor_fit_terms_cuda(const kl_tensor_fit_terms *c, void *stream)
    ctypedef struct kl_tensor_scaled_copy:
        int32_t dtype_out
        int32_t pad64
        int32_t rows
        int64_t n
        const float *input "in"
        void *out
        float *scale
        const float *gram
        const float *largest
    int kl_tensor_scaled_copy_cuda(const kl_tensor_scaled_copy *c, void *stream)
    int kl_tensor_copy_rows(void *dst, int64_t dst_pitch, const void *src, int64_t src_pitch,
                            int64_t width, int64_t height, void *stream)


MAX_RANK = 64
MIN_INNER = 32
MIN_INNER_HALF = 64
SOLVE_MAX_GRAMS = KL_TENSOR_SOLVE_MAX_GRAMS


def plan(bint last, int variant, int64_t m, int64_t red, int dtype=0, int64_t ib=0):
    """(splits, mpad, blocks per SM): the split of the sum that fills the current GPU once,
    the padded output length (the partial sums take splits * 64 * mpad floats), and how many
    blocks of the variant a multiprocessor holds.  dtype: the tensor's storage, 0 float32,
    1 float16, 2 bfloat16; ib: the inner size (0: red itself)."""
    cdef int32_t splits = 0, per_sm = 0
    cdef int64_t mpad = 0
    check_status(kl_tensor_mttkrp_plan(last, variant, dtype, m, red, ib if ib else red, &splits,
                                       &mpad, &per_sm))
    return splits, mpad, per_sm


def mttkrp(bint last, int variant, int64_t m, int64_t ia, int64_t ib, int32_t rank, uintptr_t x,
           uintptr_t u, uintptr_t v, uintptr_t part, int32_t splits, uintptr_t out,
           int64_t out_stride_r, int64_t out_stride_m, float alpha, uintptr_t stream,
           int dtype=0, uintptr_t dscale=0, uintptr_t gram_u=0, uintptr_t gram_v=0,
           uintptr_t scale_out=0):
    """out[r, i] = alpha * (*dscale) * the MTTKRP of the first (last=False) or the last mode;
    dtype the tensor's storage (0 float32, 1 float16, 2 bfloat16); gram_v (with gram_u,
    scale_out): the Gram scale of half storage; see tensor.h."""
    cdef kl_tensor_mttkrp c
    c.last = last
    c.variant = variant
    c.dtype = dtype
    c.m = m
    c.red = ia * ib
    c.ia = ia
    c.ib = ib
    c.rank = rank
    c.x = <const void *> x
    c.u = <const float *> u
    c.v = <const float *> v
    c.part = <float *> part
    c.splits = splits
    c.out = <float *> out
    c.out_stride_r = out_stride_r
    c.out_stride_m = out_stride_m
    c.alpha = alpha
    c.dscale = <const float *> dscale
    c.gram_u = <const float *> gram_u
    c.gram_v = <const float *> gram_v
    c.scale_out = <float *> scale_out
    cdef int status
    with nogil:
        status = kl_tensor_mttkrp_cuda(&c, <void *> stream)
    check_status(status)


def half_contract(int dtype, bint leading, int64_t r, int64_t j, int64_t k, uintptr_t y,
                  uintptr_t f, uintptr_t out, uintptr_t stream, float alpha=1.0,
                  uintptr_t scale=0):
    """Y (r, j, k) of a half type (dtype 1 float16, 2 bfloat16) contracted with the float32
    f over k (out (r, j)) or, leading, over j (out (r, k)), times alpha and (scale non-zero)
    the device float at scale; see tensor.h."""
    cdef kl_tensor_half_contract c
    c.dtype = dtype
    c.leading = leading
    c.r = r
    c.j = j
    c.k = k
    c.y = <const void *> y
    c.f = <const float *> f
    c.out = <float *> out
    c.alpha = alpha
    c.scale = <const float *> scale
    cdef int status
    with nogil:
        status = kl_tensor_half_contract_cuda(&c, <void *> stream)
    check_status(status)


def spd_solve(bint double, int32_t variant, int32_t rank, grams, uintptr_t rhs, int64_t ld_rhs, uintptr_t out,
              int64_t ld_out, int64_t n, double eps, uintptr_t stream, int32_t phase=0,
              uintptr_t ws=0):
    """out (R, n) = (V + rho I)^-1 rhs, V the Hadamard product of the R x R matrices at the
    addresses `grams` (at most SOLVE_MAX_GRAMS); phase 1: only V's factorization, into ws
    (R * R + R elements); phase 2: only the solve, from ws (grams may be empty); phase 3: the
    factorization and V's inverse, into ws; phase 4: the product by that inverse, from ws
    (grams may be empty); see tensor.h."""
    cdef kl_tensor_spd_solve c
    cdef int k, count = len(grams)
    if phase not in (2, 4) and (count < 1 or count > KL_TENSOR_SOLVE_MAX_GRAMS):
        raise ValueError(f"grams: expected 1 to {KL_TENSOR_SOLVE_MAX_GRAMS} addresses, got {count}")
    c.dtype = 1 if double else 0
    c.variant = variant
    c.rank = rank
    c.count = count
    for k in range(KL_TENSOR_SOLVE_MAX_GRAMS):
        c.grams[k] = <const void *> (<uintptr_t> grams[k]) if k < count else NULL
    c.phase = phase
    c.ws = <void *> ws
    c.rhs = <const void *> rhs
    c.out = <void *> out
    c.n = n
    c.ld_rhs = ld_rhs
    c.ld_out = ld_out
    c.eps = eps
    cdef int status
    with nogil:
        status = kl_tensor_spd_solve_cuda(&c, <void *> stream)
    check_status(status)


def fit_terms(bint double, int32_t rank, grams, uintptr_t w, uintptr_t y, uintptr_t f,
              int64_t n, uintptr_t out, uintptr_t work, uintptr_t stream, uintptr_t gram=0):
    """out[0] = w^T (o grams) w, out[1] = sum_r w_r sum_i y[r, i] f[r, i] (float64 out, at
    most SOLVE_MAX_GRAMS Gram matrices; work: 2 * rank + 1 doubles, the last zero); gram: f f^T
    formed into it and taken as the Hadamard product's last factor; see tensor.h."""
    cdef kl_tensor_fit_terms c
    cdef int k, count = len(grams)
    if count < 1 or count > KL_TENSOR_SOLVE_MAX_GRAMS:
        raise ValueError(f"grams: expected 1 to {KL_TENSOR_SOLVE_MAX_GRAMS} addresses, got {count}")
    c.dtype = 1 if double else 0
    c.rank = rank
    c.count = count
    for k in range(KL_TENSOR_SOLVE_MAX_GRAMS):
        c.grams[k] = <const void *> (<uintptr_t> grams[k]) if k < count else NULL
    c.w = <const void *> w
    c.y = <const void *> y
    c.f = <const void *> f
    c.n = n
    c.out = <double *> out
    c.work = <double *> work
    c.gram = <void *> gram
    cdef int status
    with nogil:
        status = kl_tensor_fit_terms_cuda(&c, <void *> stream)
    check_status(status)


def scaled_copy(int dtype_out, bint pad64, int32_t rows, int64_t n, uintptr_t src,
                uintptr_t out, uintptr_t scale, uintptr_t stream, uintptr_t gram=0,
                uintptr_t largest=0):
    """out = src (rows, n) float32 divided by its largest magnitude (written to scale[0]; not
    scaled where scale is 0), as padded (n, 64) float32 rows (pad64) or an (rows, n) copy of
    dtype_out (0 float32, 1 float16, 2 bfloat16); gram (src's Gram matrix, not pad64): divided
    by the square root of its largest diagonal entry instead; largest (not pad64): by the
    float at that address; see tensor.h."""
    cdef kl_tensor_scaled_copy c
    c.dtype_out = dtype_out
    c.pad64 = pad64
    c.rows = rows
    c.n = n
    c.input = <const float *> src
    c.out = <void *> out
    c.scale = <float *> scale
    c.gram = <const float *> gram
    c.largest = <const float *> largest
    cdef int status
    with nogil:
        status = kl_tensor_scaled_copy_cuda(&c, <void *> stream)
    check_status(status)


def copy_rows(uintptr_t dst, int64_t dst_pitch, uintptr_t src, int64_t src_pitch,
              int64_t width, int64_t height, uintptr_t stream):
    """`height` rows of `width` bytes, src_pitch apart (pinned host or device memory), to dst
    rows dst_pitch apart, asynchronously on `stream`; see tensor.h."""
    cdef int status
    with nogil:
        status = kl_tensor_copy_rows(<void *> dst, dst_pitch, <const void *> src, src_pitch,
                                     width, height, <void *> stream)
    check_status(status)


def device_check():
    """None, or RuntimeError when no usable GPU is present."""
    check_status(kl_tensor_cuda_check())
