"""batched_matmul's variable sizes: the list and packed forms as one table of kl_batched_entry
rows (sizes, addresses, strides) that the compiled kernels read, on the device where the size
table is on the device (no synchronisation).  kronlinalg/batched.py plans and calls these."""

from __future__ import annotations

import array_api_compat
import numpy as np

from ._ext import load
from .common import backend
from .common.dtypes import ITEMSIZE, KERNEL_CODE

batched_cpu, batched_cuda = load("batched_cpu"), load("batched_cuda")
ALGO_CODE = {"kami1d": 1, "kami2d": 2}
_ENTRY_WORDS = 15  # kl_batched_entry
_cast = backend.cast


def offsets_np(s):
    """The packed table's (a, b, out) offsets of a host table: given, or running sums."""
    if s.shape[1] == 6:
        return s[:, 3], s[:, 4], s[:, 5]
    m, n, k = s[:, 0], s[:, 1], s[:, 2]
    return tuple(np.concatenate(([0], np.cumsum(x)[:-1])).astype(np.int64)
                 for x in (m * k, k * n, m * n))


def _mat(view, rows, cols):
    """(address, row stride, column stride) of a matrix broadcast to (rows, cols)."""
    shape, strides = (1, 1) + tuple(view.shape), (0, 0) + tuple(view.strides)
    (r, c), (rs, cs) = shape[-2:], strides[-2:]
    return view.ptr, (rs if r == rows and rows != 1 else 0), (cs if c == cols and cols != 1 else 0)


def run_var(call, cdt, cuda, algo="kami1d"):
    if call.form == "packed":
        return _run_packed(call, cdt, cuda, algo)
    xp = call.xp
    view = backend.device_view if cuda else backend.host_view
    conv = (lambda v: backend.kernel_ready(_cast(xp, v, cdt))) if cuda else (
        lambda v: backend.to_numpy(_cast(xp, v, cdt)))
    a = [conv(v) for v in call.a]
    b = [conv(v) for v in call.b]
    c = [conv(v) for v in call.c] if call.c is not None else None
    count = len(a)
    table = np.zeros((count, _ENTRY_WORDS), dtype=np.int64)
    shapes = [(int(x.shape[0]), int(y.shape[1])) for x, y in zip(a, b)]
    sizes = [mm * nn for mm, nn in shapes]
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64) if count else []
    total = int(sum(sizes))
    if cuda:
        with backend.cuda_device_scope(a[0]):
            flat = backend.empty_like_lib(a[0], (max(total, 1),), cdt)
    else:
        flat = np.empty((max(total, 1),), dtype=cdt)
    base = view(flat).ptr
    isz = ITEMSIZE[cdt]
    for i in range(count):
        mm, nn = shapes[i]
        kk = int(a[i].shape[1])
        row = [mm, nn, kk, *_mat(view(a[i]), mm, kk), *_mat(view(b[i]), kk, nn)]
        row += list(_mat(view(c[i]), mm, nn)) if c is not None else [0, 0, 0]
        row += [base + int(starts[i]) * isz, nn, 1]
        table[i] = row
    _launch_table(call, table, count, cuda, algo, cdt, a[0] if count else None)
    if cuda:
        return [xp.reshape(flat[int(starts[i]):int(starts[i]) + sizes[i]], shapes[i])
                for i in range(count)]
    return [_cast(xp, backend.from_host(call.lead, xp, flat[int(starts[i]):int(starts[i]) + sizes[i]]
                                        .reshape(shapes[i])), call.result) for i in range(count)]


def _launch_table(call, table, count, cuda, algo, cdt, like, device_table=None):
    code = KERNEL_CODE[cdt]
    if not cuda:
        batched_cpu.matmul_var(table.ctypes.data, count, call.alpha, call.beta, code)
        return
    with backend.cuda_device_scope(like):
        if device_table is None:
            device_table = _upload(like, table)
        ptr = backend.device_view(device_table).ptr
        batched_cuda.matmul_var(ptr, count, call.max_order, call.alpha, call.beta, code,
                                ALGO_CODE[algo], backend.cuda_stream(like))


def _upload(like, table):
    if backend.is_cupy(like):
        import cupy

        return cupy.asarray(table)
    import torch

    return torch.from_numpy(table).to(like.device)


