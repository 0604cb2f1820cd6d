"""PyTorch autograd for kron_matmul: the compiled kernels run forward, kron_matmul runs backward.

For the right product ``Y = alpha * X @ (F_1 ⊗ … ⊗ F_N)`` (the left product is its transpose)

- ``dX = alpha * dY @ (F_1ᵀ ⊗ … ⊗ F_Nᵀ)``: one kron_matmul with the transposed factors;
- ``dF_i = alpha * Σ U_i[n, p, r] W_i[n, q, r]`` over n and r, where ``U_i`` is X with the factors
  after i applied (the leading identities are only a reshape of X's rows) and ``W_i`` is dY with
  the transposed factors before i applied (a left product on dY's middle axis).  Neither the
  Kronecker product nor a dense identity factor is ever formed: each gradient is one or two
  kron_matmul calls and one contraction over the row and tail axes.

``beta * y`` stays outside the Function, so torch differentiates it (and its broadcasting) itself.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable


def _apply(x, factors, side):
    from .kron import kron_matmul

    return kron_matmul(x, list(factors), side=side, algorithm="sliced")


class KronMatmulFunction(torch.autograd.Function):
    """``alpha * x @ kron(factors)`` (side="right") or ``alpha * kron(factors) @ x`` (side="left")."""

    @staticmethod
    def forward(ctx, x, side, alpha, *factors):
        from .kron import kron_matmul

        ctx.side = side
        ctx.alpha = alpha
        ctx.save_for_backward(x, *factors)
        return kron_matmul(x, list(factors), side=side, alpha=alpha, algorithm="sliced")

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, *factors = ctx.saved_tensors
        need_x = ctx.needs_input_grad[0]
        need_f = ctx.needs_input_grad[3:]
        gx, gfs = _gradients(x, factors, grad, ctx.side, ctx.alpha, need_x, need_f)
        return (gx, None, None, *gfs)


def _gradients(x, factors, grad, side, alpha, need_x, need_f):
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
        gxr = _apply(gr, [f.mT for f in fr], "right")
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
                u = _apply(u, fr[i + 1:], "right")
            u = u.reshape(B * pl, pi, qg)
            w = G2.reshape(B, ql, qi * qg)
            if i > 0:
                w = _apply(w, fr[:i], "left")
            w = w.reshape(B * pl, qi, qg)
            g = torch.einsum("npr,nqr->pq", u, w)
            if alpha != 1.0:
                g = g * alpha
            if side == "left":
                g = g.mT
            gfs[i] = g.to(factors[i].dtype)
    return gx, gfs


def kron_matmul_differentiable(spec):
    """kron_matmul of a validated call (kron._Spec) whose torch inputs require grad."""
    dt = getattr(torch, spec.result_dtype)
    x = spec.x.to(dt)
    fs = [f.to(dt) for f in spec.factors]
    out = KronMatmulFunction.apply(x, spec.side, float(spec.alpha), *fs)
    if spec.beta != 0.0:
        out = out + spec.beta * spec.y.to(dt)
    return out
