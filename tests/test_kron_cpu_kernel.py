"""The CPU sliced-multiply kernel on shapes large enough for several memory passes.

Checked through the public API (NumPy arrays, algorithm="sliced") and directly through
``kronlinalg._ext.kron_cpu`` with the output buffer poisoned with NaN, so an element the kernel
forgets to write, or a ``beta == 0`` that still reads Y, shows up as NaN.
"""

from __future__ import annotations

import math
import os
import pathlib
import platform
import shutil
import subprocess
import sys

import numpy as np
import pytest

import kronlinalg
from _helpers import kron_matmul_ref
from kronlinalg.testing import extension
kron_cpu = extension("kron_cpu")

KERNEL_DTYPE = {"float32": 0, "float64": 1}
RTOL = {"float32": 2e-5, "float64": 1e-12}

# (name, factor shapes, M): several passes, odd M, mixed and non-square shapes
CASES = [
    ("8x8^5", [(8, 8)] * 5, 33),
    ("16x16^3", [(16, 16)] * 3, 17),
    ("mixed", [(4, 3), (5, 7), (2, 9), (3, 3)], 31),
    ("mixed-rev", [(3, 4), (7, 5), (9, 2), (3, 3)], 9),
    ("2x2^12", [(2, 2)] * 12, 5),
    ("32x16,3x5", [(32, 16), (3, 5)], 13),
    ("1xQ,Px1", [(1, 6), (5, 1), (7, 7)], 3),
    # 27 prefixes a row on 32 float lanes (a partial, masked group of contiguous lanes)
    ("3x3^7", [(3, 3)] * 7, 7),
]
IDS = [c[0] for c in CASES]


def _rel(a, b):
    return np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b)


def _inputs(rng, shapes, m, dtype, side):
    fs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    k = math.prod(p for p, _ in shapes) if side == "right" else math.prod(q for _, q in shapes)
    x = rng.standard_normal((m, k) if side == "right" else (k, m)).astype(dtype)
    return x, fs


