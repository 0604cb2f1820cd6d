"""Block-sparse products: ``spmm`` (block-sparse × dense → dense) and ``spgemm``
(block-sparse × block-sparse → block-sparse), on the operation skeleton.

    >>> import numpy as np, kronlinalg
    >>> a = np.kron(np.eye(3), np.ones((16, 16)))
    >>> A = kronlinalg.BlockSparseMatrix.from_dense(a)
    >>> x = np.arange(48.0).reshape(48, 1)
    >>> bool(np.allclose(kronlinalg.spmm(A, x), a @ x))
    True

Algorithms (the planner ranks them; ``algorithm=`` forces one):

- spmm: "blocksparse" (C++ on the CPU; on CUDA a CTA or a warp per block row walks its blocks
  on tensor cores), "morton" (CUDA, the 2D kernel: a CTA per panel of 4 or 8 block rows stages
  each B block row once for the panel; either order), "torch_bsr" (torch's BSR matmul, CUDA
  torch tensors), "dense" (the library's GEMM on the densified matrix, kept on the matrix).
- spgemm: "blocksparse" (symbolic phase — count, scan, sorted column lists — then numeric) and
  "dense" (densify, GEMM, blockify: blocks that come out all zero are dropped).
"""

from __future__ import annotations

from dataclasses import dataclass

import array_api_compat
import numpy as np

from ._ext import load
from ._operation import Algorithm, Call, Operation
from .block_sparse_matrix import BlockSparseMatrix, _host, _lib
from .common import backend as _backend, precision as _precision, validation as _validation
from .common.dtypes import KERNEL_CODE
from .common.signatures import ScaledFront, arrays_signature, operand_call
from .planner.costs import blocksparse as _costs

__all__ = ["spmm", "spgemm", "symbolic", "float32_precision", "BlockSparseMatrix"]

bs_cpu, bs_cuda = load("blocksparse_cpu"), load("blocksparse_cuda")
_float32_precision = _precision.Float32Precision(bs_cuda, "KRONLINALG_BS_FP32")
_SPLIT_MIN = 32  # a block row is cut into pieces of at most max(32, 4 x mean) blocks (CUDA)


def float32_precision(precision=None) -> str:
    """How the CUDA kernels compute float32 block-sparse products: "tf32x3" (the default;
    tensor cores, three TF32 products per product) or "ieee" (CUDA-core FMAs).
    ``KRONLINALG_BS_FP32=ffma`` makes "ieee" the default.  Returns the previous mode."""
    return _float32_precision(precision)


def _check_operand_library(name, val, a) -> None:
    """A's blocks and a dense operand come from one library (blocks of a NumPy-converted
    library, e.g. array-api-strict, meet that library's arrays on the host)."""
    lv, la = _lib(val), _lib(a)
    if lv != la and not (lv == "numpy" and la == "other"):
        raise TypeError(f"{name}: array from {la}, but A's blocks are {lv} arrays; all arrays "
                        "must come from one library")


def _promote(names) -> str:
    """The result dtype of real floating operands (float16 with bfloat16: float32)."""
    kinds = set(names)
    return names[0] if len(kinds) == 1 else "float64" if "float64" in kinds else "float32"


def _cast(xp, a, name):
    return a if _backend.dtype_name(a.dtype) == name else xp.astype(a, getattr(xp, name))


def _cached(A: BlockSparseMatrix, key, make):
    hit = A._cache.get(key)
    if hit is None:
        hit = A._cache[key] = make()
    return hit


# ---------------------------------------------------------------------------------------------
# spmm


@dataclass
class SpmmCall(Call):
    A: BlockSparseMatrix = None
    B: object = None
    c: object = None
    alpha: float = 1.0
    beta: float = 0.0
    vector: bool = False
    out_shape: tuple = ()
    result: str = "float64"
    compute: str = "float64"


