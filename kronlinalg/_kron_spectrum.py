"""The Kronecker eigenvalue grid and logdet's closed-form gradient, on any array namespace
(used by KroneckerOperator and by its torch autograd functions)."""

from __future__ import annotations

import math


def eigenvalue_grid(xp, eigenvalues):
    """Πλ over the Kronecker index grid, in kron order (the last factor's index fastest): the
    eigenvalues of ⊗Fi.  Only the last step allocates a length-N vector."""
    grid = eigenvalues[0]
    for lam in eigenvalues[1:]:
        grid = xp.reshape(grid[:, None] * lam[None, :], (-1,))
    return grid


def logdet_factor_gradients(xp, eigenvalues, eigenvectors, shift):
    """The gradient of ``logdet(⊗Fi + shift·I)``: ``([G1, …, GN], g_shift)`` with
    ``Gi = Qi diag(wi) Qiᵀ``, ``wi[a] = Σ_{k: k_i = a} Π_{j≠i} λj[k_j] / (Πλ[k] + shift)`` and
    ``g_shift = Σ 1 / (Πλ + shift)``, so that ``d logdet = Σ tr(Gi dFi) + g_shift·d shift`` for
    symmetric dFi.  No eigenvalue gap appears (repeated eigenvalues are fine); the contractions
    over the other factors' axes are two matrix products per factor, no length-N temporary
    beyond the reciprocal."""
    sizes = [int(lam.shape[0]) for lam in eigenvalues]
    inv = 1.0 / (eigenvalue_grid(xp, eigenvalues) + shift)
    grads = []
    for i, (lam_i, q) in enumerate(zip(eigenvalues, eigenvectors)):
        left = math.prod(sizes[:i])
        right = math.prod(sizes[i + 1:])
        w = xp.reshape(inv, (left, sizes[i] * right))
        if i > 0:
            w = eigenvalue_grid(xp, eigenvalues[:i]) @ w
        w = xp.reshape(w, (sizes[i], right))
        w = w @ eigenvalue_grid(xp, eigenvalues[i + 1:]) if i + 1 < len(sizes) else w[:, 0]
        grads.append((q * w[None, :]) @ xp.matrix_transpose(q))
    return grads, xp.sum(inv)
