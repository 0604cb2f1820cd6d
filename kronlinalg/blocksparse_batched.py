"""Batched small block-sparse products: a stack of block-sparse matrices that share one block
pattern (pruned attention or MLP weights, one per head or layer) times a stack of dense
right-hand sides, ``C[i] = alpha * A[i] @ X[i]``.

    >>> import numpy as np, kronlinalg
    >>> a = np.zeros((3, 32, 32)); a[:, :16, 16:] = 1.0; a[1, 16:, :16] = 2.0
    >>> A = kronlinalg.BatchedBlockSparseMatrix.from_dense(a)
    >>> A.shape, A.nnz_blocks
    ((3, 32, 32), 2)
    >>> x = np.ones((3, 32, 4))
    >>> bool(np.allclose(kronlinalg.spmm_batched(A, x), a @ x))
    True

Algorithms (the planner ranks them; ``algorithm=`` forces one):

- "blocksparse": CUDA, FP16/BF16, 16 x 16 blocks, orders up to 256: a persistent CTA walks
  (matrix, RHS tile) units, copying each unit's stored blocks and X slice into shared memory
  while it multiplies the previous one on tensor cores (kernels/blocksparse/
  blocksparse_batched_cuda.cu).
- "blocksparse" on the CPU: the C++ SpMM kernel over the stack as one block-diagonal matrix
  (orders divisible by b; OpenMP over block rows).
- "gather": any device and dtype, the caller's library: each stored block meets its X block
  row (one gather), one batched matmul over the blocks, one matmul with the 0/1 row map sums
  each block row (half precision computed in float32).
- "dense": the stack densified once (kept on the matrix) and the library's batched matmul.

Stacks whose patterns differ are one block-diagonal :class:`BlockSparseMatrix` (matrix i's
blocks offset by i block rows and columns) and one ``spmm``.
"""

from __future__ import annotations

from dataclasses import dataclass

import array_api_compat
import numpy as np

from ._ext import load
from ._operation import Algorithm, Call, Operation
from .block_sparse_matrix import (BlockSparseMatrix, StoredBlocks, _block_arg, _host, _lib, _like,
                                  _zero_padding)
from .common import backend as _backend, validation as _validation
from .common.dtypes import KERNEL_CODE
from .planner.costs import blocksparse as _costs

__all__ = ["BatchedBlockSparseMatrix", "spmm_batched"]

bs_cpu, bs_cuda = load("blocksparse_cpu"), load("blocksparse_cuda")
_SERIAL = iter(range(1 << 62))


