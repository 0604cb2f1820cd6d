"""Block-sparse matrices with dense b×b blocks: the operand of ``spmm`` and ``spgemm``.

    >>> import numpy as np, kronlinalg
    >>> a = np.zeros((40, 40)); a[:16, 16:32] = 1.0
    >>> A = kronlinalg.BlockSparseMatrix.from_dense(a, block=16)
    >>> A.shape, A.block, A.nnz_blocks
    ((40, 40), 16, 1)
    >>> bool((A @ np.ones((40, 3)) == a @ np.ones((40, 3))).all())
    True
"""

from __future__ import annotations

import functools
import itertools
import sys

import array_api_compat
import numpy as np

from .common import backend as _backend, validation as _validation

__all__ = ["BlockSparseMatrix", "BLOCK_SIZES", "morton_keys"]

BLOCK_SIZES = (8, 16, 32, 64)
_SERIAL = itertools.count()  # a matrix's identity for the operations' caches (never reused)
ORDERS = ("row", "morton")


def _interleave(i, j):
    """Z code of (i, j): bit k of j at bit 2k, bit k of i at bit 2k + 1 (int64 arrays)."""
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    code = np.zeros(np.broadcast(i, j).shape, dtype=np.int64)
    for k in range(31):
        code |= ((j >> k) & 1) << (2 * k)
        code |= ((i >> k) & 1) << (2 * k + 1)
    return code


