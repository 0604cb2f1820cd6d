"""Kronecker-sparse operands: factors, chains, packed chains and the families built of them.

A Kronecker-sparse (KS) factor of pattern (a, b, c, d) has support I_a ⊗ 1_{b×c} ⊗ I_d: its value
``[i, k, l, j]`` sits at row ``i·b·d + k·d + j`` and column ``i·c·d + l·d + j`` of a matrix of shape
``(a·b·d, a·c·d)``.  Products of such factors are butterfly, Monarch, block-diagonal and low-rank
matrices; neural networks use them in place of dense layers.  ``structured_matmul`` multiplies
by them; ``kronlinalg.structured`` re-exports everything here.

    >>> from kronlinalg import ks
    >>> ks.monarch(16, 16, 4, rng=0)
    KSChain(patterns=[(1, 4, 4, 4), (4, 4, 4, 1)], shape=(16, 16))
"""

from __future__ import annotations

import math

import array_api_compat
import numpy as np

from .common import backend, validation

__all__ = ["KSFactor", "KSChain", "KSPacked", "butterfly", "block_butterfly", "monarch",
           "low_rank", "block_diagonal", "as_chain", "formed"]


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
        self.pattern = validation.pattern("pattern", pattern)
        try:
            array_api_compat.array_namespace(values)
        except TypeError:
            raise TypeError(f"values: expected an array, got {type(values).__name__}") from None
        validation.float_dtype("values", values)
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
                f"dtype={backend.dtype_name(self.dtype)})")

    def to_dense(self):
        """The factor as a dense ``(a·b·d, a·c·d)`` array of values' namespace, dtype and device."""
        xp = array_api_compat.array_namespace(self.values)
        a, b, c, d = self.pattern
        if a == 1 and d == 1:  # one dense block: the values are the matrix
            return xp.reshape(self.values, (b, c))
        v = xp.reshape(xp.permute_dims(self.values, (0, 1, 3, 2)), (a, b, d, 1, c, 1))
        # values placed on the support (a select, not a product with a 0/1 mask: Inf and NaN
        # values stay where they are and the zeros around them stay zeros)
        on = _support_mask(xp, self.pattern, self.values.dtype, self.device) != 0
        dense = xp.where(on, v, xp.zeros((), dtype=self.values.dtype, device=self.device))
        return xp.reshape(dense, self.shape)

    @classmethod
    def from_dense(cls, matrix, pattern):
        """The factor of `pattern` whose dense form is `matrix`; ValueError if `matrix` has the
        wrong shape or nonzeros outside the pattern's support."""
        pattern = validation.pattern("pattern", pattern)
        try:
            xp = array_api_compat.array_namespace(matrix)
        except TypeError:
            raise TypeError(f"matrix: expected an array, got {type(matrix).__name__}") from None
        validation.float_dtype("matrix", matrix)
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
        pattern = validation.pattern("pattern", pattern)
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

    @property
    def forms(self) -> dict:
        """The forms made of these factors so far, by (form, dtype): what structured_matmul
        keeps between calls (filled by it, never by the caller)."""
        return self._forms

    def __repr__(self) -> str:
        return (f"KSPacked(patterns={list(self.patterns)}, shape={self.shape}, "
                f"formed={sorted({k[0] for k in self._forms})})")


def _snapshot(values):
    """A copy of values that no later in-place change of the original reaches."""
    if backend.is_torch(values):
        return values.detach().clone()
    xp = array_api_compat.array_namespace(values)
    return xp.asarray(values, copy=True)


def formed(forms, key, make):
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
    n = validation.count(name, n)
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
    n = validation.count("n", n)
    block = validation.count("block", block)
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
    m, n, p = (validation.count(k, v) for k, v in (("m", m), ("n", n), ("p", p)))
    if p < 1:
        raise ValueError(f"p: expected a positive integer, got {p}")
    q = min(m, n)
    for name, v in (("m", m), ("n", n)):
        _divides(name, v, p, "p")
    return KSChain.random([(1, m // p, q // p, p), (p, q // p, n // p, 1)],
                          rng=rng, xp=xp, dtype=dtype, device=device)


def low_rank(m, n, r, /, *, rng=None, xp=None, dtype=None, device=None) -> KSChain:
    """Rank-r matrix of shape (m, n) as the chain (1, m, r, 1) (1, r, n, 1): U Vᵀ."""
    m, n, r = (validation.count(k, v) for k, v in (("m", m), ("n", n), ("r", r)))
    return KSChain.random([(1, m, r, 1), (1, r, n, 1)], rng=rng, xp=xp, dtype=dtype,
                          device=device)


def block_diagonal(m, n, blocks, /, *, rng=None, xp=None, dtype=None, device=None) -> KSChain:
    """Block-diagonal matrix of shape (m, n) with `blocks` dense blocks: the single factor
    (blocks, m/blocks, n/blocks, 1)."""
    m, n, k = (validation.count(a, v) for a, v in (("m", m), ("n", n), ("blocks", blocks)))
    if k < 1:
        raise ValueError(f"blocks: expected a positive integer, got {k}")
    _divides("m", m, k, "blocks")
    _divides("n", n, k, "blocks")
    return KSChain.random([(k, m // k, n // k, 1)], rng=rng, xp=xp, dtype=dtype, device=device)




def as_chain(factors) -> tuple:
    """The KSFactor tuple of a KSFactor, KSChain, KSPacked or sequence of KSFactor (validated)."""
    if isinstance(factors, KSChain):
        return factors.factors
    return KSChain(factors).factors