class BatchedBlockSparseMatrix(StoredBlocks):
    """A stack of ``batch`` block-sparse m × n matrices with one block pattern.

    ``val`` (batch, nnz_blocks, b, b) holds matrix i's blocks in ``val[i]``, in the order of
    the pattern ``row_ptr`` (R + 1) / ``col_idx`` (nnz_blocks): row order, block columns strictly
    increasing within a block row (as :class:`BlockSparseMatrix`'s row order; b in 8, 16, 32, 64).
    Edge blocks of shapes not divisible by b are zero-padded (a copy zeroes a caller's nonzero
    padding).  ``val`` is read-only for the products (they keep derived forms on the matrix).
    """

    __array_priority__ = 100

    def __init__(self, val, row_ptr, col_idx, /, *, shape):
        named = {"val": val, "row_ptr": row_ptr, "col_idx": col_idx}
        _validation.namespace_of(named)
        _validation.same_device(named)
        _validation.float_dtype("val", val)
        if val.ndim != 4 or val.shape[2] != val.shape[3]:
            raise ValueError(f"val: expected shape (batch, nnz_blocks, b, b), got "
                             f"{tuple(val.shape)}")
        b = int(val.shape[2])
        batch, nnzb = int(val.shape[0]), int(val.shape[1])
        try:
            m, n = (int(s) for s in shape)
        except (TypeError, ValueError):
            raise TypeError(f"shape: expected two integers (m, n) of one matrix, got "
                            f"{shape!r}") from None
        # the pattern is checked by BlockSparseMatrix's constructor on a host stand-in
        pattern = BlockSparseMatrix(np.zeros((nnzb, b, b), dtype=np.float32), _host(row_ptr),
                                    _host(col_idx), shape=(m, n))
        self._pattern = pattern
        if _lib(val) == "other":
            val = _host(val)
        rows, cols = pattern._rows, pattern._cols
        self._val = _zero_padding(val, m, n, b, rows, cols) if batch else val
        self._shape = (batch, m, n)
        self._b = b
        self._dev = {}
        self._cache = {}
        self._serial = next(_SERIAL)

    # -- properties ------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple:
        """(batch, m, n)."""
        return self._shape

    @property
    def batch(self) -> int:
        return self._shape[0]

    @property
    def nnz_blocks(self) -> int:
        """Stored blocks of each matrix."""
        return int(self._val.shape[1])

    @property
    def block_grid(self) -> tuple:
        return self._pattern.block_grid

    @property
    def density(self) -> float:
        return self._pattern.density

    @property
    def row_ptr(self):
        return self._index("row_ptr", self._pattern._row_ptr)

    @property
    def col_idx(self):
        return self._index("col_idx", self._pattern._cols)

    def __repr__(self):
        return (f"BatchedBlockSparseMatrix(shape={self._shape}, block={self._b}, "
                f"nnz_blocks={self.nnz_blocks}, dtype={_backend.dtype_name(self.dtype)})")

    # -- conversions --------------------------------------------------------------------------

    def matrix(self, i: int) -> BlockSparseMatrix:
        """Matrix i as a BlockSparseMatrix (its blocks are a view of val[i] where the library
        makes one)."""
        i = _validation.count("i", i)
        if i >= self.batch:
            raise ValueError(f"i: expected an index below the batch {self.batch}, got {i}")
        p = self._pattern
        return BlockSparseMatrix._from_coords(self._val[i], p._rows, p._cols, self._shape[1:],
                                              self._b)

    def to_dense(self):
        """The stack as a dense (batch, m, n) array of val's library, device and dtype."""
        batch, m, n = self._shape
        b = self._b
        R, C = self.block_grid
        val = self._val
        xp = array_api_compat.array_namespace(val)
        grid = xp.zeros((batch, R, C, b, b), dtype=val.dtype, device=array_api_compat.device(val))
        if self.nnz_blocks and batch:
            p = self._pattern
            grid[:, self._index("rows", p._rows), self._index("col_idx", p._cols)] = val
        dense = xp.reshape(xp.permute_dims(grid, (0, 1, 3, 2, 4)), (batch, R * b, C * b))
        return dense[:, :m, :n]

    @classmethod
    def from_dense(cls, a, /, *, block=16):
        """Blocks of a (batch, m, n) array where any matrix of the stack holds a nonzero entry
        (the union of the matrices' patterns: the others store that block as zeros)."""
        b = _block_arg(block)
        xp = _validation.namespace_of({"a": a})
        _validation.float_dtype("a", a)
        if a.ndim != 3:
            raise ValueError(f"a: expected a 3-D array (batch, m, n), got shape {tuple(a.shape)}")
        if _lib(a) == "other":
            host = cls.from_dense(_host(a), block=b)
            p = host._pattern
            return cls(_like(a, host._val), _like(a, p._row_ptr), _like(a, p._cols),
                       shape=host.shape[1:])
        batch, m, n = (int(s) for s in a.shape)
        R, C = -(-m // b), -(-n // b)
        dev = array_api_compat.device(a)
        padded = a
        if (R * b, C * b) != (m, n):
            padded = xp.zeros((batch, R * b, C * b), dtype=a.dtype, device=dev)
            padded[:, :m, :n] = a
        blocked = xp.reshape(padded, (batch, R, b, C, b))
        mask = xp.any(blocked != 0, axis=(0, 2, 4))
        rows, cols = (_host(v).astype(np.int64) for v in xp.nonzero(mask))
        grid = xp.permute_dims(blocked, (0, 1, 3, 2, 4))
        val = (grid[:, _like(a, rows), _like(a, cols)] if rows.size
               else xp.zeros((batch, 0, b, b), dtype=a.dtype, device=dev))
        rp = np.zeros(R + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=R), out=rp[1:])
        return cls(_backend.contiguous(val), _like(a, rp), _like(a, cols), shape=(m, n))

    def __matmul__(self, other):
        return spmm_batched(self, other)


