"""Kronecker-matrix multiplication: ``x @ (F1 ⊗ … ⊗ FN)`` without ever forming the product.

An operation of the skeleton (kronlinalg._operation): validation (_prepare) → fast path →
planner → algorithm: "sliced" (the compiled kernel, CPU or CUDA) or "shuffle" (the array
library's matmul: reshape–matmul–transpose per factor, what GPyTorch and PyKronecker do).
Left products ``(F1 ⊗ … ⊗ FN) @ x`` run the same kernel on xᵀ's strides with transposed
factors, so no operand is ever copied into a transposed layout.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import array_api_compat
import numpy as np

from ._ext import load
from ._operation import Algorithm, Call, Operation
from .common import backend, dtypes, precision, validation
from .common.signatures import ScaledFront, arrays_signature, scaled_call
from .planner.costs import kron as costs

__all__ = ["kron", "kron_matmul", "float32_precision"]

kron_cpu, kron_cuda = load("kron_cpu"), load("kron_cuda")
_CODE = dtypes.KERNEL_CODE


@dataclass
class _KronCall(Call):
    """A validated kron_matmul call, normalised to the right-hand form rows @ kron(G)."""

    side: str = "right"
    x: object = None
    factors: list = None
    in_len: int = 0  # length of each row of the (possibly transposed) x
    out_len: int = 0
    out_shape: tuple = ()
    result_dtype: str = ""
    compute_dtype: str = ""
    alpha: float = 1.0
    beta: float = 0.0
    y: object = None


def _prepare(x, factors, *, side="right", alpha=1.0, beta=0.0, y=None) -> _KronCall:
    if not isinstance(side, str) or side not in ("right", "left"):
        raise ValueError(f"side: expected 'right' or 'left', got {side!r}")
    if isinstance(factors, (str, bytes)) or not hasattr(factors, "__len__"):
        raise TypeError("factors: expected a sequence of 2-D arrays")
    factors = list(factors)
    if not factors:
        raise ValueError("factors: expected a non-empty sequence of 2-D arrays, got none")
    named = {"x": x, **{f"factors[{i}]": f for i, f in enumerate(factors)}}
    if y is not None:
        named["y"] = y
    xp, result = validation.floating_arrays(named)
    for i, f in enumerate(factors):
        if f.ndim != 2:
            raise ValueError(f"factors[{i}]: expected a 2-D array, got shape {tuple(f.shape)}")
    alpha = validation.scalar("alpha", alpha)
    beta = validation.scalar("beta", beta)
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

    empty = 0 in out_shape or rows_in == 0
    return _KronCall(xp, x, tuple(named.values()), empty, side=side, x=x, factors=factors,
                     in_len=rows_in, out_len=rows_out, out_shape=out_shape,
                     result_dtype=result, compute_dtype=dtypes.compute(result), alpha=alpha,
                     beta=beta if y is not None else 0.0, y=y)


def _empty(call: _KronCall):
    """Empty result, or a zero-length contraction (the product term is exactly zero)."""
    xp = call.xp
    out = xp.zeros(call.out_shape, dtype=getattr(xp, call.result_dtype),
                   device=array_api_compat.device(call.x))
    if call.beta != 0.0:
        out = out + call.beta * xp.astype(call.y, out.dtype)
    return out


def _plan_query(call: _KronCall):
    return ((tuple(call.x.shape),) + tuple(tuple(f.shape) for f in call.factors),
            call.compute_dtype, {"side": call.side})


def _signature(arrays, options, algorithm):
    """Hashable signature of a call on CUDA or NumPy arrays that the fast path can replay, or
    None (the full path): y and beta unused, alpha a Python number."""
    if algorithm == "shuffle" or len(arrays) != 2:
        return None
    x, factors = arrays
    tf = type(factors)
    get = options.get
    if tf is not list and tf is not tuple or get("y") is not None:
        return None
    beta, alpha = get("beta", 0.0), get("alpha", 1.0)
    if not (type(beta) in _PLAIN and beta == 0.0 or validation.plain_scalar(beta) == 0.0):
        return None
    if type(alpha) is not float and validation.plain_scalar(alpha) is None:
        return None
    sig = arrays_signature([x, *factors], True, True)
    return None if sig is None else (get("side", "right"), algorithm, sig)


_PLAIN = (float, int)  # exact types: plain_scalar() judges the rest (bool, huge ints, arrays)


# ---------------------------------------------------------------------------------------------
# kernel facts for the cost model (the planner asks through the registered hook)


def _facts(problem) -> dict:
    """What the compiled kernels decide for this problem: the CPU kernel's passes, the CUDA
    plan's passes (and whether every factor fits a fused kernel) and the float32 mode."""
    info = problem.info
    factors = [(1, p, q, q, 1) for p, q in info["factors"]]
    code = _CODE.get(problem.dtype, 0)
    if problem.kind == "cpu":
        if kron_cpu is None:
            return {}
        return {"cpu_pass_counts": list(kron_cpu.pass_counts(1, info["M"], factors,
                                                              0 if code != 1 else 1))}
    # (a table profile plans for a GPU that is not here: as if the build had the kernels)
    out = {"fp32_mode": float32_precision(),
           "cuda_built": kron_cuda is not None or not problem.device.startswith("cuda:")}
    if kron_cuda is None or not problem.device.startswith("cuda:"):
        return out  # no GPU to ask (a table profile): one launch per factor, unfused
    x = problem.shapes[0]
    k_in, k_out = info["lengths"][0], info["lengths"][-1]
    if info["side"] == "right" or len(x) == 1:  # rows contiguous
        m1, m2, xd, yd = 1, info["M"], (1, 0, k_in, 1), (1, 0, k_out, 1)
    else:  # rows of xᵀ: batch × columns, elements `columns` apart
        m1, m2 = info["M"] // x[-1], x[-1]
        xd, yd = (1, k_in * m2, 1, m2), (1, k_out * m2, 1, m2)
    try:
        text = kron_cuda.config(m1, m2, factors, xd, yd, code)
    except NotImplementedError:  # a factor too large for one block's shared memory
        return {**out, "cuda_fits": False}
    except RuntimeError:  # a plan the extension cannot make here: one launch per factor
        return out
    passes = int(text.split("passes=", 1)[1].split()[0].rstrip(","))
    return {**out, "cuda_plan": (passes, True)}


