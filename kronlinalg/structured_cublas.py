"""structured_matmul's cuBLAS algorithms (CUDA with CuPy's cuBLAS bindings): "strided" (each
factor's (i, j) blocks as strided-batched GEMMs on views of x and y, or on planar copies of them
for batch_first with d > 1), "block_dense" (each factor's a diagonal blocks formed dense by one
launch, then one strided-batched GEMM in place) and the tuned dense GEMM of packed weights.

Part of the structured_matmul operation (kronlinalg.structured registers them); the shape rules
they share with the cost model (planar copies, 32-bit sizes) are stated once, in
kronlinalg/planner/costs/structured.py.
"""

from __future__ import annotations

from ._ext import load
from .common import backend, dtypes
from .ks import formed
from .planner.costs import structured as costs
from .vendor import cublas, cublaslt

__all__ = ["available", "strided", "strided_calls", "dense_gemm", "rows_view"]

ks_cuda = load("structured_cuda")


def available(on_cuda: bool, dtype: str) -> bool:
    """Whether the cuBLAS algorithms run this dtype on this device (CUDA build, CuPy's cuBLAS)."""
    return on_cuda and ks_cuda is not None and cublas.available() and dtype in cublas.dtypes()


def rows_view(shape, strides, layout):
    """(leading dimension, ok) of a 2-D operand as the kernel reads it: the feature axis
    (batch_first) or the batch axis (batch_last) must be contiguous and rows must not overlap."""
    rows, cols = shape
    ld, es = strides
    ok = cols <= 1 or es == 1
    ok = ok and (rows <= 1 or ld >= max(cols, 1))
    return (ld if rows > 1 else max(cols, 1)), ok



def strided_calls(pattern, layout, rows, x, ldx, k, y, ldy, item):
    """The column-major GEMM batches of one factor (see cublas.gemm_strided_batched), from
    x's and y's addresses and row strides and K's: K[i, j] as a (b, c) row-major block at
    k + (i·d + j)·b·c (values transposed to (a, d, b, c); for d = 1 that is their own order).

    batch_last: Y_ijᵀ (B × b) = X_ijᵀ (B × c) · K_ijᵀ, X_ij the rows i·c·d + j + l·d of x (a
    column-major B × c matrix of leading dimension d·ldx); batched over j (or over i where
    a > d), one call per value of the other.  batch_first, d = 1: Y_iᵀ (b × B) = K_i X_iᵀ,
    X_i the columns i·c … of x; batched over i.  batch_first, d > 1 (_planar): x and y are the
    planar copies, block (i, j) a contiguous (B, c) and (B, b) matrix; batched over (i, j)."""
    a, b, c, d = pattern
    if layout == "batch_first":
        if costs.planar(pattern, layout):
            return [(cublas.OP_T, cublas.OP_N, b, rows, c, k, c, b * c, x, c, rows * c,
                     y, b, rows * b, a * d)]
        return [(cublas.OP_T, cublas.OP_N, b, rows, c, k, c, b * c, x, ldx, c, y, ldy, b, a)]
    # strides, in elements, of block (i, j) in x, K and y
    step_i = (c * d * ldx, d * b * c, b * d * ldy)
    step_j = (ldx, b * c, ldy)
    (inner, n_in), (outer, n_out) = sorted(((step_j, d), (step_i, a)), key=lambda s: -s[1])
    calls = []
    for t in range(n_out):
        ox, ok_, oy = (t * s * item for s in outer)
        calls.append((cublas.OP_N, cublas.OP_N, rows, b, c, x + ox, d * ldx, inner[0],
                      k + ok_, c, inner[1], y + oy, d * ldy, inner[2], n_in))
    return calls


