"""Regression tests of issue 31: every input gives the right answer or a clear error.

1. byte strides that are not a multiple of the itemsize (structured-array fields);
2. process-wide caches under threads;
3. out-of-memory inside the CPU kernels is a MemoryError, never an abort;
4. the calibration cache: what is read is validated, what cannot be written stays in memory;
6. clear errors for unusual arguments (byte order, side, alpha/beta, meta tensors, plan()).

Public API only.  Crash-prone cases run in a subprocess, so a regression fails one test instead
of killing the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import kronlinalg
from kronlinalg import kron_matmul, structured_matmul
from kronlinalg.structured import KSFactor

from _helpers import assert_close, kron_matmul_ref, to_numpy
from strategies import layout_view

_TESTS = os.path.dirname(os.path.abspath(__file__))


def run_python(code: str, timeout: float = 120, limit_as: int | None = None):
    """Run `code` in a fresh interpreter (the tests' sys.path); (returncode, stdout, stderr).
    limit_as caps its address space (bytes), so an allocation that cannot succeed fails fast."""
    pre = f"import sys; sys.path.insert(0, {_TESTS!r})\n"
    if limit_as is not None:
        pre += (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit_as}, "
                f"{limit_as}))\n")
    # (run from the tests' folder: from the repository root, the source tree would shadow the
    # installed package)
    proc = subprocess.run([sys.executable, "-c", pre + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout,
                          cwd=os.path.dirname(os.path.abspath(__file__)),
                          env={**os.environ, "OMP_NUM_THREADS": "2"})
    return proc.returncode, proc.stdout, proc.stderr


# ---------------------------------------------------------------------------------------------
# 1. byte strides that are not a multiple of the itemsize


def _view_or_skip(xp, a, layout):
    v = layout_view(xp, a, layout, refused=True)
    if v is None:
        pytest.skip(f"{xp.name} holds no arrays of layout {layout!r}")
    return v


@pytest.mark.parametrize("layout", ["bytes", "bytes_reversed"])
@pytest.mark.parametrize("algorithm", ["auto", "sliced", "shuffle"])
def test_kron_matmul_byte_strides(xp, rng, layout, algorithm):
    x = rng.standard_normal((5, 12))
    fs = [rng.standard_normal((3, 2)), rng.standard_normal((4, 5))]
    xv = _view_or_skip(xp, x, layout)
    fv = [_view_or_skip(xp, f, layout) for f in fs]
    if xp.name == "cupy":  # CuPy's own kernels fault on such views: refused by name
        with pytest.raises(ValueError, match="x: .*itemsize"):
            kron_matmul(xv, fv, algorithm=algorithm)
        return
    assert_close(kron_matmul(xv, fv, algorithm=algorithm), kron_matmul_ref(x, fs), xp, "float64")
    # the example of the issue: a field of a record array, identity factors
    rec = np.zeros(12, dtype=[("a", "f8"), ("b", "f4")])
    rec["a"] = np.arange(12.0)
    if xp.name == "numpy":
        out = kron_matmul(rec["a"], [np.eye(3), np.eye(4)], algorithm=algorithm)
        np.testing.assert_array_equal(out, np.arange(12.0))
        out = kron_matmul(rec["a"][::-1], [np.eye(3), np.eye(4)], algorithm=algorithm)
        np.testing.assert_array_equal(out, np.arange(12.0)[::-1])
    # left products and y read through byte strides too
    y = rng.standard_normal((12, 3))
    xl = rng.standard_normal((10, 3))
    got = kron_matmul(_view_or_skip(xp, xl, layout), fv, side="left", beta=0.5,
                      y=_view_or_skip(xp, y, layout), algorithm=algorithm)
    assert_close(got, kron_matmul_ref(xl, fs, side="left", beta=0.5, y=y), xp, "float64")


@pytest.mark.parametrize("layout", ["bytes", "bytes_reversed"])
@pytest.mark.parametrize("algorithm", ["auto", "kernel", "bmm", "dense"])
@pytest.mark.parametrize("order", ["batch_first", "batch_last"])
def test_structured_matmul_byte_strides(xp, rng, layout, algorithm, order):
    patterns = [(2, 3, 2, 2), (1, 4, 2, 2)]
    vals = [rng.standard_normal(p) for p in patterns]
    dense = [KSFactor(p, v).to_dense() for p, v in zip(patterns, vals)]
    if xp.name == "cupy":  # CuPy's own kernels fault on such views: refused by name
        with pytest.raises(ValueError, match="values: .*itemsize"):
            KSFactor(patterns[0], _view_or_skip(xp, vals[0], layout))
        return
    chain = [KSFactor(p, _view_or_skip(xp, v, layout)) for p, v in zip(patterns, vals)]
    n_in = dense[-1].shape[1]
    if order == "batch_first":
        x = rng.standard_normal((7, n_in))
        ref = x @ (dense[0] @ dense[1]).T
    else:
        x = rng.standard_normal((n_in, 7))
        ref = dense[0] @ dense[1] @ x
    got = structured_matmul(_view_or_skip(xp, x, layout), chain, layout=order,
                            algorithm=algorithm)
    assert_close(got, ref, xp, "float64")


def test_byte_strided_large_reversed_records_subprocess():
    """A reversed view of a large record array segfaulted (reads before the array)."""
    code = """
    import numpy as np
    from kronlinalg import kron_matmul, structured_matmul
    from kronlinalg.structured import KSFactor
    rec = np.zeros(1 << 20, dtype=[("a", "f8"), ("b", "f4")])
    rec["a"] = np.arange(1 << 20)
    x = rec[::-1]["a"].reshape(1024, 1024)
    for alg in ("auto", "sliced"):
        out = kron_matmul(x, [np.eye(32), np.eye(32)], algorithm=alg)
        assert np.array_equal(out, np.asarray(x)), alg
    vals = np.zeros(32 ** 3, dtype=[("a", "f8"), ("b", "f4")])[::-1]["a"].reshape(32, 32, 32, 1)
    vals[...] = np.eye(32)[None, :, :, None]
    for alg in ("auto", "kernel"):
        out = structured_matmul(x, KSFactor((32, 32, 32, 1), vals), algorithm=alg)
        assert np.array_equal(out, np.asarray(x)), alg
    print("ok")
    """
    rc, out, err = run_python(code)
    assert rc == 0 and "ok" in out, f"exit {rc}\n{err[-2000:]}"


def test_byte_strided_inputs_are_not_modified(rng):
    rec = np.zeros(12, dtype=[("a", "f8"), ("b", "f4")])
    rec["a"] = rng.standard_normal(12)
    rec["b"] = 7.0
    before = rec.copy()
    kron_matmul(rec["a"], [np.eye(3), np.eye(4)], algorithm="sliced")
    np.testing.assert_array_equal(rec, before)


# ---------------------------------------------------------------------------------------------
# 2. process-wide caches under threads: the plan cache and the per-signature fast paths evict
# while other threads read and write them


def _thread_shapes(t: int, i: int):
    """A shape no other (thread, call) pair uses: x (b1, b2, P1·P2), factors (P1, Q1), (P2, Q2);
    thread t fixes (P1, P2), call i the batch and the Q's (30·30·4·4 = 14,400 per thread)."""
    p1, p2 = 1 + t // 4, 1 + t % 4
    q2, i = 1 + i % 4, i // 4
    q1, i = 1 + i % 4, i // 4
    b2, b1 = 1 + i % 30, 1 + i // 30
    return (b1, b2, p1 * p2), (p1, q1), (p2, q2)


def _hammer(calls: int, threads: int = 8, op: str = "kron_matmul"):
    """`threads` threads making `calls` calls each, a new shape per call: kron_matmul (or
    structured_matmul) checked against NumPy, and plan(); returns (errors, wrong results)."""
    errors, wrong = [], []
    start = threading.Barrier(threads)

    def work(t):
        rng = np.random.default_rng(t)
        start.wait()
        for i in range(calls):
            xs, f1s, f2s = _thread_shapes(t, i)
            try:
                if op == "kron_matmul":
                    x, f1, f2 = (rng.standard_normal(s) for s in (xs, f1s, f2s))
                    out = kron_matmul(x, [f1, f2])
                    ref = x @ np.kron(f1, f2)
                    plan = kronlinalg.plan("kron_matmul", xs, f1s, f2s)
                else:  # one factor (1, Q1, P1·P2, 1) of a shape new to this call
                    pattern = (1, f1s[1] * f2s[1], xs[-1], 1)
                    x = rng.standard_normal(xs)
                    factor = KSFactor(pattern, rng.standard_normal(pattern))
                    out = structured_matmul(x, factor)
                    ref = x @ factor.to_dense().T
                    plan = kronlinalg.plan("structured_matmul", xs, pattern)
                if not plan or out.shape != ref.shape or not np.allclose(out, ref, rtol=1e-10,
                                                                         atol=1e-12):
                    wrong.append((t, i, xs))
            except Exception as exc:  # noqa: BLE001  (any escape is the failure we count)
                errors.append((t, i, xs, repr(exc)))

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return errors, wrong


def test_threads_kron_matmul_and_plan_12000_calls_each():
    """8 threads × 12,000 calls of kron_matmul and plan(), a new shape each (96,000 plans, far
    past the plan cache's 4,096 entries): 0 exceptions, 0 wrong results."""
    errors, wrong = _hammer(12_000)
    assert not errors, f"{len(errors)} exceptions, first: {errors[:3]}"
    assert not wrong, f"{len(wrong)} wrong results, first: {wrong[:3]}"


def test_threads_structured_matmul_and_plan():
    errors, wrong = _hammer(1_500, op="structured_matmul")
    assert not errors, f"{len(errors)} exceptions, first: {errors[:3]}"
    assert not wrong, f"{len(wrong)} wrong results, first: {wrong[:3]}"


# ---------------------------------------------------------------------------------------------
# 3. out of host memory inside the CPU kernels: MemoryError naming the operation and the bytes,
# never SIGABRT (the tile buffers were allocated inside an OpenMP region, where an exception
# terminates the process).  The subprocess's address space is capped, so the allocations fail
# at once instead of swapping.

_OOM_CALLS = {
    # the issue's example (2**28 there; 2**24 here, faster): the packed factor (128 MB) fits
    # under the cap, the per-thread tile buffers (allocated inside the parallel region) do not
    "kron_matmul": """
        x = np.broadcast_to(1.0, (2**24,))
        f = np.broadcast_to(1.0, (2**24, 1))
        kron_matmul(x, [f], algorithm="sliced")
    """,
    "structured_matmul": """
        v = np.broadcast_to(1.0, (1, 2**16, 2**15, 1))
        x = np.broadcast_to(1.0, (3, 2**15))
        structured_matmul(x, KSFactor((1, 2**16, 2**15, 1), v), algorithm="kernel")
    """,
}


@pytest.mark.parametrize("op", sorted(_OOM_CALLS))
def test_cpu_out_of_memory_is_a_memory_error(op):
    code = "import numpy as np\nfrom kronlinalg import kron_matmul, structured_matmul\n" \
           "from kronlinalg.structured import KSFactor\ntry:\n" + \
           textwrap.indent(textwrap.dedent(_OOM_CALLS[op]), "    ") + \
           "    print('no error')\nexcept MemoryError as exc:\n    print('MemoryError:', exc)\n"
    rc, out, err = run_python(code, limit_as=3 << 30)
    assert rc == 0, f"the interpreter died (exit {rc}):\n{err[-2000:]}"
    assert "MemoryError:" in out, out + err[-2000:]
    msg = out.split("MemoryError:", 1)[1]
    assert op in msg and "bytes" in msg, msg


# ---------------------------------------------------------------------------------------------
# 4. the calibration cache: validated when read, kept in memory when it cannot be written,
# not written at all when the measurement is implausible

from kronlinalg import planner  # noqa: E402
from kronlinalg.planner import calibration, profile_cache, profiles  # noqa: E402


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty calibration cache in a temporary directory; profiles and plans forgotten."""
    monkeypatch.setenv("KRONLINALG_CACHE_DIR", str(tmp_path / "cache"))
    profiles.invalidate()
    planner.clear_cache()
    yield tmp_path / "cache"
    profiles.invalidate()
    planner.clear_cache()


def _cpu_file():
    return profile_cache.cache_path(profiles.cpu_key())


def _write_cpu_cache(fields: dict):
    path = _cpu_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"schema": profile_cache.SCHEMA, "key": profiles.cpu_key(), "source": "calibrated",
            **fields}
    path.write_text(json.dumps(data))
    return path


BROKEN_FIELDS = [
    {"gemm_flops": None},
    {"bandwidth": 0},
    {"bandwidth": -5.0},
    {"bandwidth": "fast"},
    {"bandwidth": 1e300},
    {"launch_s": 0.0},
    {"gemm_flops": {"float64": 0}},
    {"gemm_flops": {"float64": "1e11"}},
    {"theta": {"1": None}},
    {"units": 2.5},
    {"cc": "9.0"},
    {"coef": {"kron_matmul/sliced/cpu": {"mem": "x"}}},
]


@pytest.mark.parametrize("fields", BROKEN_FIELDS, ids=lambda f: json.dumps(f))
def test_broken_cache_file_falls_back_with_one_warning(cache_dir, fields):
    path = _write_cpu_cache(fields)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for n in (16, 32, 64):  # several plans and auto calls: one warning in all
            x = np.ones((3, n * n))
            assert kronlinalg.plan("kron_matmul", x.shape, (n, n), (n, n))
            np.testing.assert_allclose(kron_matmul(x, [np.eye(n), np.eye(n)]), x)
        prof = planner.profile_for("cpu")
    ours = [w for w in seen if str(path) in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in seen]
    assert issubclass(ours[0].category, RuntimeWarning)
    assert prof.source != "calibrated"
    assert prof.bandwidth > 0 and prof.gemm_flops["float64"] > 0


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"text"', "null",
                                  '{"schema": 1, "key": "someone else"}'])
def test_unreadable_cache_file_falls_back_with_one_warning(cache_dir, text):
    path = _cpu_file()
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.warns(RuntimeWarning, match=str(path).replace(".", r"\.")):
        prof = planner.profile_for("cpu")
    assert prof.source != "calibrated"


def test_other_schema_is_ignored_silently(cache_dir):
    _write_cpu_cache({"bandwidth": 1e10}).write_text(
        json.dumps({"schema": profile_cache.SCHEMA + 1, "key": profiles.cpu_key()}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert planner.profile_for("cpu").source != "calibrated"


def test_calibrate_force_with_a_broken_file(cache_dir):
    path = _write_cpu_cache({"gemm_flops": None, "bandwidth": 0})
    with pytest.warns(RuntimeWarning, match="ignoring the calibration cache file"):
        prof = kronlinalg.calibrate("cpu", force=True, quick=True)
    assert prof.source == "calibrated"
    stored = json.loads(path.read_text())  # the broken file was replaced by the measurement
    assert stored["bandwidth"] > 0 and stored["gemm_flops"]["float64"] > 0
    assert profile_cache.problems(stored) == []


def test_unwritable_cache_dir_keeps_the_measurement_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("KRONLINALG_CACHE_DIR", str(blocker / "cache"))  # under a file: no mkdir
    profiles.invalidate()
    planner.clear_cache()
    try:
        with pytest.warns(RuntimeWarning, match="kept in memory"):
            prof = kronlinalg.calibrate("cpu", quick=True)
        assert prof.source == "calibrated"
        assert planner.profile_for("cpu").source == "calibrated"
        assert kronlinalg.plan("kron_matmul", (4, 64), (8, 8), (8, 8))
        # asked again, the measurement is there: no second measurement, no error
        assert kronlinalg.calibrate("cpu").bandwidth == prof.bandwidth
    finally:
        profiles.invalidate()
        planner.clear_cache()


def test_implausible_measurement_is_measured_again_then_not_stored(cache_dir, monkeypatch):
    expected = planner.profile_for("cpu")
    calls = []

    def busy(quick):  # a machine whose copy bandwidth reads far below the device's
        calls.append(quick)
        return {"bandwidth": expected.bandwidth * 0.01,
                "gemm_flops": dict(expected.gemm_flops), "launch_s": 1e-6}

    monkeypatch.setattr("kronlinalg.planner.calibration.measure_cpu", busy)
    with pytest.warns(RuntimeWarning, match="not plausible"):
        prof = kronlinalg.calibrate("cpu", force=True)
    assert len(calls) == 2  # measured once more before giving up
    assert prof.source != "calibrated"
    assert not _cpu_file().exists()
    assert planner.profile_for("cpu").bandwidth == expected.bandwidth


def test_disturbed_first_measurement_is_replaced_by_the_second(cache_dir, monkeypatch):
    expected = planner.profile_for("cpu")
    readings = iter([0.01, 1.0])

    def once_busy(quick):
        return {"bandwidth": expected.bandwidth * next(readings),
                "gemm_flops": dict(expected.gemm_flops), "launch_s": 1e-6}

    monkeypatch.setattr("kronlinalg.planner.calibration.measure_cpu", once_busy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prof = kronlinalg.calibrate("cpu", force=True)
    assert prof.source == "calibrated" and prof.bandwidth == expected.bandwidth
    assert json.loads(_cpu_file().read_text())["bandwidth"] == expected.bandwidth


def test_measurement_checks_are_public():
    prof = planner.profile_for("cpu")
    assert calibration.implausible({"bandwidth": prof.bandwidth}, prof) == []
    assert calibration.implausible({"bandwidth": 0.0}, prof)
    assert calibration.implausible({"bandwidth": prof.bandwidth / 100}, prof)
    assert calibration.implausible({"bandwidth": prof.bandwidth / 100}, None) == []  # bounds only
    assert profile_cache.problems({"gemm_flops": None})


# ---------------------------------------------------------------------------------------------
# 6. unusual arguments: converted, or refused with an error naming the argument


@pytest.mark.parametrize("algorithm", ["auto", "sliced", "shuffle"])
@pytest.mark.parametrize("order", [">", "<"])
def test_big_endian_arrays_are_converted(rng, algorithm, order):
    x = rng.standard_normal((4, 12))
    fs = [rng.standard_normal((3, 2)), rng.standard_normal((4, 4))]
    xb = x.astype(order + "f8")
    fb = [fs[0].astype(order + "f8"), fs[1].astype(order + "f4")]
    out = kron_matmul(xb, fb, algorithm=algorithm)
    assert out.dtype == np.float64 and out.dtype.isnative
    ref = kron_matmul_ref(x, [fs[0], fs[1].astype("f4")])
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    y = rng.standard_normal((4, 8)).astype(order + "f8")
    out = kron_matmul(xb, fb, beta=2.0, y=y, algorithm=algorithm)
    np.testing.assert_allclose(out, ref + 2.0 * y, rtol=1e-6)
    assert kronlinalg.kron(fb[0], fb[1]).dtype == np.float64


@pytest.mark.parametrize("algorithm", ["auto", "kernel", "bmm", "dense"])
def test_big_endian_structured(rng, algorithm):
    v = rng.standard_normal((2, 3, 2, 2))
    x = rng.standard_normal((5, 8))
    f = KSFactor((2, 3, 2, 2), v.astype(">f8"))
    out = structured_matmul(x.astype(">f8"), f, algorithm=algorithm)
    ref = x @ KSFactor((2, 3, 2, 2), v).to_dense().T
    # (an entry that cancels to ~1e-5 carries the sum's rounding, ~1e-17: relative to the
    # result's scale, not to that entry's)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("side", [["right"], ("right",), "up", None, 1])
def test_side_must_be_a_string(side):
    x, fs = np.ones((2, 12)), [np.eye(3), np.eye(4)]
    for _ in range(2):  # the second call would find a fast path for a hashable side
        with pytest.raises((TypeError, ValueError), match="side"):
            kron_matmul(x, fs, side=side)


@pytest.mark.parametrize("name", ["alpha", "beta"])
@pytest.mark.parametrize("value,error,match", [
    (np.zeros(2), TypeError, "0-d"),
    ([1.0], TypeError, "0-d|scalar"),
    ("2", TypeError, "scalar"),
    (1j, TypeError, "real"),
    (np.complex128(1), TypeError, "real"),
    (10 ** 400, ValueError, "range"),
])
def test_alpha_beta_must_be_real_scalars(name, value, error, match):
    x, fs = np.ones((2, 12)), [np.eye(3), np.eye(4)]
    with pytest.raises(error, match=f"{name}.*({match})"):
        kron_matmul(x, fs, **{name: value}, y=np.ones((2, 12)))


@pytest.mark.parametrize("value", [np.float64(2.0), np.array(2.0), np.float32(2.0), 2, True])
def test_zero_d_scalars_are_accepted(value):
    x, fs = np.ones((2, 12)), [np.eye(3), np.eye(4)]
    out = kron_matmul(x, fs, alpha=value, beta=value, y=np.ones((2, 12)))
    np.testing.assert_allclose(out, 2.0 * float(value) * np.ones((2, 12)) if value is not True
                               else 2.0 * np.ones((2, 12)))


def test_torch_meta_tensors_are_refused_by_name():
    torch = pytest.importorskip("torch")
    x = torch.empty((2, 12), device="meta")
    fs = [torch.empty((3, 3), device="meta"), torch.empty((4, 4), device="meta")]
    with pytest.raises(ValueError, match="x: .*meta"):
        kron_matmul(x, fs)
    with pytest.raises(ValueError, match=r"factors\[0\]: .*meta"):
        kron_matmul(torch.ones((2, 12)), fs)
    v = torch.empty((1, 4, 4, 1), device="meta")
    with pytest.raises(ValueError, match="meta"):
        structured_matmul(torch.ones((2, 4)), KSFactor((1, 4, 4, 1), v))
    with pytest.raises(ValueError, match="device.*meta"):
        kronlinalg.plan("kron_matmul", (2, 12), (3, 3), (4, 4), device=x)


@pytest.mark.parametrize("dtype", ["banana", "int32", np.int32, "complex128", "bool"])
def test_plan_refuses_unknown_dtypes(dtype):
    with pytest.raises(ValueError, match="dtype"):
        kronlinalg.plan("kron_matmul", (2, 12), (3, 3), (4, 4), dtype=dtype)
    with pytest.raises(ValueError, match="dtype"):
        kronlinalg.explain("kron_matmul", (2, 12), (3, 3), (4, 4), dtype=dtype, file=None)


def test_plan_refuses_options_an_operation_does_not_declare():
    def normalise(shapes, options):
        return {"n": shapes[0][0]}

    planner.register_op("hardening_probe", normalise, "a test operation", options=("side",))
    planner.register("hardening_probe", planner.Candidate("only", lambda problem, prof: 1.0))
    assert kronlinalg.plan("hardening_probe", (3,), side="left")[0].name == "only"
    with pytest.raises(TypeError, match="'sid'.*did you mean 'side'"):
        kronlinalg.plan("hardening_probe", (3,), sid="left")
    with pytest.raises(TypeError, match="'banana'.*hardening_probe.*side"):
        kronlinalg.plan("hardening_probe", (4,), banana=1)
    # an operation that declares no options stays permissive (its normaliser judges them)
    planner.register_op("hardening_open", normalise, "another")
    planner.register("hardening_open", planner.Candidate("only", lambda problem, prof: 1.0))
    assert kronlinalg.plan("hardening_open", (3,), anything=1)


# ---------------------------------------------------------------------------------------------
# what the operations themselves must do with the shared checks (issue 31, items 3, 5, 6)


def test_fast_path_takes_only_plain_scalars():
    """A warm signature must not evaluate beta == 0 on an array or float() on a huge int: such
    calls take the full path, whose checks name the argument."""
    x, fs = np.ones(12), [np.eye(3), np.eye(4)]
    kron_matmul(x, fs)  # warm: the signature is cached
    with pytest.raises(TypeError, match="beta"):
        kron_matmul(x, fs, beta=np.zeros(2))
    with pytest.raises(ValueError, match="alpha"):
        kron_matmul(x, fs, alpha=10 ** 400)
    np.testing.assert_array_equal(kron_matmul(x, fs, alpha=2), 2 * x)


def test_operations_declare_their_plan_options():
    with pytest.raises(TypeError, match="sid"):
        kronlinalg.plan("kron_matmul", (2, 12), (3, 3), (4, 4), sid="left")
    with pytest.raises(TypeError, match="layot"):
        kronlinalg.plan("structured_matmul", (2, 4), (1, 4, 4, 1), layot="batch_last")
    assert kronlinalg.plan("kron_matmul", (12, 2), (3, 3), (4, 4), side="left")


def test_ks_to_dense_places_inf_without_nan():
    """KSFactor.to_dense places values (an Inf stays an Inf, the zeros around it stay zeros), so
    the dense algorithm agrees with the kernel and bmm."""
    v = np.ones((2, 2, 2, 1))
    v[0, 0, 0, 0] = np.inf
    f = KSFactor((2, 2, 2, 1), v)
    d = np.asarray(f.to_dense())
    assert np.isposinf(d[0, 0]) and not np.isnan(d).any()
    assert (d[0:2, 2:4] == 0).all() and (d[2:4, 0:2] == 0).all()
    outs = {a: structured_matmul(np.ones((3, 4)), f, algorithm=a) for a in ("kernel", "bmm", "dense")}
    for a, out in outs.items():
        assert not np.isnan(out).any(), a
        np.testing.assert_array_equal(out, outs["kernel"])
