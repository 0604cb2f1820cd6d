"""cuBLASLt GEMMs with a measured choice of algorithm, per GEMM signature (TunableOp-style).

cuBLAS picks one algorithm per GEMM shape by heuristic; for the thin GEMMs of Kronecker-sparse
products (25088 × 128 × 512, …) another of the candidates cuBLASLt's heuristic lists is often
faster on the device (1.1-1.2× on some shapes of the H100).  ``tune`` times the default cuBLAS
call and each candidate once on the caller's arrays and keeps the winner for that signature in
this process; later calls of the signature run it (``lookup``).  Only a candidate that beats
the default by more than 2 % is kept, so an untuned or tied signature stays on cuBLAS.

Who tunes: the GEMMs of packed weights (``structured.KSPacked``, on their first call, as a
prepacked layer picks its kernels) and ``structured.tune``; ``KRONLINALG_GEMM_TUNE=all`` tunes
every signature on its first call, ``KRONLINALG_GEMM_TUNE=0`` none (cuBLAS's default always).  The library is
the libcublasLt that CuPy's cuBLAS loads; without it nothing here applies.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import statistics
import warnings

import numpy as np

_LIBRARIES = ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so")
# cublasLt.h enumerators
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_STRIDE = 5, 6
_PREF_MAX_WORKSPACE = 1
_PREF_MIN_ALIGN = (5, 6, 7, 8)  # A, B, C, D bytes
_CUDA_R_32F, _CUDA_R_64F = 0, 1
WORKSPACE_BYTES = 32 << 20  # NVIDIA's recommendation for Hopper
CANDIDATES = 16
MARGIN = 0.98  # a candidate must beat cuBLAS's default by 2 % to replace it
_SPIN_NS = 100_000  # ahead of each timed call: hides the host's enqueue time


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t),
                ("state", ctypes.c_int), ("waves", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


_FORCED = [0]  # > 0 inside tuning(): every signature is tuned


def enabled() -> bool:
    return os.environ.get("KRONLINALG_GEMM_TUNE", "1") != "0" and _library() is not None


def wanted(packed: bool) -> bool:
    """Whether a call's untuned GEMM signatures are tuned now."""
    return packed or _FORCED[0] > 0 or os.environ.get("KRONLINALG_GEMM_TUNE") == "all"


@contextlib.contextmanager
def tuning():
    """Tune every GEMM signature met inside (structured.tune)."""
    _FORCED[0] += 1
    try:
        yield
    finally:
        _FORCED[0] -= 1


@functools.cache
def _library():
    lib = None
    for name in _LIBRARIES:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return None
    vp, pvp, i32, sz = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                        ctypes.c_size_t)
    signatures = {
        "cublasLtCreate": [pvp],
        "cublasLtMatmulDescCreate": [pvp, i32, i32],
        "cublasLtMatmulDescSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatrixLayoutCreate": [pvp, i32, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.c_int64],
        "cublasLtMatrixLayoutSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatmulPreferenceCreate": [pvp],
        "cublasLtMatmulPreferenceSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, i32,
                                           ctypes.POINTER(_Heuristic), ctypes.POINTER(i32)],
        "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, sz, vp],
    }
    try:
        for name, argtypes in signatures.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, argtypes
    except AttributeError:
        return None
    return lib


def _check(status: int, what: str):
    if status != 0:
        raise RuntimeError(f"cuBLASLt {what} failed with status {status}")


def _create(fn, *args):
    handle = ctypes.c_void_p()
    _check(fn(ctypes.byref(handle), *args), fn.__name__)
    return handle


def _set(fn, obj, attr, value):
    _check(fn(obj, attr, ctypes.byref(value), ctypes.sizeof(value)), fn.__name__)


@functools.cache
def _handle(device: int):
    return _create(_library().cublasLtCreate)


_WORKSPACES: dict = {}  # (device, stream) -> CuPy buffer, kept alive


@functools.cache
def _workspace(device: int, stream: int) -> int:
    """Address of the scratch of the candidates that split the reduction, one per stream (calls
    on one stream are ordered, so they can share it)."""
    import cupy

    with cupy.cuda.Device(device):
        buf = _WORKSPACES[device, stream] = cupy.empty(WORKSPACE_BYTES, dtype=cupy.uint8)
    return buf.data.ptr


def _alignment(address: int, stride_bytes: int) -> int:
    """Largest power of two (≤ 256) dividing the address of every matrix of a strided batch."""
    both = address | stride_bytes | 256
    return both & -both


def signature(call, dtype_code: int, item: int) -> tuple:
    """What a tuned choice depends on: the GEMM's shape, layouts, batch and pointer alignment."""
    ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch = call
    return (dtype_code, ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, batch,
            _alignment(a, sa * item), _alignment(b, sb * item), _alignment(c, sc * item))


