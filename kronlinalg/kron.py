"""Kronecker-matrix multiplication: ``x @ (F1 ⊗ … ⊗ FN)`` without ever forming the product.

Public function → validation → algorithm → compiled kernel (CPU or CUDA) or the array library's
own matmul ("shuffle": reshape–matmul–transpose per factor, what GPyTorch and PyKronecker do).
Left products ``(F1 ⊗ … ⊗ FN) @ x`` run the same kernel on xᵀ's strides with transposed
factors, so no operand is ever copied into a transposed layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import array_api_compat
import numpy as np

from ._ext import load
from .common import backend as _backend, precision as _precision, validation as _validation
from .common.signatures import SignatureCache, arrays_signature

__all__ = ["kron", "kron_matmul", "float32_precision"]

ALGORITHMS = ("auto", "sliced", "shuffle")
kron_cpu, kron_cuda = load("kron_cpu"), load("kron_cuda")
_KERNEL_DTYPE = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3}  # kron.h codes


@dataclass
class _Spec:
    """A validated kron_matmul call, normalised to the right-hand form rows @ kron(G)."""

    xp: object
    side: str
    x: object
    factors: list
    in_len: int  # length of each row of the (possibly transposed) x
    out_len: int
    out_shape: tuple
    result_dtype: str
    compute_dtype: str
    alpha: float
    beta: float
    y: object


def _prepare(x, factors, side, alpha, beta, y) -> _Spec:
    if side not in ("right", "left"):
        raise ValueError(f"side: expected 'right' or 'left', got {side!r}")
    if isinstance(factors, (str, bytes)) or not hasattr(factors, "__len__"):
        raise TypeError("factors: expected a sequence of 2-D arrays")
    factors = list(factors)
    if not factors:
        raise ValueError("factors: expected a non-empty sequence of 2-D arrays, got none")
    named = {"x": x, **{f"factors[{i}]": f for i, f in enumerate(factors)}}
    if y is not None:
        named["y"] = y
    xp = _validation.namespace_of(named)
    _validation.same_device(named)
    for name, a in named.items():
        _validation.float_dtype(name, a)
    for i, f in enumerate(factors):
        if f.ndim != 2:
            raise ValueError(f"factors[{i}]: expected a 2-D array, got shape {tuple(f.shape)}")
    alpha = _validation.scalar("alpha", alpha)
    beta = _validation.scalar("beta", beta)
    if beta != 0.0 and y is None:
        raise ValueError("y: beta is nonzero, so y (the array beta multiplies) is required")

    P = [int(f.shape[0]) for f in factors]
    Q = [int(f.shape[1]) for f in factors]
    rows_in, rows_out = (math.prod(P), math.prod(Q)) if side == "right" else (math.prod(Q), math.prod(P))
    shape = tuple(x.shape)
    if x.ndim == 0:
        raise ValueError("x: expected at least 1 dimension, got a 0-D array")
    if side == "right":
        if shape[-1] != rows_in:
            raise ValueError(
                f"x: last dimension must equal prod(P_i) = {rows_in} for side='right', "
                f"got shape {shape}"
            )
        out_shape = shape[:-1] + (rows_out,)
    else:
        k_axis = -1 if x.ndim == 1 else -2
        if shape[k_axis] != rows_in:
            raise ValueError(
                f"x: dimension {x.ndim + k_axis} must equal prod(Q_i) = {rows_in} for "
                f"side='left', got shape {shape}"
            )
        out_shape = (rows_out,) if x.ndim == 1 else shape[:-2] + (rows_out, shape[-1])
    if y is not None:
        try:
            bshape = np.broadcast_shapes(tuple(y.shape), out_shape)
        except ValueError:
            bshape = None
        if bshape != out_shape:
            raise ValueError(
                f"y: shape {tuple(y.shape)} does not broadcast to the result shape {out_shape}"
            )

    result = _backend.dtype_name(xp.result_type(*named.values()))
    return _Spec(xp, side, x, factors, rows_in, rows_out, out_shape, result,
                 _backend.kernel_dtype(result), alpha, beta if y is not None else 0.0, y)


def kron_matmul(x, factors, /, *, side="right", alpha=1.0, beta=0.0, y=None, algorithm="auto"):
    """``alpha * x @ (F1 ⊗ … ⊗ FN) + beta * y`` (side="right") or
    ``alpha * (F1 ⊗ … ⊗ FN) @ x + beta * y`` (side="left"), without forming the Kronecker product.

    Parameters
    ----------
    x : array
        side="right": shape ``(..., prod(P_i))``; side="left": ``(..., prod(Q_i), n)`` or
        ``(prod(Q_i),)``.  Leading dimensions are batch dimensions, as in ``matmul``.
    factors : sequence of 2-D arrays
        ``F_i`` of shape ``(P_i, Q_i)``; shapes may differ.
    alpha, beta : float
        Scales; ``beta`` needs ``y``, which must broadcast to the result's shape.  With
        ``beta == 0``, ``y`` is not read (BLAS convention).
    algorithm : {"auto", "sliced", "shuffle"}
        "sliced" runs the compiled kernel (CPU, or CUDA for CuPy arrays / CUDA torch tensors),
        "shuffle" the reshape–matmul–transpose algorithm through the array library.

    Returns
    -------
    array in x's namespace, on x's device, of the promoted dtype of the inputs (float16 and
    bfloat16 are computed in float32 and returned in their own dtype).
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {ALGORITHMS}, got {algorithm!r}")
    fast_key = _fast_key(x, factors, side, algorithm) if y is None and beta == 0 else None
    if fast_key is not None:
        out = _fast_call(fast_key, x, factors, alpha)
        if out is not None:
            return out
    spec = _prepare(x, factors, side, alpha, beta, y)
    if 0 in spec.out_shape or spec.in_len == 0:
        return _degenerate(spec)
    if algorithm == "auto":
        from . import planner  # the cost model picks; its plans are cached per shape

        algorithm = planner.choose("kron_matmul", tuple(spec.x.shape),
                                   *(tuple(f.shape) for f in spec.factors),
                                   dtype=spec.compute_dtype, device=spec.x, side=spec.side)
    if algorithm != "shuffle" and _needs_autograd(spec):
        from ._autograd import kron_matmul_differentiable  # compiled kernels, kron_matmul backward

        return kron_matmul_differentiable(spec)
    if algorithm == "shuffle" or _needs_autograd(spec):
        return _shuffle(spec)
    if _backend.on_cuda(x):
        return _run_cuda(spec, fast_key)
    return _run_cpu(spec, fast_key)


