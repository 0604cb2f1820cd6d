"""Strassen matrix multiplication: ``alpha * a @ b + beta * c`` by the MSMES schedule, at any
depth, with no workspace beyond the operands themselves.

The schedule (planner/costs/strassen.py holds it and prices it) updates the quadrants of a and
b in place, forms the seven products in four groups whose C blocks do not overlap, and undoes
the updates afterwards.  No product is ever stored: each leaf product is added straight into
its signed C blocks (a target table of up to 2^levels blocks), so C is written without atomics
and two identical calls give bitwise identical results.

Memory modes: ``overwrite_inputs=False`` (default): a and b are never written; the core of
each (the largest multiple of 2^levels rows and columns) is copied once into a private
workspace, ``(m·k + k·n)·itemsize`` extra bytes (2·N²·itemsize for square N), one batch element
at a time.  ``overwrite_inputs=True``: a and b are the workspace, modified during the call and
restored to rounding only ((x + y) − y ≠ x); no extra memory on the GPU (the CPU leaf forms
each product in one leaf-sized buffer); with ``c`` given the result is written into c.

CPU: passes in the compiled kernel (OpenMP), leaf products through NumPy's BLAS on views.
CUDA: passes and leaves are compiled kernels (FP64 on DMMA tensor cores, with CUTLASS's sm_90
mainloop where the build found CUTLASS's headers; FP32 on CUDA cores, IEEE); "strassen_cublas"
takes cuBLAS for the leaves with one leaf-sized product buffer; "strassen_reloaded" (FP64, one
level) forms the operand sums while the leaf loads its tiles: a and b are only read, no passes
and no copies in either mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import planner
from ._ext import load
from ._operation import Algorithm, Call, Operation
from .common import backend, config, validation
from .common.dtypes import HALF, KERNEL_CODE
from .planner.costs import strassen as costs
from .strassen_cuda_exec import CudaExecutor as _CudaExecutor
from .vendor import cublas as _cublas

__all__ = ["strassen_matmul", "stage_times", "matmul_candidate", "restore_bound"]

strassen_cpu, strassen_cuda = load("strassen_cpu"), load("strassen_cuda")
_SUPPORTED = ("float32", "float64")


@dataclass
class _Call(Call):
    a: object = None
    b: object = None
    c: object = None
    alpha: float = 1.0
    beta: float = 0.0
    levels: int | None = None
    overwrite: bool = False
    out_shape: tuple = ()
    batch: tuple = ()
    dtype: str = "float64"


# ---------------------------------------------------------------------------------------------
# validation


def _prepare(a, b, /, *, c=None, alpha=1.0, beta=0.0, levels=None, overwrite_inputs=False):
    named = {"a": a, "b": b}
    if c is not None:
        named["c"] = c
    xp = validation.namespace_of(named)
    validation.same_device(named)
    for name, v in named.items():
        dt = validation.float_dtype(name, v)
        if dt in HALF:
            raise TypeError(f"{name}: strassen_matmul computes float32 and float64 only, got "
                            f"{dt}: Strassen's error grows about 3x per level, which leaves "
                            "nothing useful of 8-11 mantissa bits (use matmul, or cast to "
                            "float32)")
    for name in ("a", "b"):
        if named[name].ndim < 2:
            raise ValueError(f"{name}: expected at least 2 dimensions, got shape "
                             f"{tuple(named[name].shape)}")
    ash, bsh = tuple(a.shape), tuple(b.shape)
    if ash[-1] != bsh[-2]:
        raise ValueError(f"b: its second-to-last dimension ({bsh[-2]}) must equal a's last "
                         f"({ash[-1]})")
    try:
        batch = tuple(np.broadcast_shapes(ash[:-2], bsh[:-2]))
    except ValueError:
        raise ValueError(f"b: batch dimensions {bsh[:-2]} do not broadcast with a's "
                         f"{ash[:-2]}") from None
    out_shape = batch + (ash[-2], bsh[-1])
    alpha = validation.scalar("alpha", alpha)
    beta = validation.scalar("beta", beta)
    if beta != 0.0 and c is None:
        raise ValueError("c: beta is nonzero, so c (the array beta multiplies) is required")
    if c is not None:
        try:
            ok = np.broadcast_shapes(tuple(c.shape), out_shape) == out_shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"c: shape {tuple(c.shape)} does not broadcast to the result "
                             f"shape {out_shape}")
    if levels is not None:
        levels = validation.count("levels", levels)
        if not 0 <= levels <= costs.MAX_LEVELS:
            raise ValueError(f"levels: expected None or 0..{costs.MAX_LEVELS}, got {levels}")
    if overwrite_inputs not in (True, False):
        raise TypeError(f"overwrite_inputs: expected a bool, got {overwrite_inputs!r}")
    dtype = backend.dtype_name(xp.result_type(*named.values()))
    if dtype not in _SUPPORTED:
        raise TypeError(f"a: strassen_matmul computes float32 and float64, got {dtype}")
    call = _Call(xp, a, tuple(named.values()), a=a, b=b, c=c, alpha=alpha,
                 beta=beta if c is not None else 0.0, levels=levels,
                 overwrite=bool(overwrite_inputs), out_shape=out_shape, batch=batch, dtype=dtype)
    call.empty = 0 in out_shape or ash[-1] == 0
    if overwrite_inputs and not call.empty:
        _check_overwrite(call)
    return call


def _extent(a):
    """[first byte, last byte + 1) of an array's memory (None where no address is known)."""
    if backend.on_cuda(a):
        v = backend.device_view(a)
        ptr, strides, item = v.ptr, v.strides, a.itemsize if backend.is_cupy(a) else a.element_size()
    else:
        try:
            n = backend.to_numpy(a)
        except Exception:
            return None
        ptr, strides, item = backend.host_address(n), tuple(s // n.itemsize for s in n.strides), n.itemsize
    lo = hi = 0
    for st, d in zip(strides, a.shape):
        if d == 0:
            return (ptr, ptr)
        if st > 0:
            hi += st * (d - 1)
        else:
            lo += st * (d - 1)
    return (ptr + lo * item, ptr + (hi + 1) * item)


def _overlap(x, y) -> bool:
    ex, ey = _extent(x), _extent(y)
    return ex is not None and ey is not None and ex[0] < ey[1] and ey[0] < ex[1]


def _check_overwrite(call):
    """overwrite_inputs=True: a and b are written, so they must be writable, distinct, of the
    compute dtype and rows of unit stride; c must not share their memory."""
    for name, v in (("a", call.a), ("b", call.b)):
        if backend.dtype_name(v.dtype) != call.dtype:
            raise ValueError(f"{name}: overwrite_inputs=True works in place, so {name} must have "
                             f"the result dtype {call.dtype}, got {backend.dtype_name(v.dtype)}")
        if backend.on_cuda(v):
            stride = backend.device_view(v).strides[-1]
        else:
            n = backend.to_numpy(v)
            if not n.flags.writeable:
                raise ValueError(f"{name}: overwrite_inputs=True needs a writable array; this "
                                 "one is read-only")
            if isinstance(v, np.ndarray) and n is not v and not np.shares_memory(n, v):
                raise ValueError(f"{name}: overwrite_inputs=True cannot work in place on this "
                                 "layout (the kernels would see a copy)")
            stride = n.strides[-1] // n.itemsize if n.shape[-1] > 1 else 1
        if v.shape[-1] > 1 and stride != 1:
            raise ValueError(f"{name}: overwrite_inputs=True needs unit stride along the last "
                             f"axis, got stride {stride}")
        if any(s == 0 for s, d in zip(_strides(v)[:-2], v.shape[:-2]) if d > 1):
            raise ValueError(f"{name}: overwrite_inputs=True cannot work on a broadcast view")
    if call.a is call.b or _overlap(call.a, call.b):
        raise ValueError("b: overwrite_inputs=True writes a and b, so they must not share "
                         "memory (a is b or overlapping views)")
    if call.c is not None:
        for name, v in (("a", call.a), ("b", call.b)):
            if _overlap(call.c, v):
                raise ValueError(f"c: shares memory with {name}, which overwrite_inputs=True "
                                 "writes")


def _strides(a):
    if backend.on_cuda(a):
        return backend.device_view(a).strides
    n = backend.to_numpy(a)
    return tuple(s // n.itemsize for s in n.strides)


def _plan_query(call):
    # accumulate: beta != 0, where Winograd's form (C written fresh) does not run
    opts = {"levels": call.levels, "overwrite": call.overwrite, "accumulate": call.beta != 0.0}
    return (tuple(call.a.shape), tuple(call.b.shape)), call.dtype, opts


def _facts(problem) -> dict:
    """The leaf kernel's output tile (the cost model's wave count), asked of the CUDA build."""
    if problem.kind != "cuda" or problem.dtype not in _SUPPORTED:
        return {}
    return _facts_for(problem.dtype)


def _empty(call):
    xp = call.xp
    import array_api_compat

    out = xp.zeros(call.out_shape, dtype=getattr(xp, call.dtype),
                   device=array_api_compat.device(call.a))
    if call.beta != 0.0:
        out = out + call.beta * xp.astype(call.c, out.dtype)
    return out


def _levels(call, name) -> int:
    if call.levels is not None:
        return call.levels
    shapes, dtype, opts = _plan_query(call)
    ch = planner.plan("strassen_matmul", *shapes, dtype=dtype, device=call.lead,
                      algorithm=name, **opts)[0]
    return int(ch.details.get("levels", 1))


# ---------------------------------------------------------------------------------------------
# the schedule, run on one batch element by an executor (CPU or CUDA)


def _effective_levels(levels, m, k, n) -> int:  # every leaf dimension keeps an element
    small = min(m, k, n)
    return 0 if small < 1 else min(levels, int(math.floor(math.log2(small))))


def _run_one(ex, m, k, n, levels, alpha, beta, first):
    """C = alpha A B + (first ? beta C : C) on the executor's A (m x k), B, C (m x n)."""
    L = _effective_levels(levels, m, k, n)
    mc, kc, nc = costs.core_sizes(m, k, n, L)
    mode = getattr(ex, "mode", "")
    # Winograd's form writes the core fresh (beta = 0): its k remainder is added afterwards
    winograd = (mode == "cublas" and ex.copy and 1 <= L <= costs.MAX_WINOGRAD_LEVELS and first
                and beta == 0.0 and mc and nc and kc and ex.winograd())
    # the classical strips first: they read a and b before the core modifies them
    if m > mc:
        ex.classical((mc, 0), (0, 0), (mc, 0), m - mc, k, n, alpha, beta, first, "strip")
    if n > nc and mc:
        ex.classical((0, 0), (0, nc), (0, nc), mc, k, n - nc, alpha, beta, first, "strip")
    if k > kc and mc and nc and not winograd:
        ex.classical((0, kc), (kc, 0), (0, 0), mc, k - kc, nc, alpha, beta, first, "strip")
        first = False
    if not (mc and nc and kc):
        return
    if L == 0:
        ex.classical((0, 0), (0, 0), (0, 0), mc, kc, nc, alpha, beta, first, "leaf")
        return
    if winograd:  # products straight into C (or a scratch block), a combine per level
        ops = costs.winograd_schedule(mc, kc, nc, L)
        ex.winograd_workspace(costs.winograd_workspace(mc, kc, nc, L))
    elif mode == "cublas" and ex.copy and L == 1:  # the sums workspace: no copy, no S3+S4
        ops = costs.sums_schedule(mc, kc, nc, first)
    else:
        ex.prepare_core(mc, kc, nc)
        ops = (costs.reloaded_schedule if mode == "reloaded" else
               costs.private_schedule if ex.copy else costs.schedule)(mc, kc, nc, L, first)
    for op in ops:
        if isinstance(op, costs.Pass):
            ex.pass_(op)
        elif isinstance(op, costs.Sums):
            ex.sums(op)
        elif isinstance(op, costs.WinogradSums):
            ex.winograd_sums(op)
        elif isinstance(op, costs.Combine):
            ex.combine(op)
        elif isinstance(op, costs.AddInto):
            ex.add_into(op)
        else:
            ex.leaf(op, alpha, beta)
    if winograd and k > kc:  # a and b are untouched (default mode): the k strip may come last
        ex.classical((0, kc), (kc, 0), (0, 0), mc, k - kc, nc, alpha, beta, False, "strip")


class _CpuExecutor:
    """A, B, C as NumPy arrays (rows of unit stride; A and B may be workspace copies)."""

    def __init__(self, a, b, c, code, copy):
        self.a, self.b, self.c, self.code, self.copy = a, b, c, code, copy
        self.wa = self.wb = None
        self.buf = None
        self.item = c.itemsize

    def prepare_core(self, mc, kc, nc):
        if self.copy:  # the private workspace: the cores of a and b
            # rows padded by 64 bytes: power-of-two leading dimensions make BLAS's packing of
            # the leaf blocks hit the same cache sets (4096 x 4096, 2 levels: 2.6 s -> see
            # docs/performance.md)
            pad = 64 // self.c.itemsize
            self.wa = np.empty((mc, kc + pad), dtype=self.c.dtype)[:, :kc]
            self.wb = np.empty((kc, nc + pad), dtype=self.c.dtype)[:, :nc]
            np.copyto(self.wa, self.a[:mc, :kc], casting="unsafe")
            np.copyto(self.wb, self.b[:kc, :nc], casting="unsafe")
        else:
            self.wa, self.wb = self.a, self.b

    def _ptr(self, arr, rc):
        return backend.host_address(arr) + (rc[0] * arr.strides[0] + rc[1] * arr.strides[1])

    def pass_(self, op):
        wa, wb = self.wa, self.wb
        strassen_cpu.run_pass(op.stage, op.mh, op.kh, op.nh, wa.strides[0] // self.item,
                              wb.strides[0] // self.item, [self._ptr(wa, x) for x, _ in op.blocks],
                              [self._ptr(wb, y) for _, y in op.blocks], self.code, 1)

    def _scratch(self, m, n):
        if self.buf is None or self.buf.size < m * n:
            self.buf = np.empty(m * n, dtype=self.c.dtype)
        return self.buf[:m * n].reshape(m, n)

    def leaf(self, op, alpha, beta):
        m, k, n = op.m, op.k, op.n
        buf = self._scratch(m, n)
        for (xr, xc), (yr, yc), targets in op.products:
            np.matmul(self.wa[xr:xr + m, xc:xc + k], self.wb[yr:yr + k, yc:yc + n], out=buf)
            self._add(buf, m, n, [(self._ptr(self.c, t[:2]), t[2]) for t in targets], alpha,
                      beta, op.first)

    def _add(self, buf, m, n, targets, alpha, beta, first):
        strassen_cpu.add_targets(m, n, buf.strides[0] // self.item, self.c.strides[0] // self.item,
                                 alpha, beta, first, [(backend.host_address(buf), 0, targets)],
                                 self.code, 1)

    def classical(self, xo, yo, co, m, k, n, alpha, beta, first, what):
        buf = self._scratch(m, n)
        x = self.a[xo[0]:xo[0] + m, xo[1]:xo[1] + k]
        y = self.b[yo[0]:yo[0] + k, yo[1]:yo[1] + n]
        if x.dtype != buf.dtype:
            x = x.astype(buf.dtype)
        if y.dtype != buf.dtype:
            y = y.astype(buf.dtype)
        np.matmul(x, y, out=buf)
        self._add(buf, m, n, [(self._ptr(self.c, co), 1)], alpha, beta, first)


def _batch_index(idx, shape):
    """The index of an operand of batch `shape` (right-aligned, size-1 dims broadcast)."""
    off = len(idx) - len(shape)
    return tuple(0 if d == 1 else i for i, d in zip(idx[off:], shape))


def _output(call, new):
    """(out, first-write beta): the array the result goes into (c itself in overwrite mode when
    it has the result's shape, dtype and rows of unit stride) and the beta its first write
    applies."""
    c = call.c
    if call.beta == 0.0 or c is None:
        return new(), 0.0
    if (call.overwrite and tuple(c.shape) == call.out_shape
            and backend.dtype_name(c.dtype) == call.dtype
            and (c.shape[-1] <= 1 or _strides(c)[-1] == 1)):
        return c, call.beta
    out = new()
    out[...] = c if backend.dtype_name(c.dtype) == call.dtype else call.xp.astype(
        c, getattr(call.xp, call.dtype))
    return out, call.beta


def _run_cpu(call):
    L = _levels(call, "strassen")
    code = KERNEL_CODE[call.dtype]
    a, b = backend.to_numpy(call.a), backend.to_numpy(call.b)
    if call.overwrite and (not a.flags.writeable or not b.flags.writeable):
        raise ValueError("a: overwrite_inputs=True needs writable arrays")
    if call.c is not None and call.beta != 0.0:
        cn = backend.to_numpy(call.c)
        if call.overwrite and tuple(cn.shape) == call.out_shape and cn.dtype.name == call.dtype \
                and cn.flags.writeable and (cn.shape[-1] <= 1 or cn.strides[-1] == cn.itemsize):
            out = cn
        else:
            out = np.empty(call.out_shape, dtype=call.dtype)
            out[...] = cn
        beta = call.beta
    else:
        out, beta = np.empty(call.out_shape, dtype=call.dtype), 0.0
    m, k, n = call.out_shape[-2], a.shape[-1], call.out_shape[-1]
    for idx in np.ndindex(*call.batch):
        ex = _CpuExecutor(a[_batch_index(idx, a.shape[:-2])], b[_batch_index(idx, b.shape[:-2])],
                          out[idx], code, copy=not call.overwrite)
        _run_one(ex, m, k, n, L, call.alpha, beta, True)
    if call.c is not None and call.beta != 0.0 and out is cn:
        return call.c  # overwrite mode: the result is in c
    return backend.from_host(call.a, call.xp, out)


def _classical(call):
    xp = call.xp
    dt = getattr(xp, call.dtype)
    a, b = xp.astype(call.a, dt, copy=False), xp.astype(call.b, dt, copy=False)  # no copies
    out = xp.matmul(a, b)
    if call.alpha != 1.0:
        out = call.alpha * out
    if call.beta != 0.0:
        out = out + call.beta * xp.astype(call.c, dt)
    return out


# ---------------------------------------------------------------------------------------------
# CUDA


def _cuda_operand(call, v):
    """v as the kernels take it: the result dtype and rows of unit stride (a copy otherwise;
    overwrite mode has already refused such operands)."""
    if backend.dtype_name(v.dtype) != call.dtype:
        v = call.xp.astype(v, getattr(call.xp, call.dtype))
    v = backend.kernel_ready(v)
    if v.shape[-1] > 1 and backend.device_view(v).strides[-1] != 1:
        v = backend.contiguous(v)
    return v


def _run_cuda(call, levels, leaf, hook=None):
    lead = call.lead
    code = KERNEL_CODE[call.dtype]
    with backend.cuda_device_scope(lead):
        stream = backend.cuda_stream(lead)
        out, beta = _output(call, lambda: backend.empty_like_lib(lead, call.out_shape,
                                                                 call.dtype))
        a, b = _cuda_operand(call, call.a), _cuda_operand(call, call.b)
        m, k, n = call.out_shape[-2], a.shape[-1], call.out_shape[-1]
        ws = {}
        for idx in np.ndindex(*call.batch):
            ex = _CudaExecutor(a[_batch_index(idx, a.shape[:-2])],
                               b[_batch_index(idx, b.shape[:-2])], out[idx], code, stream,
                               not call.overwrite, leaf, lead, ws, hook)
            _run_one(ex, m, k, n, levels, call.alpha, beta, True)
    return out


def _stage_times(a, b, levels, algorithm, repeats):
    import cupy

    call = _prepare(a, b, levels=levels)
    mode = {"strassen_cublas": "cublas", "strassen_reloaded": "reloaded"}.get(algorithm, "kernel")
    stream = cupy.cuda.get_current_stream()
    marks = []

    def hook(op):
        ev = cupy.cuda.Event()
        ev.record(stream)
        marks.append((op, ev))

    runs = []
    for r in range(repeats + 1):
        marks.clear()
        _run_cuda(call, levels, mode, hook)
        end = cupy.cuda.Event()
        end.record(stream)
        end.synchronize()
        evs = [e for _, e in marks] + [end]
        times = [cupy.cuda.get_elapsed_time(evs[i], evs[i + 1]) * 1e-3 for i in range(len(marks))]
        labels = [op if isinstance(op, str) else costs.label(op) for op, _ in marks]
        if r:  # the first run warms up
            runs.append(times)
    med = np.median(np.array(runs), axis=0)
    shapes, dtype, opts = _plan_query(call)
    prob = planner.Problem("strassen_matmul", shapes, dtype, "cuda", "cuda", opts,
                           {**costs.normalise(shapes, opts), **_facts_for(dtype)})
    pred = costs.launch_times(prob, planner.profile_for(a), levels,
                              algorithm if mode != "kernel" else "strassen")
    prof = planner.profile_for(a)
    mc, kc, nc = costs.core_sizes(*(prob.info[x] for x in "mkn"), levels)
    copies = 2.0 * (mc * kc + kc * nc) * (8 if dtype == "float64" else 4) / prof.bandwidth
    pred_iter = iter(pred)
    rows: dict = {}
    for i, lab in enumerate(labels):
        got = rows.setdefault(lab, [0.0, 0.0, 0])
        got[0] += float(med[i])
        got[1] += copies if lab == "copies" else next(pred_iter, ("", float("nan")))[1]
        got[2] += 1
    return [(lab, v[0], v[1], v[2]) for lab, v in rows.items()]


def _facts_for(dtype):
    if not strassen_cuda:
        return {}
    code = KERNEL_CODE[dtype]
    return {"leaf_tile": strassen_cuda.leaf_tile(code),
            "leaf_kernel": "cutlass" if strassen_cuda.leaf_kernel(code) else "own",
            "winograd": (config.get("KRONLINALG_STRASSEN_WINOGRAD") in (1, 2)
                         and _cublas.available())}

# ---------------------------------------------------------------------------------------------
# the planner's side: registration, and what matmul needs to offer Strassen


OPERATION = Operation(
    "strassen_matmul", prepare=_prepare, plan_query=_plan_query, normalise=costs.normalise,
    empty=_empty, grad_algorithm="classical", facts=_facts,
    doc="alpha·a@b + beta·c by Strassen (MSMES schedule); shapes: a, b")


def _applies_strassen(problem) -> bool:
    if problem.dtype not in _SUPPORTED:
        return False
    if problem.kind == "cpu":
        return strassen_cpu is not None
    # a table profile (planning for a GPU that is not here) prices the kernels all the same
    return strassen_cuda is not None or not problem.device.startswith("cuda:")


def _applies_cublas(problem) -> bool:
    present = problem.device.startswith("cuda:")
    return (problem.dtype in _SUPPORTED and not problem.options.get("overwrite")
            and (not present or (strassen_cuda is not None and _cublas.available())))


def _applies_classical(problem) -> bool:
    return problem.options.get("levels") in (None, 0)


def _run_strassen(call):
    if backend.on_cuda(call.lead):
        return _run_cuda(call, _levels(call, "strassen"), "kernel")
    return _run_cpu(call)


def _applies_reloaded(problem) -> bool:
    lv = problem.options.get("levels")
    return (problem.dtype == "float64" and (lv is None or 1 <= lv <= costs.MAX_RELOADED_LEVELS)
            and (strassen_cuda is not None or not problem.device.startswith("cuda:")))


def _run_strassen_reloaded(call):  # (planner: only on CUDA)
    return _run_cuda(call, _levels(call, "strassen_reloaded"), "reloaded")


def _run_strassen_cublas(call):
    return _run_cuda(call, _levels(call, "strassen_cublas"), "cublas")


OPERATION.register(Algorithm(
    "classical", _classical, costs.predict_classical, devices=("cpu", "cuda"),
    applies=_applies_classical, autograd=("autograd", "transform"),
    doc="the array library's matmul (BLAS / cuBLAS), then alpha and beta"))
OPERATION.register(Algorithm(
    "strassen", _run_strassen, costs.predict_strassen, devices=("cpu", "cuda"),
    applies=_applies_strassen,
    doc="MSMES schedule: compiled passes; leaves by BLAS (CPU) or the multi-target leaf "
        "kernel (CUDA: DMMA float64, IEEE FFMA float32)"))
OPERATION.register(Algorithm(
    "strassen_cublas", _run_strassen_cublas, costs.predict_strassen_cublas, devices=("cuda",),
    applies=_applies_cublas,
    doc="MSMES schedule with cuBLAS leaves and one leaf-sized product buffer (default mode)"))
OPERATION.register(Algorithm(
    "strassen_reloaded", _run_strassen_reloaded, costs.predict_strassen_reloaded,
    devices=("cuda",), applies=_applies_reloaded,
    doc="Strassen's seven products, operand sums formed while the leaf loads (float64, sm_90, "
        "1 level): a and b only read, no passes, no copies, no workspace"))


def strassen_matmul(a, b, /, *, c=None, alpha=1.0, beta=0.0, levels=None,
                    overwrite_inputs=False, algorithm="auto"):
    """``alpha * a @ b + beta * c`` by Strassen's algorithm (the MSMES in-place schedule).

    Parameters
    ----------
    a, b : arrays, float32 or float64
        Shapes ``(..., m, k)`` and ``(..., k, n)``; leading dimensions broadcast as in matmul.
        float16 and bfloat16 are refused (TypeError): Strassen's error grows about 3x per
        level, too much for 8-11 mantissa bits.
    c : array, optional
        Broadcasts to ``(..., m, n)``; needed when beta != 0 (with beta == 0 it is not read).
    alpha, beta : float
        Scales; alpha is applied in every leaf's epilogue, beta at the first write of each
        element of the result.
    levels : int 0..4 or None
        Recursion depth; None lets the planner choose (``kronlinalg.explain("strassen_matmul",
        a.shape, b.shape)``), 0 is the classical product.  Each level multiplies the
        max-norm error by about 3 (asserted <= 2·3^levels × classical's in the tests).  Sizes
        that are not multiples of 2^levels are finished by classical strips (no padding).
    overwrite_inputs : bool
        False (default): a and b are never written; their cores are copied into a private
        workspace of ``(m·k + k·n)·itemsize`` bytes (2·N²·itemsize for N×N), one batch element at
        a time.  True: a and b are the workspace (modified during the call, restored to
        rounding: see :func:`restore_bound`); no extra device memory, and with c given the
        result is written into c.  Needs writable, non-overlapping a and b of the result
        dtype with rows of unit stride, and c not overlapping them (ValueError otherwise).
    algorithm : {"auto", "classical", "strassen", "strassen_cublas", "strassen_reloaded"}
        "strassen_cublas" (CUDA, default mode): cuBLAS leaves plus one leaf-sized product
        buffer (N²/4^levels elements); at one level the ten operand sums of Strassen's
        products replace the private copy (a workspace of 5/4·(m·k + k·n) elements), or, with
        beta = 0 at one or two levels (CuPy arrays, or CUDA torch tensors where CuPy is
        installed), Winograd's form: eight operand sums a level (m·k + k·n elements, a quarter
        of that more at the second level, and one C quadrant of scratch), each product straight
        into a C block by cuBLAS (float32: IEEE), one combine pass a level, no product buffer
        (its error is about 1.4x that of Strassen's per level: within 2·3^levels x
        classical).  "strassen_reloaded" (CUDA float64 on sm_90, levels 1):
        Strassen's products with the operand sums formed while loading; a and b only read,
        no workspace in either mode, error like one MSMES level.

    Returns
    -------
    array in a's namespace and device, of the promoted dtype.  Deterministic: two identical
    calls give bitwise identical results.
    """
    return OPERATION(a, b, c=c, alpha=alpha, beta=beta, levels=levels,
                     overwrite_inputs=overwrite_inputs, algorithm=algorithm)


def restore_bound(a, b, levels: int) -> float:
    """The documented bound of overwrite_inputs=True's restoration, relative to max|a| (and to
    max|b| for b): 2^(levels+1)·eps.  At depth d an operand block is a sum of up to 2^d
    original blocks, so each add-then-subtract there rounds by up to 2^d·eps·max|a|; summed
    over the depths that is below 2^(levels+1)·eps (measured at N = 1024: 0.8, 2.0, 4.8, 9.6
    eps for levels 1-4, float32 and float64 alike)."""
    eps = np.finfo(np.dtype(backend.dtype_name(a.dtype))).eps
    return float(2.0 ** (max(levels, 1) + 1) * eps)


def stage_times(a, b, /, *, levels, algorithm="strassen", repeats=10):
    """Per-launch CUDA-event times of a strassen_matmul call (CUDA arrays): a list of
    (label, measured seconds, predicted seconds, launches): a stage's launches summed, each
    launch's median over `repeats` runs (CuPy arrays; CUDA events between launches).  Labels:
    "S1", "S3+S4", "S6+S7" (passes, every depth), "{M1,M4}" ... (leaf launches by their
    innermost group), "strip" (classical remainders).  The per-stage table of
    docs/performance.md."""
    return _stage_times(a, b, levels, algorithm, repeats)


def matmul_candidate():
    """What ``matmul``'s planner needs to offer Strassen: a planner.Candidate for the op
    "matmul" (shapes a, b; options as matmul's).  It applies only where the caller opted in
    (``allow_strassen=True``) to float32/float64 on devices with the kernels, predicts with
    this operation's per-launch model (including the 5 % margin) and runs strassen_matmul.
    Register it with ``planner.register("matmul", strassen.matmul_candidate())``."""
    def applies(problem):
        return bool(problem.options.get("allow_strassen")) and _applies_strassen(problem)

    def predict(problem, prof):
        import dataclasses

        opts = {"levels": None, "overwrite": False}
        p = dataclasses.replace(problem, op="strassen_matmul", options=opts)
        best = costs.predict_strassen(p, prof)
        if problem.kind == "cuda" and _applies_cublas(p):
            best = min(best, costs.predict_strassen_cublas(p, prof), key=lambda r: r[0])
        return best

    def run(a, b, /, **options):
        return strassen_matmul(a, b)

    return planner.Candidate("strassen", predict, devices=("cpu", "cuda"), applies=applies,
                             run=run, family="matmul/strassen",
                             doc="Strassen (MSMES schedule), only with allow_strassen=True")
