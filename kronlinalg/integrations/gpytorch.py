"""GPyTorch / linear_operator integration: ``KroneckerLinearOperator``, ``(F1 ⊗ … ⊗ FN) + s·I``
as a linear_operator ``LinearOperator`` whose products, solves, logdet and inv_quad_logdet run
through kronlinalg.KroneckerOperator (kron_matmul and the cached per-factor eigendecompositions).

Use it where a GPyTorch model's covariance is Kronecker-structured (data on a grid with a
product kernel): return ``KroneckerLinearOperator(*factors)`` (one kernel matrix per grid axis)
as the covariance of the model's MultivariateNormal, or convert an existing
``KroneckerProductLinearOperator`` with ``from_linear_operator``.

``GaussianLikelihood`` then adds its noise as a constant diagonal, which stays in the operator
as its shift, and ``ExactMarginalLogLikelihood`` calls ``inv_quad_logdet``: one solve and one
logdet from the eigenvalue grid, differentiable in the factors and the noise by torch autograd.
(docs/kron_operator.md has a complete model.)

Needs torch and linear_operator (``pip install linear_operator``; GPyTorch brings it).
"""

from __future__ import annotations

try:
    import torch
    from linear_operator.operators import (ConstantDiagLinearOperator, DiagLinearOperator,
                                           KroneckerProductLinearOperator, LinearOperator)
except ImportError as exc:  # an optional integration: say what is missing
    raise ImportError("kronlinalg.integrations.gpytorch needs torch and linear_operator "
                      "(pip install linear_operator)") from exc

from ..kron_operator import KroneckerOperator

__all__ = ["KroneckerLinearOperator", "from_linear_operator"]


def _zero(like):
    return torch.zeros((), dtype=like.dtype, device=like.device)


class KroneckerLinearOperator(LinearOperator):
    """``(F1 ⊗ … ⊗ FN) + shift·I`` for square, symmetric torch factors (a GPyTorch kernel
    matrix with its noise).  Differentiable in the factors and the shift (a 0-d tensor)."""

    def __init__(self, *factors, shift=None):
        if not factors:
            raise ValueError("factors: expected at least one 2-D tensor")
        if shift is None:
            shift = _zero(factors[0])
        elif not torch.is_tensor(shift):
            shift = torch.tensor(float(shift), dtype=factors[0].dtype, device=factors[0].device)
        if shift.numel() != 1:
            raise ValueError(f"shift: expected one value (a constant diagonal), got shape "
                             f"{tuple(shift.shape)}")
        shift = shift.reshape(())
        super().__init__(*factors, shift=shift)
        self.factors = tuple(factors)
        self.shift = shift
        self.kron = KroneckerOperator(self.factors)

    # -------------------------------------------------------------- what LinearOperator asks
    def _matmul(self, rhs):
        return self.kron @ rhs + self.shift * rhs

    def _size(self):
        return torch.Size(self.kron.shape)

    def _transpose_nonbatch(self):
        return KroneckerLinearOperator(*(f.mT for f in self.factors), shift=self.shift)

    def _diagonal(self):
        return self.kron.diagonal() + self.shift

    def to_dense(self):
        n = self.kron.shape[0]
        eye = torch.eye(n, dtype=self.shift.dtype, device=self.shift.device)
        return self.kron.to_dense() + self.shift * eye

    # -------------------------------------------------------------- the structure kept
    def add_diagonal(self, diag):
        """A constant diagonal (0-d, or one trailing element) becomes part of the shift;
        anything else is linear_operator's general AddedDiagLinearOperator."""
        if torch.is_tensor(diag) and diag.numel() == 1:
            return KroneckerLinearOperator(*self.factors, shift=self.shift + diag.reshape(()))
        return super().add_diagonal(diag)

    def __add__(self, other):
        if isinstance(other, ConstantDiagLinearOperator) and other.diag_values.numel() == 1:
            return self.add_diagonal(other.diag_values)
        if isinstance(other, DiagLinearOperator):
            return super().add_diagonal(other._diagonal())
        return super().__add__(other)

    # -------------------------------------------------------------- solves and determinants
    def _solve(self, rhs, preconditioner=None, num_tridiag=0):
        return self.kron.solve(rhs, self.shift)

    def solve(self, right_tensor, left_tensor=None):
        x = self.kron.solve(right_tensor, self.shift)
        return x if left_tensor is None else left_tensor @ x

    def logdet(self):
        return self.kron.logdet(self.shift)

    def inv_quad_logdet(self, inv_quad_rhs=None, logdet=False, reduce_inv_quad=True):
        if inv_quad_rhs is None and not logdet:
            raise RuntimeError("Either `inv_quad_rhs` or `logdet` must be specified.")
        inv_quad = _zero(self.shift)
        if inv_quad_rhs is not None:
            x = self.kron.solve(inv_quad_rhs, self.shift)
            if inv_quad_rhs.ndim == 1:
                inv_quad = (inv_quad_rhs * x).sum()
            else:
                inv_quad = (inv_quad_rhs * x).sum(-2)
                if reduce_inv_quad:
                    inv_quad = inv_quad.sum(-1)
        ld = self.kron.logdet(self.shift) if logdet else _zero(self.shift)
        return inv_quad, ld

    def inv_quad(self, inv_quad_rhs, reduce_inv_quad=True):
        return self.inv_quad_logdet(inv_quad_rhs, False, reduce_inv_quad)[0]


def from_linear_operator(op) -> KroneckerLinearOperator:
    """A ``KroneckerLinearOperator`` with the same values as a linear_operator
    ``KroneckerProductLinearOperator`` (its factors made dense: they are small), optionally
    plus a constant diagonal (``KroneckerProductAddedDiagLinearOperator`` with a
    ``ConstantDiagLinearOperator``); a sequence of torch factors is taken as they are."""
    if isinstance(op, (list, tuple)):
        return KroneckerLinearOperator(*op)
    shift = None
    if hasattr(op, "linear_op") and hasattr(op, "diag_tensor"):  # K + c·I
        diag = op.diag_tensor
        if not (isinstance(diag, ConstantDiagLinearOperator) and diag.diag_values.numel() == 1):
            raise ValueError("op: only a constant added diagonal keeps the Kronecker structure")
        shift, op = diag.diag_values.reshape(()), op.linear_op
    if not isinstance(op, KroneckerProductLinearOperator):
        raise TypeError(f"op: expected a KroneckerProductLinearOperator, got {type(op).__name__}")
    return KroneckerLinearOperator(*(f.to_dense() for f in op.linear_ops), shift=shift)