_float32_precision = _precision.Float32Precision(kron_cuda, "KRONLINALG_KRON_FP32")


def float32_precision(precision=None) -> str:
    """How the CUDA kernels compute float32 kron_matmul, for the whole process: ``"tf32x3"``
    (the default) on tensor cores as three TF32 products per product (x = hi + lo; float32
    accumulation, relative error a few 1e-7 to 1e-6) for memory passes whose factors all have
    P % 8 == 0, or ``"ieee"``: CUDA-core float32 FMAs everywhere.  ``KRONLINALG_KRON_FP32=ffma``
    makes ``"ieee"`` the default.  With an argument, sets the mode (the planner's cached choices
    are dropped: its model follows the mode); returns the previous mode."""
    return _float32_precision(precision)


def _needs_autograd(spec: _Spec) -> bool:
    # The compiled kernels have no backward yet: differentiate through the library's matmul.
    if not _backend.is_torch(spec.x):
        return False
    import torch

    arrays = [spec.x, *spec.factors] + ([spec.y] if spec.y is not None else [])
    return torch.is_grad_enabled() and any(a.requires_grad for a in arrays)


def _degenerate(spec: _Spec):
    """Empty result, or a zero-length contraction (the product term is exactly zero)."""
    xp = spec.xp
    out = xp.zeros(spec.out_shape, dtype=_result_dtype(spec), device=array_api_compat.device(spec.x))
    if spec.beta != 0.0:
        out = out + spec.beta * xp.astype(spec.y, out.dtype)
    return out


