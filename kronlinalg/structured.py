"""Kronecker-sparse products: ``x @ (K1 … KL)ᵀ`` in one pass per factor, never forming K.

A Kronecker-sparse (KS) factor of pattern (a, b, c, d) has support I_a ⊗ 1_{b×c} ⊗ I_d: its value
``[i, k, l, j]`` sits at row ``i·b·d + k·d + j`` and column ``i·c·d + l·d + j`` of a matrix of shape
``(a·b·d, a·c·d)``.  Products of such factors are butterfly, Monarch, block-diagonal and low-rank
matrices; neural networks use them in place of dense layers, with inference ``Y = X Kᵀ``.

Public function → validation → planner → candidate: the compiled one-pass kernel (CPU, or CUDA
for CuPy arrays / CUDA torch tensors), "strided" (CUDA: the (i, j) blocks as cuBLAS
strided-batched GEMMs, on views of x and y or on planar copies of them), "block_dense" (CUDA: the
factor's a diagonal blocks formed dense, one strided-batched GEMM on views of x and y), the "bmm"
algorithm (permute, batched matmul, permute) and "dense" (``x @ K.to_dense().T``), both through
the caller's array library.  A KSPacked chain (weights fixed, as in inference) keeps what these
derive from the weights between calls, and the planner then prices them without that work.

    >>> import numpy as np, kronlinalg
    >>> chain = kronlinalg.structured.monarch(16, 16, 4, rng=0)
    >>> x = np.ones((3, 16))
    >>> y = kronlinalg.structured_matmul(x, chain)
    >>> bool(np.allclose(y, x @ chain.to_dense().T))
    True
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import warnings
from dataclasses import dataclass

import array_api_compat
import numpy as np

from .common import backend as _backend, precision as _precision, validation as _validation
from .common.signatures import SignatureCache, arrays_signature
from .vendor import cublas as _cublas, cublaslt as _cublaslt
from ._ext import load

__all__ = ["KSFactor", "KSChain", "KSPacked", "structured_matmul", "tune", "float32_precision",
           "butterfly", "block_butterfly", "monarch", "low_rank", "block_diagonal"]

ALGORITHMS = ("auto", "kernel", "strided", "block_dense", "bmm", "dense")
LAYOUTS = ("batch_first", "batch_last")
ks_cpu, ks_cuda = load("structured_cpu"), load("structured_cuda")
_KERNEL_DTYPE = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3}
_ITEMSIZE = _cublas.ITEMSIZE


def _pattern(name: str, pattern) -> tuple:
    """(a, b, c, d) as four positive Python ints; ValueError/TypeError naming `name`."""
    if isinstance(pattern, (str, bytes)) or not hasattr(pattern, "__len__") or len(pattern) != 4:
        raise ValueError(f"{name}: expected a pattern (a, b, c, d) of four positive integers, "
                         f"got {pattern!r}")
    out = []
    for v in pattern:
        try:
            v = operator.index(v)
        except TypeError:
            raise TypeError(f"{name}: pattern entries must be integers, got {pattern!r}") from None
        if v < 1:
            raise ValueError(f"{name}: pattern entries must be positive, got {tuple(pattern)}")
        out.append(v)
    return tuple(out)


_MASKS: dict = {}  # (library, pattern, dtype, device) -> support mask: forming one is ~5 launches


def _support_mask(xp, pattern, dtype, device):
    """(a·b·d, a·c·d) array of ones on the pattern's support, zeros elsewhere, as
    (a, b, d, a, c, d) broadcast products of identities (cached: read-only, reused per call)."""
    key = (xp.__name__, pattern, str(dtype), str(device))
    mask = _MASKS.get(key)
    if mask is None:
        a, b, c, d = pattern
        ea = xp.reshape(xp.eye(a, dtype=dtype, device=device), (a, 1, 1, a, 1, 1))
        ed = xp.reshape(xp.eye(d, dtype=dtype, device=device), (1, 1, d, 1, 1, d))
        ones = xp.ones((1, b, 1, 1, c, 1), dtype=dtype, device=device)
        mask = ea * ed * ones
        if len(_MASKS) >= 64:
            _MASKS.clear()
        _MASKS[key] = mask
    return mask


class KSFactor:
    """One Kronecker-sparse factor: a pattern (a, b, c, d) and its a·b·c·d values.

    Parameters
    ----------
    pattern : (a, b, c, d)
        Positive integers; the factor is an ``(a·b·d) × (a·c·d)`` matrix.
    values : array of shape (a, b, c, d)
        Any array-API array (NumPy, CuPy, torch, ...); ``values[i, k, l, j]`` is the entry at row
        ``i·b·d + k·d + j``, column ``i·c·d + l·d + j``.  Kept by reference, not copied.
    """

    __slots__ = ("pattern", "values")

    def __init__(self, pattern, values):
        self.pattern = _pattern("pattern", pattern)
        try:
            array_api_compat.array_namespace(values)
        except TypeError:
            raise TypeError(f"values: expected an array, got {type(values).__name__}") from None
        _validation.float_dtype("values", values)
        if tuple(values.shape) != self.pattern:
            raise ValueError(f"values: expected shape (a, b, c, d) = {self.pattern}, got "
                             f"{tuple(values.shape)}")
        self.values = values

    @property
    def shape(self) -> tuple:
        a, b, c, d = self.pattern
        return (a * b * d, a * c * d)

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def device(self):
        return array_api_compat.device(self.values)

    def __repr__(self) -> str:
        return (f"KSFactor(pattern={self.pattern}, shape={self.shape}, "
                f"dtype={_backend.dtype_name(self.dtype)})")

    def to_dense(self):
        """The factor as a dense ``(a·b·d, a·c·d)`` array of values' namespace, dtype and device."""
        xp = array_api_compat.array_namespace(self.values)
        a, b, c, d = self.pattern
        if a == 1 and d == 1:  # one dense block: the values are the matrix
            return xp.reshape(self.values, (b, c))
        v = xp.reshape(xp.permute_dims(self.values, (0, 1, 3, 2)), (a, b, d, 1, c, 1))
        dense = v * _support_mask(xp, self.pattern, self.values.dtype, self.device)
        return xp.reshape(dense, self.shape)

    @classmethod
    def from_dense(cls, matrix, pattern):
        """The factor of `pattern` whose dense form is `matrix`; ValueError if `matrix` has the
        wrong shape or nonzeros outside the pattern's support."""
        pattern = _pattern("pattern", pattern)
        try:
            xp = array_api_compat.array_namespace(matrix)
        except TypeError:
            raise TypeError(f"matrix: expected an array, got {type(matrix).__name__}") from None
        _validation.float_dtype("matrix", matrix)
        a, b, c, d = pattern
        want = (a * b * d, a * c * d)
        if tuple(matrix.shape) != want:
            raise ValueError(f"matrix: expected shape (a·b·d, a·c·d) = {want} for pattern "
                             f"{pattern}, got {tuple(matrix.shape)}")
        m6 = xp.reshape(matrix, (a, b, d, a, c, d))
        mask = _support_mask(xp, pattern, matrix.dtype, array_api_compat.device(matrix))
        if bool(xp.any((m6 * (1 - mask)) != 0)):
            raise ValueError(f"matrix: has nonzeros outside the support of pattern {pattern} "
                             "(I_a ⊗ 1_(b×c) ⊗ I_d)")
        # sum over the off-diagonal copies of i and j, which are zero: the diagonal remains
        v = xp.sum(xp.sum(m6 * mask, axis=5), axis=3)  # (a, b, d, c)
        return cls(pattern, xp.permute_dims(v, (0, 1, 3, 2)))

    @classmethod
    def random(cls, pattern, /, *, rng=None, xp=None, dtype=None, device=None):
        """A factor with standard-normal values scaled by 1/√c (products of such factors keep
        unit scale).  rng: a numpy Generator or seed; xp: the namespace (default NumPy)."""
        pattern = _pattern("pattern", pattern)
        gen = np.random.default_rng(rng)
        vals = gen.standard_normal(pattern) / math.sqrt(pattern[2])
        return cls(pattern, _as_array(vals, xp, dtype, device))


def _as_array(host: np.ndarray, xp, dtype, device):
    if xp is None:
        xp = array_api_compat.array_namespace(np.empty(0))
    elif not hasattr(xp, "__array_api_version__"):
        xp = array_api_compat.array_namespace(xp.asarray([0.0]))
    if dtype is None:
        try:
            dtype = xp.__array_namespace_info__().default_dtypes(device=device)["real floating"]
        except (AttributeError, TypeError, KeyError):
            dtype = xp.float64
    elif isinstance(dtype, str):
        dtype = getattr(xp, dtype)
    out = xp.asarray(host, device=device) if device is not None else xp.asarray(host)
    return xp.astype(out, dtype)


class KSChain:
    """A product K1 K2 … KL of Kronecker-sparse factors (the shapes must chain: K_t has as many
    columns as K_{t+1} has rows).  Sequence of KSFactor; ``shape`` is the product's shape."""

    __slots__ = ("factors",)

    def __init__(self, factors):
        if isinstance(factors, KSFactor):
            factors = [factors]
        if isinstance(factors, (str, bytes)) or not hasattr(factors, "__iter__"):
            raise TypeError(f"factors: expected a sequence of KSFactor, got "
                            f"{type(factors).__name__}")
        factors = list(factors)
        if not factors:
            raise ValueError("factors: expected at least one KSFactor, got none")
        for t, f in enumerate(factors):
            if not isinstance(f, KSFactor):
                raise TypeError(f"factors[{t}]: expected a KSFactor, got {type(f).__name__}")
        for t in range(len(factors) - 1):
            cols, rows = factors[t].shape[1], factors[t + 1].shape[0]
            if cols != rows:
                raise ValueError(
                    f"factors: factor {t} (pattern {factors[t].pattern}) has {cols} columns but "
                    f"factor {t + 1} (pattern {factors[t + 1].pattern}) has {rows} rows; "
                    "the shapes of a chain must match (a·c·d of one = a·b·d of the next)")
        self.factors = tuple(factors)

    @property
    def shape(self) -> tuple:
        return (self.factors[0].shape[0], self.factors[-1].shape[1])

    @property
    def patterns(self) -> tuple:
        return tuple(f.pattern for f in self.factors)

    def __len__(self) -> int:
        return len(self.factors)

    def __iter__(self):
        return iter(self.factors)

    def __getitem__(self, t):
        return self.factors[t]

    def __repr__(self) -> str:
        return f"KSChain(patterns={list(self.patterns)}, shape={self.shape})"

    def to_dense(self):
        """The dense product K1 … KL (in the factors' namespace, dtype and device)."""
        out = self.factors[0].to_dense()
        for f in self.factors[1:]:
            out = out @ f.to_dense()
        return out

    @classmethod
    def random(cls, patterns, /, *, rng=None, xp=None, dtype=None, device=None):
        """A chain of KSFactor.random factors of these patterns, drawn from one generator."""
        gen = np.random.default_rng(rng)
        return cls([KSFactor.random(p, rng=gen, xp=xp, dtype=dtype, device=device)
                    for p in patterns])


