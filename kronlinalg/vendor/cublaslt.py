"""cuBLASLt GEMMs with a measured choice of algorithm, per GEMM signature (TunableOp-style).

cuBLAS picks one algorithm per GEMM shape by heuristic; for the thin GEMMs of Kronecker-sparse
products (25088 × 128 × 512, …) another of the candidates cuBLASLt's heuristic lists is often
faster on the device (1.1-1.2× on some shapes of the H100).  ``tune`` times the default cuBLAS
call and each candidate on the caller's arrays, then searches beyond the list: two steps from
the fastest configurations to their neighbours (another custom option, cluster shape or tile
of the same algorithm, accepted by cublasLtMatmulAlgoCheck; on an H100 another 3-10 % on thin
GEMMs), within a budget of host time per signature (``KRONLINALG_GEMM_SEARCH_BUDGET`` seconds,
default 0.15; ``KRONLINALG_GEMM_SEARCH=0``: the heuristic's list only).  It keeps the winner
for that signature in this process; later calls of the signature run it (``lookup``).  Only
a configuration that beats the default by more than 2 % is kept, so an untuned or tied
signature stays on cuBLAS.  With ``KRONLINALG_GEMM_CACHE=path`` the choices also go to that
file and later processes adopt them instead of tuning again (``_gemm_cache``).

Who tunes: the GEMMs of packed weights (``structured.KSPacked``, on their first call, as a
prepacked layer picks its kernels) and ``structured.tune``; ``KRONLINALG_GEMM_TUNE=all`` tunes
every signature on its first call, ``KRONLINALG_GEMM_TUNE=0`` none (cuBLAS's default always).
The library is the libcublasLt that CuPy's cuBLAS loads; without it nothing here applies.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import statistics
import time
import warnings

import numpy as np

from ..common import config
from . import gemm_cache as _gemm_cache

_LIBRARIES = ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so")
# cublasLt.h enumerators
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_STRIDE = 5, 6
_PREF_MAX_WORKSPACE = 1
_PREF_MIN_ALIGN = (5, 6, 7, 8)  # A, B, C, D bytes
_CUDA_R_32F, _CUDA_R_64F = 0, 1
WORKSPACE_BYTES = 32 << 20  # NVIDIA's recommendation for Hopper
CANDIDATES = 16
SEARCH_STEPS = 2  # steps of the search around the fastest candidates (see _tune)
# configurations whose neighbours each step adds.  A neighbourhood is ~140-200 configurations
# that cuBLASLt accepts (of ~630 tiles listed) and each one's first run on a GEMM costs ~2 ms of
# host time, most of the search's cost: two seeds and two steps in full took 0.4-0.8 s per GEMM
# signature on an H100, one seed about half but it lost most of the gain (25088 x 64 x 256
# float16: 0.0073 ms against 0.0068-0.0071 with two; cuBLAS 0.0076-0.0079).  So two seeds,
# their cheap neighbours (custom options, cluster shapes) first, within a time budget.
SEEDS = 2
SEARCH_BUDGET_S = 0.15
SCREEN_ROUNDS = 2
FINALISTS = 6
MARGIN = 0.98  # a candidate must beat cuBLAS's default by 2 % to replace it
_SPIN_NS = 100_000  # ahead of each timed call: hides the host's enqueue time
_SCREEN_SPIN_NS = 50_000  # (the search's screening: longer than one call's enqueue)


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t),
                ("state", ctypes.c_int), ("waves", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


_FORCED = [0]  # > 0 inside tuning(): every signature is tuned


def enabled() -> bool:
    return config.get("KRONLINALG_GEMM_TUNE") != "0" and _library() is not None


def wanted(packed: bool) -> bool:
    """Whether a call's untuned GEMM signatures are tuned now."""
    return packed or _FORCED[0] > 0 or config.get("KRONLINALG_GEMM_TUNE") == "all"


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
        "cublasLtMatmulAlgoCheck": [vp, vp, vp, vp, vp, vp, vp, ctypes.POINTER(_Heuristic)],
        "cublasLtMatmulAlgoCapGetAttribute": [vp, i32, vp, sz, ctypes.POINTER(sz)],
        "cublasLtMatmulAlgoConfigGetAttribute": [vp, i32, vp, sz, ctypes.POINTER(sz)],
        "cublasLtMatmulAlgoConfigSetAttribute": [vp, i32, vp, sz],
    }
    try:
        for name, argtypes in signatures.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, argtypes
        lib.cublasLtGetVersion.restype, lib.cublasLtGetVersion.argtypes = ctypes.c_size_t, []
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
        self.heuristic = (_Heuristic * CANDIDATES)()
        self.results, self.algos, self.workspaces = [], [], []  # heuristic's, then searched
        self.count = 0
        self.seen: set = set()  # configurations already among the results
        self.choice = None  # index into results once tuned, None: cuBLAS's default
        self.times = ()  # tuning's ms: default, best candidate, candidates[, default, best again]

    def candidates(self, device: int) -> int:
        count = ctypes.c_int(0)
        a, b, c = self.layouts
        status = _library().cublasLtMatmulAlgoGetHeuristic(
            _handle(device), self.desc, a, b, c, c, self.pref, CANDIDATES, self.heuristic,
            ctypes.byref(count))
        self.count = count.value if status == 0 else 0
        for i in range(self.count):
            self._add(self.heuristic[i])
        return self.count

    def _add(self, result):
        self.results.append(result)
        self.algos.append(ctypes.addressof(result.algo))
        self.workspaces.append(result.workspace)
        self.seen.add(bytes(result.algo))

    def _accept(self, device: int, trial) -> bool:
        """Append the configuration in `trial` where cuBLASLt accepts it for this GEMM (within
        the workspace); whether it did."""
        checked = _Heuristic()
        a, b, c = self.layouts
        if (_library().cublasLtMatmulAlgoCheck(_handle(device), self.desc, a, b, c, c,
                                               ctypes.byref(trial.algo),
                                               ctypes.byref(checked)) != 0
                or checked.state != 0 or checked.workspace > WORKSPACE_BYTES):
            return False
        trial.workspace, trial.state = checked.workspace, 0
        self._add(trial)
        return True

    def adopt(self, device: int, raw: bytes):
        """Append the configuration whose descriptor bytes are `raw` (a cached choice) where
        cuBLASLt accepts it for this GEMM; its index, or None."""
        trial = _Heuristic()
        if len(raw) != ctypes.sizeof(trial.algo):
            return None
        ctypes.memmove(ctypes.addressof(trial.algo), raw, len(raw))
        return len(self.results) - 1 if self._accept(device, trial) else None

    def neighbours(self, device: int, seeds) -> list:
        """Append to the results every configuration one attribute away from the seeds (indices
        into the results) that cuBLASLt accepts for this GEMM (_variants).  Returns the new
        indices, every seed's other custom options and cluster shapes first, tiles last."""
        lib = _library()
        added = []
        # every seed's custom options and cluster shapes before any seed's tiles
        per_seed = [[(seed, attr, value) for attr, value in _variants(self.results[seed].algo)]
                    for seed in seeds]
        ordered = sorted((v for vs in per_seed for v in vs), key=lambda v: v[1] == _TILE)
        for seed, attr, value in ordered:
            algo = self.results[seed].algo
            trial = _Heuristic()
            ctypes.memmove(ctypes.addressof(trial.algo), ctypes.addressof(algo),
                           ctypes.sizeof(trial.algo))
            width = _CONFIG_WIDTH[attr]
            word = (ctypes.c_uint16 if width == 2 else ctypes.c_uint32)(value)
            if lib.cublasLtMatmulAlgoConfigSetAttribute(
                    ctypes.byref(trial.algo), attr, ctypes.byref(word), width) != 0:
                continue
            key = bytes(trial.algo)
            if key in self.seen:
                continue
            self.seen.add(key)  # (turned down or not: never checked twice)
            if self._accept(device, trial):
                added.append(len(self.results) - 1)
        return added

    def run(self, index: int, call, device: int, stream: int) -> int:
        a, b, c = call[5], call[8], call[11]
        la, lb, lc = self.layouts
        alpha, beta = self.scalars
        return _library().cublasLtMatmul(
            _handle(device), self.desc, alpha, a, la, b, lb, beta, c, lc, c, lc,
            self.algos[index], _workspace(device, stream), self.workspaces[index], stream)


