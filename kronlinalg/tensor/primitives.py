"""TensorLy's tensor primitives (``tensorly.tenalg`` names, argument order and semantics):
khatri_rao, mode_dot, unfolding_dot_khatri_rao (MTTKRP, alias mttkrp) and cp_to_tensor.

Mode products and MTTKRP index the tensor's own C-order layout: a product over the first or
the last mode is one GEMM on a matrix view, a middle mode a batched GEMM over the leading
index — never an unfolding copy; MTTKRP never forms the Khatri–Rao product of the other
factors (see _tree)."""

from __future__ import annotations

import math

import array_api_compat

from ..common import backend
from . import _args, _tree
from ._engine import Engine

__all__ = ["khatri_rao", "mode_dot", "unfolding_dot_khatri_rao", "mttkrp", "cp_to_tensor",
           "mode_product"]


def khatri_rao(matrices, /, *, skip=None, weights=None):
    """Column-wise Kronecker product of matrices (I_k × R) → (prod I_k × R), the first matrix's
    index varying slowest (TensorLy's order).  skip: index of a matrix to leave out; weights:
    a length-R vector multiplying the columns."""
    matrices = _args.matrices("matrices", matrices)
    named = {f"matrices[{i}]": m for i, m in enumerate(matrices)}
    if weights is not None:
        named["weights"] = weights
    xp, dt = _args.check(named)
    for i, m in enumerate(matrices):
        if m.ndim != 2:
            raise ValueError(f"matrices[{i}]: expected a 2-D array, got shape {tuple(m.shape)}")
    r = int(matrices[0].shape[1])
    for i, m in enumerate(matrices):
        if int(m.shape[1]) != r:
            raise ValueError(f"matrices[{i}]: has {m.shape[1]} columns, matrices[0] has {r}; "
                             "all must have the same number of columns")
    if skip is not None:
        skip = _args.mode("skip", skip, len(matrices))
        matrices = [m for i, m in enumerate(matrices) if i != skip]
        if not matrices:
            raise ValueError("skip: no matrix left once it is skipped")
    res = _args.cast(xp, matrices[0], dt)
    if weights is not None:
        if weights.ndim != 1 or int(weights.shape[0]) != r:
            raise ValueError(f"weights: expected shape ({r},), got {tuple(weights.shape)}")
        res = res * _args.cast(xp, weights, dt)[None, :]
    for m in matrices[1:]:
        m = _args.cast(xp, m, dt)
        res = xp.reshape(res[:, None, :] * m[None, :, :], (-1, r))
    return res


def mode_product(xp, tensor, m, mode):
    """tensor ×_mode m for m (J, I_mode), or a vector (I_mode,) that removes the mode: a GEMM
    on the tensor viewed (I_0, rest) or (rest, I_{N−1}), or a batched GEMM over the leading
    index (pre, I_mode, post) for a middle mode; the result in natural mode order."""
    dims = [int(d) for d in tensor.shape]
    n = dims[mode]
    pre, post = math.prod(dims[:mode]), math.prod(dims[mode + 1:])
    vector = m.ndim == 1
    out_dims = dims[:mode] + ([] if vector else [int(m.shape[0])]) + dims[mode + 1:]
    if pre == 1:
        out = xp.matmul(m, xp.reshape(tensor, (n, post)))
    elif post == 1:
        x2 = xp.reshape(tensor, (pre, n))
        out = xp.matmul(x2, m) if vector else xp.matmul(x2, xp.permute_dims(m, (1, 0)))
    else:
        out = xp.matmul(m, xp.reshape(tensor, (pre, n, post)))
    return xp.reshape(out, tuple(out_dims))