class KSPacked(KSChain):
    """A chain packed for repeated products with fixed weights (inference): its values are
    copies taken here, and what an algorithm derives from them per call — the K blocks
    transposed for the strided GEMMs, the dense diagonal blocks of block_dense, the dense
    product, bmm's batched weight stacks — is formed on its first use and kept, as the
    weight prepacking of fbgemm/oneDNN linear layers does.  Later changes to the original
    arrays are not seen (pack again); torch values are detached (no gradients flow to
    them; x's still do).  The planner knows: ``algorithm="auto"`` prices the algorithms
    without their per-call weight work.

    Parameters
    ----------
    factors : KSFactor, KSChain or sequence of KSFactor
    """

    __slots__ = ("_forms",)

    def __init__(self, factors):
        chain = KSChain(factors).factors
        super().__init__([KSFactor(f.pattern, _snapshot(f.values)) for f in chain])
        self._forms = {}

    def __repr__(self) -> str:
        return (f"KSPacked(patterns={list(self.patterns)}, shape={self.shape}, "
                f"formed={sorted({k[0] for k in self._forms})})")


def _snapshot(values):
    """A copy of values that no later in-place change of the original reaches."""
    if _backend.is_torch(values):
        return values.detach().clone()
    xp = array_api_compat.array_namespace(values)
    return xp.asarray(values, copy=True)


def _formed(forms, key, make):
    """make() for an unpacked call (forms None); for a KSPacked's forms, its form `key`, made
    on first use (by whichever call of its signature comes first, fast path or not)."""
    if forms is None:
        return make()
    if key not in forms:
        forms[key] = make()
    return forms[key]


# ---------------------------------------------------------------------------------------------
# families


def _log2(name, n) -> int:
    n = _validation.count(name, n)
    if n < 2 or n & (n - 1):
        raise ValueError(f"{name}: expected a power of two >= 2, got {n}")
    return n.bit_length() - 1


def _divides(name, what, by, by_name):
    if by < 1 or what % by:
        raise ValueError(f"{name}: must be divisible by {by_name} = {by}, got {what}")


def butterfly(n, /, *, rng=None, xp=None, dtype=None, device=None) -> KSChain:
    """Square dyadic butterfly of size n = 2^L: L factors, factor ℓ of pattern
    (2^(ℓ−1), 2, 2, 2^(L−ℓ))."""
    L = _log2("n", n)
    return KSChain.random([(2 ** (t - 1), 2, 2, 2 ** (L - t)) for t in range(1, L + 1)],
                          rng=rng, xp=xp, dtype=dtype, device=device)