def _result_dtype(spec: _Spec):
    return getattr(spec.xp, spec.result_dtype)


# ---------------------------------------------------------------------------------------------
# normalisation to rows @ kron(G): which strides the kernel walks


def _factor_descs(spec: _Spec, views) -> list:
    """(ptr, P, Q, row stride, col stride) per factor; left products use Fᵀ through strides."""
    descs = []
    for v in views:
        (p, q), (rs, cs) = v.shape, v.strides
        descs.append((v.ptr, p, q, rs, cs) if spec.side == "right" else (v.ptr, q, p, cs, rs))
    return descs


def _row_dims(spec: _Spec, shape, strides):
    """(sizes, strides) of the row dimensions and the element stride of x or of the result."""
    if spec.side == "right":
        return shape[:-1], strides[:-1], strides[-1]
    if len(shape) == 1:
        return (), (), strides[0]
    # rows of xᵀ: batch dims and the last dim; elements run along the second-to-last
    return shape[:-2] + shape[-1:], strides[:-2] + strides[-1:], strides[-2]


def _rows(spec: _Spec, xv, ov):
    """Row levels shared by x and the result: (m1, m2, x operand, result operand), or None.

    Row dimensions are merged where both x and the result allow it; the kernel takes two
    levels (enough for any contiguous layout, and for batched left products).
    """
    sizes, xs, xes = _row_dims(spec, xv.shape, xv.strides)
    _, os_, oes = _row_dims(spec, ov.shape, ov.strides)
    merged = []  # [size, x stride, result stride]
    for n, a, b in zip(sizes, xs, os_):
        if n == 1:
            continue
        if merged and merged[-1][1] == n * a and merged[-1][2] == n * b:
            merged[-1] = [merged[-1][0] * n, a, b]
        else:
            merged.append([n, a, b])
    if len(merged) > 2:
        return None
    while len(merged) < 2:
        merged.insert(0, [1, 0, 0])
    (m1, xr1, or1), (m2, xr2, or2) = merged
    return m1, m2, (xv.ptr, xr1, xr2, xes), (ov.ptr, or1, or2, oes)


def _cast(xp, a, dtype_name):
    return a if _backend.dtype_name(a.dtype) == dtype_name else xp.astype(a, getattr(xp, dtype_name))


def _finish(spec: _Spec, out):
    if spec.result_dtype != spec.compute_dtype:
        out = spec.xp.astype(out, _result_dtype(spec))
    return out


def _run_cpu(spec: _Spec, fast_key=None):
    xp, cdt = spec.xp, spec.compute_dtype
    xn = _backend.to_numpy(_cast(xp, spec.x, cdt))
    fn = [_backend.to_numpy(_cast(xp, f, cdt)) for f in spec.factors]
    out = np.empty(spec.out_shape, dtype=cdt)
    if spec.beta != 0.0:
        out[...] = _backend.to_numpy(_cast(xp, spec.y, cdt))
    ov = _backend.host_view(out)
    rows = _rows(spec, _backend.host_view(xn), ov)
    if rows is None:  # batch dims that no two strides describe: one compacting copy
        xn = np.ascontiguousarray(xn)
        rows = _rows(spec, _backend.host_view(xn), ov)
    m1, m2, xd, od = rows
    descs = _factor_descs(spec, [_backend.host_view(f) for f in fn])
    kron_cpu.matmul(m1, m2, descs, xd, od, spec.alpha, spec.beta, _KERNEL_DTYPE[cdt])
    if (fast_key is not None and spec.beta == 0.0 and cdt == spec.result_dtype
            and xn is spec.x and all(a is b for a, b in zip(fn, spec.factors))):
        packed = kron_cpu.pack(m1, m2, [d[1:] for d in descs], xd[1:], od[1:])
        _FAST.remember(fast_key, ("cpu", packed, spec.out_shape, cdt, _KERNEL_DTYPE[cdt]))
    return _finish(spec, _backend.from_host(spec.x, xp, out))