def mode_dot(tensor, matrix_or_vector, /, mode, transpose=False):
    """n-mode product: tensor ×_mode M, M of shape (J, I_mode) (or (I_mode, J) with
    transpose=True); a vector of length I_mode removes the mode (TensorLy's semantics)."""
    xp, dt = _args.check({"tensor": tensor, "matrix_or_vector": matrix_or_vector})
    if tensor.ndim == 0:
        raise ValueError("tensor: expected at least 1 dimension, got a 0-D array")
    mode = _args.mode("mode", mode, tensor.ndim)
    m = matrix_or_vector
    if m.ndim not in (1, 2):
        raise ValueError(f"matrix_or_vector: expected a 1-D or 2-D array, got shape "
                         f"{tuple(m.shape)}")
    k = int(m.shape[0] if (m.ndim == 1 or transpose) else m.shape[1])
    if k != int(tensor.shape[mode]):
        raise ValueError(f"matrix_or_vector: its contracted dimension ({k}) must equal the "
                         f"tensor's mode-{mode} size ({tensor.shape[mode]}); shapes "
                         f"{tuple(tensor.shape)} and {tuple(m.shape)}")
    m = _args.cast(xp, m, dt)
    if m.ndim == 2 and transpose:
        m = xp.permute_dims(m, (1, 0))
    return mode_product(xp, _args.cast(xp, tensor, dt), m, mode)


def unfolding_dot_khatri_rao(tensor, cp_tensor, /, mode, *, precision=None):
    """MTTKRP: unfold(tensor, mode) @ khatri_rao(factors, weights=weights, skip=mode), computed
    without the unfolding or the Khatri–Rao product (one read of the tensor).
    cp_tensor: (weights or None, factors).  precision (float32 on CUDA): "tf32" (default,
    TF32 tensor cores) or "ieee"."""
    weights, factors = _args.cp("cp_tensor", cp_tensor)
    named = {"tensor": tensor, **{f"cp_tensor.factors[{i}]": f for i, f in enumerate(factors)}}
    if weights is not None:
        named["cp_tensor.weights"] = weights
    xp, dt = _args.check(named)
    nd = tensor.ndim
    if nd == 0:
        raise ValueError("tensor: expected at least 1 dimension, got a 0-D array")
    r = _args.cp_factors("cp_tensor", tensor, factors)
    mode = _args.mode("mode", mode, nd)
    if precision not in (None, "tf32", "ieee"):
        raise ValueError(f"precision: expected 'tf32' or 'ieee', got {precision!r}")
    if weights is not None and (weights.ndim != 1 or int(weights.shape[0]) != r):
        raise ValueError(f"cp_tensor.weights: expected shape ({r},), got "
                         f"{tuple(weights.shape)}")
    x = _args.cast(xp, tensor, dt)
    fts = [xp.permute_dims(_args.cast(xp, f, dt), (1, 0)) for f in factors]
    if nd == 1:
        out = xp.reshape(x, (-1, 1)) * xp.ones((1, r), dtype=x.dtype,
                                               device=array_api_compat.device(x))
    else:
        eng = Engine(xp, x, precision or "tf32")
        with eng.fast():
            rows = _tree.mttkrp_rows(eng, backend.contiguous(x), 1.0, fts, mode)
        out = xp.permute_dims(rows, (1, 0))
    if weights is not None:
        out = out * _args.cast(xp, weights, dt)[None, :]
    return out


mttkrp = unfolding_dot_khatri_rao


def cp_to_tensor(cp_tensor, /):
    """The full tensor Σ_r w_r a_1r ∘ … ∘ a_Nr of a CP tensor (weights or None, factors)."""
    weights, factors = _args.cp("cp_tensor", cp_tensor)
    named = {f"cp_tensor.factors[{i}]": f for i, f in enumerate(factors)}
    if weights is not None:
        named["cp_tensor.weights"] = weights
    xp, dt = _args.check(named)
    head = khatri_rao(factors[:-1], weights=weights) if len(factors) > 1 else None
    last = _args.cast(xp, factors[-1], dt)
    if head is None:
        if weights is not None:
            last = last * _args.cast(xp, weights, dt)[None, :]
        return xp.sum(last, axis=1)
    shape = tuple(int(f.shape[0]) for f in factors)
    return xp.reshape(xp.matmul(head, xp.permute_dims(last, (1, 0))), shape)