def _descs(fs):
    return [(f.ctypes.data, f.shape[0], f.shape[1], f.strides[0] // f.itemsize,
             f.strides[1] // f.itemsize) for f in fs]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name, shapes, m", CASES, ids=IDS)
def test_multi_pass_shapes(rng, name, shapes, m, side, dtype):
    x, fs = _inputs(rng, shapes, m, dtype, side)
    out = kronlinalg.kron_matmul(x, fs, side=side, algorithm="sliced")
    assert out.dtype == dtype and out.flags.writeable
    assert _rel(out, kron_matmul_ref(x, fs, side)) <= RTOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name, shapes, m", CASES[:3], ids=IDS[:3])
def test_beta_zero_does_not_read_y(rng, name, shapes, m, side, dtype):
    x, fs = _inputs(rng, shapes, m, dtype, side)
    ref = kron_matmul_ref(x, fs, side, 1.5)
    y = np.full(ref.shape, np.nan, dtype=dtype)
    for algorithm in ("sliced", "shuffle"):
        out = kronlinalg.kron_matmul(x, fs, side=side, alpha=1.5, beta=0.0, y=y,
                                     algorithm=algorithm)
        assert not np.isnan(out).any(), f"{algorithm}: NaN from y leaked with beta=0"
        assert _rel(out, ref) <= RTOL[dtype]
    assert np.isnan(y).all()  # y untouched


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name, shapes, m", CASES, ids=IDS)
def test_alpha_beta_with_y(rng, name, shapes, m, side, dtype):
    x, fs = _inputs(rng, shapes, m, dtype, side)
    prod = kron_matmul_ref(x, fs, side)
    for y_shape in (prod.shape, prod.shape[-1:], (1,)):
        y = rng.standard_normal(y_shape).astype(dtype)
        out = kronlinalg.kron_matmul(x, fs, side=side, alpha=-0.75, beta=1.25, y=y,
                                     algorithm="sliced")
        assert out.shape == prod.shape
        assert _rel(out, -0.75 * prod + 1.25 * y) <= RTOL[dtype], f"y shape {y_shape}"


# ---------------------------------------------------------------------------------------------
# the extension module itself


@pytest.mark.parametrize("name, shapes, m", CASES, ids=IDS)
def test_passes_at_least_one(name, shapes, m):
    fs = [np.ones(s) for s in shapes]
    for dtype in KERNEL_DTYPE.values():
        n = kron_cpu.passes(1, m, _descs(fs), dtype)
        assert 1 <= n <= len(fs)
        # one factor per pass when fusion is capped at one
        assert kron_cpu.passes(1, m, _descs(fs), dtype, 1) == len(fs)
        assert kron_cpu.passes(1, m, _descs(fs), dtype, len(fs)) == n
        # each pass's factors: every factor once, as many passes as passes() says
        counts = kron_cpu.pass_counts(1, m, _descs(fs), dtype)
        assert len(counts) == n and sum(counts) == len(fs) and min(counts) >= 1
        assert kron_cpu.pass_counts(1, m, _descs(fs), dtype, 1) == [1] * len(fs)


def test_large_factor_chains_take_several_passes():
    fs = [np.ones((8, 8))] * 5
    assert kron_cpu.passes(1, 33, _descs(fs), KERNEL_DTYPE["float64"]) >= 2


@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, shapes, m", CASES, ids=IDS)
def test_kernel_writes_every_element(rng, name, shapes, m, dtype, beta):
    """Direct calls on a NaN-poisoned output: with beta == 0 Y is write-only.

    Every fusion depth (max_fused) and thread count must give the same, complete result.
    """
    x, fs = _inputs(rng, shapes, m, dtype, "right")
    n_out = math.prod(q for _, q in shapes)
    y_in = rng.standard_normal((m, n_out)).astype(dtype)
    ref = kron_matmul_ref(x, fs, "right", 2.0, beta, y_in)
    for max_fused in (0, 1, 2, 3):
        for num_threads in (0, 1, 2):
            y = np.full((m, n_out), np.nan, dtype=dtype) if beta == 0.0 else y_in.copy()
            kron_cpu.matmul(1, m, _descs(fs), (x.ctypes.data, 0, x.shape[1], 1),
                            (y.ctypes.data, 0, y.shape[1], 1), 2.0, beta, KERNEL_DTYPE[dtype],
                            max_fused, num_threads)
            where = f"max_fused={max_fused}, num_threads={num_threads}"
            assert not np.isnan(y).any(), f"{where}: unwritten elements"
            assert _rel(y, ref) <= RTOL[dtype], where


def test_kernel_two_row_levels_and_strided_output(rng):
    """m = (m1, m2) rows with gaps in both x and y, and y written with an element stride."""
    shapes = [(4, 3), (5, 7), (2, 9)]
    fs = [rng.standard_normal(s) for s in shapes]
    k, n = 40, 189
    xb = rng.standard_normal((3, 6, k + 5))
    x = xb[:, ::2, 2:2 + k]  # m1=3, m2=3, rows not contiguous
    yb = np.full((3, 4, 2 * n), np.nan)
    y = yb[:, 1:4, ::2]
    it = x.itemsize
    kron_cpu.matmul(3, 3, _descs(fs),
                    (x.ctypes.data, x.strides[0] // it, x.strides[1] // it, x.strides[2] // it),
                    (y.ctypes.data, y.strides[0] // it, y.strides[1] // it, y.strides[2] // it),
                    1.0, 0.0, KERNEL_DTYPE["float64"])
    assert _rel(y, kron_matmul_ref(x, fs)) <= 1e-12
    # nothing outside y's elements was written
    assert np.isnan(yb[:, 0]).all() and np.isnan(yb[:, :, 1::2]).all()


def test_kernel_rejects_invalid_problem():
    fs = [np.ones((2, 2))]
    x = np.ones((1, 2))
    y = np.empty((1, 2))
    with pytest.raises(RuntimeError):
        kron_cpu.matmul(1, 1, [(0, 2, 2, 2, 1)], (x.ctypes.data, 0, 2, 1),
                        (y.ctypes.data, 0, 2, 1), 1.0, 0.0, 1)
    assert kron_cpu.passes(1, 1, [(0, 2, 2, 2, 1)], 1) < 1
    assert kron_cpu.passes(1, 1, _descs(fs), 1) == 1


def test_odd_sizes_and_threads_agree(rng):
    """The result does not depend on the number of threads (rows split across them)."""
    shapes = [(3, 5), (7, 2), (5, 5)]
    x, fs = _inputs(rng, shapes, 101, "float64", "right")
    outs = []
    for t in (1, 2, 3):
        y = np.full((101, 50), np.nan)
        kron_cpu.matmul(1, 101, _descs(fs), (x.ctypes.data, 0, x.shape[1], 1),
                        (y.ctypes.data, 0, 50, 1), 1.0, 0.0, 1, 0, t)
        outs.append(y)
    for o in outs:
        assert _rel(o, kron_matmul_ref(x, fs)) <= 1e-12


# tiny products: a fusion depth that leaves most SIMD lanes idle is cut short (plan_passes)
TINY = [
    ("8x8^3", [(8, 8)] * 3, 8),
    ("2x2^10", [(2, 2)] * 10, 16),
    ("3x3^6", [(3, 3)] * 6, 32),
    ("mixed", [(5, 7), (3, 2), (11, 4)], 13),
    ("1xQ,Px1", [(1, 6), (5, 1), (7, 7)], 3),
    ("one", [(9, 4)], 1),
]


@pytest.mark.parametrize("beta", [0.0, -1.5])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, shapes, m", TINY, ids=[c[0] for c in TINY])
def test_tiny_products_strided_rows_and_output(rng, name, shapes, m, dtype, beta):
    """Two row levels with gaps in x, an element-strided (transposed) y, NaN-poisoned where
    beta == 0: the planner's grouping and full fusion both agree with the reference."""
    fs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    k, n_out = math.prod(p for p, _ in shapes), math.prod(q for _, q in shapes)
    m1, m2 = 2, m
    xbig = rng.standard_normal((m1, m2 + 1, k + 3)).astype(dtype)  # gaps after rows and blocks
    x = xbig[:, :m2, :k]
    y_in = rng.standard_normal((n_out, m1, m2)).astype(dtype)  # y[row] = column of a transpose
    ref = kron_matmul_ref(x.reshape(m1 * m2, k), fs, "right", 0.5, beta,
                          y_in.reshape(n_out, m1 * m2).T)
    its = x.itemsize
    xd = (x.ctypes.data, x.strides[0] // its, x.strides[1] // its, 1)
    for max_fused in (0, len(shapes)):
        y = np.full_like(y_in, np.nan) if beta == 0.0 else y_in.copy()
        yd = (y.ctypes.data, y.strides[1] // its, y.strides[2] // its, y.strides[0] // its)
        kron_cpu.matmul(m1, m2, _descs(fs), xd, yd, 0.5, beta, KERNEL_DTYPE[dtype], max_fused)
        got = y.reshape(n_out, m1 * m2).T
        assert not np.isnan(got).any(), f"max_fused={max_fused}: unwritten elements"
        assert _rel(got, ref) <= RTOL[dtype], f"max_fused={max_fused}"


# Whole rows on the SIMD lanes: a row-major product whose rows fit one pass computes one row per
# lane and stores each lane's contiguous outputs through in-register transposes.  Odd row counts
# leave a partial group of lanes; output lengths that are no multiple of the vector width leave
# a tail; rows sit a gap apart in both x and y.
WHOLE_ROWS = [
    ("8x8^3", [(8, 8)] * 3, 45),
    ("mixed", [(5, 7), (3, 2), (11, 4)], 70),
    ("3x3^5", [(3, 3)] * 5, 33),
    ("7x5,2x3", [(7, 5), (2, 3)], 97),
]


@pytest.mark.parametrize("beta", [0.0, 0.75])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, shapes, m", WHOLE_ROWS, ids=[c[0] for c in WHOLE_ROWS])
def test_whole_rows_on_lanes(rng, name, shapes, m, dtype, beta):
    fs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    k, n_out = math.prod(p for p, _ in shapes), math.prod(q for _, q in shapes)
    assert kron_cpu.passes(1, m, _descs(fs), KERNEL_DTYPE[dtype]) == 1
    x = rng.standard_normal((m, k + 5)).astype(dtype)[:, 3:3 + k]
    y_in = rng.standard_normal((m, n_out)).astype(dtype)
    ref = kron_matmul_ref(x, fs, "right", -1.5, beta, y_in)
    for num_threads in (1, 2):
        ybig = np.full((m, n_out + 7), np.nan, dtype=dtype)
        y = ybig[:, 2:2 + n_out]
        if beta != 0.0:
            y[...] = y_in
        kron_cpu.matmul(1, m, _descs(fs), (x.ctypes.data, 0, x.strides[0] // x.itemsize, 1),
                        (y.ctypes.data, 0, ybig.shape[1], 1), -1.5, beta, KERNEL_DTYPE[dtype],
                        0, num_threads)
        assert not np.isnan(y).any(), "unwritten elements"
        assert np.isnan(ybig[:, :2]).all() and np.isnan(ybig[:, 2 + n_out:]).all()
        assert _rel(y, ref) <= RTOL[dtype], f"num_threads={num_threads}"


# Long rows of small factors: the passes keep at least a vector's worth of prefixes per row (the
# lanes stay on contiguous outputs), so such a chain takes more than one pass.
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_long_rows_keep_lanes_on_prefixes(rng, dtype):
    shapes = [(4, 4)] * 7
    fs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    counts = kron_cpu.pass_counts(1, 67, _descs(fs), KERNEL_DTYPE[dtype])
    assert len(counts) >= 2 and sum(counts) == 7
    x, _ = _inputs(rng, shapes, 67, dtype, "right")
    out = kronlinalg.kron_matmul(x, fs, algorithm="sliced")
    assert _rel(out, kron_matmul_ref(x, fs)) <= RTOL[dtype]


# Inputs of several MiB: the kernel fetches each tile's successor ahead while it computes (both
# the right-product layout, lanes over runs of a row, and the left one, lanes side by side).
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_large_inputs_with_fetch_ahead(rng, side, dtype):
    shapes = [(16, 16), (16, 15), (16, 16), (16, 16)]
    m = 37
    x, fs = _inputs(rng, shapes, m, dtype, side)
    assert x.nbytes >= 4 * 2**20
    out = kronlinalg.kron_matmul(x, fs, side=side, algorithm="sliced")
    assert _rel(out, kron_matmul_ref(x, fs, side)) <= RTOL[dtype]


# ---------------------------------------------------------------------------------------------
# every ISA build, not only the one this CPU dispatches to

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_ISA_BUILDS = {  # name: (KL_VEC_BYTES, compiler flags as in kernels/meson.build, CPU flags)
    "generic": (16, [], []),
    "avx2": (32, ["-mavx2", "-mfma"], ["avx2", "fma"]),
    "avx512": (64, ["-mavx512f", "-mavx512vl", "-mavx2", "-mfma", "-mprefer-vector-width=512"],
               ["avx512f", "avx512vl", "avx2", "fma"]),
}


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.mark.parametrize("isa", sorted(_ISA_BUILDS))
def test_every_isa_build_matches_float64_reference(tmp_path, isa):
    """kernels/kron/kron_cpu_isa_check.cpp, compiled for one ISA: 17 odd shapes, both dtypes,
    beta 0 (NaN-poisoned y) and 0.5, rows a gap apart, one and two threads."""
    source = _ROOT / "kernels" / "kron" / "kron_cpu_isa_check.cpp"
    compiler = shutil.which("c++") or shutil.which("g++")
    if not source.exists() or compiler is None or sys.platform != "linux":
        pytest.skip("needs the source tree and a C++ compiler with OpenMP (Linux)")
    vec_bytes, flags, needs = _ISA_BUILDS[isa]
    if isa != "generic" and (platform.machine() not in ("x86_64", "AMD64")
                             or not set(needs) <= _cpu_flags()):
        pytest.skip(f"this CPU cannot run the {isa} build")
    kernels = _ROOT / "kernels"
    exe = tmp_path / f"check_{isa}"
    cmd = [compiler, "-O2", "-std=c++17", "-fopenmp", *flags, "-DKL_X86_ISAS", f"-DKL_ISA={isa}",
           f"-DKL_VEC_BYTES={vec_bytes}", f"-I{kernels / 'kron'}", f"-I{kernels / 'include'}",
           f"-I{kernels / 'common'}", str(source), str(kernels / "common" / "status.cpp"),
           str(kernels / "common" / "scratch.cpp"), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert ran.stdout.strip().startswith("ok ")