def morton_keys(rows, cols, tile: int):
    """The multi-level Z-Morton key of blocks at block coordinates (rows, cols) with warp
    tiles of tile×tile blocks (see BlockSparseMatrix): tile code · tile² + local code."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    t2 = tile * tile
    return _interleave(rows // tile, cols // tile) * t2 + _interleave(rows % tile, cols % tile)


def _lib(a) -> str:
    if _backend.is_cupy(a):
        return "cupy"
    if _backend.is_torch(a):
        return "torch"
    return "numpy" if isinstance(a, np.ndarray) else "other"


def _host(a) -> np.ndarray:
    """A host NumPy copy/view of any array (device arrays are copied)."""
    if _backend.is_cupy(a):
        return a.get()
    if _backend.is_torch(a):
        return a.detach().cpu().numpy()
    return _backend.to_numpy(a)


def _like(ref, host: np.ndarray):
    """host (a NumPy array) as an array of ref's library, on ref's device."""
    lib = _lib(ref)
    if lib == "cupy":
        with ref.device:
            return sys.modules["cupy"].asarray(host)
    if lib == "torch":
        return sys.modules["torch"].from_numpy(np.ascontiguousarray(host)).to(ref.device)
    if lib == "numpy":
        return host
    xp = array_api_compat.array_namespace(ref)
    return _backend.from_host(ref, xp, host)


class StoredBlocks:
    """What BlockSparseMatrix and BatchedBlockSparseMatrix share: the blocks ``val`` in the
    caller's array library (``_val``, block side ``_b``), their dtype and device, and the
    index arrays copied once into that library (``_index``, cached in ``_dev``)."""

    @property
    def block(self) -> int:
        return self._b

    @property
    def dtype(self):
        return self._val.dtype

    @property
    def device(self):
        return array_api_compat.device(self._val)

    @property
    def val(self):
        return self._val

    def _index(self, name, host):
        if _lib(self._val) == "numpy":
            return host
        arr = self._dev.get(name)
        if arr is None:
            arr = self._dev[name] = _like(self._val, host)
        return arr


class BlockSparseMatrix(StoredBlocks):
    """A sparse matrix stored as dense b×b blocks (KAMI's Val, RowPtr, ColBlkIdx).

    ``val`` (nnz_blocks, b, b) holds the blocks, in the caller's array library and on its
    device; ``row_ptr`` (R + 1) and ``col_idx`` (nnz_blocks) are int64 arrays of the same
    library and device, R = ceil(m / b) block rows, C = ceil(n / b) block columns.  Blocks
    that cross the matrix's edge (shapes not divisible by b) are zero-padded in ``val``;
    what the padding holds never reaches a result (rows past m are not written, columns past
    n meet zero rows of the other operand).

    Orders (``order=``):

    * ``"row"``: blocks row by row, columns strictly increasing within a row (CSR of blocks).
    * ``"morton"``: multi-level Z-Morton order, for kernels that work on warp tiles.  With
      q = ``tile`` (a power of two, default 4), block (i, j) lies in warp tile
      (ti, tj) = (i // q, j // q) at local position (li, lj) = (i % q, j % q).  Its key is

          key(i, j) = Z(ti, tj) · q² + Z(li, lj),  Z(x, y) = Σ_k bit_k(y)·2^(2k) + bit_k(x)·2^(2k+1)

      (level 1: tiles in Z order, row bit above column bit, so (0,0), (0,1), (1,0), (1,1);
      level 2: the bits of the local (li, lj) interleaved the same way).  Blocks are stored by
      increasing key.  Grids that are not powers of two are coded on the next power of two;
      codes with no block are simply absent (skipped).  Each warp tile is therefore one
      contiguous range of blocks: ``tile_ptr`` (T + 1 entries, T = ceil(R/q)·ceil(C/q)) gives
      the range of the t-th tile in Z order and ``tile_coords`` (T, 2) its (ti, tj).
      ``row_idx`` gives each stored block's row; ``row_ptr`` indexes ``row_perm``, the
      storage positions of the blocks in row order.

    Build one with :meth:`from_dense`, :meth:`from_scipy`, :meth:`from_cupyx`,
    :meth:`from_torch` or the constructor (``row`` order, sorted columns required).  The
    operations keep derived forms on the matrix (work lists, casts, the dense form for the
    "dense" algorithm): treat ``val`` as read-only, or build a new matrix after changing it.
    """

    __array_priority__ = 100  # numpy defers ndarray @ BlockSparseMatrix to __rmatmul__

    def __init__(self, val, row_ptr, col_idx, /, *, shape, order="row", tile=4):
        named = {"val": val, "row_ptr": row_ptr, "col_idx": col_idx}
        _validation.namespace_of(named)
        _validation.same_device(named)
        _validation.float_dtype("val", val)
        if val.ndim != 3 or val.shape[1] != val.shape[2]:
            raise ValueError(f"val: expected shape (nnz_blocks, b, b), got {tuple(val.shape)}")
        b = int(val.shape[1])
        if b not in BLOCK_SIZES:
            raise ValueError(f"val: block size must be one of {BLOCK_SIZES}, got {b}")
        if order not in ORDERS:
            raise ValueError(f"order: expected one of {ORDERS}, got {order!r}")
        m, n = self._check_shape(shape)
        R, C = -(-m // b), -(-n // b)
        rp = _host(row_ptr)
        ci = _host(col_idx)
        for name, arr in (("row_ptr", rp), ("col_idx", ci)):
            if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
                raise TypeError(f"{name}: expected a 1-D integer array, got {arr.dtype} "
                                f"of shape {arr.shape}")
        nnzb = int(val.shape[0])
        if rp.shape[0] != R + 1:
            raise ValueError(f"row_ptr: expected {R + 1} entries (ceil({m}/{b}) + 1), got "
                             f"{rp.shape[0]}")
        if ci.shape[0] != nnzb:
            raise ValueError(f"col_idx: expected {nnzb} entries (one per block of val), got "
                             f"{ci.shape[0]}")
        if rp[0] != 0 or rp[-1] != nnzb or np.any(np.diff(rp) < 0):
            raise ValueError(f"row_ptr: must start at 0, never decrease and end at nnz_blocks "
                             f"= {nnzb}")
        if nnzb and (ci.min() < 0 or ci.max() >= C):
            raise ValueError(f"col_idx: block columns must lie in [0, {C}), got "
                             f"[{ci.min()}, {ci.max()}]")
        rows = np.repeat(np.arange(R, dtype=np.int64), np.diff(rp))
        if nnzb > 1:
            same_row = rows[1:] == rows[:-1]
            if np.any(same_row & (ci[1:] <= ci[:-1])):
                raise ValueError("col_idx: block columns must be strictly increasing within each "
                                 "block row (sort them, or build through from_scipy, which sorts "
                                 "and sums duplicates)")
        if _lib(val) == "other":
            val = _host(val)
        val = _zero_padding(val, m, n, b, rows, ci)
        self._set(val, rows, ci.astype(np.int64), (m, n), b)
        if order == "morton":
            self._to_morton(tile)

    # -- construction helpers ------------------------------------------------------------------

    @staticmethod
    def _check_shape(shape):
        try:
            m, n = (int(s) for s in shape)
        except (TypeError, ValueError):
            raise TypeError(f"shape: expected two integers, got {shape!r}") from None
        if m < 0 or n < 0:
            raise ValueError(f"shape: expected non-negative sizes, got {shape!r}")
        return m, n

    def _set(self, val, rows, cols, shape, b, row_ptr=None):
        """Row-ordered state: val (library array), rows/cols (host int64, sorted row-major),
        row_ptr (counted from rows unless given)."""
        self._val = val
        self._shape = shape
        self._b = b
        self._order = "row"
        self._tile = 0
        R = -(-shape[0] // b)
        self._rows = rows
        self._cols = cols
        if row_ptr is None:
            row_ptr = np.zeros(R + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=R), out=row_ptr[1:])
        self._row_ptr = row_ptr
        self._perm = None  # storage position of each block in row order (morton only)
        self._tile_ptr = self._tile_coords = None
        self._dev = {}  # device copies of index arrays, by name
        self._cache = {}  # derived data the operations keep (work lists, dense form)
        self._serial = next(_SERIAL)

    @classmethod
    def _from_coords(cls, val, rows, cols, shape, b, order="row", tile=4):
        """val in any order with host block coordinates: sorted into row order (a gather of val
        only when the order changes)."""
        if _lib(val) == "other":  # array-api-strict and the like: kept as NumPy
            val = _host(val)
        key = rows * max(1, -(-shape[1] // b)) + cols
        if key.size > 1 and np.any(key[1:] <= key[:-1]):
            perm = np.argsort(key, kind="stable")
            val = val[_like(val, perm)]
            rows, cols = rows[perm], cols[perm]
        self = cls.__new__(cls)
        self._set(val, rows.astype(np.int64), cols.astype(np.int64), shape, b)
        if order == "morton":
            self._to_morton(tile)
        return self

    def _to_morton(self, tile):
        tile = _validation.count("tile", tile)
        if tile < 1 or tile & (tile - 1):
            raise ValueError(f"tile: expected a power of two, got {tile}")
        R, C = self.block_grid
        keys = morton_keys(self._rows, self._cols, tile)
        order = np.argsort(keys, kind="stable")  # storage position k holds row-order block order[k]
        if self.nnz_blocks:
            self._val = self._val[_like(self._val, order)]
        self._rows_m, self._cols_m = self._rows[order], self._cols[order]
        perm = np.empty_like(order)
        perm[order] = np.arange(order.size, dtype=np.int64)
        self._perm = perm  # row-order block t is stored at perm[t]
        TR, TC = -(-R // tile), -(-C // tile)
        ti, tj = np.meshgrid(np.arange(TR), np.arange(TC), indexing="ij")
        ti, tj = ti.ravel(), tj.ravel()
        tcode = _interleave(ti, tj)
        zorder = np.argsort(tcode, kind="stable")
        self._tile_coords = np.stack([ti[zorder], tj[zorder]], axis=1).astype(np.int64)
        # each tile owns keys [code·q², (code+1)·q²): its blocks are one range of the sorted keys
        skeys = keys[order]
        t2 = tile * tile
        starts = np.searchsorted(skeys, tcode[zorder] * t2, side="left")
        self._tile_ptr = np.append(starts, skeys.size).astype(np.int64)
        self._order = "morton"
        self._tile = tile
        self._dev = {}
        self._cache = {}
        self._serial = next(_SERIAL)

    # -- properties ------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def nnz_blocks(self) -> int:
        return int(self._val.shape[0])

    @property
    def block_grid(self) -> tuple:
        """(R, C): block rows and block columns, ceil(m / b) and ceil(n / b)."""
        b = self._b
        return -(-self._shape[0] // b), -(-self._shape[1] // b)

    @property
    def density(self) -> float:
        """Fraction of the block grid that is stored."""
        R, C = self.block_grid
        return self.nnz_blocks / (R * C) if R * C else 0.0

    @property
    def order(self) -> str:
        return self._order

    @property
    def tile(self) -> int:
        """q, the side of a warp tile in blocks (Morton order; 0 in row order)."""
        return self._tile

    @property
    def row_ptr(self):
        return self._index("row_ptr", self._row_ptr)

    @property
    def col_idx(self):
        """Block column of each stored block, in storage order."""
        return self._index("col_idx", self._cols if self._order == "row" else self._cols_m)

    @property
    def row_idx(self):
        """Block row of each stored block, in storage order."""
        return self._index("row_idx", self._rows if self._order == "row" else self._rows_m)

    @property
    def row_perm(self):
        """Storage position of each block in row order (identity in row order)."""
        host = self._perm if self._perm is not None else np.arange(self.nnz_blocks)
        return self._index("row_perm", host)

    @property
    def tile_ptr(self):
        return None if self._tile_ptr is None else self._index("tile_ptr", self._tile_ptr)

    @property
    def tile_coords(self):
        return None if self._tile_coords is None else self._index("tile_coords",
                                                                   self._tile_coords)

    def host_structure(self):
        """(row_ptr, col_idx, perm) as host int64 arrays in row order; perm None in row order
        (block t of row order is val[perm[t]])."""
        return self._row_ptr, self._cols, self._perm

    def row_counts(self) -> np.ndarray:
        return np.diff(self._row_ptr)

    def work_items(self, min_piece: int = 32, order: str = "longest") -> tuple:
        """(items, has split rows): 3 int64 per item (row, first block, end block in row order)
        covering every block row, rows heavier than max(min_piece, 4 x mean) cut into pieces
        of that many blocks, whose row is then stored as -(row + 1): the CUDA SpMM work list.

        ``order="longest"`` lists the items longest first (ties in row order), ``"row"`` by
        row.  The GPU starts a CTA an item in list order as SMs free up, so longest first is
        the LPT schedule: the short items fill the gaps at the end instead of one long item
        starting last (random rows of 51 +- 7 blocks on 528 CTA slots: a makespan ~1.03x the
        balanced one against ~1.27x in row order, simulated)."""
        if order not in ("longest", "row"):
            raise ValueError(f"work_items: order must be 'longest' or 'row', got {order!r}")
        rp = self._row_ptr
        counts = np.diff(rp)
        R = counts.size
        piece = max(min_piece, 4 * int(np.ceil(counts.mean()))) if R else 1
        pieces = np.maximum(1, -(-counts // piece))
        rows = np.repeat(np.arange(R, dtype=np.int64), pieces)
        j = np.arange(rows.size, dtype=np.int64) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        start = rp[rows] + j * piece
        end = np.minimum(start + piece, rp[rows + 1])
        split = np.repeat(pieces > 1, pieces)
        enc = np.where(split, -rows - 1, rows)
        items = np.stack([enc, start, end], axis=1)
        if order == "longest":
            items = items[np.argsort(start - end, kind="stable")]
        return items.ravel(), bool(split.any())

    def panel_reuse(self, rows: int) -> float:
        """Stored blocks per step of row_steps(rows): how many block rows of a panel of `rows`
        share each staged B block row in the 2D kernel (1 .. rows; random patterns of density
        d: rows d / (1 - (1 - d)^rows), banded ones nearly rows)."""
        if not self.nnz_blocks:
            return 1.0
        keys = (self._rows // rows) * self.block_grid[1] + self._cols
        return self.nnz_blocks / np.unique(keys).size

    def row_steps(self, rows: int) -> tuple:
        """(step_ptr, steps, panels): the 2D CUDA kernel's work list.  The blocks of each panel
        of `rows` block rows grouped by block column, one step per column present, 1 + rows
        int64 each (the column, then the storage position of the panel's i-th block row's
        block in it, -1 where none); steps by panel, then column; step_ptr indexes them."""
        rows_, cols = self._storage_rows(), self._storage_cols()
        panel = rows_ // rows
        order = np.lexsort((cols, panel))  # storage positions by panel, then column
        p_s, c_s = panel[order], cols[order]
        new = np.ones(order.size, dtype=bool)
        new[1:] = (p_s[1:] != p_s[:-1]) | (c_s[1:] != c_s[:-1])
        step = np.cumsum(new) - 1
        steps = np.full((int(new.sum()), 1 + rows), -1, dtype=np.int64)
        steps[step, 0] = c_s
        steps[step, 1 + rows_[order] % rows] = order
        panels = -(-self.block_grid[0] // rows)
        ptr = np.zeros(panels + 1, dtype=np.int64)
        np.cumsum(np.bincount(p_s[new], minlength=panels), out=ptr[1:])
        return ptr, steps.ravel(), panels

    def __repr__(self):
        return (f"BlockSparseMatrix(shape={self._shape}, block={self._b}, "
                f"nnz_blocks={self.nnz_blocks}, dtype={_backend.dtype_name(self.dtype)}, "
                f"order={self._order!r})")

    # -- conversions --------------------------------------------------------------------------

    def with_order(self, order, *, tile=4):
        """The same matrix in another order (a new object; val is gathered, not aliased)."""
        if order not in ORDERS:
            raise ValueError(f"order: expected one of {ORDERS}, got {order!r}")
        val = self._val
        if self._perm is not None:
            val = val[self._index("row_perm", self._perm)]
        out = BlockSparseMatrix._from_coords(val, self._rows, self._cols, self._shape, self._b)
        if order == "morton":
            out._to_morton(tile)
        return out

    def astype(self, dtype):
        xp = array_api_compat.array_namespace(self._val)
        out = self.__class__.__new__(self.__class__)
        out.__dict__.update(self.__dict__)
        out._val = xp.astype(self._val, dtype)
        out._cache = {}
        out._serial = next(_SERIAL)
        return out

    def to_dense(self):
        """The matrix as a dense 2-D array of val's library, device and dtype."""
        m, n = self._shape
        b = self._b
        R, C = self.block_grid
        val = self._val
        xp = array_api_compat.array_namespace(val)
        grid = xp.zeros((R, C, b, b), dtype=val.dtype, device=array_api_compat.device(val))
        if self.nnz_blocks:
            grid[self._index("row_idx_s", self._storage_rows()),
                 self._index("col_idx_s", self._storage_cols())] = val
        dense = xp.reshape(xp.permute_dims(grid, (0, 2, 1, 3)), (R * b, C * b))
        return dense[:m, :n]

    def _storage_rows(self):
        return self._rows if self._order == "row" else self._rows_m

    def _storage_cols(self):
        return self._cols if self._order == "row" else self._cols_m

    @property
    def T(self):
        """The transpose (row order; blocks transposed, a new val)."""
        xp = array_api_compat.array_namespace(self._val)
        val = xp.permute_dims(self._val, (0, 2, 1))
        out = BlockSparseMatrix._from_coords(val, self._storage_cols(), self._storage_rows(),
                                             self._shape[::-1], self._b)
        if _lib(out._val) in ("cupy", "torch", "numpy"):
            out._val = _backend.contiguous(out._val)
        return out

    @classmethod
    def from_dense(cls, a, /, *, block=16, order="row", tile=4):
        """Blocks of a 2-D array (NumPy, CuPy, torch, ...) that hold a nonzero entry."""
        b = _block_arg(block)
        xp = _validation.namespace_of({"a": a})
        _validation.float_dtype("a", a)
        if a.ndim != 2:
            raise ValueError(f"a: expected a 2-D array, got shape {tuple(a.shape)}")
        m, n = (int(s) for s in a.shape)
        R, C = -(-m // b), -(-n // b)
        if _lib(a) == "other":
            host = cls.from_dense(_host(a), block=b)
            return cls._from_coords(_like(a, host._val), host._rows, host._cols, (m, n), b,
                                    order, tile)
        dev = array_api_compat.device(a)
        padded = a
        if (R * b, C * b) != (m, n):
            padded = xp.zeros((R * b, C * b), dtype=a.dtype, device=dev)
            padded[:m, :n] = a
        # one copy into block order, then a scan and a gather of contiguous blocks (none when
        # every block holds a nonzero: a dense product's blocks are kept as they are)
        grid = _backend.contiguous(xp.permute_dims(xp.reshape(padded, (R, b, C, b)),
                                                   (0, 2, 1, 3)))
        if C == 1 and padded is a:  # then block order is a's order: the "copy" may be a view
            grid = xp.asarray(grid, copy=True)
        flat = xp.reshape(grid, (R * C, b, b))
        keep = _host(xp.any(xp.reshape(flat, (R * C, b * b)), axis=1))  # (-0.0 is zero)
        if keep.all():  # every block: the pattern of a full grid, known without a sort
            rows, cols, row_ptr = _full_grid(R, C)
            self = cls.__new__(cls)
            self._set(flat, rows, cols, (m, n), b, row_ptr)
            if order == "morton":
                self._to_morton(tile)
            return self
        else:
            where = np.flatnonzero(keep)
            rows, cols = where // max(C, 1), where % max(C, 1)
            val = xp.take(flat, _like(a, where), axis=0) if where.size else xp.zeros(
                (0, b, b), dtype=a.dtype, device=dev)
        return cls._from_coords(val, rows, cols, (m, n), b, order, tile)

    @classmethod
    def from_coo(cls, rows, cols, data, /, *, shape, block=16, order="row", tile=4):
        """Blockify entries (rows[k], cols[k], data[k]) of any one array library: a block is
        stored when it holds an entry (explicit zeros included); duplicates are summed; any
        order is accepted."""
        b = _block_arg(block)
        m, n = cls._check_shape(shape)
        named = {"rows": rows, "cols": cols, "data": data}
        _validation.namespace_of(named)
        _validation.same_device(named)
        _validation.float_dtype("data", data)
        hr, hc = _host(rows).astype(np.int64), _host(cols).astype(np.int64)
        if hr.shape != hc.shape or hr.shape != tuple(data.shape) or hr.ndim != 1:
            raise ValueError(f"rows, cols, data: expected three 1-D arrays of one length, got "
                             f"{hr.shape}, {hc.shape}, {tuple(data.shape)}")
        for name, h, lim in (("rows", hr, m), ("cols", hc, n)):
            if h.size and (h.min() < 0 or h.max() >= lim):
                raise ValueError(f"{name}: indices must lie in [0, {lim}), got "
                                 f"[{h.min()}, {h.max()}]")
        C = -(-n // b)
        key = (hr // b) * max(C, 1) + hc // b
        uniq, inv = np.unique(key, return_inverse=True)
        flat = inv * (b * b) + (hr % b) * b + hc % b
        lib = _lib(data)
        if lib == "numpy" or lib == "other":
            dt = _host(data)
            val = np.zeros(uniq.size * b * b, dtype=dt.dtype)
            np.add.at(val, flat, dt)
            val = val.reshape(uniq.size, b, b)
            if lib == "other":
                val = _like(data, val)
        elif lib == "cupy":
            cupy = sys.modules["cupy"]
            import cupyx

            with data.device:
                val = cupy.zeros(uniq.size * b * b, dtype=data.dtype)
                cupyx.scatter_add(val, cupy.asarray(flat), data)
            val = val.reshape(uniq.size, b, b)
        else:
            torch = sys.modules["torch"]
            val = torch.zeros(uniq.size * b * b, dtype=data.dtype, device=data.device)
            val.index_add_(0, torch.from_numpy(flat).to(data.device), data.detach())
            val = val.reshape(uniq.size, b, b)
        return cls._from_coords(val, uniq // max(C, 1), uniq % max(C, 1), (m, n), b, order, tile)

    @classmethod
    def from_scipy(cls, s, /, *, block=16, order="row", tile=4):
        """From a scipy.sparse matrix or array: BSR of the same block size keeps its data
        (no copy when it is contiguous with sorted, unique indices); other formats blockify."""
        import scipy.sparse as sp

        if not sp.issparse(s):
            raise TypeError(f"s: expected a scipy.sparse matrix or array, got {type(s).__name__}")
        b = _block_arg(block)
        if s.format == "bsr" and s.blocksize == (b, b):
            if not s.has_canonical_format:
                s = s.copy()
                s.sum_duplicates()  # sorts too
            _validation.float_dtype("s", s.data)
            R = s.shape[0] // b
            rows = np.repeat(np.arange(R, dtype=np.int64), np.diff(s.indptr))
            val = s.data if s.data.flags.c_contiguous else np.ascontiguousarray(s.data)
            return cls._from_coords(val, rows, s.indices.astype(np.int64), s.shape, b, order,
                                    tile)
        coo = s.tocoo()
        return cls.from_coo(np.asarray(coo.row), np.asarray(coo.col), np.asarray(coo.data),
                            shape=s.shape, block=b, order=order, tile=tile)

    @classmethod
    def from_cupyx(cls, s, /, *, block=16, order="row", tile=4):
        """From a cupyx.scipy.sparse matrix (CSR, COO, CSC): blockified on the device."""
        coo = s.tocoo()
        return cls.from_coo(coo.row, coo.col, coo.data, shape=s.shape, block=block,
                            order=order, tile=tile)

    @classmethod
    def from_torch(cls, t, /, *, block=16, order="row", tile=4):
        """From a torch sparse tensor: BSR of the same block size keeps its values; COO, CSR
        and other block sizes blockify."""
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(t, torch.Tensor):
            raise TypeError(f"t: expected a torch tensor, got {type(t).__name__}")
        b = _block_arg(block)
        if t.layout == torch.sparse_bsr and tuple(t.values().shape[1:]) == (b, b):
            crow = t.crow_indices().cpu().numpy().astype(np.int64)
            cols = t.col_indices().cpu().numpy().astype(np.int64)
            rows = np.repeat(np.arange(crow.size - 1, dtype=np.int64), np.diff(crow))
            return cls._from_coords(t.values(), rows, cols, tuple(t.shape), b, order, tile)
        if t.layout == torch.strided:
            return cls.from_dense(t, block=b, order=order, tile=tile)
        if t.layout != torch.sparse_coo:
            t = t.to_sparse_coo()
        idx = t._indices()
        return cls.from_coo(idx[0], idx[1], t._values(), shape=tuple(t.shape), block=b,
                            order=order, tile=tile)

    def to_scipy(self, format="bsr"):
        """As a scipy.sparse array ("bsr", "csr" or "coo"; host copy of val).  Every entry of a
        stored block becomes an entry (zeros inside blocks are explicit); shapes not divisible
        by b only in "csr"/"coo" (scipy's BSR needs whole blocks)."""
        import scipy.sparse as sp

        base = self.with_order("row") if self._order != "row" else self
        val = _host(base._val)
        m, n = self._shape
        b = self._b
        R, C = self.block_grid
        bsr = sp.bsr_array((val, base._cols.copy(), base._row_ptr.copy()), shape=(R * b, C * b))
        if format == "bsr":
            if (R * b, C * b) != (m, n):
                raise ValueError(f"format: scipy's BSR needs a shape divisible by {b}, got "
                                 f"{self._shape}; ask for 'csr' or 'coo'")
            return bsr
        if format not in ("csr", "coo"):
            raise ValueError(f"format: expected 'bsr', 'csr' or 'coo', got {format!r}")
        coo = bsr.tocoo()
        keep = (coo.row < m) & (coo.col < n)
        coo = sp.coo_array((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=(m, n))
        return coo if format == "coo" else coo.tocsr()

    def to_torch_bsr(self):
        """As a torch sparse BSR tensor (shape divisible by b; on val's device for torch)."""
        torch = __import__("torch")
        base = self.with_order("row") if self._order != "row" else self
        val = base._val if _backend.is_torch(base._val) else torch.from_numpy(_host(base._val))
        R, C = self.block_grid
        b = self._b
        if (R * b, C * b) != self._shape:
            raise ValueError(f"shape: torch BSR needs a shape divisible by {b}, got "
                             f"{self._shape}")
        dev = val.device
        return torch.sparse_bsr_tensor(torch.from_numpy(base._row_ptr).to(dev),
                                       torch.from_numpy(base._cols).to(dev), val,
                                       size=self._shape, check_invariants=False)

    # -- products -------------------------------------------------------------------------------

    # spmm and spgemm, set by kronlinalg/blocksparse.py (the operations import this module)
    _spmm = _spgemm = None

    def __matmul__(self, other):
        if isinstance(other, BlockSparseMatrix):
            return self._spgemm(self, other)
        return self._spmm(self, other)


@functools.lru_cache(maxsize=8)
def _full_grid(R: int, C: int) -> tuple:
    """(rows, cols, row_ptr) of every block of an R x C block grid in row order: a dense
    product's pattern, shared by the matrices that hold it (never written: the structure of a
    matrix is replaced, not modified)."""
    rows = np.repeat(np.arange(R, dtype=np.int64), C)
    cols = np.tile(np.arange(C, dtype=np.int64), R)
    return rows, cols, np.arange(R + 1, dtype=np.int64) * C


def _zero_padding(val, m, n, b, rows, cols):
    """val with the entries of edge blocks that lie outside the m x n matrix set to zero (a
    copy, only when such an entry is nonzero): products never see what the padding held."""
    if (m % b == 0 and n % b == 0) or val.shape[0] == 0:
        return val
    rr = np.arange(b)[None, :, None] + (rows * b)[:, None, None]
    cc = np.arange(b)[None, None, :] + (cols * b)[:, None, None]
    outside = (rr >= m) | (cc >= n)
    mask = _like(val, outside)
    xp = array_api_compat.array_namespace(val)
    if not bool(xp.any(xp.where(mask, val, xp.zeros_like(val)) != 0)):
        return val
    return xp.where(mask, xp.zeros_like(val), val)


def _block_arg(block) -> int:
    b = _validation.count("block", block)
    if b not in BLOCK_SIZES:
        raise ValueError(f"block: expected one of {BLOCK_SIZES}, got {b}")
    return b

