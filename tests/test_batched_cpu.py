"""The CPU batched kernel's own paths: the stack-level kernels for small square orders and one
column, the compiled replay of a repeated NumPy stack (batched_matmul's and matmul's fast
path), and the thread pool (results bitwise those of one thread, concurrent callers)."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

import kronlinalg
from kronlinalg import batched_matmul, matmul
from kronlinalg.batched import batched_cpu as _cpu  # (the extension; None when not built)

pytestmark = pytest.mark.skipif(_cpu is None, reason="built without the CPU batched kernel")


def _reference(a, b, alpha=1.0):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return alpha * np.matmul(a64, b64), abs(alpha) * np.matmul(np.abs(a64), np.abs(b64))


def _check(out, a, b, alpha=1.0):
    ref, scale = _reference(a, b, alpha)
    assert out.shape == ref.shape and out.dtype == np.result_type(a, b)
    eps = np.finfo(out.dtype).eps
    k = a.shape[-1]
    tiny = np.finfo(out.dtype).tiny  # (an alpha that underflows in the dtype gives zeros)
    assert np.all(np.abs(out - ref) <= 2 * (k + 2) * eps * scale + tiny), (a.shape, b.shape)


def _layout(rng, shape, dtype, how):
    """A (..., r, c) array of `shape` laid out as `how`: "c" contiguous, "t" a transposed view,
    "s" every other element of a wider buffer."""
    if how == "t":
        return np.swapaxes(rng.standard_normal(shape[:-2] + shape[-2:][::-1]).astype(dtype), -1, -2)
    if how == "s":
        return rng.standard_normal(shape[:-1] + (2 * shape[-1],)).astype(dtype)[..., ::2]
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_small_orders_and_one_column(rng, dtype):
    """Square orders 1-8 and n = 1 (the stack-level kernels) in every layout that reaches them
    or falls back: contiguous, transposed A, strided B rows, broadcast and two batch
    dimensions, alpha; c full of NaN with beta = 0 is never read."""
    for order in range(1, 10):
        for how_a, how_b in (("c", "c"), ("t", "c"), ("c", "s"), ("c", "t"), ("s", "s")):
            for sa, sb in (((7, order, order), (7, order, order)),
                           ((3, 1, order, order), (1, 4, order, order)),
                           ((5, order, order), (order, order))):
                a = _layout(rng, sa, dtype, how_a)
                b = _layout(rng, sb, dtype, how_b)
                c = np.full((order, order), np.nan, dtype=dtype)
                for alpha in (1.0, -0.5):
                    out = batched_matmul(a, b, c=c, alpha=alpha, beta=0.0, algorithm="blocked")
                    assert not np.isnan(out).any()
                    _check(out, a, b, alpha)
        for m, k in ((1, order), (order, order + 17), (3, 2 * order + 1)):  # one column
            a = _layout(rng, (6, m, k), dtype, "c")
            b = _layout(rng, (6, k, 1), dtype, "c")
            _check(batched_matmul(a, b, algorithm="blocked"), a, b)
            at = _layout(rng, (6, m, k), dtype, "t")
            _check(batched_matmul(at, b, algorithm="blocked"), at, b)


def test_property_small_and_one_column():
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies

    @hyp.settings(max_examples=60, deadline=None)
    @hyp.given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 40), st.integers(0, 30),
               st.sampled_from(["float32", "float64"]), st.sampled_from(["c", "t", "s"]),
               st.floats(-3, 3), st.integers(0, 2**31), st.booleans())
    def check(m, n, k, batch, dtype, how, alpha, seed, square):
        rng = np.random.default_rng(seed)
        if square:
            m = n = k = min(m, 9)
        if seed % 3 == 0:
            n = 1
        a = _layout(rng, (batch, m, k), dtype, how)
        b = _layout(rng, (batch, k, n), dtype, "c")
        _check(batched_matmul(a, b, alpha=alpha, algorithm="blocked"), a, b, alpha)

    check()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_compiled_replay_repeats(rng, dtype):
    """The first call runs the full path, the second the signature's key, from the third the
    compiled replay through the pair memo: each on new arrays of the same signature, bitwise
    the full path's result, alpha read on every call."""
    for front in ("batched", "matmul"):
        for shape in ((4, 4, 4), (16, 13, 13), (3, 2, 5, 7)):
            b_shape = shape[:-2] + (shape[-1], 6)
            routed = kronlinalg.plan("matmul", shape, b_shape, dtype=dtype)[0].name == "batched"
            for call in range(4):
                a = rng.standard_normal(shape).astype(dtype)
                b = rng.standard_normal(b_shape).astype(dtype)
                if front == "batched":
                    alpha = (1.0, 2.0, -0.25, 3)[call]
                    out = batched_matmul(a, b, alpha=alpha, algorithm="blocked")
                else:
                    alpha, out = 1.0, matmul(a, b)
                _check(out, a, b, alpha)
                if front == "batched" or routed:  # (c given: the full path, never replayed)
                    full = batched_matmul(a, b, alpha=alpha, c=np.zeros(1, dtype), beta=0.0,
                                          algorithm="blocked")
                    np.testing.assert_array_equal(out, full)


