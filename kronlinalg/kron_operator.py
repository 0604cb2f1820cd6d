"""``KroneckerOperator(factors)``: the matrix ``F1 ⊗ … ⊗ FN`` as an operator, never formed.

What Gaussian-process code needs of a Kronecker-structured kernel matrix K:

- products ``op @ x`` and ``x @ op`` (both by kron_matmul), ``.T``, ``to_dense()``,
  ``diagonal()``;
- ``eigh()``: per-factor eigendecompositions ``Fi = Qi diag(λi) Qiᵀ`` (symmetric factors),
  computed once per operator and cached; then K = (⊗Qi) diag(⊗λi) (⊗Qi)ᵀ exactly, so
- ``solve(b, shift)`` for ``(K + shift·I) x = b`` is two kron_matmul calls (with ⊗Qiᵀ and ⊗Qi)
  around one diagonal scale, ``logdet(shift)`` is Σ log(Πλ + shift) over the eigenvalue grid,
  and ``inv_quad_logdet(b, shift)`` is both at once (GPyTorch's marginal-likelihood pair).

The cache belongs to the operator and its factors are taken as they are at construction: an
operator is one immutable factor set.  Build a new operator when the factors change (a new
length-scale, an optimiser step); modifying a factor array in place afterwards leaves the
operator's cached decompositions stale.

torch tensors: every method is differentiable.  Products, to_dense and diagonal through
kron_matmul's and torch's own autograd; solve and logdet through functions whose backward is
derived from the eigendecomposition (module _kron_operator_autograd), so the first derivative
never divides by an eigenvalue gap (repeated factor eigenvalues are harmless) and solve's
derivatives of every order are solves and products again.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import array_api_compat
import numpy as np

from .common import backend, validation
from ._kron_spectrum import eigenvalue_grid, logdet_factor_gradients

__all__ = ["KroneckerOperator", "KroneckerEigh", "eigenvalue_grid", "logdet_factor_gradients"]

_LINALG_DTYPES = ("float32", "float64")  # what eigh computes in


def _kron_matmul(x, factors, side):
    # the public function, imported when first used: this module is an operand type, not an
    # operation, and reaches the operation only through its public face
    from .kron import kron_matmul

    return kron_matmul(x, factors, side=side)


class KroneckerEigh(NamedTuple):
    """Per-factor eigendecompositions: ``factors[i] = eigenvectors[i] @ diag(eigenvalues[i]) @
    eigenvectors[i].T``, eigenvalues ascending."""

    eigenvalues: tuple
    eigenvectors: tuple


class _Spectrum:
    """What solve and logdet reuse, in one compute dtype: the per-factor eigendecompositions,
    the eigenvectors' transposes (contiguous: kron_matmul's fastest input), the eigenvalue grid
    Πλ (length N) and the last shift's reciprocal 1 / (Πλ + shift)."""

    def __init__(self, xp, factors):
        vals, vecs = [], []
        for f in factors:
            lam, q = xp.linalg.eigh(f)
            vals.append(lam)
            vecs.append(q)
        self.eigh = KroneckerEigh(tuple(vals), tuple(vecs))
        self.vecs_t = [backend.contiguous(xp.matrix_transpose(q)) for q in vecs]
        self.grid = eigenvalue_grid(xp, vals)
        self.shift = None
        self.reciprocal = None

    def inverse_scale(self, xp, shift: float):
        if shift != self.shift:
            self.reciprocal = 1.0 / (self.grid + shift)
            self.shift = shift
        return self.reciprocal