def _normalise(shapes, options) -> dict:
    return costs.normalise(shapes, options)


def _kernel_applies(problem) -> bool:
    if problem.dtype not in dtypes.FLOAT:
        return False
    if problem.kind == "cpu":
        return kron_cpu is not None
    return problem.info.get("cuda_built", True) and problem.info.get("cuda_fits", True)


_float32_precision = precision.Float32Precision(kron_cuda, "KRONLINALG_KRON_FP32")


def float32_precision(precision=None) -> str:
    """How the CUDA kernels compute float32 kron_matmul, for the whole process: ``"tf32x3"``
    (the default) on tensor cores as three TF32 products per product (x = hi + lo; float32
    accumulation, relative error a few 1e-7 to 1e-6) for memory passes whose factors all have
    P % 8 == 0, or ``"ieee"``: CUDA-core float32 FMAs everywhere.  ``KRONLINALG_KRON_FP32=ffma``
    makes ``"ieee"`` the default.  With an argument, sets the mode (the planner's cached choices
    are dropped: its model follows the mode); returns the previous mode."""
    return _float32_precision(precision)


# ---------------------------------------------------------------------------------------------
# normalisation to rows @ kron(G): which strides the kernel walks


def _factor_descs(call: _KronCall, views) -> list:
    """(ptr, P, Q, row stride, col stride) per factor; left products use Fᵀ through strides."""
    descs = []
    for v in views:
        (p, q), (rs, cs) = v.shape, v.strides
        descs.append((v.ptr, p, q, rs, cs) if call.side == "right" else (v.ptr, q, p, cs, rs))
    return descs