# ---------------------------------------------------------------------------------------------
# spmm_batched


@dataclass
class BatchedCall(Call):
    A: BatchedBlockSparseMatrix = None
    X: object = None
    alpha: float = 1.0
    result: str = "float64"


def _cast(xp, a, name):
    return a if _backend.dtype_name(a.dtype) == name else xp.astype(a, getattr(xp, name))


def _promote(names) -> str:
    return names[0] if len(set(names)) == 1 else "float64" if "float64" in names else "float32"


def _prepare(A, X, /, *, alpha=1.0) -> BatchedCall:
    if not isinstance(A, BatchedBlockSparseMatrix):
        raise TypeError(f"A: expected a BatchedBlockSparseMatrix, got {type(A).__name__}")
    xp = _validation.namespace_of({"X": X})
    lv, lx = _lib(A.val), _lib(X)
    if lv != lx and not (lv == "numpy" and lx == "other"):
        raise TypeError(f"X: array from {lx}, but A's blocks are {lv} arrays; all arrays must "
                        "come from one library")
    if lx != "other":
        _validation.same_device({"A.val": A.val, "X": X})
    _validation.float_dtype("X", X)
    alpha = _validation.scalar("alpha", alpha)
    batch, m, k = A.shape
    if X.ndim != 3 or int(X.shape[0]) != batch or int(X.shape[1]) != k:
        raise ValueError(f"X: expected shape ({batch}, {k}, n) (A is {A.shape}), got "
                         f"{tuple(X.shape)}")
    result = _promote([_backend.dtype_name(A.dtype), _backend.dtype_name(X.dtype)])
    empty = batch == 0 or m == 0 or int(X.shape[2]) == 0
    return BatchedCall(xp, X, (A.val, X), empty, A, X, alpha, result)


def _empty(call: BatchedCall):
    xp = call.xp
    batch, m, _ = call.A.shape
    return xp.zeros((batch, m, int(call.X.shape[2])), dtype=getattr(xp, call.result),
                    device=array_api_compat.device(call.X))


def _plan_query(call: BatchedCall):
    A = call.A
    batch, m, k = A.shape
    dtype = call.result if _backend.on_cuda(call.X) else _backend.kernel_dtype(call.result)
    return ((batch, m, k), (batch, k, int(call.X.shape[2]))), dtype, {
        "block": A.block, "nnzb": A.nnz_blocks, "lib": _lib(call.X)}