def _prepare_spmm(A, B, /, *, alpha=1.0, beta=0.0, c=None) -> SpmmCall:
    if not isinstance(A, BlockSparseMatrix):
        raise TypeError(f"A: expected a BlockSparseMatrix, got {type(A).__name__}")
    named = {"B": B}
    if c is not None:
        named["c"] = c
    xp = _validation.namespace_of(named)
    for name, a in named.items():
        _check_operand_library(name, A.val, a)
    if _lib(B) != "other":
        _validation.same_device({"A.val": A.val, **named})
    named["A.val"] = A.val
    for name, a in named.items():
        _validation.float_dtype(name, a)
    alpha = _validation.scalar("alpha", alpha)
    beta = _validation.scalar("beta", beta)
    if beta != 0.0 and c is None:
        raise ValueError("c: beta is nonzero, so c (the array beta multiplies) is required")
    m, k = A.shape
    if B.ndim not in (1, 2):
        raise ValueError(f"B: expected a 1-D or 2-D array, got shape {tuple(B.shape)}")
    if B.shape[0] != k:
        raise ValueError(f"B: expected {k} rows (A is {m} x {k}), got shape {tuple(B.shape)}")
    vector = B.ndim == 1
    out_shape = (m,) if vector else (m, int(B.shape[1]))
    if c is not None:
        try:
            bshape = np.broadcast_shapes(tuple(c.shape), out_shape)
        except ValueError:
            bshape = None
        if bshape != out_shape:
            raise ValueError(f"c: shape {tuple(c.shape)} does not broadcast to the result "
                             f"shape {out_shape}")
    result = _promote([_backend.dtype_name(a.dtype) for a in named.values()])
    on_cuda = _backend.on_cuda(B)
    compute = result if on_cuda else _backend.kernel_dtype(result)
    empty = 0 in out_shape
    return SpmmCall(xp, B, tuple(named.values()), empty, A, B, c, alpha,
                    beta if c is not None else 0.0, vector, out_shape, result, compute)


def _spmm_empty(call: SpmmCall):
    xp = call.xp
    out = xp.zeros(call.out_shape, dtype=getattr(xp, call.result),
                   device=array_api_compat.device(call.B))
    if call.beta != 0.0:
        out = out + call.beta * _cast(xp, call.c, call.result)
    return out


def _skew(A: BlockSparseMatrix) -> float:
    counts = A.row_counts()
    mean = counts.mean() if counts.size else 0.0
    return float(round(counts.max() / mean, 1)) if mean > 0 else 1.0


def _plan_spmm(call: SpmmCall):
    A = call.A
    n = 1 if call.vector else int(call.B.shape[1])
    P = _costs.panel_rows(call.compute, n)  # the 2D kernel's (CUDA) reuse on A's pattern
    on_gpu = _backend.on_cuda(call.B)
    reuse = _cached(A, ("reuse", P), lambda: round(A.panel_reuse(P), 2)) if on_gpu else 0.0
    opts = {"block": A.block, "nnzb": A.nnz_blocks, "skew": _cached(A, "skew", lambda: _skew(A)),
            "lib": _lib(call.B), "beta": int(call.beta != 0.0), "order": A.order,
            "tile": A.tile, "reuse": reuse}
    return (A.shape, (A.shape[1], n)), call.compute, opts