def test_replay_declines_what_it_cannot_address(rng):
    """A repeat of a signature at an unaligned address, or in the other byte order, or of
    another array type, is not replayed: the full path copies it, the result is right."""
    a = rng.standard_normal((8, 5, 5))
    b = rng.standard_normal((8, 5, 5))
    for _ in range(3):
        _check(batched_matmul(a, b), a, b)
        _check(matmul(a, b), a, b)
    raw = np.zeros(a.nbytes + 1, dtype=np.uint8)
    unaligned = np.frombuffer(raw.data, dtype=np.float64, count=a.size, offset=1).reshape(a.shape)
    unaligned[...] = a
    assert not unaligned.flags.aligned and unaligned.strides == a.strides
    for _ in range(2):
        _check(batched_matmul(unaligned, b), a, b)
        _check(matmul(unaligned, b), a, b)
    swapped = a.astype(a.dtype.newbyteorder())
    _check(batched_matmul(swapped, b), a, b)
    _check(matmul(swapped, b), a, b)
    assert _cpu.stack_replayer(a, b.astype(np.float32), np.empty((8, 5, 5))) is None
    assert _cpu.stack_replayer(a.tolist(), b, np.empty((8, 5, 5))) is None
    assert _cpu.stack_replayer(a.astype(np.int64), b.astype(np.int64),
                               np.empty((8, 5, 5), np.int64)) is None
    r = _cpu.stack_replayer(a, b, np.empty((8, 5, 5)))
    np.testing.assert_array_equal(r(a, b, alpha=2.0), batched_matmul(a, b, alpha=2.0))
    assert r(a, b, beta=1.0) is None and r(a, b, c=a) is None and r(a, b, alpha=np.float64(1)) is None


def test_threads_give_one_threads_bits(rng):
    """A stack above the pool's threshold (kPoolMinFlops) split over threads: every product's
    bits are those of a call on one thread (each product alone: a stack of one runs on one
    thread), and two Python threads calling at once (the second runs on its own thread) agree
    too."""
    for dtype, shape in (("float64", (3000, 16, 16)), ("float32", (700, 31, 33)),
                         ("float64", (2, 1500, 4, 4))):
        a = rng.standard_normal(shape).astype(dtype)
        b = rng.standard_normal(shape[:-2] + (shape[-1], shape[-2])).astype(dtype)
        whole = batched_matmul(a, b, algorithm="blocked")
        flat_a, flat_b = a.reshape((-1,) + a.shape[-2:]), b.reshape((-1,) + b.shape[-2:])
        parts = np.stack([batched_matmul(x, y, algorithm="blocked")
                          for x, y in zip(flat_a, flat_b)])
        np.testing.assert_array_equal(whole.reshape(parts.shape), parts)
        _check(whole, a, b)
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            outs = list(ex.map(lambda _: batched_matmul(a, b, algorithm="blocked"), range(6)))
        for o in outs:
            np.testing.assert_array_equal(o, whole)


def test_every_isa_build(tmp_path):
    """kernels/batched/batched_cpu_isa_check.cpp: the baseline x86-64, AVX2 and AVX-512 builds of
    the kernel (those this CPU runs; the dispatcher only ever runs the best) against float64
    references, orders 1-34 with the small-order and one-column paths, transposed A, the pool."""
    import os
    import platform
    import shutil
    import subprocess

    if shutil.which("g++") is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("needs g++ on x86-64")
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")
    src = os.path.join(root, "batched")
    inc = [f"-I{root}/include", f"-I{root}/common", f"-I{src}", "-DKL_X86_ISAS"]
    flags = {"generic": [], "avx2": ["-mavx2", "-mfma"],
             "avx512": ["-mavx512f", "-mavx512vl", "-mavx2", "-mfma",
                        "-mprefer-vector-width=512"]}
    objs = []
    for name, extra in [(f"batched_cpu_{isa}.cpp", f) for isa, f in flags.items()] + [
            ("batched_cpu_pool.cpp", []), ("../common/status.cpp", [])]:
        obj = tmp_path / (os.path.basename(name) + ".o")
        subprocess.run(["g++", "-std=c++17", "-O1", *inc, *extra, "-c", os.path.join(src, name),
                        "-o", str(obj)], check=True)
        objs.append(str(obj))
    exe = tmp_path / "isa_check"
    subprocess.run(["g++", "-std=c++17", "-O1", *inc, os.path.join(src, "batched_cpu_isa_check.cpp"),
                    *objs, "-pthread", "-o", str(exe)], check=True)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert " 0 of " in res.stdout