def _run_cuda(spec: _Spec, fast_key=None):
    if kron_cuda is None:
        raise RuntimeError(
            "kron_matmul: got a CUDA array, but kronlinalg was built without CUDA "
            "(reinstall with nvcc on PATH, or -Csetup-args=-Dcuda=enabled)"
        )
    kron_cuda.device_check()
    xp = spec.xp
    # half types stay half in memory: the tensor-core kernels accumulate in float32
    half = spec.result_dtype in ("float16", "bfloat16")
    cdt = spec.result_dtype if half else spec.compute_dtype
    x = _cast(xp, spec.x, cdt)
    fs = [_cast(xp, f, cdt) for f in spec.factors]
    # layouts (shapes, strides -> row levels, factor strides, plan) are packed once per
    # signature: a repeated call only reads pointers (tiny products are host-bound)
    key = (cdt, spec.side, spec.out_shape) + tuple(_backend.cuda_array_key(a, allow_grad=True) for a in [x, *fs])
    with _backend.cuda_device_scope(x):
        out = _backend.empty_like_lib(x, spec.out_shape, cdt)
        if spec.beta != 0.0:
            out[...] = spec.y
        entry = kron_cuda.layout(key)
        if entry is None:
            ov = _backend.device_view(out)
            rows = _rows(spec, _backend.device_view(x), ov)
            contig = rows is None
            if contig:
                rows = _rows(spec, _backend.device_view(_backend.contiguous(x)), ov)
            m1, m2, xd, od = rows
            descs = _factor_descs(spec, [_backend.device_view(f) for f in fs])
            try:
                entry = kron_cuda.prepare(key, m1, m2, [d[1:] for d in descs], xd[1:], od[1:],
                                          _KERNEL_DTYPE[cdt], contig)
            except RuntimeError as err:  # a factor too large for one block's shared memory
                if "does not fit" not in str(err):
                    raise
                return _shuffle(spec)
        contig = entry[3]
        if contig:  # batch dims that no two strides describe: one compacting copy
            x = _backend.contiguous(x)
        _launch_cuda(entry, x, fs, out, spec.alpha, spec.beta, cdt)
    if (fast_key is not None and not contig and spec.beta == 0.0 and cdt == spec.result_dtype
            and x is spec.x and all(a is b for a, b in zip(fs, spec.factors))):
        _FAST.remember(fast_key, ("cuda", key, spec.out_shape, cdt))
    return out if cdt == spec.result_dtype else _finish(spec, out)


# ---------------------------------------------------------------------------------------------
# the per-call fast path for CUDA arrays: tiny products are host-bound (the kernel runs for a few
# µs, a full validation costs tens of µs of Python), so a call whose signature (library, shapes,
# strides, dtypes, devices, side, algorithm) was validated, planned and launched before goes
# straight to the launch.  Anything unusual (y, casts, compaction copies, autograd, a planner
# or tuning change) takes the full path.

_FAST = SignatureCache()


def _fast_key(x, factors, side, algorithm):
    """Hashable signature of a call on CUDA or NumPy arrays, or None (the full path)."""
    if algorithm == "shuffle" or type(factors) not in (list, tuple):
        return None
    arrays = arrays_signature([x, *factors], host=True)
    return None if arrays is None else (side, algorithm) + arrays


def _fast_call(fast_key, x, factors, alpha):
    """The result of a call seen before (see _FAST), or None to take the full path."""
    hit = _FAST.get(fast_key)
    if hit is None or type(alpha) not in (float, int):
        return None
    if hit[0] == "cpu":
        _, packed, out_shape, cdt, code = hit
        out = np.empty(out_shape, dtype=cdt)
        addr = _backend.host_address
        kron_cpu.launch(packed, [addr(f) for f in factors], addr(x), addr(out), float(alpha),
                        0.0, code)
        return out
    _, layout_key, out_shape, cdt = hit
    entry = kron_cuda.layout(layout_key)
    if entry is None:  # kron_cuda.tune() dropped the packed layouts
        return None
    with _backend.cuda_device_scope(x):
        out = _backend.empty_like_lib(x, out_shape, cdt)
        _launch_cuda(entry, x, factors, out, float(alpha), 0.0, cdt)
    return out