class KroneckerOperator:
    """The matrix ``F1 ⊗ … ⊗ FN`` (factors ``Fi`` of shape ``(Pi, Qi)``) as an operator of shape
    ``(ΠPi, ΠQi)``, for NumPy, CuPy, torch or any array-API library.

    >>> import numpy as np, kronlinalg
    >>> rng = np.random.default_rng(0)
    >>> fs = [a @ a.T + np.eye(4) for a in rng.standard_normal((3, 4, 4))]
    >>> op = kronlinalg.KroneckerOperator(fs)
    >>> b = rng.standard_normal(64)
    >>> x = op.solve(b, shift=0.1)           # (F1 ⊗ F2 ⊗ F3 + 0.1·I) x = b
    >>> bool(np.allclose(op @ x + 0.1 * x, b))
    True

    Products take any factor shapes; ``eigh``, ``solve``, ``logdet``, ``inv_quad_logdet`` and
    ``diagonal`` need square factors, and the first four symmetric ones (Gaussian-process
    kernels): only each factor's lower triangle is read, as ``eigh`` does.  The factors'
    decompositions are cached on first use: an operator stands for one factor set (build a new
    one when the factors change).
    """

    # NumPy, CuPy and torch defer ``x @ op`` to __rmatmul__ instead of converting op to an array
    __array_ufunc__ = None
    __array_priority__ = 1000

    def __init__(self, factors):
        if isinstance(factors, KroneckerOperator):
            factors = factors.factors
        if isinstance(factors, (str, bytes)) or not hasattr(factors, "__len__"):
            raise TypeError("factors: expected a sequence of 2-D arrays")
        factors = tuple(factors)
        if not factors:
            raise ValueError("factors: expected a non-empty sequence of 2-D arrays, got none")
        named = {f"factors[{i}]": f for i, f in enumerate(factors)}
        self._xp, self._dtype_name = validation.floating_arrays(named)
        for i, f in enumerate(factors):
            if f.ndim != 2:
                raise ValueError(f"factors[{i}]: expected a 2-D array, got shape {tuple(f.shape)}")
        self._factors = factors
        self._shape = (math.prod(int(f.shape[0]) for f in factors),
                       math.prod(int(f.shape[1]) for f in factors))
        self._spectra = {}  # compute dtype name -> _Spectrum

    # ------------------------------------------------------------------ description
    @property
    def factors(self) -> tuple:
        return self._factors

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def ndim(self) -> int:
        return 2

    @property
    def dtype(self):
        return getattr(self._xp, self._dtype_name)

    @property
    def device(self):
        return array_api_compat.device(self._factors[0])

    @property
    def T(self) -> "KroneckerOperator":
        """``(⊗Fi)ᵀ = ⊗Fiᵀ`` (views of the factors)."""
        return KroneckerOperator([self._xp.matrix_transpose(f) for f in self._factors])

    mT = T

    def __repr__(self) -> str:
        shapes = " ⊗ ".join(f"{int(f.shape[0])}x{int(f.shape[1])}" for f in self._factors)
        return f"KroneckerOperator({shapes}, dtype={self._dtype_name})"

    # ------------------------------------------------------------------ products
    def __matmul__(self, other):
        if isinstance(other, KroneckerOperator):
            return self._compose(other)
        return self.matmul(other)

    def __rmatmul__(self, other):
        return self.rmatmul(other)

    def matmul(self, x, /):
        """``(⊗Fi) @ x`` for x of shape ``(ΠQi,)`` or ``(..., ΠQi, k)``: kron_matmul, left."""
        return _kron_matmul(x, self._factors, "left")

    def rmatmul(self, x, /):
        """``x @ (⊗Fi)`` for x of shape ``(..., ΠPi)``: kron_matmul(side="right")."""
        return _kron_matmul(x, self._factors, "right")

    def _compose(self, other):
        # the mixed-product rule (⊗Ai)(⊗Bi) = ⊗(Ai Bi), where the factors pair up
        if len(other.factors) == len(self._factors) and all(
                int(a.shape[1]) == int(b.shape[0]) for a, b in zip(self._factors, other.factors)):
            return KroneckerOperator([a @ b for a, b in zip(self._factors, other.factors)])
        raise ValueError(f"other: {other!r} has factors that do not pair with {self!r}'s "
                         "(the product of two Kronecker operators is formed factor by factor)")

    def to_dense(self):
        """The Kronecker product as a dense array (ΠPi × ΠQi elements: for small operators and
        references)."""
        xp = self._xp
        out = self._cast(self._factors[0], self._dtype_name)
        for f in self._factors[1:]:
            f = self._cast(f, self._dtype_name)
            out = xp.reshape(out[:, None, :, None] * f[None, :, None, :],
                             (out.shape[0] * f.shape[0], out.shape[1] * f.shape[1]))
        return out

    def diagonal(self):
        """The diagonal (square factors): the Kronecker product of the factors' diagonals."""
        self._require_square("diagonal")
        xp = self._xp
        diags = [xp.linalg.diagonal(self._cast(f, self._dtype_name)) for f in self._factors]
        return eigenvalue_grid(xp, diags)

    # ------------------------------------------------------------------ decompositions
    def eigh(self) -> KroneckerEigh:
        """Per-factor eigendecompositions (ascending eigenvalues), cached.  The eigenvalues of
        the operator are ``Πλ`` over the grid (``kronlinalg.kron_operator.eigenvalue_grid``),
        its eigenvectors ``⊗Qi``.  torch factors that require grad: a fresh, differentiable
        ``torch.linalg.eigh`` per factor (torch's rule: eigenvector gradients need distinct
        eigenvalues)."""
        self._require_square("eigh")
        dt = self._linalg_dtype("factors", self._dtype_name)
        if backend.grad_mode(self._factors) is not None:
            xp = self._xp
            pairs = [xp.linalg.eigh(self._cast(f, dt)) for f in self._factors]
            return KroneckerEigh(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
        return self.spectrum(dt).eigh

    def solve(self, b, /, shift=0.0):
        """x with ``(⊗Fi + shift·I) x = b``, for b of shape ``(N,)`` or ``(..., N, k)``: two
        kron_matmul calls with the cached eigenvectors around a diagonal scale.  shift: a real
        scalar (a 0-d torch tensor may require grad)."""
        self._require_square("solve")
        xp, dt, shift_value = self._checked_rhs(b, shift)
        if self._needs_autograd(b, shift):
            from ._kron_operator_autograd import solve

            return solve(self, b, shift, dt)
        return self.solve_detached(b, shift_value, dt)

    def logdet(self, shift=0.0):
        """``log det(⊗Fi + shift·I)`` from the eigenvalue grid: Σ log(Πλ + shift) (NaN where an
        eigenvalue of the shifted operator is not positive, as for a matrix that is not SPD)."""
        self._require_square("logdet")
        dt = self._linalg_dtype("factors", self._dtype_name)
        shift_value = self._shift(shift)
        if self._needs_autograd(None, shift):
            from ._kron_operator_autograd import logdet

            return logdet(self, shift, dt)
        return self.logdet_detached(shift_value, dt)

    def inv_quad_logdet(self, b, /, shift=0.0):
        """``(Σ bᵀ (K + shift·I)⁻¹ b, logdet(K + shift·I))``: the two terms of a Gaussian
        marginal likelihood.  The quadratic form sums over N and the k right-hand sides of
        ``(..., N, k)`` (shape ``(...)``), over N alone for ``(N,)`` (a 0-d result)."""
        x = self.solve(b, shift)
        xp = self._xp
        quad = xp.sum(b * x, axis=(-2, -1)) if b.ndim > 1 else xp.sum(b * x)
        return quad, self.logdet(shift)

    def logdet_gradient(self, shift=0.0):
        """``([G1, …, GN], g_shift)``: d logdet(K + shift·I) = Σ tr(Gi dFi) + g_shift·d shift
        (symmetric dFi), in closed form from the cached decompositions — for array libraries
        without autograd (``Gi = Qi diag(wi) Qiᵀ``; see ``logdet_factor_gradients``)."""
        self._require_square("logdet_gradient")
        dt = self._linalg_dtype("factors", self._dtype_name)
        eig = self.spectrum(dt).eigh
        return logdet_factor_gradients(self._xp, eig.eigenvalues, eig.eigenvectors,
                                       self._shift(shift))

    # ------------------------------------------------------------------ without autograd
    def solve_detached(self, b, shift: float, dtype_name: str):
        """solve() on plain values (no autograd graph): the cached spectrum of ``dtype_name``."""
        xp = self._xp
        spec = self.spectrum(dtype_name)
        b = self._cast(b, dtype_name)
        c = _kron_matmul(b, spec.vecs_t, "left")
        scale = spec.inverse_scale(xp, shift)
        c = c * (scale if b.ndim == 1 else scale[:, None])
        return _kron_matmul(c, spec.eigh.eigenvectors, "left")

    def logdet_detached(self, shift: float, dtype_name: str):
        """logdet() on plain values: one length-N temporary beside the cached eigenvalue grid
        (the log taken in place where the library allows it)."""
        xp = self._xp
        t = self.spectrum(dtype_name).grid + shift
        if backend.is_torch(t):
            t.log_()
        elif isinstance(t, np.ndarray):
            np.log(t, out=t)
        elif backend.is_cupy(t):
            backend.cupy_module().log(t, out=t)
        else:
            t = xp.log(t)
        return xp.sum(t)

    # ------------------------------------------------------------------ helpers
    def spectrum(self, dtype_name: str) -> _Spectrum:
        """The cached decompositions in one compute dtype (what solve/logdet reuse)."""
        spec = self._spectra.get(dtype_name)
        if spec is None:
            factors = [self._detached(self._cast(f, dtype_name)) for f in self._factors]
            spec = self._spectra[dtype_name] = _Spectrum(self._xp, factors)
        return spec

    def _cast(self, a, dtype_name: str):
        return backend.cast(self._xp, a, dtype_name)

    @staticmethod
    def _detached(a):
        return a.detach() if backend.is_torch(a) else a

    def _require_square(self, what: str) -> None:
        for i, f in enumerate(self._factors):
            if int(f.shape[0]) != int(f.shape[1]):
                raise ValueError(f"factors[{i}]: {what} needs square factors, got shape "
                                 f"{tuple(f.shape)}")

    @staticmethod
    def _linalg_dtype(name: str, dtype_name: str) -> str:
        if dtype_name not in _LINALG_DTYPES:
            raise TypeError(f"{name}: eigh-based methods compute in float32 or float64, got "
                            f"{dtype_name} (cast the factors first)")
        return dtype_name

    def _shift(self, shift) -> float:
        if backend.is_torch(shift) and shift.ndim == 0:
            if not backend.is_torch(self._factors[0]):
                raise TypeError("shift: a torch tensor shift needs torch factors")
            return float(shift.detach())  # (a device scalar: one synchronisation)
        return validation.scalar("shift", shift)

    def _checked_rhs(self, b, shift):
        # the factors were checked when the operator was built: b against the first one
        xp, _ = validation.floating_arrays({"factors[0]": self._factors[0], "b": b})
        dt = self._linalg_dtype("b", backend.dtype_name(xp.result_type(self.dtype, b.dtype)))
        n = self.shape[1]
        if b.ndim == 0 or (b.ndim == 1 and int(b.shape[0]) != n) or (
                b.ndim > 1 and int(b.shape[-2]) != n):
            raise ValueError(f"b: expected shape ({n},) or (..., {n}, k), got {tuple(b.shape)}")
        return xp, dt, self._shift(shift)

    def _needs_autograd(self, b, shift) -> bool:
        arrays = list(self._factors) + ([b] if b is not None else [])
        if backend.is_torch(shift):
            arrays.append(shift)
        mode = backend.grad_mode(arrays)
        if mode == "transform":
            raise NotImplementedError("KroneckerOperator: torch.func transforms (grad, vmap) are "
                                      "not supported; use torch.autograd (backward, "
                                      "torch.autograd.grad)")
        return mode == "autograd"
