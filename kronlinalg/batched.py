"""Stacks of small matrix products, and ``matmul`` routed by the cost model.

``batched_matmul(a, b)`` computes ``alpha * a @ b + beta * c`` for

- stacks ``(..., m, k) @ (..., k, n)`` with matmul's broadcasting of the batch dimensions (any
  strides: transposed and broadcast operands are read in place, never copied);
- variable sizes as lists (``[a_0, a_1, ...]``, ``[b_0, ...]``: a list comes back);
- variable sizes packed in 1-D buffers with a size table ``sizes`` of (m, n, k) or (m, n, k,
  a_offset, b_offset, out_offset) rows; a table on the GPU stays there (the problem table the
  kernel reads is built on the device, no synchronisation).

CPU: a compiled kernel (OpenMP over products, a register-blocked micro-kernel) where NumPy's
one-BLAS-call-per-matrix loses, the library's matmul elsewhere.  CUDA: KAMI's communication-
avoiding GEMM inside a thread block (kernels/batched/), 1D and 2D, on tensor cores.  The
planner (planner/costs/batched.py) picks; ``algorithm=`` forces one.

``matmul`` (kronlinalg/matmul.py) routes stacks of small products here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import array_api_compat
import numpy as np

from ._ext import load
from ._operation import Algorithm, Call, Operation
from .common import backend, precision, validation
from .common.dtypes import FLOAT, HALF, KERNEL_CODE
from .batched_variable import ALGO_CODE, offsets_np, run_var
from .common.signatures import (ScaledFront, arrays_signature, host_stack_replayer,
                                plain_repeat, stack_call)
from .planner.costs import batched as costs

__all__ = ["batched_matmul", "float32_precision", "BATCHED"]

batched_cpu, batched_cuda = load("batched_cpu"), load("batched_cuda")
_ALGO_CODE = ALGO_CODE
_float32_precision = precision.Float32Precision(batched_cuda, "KRONLINALG_BATCHED_FP32")


def float32_precision(precision=None) -> str:
    """How the CUDA kernels compute float32, process-wide: ``"tf32x3"`` (default: three TF32
    tensor-core products per product, float32 accumulation, an error near IEEE float32's) or
    ``"ieee"`` (CUDA-core FMAs; ``KRONLINALG_BATCHED_FP32=ffma`` makes it the default).  With
    an argument, sets the mode and returns the previous one."""
    return _float32_precision(precision)


@dataclass
class _Call(Call):
    form: str = "stack"  # "stack", "list" or "packed"
    a: object = None  # stack: the array; list: list of arrays; packed: the 1-D buffer
    b: object = None
    c: object = None
    alpha: float = 1.0
    beta: float = 0.0
    m: int = 0
    n: int = 0
    k: int = 0
    batch: tuple = ()  # stack: the broadcast batch shape
    result: str = "float64"  # the result dtype
    sizes: object = None  # packed: the size table (host or device)
    out_size: int | None = None
    max_order: int = costs.MAX_ORDER


# ---------------------------------------------------------------------------------------------
# validation


def _prepare(a, b, /, *, c=None, alpha=1.0, beta=0.0, sizes=None, out_size=None):
    alpha = validation.scalar("alpha", alpha)
    beta = validation.scalar("beta", beta)
    if beta != 0.0 and c is None:
        raise ValueError("c: beta is nonzero, so c (the array beta multiplies) is required")
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return _prepare_list(a, b, c, alpha, beta)
    if sizes is not None:
        return _prepare_packed(a, b, c, alpha, beta, sizes, out_size)
    if out_size is not None:
        raise ValueError("out_size: only the packed form (sizes=...) takes out_size")
    named = {"a": a, "b": b, **({"c": c} if c is not None else {})}
    xp, result = validation.floating_arrays(named)
    for name in ("a", "b"):
        if named[name].ndim < 2:
            raise ValueError(f"{name}: expected a stack of matrices (at least 2 dimensions), got "
                             f"shape {tuple(named[name].shape)}; matmul takes 1-D operands")
    call = _stack_call(xp, a, b, c, alpha, beta, result)
    return call


def _stack_call(xp, a, b, c, alpha, beta, result):
    (m, k), (k2, n) = tuple(a.shape[-2:]), tuple(b.shape[-2:])
    if k != k2:
        raise ValueError(f"b: its rows ({k2}) must equal a's columns ({k}); shapes "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    try:
        batch = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    except ValueError:
        raise ValueError(f"b: batch dimensions {tuple(b.shape[:-2])} do not broadcast with a's "
                         f"{tuple(a.shape[:-2])}") from None
    out_shape = batch + (m, n)
    if c is not None:
        try:
            ok = np.broadcast_shapes(tuple(c.shape), out_shape) == out_shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"c: shape {tuple(c.shape)} does not broadcast to the result's "
                             f"{out_shape}")
    empty = math.prod(out_shape) == 0 or k == 0
    return _Call(xp, a, (a, b) + ((c,) if c is not None else ()), empty, "stack", a, b,
                 c if beta != 0.0 else None, alpha, beta, m, n, k, batch, result)


def _prepare_list(a, b, c, alpha, beta):
    if not isinstance(a, (list, tuple)) or not isinstance(b, (list, tuple)):
        raise TypeError("b: with a list of matrices for a, b must be a list too (and vice versa)")
    if len(a) != len(b):
        raise ValueError(f"b: {len(b)} matrices for a's {len(a)}")
    if c is not None and (not isinstance(c, (list, tuple)) or len(c) != len(a)):
        raise ValueError("c: expected a list of as many matrices as a")
    if not a:
        return _Call(None, None, (), True, "list", [], [], None, alpha, beta)
    named = {}
    for i in range(len(a)):
        named[f"a[{i}]"], named[f"b[{i}]"] = a[i], b[i]
        if c is not None:
            named[f"c[{i}]"] = c[i]
    xp, result = validation.floating_arrays(named)
    order = 0
    for i in range(len(a)):
        if a[i].ndim != 2 or b[i].ndim != 2:
            raise ValueError(f"a[{i}], b[{i}]: expected 2-D matrices, got shapes "
                             f"{tuple(a[i].shape)} and {tuple(b[i].shape)}")
        if a[i].shape[1] != b[i].shape[0]:
            raise ValueError(f"b[{i}]: its rows ({b[i].shape[0]}) must equal a[{i}]'s columns "
                             f"({a[i].shape[1]})")
        shp = (int(a[i].shape[0]), int(b[i].shape[1]))
        if c is not None and tuple(np.broadcast_shapes(tuple(c[i].shape), shp)) != shp:
            raise ValueError(f"c[{i}]: shape {tuple(c[i].shape)} does not broadcast to {shp}")
        order = max(order, *shp)
    call = _Call(xp, a[0], tuple(named.values()), False, "list", list(a), list(b),
                 list(c) if (c is not None and beta != 0.0) else None, alpha, beta,
                 result=result)
    call.max_order = order
    return call


def _prepare_packed(a, b, c, alpha, beta, sizes, out_size):
    named = {"a": a, "b": b, **({"c": c} if c is not None else {})}
    xp, result = validation.floating_arrays(named)
    for name, v in named.items():
        if v.ndim != 1:
            raise ValueError(f"{name}: the packed form takes 1-D buffers, got shape "
                             f"{tuple(v.shape)}")
    try:
        array_api_compat.array_namespace(sizes)
    except TypeError:
        raise TypeError(f"sizes: expected an integer array, got {type(sizes).__name__}") from None
    if "int" not in backend.dtype_name(sizes.dtype):
        raise TypeError(f"sizes: expected an integer array, got dtype {sizes.dtype}")
    if sizes.ndim != 2 or sizes.shape[1] not in (3, 6):
        raise ValueError(f"sizes: expected shape (count, 3) rows (m, n, k) or (count, 6) rows "
                         f"(m, n, k, a_offset, b_offset, out_offset), got {tuple(sizes.shape)}")
    if backend.on_cuda(sizes) != backend.on_cuda(a):
        if backend.on_cuda(sizes):
            raise ValueError("sizes: on the GPU, but a is in host memory")
    if out_size is not None:
        out_size = validation.count("out_size", out_size)
        if out_size < 0:
            raise ValueError(f"out_size: expected a non-negative size, got {out_size}")
    elif c is not None:
        out_size = int(c.shape[0])
    call = _Call(xp, a, tuple(named.values()), sizes.shape[0] == 0, "packed", a, b,
                 c if beta != 0.0 else None, alpha, beta, result=result)
    call.sizes, call.out_size = sizes, out_size
    if not backend.on_cuda(sizes):  # host sizes: checked here, with errors naming them
        _host_table_check(np.asarray(backend.to_numpy(sizes), dtype=np.int64), a, b, c, out_size)
    return call


def _host_table_check(s, a, b, c, out_size):
    if (s[:, :3] < 0).any():
        raise ValueError("sizes: negative m, n or k")
    if s.shape[1] == 6 and (s[:, 3:] < 0).any():
        raise ValueError("sizes: negative offsets")
    m, n, k = s[:, 0], s[:, 1], s[:, 2]
    offs = offsets_np(s)
    for name, v, need in (("a", a, offs[0] + m * k), ("b", b, offs[1] + k * n)):
        if need.size and int(need.max()) > v.shape[0]:
            raise ValueError(f"{name}: the size table needs {int(need.max())} elements, "
                             f"{name} has {v.shape[0]}")
    need = offs[2] + m * n
    if out_size is not None and need.size and int(need.max()) > out_size:
        raise ValueError(f"out_size: the size table needs {int(need.max())} output elements, "
                         f"got {out_size}")


# ---------------------------------------------------------------------------------------------
# the planner's view


def _plan_query(call):
    if call.form == "stack":
        opts = {"beta": True} if call.beta != 0.0 else {}
        if (backend.on_cuda(call.a) and backend.is_c_contiguous(call.a)
                and backend.is_c_contiguous(call.b)):
            opts["dense"] = True  # each product one row-major block: the tiny kernel's layout
        return (tuple(call.a.shape), tuple(call.b.shape)), _compute(call), opts
    count = len(call.a) if call.form == "list" else int(call.sizes.shape[0])
    return ((count, 3),), _compute(call), {"max_order": call.max_order}


def _compute(call):
    """The dtype the kernels compute in: half types stay half on the GPU (float32 accumulators),
    float32 on the CPU."""
    if call.result in HALF and not backend.on_cuda(call.lead):
        return "float32"
    return call.result


def _facts(problem):
    """The CUDA kernel configuration for this problem (1D and 2D), as the C entry point picks
    it: tile, k-panel, warps, products per block, MMA kind."""
    if problem.kind != "cuda" or batched_cpu is None or problem.dtype not in FLOAT:
        return {}
    info = problem.info
    mode = 0 if _float32_precision() == "tf32x3" else 1
    code = KERNEL_CODE[problem.dtype]
    return {f"config{d}d": batched_cpu.config(info["m"], info["n"], info["k"], code, d, mode)
            for d in (1, 2)}


def _empty(call):
    if call.form == "list":
        return [_empty_one(call, i) for i in range(len(call.a))]
    xp = call.xp
    if call.form == "packed":
        size = call.out_size if call.out_size is not None else 0
        out = xp.zeros((size,), dtype=getattr(xp, call.result), device=_device(call.lead))
        if call.c is not None:
            out = out + call.beta * xp.astype(call.c, out.dtype)
        return out
    out = xp.zeros(call.batch + (call.m, call.n), dtype=getattr(xp, call.result),
                   device=_device(call.lead))
    if call.c is not None:
        out = out + call.beta * xp.astype(call.c, out.dtype)
    return out


def _empty_one(call, i):
    xp = call.xp
    a, b = call.a[i], call.b[i]
    out = xp.zeros((a.shape[0], b.shape[1]), dtype=getattr(xp, call.result), device=_device(a))
    return out


_device = array_api_compat.device


# ---------------------------------------------------------------------------------------------
# the library's matmul (the fallback, the reference and the gradient path)


_cast = backend.cast


def _library(call):
    xp = call.xp
    if call.form == "stack":
        return _library_one(xp, call.a, call.b, call.c, call)
    if call.form == "list":
        cs = call.c if call.c is not None else [None] * len(call.a)
        return [_library_one(xp, a, b, c, call) for a, b, c in zip(call.a, call.b, cs)]
    return _library_packed(call)


def _library_one(xp, a, b, c, call):
    cdt = backend.kernel_dtype(call.result) if not backend.on_cuda(a) else call.result
    out = _epilogue(xp, xp.matmul(_cast(xp, a, cdt), _cast(xp, b, cdt)), call.alpha, call.beta, c)
    return _cast(xp, out, call.result)


def _epilogue(xp, out, alpha, beta, c):
    """alpha·out + beta·c, for half types in float32 (one rounding at the end, not 3 more)."""
    if alpha == 1.0 and c is None:
        return out
    edt = "float32" if (dt := backend.dtype_name(out.dtype)) in HALF else dt
    out = alpha * _cast(xp, out, edt)
    return _cast(xp, out if c is None else out + beta * _cast(xp, c, edt), dt)


def _library_packed(call):
    xp = call.xp
    s = np.asarray(backend.to_numpy(_to_host(call.sizes)), dtype=np.int64)  # synchronises
    offs = offsets_np(s)
    size = call.out_size if call.out_size is not None else _needed_out(s, offs)
    pieces = xp.zeros((size,), dtype=getattr(xp, call.result), device=_device(call.lead))
    out = pieces
    for i, (m, n, k) in enumerate(s[:, :3]):
        if m * n == 0:
            continue
        ao, bo, do = (int(o[i]) for o in offs)
        ai = xp.reshape(call.a[ao:ao + m * k], (int(m), int(k)))
        bi = xp.reshape(call.b[bo:bo + k * n], (int(k), int(n)))
        ci = None if call.c is None else xp.reshape(call.c[do:do + m * n], (int(m), int(n)))
        r = _library_one(xp, ai, bi, ci, call) if k else _cast(
            xp, xp.zeros((int(m), int(n))) if ci is None else call.beta * ci, call.result)
        out = _set(xp, out, do, xp.reshape(r, (int(m * n),)))
    return out


def _set(xp, out, start, values):
    try:
        out[start:start + values.shape[0]] = values
        return out
    except (TypeError, ValueError):  # immutable arrays (array-api-strict): build anew
        return xp.concat([out[:start], values, out[start + values.shape[0]:]])


def _needed_out(s, offs):
    need = offs[2] + s[:, 0] * s[:, 1]
    return int(need.max()) if need.size else 0


def _to_host(a):
    if backend.is_torch(a):
        return a.cpu()
    if backend.is_cupy(a):
        return a.get()
    return a


# ---------------------------------------------------------------------------------------------
# the compiled kernels: operands as (address, batch strides, row stride, column stride)


def _operand(view, batch, rows, cols):
    """An operand's description against the result's batch shape and its (rows, cols): stride 0
    wherever it broadcasts (a missing or size-1 dimension)."""
    shape, strides = view.shape, view.strides
    nd = len(shape)

    def stride(axis, size):  # axis counted from the end
        if axis > nd or shape[nd - axis] != size or size == 1:
            return 0
        return strides[nd - axis]

    rs, cs = stride(2, rows), stride(1, cols)
    bs = [stride(len(batch) - i + 2, batch[i]) for i in range(len(batch))]
    return view.ptr, bs, rs, cs


def _merge(batch, ops):
    """Batch dimensions of size 1 dropped and neighbours merged where every operand allows it
    (batched_cpu.merge_batch, the compiled replay's too); None when more than the kernels'
    8 remain."""
    got = batched_cpu.merge_batch(batch, [op[1] for op in ops])
    if got is None:
        return None
    shape, per_op = got
    return shape, [(op[0], per_op[j], op[2], op[3]) for j, op in enumerate(ops)]


def _describe(call, views, out_view):
    ops = [_operand(views[0], call.batch, call.m, call.k), _operand(views[1], call.batch, call.k, call.n)]
    ops.append(_operand(views[2], call.batch, call.m, call.n) if views[2] is not None
               else (0, [0] * len(call.batch), 0, 0))
    ops.append(_operand(out_view, call.batch, call.m, call.n))
    return _merge(call.batch, ops)


def _run_cpu(call):
    if call.form != "stack":
        return run_var(call, _compute(call), cuda=False)
    xp, cdt = call.xp, _compute(call)
    a = backend.to_numpy(_cast(xp, call.a, cdt))
    b = backend.to_numpy(_cast(xp, call.b, cdt))
    c = backend.to_numpy(_cast(xp, call.c, cdt)) if call.c is not None else None
    out = np.empty(call.batch + (call.m, call.n), dtype=cdt)
    desc = _describe(call, [backend.host_view(v) if v is not None else None for v in (a, b, c)],
                     backend.host_view(out))
    if desc is None:
        return _library(call)
    shape, (ad, bd, cd, od) = desc
    batched_cpu.matmul(call.m, call.n, call.k, shape, ad, bd, cd, od, call.alpha, call.beta,
                       KERNEL_CODE[cdt])
    return _cast(xp, backend.from_host(call.lead, xp, out), call.result)


def _need_cuda():
    if batched_cuda is None:
        raise RuntimeError("batched_matmul: got a CUDA array, but kronlinalg was built without "
                           "CUDA (reinstall with nvcc on PATH, or -Csetup-args=-Dcuda=enabled)")
    batched_cuda.device_check()


def _run_cuda(call, algo):
    _need_cuda()
    if call.form != "stack":
        return run_var(call, call.result, cuda=True, algo=algo)
    xp, cdt = call.xp, call.result
    ready = backend.kernel_ready  # layouts the kernels cannot address in elements: copied
    a, b = ready(_cast(xp, call.a, cdt)), ready(_cast(xp, call.b, cdt))
    c = ready(_cast(xp, call.c, cdt)) if call.c is not None else None
    with backend.cuda_device_scope(a):
        out = backend.empty_like_lib(a, call.batch + (call.m, call.n), cdt)
        desc = _describe(call, [backend.device_view(v) if v is not None else None
                                for v in (a, b, c)], backend.device_view(out))
        if desc is None:
            return _library(call)
        shape, (ad, bd, cd, od) = desc
        batched_cuda.matmul(call.m, call.n, call.k, shape, ad, bd, cd, od, call.alpha,
                            call.beta, KERNEL_CODE[cdt], _ALGO_CODE[algo], backend.cuda_stream(a))
    return out


def _replay(call, algo):
    """Run, and return a replayer for calls of the same signature (stacks, no c, no casts):
    tiny products are host-bound, so a repeat skips validation and planning."""
    cuda = algo in _ALGO_CODE
    out = _run_cuda(call, algo) if cuda else _run_cpu(call)
    if (call.form != "stack" or call.c is not None or call.result != _compute(call)
            or backend.dtype_name(call.a.dtype) != call.result
            or backend.dtype_name(call.b.dtype) != call.result):
        return out, None
    if not cuda:  # compiled: a repeat fills in three addresses (None: never replayed)
        return out, host_stack_replayer(call.a, call.b, out)
    view = backend.device_view
    desc = _describe(call, [view(call.a), view(call.b), None], view(out))
    if desc is None:
        return out, None
    shape, (ad, bd, cd, od) = desc
    strides = [(d[1], d[2], d[3]) for d in (ad, bd, cd, od)]
    m, n, k, code, out_shape = call.m, call.n, call.k, KERNEL_CODE[call.result], tuple(out.shape)
    addr = backend.address_getter(call.a)
    ext = batched_cuda
    # (resolved once: a repeat reads the current device and stream, allocates, launches)
    device, algo_code = backend.device_index(call.a), _ALGO_CODE[algo]
    current_device = ext.current_device
    stream_of = backend.current_stream_getter(call.a)
    empty = backend.replay_empty(call.a, call.result, out_shape)  # (a's dtype: call.result)

    def replayer(a, b, /, *, alpha=1.0, beta=0.0, c=None, **rest):
        if not plain_repeat(alpha, beta, c, rest):
            return None
        if current_device() != device:  # another GPU current: the full path switches to a's
            return None
        o = empty()
        ext.matmul(m, n, k, shape, (addr(a),) + strides[0], (addr(b),) + strides[1],
                   (0,) + strides[2], (addr(o),) + strides[3], float(alpha), 0.0, code,
                   algo_code, stream_of(device))
        return o
    return out, replayer


# ---------------------------------------------------------------------------------------------
# registration


def _signature(arrays, options, algorithm):
    if len(arrays) != 2 or options.get("c") is not None or options.get("sizes") is not None:
        return None
    if options.get("beta", 0.0) != 0 or options.get("out_size") is not None:
        return None
    sig = arrays_signature(arrays, True, True)
    return None if sig is None else (algorithm,) + sig


def _applies_cuda(problem):
    if problem.dtype not in FLOAT or problem.info.get("order", 0) > 4 * costs.MAX_ORDER:
        return False
    # a table profile (planning for a GPU that is not here) prices the kernels all the same
    return batched_cuda is not None or not problem.device.startswith("cuda:")


def _applies_cpu(problem):
    return batched_cpu is not None and problem.dtype in ("float32", "float64")


BATCHED = Operation(
    "batched_matmul", prepare=_prepare, plan_query=_plan_query, normalise=costs.normalise,
    empty=_empty, signature=_signature, grad_algorithm="library", facts=_facts,
    doc="alpha·a@b + beta·c over stacks of small products; shapes: a, b (or (count, 3) for "
        "variable sizes, options max_order, elements, flops)")
def _replay_library(call):
    """The library's matmul, and (plain stacks of one dtype) a replayer that calls it directly."""
    out = _library(call)
    if (call.form != "stack" or call.c is not None
            or backend.dtype_name(call.a.dtype) != call.result
            or backend.dtype_name(call.b.dtype) != call.result or call.result != _compute(call)):
        return out, None
    xp = call.xp
    matmul = backend.native_matmul(call.a, call.b, xp)

    def replayer(a, b, /, *, alpha=1.0, beta=0.0, c=None, **rest):
        if not plain_repeat(alpha, beta, c, rest):
            return None
        return _epilogue(xp, matmul(a, b), alpha, 0.0, None)

    return out, replayer


BATCHED.register(Algorithm(
    "library", _library, costs.predict_library, devices=("cpu", "cuda"),
    autograd=("autograd", "transform"), replay=_replay_library,
    doc="the array library's matmul on the stack (a loop for variable sizes), then alpha, beta"))
BATCHED.register(Algorithm(
    "blocked", _run_cpu, costs.predict_blocked, devices=("cpu",), applies=_applies_cpu,
    replay=lambda call: _replay(call, "blocked"),
    doc="compiled CPU kernel: OpenMP over products, register-blocked micro-kernel"))
for _dims in (1, 2):
    BATCHED.register(Algorithm(
        f"kami{_dims}d", (lambda d: lambda call: _run_cuda(call, f"kami{d}d"))(_dims),
        costs.predict_kami(_dims), devices=("cuda",), applies=_applies_cuda,
        replay=(lambda d: lambda call: _replay(call, f"kami{d}d"))(_dims),
        doc=f"KAMI {_dims}D communication-avoiding GEMM in a thread block, tensor cores"))


def batched_matmul(a, b, /, *, c=None, alpha=1.0, beta=0.0, sizes=None, out_size=None,
                   algorithm="auto"):
    """``alpha * a @ b + beta * c`` for a stack (or a list, or a packed buffer) of products.

    Parameters
    ----------
    a, b : arrays ``(..., m, k)`` and ``(..., k, n)``
        Batch dimensions broadcast as in matmul; any strides (transposed views, broadcast_to)
        are read in place.  Or two lists of 2-D arrays (variable sizes: a list comes back), or,
        with ``sizes``, two 1-D buffers holding the products' operands row-major.
    c : array, optional
        Broadcasts to the result (a list for lists, a 1-D buffer for the packed form); read
        only when ``beta != 0`` (BLAS convention).
    alpha, beta : real scalars
    sizes : integer array (count, 3) or (count, 6), optional
        The packed form's table: rows (m, n, k) with the products packed back to back (the
        offsets are the running sums of m·k, k·n and m·n), or (m, n, k, a_offset, b_offset,
        out_offset) in elements.  A table on the GPU never visits the host (rows whose operands
        leave the buffers compute nothing there; a host table is checked: ValueError).
    out_size : int, optional
        The packed output's length (default: c's, else read from the table, which costs one
        synchronisation when the table is on the GPU).
    algorithm : "auto", "library", "blocked" (CPU), "kami1d", "kami2d" (CUDA)

    Returns
    -------
    The caller's namespace and device; the promoted dtype (float16/bfloat16 accumulate in
    float32); a list for lists; a 1-D buffer for the packed form.
    """
    return stack_call(_FRONT, a, b, c, alpha, beta, sizes, out_size, algorithm)


# the public call's first step, compiled: a repeated stack replays without the skeleton's
# Python frames (tiny stacks are host-bound)
_FRONT = ScaledFront(BATCHED, BATCHED.fast_cache, True, True)