# cublasLtMatmulAlgoConfigAttributes_t: the algorithm, its tile, custom option and cluster shape
# (16-bit), the attributes the search varies: over the a = d = 1 GEMMs of the structured
# benchmark on an H100 (benchmarks/gemm_lt_probe.py, two steps from the two fastest of the
# heuristic's list, every attribute varied), every configuration that beat the heuristic's
# fastest differed from it in these alone (stages, split-K, swizzle, inner shape never won)
_ID, _TILE, _CUSTOM, _CLUSTER = 0, 1, 5, 8
_CONFIG_WIDTH = {_ID: 4, _TILE: 4, _CUSTOM: 4, _CLUSTER: 2}
_CAP_TILES, _CAP_CUSTOM_MAX = 6, 7  # cublasLtMatmulAlgoCapAttributes_t
_CLUSTERS = range(0, 17)  # cublasLtClusterShape_t up to 1x16x1 (AlgoCheck turns down the rest)


def _config(algo, attr: int) -> int:
    word = (ctypes.c_uint16 if _CONFIG_WIDTH[attr] == 2 else ctypes.c_uint32)(0)
    written = ctypes.c_size_t(0)
    _library().cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), attr, ctypes.byref(word),
                                                    _CONFIG_WIDTH[attr], ctypes.byref(written))
    return word.value