def _row_dims(call: _KronCall, shape, strides):
    """(sizes, strides) of the row dimensions and the element stride of x or of the result."""
    if call.side == "right":
        return shape[:-1], strides[:-1], strides[-1]
    if len(shape) == 1:
        return (), (), strides[0]
    # rows of xᵀ: batch dims and the last dim; elements run along the second-to-last
    return shape[:-2] + shape[-1:], strides[:-2] + strides[-1:], strides[-2]


def _rows(call: _KronCall, xv, ov):
    """Row levels shared by x and the result: (m1, m2, x operand, result operand), or None.

    Row dimensions are merged where both x and the result allow it; the kernel takes two
    levels (enough for any contiguous layout, and for batched left products).
    """
    sizes, xs, xes = _row_dims(call, xv.shape, xv.strides)
    _, os_, oes = _row_dims(call, ov.shape, ov.strides)
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


def _result_like_x(call: _KronCall, x, empty):
    """The result array, laid out like x: a left product of a row-major x (rows of xᵀ strided)
    writes its rows of the result contiguously — a (…, n, K') buffer seen as (…, K', n) — so
    the kernel's stores are vector stores (a tall x of few columns: 5x faster on the CPU).
    x: the NumPy view of x (CPU) or the CUDA array."""
    transposed = (call.side == "left" and x.ndim >= 2 and x.shape[-1] > 1 and _row_major(x))
    return _allocate(empty, call.out_shape, transposed)


def _allocate(empty, shape, transposed):
    if transposed:
        return empty(shape[:-2] + (shape[-1], shape[-2])).swapaxes(-1, -2)
    return empty(shape)


def _row_major(x) -> bool:
    """Whether x's last axis has the smallest stride (NumPy, CuPy: bytes; torch: elements)."""
    strides = x.stride() if backend.is_torch(x) else x.strides
    return abs(strides[-1]) <= abs(strides[-2])


def _cast(xp, a, dtype_name):
    return a if backend.dtype_name(a.dtype) == dtype_name else xp.astype(a, getattr(xp, dtype_name))


def _finish(call: _KronCall, out):
    if call.result_dtype != backend.dtype_name(out.dtype):
        out = call.xp.astype(out, getattr(call.xp, call.result_dtype))
    return out


# ---------------------------------------------------------------------------------------------
# "sliced": the compiled kernels


def _sliced(call: _KronCall):
    if call.grad == "autograd":  # the kernels forward, kron_matmul backward (all orders)
        from ._kron_autograd import differentiable

        return differentiable(_apply_sliced, call.x, call.factors, call.side, call.alpha,
                              call.beta, call.y, call.result_dtype)
    return _sliced_replay(call)[0]


def _apply_sliced(x, factors, side, alpha):
    """kron_matmul's sliced algorithm, for the autograd Function (forward and backward)."""
    return kron_matmul(x, factors, side=side, alpha=alpha, algorithm="sliced")


def _sliced_replay(call: _KronCall):
    """(result, replayer or None): the kernel's launch, and the same launch for later calls of
    this signature (layouts packed once: a repeated call only reads pointers)."""
    if backend.on_cuda(call.x):
        return _run_cuda(call)
    return _run_cpu(call)


