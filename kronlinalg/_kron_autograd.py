"""PyTorch autograd for kron_matmul: the compiled kernels run forward, kron_matmul runs backward.

For the right product ``Y = alpha * X @ (F_1 ⊗ … ⊗ F_N)`` (the left product is its transpose)

- ``dX = alpha * dY @ (F_1ᵀ ⊗ … ⊗ F_Nᵀ)``: one kron_matmul with the transposed factors;
- ``dF_i = alpha * Σ U_i[n, p, r] W_i[n, q, r]`` over n and r, where ``U_i`` is X with the factors
  after i applied (the leading identities are only a reshape of X's rows) and ``W_i`` is dY with
  the transposed factors before i applied (a left product on dY's middle axis).  Neither the
  Kronecker product nor a dense identity factor is ever formed: each gradient is one or two
  kron_matmul calls and one contraction over the row and tail axes.

The backward is itself made of kron_matmul calls (through this same Function when gradients of
gradients are wanted: ``create_graph=True`` turns grad mode on inside backward), reshapes and
einsum, so derivatives of every order are exact — the backward of a Kronecker product is a
Kronecker product.  ``beta * y`` stays outside the Function, so torch differentiates it (and its
broadcasting) itself.

The module knows kron_matmul only through the ``apply(x, factors, side, alpha)`` callable it is
given (no import of the operation: the operation imports this).
"""

from __future__ import annotations

import math

import torch


class KronMatmulFunction(torch.autograd.Function):
    """``alpha * x @ kron(factors)`` (side="right") or ``alpha * kron(factors) @ x`` (side="left")."""

    @staticmethod
    def forward(ctx, apply, x, side, alpha, *factors):
        ctx.kron_apply, ctx.side, ctx.alpha = apply, side, alpha
        ctx.save_for_backward(x, *factors)
        return apply(x, list(factors), side, alpha)

    @staticmethod
    def backward(ctx, grad):
        x, *factors = ctx.saved_tensors
        need_x = ctx.needs_input_grad[1]
        need_f = ctx.needs_input_grad[4:]
        gx, gfs = _gradients(ctx.kron_apply, x, factors, grad, ctx.side, ctx.alpha, need_x, need_f)
        return (None, gx, None, None, *gfs)


def _gradients(apply, x, factors, grad, side, alpha, need_x, need_f):
    dt = grad.dtype
    if side == "left":  # Yᵀ = Xᵀ @ kron(Fᵀ): the right product on transposes
        vec = x.ndim == 1
        xr = x.reshape(1, -1) if vec else x.mT
        gr = grad.reshape(1, -1) if vec else grad.mT
        fr = [f.mT for f in factors]
    else:
        vec = False
        xr, gr, fr = x, grad, list(factors)
    xr = xr.to(dt)
    fr = [f.to(dt) for f in fr]
    P = [int(f.shape[0]) for f in fr]
    Q = [int(f.shape[1]) for f in fr]
    n = len(fr)

    gx = None
    if need_x:
        gxr = apply(gr, [f.mT for f in fr], "right", 1.0)
        if alpha != 1.0:
            gxr = gxr * alpha
        if side == "left":
            gxr = gxr.reshape(-1) if vec else gxr.mT
        gx = gxr.to(x.dtype)

    gfs = [None] * n
    if any(need_f):
        K, N = math.prod(P), math.prod(Q)
        B = xr.numel() // K if K else 0
        X2 = xr.reshape(B, K)
        G2 = gr.reshape(B, N)
        for i in range(n):
            if not need_f[i]:
                continue
            pl, pi, pg = math.prod(P[:i]), P[i], math.prod(P[i + 1:])
            ql, qi, qg = math.prod(Q[:i]), Q[i], math.prod(Q[i + 1:])
            u = X2.reshape(B * pl * pi, pg)
            if i + 1 < n:
                u = apply(u, fr[i + 1:], "right", 1.0)
            u = u.reshape(B * pl, pi, qg)
            w = G2.reshape(B, ql, qi * qg)
            if i > 0:
                w = apply(w, fr[:i], "left", 1.0)
            w = w.reshape(B * pl, qi, qg)
            g = torch.einsum("npr,nqr->pq", u, w)
            if alpha != 1.0:
                g = g * alpha
            if side == "left":
                g = g.mT
            gfs[i] = g.to(factors[i].dtype)
    return gx, gfs


def differentiable(apply, x, factors, side, alpha, beta, y, dtype):
    """kron_matmul of torch inputs that require grad: the kernels forward, kron_matmul backward."""
    dt = getattr(torch, dtype)
    out = KronMatmulFunction.apply(apply, x.to(dt), side, float(alpha), *(f.to(dt) for f in factors))
    if beta != 0.0:
        out = out + beta * y.to(dt)
    return out