def strided(spec, want_recipe=False, dense_slabs=False):
    """The product as cuBLAS strided-batched GEMMs ("strided"; dense_slabs: "block_dense", each
    factor's diagonal blocks formed dense first); with want_recipe, (result, recipe): the recipe
    (see _launch_strided_recipe) repeats the launches on new arrays of the same signature, None when this call needed casts or
    copies."""
    xp, cdt = spec.xp, spec.compute_dtype
    name = "block_dense" if dense_slabs else "strided"
    if not available(backend.on_cuda(spec.x), cdt):
        raise ValueError(f"algorithm: {name!r} runs cuBLAS on CUDA arrays (float16, bfloat16, "
                         "float32, float64) and needs CuPy and kronlinalg's CUDA build; use "
                         "'kernel', 'bmm' or 'dense' (or 'auto')")
    first = spec.layout == "batch_first"
    x = backend.cast(xp, spec.x, cdt)
    in_shape = (spec.rows, spec.in_len) if first else (spec.in_len, spec.rows)
    clean = x is spec.x and cdt == spec.result_dtype
    steps = []
    with backend.cuda_device_scope(x):
        launch = _StridedLaunch(x, spec.rows, spec.layout, cdt, dense_slabs,
                                packed=spec.forms is not None)
        cur = x.reshape(in_shape)
        for t in reversed(range(len(spec.chain))):
            f = spec.chain[t]
            a, b, c, d = f.pattern
            xv = backend.device_view(cur)
            ld, ok = rows_view(xv.shape, xv.strides, spec.layout)
            if not ok:
                cur = backend.contiguous(cur)
                xv = backend.device_view(cur)
                ld = xv.strides[0] if xv.shape[0] > 1 else xv.shape[1]
            out_2d = (spec.rows, a * b * d) if first else (a * b * d, spec.rows)
            gemm = costs.dense_slabs(f.pattern) if dense_slabs else f.pattern
            if not costs.strided_fits(gemm, spec.layout, spec.rows, ld, out_2d[1]):
                raise ValueError(f"algorithm: {name!r} needs pattern {f.pattern} with "
                                 f"layout={spec.layout!r} and {spec.rows} rows to be GEMMs of "
                                 f"32-bit sizes; use 'kernel' or 'auto'")
            v = backend.contiguous(backend.cast(xp, f.values, cdt))
            clean = clean and ok and v is f.values
            kform = formed(spec.forms, (name, t, cdt), lambda: launch.form(f.pattern, v))
            cur = launch.factor(f.pattern, cur, ld, v, out_2d, kform)
            steps.append((f.pattern, ld, out_2d))
    out = backend.cast(spec.xp, cur.reshape(spec.out_shape), spec.result_dtype)
    if not want_recipe:
        return out
    recipe = ((_launch_strided_recipe, (spec.rows, spec.layout, cdt, name, in_shape,
                                        spec.out_shape, tuple(steps))) if clean else None)
    return out, recipe


class _StridedLaunch:
    """One call's cuBLAS setting (library, stream, device) and the launches of its factors."""

    def __init__(self, x, rows, layout, cdt, dense_slabs=False, packed=False):
        self.rows, self.layout, self.cdt, self.dense_slabs = rows, layout, cdt, dense_slabs
        self.tune = cublaslt.wanted(packed)  # packed weights pick their GEMM algorithms
        self.item, self.code = dtypes.ITEMSIZE[cdt], dtypes.KERNEL_CODE[cdt]
        self.ptr = backend.address_getter(x)
        self.cupy_owned = backend.is_cupy(x)
        self.stream = backend.cuda_stream(x)
        self.device = x.device.id if self.cupy_owned else x.get_device()

    def form(self, pattern, values):
        """What the GEMMs read of K (values contiguous), formed by one launch where d > 1: its
        (i, j) blocks as row-major (b, c) matrices, (a, d, b, c) (a library's copy costs more),
        or for dense_slabs its a diagonal blocks dense, (a, b·d, c·d); None where d = 1 (the
        values themselves)."""
        a, b, c, d = pattern
        if d == 1:
            return None
        desc = (self.ptr(values), b * c * d, c * d, d, 1)
        if self.dense_slabs:
            kd = backend.empty_like_lib(values, (a, b * d, c * d), self.cdt)
            ks_cuda.dense_slabs(pattern, desc, self.ptr(kd), self.code, self.stream)
            return kd
        kt = backend.empty_like_lib(values, (a, d, b, c), self.cdt)
        ks_cuda.transpose_values(pattern, desc, self.ptr(kt), self.code, self.stream)
        return kt

    def factor(self, pattern, x2d, ld, values, out_2d, kform):
        """y = one factor's product with x2d (rows ld apart): the GEMM batches of
        _strided_calls on K's form (see form(); on planar copies of x and y where _planar says
        so), or for dense_slabs the GEMMs of the pattern _dense_slabs."""
        a, b, c, d = pattern
        ptr = self.ptr
        out = backend.empty_like_lib(x2d, out_2d, self.cdt)
        k = ptr(values) if kform is None else ptr(kform)
        gemm = costs.dense_slabs(pattern) if self.dense_slabs and d > 1 else pattern
        planar = costs.planar(gemm, self.layout)
        if planar:
            xs = backend.empty_like_lib(x2d, (a * d, self.rows, c), self.cdt)
            ys = backend.empty_like_lib(x2d, (a * d, self.rows, b), self.cdt)
            ks_cuda.planar(True, self.rows, a, c, d, ptr(x2d), ptr(xs), ld, self.code, self.stream)
            xa, ya = ptr(xs), ptr(ys)
        else:
            xa, ya = ptr(x2d), ptr(out)
        calls = strided_calls(gemm, self.layout, self.rows, xa, ld, k, ya, out_2d[1], self.item)
        cublas.gemm_strided_batched(calls, dtype=self.cdt, device=self.device,
                                     stream=self.stream, cupy_owned=self.cupy_owned,
                                     tune=self.tune)
        if planar:
            ks_cuda.planar(False, self.rows, a, b, d, ya, ptr(out), out_2d[1], self.code,
                           self.stream)
        return out