def _run_cpu(call: _KronCall):
    xp, cdt = call.xp, call.compute_dtype
    xn = backend.to_numpy(_cast(xp, call.x, cdt))
    fn = [backend.to_numpy(_cast(xp, f, cdt)) for f in call.factors]
    out = _result_like_x(call, xn, lambda shape: np.empty(shape, dtype=cdt))
    if call.beta != 0.0:
        out[...] = backend.to_numpy(_cast(xp, call.y, cdt))
    ov = backend.host_view(out)
    rows = _rows(call, backend.host_view(xn), ov)
    if rows is None:  # batch dims that no two strides describe: one compacting copy
        xn = np.ascontiguousarray(xn)
        rows = _rows(call, backend.host_view(xn), ov)
    m1, m2, xd, od = rows
    descs = _factor_descs(call, [backend.host_view(f) for f in fn])
    code = _CODE[cdt]
    kron_cpu.matmul(m1, m2, descs, xd, od, call.alpha, call.beta, code)
    replayer = None
    if call.beta == 0.0 and cdt == call.result_dtype:
        torch = backend.is_torch(call.x)
        if (all(_same_memory(a, b, torch) for a, b in zip([xn, *fn], [call.x, *call.factors]))
                and (torch or type(call.x) is np.ndarray)):
            packed = kron_cpu.pack(m1, m2, [d[1:] for d in descs], xd[1:], od[1:])
            replayer = _cpu_replayer(packed, call.out_shape, _is_transposed(out), cdt, code)
            if torch:
                replayer = _cpu_torch_replayer(replayer)
    return _finish(call, backend.from_host(call.x, xp, out)), replayer


def _same_memory(view, original, torch) -> bool:
    """Whether the host view the kernel read is the caller's array itself (NumPy) or a
    zero-copy view of it (a CPU torch tensor): only then may a replay read later calls' arrays
    the same way."""
    if not torch:
        return view is original
    return backend.host_address(view) == original.data_ptr()


def _is_transposed(out) -> bool:
    return out.ndim >= 2 and out.shape[-1] > 1 and not _row_major(out)


def _cpu_replayer(packed, out_shape, transposed, cdt, code):
    launch = kron_cpu.launch_arrays

    def empty(shape):
        return np.empty(shape, dtype=cdt)

    def replay(x, factors, *, side="right", alpha=1.0, beta=0.0, y=None):
        out = _allocate(empty, out_shape, transposed)
        launch(packed, factors, x, out, float(alpha), 0.0, code)
        return out

    return replay


def _cpu_torch_replayer(numpy_replay):
    # CPU torch tensors: the NumPy replay on zero-copy views, the result back as a tensor (the
    # full path costs a tiny product ~40 us of host time; this ~10)
    def replay(x, factors, *, side="right", alpha=1.0, beta=0.0, y=None):
        try:
            xn, fn = x.numpy(), [f.numpy() for f in factors]
        except RuntimeError:  # a lazy negated or conjugated view: the full path resolves it
            return None
        return backend.from_host(x, None, numpy_replay(xn, fn, alpha=alpha))

    return replay


def _run_cuda(call: _KronCall):
    if kron_cuda is None:
        raise RuntimeError(
            "kron_matmul: got a CUDA array, but kronlinalg was built without CUDA "
            "(reinstall with nvcc on PATH, or -Csetup-args=-Dcuda=enabled)"
        )
    kron_cuda.device_check()
    xp = call.xp
    # half types stay half in memory: the tensor-core kernels accumulate in float32
    half = call.result_dtype in dtypes.HALF
    cdt = call.result_dtype if half else call.compute_dtype
    x = _cast(xp, call.x, cdt)
    fs = [_cast(xp, f, cdt) for f in call.factors]
    # layouts (shapes, strides -> row levels, factor strides, plan) are packed once per
    # signature: a repeated call only reads pointers (tiny products are host-bound)
    key = (cdt, call.side, call.out_shape) + tuple(backend.cuda_array_key(a, allow_grad=True)
                                                   for a in [x, *fs])
    with backend.cuda_device_scope(x):
        out = _result_like_x(call, x, lambda shape: backend.empty_like_lib(x, shape, cdt))
        if call.beta != 0.0:
            out[...] = call.y
        entry = kron_cuda.layout(key)
        if entry is None:
            ov = backend.device_view(out)
            rows = _rows(call, backend.device_view(x), ov)
            contig = rows is None
            if contig:
                rows = _rows(call, backend.device_view(backend.contiguous(x)), ov)
            m1, m2, xd, od = rows
            descs = _factor_descs(call, [backend.device_view(f) for f in fs])
            entry = kron_cuda.prepare(key, m1, m2, [d[1:] for d in descs], xd[1:], od[1:],
                                      _CODE[cdt], contig)
        contig = entry[3]
        if contig:  # batch dims that no two strides describe: one compacting copy
            x = backend.contiguous(x)
        _launch_cuda(entry, x, fs, out, call.alpha, call.beta, cdt)
    replayer = None
    if (not contig and call.beta == 0.0 and cdt == call.result_dtype and x is call.x
            and all(a is b for a, b in zip(fs, call.factors))):
        replayer = _cuda_replayer(key, x, call.out_shape, _is_transposed(out), cdt)
    return (out if cdt == call.result_dtype else _finish(call, out)), replayer