def _normalise(shapes, options) -> dict:
    if len(shapes) != 2 or len(shapes[0]) != 3 or len(shapes[1]) != 3:
        raise ValueError("shapes: spmm_batched takes two 3-D shapes, (batch, m, k) and "
                         "(batch, k, n)")
    (batch, m, k), (batch2, k2, n) = shapes
    if (batch2, k2) != (batch, k):
        raise ValueError(f"shapes: X is {shapes[1]}, A is {shapes[0]}")
    b = int(options.get("block", 16))
    R, C = -(-m // b), -(-k // b)
    nnzb = int(options.get("nnzb", R * C))
    return {"batch": batch, "m": m, "k": k, "n": n, "block": b, "nnzb": nnzb,
            "density": nnzb / (R * C) if R * C else 0.0, "lib": options.get("lib", "numpy"),
            "gpu_tile": 0}


def _kernel_cols(code, m, k, n, nnzb) -> tuple:
    """(RHS tile, columns) of the batched CUDA kernel for n right-hand sides: it takes n = 4
    itself on its 8-column tile (always: kernels/blocksparse's g_narrow), else a multiple of 8;
    other n are padded up to those."""
    if n <= 4:
        tile = bs_cuda.batched_tile_n(code, m, k, 4, nnzb)
        if tile == 8:
            return tile, 4
    n8 = -(-n // 8) * 8
    return bs_cuda.batched_tile_n(code, m, k, n8, nnzb), n8


def _facts(problem) -> dict:
    """The RHS tile the batched CUDA kernel takes (0: it does not run this problem) and the
    columns it computes (n padded)."""
    i = problem.info
    if (problem.kind != "cuda" or bs_cuda is None or i["block"] != 16
            or problem.dtype not in KERNEL_CODE):
        return {"gpu_tile": 0}
    tile, cols = _kernel_cols(KERNEL_CODE[problem.dtype], i["m"], i["k"], i["n"], i["nnzb"])
    return {"gpu_tile": tile, "gpu_cols": cols}


def _kernel_applies(problem) -> bool:
    return problem.kind == "cuda" and problem.info["gpu_tile"] > 0


def _run_kernel(call: BatchedCall):
    bs_cuda.device_check()
    A, xp, cdt = call.A, call.xp, call.result
    batch, m, k = A.shape
    n = int(call.X.shape[2])
    n8 = _kernel_cols(KERNEL_CODE[cdt], m, k, n, A.nnz_blocks)[1]
    with _backend.cuda_device_scope(call.X):
        val = _cached(A, ("val", cdt), lambda: _device_val(A, cdt))
        X = _cast(xp, call.X, cdt)
        ptr = _backend.address_getter(X)
        if n8 != n or not _backend.is_c_contiguous(X) or ptr(X) % 16:
            Xp = xp.zeros((batch, k, n8), dtype=getattr(xp, cdt), device=array_api_compat.device(X))
            Xp[:, :, :n] = X
            X = Xp
        out = _backend.empty_like_lib(X, (batch, m, n8), cdt)
        ptrs = (ptr(A.row_ptr), ptr(A.col_idx), ptr(val) if A.nnz_blocks else 0, ptr(X),
                ptr(out))
        bs_cuda.batched((batch, m, k, n8, A.nnz_blocks), ptrs, (n8, k * n8, n8, m * n8),
                        call.alpha, KERNEL_CODE[cdt], _backend.cuda_stream(X))
    return out if n8 == n else out[:, :, :n]


def _run_ours(call: BatchedCall):
    return _run_kernel(call) if _backend.on_cuda(call.X) else _run_cpu(call)


def _cpu_applies(problem) -> bool:
    i = problem.info
    return bs_cpu is not None and i["m"] % i["block"] == 0 and i["k"] % i["block"] == 0


def _ours_applies(problem) -> bool:
    return _kernel_applies(problem) if problem.kind == "cuda" else _cpu_applies(problem)


def _run_cpu(call: BatchedCall):
    """The C++ SpMM over the stack as one block-diagonal matrix: matrix i's block rows and
    columns offset by i (m and k divisible by b, so X and C stack without gaps)."""
    A = call.A
    cdt = _backend.kernel_dtype(call.result)
    batch, m, k = A.shape
    n, b = int(call.X.shape[2]), A.block
    val = _cached(A, ("host_val", cdt), lambda: _host_float(A.val, cdt).reshape(-1, b, b))
    rp, cols = _cached(A, "block_diagonal", lambda: _block_diagonal(A))
    X = _host_float(call.X, cdt).reshape(batch * k, n)
    out = np.empty((batch * m, n), dtype=cdt)
    addr = _backend.host_address
    ptrs = (addr(rp), addr(cols) if cols.size else 0, 0, addr(val) if val.size else 0,
            addr(X) if X.size else 0, addr(out), 0)
    bs_cpu.spmm((batch * m, batch * k, n, b), ptrs, (max(n, 1), max(n, 1)), call.alpha, 0.0,
                KERNEL_CODE[cdt])
    out = out.reshape(batch, m, n)
    if _lib(call.X) != "numpy":
        out = _backend.from_host(call.X, call.xp, out)
    return _cast(call.xp, out, call.result)


def _host_float(a, dtype) -> np.ndarray:
    """A contiguous host array of dtype (float32/float64) from a CPU array of any library
    (bfloat16 tensors are widened by torch first: NumPy has no bfloat16)."""
    if _backend.is_torch(a) and a.dtype != getattr(__import__("torch"), dtype):
        a = a.to(getattr(__import__("torch"), dtype))
    return np.ascontiguousarray(_backend.to_numpy(a).astype(dtype, copy=False))


def _block_diagonal(A) -> tuple:
    """(row_ptr, col_idx) of the block-diagonal matrix of the stack (host int64)."""
    p = A._pattern
    R, C = A.block_grid
    nnzb = A.nnz_blocks
    offsets = np.arange(A.batch, dtype=np.int64)
    rp = np.concatenate([(p._row_ptr[:-1][None, :] + nnzb * offsets[:, None]).ravel(),
                         [A.batch * nnzb]]).astype(np.int64)
    cols = (p._cols[None, :] + C * offsets[:, None]).ravel()
    return np.ascontiguousarray(rp), np.ascontiguousarray(cols, dtype=np.int64)



def _device_val(A, cdt):
    """A's blocks in cdt, contiguous and 16-byte aligned (the kernel's cp.async copies)."""
    val = _backend.contiguous(_cast(array_api_compat.array_namespace(A.val), A.val, cdt))
    if A.nnz_blocks and A.batch and _backend.address_getter(val)(val) % 16:
        fresh = _backend.empty_like_lib(val, tuple(val.shape), cdt)
        fresh[...] = val
        val = fresh
    return val


def _cached(A, key, make):
    hit = A._cache.get(key)
    if hit is None:
        hit = A._cache[key] = make()
    return hit


def _wide(dtype: str) -> str:
    """float16/bfloat16 are computed in float32 by the library paths (FP32 accumulation)."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def _lib_xp(call):
    """The namespace the library paths compute in (array-api-strict and the like: NumPy)."""
    return array_api_compat.array_namespace(call.A.val)


def _lib_x(call, cdt):
    X = call.X
    if _lib(X) == "other":
        X = _backend.to_numpy(X)
    return _cast(_lib_xp(call), X, cdt)


def _finish(call, out):
    out = _cast(_lib_xp(call), out, call.result)
    if _lib(call.X) == "other":
        return _backend.from_host(call.X, call.xp, np.ascontiguousarray(out))
    return out


def _run_gather(call: BatchedCall):
    """Every stored block times its X block row (one gather, one batched matmul), then the
    0/1 map of blocks to block rows sums each block row (one matmul)."""
    A, xp = call.A, _lib_xp(call)
    cdt = _wide(call.result)
    batch, m, k = A.shape
    b, (R, C), nnzb = A.block, A.block_grid, A.nnz_blocks
    n = int(call.X.shape[2])
    X = _lib_x(call, cdt)
    dev = array_api_compat.device(A.val)
    if C * b != k:
        Xp = xp.zeros((batch, C * b, n), dtype=X.dtype, device=dev)
        Xp[:, :k, :] = X
        X = Xp
    val = _cached(A, ("val", cdt), lambda: _cast(xp, A.val, cdt))
    cols = A._index("col_idx", A._pattern._cols)
    parts = xp.matmul(val, xp.take(xp.reshape(X, (batch, C, b, n)), cols, axis=1))
    row_map = _cached(A, ("row_map", cdt), lambda: _row_map(A, xp, cdt))
    out = xp.matmul(row_map, xp.reshape(parts, (batch, nnzb, b * n)))
    out = xp.reshape(out, (batch, R * b, n))[:, :m, :]
    if call.alpha != 1.0:
        out = call.alpha * out
    return _finish(call, out)


def _row_map(A, xp, cdt):
    R = A.block_grid[0]
    host = np.zeros((R, A.nnz_blocks), dtype=cdt)
    host[A._pattern._rows, np.arange(A.nnz_blocks)] = 1
    return A._index(("row_map", cdt), host)


def _run_dense(call: BatchedCall):
    A, xp = call.A, _lib_xp(call)
    cdt = call.result if _backend.on_cuda(call.X) else _backend.kernel_dtype(call.result)
    dense = _cached(A, ("dense", cdt), lambda: _cast(xp, A.to_dense(), cdt))
    out = xp.matmul(dense, _lib_x(call, cdt))
    if call.alpha != 1.0:
        out = call.alpha * out
    return _finish(call, out)


# the fast path: a call on a matrix seen before with X of the same signature goes straight to
# the launch (the full path costs tens of microseconds of Python, as much as the kernel)


def _signature(arrays, options, algorithm):
    if len(arrays) != 2 or type(arrays[0]) is not BatchedBlockSparseMatrix:
        return None
    if type(options.get("alpha", 1.0)) not in (float, int):
        return None
    key = _backend.cuda_array_key(arrays[1])
    return None if key is None else (arrays[0]._serial, key, algorithm)


def _replay_ours(call: BatchedCall):
    if not _backend.on_cuda(call.X):
        return _run_cpu(call), None
    out = _run_kernel(call)
    A, X, cdt = call.A, call.X, call.result
    batch, m, k = A.shape
    n = int(X.shape[2])
    ptr = _backend.address_getter(X)
    if (_backend.dtype_name(X.dtype) != cdt or not _backend.is_c_contiguous(X)
            or _kernel_cols(KERNEL_CODE[cdt], m, k, n, A.nnz_blocks)[1] != n):
        return out, None
    fixed = (ptr(A.row_ptr), ptr(A.col_idx),
             ptr(A._cache[("val", cdt)]) if A.nnz_blocks else 0)
    dims, strides, code = (batch, m, k, n, A.nnz_blocks), (n, k * n, n, m * n), KERNEL_CODE[cdt]

    def replay(A_, X_, /, *, alpha=1.0):
        px = ptr(X_)
        if px % 16:
            return None
        with _backend.cuda_device_scope(X_):
            o = _backend.empty_like_lib(X_, (batch, m, n), cdt)
            # (every setting of the kernel's forms runs the n it ran here: n = 4 keeps its tile)
            bs_cuda.batched(dims, fixed + (px, ptr(o)), strides, float(alpha), code,
                            _backend.cuda_stream(X_))
        return o

    return out, replay


_BATCHED = Operation("spmm_batched", prepare=_prepare, plan_query=_plan_query,
                     normalise=_normalise, empty=_empty, signature=_signature, facts=_facts,
                     options=("block", "nnzb", "lib"),
                     doc="alpha * A[i] @ X[i] over a stack sharing one block pattern; shapes: "
                         "(batch, m, k), (batch, k, n)")
_BATCHED.register(Algorithm("blocksparse", _run_ours, _costs.predict_batched_ours,
                            devices=("cpu", "cuda"), applies=_ours_applies, replay=_replay_ours,
                            doc="CUDA: persistent CTAs walk (matrix, RHS tile) units; CPU: the "
                                "C++ SpMM over the block-diagonal stack"))
_BATCHED.register(Algorithm("gather", _run_gather, _costs.predict_batched_gather,
                            devices=("cpu", "cuda"), autograd=("autograd",),
                            doc="gather X block rows, batched matmul, sum block rows"))
_BATCHED.register(Algorithm("dense", _run_dense, _costs.predict_batched_dense,
                            devices=("cpu", "cuda"), autograd=("autograd",),
                            doc="the library's batched matmul on the densified stack"))
_BATCHED.grad_algorithm = "dense"


def spmm_batched(A, X, /, *, alpha=1.0, algorithm="auto"):
    """``alpha * A[i] @ X[i]`` for every matrix of a :class:`BatchedBlockSparseMatrix`.

    Parameters
    ----------
    A : BatchedBlockSparseMatrix
        batch × m × k, one block pattern.
    X : array
        (batch, k, n), of A's array library and device.
    alpha : float
    algorithm : {"auto", "blocksparse", "gather", "dense"}
        "auto" asks the planner.

    Returns
    -------
    array (batch, m, n) of X's library and device, in the promoted dtype (float16/bfloat16:
    float32 accumulation).
    """
    return _BATCHED(A, X, algorithm=algorithm, alpha=alpha)