def _launch_strided_recipe(recipe, x, chain, forms=None):
    """_strided's launches again, for arrays whose signature matches the recipe's call: the
    per-call cost of the host is most of a small product's time (forms: a KSPacked's; another
    KSPacked of the same signature forms its own here on its first call)."""
    rows, layout, cdt, name, in_shape, out_shape, steps = recipe
    with backend.cuda_device_scope(x):
        launch = _StridedLaunch(x, rows, layout, cdt, name == "block_dense",
                                packed=forms is not None)
        cur = x.reshape(in_shape)
        for t, (pattern, ld, out_2d) in zip(reversed(range(len(chain))), steps):
            f = chain[t]
            kform = formed(forms, (name, t, cdt), lambda: launch.form(pattern, f.values))
            cur = launch.factor(pattern, cur, ld, f.values, out_2d, kform)
    return cur.reshape(out_shape)


def dense_gemm(spec, x, w):
    """Packed weights on CUDA: the dense product as one cuBLAS GEMM whose algorithm is tuned
    for its signature (kronlinalg._cublaslt), as a prepacked layer picks its kernel; None where
    that does not apply (no CuPy or CUDA build, gradients wanted, rows not unit-stride, sizes
    over 32 bits)."""
    cdt = spec.compute_dtype
    if not (backend.on_cuda(x) and ks_cuda is not None and cublas.available()
            and cublaslt.enabled() and cdt in cublas.dtypes()) or spec.grad is not None:
        return None
    first = spec.layout == "batch_first"
    rows, n, m = spec.rows, spec.in_len, w.shape[0]
    wv = backend.device_view(w)
    if tuple(wv.strides) != (n, 1):  # (a packed form is C-contiguous; be sure)
        return None
    x2 = x.reshape((rows, n) if first else (n, rows))
    view = backend.device_view(x2)
    ld, ok = rows_view(view.shape, view.strides, spec.layout)
    if not ok or max(rows, n, m, ld) > costs.INT_MAX or 0 in (rows, n, m):
        return None
    with backend.cuda_device_scope(x):
        launch = _StridedLaunch(x, rows, spec.layout, cdt, packed=True)
        out = backend.empty_like_lib(x2, (rows, m) if first else (m, rows), cdt)
        ptr = launch.ptr
        # column-major: batch_first Yᵀ (m × rows) = (Wᵀ)ᵀ · Xᵀ; batch_last Yᵀ = Xᵀ · Wᵀ
        call = ((cublas.OP_T, cublas.OP_N, m, rows, n, ptr(w), n, 0, ptr(x2), ld, 0, ptr(out),
                 m, 0, 1) if first else
                (cublas.OP_N, cublas.OP_N, rows, m, n, ptr(x2), ld, 0, ptr(w), n, 0, ptr(out),
                 rows, 0, 1))
        cublas.gemm_strided_batched([call], dtype=cdt, device=launch.device,
                                     stream=launch.stream, cupy_owned=launch.cupy_owned,
                                     tune=True)
    return out.reshape(spec.out_shape)