def _run_packed(call, cdt, cuda, algo):
    xp = call.xp
    host = backend.to_numpy

    def ready(v):  # the table addresses the buffers as contiguous
        v = backend.kernel_ready(v) if cuda else host(v)
        step = (backend.device_view(v) if cuda else backend.host_view(v)).strides[0]
        return v if step == 1 or v.shape[0] <= 1 else (
            backend.contiguous(v) if cuda else np.ascontiguousarray(v))

    a, b = ready(_cast(xp, call.a, cdt)), ready(_cast(xp, call.b, cdt))
    c = ready(_cast(xp, call.c, cdt)) if call.c is not None else None
    on_device = backend.on_cuda(call.sizes)
    if on_device and array_api_compat.array_namespace(call.sizes) is not xp:
        raise TypeError("sizes: a size table on the GPU must come from a's library")
    s = call.sizes if on_device else np.asarray(backend.to_numpy(call.sizes), dtype=np.int64)
    sx = xp if on_device else np
    s = sx.astype(s, sx.int64) if on_device else s
    if on_device and cuda and call.out_size is not None:
        return _run_packed_on_gpu(call, cdt, algo, a, b, c, s)
    m, n, k = s[:, 0], s[:, 1], s[:, 2]
    if s.shape[1] == 6:
        ao, bo, do = s[:, 3], s[:, 4], s[:, 5]
    else:
        ao, bo, do = (sx.cumulative_sum(x) - x if on_device else offsets_np(s)[i]
                      for i, x in enumerate((m * k, k * n, m * n)))
    size = call.out_size
    if size is None:  # the output's length: one synchronisation where the table is on the GPU
        size = int(sx.max(do + m * n)) if s.shape[0] else 0
    if cuda:
        with backend.cuda_device_scope(a):
            out = backend.empty_like_lib(a, (size,), cdt)
    else:
        out = np.empty((size,), dtype=cdt)
    if s.shape[1] == 6:  # explicit offsets may leave gaps: they read as zero
        out[...] = 0
    view = backend.device_view if cuda else backend.host_view
    isz = ITEMSIZE[cdt]
    # rows whose extents leave the buffers (possible only for a table on the GPU: host tables
    # were checked in _prepare_packed, with errors naming them): a row whose A or B leaves its
    # buffer computes an empty product (zeros, or beta * C); one whose output or C leaves its
    # buffer is not computed
    bad_d = (m < 0) | (n < 0) | (do < 0) | (do + m * n > size)
    if c is not None:
        bad_d = bad_d | (do + m * n > c.shape[0])
    bad_ab = (k < 0) | (ao < 0) | (bo < 0) | (ao + m * k > a.shape[0]) | (bo + k * n > b.shape[0])
    m = sx.where(bad_d, sx.zeros_like(m), m)
    k = sx.where(bad_ab, sx.zeros_like(k), k)
    one = sx.ones_like(m)
    zero = sx.zeros_like(m)
    cptr = (view(c).ptr + do * isz) if c is not None else zero
    cols = [m, n, k, view(a).ptr + ao * isz, k, one, view(b).ptr + bo * isz, n, one,
            cptr, n if c is not None else zero, one if c is not None else zero,
            view(out).ptr + do * isz, n, one]
    table = sx.stack(cols, axis=1)
    if on_device:
        _launch_table(call, None, int(s.shape[0]), cuda, algo, cdt, a, device_table=table)
    else:
        table = np.ascontiguousarray(table, dtype=np.int64)
        if cuda:
            _launch_table(call, table, int(s.shape[0]), True, algo, cdt, a)
        else:
            _launch_table(call, table, int(s.shape[0]), False, algo, cdt, None)
    if not cuda:
        return _cast(xp, backend.from_host(call.lead, xp, out), call.result)
    return out


def _run_packed_on_gpu(call, cdt, algo, a, b, c, s):
    """The packed form with its size table on the GPU and the output's length given: the
    kl_batched_entry table built there by one kernel (batched_cuda_table.cu; the array-library
    construction above took ~48 small kernels and as many host calls), then the products."""
    with backend.cuda_device_scope(a):
        out = backend.empty_like_lib(a, (call.out_size,), cdt)
        if s.shape[1] == 6:  # explicit offsets may leave gaps: they read as zero
            out[...] = 0
        count = int(s.shape[0])
        s = backend.contiguous(s)
        table = backend.empty_like_lib(a, (count, _ENTRY_WORDS), "int64")
        view = backend.device_view
        c_ptr, c_len = (view(c).ptr, int(c.shape[0])) if c is not None else (0, 0)
        batched_cuda.var_table(view(s).ptr, int(s.shape[1]), count, view(a).ptr, int(a.shape[0]),
                               view(b).ptr, int(b.shape[0]), c_ptr, c_len, view(out).ptr,
                               int(out.shape[0]), ITEMSIZE[cdt], view(table).ptr,
                               backend.cuda_stream(a))
    _launch_table(call, None, count, True, algo, cdt, a, device_table=table)
    return out