def _launch_cuda(entry, x, fs, out, alpha, beta, cdt):
    """Enqueue a packed layout (kron_cuda.prepare) on these arrays, on the library's stream;
    the caller has made x's device current."""
    packed, aligned, unaligned, _ = entry
    ptr = _backend.address_getter(x)
    xp, op = ptr(x), ptr(out)
    n, nbuf = aligned if (xp | op) % 16 == 0 else unaligned
    # scratch comes from the library's pool (CuPy / torch caching allocator), stream-ordered
    # (held until enqueued; freed blocks are reused only by later work on this stream)
    scratch = [_backend.empty_like_lib(x, (n,), cdt) for _ in range(nbuf)]
    sp = [ptr(a) for a in scratch] + [0, 0]
    kron_cuda.launch(packed, [ptr(f) for f in fs], xp, op, alpha, beta,
                     _KERNEL_DTYPE[cdt], sp[0], sp[1], n, _backend.cuda_stream(x))


# ---------------------------------------------------------------------------------------------
# the shuffle algorithm: the array library's matmul, one reshape–matmul–transpose per factor


def _shuffle_rows(xp, rows, factors):
    """rows @ kron(factors) for a 2-D `rows`, by the reshape–matmul–transpose algorithm."""
    m = rows.shape[0]
    cur = rows
    for f in reversed(factors):
        p, q = f.shape
        s = cur.shape[1] // p
        t = xp.reshape(cur, (m * s, p)) @ f
        cur = xp.reshape(xp.permute_dims(xp.reshape(t, (m, s, q)), (0, 2, 1)), (m, q * s))
    return cur


def _shuffle(spec: _Spec):
    xp, cdt = spec.xp, spec.compute_dtype
    x = _cast(xp, spec.x, cdt)
    fs = [_cast(xp, f, cdt) for f in spec.factors]
    if spec.side == "right":
        lead = tuple(x.shape[:-1])
        rows = xp.reshape(x, (math.prod(lead), spec.in_len))
        out = xp.reshape(_shuffle_rows(xp, rows, fs), lead + (spec.out_len,))
    elif x.ndim == 1:
        out = xp.reshape(_shuffle_rows(xp, xp.reshape(x, (1, spec.in_len)), [f.mT for f in fs]),
                         (spec.out_len,))
    else:
        batch, n = tuple(x.shape[:-2]), x.shape[-1]
        rows = xp.reshape(x.mT, (math.prod(batch) * n, spec.in_len))
        res = _shuffle_rows(xp, rows, [f.mT for f in fs])
        out = xp.reshape(res, batch + (n, spec.out_len)).mT
    if spec.alpha != 1.0:
        out = spec.alpha * out
    if spec.beta != 0.0:
        out = out + spec.beta * _cast(xp, spec.y, cdt)
    return _finish(spec, out)


# ---------------------------------------------------------------------------------------------


def kron(a, b, /):
    """Explicit Kronecker product of two matrices (or two vectors).

    This materialises ``a.shape[0]*b.shape[0] × a.shape[1]*b.shape[1]`` elements: it is the slow
    path, meant for small operands and references.  Use :func:`kron_matmul` to multiply by one.
    """
    xp = _validation.namespace_of({"a": a, "b": b})
    _validation.same_device({"a": a, "b": b})
    for name, v in (("a", a), ("b", b)):
        _validation.float_dtype(name, v)
    if a.ndim != b.ndim or a.ndim not in (1, 2):
        raise ValueError(
            f"a, b: expected two 2-D arrays (or two 1-D arrays), got shapes "
            f"{tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a.ndim == 1:
        return xp.reshape(a[:, None] * b[None, :], (a.shape[0] * b.shape[0],))
    prod = a[:, None, :, None] * b[None, :, None, :]
    return xp.reshape(prod, (a.shape[0] * b.shape[0], a.shape[1] * b.shape[1]))