def _normalise_spmm(shapes, options) -> dict:
    if len(shapes) != 2:
        raise ValueError(f"shapes: spmm takes two shapes (A, B), got {len(shapes)}")
    (m, k), bshape = shapes
    kb, n = bshape if len(bshape) == 2 else (bshape[0], 1)
    if kb != k:
        raise ValueError(f"shapes: B has {kb} rows, A has {k} columns")
    b = int(options.get("block", 16))
    R, C = -(-m // b), -(-k // b)
    nnzb = int(options.get("nnzb", R * C))
    info = {"m": m, "k": k, "n": n, "block": b, "nnzb": nnzb,
            "density": nnzb / (R * C) if R * C else 0.0, "skew": float(options.get("skew", 1.0)),
            "lib": options.get("lib", "numpy"), "beta": int(options.get("beta", 0)),
            "order": options.get("order", "row"), "tile": int(options.get("tile", 0)),
            "reuse": round(float(options.get("reuse", 0.0)), 2), "gpu_tile": 0}
    return info


def _tile_for(problem) -> int:
    if bs_cuda is None or problem.dtype not in KERNEL_CODE:
        return 0
    return bs_cuda.tile_n(KERNEL_CODE[problem.dtype], problem.info["block"], problem.info["n"])


def _spmm_facts(problem) -> dict:
    """What the kernels say: the RHS tile the CUDA SpMM kernel takes here (0: none runs)."""
    return {"gpu_tile": _tile_for(problem) if problem.kind == "cuda" else 0}


def _ours_applies(problem) -> bool:
    if problem.kind == "cpu":
        return bs_cpu is not None
    return problem.info["gpu_tile"] > 0


def _morton_applies(problem) -> bool:
    info = problem.info
    return problem.kind == "cuda" and info["block"] == 16 and info["gpu_tile"] > 0


def _run_morton(call: SpmmCall):
    """The 2D kernel over panels of block rows (CUDA; either order: the steps name storage
    positions, which Morton order keeps together)."""
    bs_cuda.device_check()
    A, xp, cdt = call.A, call.xp, call.compute
    m, k = A.shape
    with _backend.cuda_device_scope(call.B):
        val, B, ldb, n = _cuda_operands(call)
        P = bs_cuda.spmm2d_rows(KERNEL_CODE[cdt], n)
        ptr_h, steps_h, panels = _cached(A, ("steps_host", P), lambda: A.row_steps(P))
        out = _backend.empty_like_lib(B, (m, n), cdt)
        if call.beta != 0.0:
            c = _cast(xp, call.c, cdt)
            out[...] = call.beta * (xp.reshape(c, (m, 1)) if call.vector and c.ndim == 1 else c)
        ptr = _backend.address_getter(B)
        dptr = A._index(f"step_ptr{P}", ptr_h)
        dsteps = A._index(f"steps{P}", steps_h) if steps_h.size else None
        ptrs = (0, 0, 0, ptr(val) if A.nnz_blocks else 0, ptr(B), ptr(out), 0)
        tptrs = (ptr(dptr), ptr(dsteps) if dsteps is not None else 0, 0)
        bs_cuda.spmm2d((m, k, n, A.block), ptrs, (ldb, n), call.alpha, 0.0,
                       int(call.beta != 0.0), P, panels, tptrs, KERNEL_CODE[cdt],
                       _backend.cuda_stream(B))
    return _finish(call, out)


def _finish(call, out):
    xp = call.xp
    if call.vector:
        out = xp.reshape(out, (call.out_shape[0],))
    return _cast(xp, out, call.result)


def _run_dense(call: SpmmCall):
    xp, A = call.xp, call.A
    dense = _cached(A, ("dense", call.compute), lambda: _cast(
        array_api_compat.array_namespace(A.val), A.to_dense(), call.compute))
    B = _cast(xp, call.B, call.compute)
    if _lib(call.B) == "other":  # array-api-strict and the like: the product on the host
        Bh = _backend.to_numpy(B)
        out = np.asarray(dense) @ (Bh[:, None] if call.vector else Bh)
        out = _backend.from_host(call.B, xp, np.ascontiguousarray(out))
    else:
        out = xp.matmul(dense, xp.reshape(B, (B.shape[0], 1)) if call.vector else B)
    if call.alpha != 1.0:
        out = call.alpha * out
    if call.beta != 0.0:
        c = _cast(xp, call.c, call.compute)
        out = out + call.beta * (xp.reshape(c, (-1, 1)) if call.vector and c.ndim == 1 else c)
    return _finish(call, out)


def _run_torch_bsr(call: SpmmCall):
    A = call.A
    bsr = _cached(A, ("torch_bsr", call.compute),
                  lambda: A.astype(getattr(__import__("torch"), call.compute)).to_torch_bsr())
    B = _cast(call.xp, call.B, call.compute)
    out = bsr @ (B.reshape(-1, 1) if call.vector else B)
    if call.alpha != 1.0:
        out = call.alpha * out
    if call.beta != 0.0:
        c = _cast(call.xp, call.c, call.compute)
        out = out + call.beta * (c.reshape(-1, 1) if call.vector and c.ndim == 1 else c)
    return _finish(call, out)


def _torch_bsr_applies(problem) -> bool:
    info = problem.info
    return (problem.kind == "cuda" and info["lib"] == "torch" and info["m"] % info["block"] == 0
            and info["k"] % info["block"] == 0)


def _run_ours(call: SpmmCall):
    return _run_cuda(call) if _backend.on_cuda(call.B) else _run_cpu(call)


def _run_cpu(call: SpmmCall):
    if bs_cpu is None:
        raise RuntimeError("spmm: kronlinalg was built without its block-sparse CPU kernels")
    A, xp, cdt = call.A, call.xp, call.compute
    m, k = A.shape
    val = _cached(A, ("host_val", cdt), lambda: _host_as(A.val, cdt))
    B = _host_as(call.B, cdt)
    if call.vector:
        B = B.reshape(k, 1)
    n = B.shape[1]
    out = np.empty((m, n), dtype=cdt)
    if call.beta != 0.0:
        c = _host_as(call.c, cdt)
        out[...] = c.reshape(m, 1) if call.vector and c.ndim == 1 else c
    rp, cols, perm = A.host_structure()
    addr = _backend.host_address
    ptrs = (addr(rp), addr(cols), addr(perm) if perm is not None else 0,
            addr(val) if val.size else 0, addr(B) if B.size else 0, addr(out), 0)
    bs_cpu.spmm((m, k, n, A.block), ptrs, (max(n, 1), max(n, 1)), call.alpha, call.beta,
                KERNEL_CODE[cdt])
    return _finish(call, _backend.from_host(call.B, xp, out))


def _host_as(a, dtype) -> np.ndarray:
    """A contiguous host array of dtype (the compute dtype: float32/float64) from a CPU array of
    any library (bfloat16 tensors are widened by torch first: NumPy has no bfloat16)."""
    if _backend.is_torch(a) and a.dtype != getattr(__import__("torch"), dtype):
        a = a.to(getattr(__import__("torch"), dtype))
    return np.ascontiguousarray(_backend.to_numpy(a).astype(dtype, copy=False))


def _aligned_rhs(call, B):
    """B as the CUDA kernel reads it: row-major, rows 16-byte aligned (a padded copy if not)."""
    item = np.dtype(call.compute).itemsize if call.compute != "bfloat16" else 2
    k, n = B.shape
    ptr = _backend.address_getter(B)
    size = k * n
    ok = (size == 0 or _backend.is_c_contiguous(B)) and (n * item) % 16 == 0
    if ok and size and ptr(B) % 16 == 0:
        return B, n
    ld = -(-max(n, 1) * item // 16) * 16 // item
    padded = _backend.empty_like_lib(B, (k, ld), call.compute)
    padded[:, :n] = B
    return padded, ld


def _cuda_operands(call):
    """(A's blocks, B as the kernels read it, its leading dimension, n) of a CUDA call."""
    A, xp, cdt = call.A, call.xp, call.compute
    val = _cached(A, ("val", cdt), lambda: _device_val(A, cdt))
    B = _cast(xp, call.B, cdt)
    if call.vector:
        B = xp.reshape(B, (A.shape[1], 1))
    B, ldb = _aligned_rhs(call, B)
    return val, B, ldb, 1 if call.vector else int(call.B.shape[1])


def _device_val(M: BlockSparseMatrix, cdt):
    """M's blocks in cdt, contiguous and 16-byte aligned (the kernels' cp.async loads)."""
    val = _backend.contiguous(_cast(array_api_compat.array_namespace(M.val), M.val, cdt))
    if M.nnz_blocks and _backend.address_getter(val)(val) % 16:
        val = _backend.empty_like_lib(val, tuple(val.shape), cdt)
        val[...] = M.val
    return val



def _run_cuda(call: SpmmCall):
    if bs_cuda is None:
        raise RuntimeError("spmm: got a CUDA array, but kronlinalg was built without CUDA")
    bs_cuda.device_check()
    A, xp, cdt = call.A, call.xp, call.compute
    m, k = A.shape
    with _backend.cuda_device_scope(call.B):
        val, B, ldb, n = _cuda_operands(call)
        items, split = _cached(A, "items_host", lambda: A.work_items(_SPLIT_MIN))
        items_dev = A._index("items", items)
        out = _backend.empty_like_lib(B, (m, n), cdt)
        if call.beta != 0.0 or split:
            if call.beta != 0.0:
                c = _cast(xp, call.c, cdt)
                out[...] = call.beta * (xp.reshape(c, (m, 1)) if call.vector and c.ndim == 1
                                        else c)
            else:
                out[...] = 0
        rp, cols, perm = A.host_structure()
        ptr = _backend.address_getter(B)
        dev_rp = A._index("row_ptr", rp)
        dev_cols = A._index("cols_row_order", cols)
        dev_perm = A._index("row_perm", perm) if perm is not None else None
        ptrs = (ptr(dev_rp), ptr(dev_cols), ptr(dev_perm) if dev_perm is not None else 0,
                ptr(val) if A.nnz_blocks else 0, ptr(B), ptr(out), ptr(items_dev))
        accumulate = int(call.beta != 0.0 or split)
        bs_cuda.spmm((m, k, n, A.block), ptrs, (ldb, n), call.alpha,
                     0.0 if accumulate else call.beta, items.size // 3, accumulate,
                     KERNEL_CODE[cdt], _backend.cuda_stream(B))
    return _finish(call, out)


# ---------------------------------------------------------------------------------------------
# the per-call fast path: a call on a matrix seen before (its serial) with a right-hand side of
# the same signature (library, shape, strides, dtype, device) and beta = 0 goes straight to the
# launch with the pointers the first call found (the full path costs tens of microseconds of
# Python, as much as the kernel at N = 4096).


def _spmm_signature(arrays, options, algorithm):
    if len(arrays) != 2 or type(arrays[0]) is not BlockSparseMatrix:
        return None
    if options.get("c") is not None or options.get("beta", 0.0) != 0.0:
        return None
    if type(options.get("alpha", 1.0)) not in (float, int):
        return None
    sig = arrays_signature(arrays[1:], True)  # (the key the compiled front builds too)
    return None if sig is None else (arrays[0]._serial, sig[0], algorithm)


def _replayable(call) -> bool:
    return (call.beta == 0.0 and not call.vector and call.result == call.compute
            and _backend.dtype_name(call.B.dtype) == call.compute
            and _lib(call.B) in ("numpy", "cupy", "torch"))


def _replay_ours(call):
    out = _run_ours(call)
    if not _replayable(call):
        return out, None
    A, B, cdt = call.A, call.B, call.compute
    (m, k), n = A.shape, int(B.shape[1])
    dims, code = (m, k, n, A.block), KERNEL_CODE[cdt]
    rp, cols, perm = A.host_structure()
    if not _backend.on_cuda(B):
        if not B.flags.c_contiguous:
            return out, None
        val = A._cache[("host_val", cdt)]
        addr = _backend.host_address
        fixed = (addr(rp), addr(cols), addr(perm) if perm is not None else 0,
                 addr(val) if val.size else 0)

        def replay_cpu(A_, B_, /, *, alpha=1.0, beta=0.0, c=None):
            o = np.empty((m, n), dtype=cdt)
            bs_cpu.spmm(dims, fixed + (addr(B_) if B_.size else 0, addr(o), 0),
                        (max(n, 1), max(n, 1)), float(alpha), 0.0, code)
            return o

        return out, replay_cpu
    items, split = A._cache["items_host"]
    item = 2 if cdt in ("float16", "bfloat16") else np.dtype(cdt).itemsize
    if split or not _backend.is_c_contiguous(B) or (n * item) % 16:
        return out, None
    ptr = _backend.address_getter(B)
    dev = A._dev
    fixed = (ptr(dev["row_ptr"]), ptr(dev["cols_row_order"]),
             ptr(dev["row_perm"]) if perm is not None else 0,
             ptr(A._cache[("val", cdt)]) if A.nnz_blocks else 0)
    items_ptr, nitems = ptr(dev["items"]), items.size // 3

    def replay_cuda(A_, B_, /, *, alpha=1.0, beta=0.0, c=None):
        pb = ptr(B_)
        if pb % 16:
            return None
        with _backend.cuda_device_scope(B_):
            o = _backend.empty_like_lib(B_, (m, n), cdt)
            bs_cuda.spmm(dims, fixed + (pb, ptr(o), items_ptr), (n, n), float(alpha), 0.0,
                         nitems, 0, code, _backend.cuda_stream(B_))
        return o

    return out, replay_cuda


def _replay_dense(call):
    out = _run_dense(call)
    if not _replayable(call):
        return out, None
    dense = call.A._cache[("dense", call.compute)]

    def replay_dense(A_, B_, /, *, alpha=1.0, beta=0.0, c=None):
        o = dense @ B_
        return o if alpha == 1 else alpha * o

    return out, replay_dense


_SPMM = Operation("spmm", prepare=_prepare_spmm, plan_query=_plan_spmm,
                  normalise=_normalise_spmm, empty=_spmm_empty, signature=_spmm_signature,
                  facts=_spmm_facts,
                  options=("block", "nnzb", "skew", "lib", "beta", "order", "tile", "reuse"),
                  doc="alpha * A @ B + beta * c, A block-sparse; shapes: A, B")
_SPMM.register(Algorithm("blocksparse", _run_ours, _costs.predict_spmm_ours,
                         devices=("cpu", "cuda"),
                         applies=_ours_applies, replay=_replay_ours,
                         doc="our kernels (C++ on the CPU; CUDA: a CTA or warp per block row)"))
_SPMM.register(Algorithm("dense", _run_dense, _costs.predict_spmm_dense, devices=("cpu", "cuda"),
                         autograd=("autograd",), replay=_replay_dense,
                         doc="the library's GEMM on the densified matrix"))
_SPMM.register(Algorithm("torch_bsr", _run_torch_bsr, _costs.predict_spmm_torch_bsr,
                         devices=("cuda",), applies=_torch_bsr_applies,
                         doc="torch's sparse BSR matmul (cuSPARSE bsrmm)"))
_SPMM.register(Algorithm("morton", _run_morton, _costs.predict_spmm_morton, devices=("cuda",),
                         applies=_morton_applies,
                         doc="2D kernel over panels of block rows (B rows staged once per panel)"))
_SPMM.grad_algorithm = "dense"
_FRONT = ScaledFront(_SPMM, _SPMM.fast_cache, True, False)  # (NumPy and device arrays)


def spmm(A, B, /, *, alpha=1.0, beta=0.0, c=None, algorithm="auto"):
    """``alpha * A @ B + beta * c`` for a block-sparse A and a dense B.

    Parameters
    ----------
    A : BlockSparseMatrix
        m x k, any order ("row" or "morton").
    B : array
        k x n or (k,), of A's array library and device.
    alpha, beta : float
        Scales; ``beta`` needs ``c``, which must broadcast to the result (it is not modified).
    algorithm : {"auto", "blocksparse", "morton", "dense", "torch_bsr"}
        "auto" asks the planner (dense GEMM where that is predicted faster).

    Returns
    -------
    array of B's library and device, m x n (or (m,)), in the promoted dtype (float16/bfloat16:
    float32 accumulation).
    """
    return operand_call(_FRONT, A, B, alpha, beta, c, algorithm)


# ---------------------------------------------------------------------------------------------
# spgemm


@dataclass
class SpgemmCall(Call):
    A: BlockSparseMatrix = None
    B: BlockSparseMatrix = None
    result: str = "float64"
    compute: str = "float64"


def _prepare_spgemm(A, B, /) -> SpgemmCall:
    for name, v in (("A", A), ("B", B)):
        if not isinstance(v, BlockSparseMatrix):
            raise TypeError(f"{name}: expected a BlockSparseMatrix, got {type(v).__name__}")
    named = {"A.val": A.val, "B.val": B.val}
    xp = _validation.namespace_of(named)
    _validation.same_device(named)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"B: expected {A.shape[1]} rows (A is {A.shape[0]} x {A.shape[1]}), got "
                         f"shape {B.shape}")
    if A.block != B.block:
        raise ValueError(f"B: block size {B.block} differs from A's {A.block}")
    result = _promote([_backend.dtype_name(A.dtype), _backend.dtype_name(B.dtype)])
    compute = result if _backend.on_cuda(A.val) else _backend.kernel_dtype(result)
    return SpgemmCall(xp, A.val, (A.val, B.val), False, A, B, result, compute)


def _plan_spgemm(call: SpgemmCall):
    A, B = call.A, call.B
    return (A.shape, B.shape), call.compute, {
        "block": A.block, "nnz_a": A.nnz_blocks, "nnz_b": B.nnz_blocks,
        "lib": _lib(A.val)}


def _normalise_spgemm(shapes, options) -> dict:
    if len(shapes) != 2:
        raise ValueError(f"shapes: spgemm takes two shapes (A, B), got {len(shapes)}")
    (m, k), (k2, n) = shapes
    if k != k2:
        raise ValueError(f"shapes: B has {k2} rows, A has {k} columns")
    b = int(options.get("block", 16))
    R, K, C = -(-m // b), -(-k // b), -(-n // b)
    na, nb = int(options.get("nnz_a", R * K)), int(options.get("nnz_b", K * C))
    da = na / (R * K) if R * K else 0.0
    db = nb / (K * C) if K * C else 0.0
    out_density = 1.0 - (1.0 - da * db) ** K if K else 0.0  # random patterns
    return {"m": m, "k": k, "n": n, "block": b, "pairs": na * db * C,
            "nnz_out": out_density * R * C, "a_row_mean": na / R if R else 0.0,
            "lib": options.get("lib", "numpy")}


def _spgemm_ours_applies(problem) -> bool:
    if problem.kind == "cpu":
        return bs_cpu is not None
    return bs_cuda is not None and problem.info["block"] in (16, 32)


def symbolic(A, B, /):
    """The block pattern of A @ B: (row_ptr, col_idx) arrays of A's library and device, sorted
    column lists (the symbolic phase of spgemm; no values are computed)."""
    call = _prepare_spgemm(A, B)
    return _symbolic(call)[:2]


def _structure(M: BlockSparseMatrix, cuda: bool):
    rp, cols, perm = M.host_structure()
    if not cuda:
        return rp, cols, perm
    return (M._index("row_ptr", rp), M._index("cols_row_order", cols),
            M._index("row_perm", perm) if perm is not None else None)


def _symbolic(call: SpgemmCall):
    A, B = call.A, call.B
    cuda = _backend.on_cuda(A.val)
    R, C = A.block_grid[0], B.block_grid[1]
    arp, acol, _ = _structure(A, cuda)
    brp, bcol, _ = _structure(B, cuda)
    if not cuda:
        addr = _backend.host_address
        counts = np.empty(R, dtype=np.int64)
        base = [addr(arp), addr(acol) if acol.size else 0, 0, 0, addr(brp),
                addr(bcol) if bcol.size else 0, 0, 0, addr(counts) if R else 0, 0, 0, 0, 0]
        bs_cpu.spgemm((R, C, A.block, 0), tuple(base), 0, 1)
        rp = np.zeros(R + 1, dtype=np.int64)
        np.cumsum(counts, out=rp[1:])
        col = np.empty(int(rp[-1]), dtype=np.int64)
        base[9], base[10] = addr(rp), addr(col) if col.size else 0
        bs_cpu.spgemm((R, C, A.block, 0), tuple(base), 1, 1)
        return rp, col, base
    bs_cuda.device_check()
    xp = array_api_compat.array_namespace(A.val)
    dev = array_api_compat.device(A.val)
    ptr = _backend.address_getter(A.val)
    stream = _backend.cuda_stream(A.val)
    with _backend.cuda_device_scope(A.val):
        counts = xp.empty((R,), dtype=xp.int64, device=dev)
        base = [ptr(arp), ptr(acol) if A.nnz_blocks else 0, 0, 0, ptr(brp),
                ptr(bcol) if B.nnz_blocks else 0, 0, 0, ptr(counts) if R else 0, 0, 0, 0, 0]
        bs_cuda.spgemm((R, C, A.block, 0), tuple(base), 0, 1, stream)
        rp = xp.zeros((R + 1,), dtype=xp.int64, device=dev)
        if R:  # (array-api-compat's torch namespace has no one-argument cumsum)
            rp[1:] = (counts.cumsum(0) if _backend.is_torch(counts) else xp.cumsum(counts))
        nnz = int(rp[-1])
        col = xp.empty((max(nnz, 1),), dtype=xp.int64, device=dev)
        base[9], base[10] = ptr(rp), ptr(col)
        bs_cuda.spgemm((R, C, A.block, nnz), tuple(base), 1, 1, stream)
    return rp, col[:nnz], base


def _run_spgemm_ours(call: SpgemmCall):
    A, B, cdt = call.A, call.B, call.compute
    cuda = _backend.on_cuda(A.val)
    rp, col, base = _symbolic(call)
    b = A.block
    R, C = A.block_grid[0], B.block_grid[1]
    m, n = A.shape[0], B.shape[1]
    _, _, aperm = _structure(A, cuda)
    _, _, bperm = _structure(B, cuda)
    if not cuda:
        addr = _backend.host_address
        av = _host_as(A.val, cdt)
        bv = _host_as(B.val, cdt)
        nnz = int(rp[-1])
        val = np.empty((nnz, b, b), dtype=cdt)
        base[2] = addr(aperm) if aperm is not None else 0
        base[6] = addr(bperm) if bperm is not None else 0
        base[3] = addr(av) if av.size else 0
        base[7] = addr(bv) if bv.size else 0
        base[12] = addr(val) if val.size else 0
        bs_cpu.spgemm((R, C, b, nnz), tuple(base), 2, KERNEL_CODE[cdt])
        val = _backend.from_host(A.val, array_api_compat.array_namespace(A.val), val)
        rows = np.repeat(np.arange(R, dtype=np.int64), np.diff(rp))
        out = BlockSparseMatrix._from_coords(val, rows, col, (m, n), b)
    else:
        xp = array_api_compat.array_namespace(A.val)
        dev = array_api_compat.device(A.val)
        ptr = _backend.address_getter(A.val)
        nnz = int(col.shape[0])
        with _backend.cuda_device_scope(A.val):
            av = _device_val(A, cdt)
            bv = _device_val(B, cdt)
            val = _backend.empty_like_lib(A.val, (nnz, b, b), cdt)
            crow = xp.searchsorted(rp, xp.arange(nnz, dtype=xp.int64, device=dev),
                                   side="right") - 1
            base[2] = ptr(aperm) if aperm is not None else 0
            base[6] = ptr(bperm) if bperm is not None else 0
            base[3] = ptr(av) if A.nnz_blocks else 0
            base[7] = ptr(bv) if B.nnz_blocks else 0
            base[11] = ptr(crow) if nnz else 0
            base[12] = ptr(val) if nnz else 0
            bs_cuda.spgemm((R, C, b, nnz), tuple(base), 2, KERNEL_CODE[cdt],
                           _backend.cuda_stream(A.val))
        hrp = _host(rp)
        rows = np.repeat(np.arange(R, dtype=np.int64), np.diff(hrp))
        out = BlockSparseMatrix._from_coords(val, rows, _host(col), (m, n), b)
    return out if cdt == call.result else out.astype(getattr(call.xp, call.result))


def _run_spgemm_dense(call: SpgemmCall):
    A, B = call.A, call.B
    xp = array_api_compat.array_namespace(A.val)
    dense = lambda M: _cached(M, ("dense", call.compute),  # noqa: E731 (shared with spmm)
                              lambda: _cast(xp, M.to_dense(), call.compute))
    da, db = dense(A), dense(B)
    out = BlockSparseMatrix.from_dense(xp.matmul(da, db), block=A.block)
    return out if call.compute == call.result else out.astype(getattr(xp, call.result))


_SPGEMM = Operation("spgemm", prepare=_prepare_spgemm, plan_query=_plan_spgemm,
                    normalise=_normalise_spgemm, empty=lambda call: None,  # never empty
                    options=("block", "nnz_a", "nnz_b", "lib"),
                    doc="A @ B of two block-sparse matrices; shapes: A, B")
_SPGEMM.register(Algorithm("blocksparse", _run_spgemm_ours, _costs.predict_spgemm_ours,
                           devices=("cpu", "cuda"), applies=_spgemm_ours_applies,
                           doc="symbolic (count, scan, sorted columns) then numeric"))
_SPGEMM.register(Algorithm("dense", _run_spgemm_dense, _costs.predict_spgemm_dense,
                           devices=("cpu", "cuda"),
                           doc="densify, GEMM, blockify (all-zero blocks dropped)"))
_SPGEMM.grad_algorithm = "dense"


def spgemm(A, B, /, *, algorithm="auto"):
    """``A @ B`` of two block-sparse matrices of one block size, as a BlockSparseMatrix (row
    order).  "blocksparse" stores exactly the symbolic product's blocks (a block whose
    products cancel is kept, as zeros); "dense" keeps the blocks with a nonzero entry."""
    return _SPGEMM(A, B, algorithm=algorithm)


BlockSparseMatrix._spmm, BlockSparseMatrix._spgemm = staticmethod(spmm), staticmethod(spgemm)