def block_butterfly(n, block, /, *, rng=None, xp=None, dtype=None, device=None) -> KSChain:
    """Block butterfly of size n = block·2^L: the dyadic butterfly whose 2×2 butterflies mix
    (2·block)-point groups, factor ℓ of pattern (2^(ℓ−1), 2·block, 2·block, 2^(L−ℓ))
    (block = 1 is the dyadic butterfly)."""
    n = _validation.count("n", n)
    block = _validation.count("block", block)
    if block < 1:
        raise ValueError(f"block: expected a positive integer, got {block}")
    _divides("n", n, block, "block")
    L = _log2("n / block", n // block)
    return KSChain.random(
        [(2 ** (t - 1), 2 * block, 2 * block, 2 ** (L - t)) for t in range(1, L + 1)],
        rng=rng, xp=xp, dtype=dtype, device=device)


def monarch(m, n, p, /, *, rng=None, xp=None, dtype=None, device=None) -> KSChain:
    """Monarch matrix of shape (m, n) with p blocks: the chain
    (1, m/p, q/p, p) (p, q/p, n/p, 1), q = min(m, n) (block-diagonal, permuted block-diagonal)."""
    m, n, p = (_validation.count(k, v) for k, v in (("m", m), ("n", n), ("p", p)))
    if p < 1:
        raise ValueError(f"p: expected a positive integer, got {p}")
    q = min(m, n)
    for name, v in (("m", m), ("n", n)):
        _divides(name, v, p, "p")
    return KSChain.random([(1, m // p, q // p, p), (p, q // p, n // p, 1)],
                          rng=rng, xp=xp, dtype=dtype, device=device)


def low_rank(m, n, r, /, *, rng=None, xp=None, dtype=None, device=None) -> KSChain:
    """Rank-r matrix of shape (m, n) as the chain (1, m, r, 1) (1, r, n, 1): U Vᵀ."""
    m, n, r = (_validation.count(k, v) for k, v in (("m", m), ("n", n), ("r", r)))
    return KSChain.random([(1, m, r, 1), (1, r, n, 1)], rng=rng, xp=xp, dtype=dtype,
                          device=device)


def block_diagonal(m, n, blocks, /, *, rng=None, xp=None, dtype=None, device=None) -> KSChain:
    """Block-diagonal matrix of shape (m, n) with `blocks` dense blocks: the single factor
    (blocks, m/blocks, n/blocks, 1)."""
    m, n, k = (_validation.count(a, v) for a, v in (("m", m), ("n", n), ("blocks", blocks)))
    if k < 1:
        raise ValueError(f"blocks: expected a positive integer, got {k}")
    _divides("m", m, k, "blocks")
    _divides("n", n, k, "blocks")
    return KSChain.random([(k, m // k, n // k, 1)], rng=rng, xp=xp, dtype=dtype, device=device)


# ---------------------------------------------------------------------------------------------
# structured_matmul


@dataclass
class _Spec:
    """A validated structured_matmul call."""

    xp: object
    x: object
    chain: tuple  # KSFactor, K1 first
    layout: str
    rows: int  # B: the batch
    in_len: int  # columns of the product (x's feature length)
    out_len: int
    out_shape: tuple
    result_dtype: str
    compute_dtype: str
    forms: dict | None = None  # a KSPacked's formed weights (None: formed per call)


def _as_chain(factors) -> tuple:
    if isinstance(factors, KSChain):
        return factors.factors
    return KSChain(factors).factors


def _prepare(x, factors, layout) -> _Spec:
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    chain = _as_chain(factors)
    named = {"x": x, **{f"factors[{t}].values": f.values for t, f in enumerate(chain)}}
    xp = _validation.namespace_of(named)
    _validation.same_device(named)
    for name, a in named.items():
        _validation.float_dtype(name, a)
    M, N = chain[0].shape[0], chain[-1].shape[1]
    shape = tuple(x.shape)
    if x.ndim == 0:
        raise ValueError("x: expected at least 1 dimension, got a 0-D array")
    if layout == "batch_first":
        if shape[-1] != N:
            raise ValueError(
                f"x: last dimension must equal the number of columns of the factor product "
                f"(a·c·d of the last factor) = {N} for layout='batch_first', got shape {shape}")
        rows, out_shape = math.prod(shape[:-1]), shape[:-1] + (M,)
    else:
        if x.ndim > 2:
            raise ValueError(f"x: layout='batch_last' takes x of shape (N, B) or (N,), got shape "
                             f"{shape}")
        if shape[0] != N:
            raise ValueError(
                f"x: first dimension must equal the number of columns of the factor product "
                f"(a·c·d of the last factor) = {N} for layout='batch_last', got shape {shape}")
        rows, out_shape = (shape[1] if x.ndim == 2 else 1), (M,) + shape[1:]
    result = _backend.dtype_name(xp.result_type(*named.values()))
    # the CUDA kernel computes half types natively (float32 accumulation); elsewhere in float32
    compute = result if _backend.on_cuda(x) else _backend.kernel_dtype(result)
    forms = factors._forms if isinstance(factors, KSPacked) else None
    return _Spec(xp, x, chain, layout, rows, N, M, out_shape, result, compute, forms)


def structured_matmul(x, factors, /, *, layout="batch_first", algorithm="auto"):
    """``x @ (K1 … KL)ᵀ`` (layout="batch_first") or ``(K1 … KL) @ x`` (layout="batch_last") for
    Kronecker-sparse factors Kℓ, without forming them.

    Parameters
    ----------
    x : array
        batch_first: shape ``(..., N)``, leading dimensions are batch dimensions;
        batch_last: shape ``(N, B)`` or ``(N,)``.  N = a·c·d of the last factor.
    factors : KSFactor, KSChain, KSPacked or sequence of KSFactor
        K1 … KL; the shapes must chain.  Values and x must come from one library and device.
        A KSPacked keeps what the algorithms derive from the weights between calls.
    layout : {"batch_first", "batch_last"}
    algorithm : {"auto", "kernel", "strided", "block_dense", "bmm", "dense"}
        "kernel": the compiled one-pass kernel (CPU; CUDA for CuPy arrays and CUDA torch
        tensors), one launch per factor; "strided": CUDA with CuPy installed: each factor's
        (i, j) blocks as cuBLAS strided-batched GEMMs reading x and writing y in place
        (batch_last, or d = 1; K transposed first), or on planar copies of them (batch_first
        with d > 1); "block_dense": CUDA with CuPy installed: each factor's a diagonal blocks
        (b·d × c·d) formed dense by one launch, then one strided-batched GEMM in place (d times
        the flops of the others, no copies of x or y);
        "bmm": permute → batched matmul → permute through the array library; "dense":
        ``x @ K.to_dense().T`` through the array library; "auto": the planner's choice
        (``kronlinalg.explain("structured_matmul", x.shape, *patterns)``); for a KSPacked of
        one a = d = 1 factor on CUDA arrays (one GEMM whichever way it runs), measured: the
        first call times the algorithms on these arrays and keeps the fastest.

    Returns
    -------
    array in x's namespace and on x's device, of shape ``(..., M)`` (batch_first) or ``(M, B)``
    / ``(M,)`` (batch_last), M = a·b·d of the first factor, in the promoted dtype of x and the
    values (float16/bfloat16 accumulate in float32; on the CPU they are computed in float32).
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {ALGORITHMS}, got {algorithm!r}")
    fast_key = _fast_key(x, factors, layout, algorithm)
    if fast_key is not None:
        hit = _FAST.get(fast_key)
        if hit is not None:  # validated and planned before: only the arrays are new
            spec, chosen, recipe = hit
            chain = (factors.factors if isinstance(factors, KSChain) else
                     (factors,) if isinstance(factors, KSFactor) else tuple(factors))
            forms = factors._forms if isinstance(factors, KSPacked) else None
            if recipe is not None:
                launch, steps = recipe
                return launch(steps, x, chain, forms)
            return _execute(dataclasses.replace(spec, x=x, chain=chain, forms=forms), chosen)
    spec = _prepare(x, factors, layout)
    if spec.rows == 0:
        return spec.xp.zeros(spec.out_shape, dtype=getattr(spec.xp, spec.result_dtype),
                             device=array_api_compat.device(x))
    if _needs_autograd(spec):  # the kernels have no backward: differentiate through the library
        algorithm = "dense" if algorithm == "dense" else "bmm"
    if algorithm == "auto":
        algorithm = _measured_choice(spec, factors) or _choose(spec)
    if fast_key is None:
        return _execute(spec, algorithm)
    recipe = None
    if algorithm == "kernel" and _backend.on_cuda(x):
        out, recipe = _run_cuda(spec, want_recipe=True)
    elif algorithm in ("strided", "block_dense"):
        out, recipe = _strided(spec, want_recipe=True, dense_slabs=algorithm == "block_dense")
    else:
        out = _execute(spec, algorithm)
    # the arrays stay out of the cache (it must not keep them alive)
    _FAST.remember(fast_key, (dataclasses.replace(spec, x=None, chain=None), algorithm, recipe))
    return out


_float32_precision = _precision.Float32Precision(ks_cuda, "KRONLINALG_KS_FP32")


def float32_precision(precision=None) -> str:
    """How the CUDA kernel computes float32, for the whole process: ``"tf32x3"`` (the default)
    on tensor cores as three TF32 products per product (x = hi + lo; relative error ~1e-6 to
    7e-6 at c = 1024, against ~5e-7 with FMAs), or ``"ieee"``: CUDA-core float32 FMAs, about
    1.3-1.8x slower on compute-heavy patterns.  ``KRONLINALG_KS_FP32=ffma`` makes ``"ieee"`` the
    default.  With an argument, sets the mode (the planner's cached choices are dropped: its
    model follows the mode); returns the previous mode."""
    return _float32_precision(precision)


def tune(x, factors, /, *, layout="batch_first", repeats=5):
    """Time every algorithm that runs this product (the kernel and the strided GEMMs where they
    apply, bmm, dense) on these arrays and make the fastest what ``algorithm="auto"`` runs for
    calls of the same signature (shapes, dtype, device, layout) in this process: the measured
    counterpart of the cost model, for workloads that repeat one shape (like
    ``torch.backends.cudnn.benchmark``).
    Each algorithm runs once to warm up, then `repeats` times, each waited for; the median
    counts.  ``kronlinalg.planner.clear_cache()`` returns to the model.  Returns ``{algorithm:
    seconds}``, fastest first."""
    import time

    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: expected a positive int, got {repeats!r}")

    def host_times(runs):
        out = []
        for run in runs:
            _backend.synchronize(x)
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                run()
                _backend.synchronize(x)
                samples.append(time.perf_counter() - t0)
            out.append(float(np.median(samples)))
        return out

    ranked = _measure(_prepare(x, factors, layout), x, factors, host_times)
    return {c.name: c.seconds for c in ranked}


def _plan_query(spec: _Spec) -> tuple:
    """(shapes, options) under which the planner knows this call's signature."""
    shapes = (tuple(spec.x.shape),) + tuple(f.pattern for f in spec.chain)
    return shapes, dict(dtype=spec.compute_dtype, device=spec.x, **_plan_options(spec))


def _measure(spec: _Spec, x, factors, time_runs) -> list:
    """Run every algorithm of this product once on the caller's arrays (its GEMMs tuned on the
    way), time them with ``time_runs(runs)`` (seconds each) and make that the plan of the
    signature (planner.record); returns the ranked plan.  Strided is among them wherever it
    runs, also where the model leaves it out (its GEMMs are bmm's, but its formulation is
    sometimes cuBLAS's fastest)."""
    from . import planner

    shapes, opts = _plan_query(spec)
    names = [c.name for c in planner.plan("structured_matmul", *shapes, **opts)]
    if "strided" not in names and _strided_runs(spec):
        names.append("strided")
    runs = [functools.partial(structured_matmul, x, factors, layout=spec.layout, algorithm=name)
            for name in names]
    for run in runs:
        with _cublaslt.tuning():  # the first run picks the GEMMs' algorithms (strided, …)
            run()
    times = dict(zip(names, time_runs(runs)))
    return planner.record("structured_matmul", *shapes, times=times, **opts)


def _execute(spec: _Spec, algorithm: str):
    if algorithm == "dense":
        return _dense(spec)
    if algorithm == "bmm":
        return _bmm(spec)
    if algorithm in ("strided", "block_dense"):
        return _strided(spec, dense_slabs=algorithm == "block_dense")
    return _run_cuda(spec) if _backend.on_cuda(spec.x) else _run_cpu(spec)


# The per-call fast path for CUDA arrays: a call whose signature (library, shapes, strides,
# dtypes, devices, patterns, layout, algorithm) was validated and planned before skips both;
# on a batch of a few thousand rows validation costs as much as the kernels.
_FAST = SignatureCache()


def _fast_key(x, factors, layout, algorithm):
    """Hashable signature of a call on CUDA arrays, or None (the full path)."""
    packed = isinstance(factors, KSPacked)
    if isinstance(factors, KSFactor):
        factors = (factors,)
    elif isinstance(factors, KSChain):
        factors = factors.factors
    elif type(factors) not in (list, tuple) or not all(isinstance(f, KSFactor) for f in factors):
        return None
    arrays = arrays_signature([x] + [f.values for f in factors], host=False)
    if arrays is None:
        return None
    return (layout, algorithm, packed) + arrays + tuple(f.pattern for f in factors)


def _needs_autograd(spec: _Spec) -> bool:
    if not _backend.is_torch(spec.x):
        return False
    import torch

    arrays = [spec.x] + [f.values for f in spec.chain]
    return torch.is_grad_enabled() and any(a.requires_grad for a in arrays)


def _cast(xp, a, name):
    return a if _backend.dtype_name(a.dtype) == name else xp.astype(a, getattr(xp, name))


def _finish(spec: _Spec, out):
    if _backend.dtype_name(out.dtype) != spec.result_dtype:
        out = spec.xp.astype(out, getattr(spec.xp, spec.result_dtype))
    return out


# ---------------------------------------------------------------------------------------------
# the compiled kernel: one call per factor, last factor first


def _rows_view(shape, strides, layout):
    """(leading dimension, ok) of a 2-D operand as the kernel reads it: the feature axis
    (batch_first) or the batch axis (batch_last) must be contiguous and rows must not overlap."""
    rows, cols = shape
    ld, es = strides
    ok = cols <= 1 or es == 1
    ok = ok and (rows <= 1 or ld >= max(cols, 1))
    return (ld if rows > 1 else max(cols, 1)), ok


def _values_desc(view):
    return (view.ptr,) + tuple(view.strides)


def _factor_calls(spec: _Spec):
    """(pattern, rows in, rows out) per kernel call, in call order (last factor first)."""
    return [f.pattern for f in reversed(spec.chain)]


def _run_cpu(spec: _Spec):
    if ks_cpu is None:
        raise RuntimeError("structured_matmul: the CPU kernel is not built (reinstall kronlinalg)")
    xp, cdt = spec.xp, spec.compute_dtype
    xn = _backend.to_numpy(_cast(xp, spec.x, cdt))
    first = spec.layout == "batch_first"
    cur = np.reshape(xn, (spec.rows, spec.in_len) if first else (spec.in_len, spec.rows))
    vals = [_backend.to_numpy(_cast(xp, f.values, cdt)) for f in reversed(spec.chain)]
    code = _KERNEL_DTYPE[cdt]
    for f, v in zip(reversed(spec.chain), vals):
        a, b, c, d = f.pattern
        xv = _backend.host_view(cur)
        ld, ok = _rows_view(xv.shape, xv.strides, spec.layout)
        if not ok:
            cur = np.ascontiguousarray(cur)
            xv = _backend.host_view(cur)
            ld = xv.strides[0] if cur.shape[0] > 1 else cur.shape[1]
        out = np.empty((spec.rows, a * b * d) if first else (a * b * d, spec.rows), dtype=cdt)
        ks_cpu.matmul(f.pattern, spec.rows, 0 if first else 1, _values_desc(_backend.host_view(v)),
                      (xv.ptr, ld), (out.ctypes.data, out.shape[1]), code)
        cur = out
    out = np.reshape(cur, spec.out_shape)
    return _finish(spec, _backend.from_host(spec.x, xp, out))


def _run_cuda(spec: _Spec, want_recipe=False):
    """The product through the CUDA kernel; with want_recipe, (result, recipe) where the recipe
    (see _launch_recipe) repeats the same launches on new arrays of the same signature, or is
    None when this call needed casts or copies."""
    if ks_cuda is None:
        raise RuntimeError(
            "structured_matmul: got a CUDA array, but kronlinalg was built without CUDA "
            "(reinstall with nvcc on PATH, or -Csetup-args=-Dcuda=enabled)")
    kron_cuda = load("kron_cuda")

    xp, cdt = spec.xp, spec.compute_dtype
    if cdt not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"algorithm: the CUDA kernel computes float32, float16 and bfloat16, not "
                         f"{cdt}; use algorithm='bmm' or 'dense' (or 'auto') for {cdt}")
    kron_cuda.device_check()  # one check for every kernel family: is a GPU usable at all
    first = spec.layout == "batch_first"
    x = _cast(xp, spec.x, cdt)
    code = _KERNEL_DTYPE[cdt]
    in_shape = (spec.rows, spec.in_len) if first else (spec.in_len, spec.rows)
    clean = x is spec.x and cdt == spec.result_dtype
    steps = []
    with _backend.cuda_device_scope(x):
        stream = _backend.cuda_stream(x)
        cur = xp.reshape(x, in_shape)
        for f in reversed(spec.chain):
            a, b, c, d = f.pattern
            v = _backend.contiguous(_cast(xp, f.values, cdt))  # the kernel reads K in (a,b,c,d) order
            xv = _backend.device_view(cur)
            ld, ok = _rows_view(xv.shape, xv.strides, spec.layout)
            if not ok:
                cur = _backend.contiguous(cur)
                xv = _backend.device_view(cur)
                ld = xv.strides[0] if xv.shape[0] > 1 else xv.shape[1]
            clean = clean and ok and v is f.values
            out_2d = (spec.rows, a * b * d) if first else (a * b * d, spec.rows)
            out = _backend.empty_like_lib(cur, out_2d, cdt)
            vdesc = _values_desc(_backend.device_view(v))
            ks_cuda.matmul(f.pattern, spec.rows, 0 if first else 1, vdesc, (xv.ptr, ld),
                           (_backend.device_view(out).ptr, out.shape[1]), code, stream)
            steps.append((f.pattern, vdesc[1:], ld, out_2d))
            cur = out
    out = _finish(spec, xp.reshape(cur, spec.out_shape))
    if not want_recipe:
        return out
    recipe = ((_launch_recipe, (spec.rows, 0 if first else 1, code, cdt, in_shape,
                                spec.out_shape, tuple(steps))) if clean else None)
    return out, recipe


def _launch_recipe(recipe, x, chain, forms=None):
    """_run_cuda's launches again, for arrays whose signature matches the recipe's call."""
    rows, layout, code, cdt, in_shape, out_shape, steps = recipe
    ptr = _backend.address_getter(x)
    with _backend.cuda_device_scope(x):
        stream = _backend.cuda_stream(x)
        cur = x.reshape(in_shape)
        for f, (pattern, vstrides, ld, out_2d) in zip(reversed(chain), steps):
            out = _backend.empty_like_lib(x, out_2d, cdt)
            ks_cuda.matmul(pattern, rows, layout, (ptr(f.values),) + vstrides, (ptr(cur), ld),
                           (ptr(out), out_2d[1]), code, stream)
            cur = out
    return cur.reshape(out_shape)


# ---------------------------------------------------------------------------------------------
# the array-library algorithms


def _bmm_weights(xp, values, pattern, layout):
    """The factor's (i, j) blocks as a stack for batched matmul: (a·d, c, b) for batch_first
    (x blocks times Kᵀ blocks), (a·d, b, c) for batch_last."""
    a, b, c, d = pattern
    perm = (0, 3, 2, 1) if layout == "batch_first" else (0, 3, 1, 2)
    shape = (a * d, c, b) if layout == "batch_first" else (a * d, b, c)
    return xp.reshape(xp.permute_dims(values, perm), shape)


def _bmm_apply(xp, cur, kb, pattern, layout):
    """One factor by permute → batched matmul → permute (the KS paper's "bmm" baseline)."""
    a, b, c, d = pattern
    if layout == "batch_first":
        B = cur.shape[0]
        if a * d == 1:
            return cur @ kb[0, ...]
        xp_ = xp.reshape(xp.permute_dims(xp.reshape(cur, (B, a, c, d)), (1, 3, 0, 2)), (a * d, B, c))
        yp = xp.matmul(xp_, kb)  # (a·d, B, b)
        return xp.reshape(xp.permute_dims(xp.reshape(yp, (a, d, B, b)), (2, 0, 3, 1)), (B, a * b * d))
    B = cur.shape[1]
    if a * d == 1:
        return kb[0, ...] @ cur
    xp_ = xp.reshape(xp.permute_dims(xp.reshape(cur, (a, c, d, B)), (0, 2, 1, 3)), (a * d, c, B))
    yp = xp.matmul(kb, xp_)  # (a·d, b, B)
    return xp.reshape(xp.permute_dims(xp.reshape(yp, (a, d, b, B)), (0, 2, 1, 3)), (a * b * d, B))


def _bmm(spec: _Spec):
    xp, cdt = spec.xp, spec.compute_dtype
    first = spec.layout == "batch_first"
    cur = xp.reshape(_cast(xp, spec.x, cdt),
                     (spec.rows, spec.in_len) if first else (spec.in_len, spec.rows))
    for t in reversed(range(len(spec.chain))):
        f = spec.chain[t]
        kb = _formed(spec.forms, ("bmm", t, cdt, spec.layout), lambda: _bmm_stack(spec, f, cdt))
        cur = _bmm_apply(xp, cur, kb, f.pattern, spec.layout)
    return _finish(spec, xp.reshape(cur, spec.out_shape))


def _bmm_stack(spec, f, cdt):
    """bmm's weights of one factor: a view of its values per call, a contiguous copy (the
    paper's pre-permuted weights) in a KSPacked."""
    kb = _bmm_weights(spec.xp, _cast(spec.xp, f.values, cdt), f.pattern, spec.layout)
    return kb if spec.forms is None else _backend.contiguous(kb)


def _dense(spec: _Spec):
    xp, cdt = spec.xp, spec.compute_dtype
    w = _formed(spec.forms, ("dense", cdt), lambda: KSChain(
        [KSFactor(f.pattern, _cast(xp, f.values, cdt)) for f in spec.chain]).to_dense())
    x = _cast(xp, spec.x, cdt)
    out = _dense_gemm(spec, x, w) if spec.forms is not None else None
    if out is None:
        out = x @ w.mT if spec.layout == "batch_first" else w @ x
    return _finish(spec, out)


def _dense_gemm(spec: _Spec, x, w):
    """Packed weights on CUDA: the dense product as one cuBLAS GEMM whose algorithm is tuned
    for its signature (kronlinalg._cublaslt), as a prepacked layer picks its kernel; None where
    that does not apply (no CuPy or CUDA build, gradients wanted, rows not unit-stride, sizes
    over 32 bits)."""
    cdt = spec.compute_dtype
    if not (_backend.on_cuda(x) and ks_cuda is not None and _cublas.available()
            and _cublaslt.enabled() and cdt in _cublas.dtypes()) or _needs_autograd(spec):
        return None
    first = spec.layout == "batch_first"
    rows, n, m = spec.rows, spec.in_len, w.shape[0]
    wv = _backend.device_view(w)
    if tuple(wv.strides) != (n, 1):  # (a packed form is C-contiguous; be sure)
        return None
    x2 = x.reshape((rows, n) if first else (n, rows))
    view = _backend.device_view(x2)
    ld, ok = _rows_view(view.shape, view.strides, spec.layout)
    if not ok or max(rows, n, m, ld) > _cublas.INT_MAX or 0 in (rows, n, m):
        return None
    with _backend.cuda_device_scope(x):
        launch = _StridedLaunch(x, rows, spec.layout, cdt, packed=True)
        out = _backend.empty_like_lib(x2, (rows, m) if first else (m, rows), cdt)
        ptr = launch.ptr
        # column-major: batch_first Yᵀ (m × rows) = (Wᵀ)ᵀ · Xᵀ; batch_last Yᵀ = Xᵀ · Wᵀ
        call = ((_cublas.OP_T, _cublas.OP_N, m, rows, n, ptr(w), n, 0, ptr(x2), ld, 0, ptr(out),
                 m, 0, 1) if first else
                (_cublas.OP_N, _cublas.OP_N, rows, m, n, ptr(x2), ld, 0, ptr(w), n, 0, ptr(out),
                 rows, 0, 1))
        _cublas.gemm_strided_batched([call], dtype=cdt, device=launch.device,
                                     stream=launch.stream, cupy_owned=launch.cupy_owned,
                                     tune=True)
    return out.reshape(spec.out_shape)


# ---------------------------------------------------------------------------------------------
# "strided": cuBLAS strided-batched GEMMs on views (CUDA)


def _strided_fits(pattern, layout, rows, ldx, ldy) -> bool:
    """Whether one factor's blocks are strided-batched GEMMs of 32-bit sizes: batch_last (block
    (i, j) of x is rows i·c·d + j + l·d, each contiguous along the batch), batch_first with d = 1
    (blocks are column ranges of x's rows), or batch_first with d > 1 on planar copies of x and
    y ((a·d, B, c) and (a·d, B, b), see _planar)."""
    a, b, c, d = pattern
    if layout == "batch_last":
        lead = d * max(ldx, ldy)
    else:
        lead = max(ldx, ldy) if d == 1 else max(b, c)
    return max(rows, b, c, lead, a * d) <= _cublas.INT_MAX


def _planar(pattern, layout) -> bool:
    """Whether the strided algorithm copies x and y to planar order for this factor: batch_first
    with d > 1, where a row of x holds the blocks interleaved as (i, l, j) and no GEMM can read
    block (i, j) in place.  One launch copies x to (a, d, B, c), the GEMMs read that, and one
    launch copies their (a, d, B, b) result into y's rows."""
    return layout == "batch_first" and pattern[3] > 1


def _strided_calls(pattern, layout, rows, x, ldx, k, y, ldy, item):
    """The column-major GEMM batches of one factor (see _cublas.gemm_strided_batched), from
    x's and y's addresses and row strides and K's: K[i, j] as a (b, c) row-major block at
    k + (i·d + j)·b·c (values transposed to (a, d, b, c); for d = 1 that is their own order).

    batch_last: Y_ijᵀ (B × b) = X_ijᵀ (B × c) · K_ijᵀ, X_ij the rows i·c·d + j + l·d of x (a
    column-major B × c matrix of leading dimension d·ldx); batched over j (or over i where
    a > d), one call per value of the other.  batch_first, d = 1: Y_iᵀ (b × B) = K_i X_iᵀ,
    X_i the columns i·c … of x; batched over i.  batch_first, d > 1 (_planar): x and y are the
    planar copies, block (i, j) a contiguous (B, c) and (B, b) matrix; batched over (i, j)."""
    a, b, c, d = pattern
    if layout == "batch_first":
        if _planar(pattern, layout):
            return [(_cublas.OP_T, _cublas.OP_N, b, rows, c, k, c, b * c, x, c, rows * c,
                     y, b, rows * b, a * d)]
        return [(_cublas.OP_T, _cublas.OP_N, b, rows, c, k, c, b * c, x, ldx, c, y, ldy, b, a)]
    # strides, in elements, of block (i, j) in x, K and y
    step_i = (c * d * ldx, d * b * c, b * d * ldy)
    step_j = (ldx, b * c, ldy)
    (inner, n_in), (outer, n_out) = sorted(((step_j, d), (step_i, a)), key=lambda s: -s[1])
    calls = []
    for t in range(n_out):
        ox, ok_, oy = (t * s * item for s in outer)
        calls.append((_cublas.OP_N, _cublas.OP_N, rows, b, c, x + ox, d * ldx, inner[0],
                      k + ok_, c, inner[1], y + oy, d * ldy, inner[2], n_in))
    return calls


def _dense_slabs(pattern) -> tuple:
    """The pattern of a factor's a diagonal blocks formed dense ("block_dense"): (a, b·d, c·d, 1),
    whose rows and columns are the factor's own (k·d + j, l·d + j')."""
    a, b, c, d = pattern
    return (a, b * d, c * d, 1)


def _strided(spec: _Spec, want_recipe=False, dense_slabs=False):
    """The product as cuBLAS strided-batched GEMMs ("strided"; dense_slabs: "block_dense", each
    factor's diagonal blocks formed dense first); with want_recipe, (result, recipe) as for
    _run_cuda (see _launch_strided_recipe), the recipe None when this call needed casts or
    copies."""
    xp, cdt = spec.xp, spec.compute_dtype
    name = "block_dense" if dense_slabs else "strided"
    if not (_backend.on_cuda(spec.x) and ks_cuda is not None and _cublas.available()
            and cdt in _cublas.dtypes()):
        raise ValueError(f"algorithm: {name!r} runs cuBLAS on CUDA arrays (float16, bfloat16, "
                         "float32, float64) and needs CuPy and kronlinalg's CUDA build; use "
                         "'kernel', 'bmm' or 'dense' (or 'auto')")
    first = spec.layout == "batch_first"
    x = _cast(xp, spec.x, cdt)
    in_shape = (spec.rows, spec.in_len) if first else (spec.in_len, spec.rows)
    clean = x is spec.x and cdt == spec.result_dtype
    steps = []
    with _backend.cuda_device_scope(x):
        launch = _StridedLaunch(x, spec.rows, spec.layout, cdt, dense_slabs,
                                packed=spec.forms is not None)
        cur = x.reshape(in_shape)
        for t in reversed(range(len(spec.chain))):
            f = spec.chain[t]
            a, b, c, d = f.pattern
            xv = _backend.device_view(cur)
            ld, ok = _rows_view(xv.shape, xv.strides, spec.layout)
            if not ok:
                cur = _backend.contiguous(cur)
                xv = _backend.device_view(cur)
                ld = xv.strides[0] if xv.shape[0] > 1 else xv.shape[1]
            out_2d = (spec.rows, a * b * d) if first else (a * b * d, spec.rows)
            gemm = _dense_slabs(f.pattern) if dense_slabs else f.pattern
            if not _strided_fits(gemm, spec.layout, spec.rows, ld, out_2d[1]):
                raise ValueError(f"algorithm: {name!r} needs pattern {f.pattern} with "
                                 f"layout={spec.layout!r} and {spec.rows} rows to be GEMMs of "
                                 f"32-bit sizes; use 'kernel' or 'auto'")
            v = _backend.contiguous(_cast(xp, f.values, cdt))
            clean = clean and ok and v is f.values
            kform = _formed(spec.forms, (name, t, cdt), lambda: launch.form(f.pattern, v))
            cur = launch.factor(f.pattern, cur, ld, v, out_2d, kform)
            steps.append((f.pattern, ld, out_2d))
    out = _finish(spec, cur.reshape(spec.out_shape))
    if not want_recipe:
        return out
    recipe = ((_launch_strided_recipe, (spec.rows, spec.layout, cdt, name, in_shape,
                                        spec.out_shape, tuple(steps))) if clean else None)
    return out, recipe


class _StridedLaunch:
    """One call's cuBLAS setting (library, stream, device) and the launches of its factors."""

    def __init__(self, x, rows, layout, cdt, dense_slabs=False, packed=False):
        self.rows, self.layout, self.cdt, self.dense_slabs = rows, layout, cdt, dense_slabs
        self.tune = _cublaslt.wanted(packed)  # packed weights pick their GEMM algorithms
        self.item, self.code = _ITEMSIZE[cdt], _KERNEL_DTYPE[cdt]
        self.ptr = _backend.address_getter(x)
        self.cupy_owned = _backend.is_cupy(x)
        self.stream = _backend.cuda_stream(x)
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
            kd = _backend.empty_like_lib(values, (a, b * d, c * d), self.cdt)
            ks_cuda.dense_slabs(pattern, desc, self.ptr(kd), self.code, self.stream)
            return kd
        kt = _backend.empty_like_lib(values, (a, d, b, c), self.cdt)
        ks_cuda.transpose_values(pattern, desc, self.ptr(kt), self.code, self.stream)
        return kt

    def factor(self, pattern, x2d, ld, values, out_2d, kform):
        """y = one factor's product with x2d (rows ld apart): the GEMM batches of
        _strided_calls on K's form (see form(); on planar copies of x and y where _planar says
        so), or for dense_slabs the GEMMs of the pattern _dense_slabs."""
        a, b, c, d = pattern
        ptr = self.ptr
        out = _backend.empty_like_lib(x2d, out_2d, self.cdt)
        k = ptr(values) if kform is None else ptr(kform)
        gemm = _dense_slabs(pattern) if self.dense_slabs and d > 1 else pattern
        planar = _planar(gemm, self.layout)
        if planar:
            xs = _backend.empty_like_lib(x2d, (a * d, self.rows, c), self.cdt)
            ys = _backend.empty_like_lib(x2d, (a * d, self.rows, b), self.cdt)
            ks_cuda.planar(True, self.rows, a, c, d, ptr(x2d), ptr(xs), ld, self.code, self.stream)
            xa, ya = ptr(xs), ptr(ys)
        else:
            xa, ya = ptr(x2d), ptr(out)
        calls = _strided_calls(gemm, self.layout, self.rows, xa, ld, k, ya, out_2d[1], self.item)
        _cublas.gemm_strided_batched(calls, dtype=self.cdt, device=self.device,
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
    with _backend.cuda_device_scope(x):
        launch = _StridedLaunch(x, rows, layout, cdt, name == "block_dense",
                                packed=forms is not None)
        cur = x.reshape(in_shape)
        for t, (pattern, ld, out_2d) in zip(reversed(range(len(chain))), steps):
            f = chain[t]
            kform = _formed(forms, (name, t, cdt), lambda: launch.form(pattern, f.values))
            cur = launch.factor(pattern, cur, ld, f.values, out_2d, kform)
    return cur.reshape(out_shape)


# ---------------------------------------------------------------------------------------------
# the cost model: candidates registered with the planner


def _normalise(shapes, options) -> dict:
    """Sizes of a structured_matmul problem from (x.shape, pattern of K1, …, pattern of KL)."""
    layout = options.get("layout", "batch_first")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    if len(shapes) < 2:
        raise ValueError("shapes: expected x's shape followed by at least one pattern (a, b, c, d)")
    x, patterns = tuple(shapes[0]), [_pattern(f"shapes[{t + 1}]", p)
                                    for t, p in enumerate(shapes[1:])]
    for t in range(len(patterns) - 1):
        (a, _, c, d), (a2, b2, _, d2) = patterns[t], patterns[t + 1]
        if a * c * d != a2 * b2 * d2:
            raise ValueError(f"shapes: pattern {t} has {a * c * d} columns but pattern {t + 1} "
                             f"has {a2 * b2 * d2} rows")
    a, _, c, d = patterns[-1]
    if not x:
        raise ValueError("shapes: x must have at least one dimension")
    if layout == "batch_first":
        if x[-1] != a * c * d:
            raise ValueError(f"shapes: x's last dimension must be {a * c * d}, got {x}")
        rows = math.prod(x[:-1])
    else:
        if x[0] != a * c * d:
            raise ValueError(f"shapes: x's first dimension must be {a * c * d}, got {x}")
        rows = math.prod(x[1:])
    flops = sum(2.0 * rows * math.prod(p) for p in patterns)
    packed = options.get("packed", False)
    if not isinstance(packed, bool):
        raise TypeError(f"packed: expected a bool, got {type(packed).__name__}")
    return {"B": rows, "patterns": patterns, "layout": layout, "flops": flops, "packed": packed}


def _io_elems(B, p):
    a, b, c, d = p
    return B * a * d * (b + c) + a * b * c * d  # X in, Y out, K once


def _permutes(B, p, layout):
    """Elements the bmm algorithm copies to bring the (i, j) blocks together and back."""
    a, b, c, d = p
    if a * d == 1:
        return 0.0
    moved = 0.0
    if layout == "batch_first":
        trivial = B == 1 or d == 1 and a == 1
        moved = 0.0 if trivial else 2.0 * B * a * d * (b + c)
    elif d > 1:
        moved = 2.0 * B * a * d * (b + c)
    return moved


def _kernel_terms(info, s_e, prof, dtype):
    if prof.kind != "cpu":
        return _kernel_cuda_terms(info, s_e, prof, dtype)
    B, layout = info["B"], info["layout"]
    mem = sum(_io_elems(B, p) for p in info["patterns"]) * s_e / prof.bandwidth
    rate = prof.flops(dtype)
    flop = sum(2.0 * B * math.prod(p) * _waste(p, layout, prof.kind) for p in info["patterns"])
    return {"mem": mem, "flop": flop / rate, "calls": len(info["patterns"]) * prof.launch_s}


def _waste(p, layout, kind) -> float:
    """Work the CPU kernel's vector lanes do on padding, as a factor >= 1 (the CUDA kernel's
    tiles are counted in _kernel_cuda_terms)."""
    a, b, c, d = p
    if kind == "cpu":
        lanes = 16
        if layout == "batch_first":
            return math.ceil(b * d / lanes) * lanes / (b * d)
        return 1.0
    tn, tk, tl, tj = _cuda_tile(p, 4)
    return (math.ceil(d / tj) * tj / d * math.ceil(b / tk) * tk / b
            * math.ceil(c / tl) * tl / c)


# The CUDA kernel's tile shapes as kernels/structured/ks_cuda.cu and ks_cuda_launch.cuh pick them
# (pick_tj, pick_tk and the instantiated shapes): TJ -> ((TK, TN), ...) for float32 (an l chunk
# TL of 8 when TJ < 4, else 4), TJ -> (TK, TN) for the half types (TL = 16).
_CUDA_F32_TILES = {1: ((32, 512), (128, 128)), 2: ((64, 128),), 4: ((16, 256), (64, 64)),
                   8: ((32, 64),), 16: ((16, 64),)}
_CUDA_HALF_TILES = {1: (64, 128), 2: (32, 128), 4: (16, 128), 8: (16, 64), 16: (16, 32)}


def _cuda_tj(d) -> int:
    if d in (1, 2, 4, 8, 16):
        return d
    for t in (16, 8, 4):
        if d % t == 0:
            return t
    return 4 if d < 4 else (8 if d < 8 else 16)


# The pipelined tensor-core kernel (ks_cuda_pipe.cuh, launch_pipe; float32 as 3xTF32), taken
# when c % 8 == 0 (and rows 16-byte aligned, which the model assumes): d -> (TN, TK, TL, TJ) with
# the half types' l chunk (float32: 16 for d = 1, else 8); d = 2, 3, 4, 6 whole, else TJ the
# largest of 8, 4, 2, 1 dividing d; for d = 1 the k tile of 128 or 64 that pads b least, l
# chunks of 64 (float32 on small slabs, batch_last or b > 64: 128 x 64).
_CUDA_PIPE_TILES = {2: (128, 64, 32, 2), 3: (64, 64, 32, 3), 6: (64, 32, 16, 6),
                    8: (64, 32, 16, 8), 4: (64, 64, 16, 4), 1: (128, 128, 16, 1)}


# Its wide shapes for the half types (launch_pipe_wide: 16 warps, or 12 for d = 6, one block per
# SM): d (spans) or TJ (runs) -> (TN, TK), with the narrow shape's TL and TJ, where they pay on an
# H100 (runs of 8 j batch_first, or b·c >= 128², runs of 4 j with b·c >= 128², the spans d = 2, 6
# batch_first with b·c >= 2·128²) and still give every SM two tiles.
_CUDA_PIPE_WIDE = {2: (128, 128), 6: (64, 64), 8: (64, 64), 4: (128, 64)}


def _cuda_wide_pays(p, first) -> bool:
    b, c, d = p[1], p[2], p[3]
    if d % 8 == 0:
        return first or b * c >= 128 * 128
    if d % 4 == 0 and d != 4:
        return b * c >= 128 * 128
    return d in (2, 6) and first and b * c >= 2 * 128 * 128


def _cuda_pipelined(p, s_e) -> bool:
    return p[2] % 8 == 0 and (s_e == 2 or float32_precision() == "tf32x3")


def _cuda_tile(p, s_e, B=0, units=0, first=True) -> tuple:
    """(TN, TK, TL, TJ): batch rows, outputs k, inputs l per chunk and j of one CUDA tile, for
    a batch of B (batch_first or not) on a device of `units` SMs (B = 0: the 8-warp shapes)."""
    b, d = p[1], p[3]
    if _cuda_pipelined(p, s_e) and s_e == 2 and B > 0 and _cuda_wide_pays(p, first):
        tn, tk, tl, tj = _cuda_tile(p, s_e)
        wide = _CUDA_PIPE_WIDE[d if d in (2, 6) else tj]
        blocks = p[0] * math.ceil(d / tj) * math.ceil(B / wide[0]) * math.ceil(b / wide[1])
        if blocks >= 2 * units:
            return (*wide, tl, tj)
    if _cuda_pipelined(p, s_e):
        if d == 1 and s_e == 4 and b * p[2] <= 384 * 512 and (not first or b > 64):
            tn, tk, tl, tj = 128, 64, 16, 1  # (4-warp tiles)
        elif d == 1:
            tn, tk, tl, tj = (256, 64, 64, 1) if -b % 64 < -b % 128 else (128, 128, 64, 1)
        elif d in (2, 3, 6):
            tn, tk, tl, tj = _CUDA_PIPE_TILES[d]
        else:
            tn, tk, tl, tj = _CUDA_PIPE_TILES[next(t for t in (8, 4, 2, 1) if d % t == 0)]
            if tj == 2:  # d % 4 == 2 beyond 2 and 6: runs of two j
                tn, tk, tl = 128, 64, 32
        if s_e == 4:  # float32: l chunks of 16 (d = 1) or 8
            tl = 16 if d == 1 else 8
        return tn, tk, tl, tj
    tj = _cuda_tj(d)
    if s_e == 2:
        tk, tn = _CUDA_HALF_TILES[tj]
        return tn, tk, 16, tj
    shapes = _CUDA_F32_TILES[tj]  # least padding of b plus 8/TK for re-reading X (pick_tk)
    tk, tn = min(shapes, key=lambda s: math.ceil(b / s[0]) * s[0] / b + 8.0 / s[0])
    return tn, tk, (8 if tj < 4 else 4), tj


def _kernel_cuda_terms(info, s_e, prof, dtype):
    """The one-pass CUDA kernel, per factor: DRAM traffic (X and Y once, K once); the flops of
    the padded tiles at the CUDA-core FMA peak (float32) or at a quarter of the GEMM rate (half
    types: mma.sync fed from shared memory); the same flops again where the loads cannot be
    16-byte vectors (d % 4 != 0 and the like: element-by-element gathers); per tile, its
    pipeline fill and epilogue (the flops of a 16-deep l chunk of the tile); L2 → SM traffic
    (X re-read once per k tile, K once per batch tile; runs shorter than a 32-byte sector cost a
    sector); launches."""
    B, first = info["B"], info["layout"] == "batch_first"
    half = s_e == 2
    simt = prof.units * 128 * 2.0 * prof.clock_hz  # CUDA-core FMA peak
    # float32 on the pipelined kernel: three TF32 products per product (a third of the tensor
    # cores' TF32 rate, never below the CUDA-core peak it replaces)
    tf32x3 = max(simt, prof.tc_ops.get("tf32", 0.0) * prof.units * prof.clock_hz / 3.0)
    vec = 16 // s_e
    t = dict.fromkeys(("mem", "flop", "unaligned", "tiles", "l2", "interleaved", "calls"), 0.0)
    for p in info["patterns"]:
        a, b, c, d = p
        tn, tk, tl, tj = _cuda_tile(p, s_e, B, prof.units, first)
        nn, nk, nl, nj = (math.ceil(B / tn), math.ceil(b / tk), math.ceil(c / tl),
                          math.ceil(d / tj))
        tiles = a * nj * nn * nk
        chunk = 2.0 * tn * tk * tj * tl  # flops of one l chunk of one tile
        rate = (prof.flops(dtype) / 4.0 if half
                else tf32x3 if _cuda_pipelined(p, s_e) else simt)
        t["mem"] += _io_elems(B, p) * s_e / prof.bandwidth
        t["flop"] += tiles * nl * chunk / rate
        # narrow loads: runs of fewer than 4 j outside the whole-d spans (the pipelined kernel),
        # not 16-byte vectors (the others)
        narrow = (tj < 4 and d not in (1, 2, 3, 6)) if _cuda_pipelined(p, s_e) else not (
            tj == d or (d % tj == 0 and tj % vec == 0))
        if narrow:
            t["unaligned"] += tiles * nl * chunk / rate
        # (per tile: its fill and epilogue, which scale with the output tile, not with TL)
        t["tiles"] += tiles * 2.0 * tn * tk * tj * 16 / rate
        sector = max(1.0, 32.0 / (tj * s_e)) if nj > 1 else 1.0
        x_reads = B * a * c * d * nk * (sector if first else 1.0)
        t["l2"] += (x_reads + a * b * c * d * nn * sector) * s_e / prof.bandwidth
        # a margin where the kernel's times are least predictable, the half types' batch_first X
        # with d > 1 (transposed on its way to the per-j tiles, against a dense GEMM that runs
        # d× the flops at the tensor cores' rate): the product's X and Y moved once more at the
        # DRAM rate, left out of the fit and added on top (benchmarks/structured_fit.py, FIXED)
        if half and first and d > 1:
            t["interleaved"] += B * a * d * (b + c) * s_e / prof.bandwidth
    t["calls"] = len(info["patterns"]) * prof.launch_s
    return t


# A library GEMM's fixed cost per output tile (its pipeline fill and epilogue, which a shallow
# reduction does not amortise): priced as a 128 x 128 tile's flops over a reduction of 64.
_GEMM_TILE_FLOPS = 2.0 * 128 * 128 * 64


def _gemm_tiles(rows, cols) -> int:
    return math.ceil(rows / 128) * math.ceil(cols / 128)


def _bmm_terms(info, s_e, prof, dtype):
    """Batched GEMM (bytes, flops at the GEMM rate), the permutes' copies, launches.  On CUDA
    the batch_first permutes are transposes at stride d (X's (B, c, d) → (d, B, c) and back):
    every element read or written at stride d moves a part of a 32-byte sector ("transpose")."""
    B, layout = info["B"], info["layout"]
    io = sum(_io_elems(B, p) for p in info["patterns"])
    perm = sum(_permutes(B, p, layout) for p in info["patterns"])
    calls = sum(1 if p[0] * p[3] == 1 else 3 for p in info["patterns"])
    tiles = sum(p[0] * p[3] * _gemm_tiles(B, p[1]) for p in info["patterns"])
    t = {"gemm_mem": io * s_e / prof.bandwidth, "gemm_flop": info["flops"] / prof.flops(dtype),
         "gemm_tiles": tiles * _GEMM_TILE_FLOPS / prof.flops(dtype),
         "permute": perm * s_e / prof.bandwidth, "calls": calls * prof.launch_s}
    if prof.kind != "cpu":
        strided = sum(_permutes(B, p, layout) * min(p[3] * s_e, 32)
                      for p in info["patterns"] if layout == "batch_first" and p[3] > 1)
        t["transpose"] = strided / prof.bandwidth
        # batch_last with a == 1: X's permute is a strided view that a library's batched GEMM
        # may take without a copy (torch does): its copy gets a coefficient of its own
        view = sum(B * p[3] * p[2] for p in info["patterns"]
                   if layout == "batch_last" and p[0] == 1 and p[3] > 1)
        t["permute"] -= view * s_e / prof.bandwidth
        t["permute_view"] = view * s_e / prof.bandwidth
    return t


def _dense_terms(info, s_e, prof, dtype):
    B, pats = info["B"], info["patterns"]
    M = pats[0][0] * pats[0][1] * pats[0][3]
    N = pats[-1][0] * pats[-1][2] * pats[-1][3]
    sizes = [p[0] * p[1] * p[3] for p in pats] + [N]  # rows of each factor, then N
    # forming K: a factor with a·d > 1 is its values times the support mask (written, read, and
    # written again by the reshape), ~3 library calls; one with a = d = 1 is a view of its
    # values; a chain adds a matmul (~3 calls' host time) per extra factor
    # (packed: K formed once, before the call)
    masked = [t for t, p in enumerate(pats) if p[0] * p[3] > 1 and not info["packed"]]
    chained = range(1, 1 if info["packed"] else len(pats))
    build = sum(sizes[t] * sizes[t + 1] for t in masked)
    build += sum(M * sizes[t + 1] for t in chained)
    chain = sum(2.0 * M * sizes[t] * sizes[t + 1] for t in chained)
    return {"gemm_mem": (B * (M + N) + M * N) * s_e / prof.bandwidth,
            "gemm_flop": (2.0 * B * M * N + chain) / prof.flops(dtype),
            "gemm_tiles": _gemm_tiles(B, M) * _GEMM_TILE_FLOPS / prof.flops(dtype),
            "build": 3.0 * build * s_e / prof.bandwidth,
            "calls": (2 + 3 * len(pats)) * prof.launch_s,
            "build_calls": (3 * len(masked) + 3 * len(chained)) * prof.launch_s}


def _strided_loops(p, layout) -> int:
    """cuBLAS calls of one factor (_strided_calls): one per value of the smaller of a and d
    (batch_last with d > 1), else one."""
    return min(p[0], p[3]) if layout == "batch_last" and p[3] > 1 else 1


def _strided_terms(info, s_e, prof, dtype):
    """cuBLAS strided-batched GEMMs: x and y once, K transposed (read, written, read), the
    GEMMs' flops and per-tile cost as for bmm, the transposing copy and the GEMM calls; where
    x and y go through planar copies (batch_first, d > 1), each read and written once more and
    two launches ("planar").  Packed: K transposed once, before the call."""
    B, pats, layout = info["B"], info["patterns"], info["layout"]
    per_call = not info["packed"]
    elems = sum(_io_elems(B, p) + (2 * math.prod(p) if p[3] > 1 and per_call else 0)
                for p in pats)
    tiles = sum(p[0] * p[3] * _gemm_tiles(B, p[1]) for p in pats)
    planar = [p for p in pats if _planar(p, layout)]
    calls = (sum(_strided_loops(p, layout) + (p[3] > 1 and per_call) for p in pats)
             + 2 * len(planar))
    moved = sum(_permutes(B, p, layout) for p in planar)  # the same copies as bmm's
    return {"gemm_mem": elems * s_e / prof.bandwidth,
            "gemm_flop": info["flops"] / prof.flops(dtype),
            "gemm_tiles": tiles * _GEMM_TILE_FLOPS / prof.flops(dtype),
            "planar": moved * s_e / prof.bandwidth,
            "calls": calls * prof.launch_s}


def _block_dense_terms(info, s_e, prof, dtype):
    """Each factor's diagonal blocks formed dense (read K, write a·b·c·d² elements, one launch
    where d > 1), then one strided-batched GEMM of the pattern _dense_slabs: x and y once, the
    dense blocks read, d times the flops, its per-tile cost as for bmm.  Packed: the blocks
    formed once, before the call."""
    B, pats = info["B"], info["patterns"]
    dense = [_dense_slabs(p) for p in pats]
    flops = sum(2.0 * B * math.prod(p) for p in dense)
    formed = sum(math.prod(p) * (1 + p[3]) for p in pats if p[3] > 1 and not info["packed"])
    return {"gemm_mem": sum(_io_elems(B, p) for p in dense) * s_e / prof.bandwidth,
            "gemm_flop": flops / prof.flops(dtype),
            "gemm_tiles": sum(p[0] * _gemm_tiles(B, p[1]) for p in dense) * _GEMM_TILE_FLOPS
            / prof.flops(dtype),
            "densify": formed * s_e / prof.bandwidth,
            "calls": sum(1 + (p[3] > 1 and not info["packed"]) for p in pats) * prof.launch_s}


_FAMILIES = {"kernel": _kernel_terms, "strided": _strided_terms, "block_dense": _block_dense_terms,
             "bmm": _bmm_terms,
             "dense": _dense_terms}
# Coefficients: how far each term sits from the device's nominal rate, per family
# "structured_matmul/<candidate>/<kind>", refined per dtype ("…/float16") and per dtype and
# layout ("…/float16/batch_last"); see _coefficients for the order of precedence.
# The CPU ones are from benchmarks/structured_compare.py --device cpu on the 2-core AVX-512
# development machine.
DEFAULT_COEF = {
    "structured_matmul/kernel/cpu": {"mem": 1.0, "flop": 1.2, "calls": 5.0},
    "structured_matmul/bmm/cpu": {"gemm_mem": 1.0, "gemm_flop": 1.0, "gemm_tiles": 0.0,
                                  "permute": 1.0, "calls": 5.0},
    "structured_matmul/dense/cpu": {"gemm_mem": 1.0, "gemm_flop": 1.0, "gemm_tiles": 0.0,
                                    "build": 1.0, "calls": 5.0},
    "structured_matmul/kernel/cuda": {"mem": 1.0, "flop": 1.0, "unaligned": 1.0, "tiles": 1.0,
                                      "l2": 0.3, "interleaved": 1.0, "calls": 1.0},
    # not fitted: cuBLAS's rates, one launch per call
    "structured_matmul/strided/cuda": {"gemm_mem": 1.0, "gemm_flop": 1.0, "gemm_tiles": 1.0,
                                       "planar": 1.0, "calls": 1.0},
    # the same cuBLAS strided-batched GEMMs and launches as strided: its coefficients
    # (_coefficients), and this one
    "structured_matmul/block_dense/cuda": {"densify": 1.0},
    "structured_matmul/bmm/cuda": {"gemm_mem": 1.0, "gemm_flop": 1.0, "gemm_tiles": 1.0,
                                   "permute": 1.0,
                                   "transpose": 0.1, "permute_view": 1.0, "calls": 1.0},
    # build_calls: the host time of the CuPy/torch calls that form K (not fitted: the benchmark
    # times dense with K formed beforehand).  Through the public call on the H100, dense cost
    # 68 µs (median over 40 single factors) more than its GEMM, ~23 µs for each of 3 calls,
    # ~5x the table's 4 µs launch; but 5.0 instead of 2.0 left the public calls' picks as good
    # as they were (68 % within 5 % either way) and cost 5 points of the kernel-level ones, so
    # it stays at 2 launches per call
    "structured_matmul/dense/cuda": {"gemm_mem": 1.0, "gemm_flop": 1.0, "gemm_tiles": 1.0,
                                     "build": 1.0, "calls": 1.0,
                                     "build_calls": 2.0},
}
# CUDA: fitted per candidate, dtype and layout on an H100 (NVIDIA H100 80GB HBM3, sm90, 132
# SMs) by `python benchmarks/structured_fit.py --json run1.json run2.json --print-coef` (split
# seed 0: fitted on one half of the patterns, checked on the other; held out over split seeds
# 0-3: picks within 5 % of min(bmm, dense) on 94.9-98.8 % of all rows and 98.3-100 % of the
# float32 batch_first ones, where dense is priced with forming K, which the benchmark's dense
# timing leaves out).  The data: two runs of `benchmarks/structured_compare.py --device gpu
# --no-tune` of 2026-11-23 03:52 (batch 25088, 120 patterns, seed 0; geometric mean of the
# timings) on the pipelined tensor-core kernel (ks_cuda_pipe.cuh; float32 as 3xTF32; the half
# types' wide tiles and, on the sm_90, warpgroup MMAs and the natural-layout kernel; K
# pre-transposed for long runs of 8 j) and the strided cuBLAS GEMMs (batch_first with d > 1
# through the planar copies), every candidate timed as device time (the host's time before
# the launches hidden, so that "calls" is the launches' device-side cost), on the H100's table
# profile (what an install that never calibrated plans with: fitted on a calibrated profile,
# the coefficients pick worse on it).
# build_calls is left to the generic entry (the benchmark forms dense K beforehand).  CuPy
# computed the float32 and float16 baselines, torch the bfloat16 ones: bmm's permute
# coefficients say what each library's copies cost.
DEFAULT_COEF.update({
    "structured_matmul/block_dense/cuda/bfloat16/batch_first": {"calls": 1.294, "densify": 0.1442,
        "gemm_flop": 0.8, "gemm_mem": 0.431, "gemm_tiles": 1.133},
    "structured_matmul/block_dense/cuda/bfloat16/batch_last": {"calls": 1.349, "densify": 7.811,
        "gemm_flop": 0.8, "gemm_mem": 0.3419, "gemm_tiles": 1.012},
    "structured_matmul/block_dense/cuda/float16/batch_first": {"calls": 1.28, "densify": 0.0,
        "gemm_flop": 0.8, "gemm_mem": 0.4695, "gemm_tiles": 0.916},
    "structured_matmul/block_dense/cuda/float16/batch_last": {"calls": 1.323, "densify": 8.249,
        "gemm_flop": 0.8, "gemm_mem": 0.3401, "gemm_tiles": 1.025},
    "structured_matmul/block_dense/cuda/float32/batch_first": {"calls": 4.396, "densify": 0.0,
        "gemm_flop": 0.9596, "gemm_mem": 0.03352, "gemm_tiles": 0.507},
    "structured_matmul/block_dense/cuda/float32/batch_last": {"calls": 2.915, "densify": 0.0,
        "gemm_flop": 1.006, "gemm_mem": 0.2306, "gemm_tiles": 0.1452},
    "structured_matmul/bmm/cuda/bfloat16/batch_first": {"calls": 0.04958, "gemm_flop": 0.8,
        "gemm_mem": 1.139, "gemm_tiles": 0.0, "permute": 1.4, "permute_view": 1.0,
        "transpose": 0.1761},
    "structured_matmul/bmm/cuda/bfloat16/batch_last": {"calls": 0.2371, "gemm_flop": 0.8,
        "gemm_mem": 0.05621, "gemm_tiles": 9.539, "permute": 0.9272, "permute_view": 0.0,
        "transpose": 0.1},
    "structured_matmul/bmm/cuda/float16/batch_first": {"calls": 0.6854, "gemm_flop": 3.883,
        "gemm_mem": 0.0, "gemm_tiles": 1.103, "permute": 8.192, "permute_view": 1.0,
        "transpose": 0.1499},
    "structured_matmul/bmm/cuda/float16/batch_last": {"calls": 0.8211, "gemm_flop": 5.369,
        "gemm_mem": 0.0, "gemm_tiles": 0.0, "permute": 8.684, "permute_view": 3.322,
        "transpose": 0.1},
    "structured_matmul/bmm/cuda/float32/batch_first": {"calls": 1.382, "gemm_flop": 0.9267,
        "gemm_mem": 0.8039, "gemm_tiles": 0.0, "permute": 0.8033, "permute_view": 1.0,
        "transpose": 0.3161},
    "structured_matmul/bmm/cuda/float32/batch_last": {"calls": 1.377, "gemm_flop": 0.9502,
        "gemm_mem": 0.5273, "gemm_tiles": 0.2238, "permute": 1.662, "permute_view": 1.643,
        "transpose": 0.1},
    "structured_matmul/dense/cuda/bfloat16/batch_first": {"calls": 0.2006, "gemm_flop": 0.8,
        "gemm_mem": 0.2644, "gemm_tiles": 2.018},
    "structured_matmul/dense/cuda/bfloat16/batch_last": {"calls": 0.1981, "gemm_flop": 0.858,
        "gemm_mem": 0.3107, "gemm_tiles": 1.88},
    "structured_matmul/dense/cuda/float16/batch_first": {"calls": 0.1962, "gemm_flop": 0.805,
        "gemm_mem": 0.2811, "gemm_tiles": 1.94},
    "structured_matmul/dense/cuda/float16/batch_last": {"calls": 0.1968, "gemm_flop": 0.853,
        "gemm_mem": 0.2985, "gemm_tiles": 1.975},
    "structured_matmul/dense/cuda/float32/batch_first": {"calls": 0.4731, "gemm_flop": 1.311,
        "gemm_mem": 0.0, "gemm_tiles": 0.1589},
    "structured_matmul/dense/cuda/float32/batch_last": {"calls": 0.2103, "gemm_flop": 1.198,
        "gemm_mem": 0.0, "gemm_tiles": 0.6424},
    "structured_matmul/kernel/cuda/bfloat16/batch_first": {"calls": 0.3866, "flop": 0.8,
        "l2": 0.2053, "mem": 0.3057, "tiles": 7.002, "unaligned": 1.0},
    "structured_matmul/kernel/cuda/bfloat16/batch_last": {"calls": 0.9017, "flop": 0.8,
        "l2": 0.1661, "mem": 0.2392, "tiles": 6.669, "unaligned": 1.0},
    "structured_matmul/kernel/cuda/float16/batch_first": {"calls": 0.3697, "flop": 0.8,
        "l2": 0.1963, "mem": 0.3325, "tiles": 7.066, "unaligned": 1.0},
    "structured_matmul/kernel/cuda/float16/batch_last": {"calls": 0.9151, "flop": 0.8,
        "l2": 0.1671, "mem": 0.2414, "tiles": 6.65, "unaligned": 1.0},
    "structured_matmul/kernel/cuda/float32/batch_first": {"calls": 2.128, "flop": 1.145,
        "l2": 0.7175, "mem": 0.3676, "tiles": 7.707, "unaligned": 1.0},
    "structured_matmul/kernel/cuda/float32/batch_last": {"calls": 2.38, "flop": 3.487,
        "l2": 0.1931, "mem": 0.06717, "tiles": 6.669, "unaligned": 1.0},
    "structured_matmul/strided/cuda/bfloat16/batch_first": {"calls": 0.4347, "gemm_flop": 0.8,
        "gemm_mem": 0.732, "gemm_tiles": 1.425, "planar": 1.009},
    "structured_matmul/strided/cuda/bfloat16/batch_last": {"calls": 0.6215, "gemm_flop": 0.8,
        "gemm_mem": 0.7728, "gemm_tiles": 1.171, "planar": 1.0},
    "structured_matmul/strided/cuda/float16/batch_first": {"calls": 0.4393, "gemm_flop": 0.8,
        "gemm_mem": 0.7187, "gemm_tiles": 1.418, "planar": 1.015},
    "structured_matmul/strided/cuda/float16/batch_last": {"calls": 0.6367, "gemm_flop": 0.8,
        "gemm_mem": 0.7684, "gemm_tiles": 1.16, "planar": 1.0},
    "structured_matmul/strided/cuda/float32/batch_first": {"calls": 0.961, "gemm_flop": 0.9398,
        "gemm_mem": 0.9769, "gemm_tiles": 0.2819, "planar": 0.7848},
    "structured_matmul/strided/cuda/float32/batch_last": {"calls": 1.449, "gemm_flop": 0.9578,
        "gemm_mem": 0.5368, "gemm_tiles": 0.1522, "planar": 1.0},
})


def _coef_keys(name, kind, dtype, layout) -> tuple:
    """Coefficient keys of one candidate, the general first: family, family/dtype,
    family/dtype/layout."""
    base = f"structured_matmul/{name}/{kind}"
    return (base, f"{base}/{dtype}", f"{base}/{dtype}/{layout}")


def _coefficients(name, kind, dtype, layout, prof) -> dict:
    """The coefficients in force: DEFAULT_COEF's keys from general to specific, then the
    profile's fitted ones (prof.coef, kronlinalg.planner store_coefficients) in the same order,
    so that anything a device's profile stores overrides the built-in numbers."""
    keys = _coef_keys(name, kind, dtype, layout)
    if name == "block_dense":  # (strided's GEMMs: its coefficients first)
        keys = _coef_keys("strided", kind, dtype, layout) + keys
    coef = {}
    for source in (DEFAULT_COEF, prof.coef):
        for k in keys:
            coef.update(source.get(k, {}))
    return coef


def _predictor(name, kind):
    family = f"structured_matmul/{name}/{kind}"

    def predict(problem, prof):
        t = _FAMILIES[name](problem.info, _ITEMSIZE.get(problem.dtype, 4), prof, problem.dtype)
        coef = _coefficients(name, kind, problem.dtype, problem.info["layout"], prof)
        weighted = {k: coef.get(k, 1.0) * v for k, v in t.items()}
        return sum(weighted.values()), {"terms": {k: v for k, v in weighted.items() if v}}

    predict.__name__ = "predict_" + family.replace("/", "_")
    return predict


def _runner(name):
    def run(x, factors, /, **options):
        return structured_matmul(x, factors, algorithm=name, **options)

    return run


def _kernel_applies(problem) -> bool:
    if problem.kind == "cuda":
        return ks_cuda is not None and problem.dtype in ("float32", "float16", "bfloat16")
    return ks_cpu is not None and problem.dtype in ("float32", "float64")


def _strided_pays(p, layout) -> bool:
    """A factor where the strided GEMMs save bmm's permutes: batch_last with d > 1, batch_first
    with d = 1 < a (elsewhere bmm's batched matmul already reads views: the same GEMMs), and
    batch_first with d > 1, whose planar copies are one launch each way where bmm's permutes
    are a library's strided copies."""
    return p[3] > 1 if layout == "batch_last" else p[3] > 1 or p[0] > 1


def _cublas_can_run(on_cuda: bool, dtype: str) -> bool:
    """Whether the cuBLAS algorithms (strided, block_dense) run this dtype on this device."""
    return on_cuda and ks_cuda is not None and _cublas.available() and dtype in _cublas.dtypes()


def _cublas_runs(problem) -> bool:
    """A CUDA problem that the cuBLAS algorithms (strided, block_dense) can run."""
    return _cublas_can_run(problem.kind == "cuda", problem.dtype)


def _strided_all_fit(patterns, layout, rows) -> bool:
    """Every factor's strided GEMMs of 32-bit sizes (contiguous x and y)."""
    info = {"B": rows, "layout": layout}
    return all(_strided_fits(p, layout, rows, *_strided_lds(p, info)) for p in patterns)


def _strided_applies(problem) -> bool:
    info = problem.info
    return (_cublas_runs(problem) and _strided_all_fit(info["patterns"], info["layout"], info["B"])
            and any(_strided_pays(p, info["layout"]) for p in info["patterns"]))


def _block_dense_pays(p) -> bool:
    """A factor whose dense diagonal blocks are a GEMM of fewer flops than dense's: a > 1 (for
    a = 1 the block is the dense matrix, dense's own GEMM) and d > 1 (d = 1: strided's GEMMs)."""
    return p[0] > 1 and p[3] > 1


def _block_dense_applies(problem) -> bool:
    """CUDA with cuBLAS, some factor where block_dense pays, every dense block product a GEMM of
    32-bit sizes."""
    info = problem.info
    return (_cublas_runs(problem) and any(_block_dense_pays(p) for p in info["patterns"])
            and all(_strided_fits(_dense_slabs(p), info["layout"], info["B"],
                                  *_strided_lds(p, info)) for p in info["patterns"]))


def _strided_lds(p, info) -> tuple:
    """x's and y's row strides for one factor of a contiguous problem."""
    a, b, c, d = p
    return (info["B"],) * 2 if info["layout"] == "batch_last" else (a * c * d, a * b * d)


def _register():
    try:
        from .planner import Candidate, register, register_op
    except ImportError:  # a build without the planner: 'auto' falls back to _fallback_choice
        return False
    register_op("structured_matmul", _normalise,
                "x @ (K1 … KL)ᵀ for Kronecker-sparse factors; shapes: x, then each pattern")
    docs = {"kernel": "one-pass Kronecker-sparse kernel, one launch per factor",
            "strided": "cuBLAS strided-batched GEMMs on views of x and y (batch_last or d = 1), "
                       "or on planar copies of them (batch_first, d > 1)",
            "block_dense": "each factor's a diagonal blocks formed dense, one cuBLAS "
                           "strided-batched GEMM on views of x and y (d times the flops)",
            "bmm": "permute → batched matmul → permute through the array library",
            "dense": "x @ K.to_dense().T through the array library"}
    applies = {"kernel": _kernel_applies, "strided": _strided_applies,
               "block_dense": _block_dense_applies}
    for kind in ("cpu", "cuda"):
        for name in ("kernel", "bmm", "dense") + (("strided", "block_dense") if kind == "cuda"
                                                  else ()):
            register("structured_matmul", Candidate(
                name, _predictor(name, kind), devices=(kind,),
                applies=applies.get(name, lambda problem: True),
                run=_runner(name), family=f"structured_matmul/{name}/{kind}", doc=docs[name]))
    return True


_PLANNED = _register()


def _fallback_choice(spec: _Spec) -> str:
    return "kernel" if _backend.on_cuda(spec.x) or spec.compute_dtype != "float16" else "bmm"


def _choose(spec: _Spec) -> str:
    if not _PLANNED:
        return _fallback_choice(spec)
    from . import planner

    return planner.choose("structured_matmul", tuple(spec.x.shape),
                          *(f.pattern for f in spec.chain), dtype=spec.compute_dtype,
                          device=spec.x, **_plan_options(spec))


def _measure_pays(spec: _Spec) -> bool:
    """Whether the planner measures instead of modelling: packed weights of one factor with
    a = d = 1 on CUDA arrays that CuPy's events can time.  Such a product is one GEMM whichever
    algorithm runs it, and which formulation cuBLAS runs fastest (batched, plain, tuned, our
    kernel) differs by up to 15 % with no pattern the model can see; packed weights say the
    signature repeats, as they do for the GEMM tuning.  KRONLINALG_GEMM_TUNE=0 turns both off."""
    if spec.forms is None or len(spec.chain) != 1 or not _cupy_times(spec.x):
        return False
    a, _, _, d = spec.chain[0].pattern
    return a == 1 and d == 1 and _cublaslt.enabled()


def _cupy_times(x) -> bool:
    """Whether CuPy's events on its current stream time the work queued for x: CuPy arrays,
    and CUDA torch tensors on CuPy's current device and stream (both libraries' default stream,
    unless either was told otherwise)."""
    cupy = _backend._cupy()
    if cupy is None or not _backend.on_cuda(x):
        return False
    return _backend.is_cupy(x) or (x.get_device() == cupy.cuda.runtime.getDevice() and
                                   _backend.cuda_stream(x) == cupy.cuda.get_current_stream().ptr)


def _measured_choice(spec: _Spec, factors):
    """The fastest algorithm of this signature, measured once on the caller's arrays (device
    time in interleaved rounds, _measure) and recorded with the planner (plan() then says
    ``measured``); None where the model decides (``_measure_pays``)."""
    if not _PLANNED or not _measure_pays(spec):
        return None
    from . import planner

    shapes, opts = _plan_query(spec)
    first = planner.plan("structured_matmul", *shapes, **opts)[0]
    if first.details.get("measured"):
        return first.name

    def device_times(runs):
        ms = _cublaslt._device_times(runs, _cublaslt._spin_kernel(), MEASURE_ROUNDS,
                                     spin_ns=MEASURE_SPIN_NS)
        return [t * 1e-3 for t in ms]

    try:
        return _measure(spec, spec.x, factors, device_times)[0].name
    except Exception as exc:  # (no NVRTC for the timing kernel, out of memory, ...)
        warnings.warn(f"kronlinalg: measuring structured_matmul's algorithms failed ({exc!r}); "
                      "the cost model chooses", RuntimeWarning, stacklevel=3)
        return None


MEASURE_ROUNDS = 7
# ahead of each timed call: longer than the host time of a torch call's permutes and GEMM
# (~0.1 ms), which would otherwise count against bmm and dense
MEASURE_SPIN_NS = 500_000


def _strided_runs(spec: _Spec) -> bool:
    """Whether "strided" can run this product: cuBLAS for the compute dtype on a CUDA array,
    every factor's GEMMs of 32-bit sizes."""
    return (_cublas_can_run(_backend.on_cuda(spec.x), spec.compute_dtype)
            and _strided_all_fit([f.pattern for f in spec.chain], spec.layout, spec.rows))


def _plan_options(spec: _Spec) -> dict:
    """The planner's options of a call: the layout, and packed=True for a KSPacked."""
    return {"layout": spec.layout, **({"packed": True} if spec.forms is not None else {})}
