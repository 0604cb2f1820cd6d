"""PyTorch autograd for KroneckerOperator.solve and .logdet (A = ⊗Fi + s·I, symmetric factors).

solve, x = A⁻¹ b: with gb = A⁻¹ gx (one more solve: A is symmetric),

- ``∂b = gb``, ``∂s = -Σ gb·x``, and ``∂Fi`` is kron_matmul's factor gradient of ``y = K x`` for
  the output gradient ``-gb`` (``d(Ax) = dK x``), symmetrised.

The backward is made of this same Function and kron_matmul (differentiable, every order), so
gradients of gradients are exact and no eigenvalue gap is ever divided by.

logdet, Σ log(Πλ + s): ``∂Fi = Qi diag(wi) Qiᵀ`` and ``∂s = Σ 1/(Πλ + s)``
(kron_operator.logdet_factor_gradients), from the cached decompositions: no gap either.  Only
a second derivative (create_graph=True) recomputes the decompositions with torch.linalg.eigh,
whose own backward needs distinct factor eigenvalues.

The operator is passed in as an object; this module does not import the operator's module
(which imports this one when torch inputs need gradients).
"""

from __future__ import annotations

import array_api_compat
import torch

from ._kron_autograd import _gradients
from ._kron_spectrum import logdet_factor_gradients


def _kron_apply(x, factors, side, alpha):
    from .kron import kron_matmul  # differentiable: gradients of gradients flow through it

    out = kron_matmul(x, factors, side=side)
    return out if alpha == 1.0 else out * alpha


def _as_tensor(shift, like, dtype):
    if torch.is_tensor(shift):
        return shift.to(device=like.device, dtype=dtype)
    return torch.tensor(float(shift), dtype=dtype, device=like.device)


class SolveFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, dt, b, shift, *factors):
        x = op.solve_detached(b, float(shift), dt)
        ctx.op, ctx.dt = op, dt
        ctx.save_for_backward(x, shift, *factors)
        return x

    @staticmethod
    def backward(ctx, gx):
        x, shift, *factors = ctx.saved_tensors
        need_b, need_s = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
        need_f = ctx.needs_input_grad[4:]
        gb = SolveFunction.apply(ctx.op, ctx.dt, gx, shift, *factors)
        gs = -(gb * x).sum() if need_s else None
        gfs = [None] * len(factors)
        if any(need_f):
            _, gfs = _gradients(_kron_apply, x, factors, -gb, "left", 1.0, False, need_f)
            gfs = [None if g is None else 0.5 * (g + g.mT) for g in gfs]
        return (None, None, gb if need_b else None, gs, *gfs)


class LogdetFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, dt, shift, *factors):
        ctx.op, ctx.dt = op, dt
        ctx.save_for_backward(shift, *factors)
        return op.logdet_detached(float(shift), dt)

    @staticmethod
    def backward(ctx, g):
        shift, *factors = ctx.saved_tensors
        xp = array_api_compat.array_namespace(shift)
        if torch.is_grad_enabled():  # create_graph=True: differentiable decompositions
            pairs = [torch.linalg.eigh(f) for f in factors]
            vals, vecs = [p[0] for p in pairs], [p[1] for p in pairs]
            s = shift
        else:
            eig = ctx.op.spectrum(ctx.dt).eigh
            vals, vecs, s = eig.eigenvalues, eig.eigenvectors, float(shift)
        grads, gs = logdet_factor_gradients(xp, vals, vecs, s)
        need_s, need_f = ctx.needs_input_grad[2], ctx.needs_input_grad[3:]
        return (None, None, g * gs if need_s else None,
                *(g * G if need else None for G, need in zip(grads, need_f)))


def solve(op, b, shift, dt):
    t = getattr(torch, dt)
    return SolveFunction.apply(op, dt, b.to(t), _as_tensor(shift, b, t),
                               *(f.to(t) for f in op.factors))


def logdet(op, shift, dt):
    t = getattr(torch, dt)
    factors = [f.to(t) for f in op.factors]
    return LogdetFunction.apply(op, dt, _as_tensor(shift, factors[0], t), *factors)
