"""cuBLASLt algorithm choice for the strided GEMMs (kronlinalg._cublaslt).

Every candidate cuBLASLt's heuristic offers for a GEMM must compute that GEMM: each is run on
strided batches with offset (less aligned) pointers in every dtype and compared with a float64
reference, its output poisoned first.  The tuning pass must record its choice and leave the
result right; the bookkeeping (signatures, alignment) is checked on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from kronlinalg.vendor import cublaslt

# (trans_a, trans_b, m, n, k, batch, element offset of A, B, C)
GEMMS = [(1, 0, 48, 301, 40, 1, 0, 0, 0), (0, 0, 203, 24, 56, 3, 8, 0, 8),
         (1, 0, 96, 130, 64, 4, 16, 8, 0), (0, 1, 33, 72, 48, 2, 0, 0, 0)]


def test_alignment_is_the_largest_power_of_two_of_every_matrix():
    assert cublaslt._alignment(0x1000, 0) == 256
    assert cublaslt._alignment(0x1000 + 16, 4096) == 16
    assert cublaslt._alignment(0x1000, 2 * 37) == 2  # the batch's second matrix decides
    assert cublaslt._alignment(0x1008, 64) == 8


def test_signature_tells_apart_what_a_choice_depends_on():
    call = (1, 0, 48, 300, 40, 0x1000, 40, 0, 0x2000, 40, 0, 0x3000, 48, 0, 1)
    sig = cublaslt.signature(call, 2, 2)
    moved = call[:5] + (0x1002,) + call[6:]  # same shapes, A 2-byte aligned
    assert cublaslt.signature(moved, 2, 2) != sig
    same = call[:5] + (0x7000,) + call[6:]  # another 256-byte aligned address
    assert cublaslt.signature(same, 2, 2) == sig
    assert cublaslt.signature(call, 0, 4) != sig


def test_tuning_off_by_environment(monkeypatch):
    monkeypatch.setenv("KRONLINALG_GEMM_TUNE", "0")
    assert not cublaslt.enabled()
    monkeypatch.setenv("KRONLINALG_GEMM_TUNE", "all")
    assert cublaslt.wanted(False)
    monkeypatch.delenv("KRONLINALG_GEMM_TUNE")
    assert cublaslt.wanted(True) and not cublaslt.wanted(False)
    with cublaslt.tuning():
        assert cublaslt.wanted(False)
    assert not cublaslt.wanted(False)


def _cupy_or_skip():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device")
    except Exception:
        pytest.skip("no CUDA device")
    from kronlinalg.vendor import cublas

    if not (cublas.available() and cublaslt.enabled()):
        pytest.skip("cuBLASLt not loadable")
    return cupy


def _operands(cupy, rng, gemm, dtype):
    """Column-major operands of one strided-batched GEMM, as float64 host copies and device
    buffers (bfloat16 as its 16-bit words), each matrix starting at the given offset."""
    ta, tb, m, n, k, batch, off_a, off_b, off_c = gemm
    rows_a, cols_a = (m, k) if ta == 0 else (k, m)
    rows_b, cols_b = (k, n) if tb == 0 else (n, k)
    lda, ldb, ldc = rows_a + 3, rows_b + 1, m + 5
    sa, sb, sc = lda * cols_a + 7, ldb * cols_b, ldc * n + 2
    host = []
    device = []
    for (rows, cols, ld, stride, off) in ((rows_a, cols_a, lda, sa, off_a),
                                          (rows_b, cols_b, ldb, sb, off_b)):
        flat = rng.standard_normal(off + stride * batch).astype(np.float32)
        if dtype == "bfloat16":
            words = (flat.view(np.uint32) + 0x8000 >> 16).astype(np.uint16)
            flat = (words.astype(np.uint32) << 16).view(np.float32)
            buf = cupy.asarray(words)
        else:
            flat = flat.astype(dtype)
            buf = cupy.asarray(flat)
        mats = [np.asarray(flat[off + i * stride: off + i * stride + ld * cols], np.float64)
                .reshape(cols, ld).T[:rows] for i in range(batch)]
        host.append(mats)
        device.append(buf)
    itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    if dtype == "bfloat16":
        c_buf = cupy.full(off_c + sc * batch, 0x7FC0, cupy.uint16)  # bfloat16 NaN
    else:
        c_buf = cupy.full(off_c + sc * batch, np.nan, dtype)
    ptr = lambda buf, off: buf.data.ptr + off * itemsize  # noqa: E731
    call = (ta, tb, m, n, k, ptr(device[0], off_a), lda, sa, ptr(device[1], off_b), ldb, sb,
            ptr(c_buf, off_c), ldc, sc, batch)
    refs = [(a if ta == 0 else a.T) @ (b if tb == 0 else b.T) for a, b in zip(*host)]
    return call, refs, (c_buf, off_c, ldc, sc), device


def _result(cupy, out, gemm, dtype):
    c_buf, off, ldc, sc = out
    _, _, m, n, _, batch, *_ = gemm
    flat = cupy.asnumpy(c_buf)
    if dtype == "bfloat16":
        flat = (flat.astype(np.uint32) << 16).view(np.float32)
    return [np.asarray(flat[off + i * sc: off + i * sc + ldc * n], np.float64)
            .reshape(n, ldc).T[:m] for i in range(batch)]


_RTOL = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-5, "float64": 1e-12}
_CODES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 14}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_every_candidate_computes_the_gemm(rng, dtype):
    cupy = _cupy_or_skip()
    stream = cupy.cuda.get_current_stream().ptr
    device = cupy.cuda.runtime.getDevice()
    for gemm in GEMMS:
        call, refs, out, keep = _operands(cupy, rng, gemm, dtype)
        itemsize = 2 if dtype in ("float16", "bfloat16") else np.dtype(dtype).itemsize
        sig = cublaslt.signature(call, _CODES[dtype], itemsize)
        plan = cublaslt._Plan(sig, dtype == "float64")
        count = plan.candidates(device)
        assert count > 0, f"{gemm} {dtype}: no cuBLASLt candidate"
        ran = 0
        for i in range(count):
            out[0].fill(0x7FC0 if dtype == "bfloat16" else np.nan)
            if plan.results[i].state != 0 or plan.run(i, call, device, stream) != 0:
                continue
            ran += 1
            got = _result(cupy, out, gemm, dtype)
            for g, r in zip(got, refs):
                err = np.abs(g - r).max() / np.abs(r).max()
                assert err <= _RTOL[dtype], f"{gemm} {dtype} candidate {i}: rel err {err:.2e}"
        assert ran > 0, f"{gemm} {dtype}: no candidate ran"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_every_searched_configuration_computes_the_gemm(rng, dtype):
    """The tuning's search steps from the heuristic's first candidate to configurations
    cuBLASLt accepts (other tiles, stages, splits of the reduction, cluster shapes, ...): each
    of those that runs must compute the GEMM too, on the same less-aligned strided batches."""
    cupy = _cupy_or_skip()
    stream = cupy.cuda.get_current_stream().ptr
    device = cupy.cuda.runtime.getDevice()
    itemsize = 2 if dtype in ("float16", "bfloat16") else 4
    searched = 0
    for gemm in GEMMS[:3]:
        call, refs, out, keep = _operands(cupy, rng, gemm, dtype)
        plan = cublaslt._Plan(cublaslt.signature(call, _CODES[dtype], itemsize), False)
        assert plan.candidates(device) > 0
        fresh = plan.neighbours(device, [0])
        assert len(plan.results) == plan.count + len(fresh)
        assert plan.neighbours(device, [0]) == []  # (nothing twice)
        for i in fresh:
            out[0].fill(0x7FC0 if dtype == "bfloat16" else np.nan)
            if plan.run(i, call, device, stream) != 0:
                continue
            searched += 1
            for g, r in zip(_result(cupy, out, gemm, dtype), refs):
                err = np.abs(g - r).max() / np.abs(r).max()
                assert err <= _RTOL[dtype], f"{gemm} {dtype} configuration {i}: rel err {err:.2e}"
    assert searched > 0, f"{dtype}: the search found no other configuration"


@pytest.mark.gpu
def test_a_configuration_adopted_from_its_bytes_computes_the_gemm(rng):
    """What the cache file keeps (a configuration's descriptor bytes) gives back a runnable
    configuration on a new plan of the same signature; bytes of the wrong size do not."""
    cupy = _cupy_or_skip()
    stream = cupy.cuda.get_current_stream().ptr
    device = cupy.cuda.runtime.getDevice()
    gemm = GEMMS[2]
    call, refs, out, keep = _operands(cupy, rng, gemm, "float16")
    sig = cublaslt.signature(call, 2, 2)
    first = cublaslt._Plan(sig, False)
    assert first.candidates(device) > 0
    found = first.neighbours(device, [0])
    raw = bytes((first.results[found[-1]] if found else first.results[0]).algo)
    plan = cublaslt._Plan(sig, False)
    assert plan.adopt(device, raw[:-8]) is None
    index = plan.adopt(device, raw)
    assert index is not None
    out[0].fill(np.nan)
    assert plan.run(index, call, device, stream) == 0
    for g, r in zip(_result(cupy, out, gemm, "float16"), refs):
        assert np.abs(g - r).max() / np.abs(r).max() <= _RTOL["float16"]


@pytest.mark.gpu
def test_tuning_records_a_choice_and_keeps_the_result(rng):
    cupy = _cupy_or_skip()
    from kronlinalg.vendor import cublas

    stream = cupy.cuda.get_current_stream().ptr
    device = cupy.cuda.runtime.getDevice()
    cublaslt.clear()
    for gemm in GEMMS:
        call, refs, out, keep = _operands(cupy, rng, gemm, "float16")
        sig = cublaslt.signature(call, 2, 2)
        assert not cublaslt.is_tuned(sig)
        cublas.gemm_strided_batched([call], dtype="float16", device=device, stream=stream,
                                     cupy_owned=True, tune=True)
        assert cublaslt.is_tuned(sig)
        for g, r in zip(_result(cupy, out, gemm, "float16"), refs):
            assert np.abs(g - r).max() / np.abs(r).max() <= _RTOL["float16"], gemm
        out[0].fill(np.nan)  # again through the recorded choice
        cublas.gemm_strided_batched([call], dtype="float16", device=device, stream=stream,
                                     cupy_owned=True)
        for g, r in zip(_result(cupy, out, gemm, "float16"), refs):
            assert np.abs(g - r).max() / np.abs(r).max() <= _RTOL["float16"], gemm
    cublaslt.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ("batch_first", "batch_last"))
def test_packed_dense_runs_a_tuned_gemm(rng, layout):
    """Packed weights' dense product goes through one tuned GEMM (its signature recorded) and
    matches a float64 reference; the same chain unpacked tunes nothing."""
    cupy = _cupy_or_skip()
    from kronlinalg import structured

    cublaslt.clear()
    chain = structured.KSChain.random([(1, 48, 40, 3), (2, 20, 24, 3)], rng=rng, xp=cupy,
                                      dtype=cupy.float16)
    m, n = chain.shape
    x = cupy.asarray(rng.standard_normal((301, n) if layout == "batch_first" else (n, 301)),
                     dtype=cupy.float16)
    w = cupy.asnumpy(chain.to_dense()).astype(np.float64)
    xn = cupy.asnumpy(x).astype(np.float64)
    ref = xn @ w.T if layout == "batch_first" else w @ xn
    structured.structured_matmul(x, chain, layout=layout, algorithm="dense")
    assert cublaslt.summary() == []
    packed = structured.KSPacked(chain)
    for _ in range(2):  # the tuning call, then the recorded choice
        y = cupy.asnumpy(structured.structured_matmul(x, packed, layout=layout,
                                                      algorithm="dense")).astype(np.float64)
        assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-2
        assert len(cublaslt.summary()) == 1
    cublaslt.clear()


@pytest.mark.parametrize("name, reader, default, cases", [
    ("KRONLINALG_GEMM_SEARCH", "search_steps", "SEARCH_STEPS", [("0", 0), ("3", 3)]),
    ("KRONLINALG_GEMM_SEARCH_BUDGET", "search_budget", "SEARCH_BUDGET_S",
     [("0.5", 0.5), ("-1", 0.0)]),
])
def test_search_settings_follow_the_environment(monkeypatch, name, reader, default, cases):
    """Unset or unreadable: the default; else the value (a budget never below 0)."""
    read, fallback = getattr(cublaslt, reader), getattr(cublaslt, default)
    monkeypatch.delenv(name, raising=False)
    assert read() == fallback
    for text, value in cases:
        monkeypatch.setenv(name, text)
        assert read() == value
    monkeypatch.setenv(name, "lots")
    assert read() == fallback


def test_a_tuning_that_cannot_run_keeps_the_default(monkeypatch):
    """Tuning never fails a product: an error inside it warns, records the signature as tuned
    (no second attempt) with no plan, and the caller runs cuBLAS's default."""
    def broken(*args, **kwargs):
        raise RuntimeError("no cuBLASLt here")

    monkeypatch.setattr(cublaslt, "_Plan", broken)
    cublaslt.clear()
    sig = ("test", 1)
    with pytest.warns(RuntimeWarning, match="tuning failed"):
        assert cublaslt.tune(sig, None, lambda: None, wide=False, device=0, stream=0) is None
    assert cublaslt.is_tuned(sig) and cublaslt.lookup(sig) is None
    assert cublaslt.summary() == []
    cublaslt.clear()
    assert not cublaslt.is_tuned(sig)


class _FakePlan:
    """A stand-in for _Plan with known device times: configurations 0-2 are the heuristic's
    list, neighbours(seeds) adds each seed's `children` (fresh indices) once."""

    cost: dict = {}
    children: dict = {}

    reject = False  # adopt() turns every cached configuration down

    def __init__(self, sig, wide):
        self.results, self.times, self.choice, self.expanded = [], (), None, []

    @staticmethod
    def _config(i):
        return type("R", (), {"state": 0, "algo": bytes([i]) * 64, "workspace": 16 * i})()

    def candidates(self, device):
        self.results = [self._config(i) for i in range(3)]
        return 3

    def adopt(self, device, raw):
        if self.reject:
            return None
        self.results.append(self._config(raw[0]))
        return len(self.results) - 1

    def neighbours(self, device, seeds):
        self.expanded.append(list(seeds))
        added = []
        for seed in seeds:
            for child in self.children.get(seed, ()):
                if child >= len(self.results):
                    self.results.extend(self._config(i)
                                        for i in range(len(self.results), child + 1))
                    added.append(child)
        return added

    def run(self, index, call, device, stream):
        return 0


def _fake_tuning(monkeypatch, cost, children, default_ms):
    _FakePlan.cost, _FakePlan.children, _FakePlan.reject = cost, children, False
    monkeypatch.delenv("KRONLINALG_GEMM_CACHE", raising=False)
    monkeypatch.setattr(cublaslt, "_scope", lambda device: "fake device")

    def times(runs, spin, rounds, screen=False):
        return [default_ms if not hasattr(fn, "args") else cost[fn.args[0]] for fn in runs]

    monkeypatch.setattr(cublaslt, "_Plan", _FakePlan)
    monkeypatch.setattr(cublaslt, "_spin_kernel", lambda: None)
    monkeypatch.setattr(cublaslt, "_device_times", times)
    cublaslt.clear()


def _tune_fake(sig):
    plan = cublaslt._tune(sig, (), lambda: None, False, 0, 0, 7)
    return plan, cublaslt._PLANS[sig]


def test_search_steps_from_the_fastest_to_a_better_neighbour(monkeypatch):
    """Each step expands the two fastest configurations not expanded yet (the heuristic's
    list first, then what the search found); the best wins where it beats the default by 2 %."""
    monkeypatch.delenv("KRONLINALG_GEMM_SEARCH", raising=False)
    monkeypatch.delenv("KRONLINALG_GEMM_SEARCH_BUDGET", raising=False)
    cost = {0: 1.00, 1: 0.97, 2: 0.99, 3: 0.95, 4: 1.2, 5: 0.90}
    _fake_tuning(monkeypatch, cost, {1: [3], 2: [4], 3: [5]}, default_ms=1.0)
    plan, recorded = _tune_fake(("fake", 1))
    assert recorded.expanded == [[1, 2], [3, 0]]
    assert plan is recorded and plan.choice == 5
    cublaslt.clear()


def test_search_off_keeps_to_the_heuristic_list(monkeypatch):
    monkeypatch.setenv("KRONLINALG_GEMM_SEARCH", "0")
    _fake_tuning(monkeypatch, {0: 1.0, 1: 0.97, 2: 0.99, 3: 0.5}, {1: [3]}, default_ms=1.0)
    plan, recorded = _tune_fake(("fake", 2))
    assert recorded.expanded == [] and plan.choice == 1
    cublaslt.clear()


def test_search_stops_at_its_budget(monkeypatch):
    """Past the deadline no configuration is tried: the choice stays among the heuristic's."""
    monkeypatch.delenv("KRONLINALG_GEMM_SEARCH", raising=False)
    monkeypatch.setenv("KRONLINALG_GEMM_SEARCH_BUDGET", "0")
    clock = iter(range(10**6))
    monkeypatch.setattr(cublaslt.time, "perf_counter", lambda: float(next(clock)))
    _fake_tuning(monkeypatch, {0: 1.0, 1: 0.97, 2: 0.99, 3: 0.5}, {1: [3]}, default_ms=1.0)
    plan, recorded = _tune_fake(("fake", 3))
    assert plan.choice == 1 and recorded.expanded == [[1, 2]]
    cublaslt.clear()


def test_a_configuration_within_two_percent_of_the_default_is_not_kept(monkeypatch):
    monkeypatch.delenv("KRONLINALG_GEMM_SEARCH", raising=False)
    monkeypatch.delenv("KRONLINALG_GEMM_SEARCH_BUDGET", raising=False)
    _fake_tuning(monkeypatch, {0: 0.99, 1: 0.995, 2: 1.1, 3: 0.985}, {0: [3]}, default_ms=1.0)
    plan, recorded = _tune_fake(("fake", 4))
    assert plan is None and recorded.choice is None
    assert cublaslt.is_tuned(("fake", 4)) and cublaslt.lookup(("fake", 4)) is None
    cublaslt.clear()


def test_tuned_choices_go_to_the_cache_file_and_come_back(monkeypatch, tmp_path):
    """With KRONLINALG_GEMM_CACHE, a tuning writes its choice (the winner's descriptor, or the
    default); a later process (what it had read forgotten) adopts it without timing anything,
    and tunes again where cuBLASLt turns the cached configuration down."""
    from kronlinalg.vendor import gemm_cache

    monkeypatch.delenv("KRONLINALG_GEMM_SEARCH", raising=False)
    cost = {0: 1.0, 1: 0.97, 2: 0.99, 3: 0.9}
    _fake_tuning(monkeypatch, cost, {1: [3]}, default_ms=1.0)
    monkeypatch.setenv("KRONLINALG_GEMM_CACHE", str(tmp_path / "gemm.json"))
    gemm_cache.forget()
    plan, _ = _tune_fake(("fake", 5))
    assert plan.choice == 3
    cost.update({1: 0.999, 2: 0.999, 3: 0.995})  # within 2 %: the default stays
    assert _tune_fake(("fake", 6))[0] is None

    def no_timing(*args, **kwargs):
        raise AssertionError("a cached signature is not timed again")

    cublaslt.clear()
    gemm_cache.forget()
    monkeypatch.setattr(cublaslt, "_device_times", no_timing)
    plan, recorded = _tune_fake(("fake", 5))
    assert plan is recorded and plan.times == ("cached",)
    assert plan.results[plan.choice].algo == bytes([3]) * 64
    plan, recorded = _tune_fake(("fake", 6))
    assert plan is None and recorded.choice is None and cublaslt.is_tuned(("fake", 6))

    cublaslt.clear()
    gemm_cache.forget()
    _FakePlan.reject = True
    with pytest.raises(AssertionError, match="not timed again"):
        _tune_fake(("fake", 5))  # (tune() turns the error into a warning; _tune does not)
    cublaslt.clear()
    gemm_cache.forget()