def _cap_scalar(algo, cap: int) -> int:
    word, written = ctypes.c_uint32(0), ctypes.c_size_t(0)
    status = _library().cublasLtMatmulAlgoCapGetAttribute(
        ctypes.byref(algo), cap, ctypes.byref(word), 4, ctypes.byref(written))
    return word.value if status == 0 else 0


def _cap_list(algo, cap: int) -> list:
    lib, size = _library(), ctypes.c_size_t(0)
    if lib.cublasLtMatmulAlgoCapGetAttribute(ctypes.byref(algo), cap, None, 0,
                                             ctypes.byref(size)) != 0:
        return []
    words = (ctypes.c_uint32 * max(1, size.value // 4))()
    if lib.cublasLtMatmulAlgoCapGetAttribute(ctypes.byref(algo), cap, words, ctypes.sizeof(words),
                                             ctypes.byref(size)) != 0:
        return []
    return list(words[: size.value // 4])


def _variants(algo):
    """(attribute, value) for each configuration one step from algo's: another custom option,
    cluster shape or tile (in that order: the few cheap ones first, the ~600 tiles last)."""
    out = [(_CUSTOM, custom) for custom in range(min(_cap_scalar(algo, _CAP_CUSTOM_MAX), 7) + 1)]
    out += [(_CLUSTER, cluster) for cluster in _CLUSTERS]
    out += [(_TILE, tile) for tile in _cap_list(algo, _CAP_TILES)]
    now = {attr: _config(algo, attr) for attr in (_TILE, _CUSTOM, _CLUSTER)}
    return [(attr, value) for attr, value in out if value != now[attr]]


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


def _device_times(runs, spin, rounds, screen=False, spin_ns=None):
    """Median device time of one call of each of `runs`, each call timed alone between two
    events queued behind a spinning kernel (so that the host's enqueue time is not counted and
    each call starts on an idle device, as a caller's does).  `screen` (the search's many
    configurations): a round's calls are queued without waiting for one another, each spin
    covering the host's enqueue of the next call, and read after one wait.  `spin_ns`: the
    spin's length where the default (0.1 ms; 0.05 ms screening) is too short for a call's host
    time."""
    import cupy

    samples = [[] for _ in runs]
    spin_ns = np.uint64(spin_ns or (_SCREEN_SPIN_NS if screen else _SPIN_NS))
    for _ in range(rounds):  # interleaved: a drift of the clocks touches every candidate alike
        marks = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in runs]
        for fn, (start, stop) in zip(runs, marks):
            spin((1,), (1,), (spin_ns,))
            start.record()
            fn()
            stop.record()
            if not screen:
                stop.synchronize()
        if marks:
            marks[-1][1].synchronize()
        for out, (start, stop) in zip(samples, marks):
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


def search_steps() -> int:
    """Neighbourhood-search steps beyond the heuristic's candidates (KRONLINALG_GEMM_SEARCH,
    default SEARCH_STEPS; 0: the heuristic's list only)."""
    value = config.get("KRONLINALG_GEMM_SEARCH")
    return int(value) if value.isdigit() else SEARCH_STEPS


def search_budget() -> float:
    """Seconds of host time the search may spend trying configurations per GEMM signature
    (KRONLINALG_GEMM_SEARCH_BUDGET, default SEARCH_BUDGET_S)."""
    return max(0.0, float(config.get("KRONLINALG_GEMM_SEARCH_BUDGET")))


@functools.cache
def _scope(device: int) -> str:
    """What a cached choice holds for: the device's name and compute capability, and the
    cuBLASLt version (its descriptors are only valid for the version that made them)."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{name} sm{props['major']}{props['minor']} cublasLt {_library().cublasLtGetVersion()}"


def _from_cache(sig, call, wide, device, stream):
    """The plan of a choice recorded in the cache file (see _gemm_cache), or None: no entry,
    or a configuration this cuBLASLt no longer accepts or runs (then the signature is tuned)."""
    if _gemm_cache.path() is None:
        return None
    entry = _gemm_cache.get(_scope(device), sig)
    if entry is None:
        return None
    plan = _Plan(sig, wide)
    plan.times = ("cached",)
    if entry["algo"] is None:
        return plan
    try:
        raw = bytes.fromhex(entry["algo"])
    except (TypeError, ValueError):
        return None
    index = plan.adopt(device, raw)
    if index is None or plan.run(index, call, device, stream) != 0:
        return None
    plan.choice = index
    return plan


def _tune(sig, call, default, wide, device, stream, rounds):
    cached = _from_cache(sig, call, wide, device, stream)
    if cached is not None:
        _PLANS[sig] = cached
        return cached if cached.choice is not None else None
    plan = _Plan(sig, wide)
    spin = _spin_kernel()

    def runnable(indices, deadline=None):
        # each run once (a configuration that fails is dropped); a configuration's first run
        # on a GEMM costs ~2 ms of host time, so the search stops trying new ones at a deadline
        ok = []
        for i in indices:
            if deadline is not None and time.perf_counter() > deadline:
                break
            if plan.results[i].state == 0 and plan.run(i, call, device, stream) == 0:
                ok.append(i)
        return ok

    def calls(indices):
        return [functools.partial(plan.run, i, call, device, stream) for i in indices]

    indices = runnable(range(plan.candidates(device)))
    steps = search_steps()
    if steps and indices:
        # screen the heuristic's list, then step from the fastest configuration not yet
        # stepped from to its neighbours (another tile, custom option or cluster shape), two
        # rounds each; the finalists are timed as the heuristic's list is without the search
        deadline = time.perf_counter() + search_budget()

        def screen(indices):
            return dict(zip(indices, _device_times(calls(indices), spin, SCREEN_ROUNDS, True)))

        screened = screen(indices)
        expanded: set = set()
        for _ in range(steps):
            seeds = [i for i in sorted(screened, key=screened.get) if i not in expanded][:SEEDS]
            expanded.update(seeds)
            fresh = runnable(plan.neighbours(device, seeds), deadline)
            if not fresh:
                break
            screened.update(screen(fresh))
        indices = sorted(screened, key=screened.get)[:FINALISTS]
    runs = [default] + calls(indices)
    times = _device_times(runs, spin, rounds)
    best = min(range(1, len(times)), key=times.__getitem__, default=None)
    plan.times = (times[0], times[best] if best else None, len(plan.results))
    if best is not None and times[best] < MARGIN * times[0]:
        again = _device_times([runs[0], runs[best]], spin, rounds)
        plan.times += tuple(again)
        if again[1] < MARGIN * again[0]:
            plan.choice = indices[best - 1]
    _PLANS[sig] = plan
    if _gemm_cache.path() is not None:
        chosen = None if plan.choice is None else plan.results[plan.choice]
        _gemm_cache.put(_scope(device), sig, None if chosen is None else chosen.algo,
                        0 if chosen is None else chosen.workspace)
    return plan if plan.choice is not None else None
