"""strassen_matmul's CUDA executor: runs one batch element's schedule (passes, leaf launches,
classical strips) on device arrays, with leaves by the multi-target kernel ("kernel"), by
cuBLAS into one leaf-sized buffer ("cublas"), or by the sum-leaf kernel ("reloaded").  The
operation module (kronlinalg/strassen.py) drives it through planner/costs/strassen.py's
schedules."""

from __future__ import annotations

from ._ext import load
from .common import backend, config
from .planner.costs import strassen as costs
from .vendor import cublas as _cublas

strassen_cuda = load("strassen_cuda")

__all__ = ["CudaExecutor"]


_SIDE: dict = {}


def _side_stream(device_id):
    """A second stream of the device and two events (sums ready to start, sums done): the
    Winograd sums pass beside the first product (KRONLINALG_STRASSEN_WINOGRAD=2)."""
    got = _SIDE.get(device_id)
    if got is None:
        import cupy

        with cupy.cuda.Device(device_id):
            got = _SIDE[device_id] = (cupy.cuda.Stream(non_blocking=True),
                                      cupy.cuda.Event(disable_timing=True),
                                      cupy.cuda.Event(disable_timing=True))
    return got


class CudaExecutor:
    """A, B, C as device arrays (rows of unit stride) on the library's stream; leaves by the
    multi-target kernel ("kernel") or by cuBLAS into one leaf-sized buffer ("cublas")."""

    def __init__(self, a, b, c, code, stream, copy, leaf, lead, ws=None, hook=None):
        self.a, self.b, self.c = a, b, c
        self.code, self.stream, self.copy, self.mode, self.lead = code, stream, copy, leaf, lead
        self.ws = ws if ws is not None else {}
        self.hook = hook
        self.overlap, self.sums_done = False, None  # Winograd's sums on a side stream
        self.dtype = backend.dtype_name(c.dtype)
        self.item = 8 if self.dtype == "float64" else 4
        self.va, self.vb, self.vc = (backend.device_view(v) for v in (a, b, c))
        self.wa, self.wb, self.pending = self.va, self.vb, None
        self.spaces: dict = {}  # Winograd's workspaces by space name (and the sums form's)

    def _buffer(self, name, shape):
        buf = self.ws.get(name)
        if buf is None or tuple(buf.shape) != tuple(shape):
            buf = self.ws[name] = backend.empty_like_lib(self.lead, shape, self.dtype)
        return buf

    def prepare_core(self, mc, kc, nc):
        if not self.copy or self.mode == "reloaded":  # reloaded only reads a and b
            return
        self.pending = (self._buffer("a", (mc, kc)), self._buffer("b", (kc, nc)), mc, kc, nc)
        self.wa, self.wb = (backend.device_view(w) for w in self.pending[:2])

    def _copy(self, op):
        """The private copy: fused with the first pass (S1 from a and b into the copy)."""
        wa, wb, mc, kc, nc = self.pending
        self.pending = None
        if self.hook:
            self.hook("copy+S1" if op.stage == 1 and op.depth == 0 else "copies")
        if op.stage == 1 and op.depth == 0:
            strassen_cuda.run_pass(4, op.mh, op.kh, op.nh, self.wa.strides[0], self.wb.strides[0],
                                   [self.wa.ptr], [self.wb.ptr], self.code, self.stream,
                                   self.va.ptr, self.vb.ptr, self.va.strides[0],
                                   self.vb.strides[0])
            return True
        wa[...] = self.a[:mc, :kc]
        wb[...] = self.b[:kc, :nc]
        return False

    def _ptr(self, v, rc):
        return v.ptr + (rc[0] * v.strides[0] + rc[1] * v.strides[1]) * self.item

    def pass_(self, op):
        if self.pending is not None and self._copy(op):
            return
        if self.hook:
            self.hook(op)
        strassen_cuda.run_pass(op.stage, op.mh, op.kh, op.nh, self.wa.strides[0],
                               self.wb.strides[0], [self._ptr(self.wa, x) for x, _ in op.blocks],
                               [self._ptr(self.wb, y) for _, y in op.blocks], self.code,
                               self.stream)

    def sums(self, op):
        """The five A sums and five B sums of Strassen's products into the workspace."""
        if self.hook:
            self.hook(op)
        sa = backend.device_view(self._buffer("sa", (5 * op.mh, op.kh)))
        sb = backend.device_view(self._buffer("sb", (5 * op.kh, op.nh)))
        self.spaces["sa"], self.spaces["sb"] = sa, sb
        strassen_cuda.run_pass(5, op.mh, op.kh, op.nh, op.kh, op.nh,
                               [self._ptr(sa, (i * op.mh, 0)) for i in range(5)],
                               [self._ptr(sb, (i * op.kh, 0)) for i in range(5)], self.code,
                               self.stream, self.va.ptr, self.vb.ptr, self.va.strides[0],
                               self.vb.strides[0])

    def winograd(self) -> bool:
        """Whether the levels may run in Winograd's form: its products go straight into C
        blocks through cuBLAS's own alpha and beta (float64 and float32, where CuPy's cuBLAS
        bindings are importable: CuPy arrays, and CUDA torch tensors on torch's stream), and the
        knob KRONLINALG_STRASSEN_WINOGRAD is 1 or 2 (2: the sums pass on a second stream, beside
        P1, which needs no sums; CuPy arrays only)."""
        if not _cublas.available():
            return False
        form = config.get("KRONLINALG_STRASSEN_WINOGRAD")
        if form not in (1, 2):
            return False
        if not backend.is_cupy(self.lead):
            return True
        import cupy

        self.overlap = form == 2 and self.hook is None  # stage timing: one stream
        return cupy.cuda.get_current_stream().ptr == self.stream

    def winograd_workspace(self, shapes):
        """The workspaces of Winograd's form, {space: (rows, columns)} (sums of each depth,
        scratch blocks), as device views by space name."""
        self.spaces = {name: backend.device_view(self._buffer("w" + name, shape))
                       for name, shape in shapes.items()}

    def _view(self, space):
        return {"a": self.va, "b": self.vb, "c": self.vc}.get(space) or self.spaces[space]

    def winograd_sums(self, op):
        """Winograd's four A sums and four B sums of op.src's 2 x 2 blocks into op.out."""
        if self.hook:
            self.hook(op)
        sa, sb = self.spaces[op.out[0]], self.spaces[op.out[1]]
        (xa, lda), (yb, ldb) = self._source(op.src[0]), self._source(op.src[1])
        stream = self.stream
        if op.out[0] != "sa":  # a deeper level: its sources may be the top level's sums
            self._await_sums()
        elif self.overlap:  # the side stream starts after what came before
            from cupy.cuda import runtime

            side, ready, done = _side_stream(self.lead.data.device_id)
            runtime.eventRecord(ready.ptr, self.stream)
            runtime.streamWaitEvent(side.ptr, ready.ptr, 0)
            stream, self.sums_done = side.ptr, done
        strassen_cuda.run_pass(6, op.mh, op.kh, op.nh, op.kh, op.nh,
                               [self._ptr(sa, (i * op.mh, 0)) for i in range(4)],
                               [self._ptr(sb, (i * op.kh, 0)) for i in range(4)], self.code,
                               stream, xa, yb, lda, ldb)
        if stream != self.stream:
            from cupy.cuda import runtime

            runtime.eventRecord(self.sums_done.ptr, stream)

    def _await_sums(self):
        """The main stream waits for the side stream's sums before a product reads them."""
        done = self.sums_done
        if done is not None:
            from cupy.cuda import runtime

            runtime.streamWaitEvent(self.stream, done.ptr, 0)
            self.sums_done = None

    def combine(self, op):
        """Winograd's combination of the four products held in a block's quadrants."""
        if self.hook:
            self.hook(op)
        ptr, ld = self._source(op.at)
        strassen_cuda.run_pass(7, op.mh, 0, op.nh, ld, 0, [ptr], [0], self.code, self.stream)

    def add_into(self, op):
        """A scratch block added into its target with its sign (two-level Winograd)."""
        if self.hook:
            self.hook(op)
        (src, lds), (dst, ldc) = self._source(op.src), self._source((op.space,) + op.target[:2])
        strassen_cuda.add_targets(op.m, op.n, lds, ldc, 1.0, 1.0, False,
                                  [(src, 0, [(dst, op.target[2])])], self.code, self.stream)

    def _source(self, src):
        """(pointer, leading dimension) of a (space, row, column) block."""
        view = self._view(src[0])
        return self._ptr(view, src[1:]), view.strides[0]

    def leaf(self, op, alpha, beta):
        if self.hook:
            self.hook(op)
        if isinstance(op, costs.Product):
            if op.x[0] == "sa" or op.y[0] == "sb":
                self._await_sums()
            (x, ldx), (y, ldy) = self._source(op.x), self._source(op.y)
            out = self._view(op.space)
            targets = [(self._ptr(out, t[:2]), t[2], t[3]) for t in op.targets]
            self._launch(ldx, ldy, op.m, op.k, op.n, [(x, y, targets)], alpha, beta, False,
                         out.strides[0])
            return
        if isinstance(op, costs.SumLeaf):  # operand sums formed by the kernel while loading
            leaves = [([(self._ptr(self.va, x[:2]), x[2]) for x in xs],
                       [(self._ptr(self.vb, y[:2]), y[2]) for y in ys],
                       [(self._ptr(self.vc, t[:2]), t[2], t[3]) for t in ts])
                      for xs, ys, ts in op.products]
            strassen_cuda.sum_leaf(op.m, op.n, op.k, self.va.strides[0], self.vb.strides[0],
                                   self.vc.strides[0], alpha, beta, leaves, self.code,
                                   self.stream)
            return
        leaves = [(self._ptr(self.wa, x), self._ptr(self.wb, y),
                   [(self._ptr(self.vc, t[:2]), t[2]) for t in targets])
                  for x, y, targets in op.products]
        self._launch(self.wa.strides[0], self.wb.strides[0], op.m, op.k, op.n, leaves, alpha,
                     beta, op.first)

    def classical(self, xo, yo, co, m, k, n, alpha, beta, first, what):
        if self.hook:
            self.hook(what)
        leaves = [(self._ptr(self.va, xo), self._ptr(self.vb, yo), [(self._ptr(self.vc, co), 1)])]
        self._launch(self.va.strides[0], self.vb.strides[0], m, k, n, leaves, alpha, beta, first)

    def _launch(self, ldx, ldy, m, k, n, leaves, alpha, beta, first, ldc=None):
        ldc = self.vc.strides[0] if ldc is None else ldc
        if self.mode != "cublas":
            strassen_cuda.leaf(m, n, k, ldx, ldy, ldc, alpha, beta, first, leaves, self.code,
                               self.stream)
            return
        buf = self.ws.get("m")
        if buf is None or buf.shape[0] < m * n:
            buf = self.ws["m"] = backend.empty_like_lib(self.lead, (m * n,), self.dtype)
        mp = backend.device_view(buf).ptr
        dev = self.lead.data.device_id if backend.is_cupy(self.lead) else self.lead.get_device()
        for x, y, targets in leaves:
            fresh = first or (len(targets) == 1 and len(targets[0]) > 2 and targets[0][2])
            if len(targets) == 1 and self._gemm_into(m, n, k, x, ldx, y, ldy, targets[0], ldc,
                                                     alpha, beta if fresh else 1.0):
                continue
            _cublas.gemm_strided_batched(
                [(_cublas.OP_N, _cublas.OP_N, n, m, k, y, ldy, 0, x, ldx, 0, mp, n, 0, 1)],
                dtype=self.dtype, device=dev, stream=self.stream,
                cupy_owned=backend.is_cupy(self.lead))
            strassen_cuda.add_targets(m, n, n, ldc, alpha, beta, first, [(mp, 0, targets)],
                                      self.code, self.stream)

    def _gemm_into(self, m, n, k, x, ldx, y, ldy, target, ldc, alpha, beta):
        """A one-target leaf straight into its C block (cuBLAS's own alpha and beta: no product
        buffer, no target pass), where CuPy's cuBLAS bindings are importable (else False: the
        caller takes the buffer path)."""
        if not _cublas.available():
            return False
        cupy_owned = backend.is_cupy(self.lead)
        if cupy_owned:  # CuPy's bindings run on CuPy's current stream: it must be the call's
            import cupy

            if cupy.cuda.get_current_stream().ptr != self.stream:
                return False
        dev = self.lead.data.device_id if cupy_owned else self.lead.get_device()
        # row-major C = X Y as column-major C^T = Y^T X^T
        _cublas.gemm(n, m, k, alpha * target[1], y, ldy, x, ldx, beta, target[0], ldc,
                     dtype=self.dtype, device=dev, stream=self.stream, cupy_owned=cupy_owned)
        return True