class _Plan:
    """A signature's cuBLASLt descriptors and the candidates its heuristic offers."""

    def __init__(self, sig, wide: bool):
        lib = _library()
        code, ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, batch, *aligns = sig
        compute = 70 if wide else 68  # CUBLAS_COMPUTE_64F / 32F
        self.desc = _create(lib.cublasLtMatmulDescCreate, compute,
                            _CUDA_R_64F if wide else _CUDA_R_32F)
        _set(lib.cublasLtMatmulDescSetAttribute, self.desc, _DESC_TRANSA, ctypes.c_int32(ta))
        _set(lib.cublasLtMatmulDescSetAttribute, self.desc, _DESC_TRANSB, ctypes.c_int32(tb))
        shapes = ((m, k, lda, sa) if ta == 0 else (k, m, lda, sa),
                  (k, n, ldb, sb) if tb == 0 else (n, k, ldb, sb), (m, n, ldc, sc))
        self.layouts = []
        for rows, cols, ld, stride in shapes:
            lay = _create(lib.cublasLtMatrixLayoutCreate, code, rows, cols, ld)
            if batch > 1:
                _set(lib.cublasLtMatrixLayoutSetAttribute, lay, _LAYOUT_BATCH_COUNT,
                     ctypes.c_int32(batch))
                _set(lib.cublasLtMatrixLayoutSetAttribute, lay, _LAYOUT_BATCH_STRIDE,
                     ctypes.c_int64(stride))
            self.layouts.append(lay)
        pref = _create(lib.cublasLtMatmulPreferenceCreate)
        _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, _PREF_MAX_WORKSPACE,
             ctypes.c_uint64(WORKSPACE_BYTES))
        for attr, align in zip(_PREF_MIN_ALIGN, (aligns[0], aligns[1], aligns[2], aligns[2])):
            _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, attr, ctypes.c_uint32(align))
        self.pref = pref  # kept alive with the plan
        scalar = np.float64 if wide else np.float32
        self.alpha, self.beta = np.ones(1, scalar), np.zeros(1, scalar)
        self.scalars = (self.alpha.ctypes.data, self.beta.ctypes.data)  # (host time per call)
        self.results = (_Heuristic * CANDIDATES)()
        self.algos = [ctypes.addressof(r.algo) for r in self.results]
        self.count, self.workspaces = 0, []
        self.choice = None  # index into results once tuned, None: cuBLAS's default
        self.times = ()  # tuning's ms: default, best candidate, candidates[, default, best again]

    def candidates(self, device: int) -> int:
        count = ctypes.c_int(0)
        a, b, c = self.layouts
        status = _library().cublasLtMatmulAlgoGetHeuristic(
            _handle(device), self.desc, a, b, c, c, self.pref, CANDIDATES, self.results,
            ctypes.byref(count))
        self.count = count.value if status == 0 else 0
        self.workspaces = [self.results[i].workspace for i in range(self.count)]
        return self.count

    def run(self, index: int, call, device: int, stream: int) -> int:
        a, b, c = call[5], call[8], call[11]
        la, lb, lc = self.layouts
        alpha, beta = self.scalars
        return _library().cublasLtMatmul(
            _handle(device), self.desc, alpha, a, la, b, lb, beta, c, lc, c, lc,
            self.algos[index], _workspace(device, stream), self.workspaces[index], stream)


_PLANS: dict = {}  # signature -> _Plan (tuned)
_FAILED: set = set()  # signatures whose tuning could not run (cuBLAS's default)


def lookup(sig):
    """The tuned plan of a signature whose winner is a cuBLASLt candidate, else None."""
    plan = _PLANS.get(sig)
    return plan if plan is not None and plan.choice is not None else None


def any_tuned() -> bool:
    return bool(_PLANS)


def is_tuned(sig) -> bool:
    return sig in _PLANS or sig in _FAILED


def clear():
    _PLANS.clear()
    _FAILED.clear()


def summary() -> list:
    """The tuned signatures: (signature, chosen candidate or None, tuning's times in ms)."""
    return [(sig, plan.choice, plan.times) for sig, plan in _PLANS.items()]


@functools.cache
def _spin_kernel():
    import cupy

    return cupy.RawKernel(r"""
    extern "C" __global__ void kl_gemm_tune_spin(unsigned long long ns) {
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    }""", "kl_gemm_tune_spin")


def _device_times(runs, spin, rounds):
    """Median device time of one call of each of `runs`, each call timed alone between two
    events queued behind a spinning kernel (so that the host's enqueue time is not counted and
    each call starts on an idle device, as a caller's does)."""
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    samples = [[] for _ in runs]
    for _ in range(rounds):  # interleaved: a drift of the clocks touches every candidate alike
        for fn, out in zip(runs, samples):
            spin((1,), (1,), (np.uint64(_SPIN_NS),))
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            out.append(cupy.cuda.get_elapsed_time(start, stop))
    return [statistics.median(t) for t in samples]


def tune(sig, call, default, *, wide: bool, device: int, stream: int, rounds=7):
    """Time cuBLAS's default (``default()``, one call) and each cuBLASLt candidate on this call's
    pointers (its output is overwritten; the caller runs the call afterwards), then the best
    candidate against the default once more, and record the winner for sig: the candidate only
    where both timings put it 2 % ahead.  Runs on CuPy's current stream, which must be
    `stream`.  Tuning never fails a product: where it cannot run, the signature keeps cuBLAS's
    default (with a warning)."""
    try:
        return _tune(sig, call, default, wide, device, stream, rounds)
    except Exception as exc:  # (no NVRTC for the timing kernel, a cuBLASLt error, ...)
        warnings.warn(f"kronlinalg: GEMM algorithm tuning failed ({exc!r}); this GEMM keeps "
                      "cuBLAS's default", RuntimeWarning, stacklevel=3)
        _FAILED.add(sig)
        return None


def _tune(sig, call, default, wide, device, stream, rounds):
    plan = _Plan(sig, wide)
    indices = [i for i in range(plan.candidates(device))
               if plan.results[i].state == 0 and plan.run(i, call, device, stream) == 0]
    runs = [default] + [functools.partial(plan.run, i, call, device, stream) for i in indices]
    spin = _spin_kernel()
    times = _device_times(runs, spin, rounds)
    best = min(range(1, len(times)), key=times.__getitem__, default=None)
    plan.times = (times[0], times[best] if best else None, len(indices))
    if best is not None and times[best] < MARGIN * times[0]:
        again = _device_times([runs[0], runs[best]], spin, rounds)
        plan.times += tuple(again)
        if again[1] < MARGIN * again[0]:
            plan.choice = indices[best - 1]
    _PLANS[sig] = plan
    return plan if plan.choice is not None else None