def _cuda_replayer(layout_key, like, out_shape, transposed, cdt):
    # the launch of a repeated signature in one C-level call (kron_cuda.Replay, called with
    # kron_matmul's arguments): allocation, pointers, the caller's current stream and the plan
    # bound once, with the scratch of small problems kept per stream (allocating it costs a
    # repeated tiny product as much host time as its launches).  None from it (another device
    # current, layouts dropped by kron_cuda.tune()): the full path.
    cupy = backend.is_cupy(like)
    return kron_cuda.Replay(
        kron_cuda.layout(layout_key), cupy, tuple(out_shape), transposed, _CODE[cdt],
        dtypes.ITEMSIZE[cdt], backend.device_index(like),
        (backend.cupy_module().ndarray if cupy
         else functools.partial(backend.replay_template, like)),
        np.dtype(cdt) if cupy else None,
        backend.current_stream_getter(like),
        lambda x, n: backend.empty_like_lib(x, (n,), cdt), _KEEP_SCRATCH_BYTES)


_KEEP_SCRATCH_BYTES = 1 << 22  # scratch kept between calls up to this size (per stream)


def _launch_cuda(entry, x, fs, out, alpha, beta, cdt, kept=None):
    """Enqueue a packed layout (kron_cuda.prepare) on these arrays, on the library's stream;
    the caller has made x's device current.  kept: {(stream, alignment): scratch} of a
    replayer, for small scratch."""
    packed, aligned, unaligned, _ = entry
    ptr = backend.address_getter(x)
    xp, op = ptr(x), ptr(out)
    is_aligned = (xp | op) % 16 == 0
    n, nbuf = aligned if is_aligned else unaligned
    stream = backend.cuda_stream(x)
    scratch = None if kept is None else kept.get((stream, is_aligned))
    if scratch is None:
        # scratch comes from the library's pool (CuPy / torch caching allocator), stream-ordered
        # (held until enqueued; freed blocks are reused only by later work on this stream)
        scratch = [backend.empty_like_lib(x, (n,), cdt) for _ in range(nbuf)]
        scratch = [ptr(a) for a in scratch] + [0, 0], scratch
        if kept is not None and n * nbuf * dtypes.ITEMSIZE[cdt] <= _KEEP_SCRATCH_BYTES:
            kept[(stream, is_aligned)] = scratch
    sp = scratch[0]
    kron_cuda.launch(packed, [ptr(f) for f in fs], xp, op, alpha, beta,
                     _CODE[cdt], sp[0], sp[1], n, stream)


# ---------------------------------------------------------------------------------------------
# "shuffle": the array library's matmul, one reshape–matmul–transpose per factor


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


def _shuffle(call: _KronCall):
    xp, cdt = call.xp, call.compute_dtype
    x = _cast(xp, call.x, cdt)
    fs = [_cast(xp, f, cdt) for f in call.factors]
    if call.side == "right":
        lead = tuple(x.shape[:-1])
        rows = xp.reshape(x, (math.prod(lead), call.in_len))
        out = xp.reshape(_shuffle_rows(xp, rows, fs), lead + (call.out_len,))
    elif x.ndim == 1:
        out = xp.reshape(_shuffle_rows(xp, xp.reshape(x, (1, call.in_len)), [f.mT for f in fs]),
                         (call.out_len,))
    else:
        batch, n = tuple(x.shape[:-2]), x.shape[-1]
        rows = xp.reshape(x.mT, (math.prod(batch) * n, call.in_len))
        res = _shuffle_rows(xp, rows, [f.mT for f in fs])
        out = xp.reshape(res, batch + (n, call.out_len)).mT
    if call.alpha != 1.0:
        out = call.alpha * out
    if call.beta != 0.0:
        out = out + call.beta * _cast(xp, call.y, cdt)
    return _finish(call, out)


