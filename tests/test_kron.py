"""kron_matmul and kron against a dense float64 reference (np.kron), on every backend present.

Inputs are fresh random numbers each run (never zeros): property tests draw their seed through
hypothesis (reported with the falsifying example), the others through the `rng` fixture
(reported in the failure's "random seed" section).
"""

from __future__ import annotations

import math
import re

import array_api_compat
import numpy as np
import pytest

import kronlinalg
from _helpers import (GRAD_RTOL, assert_close, dtype_name, kron_dense, kron_matmul_ref, random,
                      to_numpy, to_xp)

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ALGORITHMS = ("sliced", "shuffle")


def _seeded(seed):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# strategies


@st.composite
def factor_shapes(draw, max_factors=6, max_dim=9, budget=20_000, min_dim=1):
    """1..max_factors shapes (P_i, Q_i), square or not, with prod(P) * prod(Q) <= budget."""
    n = draw(st.integers(1, max_factors))
    shapes, used = [], 1
    for _ in range(n):
        p = draw(st.integers(min_dim, max(min_dim, min(max_dim, budget // used))))
        q_hi = max(min_dim, min(max_dim, budget // (used * p)))
        q = p if p <= q_hi and draw(st.booleans()) else draw(st.integers(min_dim, q_hi))
        shapes.append((p, q))
        used *= p * q
    return shapes


def _layout_array(xp, rng, shape, dtype, layout):
    """A random array of `shape` in the given memory layout, and its values as float64."""
    nd = len(shape)
    if layout == "transposed" and nd >= 2:
        base, _ = random(xp, rng, shape[::-1], dtype)
        a = xp.permute_dims(base, tuple(range(nd - 1, -1, -1)))
    elif layout == "strided" and nd >= 1:
        base, _ = random(xp, rng, tuple(2 * n + 1 for n in shape), dtype)
        a = base[tuple(slice(1, None, 2) for _ in shape)]
    elif layout == "broadcast" and nd >= 2:
        base, _ = random(xp, rng, (1,) + tuple(shape[1:]), dtype)
        a = xp.broadcast_to(base, tuple(shape))
    else:
        a, _ = random(xp, rng, shape, dtype)
    assert tuple(a.shape) == tuple(shape)
    return a, to_numpy(a).astype(np.float64)


def _out_shape(x_shape, P, Q, side):
    if side == "right":
        return tuple(x_shape[:-1]) + (math.prod(Q),)
    if len(x_shape) == 1:
        return (math.prod(P),)
    return tuple(x_shape[:-2]) + (math.prod(P), x_shape[-1])


def _x_shape(lead, n, P, Q, side, one_d):
    if side == "right":
        return (math.prod(P),) if one_d else tuple(lead) + (math.prod(P),)
    return (math.prod(Q),) if one_d else tuple(lead) + (math.prod(Q), n)


# ---------------------------------------------------------------------------------------------
# the property test: shapes, batch dims, layouts, sides, alpha/beta/y, algorithms, dtypes


@settings(max_examples=60)
@given(data=st.data())
def test_matches_dense_reference(xp, data):
    shapes = data.draw(factor_shapes(), label="factor shapes")
    P, Q = [p for p, _ in shapes], [q for _, q in shapes]
    side = data.draw(st.sampled_from(["right", "left"]), label="side")
    one_d = data.draw(st.booleans(), label="1-D x")
    lead = data.draw(st.lists(st.integers(1, 5), min_size=0 if side == "left" else 1, max_size=2),
                     label="leading dims")
    n = data.draw(st.integers(1, 4), label="columns (left)")
    x_shape = _x_shape(lead, n, P, Q, side, one_d)
    # keep the dense reference cheap
    if math.prod(x_shape) > 60_000:
        x_shape = _x_shape([1], 1, P, Q, side, one_d)
    dtype = data.draw(st.sampled_from(["float32", "float64"]), label="dtype")
    algorithm = data.draw(st.sampled_from(["auto", *ALGORITHMS]), label="algorithm")
    x_layout = data.draw(st.sampled_from(["contiguous", "transposed", "strided", "broadcast"]),
                         label="x layout")
    f_layouts = data.draw(st.lists(st.sampled_from(["contiguous", "transposed", "strided"]),
                                   min_size=len(shapes), max_size=len(shapes)),
                          label="factor layouts")
    alpha = data.draw(st.sampled_from([1.0, -1.5, 0.25, 3.0]), label="alpha")
    with_y = data.draw(st.booleans(), label="with y")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = _seeded(seed)

    x, xn = _layout_array(xp, rng, x_shape, dtype, x_layout)
    fs, fns = [], []
    for shape, layout in zip(shapes, f_layouts):
        f, fn = _layout_array(xp, rng, shape, dtype, layout)
        fs.append(f)
        fns.append(fn)
    out_shape = _out_shape(x_shape, P, Q, side)

    kwargs, y_ref, beta = {}, None, 0.0
    if with_y:
        # y broadcasts to the result: drop some leading dims, set some dims to 1
        drop = data.draw(st.integers(0, len(out_shape)), label="y dims dropped")
        ones = data.draw(st.lists(st.booleans(), min_size=len(out_shape) - drop,
                                  max_size=len(out_shape) - drop), label="y dims set to 1")
        y_shape = tuple(1 if o else s for s, o in zip(out_shape[drop:], ones))
        beta = data.draw(st.sampled_from([0.0, 1.0, -0.5, 2.0]), label="beta")
        y, y_ref = random(xp, rng, y_shape, dtype)
        kwargs = {"beta": beta, "y": y}

    out = kronlinalg.kron_matmul(x, fs, side=side, alpha=alpha, algorithm=algorithm, **kwargs)
    expected = kron_matmul_ref(xn, fns, side, alpha, beta, y_ref)
    assert_close(out, expected, xp, dtype, msg=f"seed={seed}: ")


@pytest.mark.parametrize("algorithm", ["auto", *ALGORITHMS])
@pytest.mark.parametrize("side", ["right", "left"])
def test_one_dimensional_x(xp, rng, side, algorithm):
    shapes = [(3, 4), (2, 5), (4, 4)]
    fs, fns = zip(*(random(xp, rng, s, "float64") for s in shapes))
    k = math.prod(s[0] for s in shapes) if side == "right" else math.prod(s[1] for s in shapes)
    x, xn = random(xp, rng, (k,), "float64")
    out = kronlinalg.kron_matmul(x, list(fs), side=side, algorithm=algorithm)
    assert out.ndim == 1
    assert_close(out, kron_matmul_ref(xn, fns, side), xp, "float64")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("side", ["right", "left"])
def test_batch_dims_that_do_not_merge(xp, rng, side, algorithm):
    # three batch dims with gaps in their strides: the kernel's two row levels cannot
    # describe them, so the CPU path compacts x once
    shapes = [(2, 3), (3, 2)]
    k = 6
    full = (2, 5, 3, k, 4) if side == "left" else (2, 5, 3, 4, k)
    base, _ = random(xp, rng, full, "float32")
    x = base[:, ::2, :, 1:, :] if side == "right" else base[:, ::2, :, :, 1:]
    xn = to_numpy(x).astype(np.float64)
    fs, fns = zip(*(random(xp, rng, s, "float32") for s in shapes))
    out = kronlinalg.kron_matmul(x, list(fs), side=side, algorithm=algorithm)
    assert_close(out, kron_matmul_ref(xn, fns, side), xp, "float32")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_matmul_broadcasting_of_batch_dims(xp, rng, algorithm):
    # a batch dim of size 1 next to a real one, and a zero-stride (broadcast) batch dim
    fs, fns = zip(*(random(xp, rng, s, "float64") for s in [(4, 3), (3, 5)]))
    x0, _ = random(xp, rng, (1, 7, 1, 12), "float64")
    x = xp.broadcast_to(x0, (3, 7, 2, 12))
    out = kronlinalg.kron_matmul(x, list(fs), algorithm=algorithm)
    assert_close(out, kron_matmul_ref(to_numpy(x), fns), xp, "float64")


# ---------------------------------------------------------------------------------------------
# dtypes


def _need_dtype(xp, dtype):
    if dtype not in xp.dtypes:
        pytest.skip(f"{xp.name} has no {dtype}")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_returns_input_dtype(xp, rng, dtype, side, algorithm):
    _need_dtype(xp, dtype)
    shapes = [(4, 5), (3, 3), (6, 2)]
    fs, fns = zip(*(random(xp, rng, s, dtype) for s in shapes))
    k = 72 if side == "right" else 30
    x, xn = random(xp, rng, (5, k) if side == "right" else (k, 5), dtype)
    out = kronlinalg.kron_matmul(x, list(fs), side=side, alpha=0.5, algorithm=algorithm)
    assert_close(out, kron_matmul_ref(xn, fns, side, 0.5), xp, dtype)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_with_y(xp, rng, dtype, algorithm):
    _need_dtype(xp, dtype)
    fs, fns = zip(*(random(xp, rng, s, dtype) for s in [(4, 5), (3, 3)]))
    x, xn = random(xp, rng, (6, 12), dtype)
    y, yn = random(xp, rng, (6, 15), dtype)
    out = kronlinalg.kron_matmul(x, list(fs), beta=-1.0, y=y, algorithm=algorithm)
    assert_close(out, kron_matmul_ref(xn, fns, "right", 1.0, -1.0, yn), xp, dtype)


def test_torch_bfloat16_y_with_beta_on_cpu():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 6, generator=g).to(torch.bfloat16)
    fs = [torch.randn(2, 2, generator=g).to(torch.bfloat16),
          torch.randn(3, 3, generator=g).to(torch.bfloat16)]
    y = torch.randn(3, 6, generator=g).to(torch.bfloat16)
    out = kronlinalg.kron_matmul(x, fs, beta=1.0, y=y, algorithm="sliced")
    ref = kronlinalg.kron_matmul(x, fs, beta=1.0, y=y, algorithm="shuffle")
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), ref.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("x_dtype, f_dtype, y_dtype, result", [
    ("float32", "float64", None, "float64"),
    ("float64", "float32", None, "float64"),
    ("float32", "float32", "float64", "float64"),
    ("float16", "float32", None, "float32"),
    ("bfloat16", "float32", None, "float32"),
    ("float16", "float64", None, "float64"),
])
def test_mixed_dtypes_promote(xp, rng, x_dtype, f_dtype, y_dtype, result, algorithm):
    for d in (x_dtype, f_dtype, y_dtype):
        if d is not None:
            _need_dtype(xp, d)
    f0, f0n = random(xp, rng, (3, 4), f_dtype)
    f1, f1n = random(xp, rng, (2, 2), "float32")
    x, xn = random(xp, rng, (5, 6), x_dtype)
    kwargs, yn, beta = {}, None, 0.0
    if y_dtype is not None:
        y, yn = random(xp, rng, (8,), y_dtype)
        kwargs, beta = {"y": y, "beta": 2.0}, 2.0
    out = kronlinalg.kron_matmul(x, [f0, f1], algorithm=algorithm, **kwargs)
    # inputs that were rounded to a lower precision are exact in the reference; the result's
    # tolerance is that of the lowest precision involved in the computation
    rtol = 1e-5 if "float32" in (x_dtype, f_dtype, y_dtype) and result == "float64" else None
    assert_close(out, kron_matmul_ref(xn, [f0n, f1n], "right", 1.0, beta, yn), xp, result,
                 rtol=rtol)


# ---------------------------------------------------------------------------------------------
# empty dimensions


@pytest.mark.parametrize("algorithm", ["auto", *ALGORITHMS])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("case", ["M=0", "P=0", "Q=0", "batch=0"])
def test_zero_size_dims(xp, rng, side, algorithm, case):
    shapes = {"P=0": [(3, 2), (0, 4)], "Q=0": [(3, 0), (2, 2)]}.get(case, [(3, 2), (2, 4)])
    if side == "left":
        shapes = [(q, p) for p, q in shapes]  # same out/in lengths as the right product
    fs = [to_xp(xp, rng.standard_normal(s), "float64") for s in shapes]
    fns = [to_numpy(f) for f in fs]
    kin = math.prod(s[0] for s in shapes) if side == "right" else math.prod(s[1] for s in shapes)
    rows = 0 if case == "M=0" else 3
    x_shape = (rows, kin) if side == "right" else (kin, rows)
    if case == "batch=0":
        x_shape = (0, 2) + x_shape
    xn = rng.standard_normal(x_shape)
    x = to_xp(xp, xn, "float64")
    out = kronlinalg.kron_matmul(x, fs, side=side, algorithm=algorithm)
    expected = kron_matmul_ref(xn, fns, side)
    assert_close(out, expected, xp, "float64")
    if case == "P=0" and rows:
        assert expected.size > 0  # a genuine all-zero result, not an empty one


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_zero_length_contraction_with_y(xp, rng, algorithm):
    # x @ kron(F) with a 0-row factor is the zero matrix: the result is exactly beta * y
    fs = [to_xp(xp, np.ones((0, 4))), to_xp(xp, rng.standard_normal((2, 3)))]
    x = to_xp(xp, np.ones((5, 0)))
    y, yn = random(xp, rng, (12,), "float64")
    out = kronlinalg.kron_matmul(x, fs, beta=-2.0, y=y, alpha=3.0, algorithm=algorithm)
    assert_close(out, np.broadcast_to(-2.0 * yn, (5, 12)), xp, "float64")


# ---------------------------------------------------------------------------------------------
# bad input: the error names the argument at fault


def named(name: str) -> str:
    """Regex for an error message that starts by naming `name`."""
    return "^" + re.escape(name) + ":"


def _ok_inputs(xp, rng):
    fs = [to_xp(xp, rng.standard_normal((3, 4))), to_xp(xp, rng.standard_normal((2, 2)))]
    x = to_xp(xp, rng.standard_normal((5, 6)))
    return x, fs


def test_bad_factors(xp, rng):
    x, fs = _ok_inputs(xp, rng)
    with pytest.raises(ValueError, match=named("factors")):
        kronlinalg.kron_matmul(x, [])
    with pytest.raises(ValueError, match=named("factors")):
        kronlinalg.kron_matmul(x, ())
    with pytest.raises(TypeError, match=named("factors")):
        kronlinalg.kron_matmul(x, None)
    with pytest.raises(ValueError, match=named("factors[1]")):
        kronlinalg.kron_matmul(x, [fs[0], to_xp(xp, rng.standard_normal(4))])
    with pytest.raises(ValueError, match=named("factors[0]")):
        kronlinalg.kron_matmul(x, [to_xp(xp, rng.standard_normal((3, 4, 1))), fs[1]])
    with pytest.raises(ValueError, match=named("factors[0]")):
        kronlinalg.kron_matmul(x, [to_xp(xp, np.asarray(2.0)), fs[1]])
    with pytest.raises(TypeError, match=named("factors[1]")):
        kronlinalg.kron_matmul(x, [fs[0], [[1.0, 2.0], [3.0, 4.0]]])


@pytest.mark.parametrize("side", ["right", "left"])
def test_bad_x_shape(xp, rng, side):
    _, fs = _ok_inputs(xp, rng)  # kron is 6 x 8
    wrong = (5, 8) if side == "right" else (6, 5)  # right needs last dim 6, left second-to-last 8
    expect = named("x") + r".*\b%d\b.*%s" % (6 if side == "right" else 8, side)
    with pytest.raises(ValueError, match=expect):
        kronlinalg.kron_matmul(to_xp(xp, rng.standard_normal(wrong)), fs, side=side)
    with pytest.raises(ValueError, match=named("x")):
        kronlinalg.kron_matmul(to_xp(xp, rng.standard_normal((2, 3) + wrong)), fs, side=side)
    with pytest.raises(ValueError, match=named("x")):
        kronlinalg.kron_matmul(to_xp(xp, rng.standard_normal(7)), fs, side=side)
    with pytest.raises(ValueError, match=named("x")):
        kronlinalg.kron_matmul(to_xp(xp, np.asarray(1.5)), fs, side=side)
    with pytest.raises(TypeError, match=named("x")):
        kronlinalg.kron_matmul(rng.standard_normal(6).tolist(), fs, side=side)


def _bad_array(xp, dtype, shape, rng):
    a = rng.standard_normal(shape) * 3
    if dtype == "bool":
        a = a > 0
    elif dtype.startswith("complex"):
        a = a + 1j * rng.standard_normal(shape)
    return to_xp(xp, np.asarray(a).astype(dtype))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool", "complex64", "complex128"])
@pytest.mark.parametrize("which", ["x", "factors[1]", "y"])
def test_non_real_float_dtypes_are_type_errors(xp, rng, dtype, which):
    x, fs = _ok_inputs(xp, rng)
    y = to_xp(xp, rng.standard_normal((5, 8)))
    if which == "x":
        x = _bad_array(xp, dtype, (5, 6), rng)
    elif which == "y":
        y = _bad_array(xp, dtype, (5, 8), rng)
    else:
        fs[1] = _bad_array(xp, dtype, (2, 2), rng)
    with pytest.raises(TypeError, match=named(which)):
        kronlinalg.kron_matmul(x, fs, beta=1.0, y=y)


def test_mixed_namespaces(xp, rng):
    torch = pytest.importorskip("torch")
    x, fs = _ok_inputs(xp, rng)

    def foreign(shape):  # an array of another library than xp's
        a = rng.standard_normal(shape)
        return torch.from_numpy(a) if xp.name == "numpy" else a

    with pytest.raises(TypeError, match=named("factors[1]")):
        kronlinalg.kron_matmul(x, [fs[0], foreign((2, 2))])
    with pytest.raises(TypeError, match=named("y")):
        kronlinalg.kron_matmul(x, fs, beta=1.0, y=foreign((5, 8)))


def test_numpy_x_with_torch_factor():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=named("factors[0]") + ".*torch"):
        kronlinalg.kron_matmul(np.ones((2, 4)), [torch.ones((4, 4), dtype=torch.float64)])
    with pytest.raises(TypeError, match=named("factors[0]")):
        kronlinalg.kron_matmul(torch.ones((2, 4)), [np.ones((4, 4))])


def test_bad_y(xp, rng):
    x, fs = _ok_inputs(xp, rng)  # result shape (5, 8)
    for shape in [(5, 7), (4, 8), (2, 5, 8), (8, 5), (7,)]:
        y = to_xp(xp, rng.standard_normal(shape))
        with pytest.raises(ValueError, match=named("y")):
            kronlinalg.kron_matmul(x, fs, beta=1.0, y=y)
    with pytest.raises(ValueError, match=named("y")):
        kronlinalg.kron_matmul(x, fs, beta=0.5)
    with pytest.raises(ValueError, match=named("y")):
        kronlinalg.kron_matmul(to_xp(xp, rng.standard_normal((8, 2))), fs, side="left",
                               beta=-1.0)


def test_bad_options(xp, rng):
    x, fs = _ok_inputs(xp, rng)
    for side in ["top", "RIGHT", None, ""]:
        with pytest.raises(ValueError, match=named("side")):
            kronlinalg.kron_matmul(x, fs, side=side)
    for algorithm in ["fast", "SLICED", None, ""]:
        with pytest.raises(ValueError, match=named("algorithm")):
            kronlinalg.kron_matmul(x, fs, algorithm=algorithm)
    with pytest.raises(TypeError, match=named("alpha")):
        kronlinalg.kron_matmul(x, fs, alpha="two")
    with pytest.raises(TypeError, match=named("beta")):
        kronlinalg.kron_matmul(x, fs, beta=[1.0], y=to_xp(xp, rng.standard_normal(8)))


def test_arguments_are_positional_and_keyword_only(xp, rng):
    x, fs = _ok_inputs(xp, rng)
    with pytest.raises(TypeError):
        kronlinalg.kron_matmul(x=x, factors=fs)
    with pytest.raises(TypeError):
        kronlinalg.kron_matmul(x, fs, "left")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_inputs_are_not_modified(xp, rng, algorithm):
    x, fs = _ok_inputs(xp, rng)
    y = to_xp(xp, rng.standard_normal((5, 8)))
    before = [to_numpy(a).copy() for a in (x, *fs, y)]
    out = kronlinalg.kron_matmul(x, fs, beta=2.0, y=y, alpha=-1.0, algorithm=algorithm)
    for a, b in zip((x, *fs, y), before):
        np.testing.assert_array_equal(to_numpy(a), b)
    # the result is a new array, not y written in place
    expected = kron_matmul_ref(before[0], before[1:3], "right", -1.0, 2.0, before[3])
    assert_close(out, expected, xp, "float64")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_y_may_be_x(xp, rng, algorithm):
    # square Kronecker product: y = x is a valid, aliasing argument and must be read as it was
    fs, fns = zip(*(random(xp, rng, s, "float64") for s in [(3, 3), (4, 4)]))
    x, xn = random(xp, rng, (5, 12), "float64")
    out = kronlinalg.kron_matmul(x, list(fs), beta=-1.0, y=x, algorithm=algorithm)
    assert_close(out, kron_matmul_ref(xn, fns, "right", 1.0, -1.0, xn), xp, "float64")
    np.testing.assert_array_equal(to_numpy(x), xn)


# ---------------------------------------------------------------------------------------------
# the caller's device, where array-api-strict has more than one


def test_array_api_strict_result_on_callers_device():
    xs = pytest.importorskip("array_api_strict")
    dev = xs.Device("device1")
    x = xs.asarray(np.arange(1.0, 13.0).reshape(2, 6), device=dev)
    fs = [xs.asarray(np.eye(2) + 1, device=dev), xs.asarray(np.eye(3) * 2, device=dev)]
    out = kronlinalg.kron_matmul(x, fs, algorithm="sliced")
    assert out.device == dev


@pytest.mark.parametrize("algorithm", ["shuffle"])
def test_array_api_strict_other_device_shuffle(algorithm):
    xs = pytest.importorskip("array_api_strict")
    dev = xs.Device("device1")
    xn = np.arange(1.0, 13.0).reshape(2, 6)
    fns = [np.eye(2) + 1, np.eye(3) * 2]
    out = kronlinalg.kron_matmul(xs.asarray(xn, device=dev),
                                 [xs.asarray(f, device=dev) for f in fns], algorithm=algorithm)
    assert out.device == dev
    np.testing.assert_allclose(np.asarray(xs.asarray(out, device=xs.Device("CPU_DEVICE"))),
                               xn @ np.kron(*fns))


def test_arrays_on_different_devices_are_rejected():
    xs = pytest.importorskip("array_api_strict")
    x = xs.ones((2, 4), device=xs.Device("device1"))
    f = xs.ones((4, 4), device=xs.Device("CPU_DEVICE"))
    with pytest.raises(ValueError, match=r"factors\[0\]"):
        kronlinalg.kron_matmul(x, [f])


# ---------------------------------------------------------------------------------------------
# torch autograd


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("grad_of", ["x", "factors", "all"])
def test_torch_autograd_matches_dense(xp, rng, dtype, side, grad_of):
    if not xp.is_torch:
        pytest.skip("autograd is torch-only")
    torch = xp.module
    shapes = [(3, 4), (2, 5), (2, 2)]
    K_in = 12 if side == "right" else 40
    x, _ = random(xp, rng, (2, 3, K_in) if side == "right" else (2, K_in, 3), dtype)
    fs = [random(xp, rng, s, dtype)[0] for s in shapes]
    y, _ = random(xp, rng, (2, 12, 3) if side == "left" else (2, 3, 40), dtype)
    wants = {"x": [x], "factors": fs, "all": [x, *fs, y]}[grad_of]
    for a in wants:
        a.requires_grad_(True)
    w, _ = random(xp, rng, (2, 3, 40) if side == "right" else (2, 12, 3), dtype)

    out = kronlinalg.kron_matmul(x, fs, side=side, alpha=0.7, beta=-1.3, y=y)
    assert out.dtype == getattr(torch, dtype) and out.device == x.device
    grads = torch.autograd.grad((out * w).sum(), wants)

    # dense float64 reference through torch.kron
    ref_in = [a.detach().to(torch.float64).requires_grad_(True) for a in wants]
    sub = dict(zip(map(id, wants), ref_in))
    x64, y64 = (sub.get(id(a), a.detach().to(torch.float64)) for a in (x, y))
    fs64 = [sub.get(id(f), f.detach().to(torch.float64)) for f in fs]
    k = fs64[0]
    for f in fs64[1:]:
        k = torch.kron(k, f)
    ref = (x64 @ k if side == "right" else k @ x64) * 0.7 - 1.3 * y64
    ref_grads = torch.autograd.grad((ref * w.to(torch.float64)).sum(), ref_in)
    np.testing.assert_allclose(to_numpy(out.detach()), to_numpy(ref.detach()),
                               rtol=GRAD_RTOL[dtype] * 10, atol=GRAD_RTOL[dtype] * 10)
    for g, r in zip(grads, ref_grads):
        assert g.dtype == getattr(torch, dtype) and g.shape == r.shape
        gn, rn = to_numpy(g).astype(np.float64), to_numpy(r)
        rel = np.linalg.norm(gn - rn) / np.linalg.norm(rn)
        assert rel <= GRAD_RTOL[dtype], f"gradient relative error {rel:.2e}"


def test_torch_no_grad_uses_kernel_and_returns_plain_tensor(xp, rng):
    if not xp.is_torch:
        pytest.skip("torch-only")
    torch = xp.module
    x, xn = random(xp, rng, (4, 6), "float64")
    fs, fns = zip(*(random(xp, rng, s, "float64") for s in [(2, 3), (3, 2)]))
    x.requires_grad_(True)
    with torch.no_grad():
        out = kronlinalg.kron_matmul(x, list(fs))
    assert not out.requires_grad
    assert_close(out, kron_matmul_ref(xn, fns), xp, "float64")


# ---------------------------------------------------------------------------------------------
# kron


@settings(max_examples=30)
@given(pshape=st.tuples(st.integers(0, 5), st.integers(0, 5)),
       qshape=st.tuples(st.integers(0, 5), st.integers(0, 5)),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2**32 - 1))
def test_kron_matches_numpy(xp, pshape, qshape, dtype, seed):
    rng = _seeded(seed)
    a, an = random(xp, rng, pshape, dtype)
    b, bn = random(xp, rng, qshape, dtype)
    assert_close(kronlinalg.kron(a, b), np.kron(an, bn), xp, dtype)


def test_kron_vectors_and_errors(xp, rng):
    a, an = random(xp, rng, (3,), "float64")
    b, bn = random(xp, rng, (4,), "float64")
    assert_close(kronlinalg.kron(a, b), np.kron(an, bn), xp, "float64")
    m, _ = random(xp, rng, (2, 2), "float64")
    with pytest.raises(ValueError, match="a, b"):
        kronlinalg.kron(a, m)
    with pytest.raises(ValueError, match="a, b"):
        kronlinalg.kron(to_xp(xp, np.ones((2, 2, 2))), to_xp(xp, np.ones((2, 2, 2))))
    with pytest.raises(TypeError, match="b"):
        kronlinalg.kron(m, to_xp(xp, np.ones((2, 2), dtype="int64")))


def test_kron_matmul_equals_matmul_with_kron(xp, rng):
    fs, fns = zip(*(random(xp, rng, s, "float64") for s in [(3, 4), (2, 5)]))
    x, xn = random(xp, rng, (7, 6), "float64")
    k = kronlinalg.kron(*fs)
    assert_close(k, kron_dense(fns), xp, "float64")
    assert_close(kronlinalg.kron_matmul(x, list(fs)), to_numpy(x @ k), xp, "float64", rtol=1e-13)
    assert array_api_compat.array_namespace(k) is xp.namespace
    assert dtype_name(k.dtype) == "float64"


# ---------------------------------------------------------------------------------------------
# repeated calls: a NumPy call whose signature was seen before skips validation and planning


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_repeated_numpy_calls_take_fresh_operands(rng, side, dtype):
    import sys

    kron_mod = sys.modules["kronlinalg.kron"]  # the module (kronlinalg.kron is the function)
    shapes = [(3, 4), (5, 2), (2, 3)]
    k = math.prod(p for p, _ in shapes) if side == "right" else math.prod(q for _, q in shapes)
    for rep, alpha in enumerate([1.0, -2.5, 3]):
        fs = [rng.standard_normal(s).astype(dtype) for s in shapes]
        x = rng.standard_normal((7, k) if side == "right" else (k, 7)).astype(dtype)
        out = kronlinalg.kron_matmul(x, fs, side=side, alpha=alpha, algorithm="sliced")
        ref = kron_matmul_ref(x, fs, side, alpha)
        err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
        assert err <= (1e-5 if dtype == "float32" else 1e-12), err
        assert out.dtype == dtype
    assert any(key[1] == "sliced" and key[0] == side for key in kron_mod.OPERATION.cached_signatures())
    with pytest.raises(ValueError, match="y"):  # beta without y: still refused
        kronlinalg.kron_matmul(x, fs, side=side, beta=1.0, algorithm="sliced")
    with pytest.raises(TypeError, match="alpha"):
        kronlinalg.kron_matmul(x, fs, side=side, alpha="2", algorithm="sliced")
    xt = np.asfortranarray(x)  # other strides: a new signature, still right
    out = kronlinalg.kron_matmul(xt, fs, side=side, algorithm="sliced")
    ref = kron_matmul_ref(x, fs, side)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) <= 1e-5


@pytest.mark.parametrize("side", ["right", "left"])
def test_repeated_torch_cpu_calls_take_fresh_operands(rng, side):
    """CPU torch tensors replay too (NumPy views of the tensors, the result a tensor), with the
    new tensors' values, alpha, layouts; tensors needing grad, lazy negated views and torch.func
    transforms of a replayed signature take the full path."""
    torch = pytest.importorskip("torch")
    import sys

    kron_mod = sys.modules["kronlinalg.kron"]
    shapes = [(3, 4), (5, 2), (2, 3)]
    k = math.prod(p for p, _ in shapes) if side == "right" else math.prod(q for _, q in shapes)
    xshape = (7, k) if side == "right" else (k, 7)
    for alpha in (1.0, -2.5, 3):
        fs = [rng.standard_normal(s) for s in shapes]
        x = rng.standard_normal(xshape)
        out = kronlinalg.kron_matmul(torch.from_numpy(x), [torch.from_numpy(f) for f in fs],
                                     side=side, alpha=alpha, algorithm="sliced")
        assert type(out) is torch.Tensor and out.dtype == torch.float64
        ref = kron_matmul_ref(x, fs, side, alpha)
        assert np.linalg.norm(out.numpy() - ref) / np.linalg.norm(ref) <= 1e-12
    assert any(key[0] == side and key[2][0][0] is torch.Tensor
               for key in kron_mod.OPERATION.cached_signatures()), "fast path never armed"
    xt, ft = torch.from_numpy(x), [torch.from_numpy(f) for f in fs]
    neg = torch._neg_view(xt)  # a lazy negated view: numpy() refuses it, the full path does not
    out = kronlinalg.kron_matmul(neg, ft, side=side, algorithm="sliced")
    assert np.allclose(out.numpy(), -kron_matmul_ref(x, fs, side), rtol=1e-12, atol=1e-12)
    fg = [f.clone().requires_grad_() for f in ft]
    kronlinalg.kron_matmul(xt, fg, side=side, algorithm="sliced").sum().backward()
    assert all(f.grad is not None and torch.isfinite(f.grad).all() for f in fg)
    if side == "right":  # vmap over rows of a signature replayed above (per-example shapes)
        kronlinalg.kron_matmul(xt[0], ft, algorithm="sliced")
        kronlinalg.kron_matmul(xt[0], ft, algorithm="sliced")
        got = torch.func.vmap(lambda r: kronlinalg.kron_matmul(r, ft))(xt)
        assert np.allclose(got.numpy(), kron_matmul_ref(x, fs, side), rtol=1e-12, atol=1e-12)


def test_float32_precision_switch():
    """kron.float32_precision: validated, round-trips, and the CUDA cost model follows it (the
    fused kernels' float32 flop rate is 3xTF32's on factors with P % 8 == 0, the CUDA cores'
    otherwise and in the IEEE mode)."""
    import sys

    from kronlinalg.planner.costs import kron
    from kronlinalg.planner import profiles

    kron_mod = sys.modules["kronlinalg.kron"]  # the module (kronlinalg.kron is the function)
    prof = profiles.KNOWN_GPUS["h100-sxm"]
    start = kron_mod.float32_precision()
    assert start in ("tf32x3", "ieee")
    with pytest.raises(ValueError, match="precision"):
        kron_mod.float32_precision("tf32")
    try:
        kron_mod.float32_precision("tf32x3")
        fast = kron.cuda_flops(prof, "float32", [(16, 16)] * 3, kron_mod.float32_precision())
        mixed = kron.cuda_flops(prof, "float32", [(16, 16), (5, 5)], kron_mod.float32_precision())
        assert kron_mod.float32_precision("ieee") == "tf32x3"
        assert kron_mod.float32_precision() == "ieee"
        slow = kron.cuda_flops(prof, "float32", [(16, 16)] * 3, kron_mod.float32_precision())
        assert fast > 1.5 * slow and mixed == slow
        # (float64: CUDA cores, except P x P factors of the natural-order kernel on DMMA)
        assert kron.cuda_flops(prof, "float64", [(16, 12)] * 3, kron_mod.float32_precision()) < slow
        assert kron.cuda_flops(prof, "float64", [(16, 16)] * 3, "ieee") > 1.5 * kron.cuda_flops(
            prof, "float64", [(16, 12)] * 3, "ieee")
    finally:
        kron_mod.float32_precision(start)
    assert kron_mod.float32_precision() == start


def test_left_product_of_a_tall_row_major_x(xp, rng):
    """The Gaussian-process shape K @ V (x of many rows, few columns, row-major): the result is
    laid out like x, right for every algorithm, and auto does not take the slow path."""
    fs, fns = zip(*(random(xp, rng, (4, 4), "float64") for _ in range(3)))
    fs = list(fs)
    x, x64 = random(xp, rng, (64, 3), "float64")
    ref = kron_matmul_ref(x64, list(fns), "left")
    for alg in ("auto", "sliced", "shuffle"):
        out = kronlinalg.kron_matmul(x, fs, side="left", algorithm=alg)
        assert_close(out, ref, xp, "float64")
        out = kronlinalg.kron_matmul(x, fs, side="left", algorithm=alg)  # the replay
        assert_close(out, ref, xp, "float64")
    assert kronlinalg.plan("kron_matmul", (65536, 8), *[(16, 16)] * 4, side="left",
                           device="cpu")[0].name == "sliced"