# ---------------------------------------------------------------------------------------------
# the operation and its algorithms

OPERATION = Operation(
    "kron_matmul", prepare=_prepare, plan_query=_plan_query, normalise=_normalise,
    empty=_empty, signature=_signature, grad_algorithm="shuffle", facts=_facts, options=("side",),
    doc="x @ (F1 ⊗ … ⊗ FN); shapes: x, F1, …, FN")
OPERATION.register(Algorithm(
    "sliced", _sliced, costs.predictor("kron_matmul/sliced/cpu"), devices=("cpu",),
    applies=_kernel_applies, replay=_sliced_replay, autograd=("autograd",),
    doc="compiled sliced multiply, consecutive factors fused in cache (kronlinalg CPU kernel)"))
OPERATION.register(Algorithm(
    "sliced", _sliced, costs.predictor("kron_matmul/sliced/cuda"), devices=("cuda",),
    applies=_kernel_applies, replay=_sliced_replay, autograd=("autograd",),
    doc="CUDA sliced multiply: one launch per fused pass (per factor when unfused)"))
for _kind, _lib in (("cpu", "BLAS"), ("cuda", "cuBLAS (CuPy / torch)")):
    OPERATION.register(Algorithm(
        "shuffle", _shuffle, costs.predictor(f"kron_matmul/shuffle/{_kind}"), devices=(_kind,),
        autograd=("autograd", "transform"),
        doc=f"reshape–matmul–transpose per factor through the array library's {_lib}"))


# the public call's first step, compiled: a repeated signature replays without the skeleton's
# Python frames (NumPy arrays and CPU torch tensors have replays too)
_FRONT = ScaledFront(OPERATION, OPERATION.fast_cache, True, True)


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
        Scales (Python or 0-d scalars); ``beta`` needs ``y``, which must broadcast to the
        result's shape.  With ``beta == 0``, ``y`` is not read (BLAS convention).
    algorithm : {"auto", "sliced", "shuffle"}
        "sliced" runs the compiled kernel (CPU, or CUDA for CuPy arrays / CUDA torch tensors),
        "shuffle" the reshape–matmul–transpose algorithm through the array library; "auto"
        the planner's choice (``kronlinalg.explain("kron_matmul", x.shape, *shapes)``).

    Returns
    -------
    array in x's namespace, on x's device, of the promoted dtype of the inputs (float16 and
    bfloat16 are computed in float32 and returned in their own dtype).  Differentiable for
    torch tensors (every order: the backward is made of kron_matmul calls).
    """
    return scaled_call(_FRONT, x, factors, side, alpha, beta, y, algorithm)


def kron(a, b, /):
    """Explicit Kronecker product of two matrices (or two vectors).

    This materialises ``a.shape[0]*b.shape[0] × a.shape[1]*b.shape[1]`` elements: it is the slow
    path, meant for small operands and references.  Use :func:`kron_matmul` to multiply by one.
    """
    xp = validation.namespace_of({"a": a, "b": b})
    validation.same_device({"a": a, "b": b})
    for name, v in (("a", a), ("b", b)):
        validation.float_dtype(name, v)
    if a.ndim != b.ndim or a.ndim not in (1, 2):
        raise ValueError(
            f"a, b: expected two 2-D arrays (or two 1-D arrays), got shapes "
            f"{tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a.ndim == 1:
        return xp.reshape(a[:, None] * b[None, :], (a.shape[0] * b.shape[0],))
    prod = a[:, None, :, None] * b[None, :, None, :]
    return xp.reshape(prod, (a.shape[0] * b.shape[0], a.shape[1] * b.shape[1]))
