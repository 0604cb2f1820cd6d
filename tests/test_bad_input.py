"""Bad input, one table per public function: each case gives a TypeError/ValueError whose
message names the argument at fault (or says what is right), or the right answer; none crashes
the interpreter.  Crash-prone cases (huge dimensions) run in a subprocess.

A row is (id, call, expected): expected is an (exception type(s), regex on the message) pair,
or a callable that checks the result.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kronlinalg
from kronlinalg import explain
from kronlinalg import kron
from kronlinalg import kron_matmul
from kronlinalg import namespace
from kronlinalg import plan
from kronlinalg import structured_matmul
from kronlinalg.structured import KSFactor

ERR = (TypeError, ValueError)
E3, E4 = np.eye(3), np.eye(4)
X = np.arange(24.0).reshape(2, 12)


def _torch():
    return pytest.importorskip("torch")


def _zeros(shape):
    def check(out):
        assert tuple(out.shape) == shape and not np.any(np.asarray(out))
    return check


def _dense_product(a, b):
    with np.errstate(invalid="ignore"):  # inf · 0 in the reference itself
        return a @ b


def _like_dense(ref):
    """The result has NaN and Inf exactly where the dense float64 product has them (0·NaN is
    NaN: a NaN reaches every output its row meets, zeros or not) and the same finite values."""
    def check(out):
        out = np.asarray(out)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
        np.testing.assert_array_equal(np.isposinf(out), np.isposinf(ref))
        np.testing.assert_array_equal(np.isneginf(out), np.isneginf(ref))
        fin = np.isfinite(ref)
        np.testing.assert_allclose(out[fin], ref[fin], rtol=1e-12)
    return check


def _run(call, expected):
    if callable(expected):
        expected(call())
        return
    exc, match = expected
    with pytest.raises(exc, match=match):
        call()


# ---------------------------------------------------------------------------------------------
# kron_matmul

_x_nan = X.copy()
_x_nan[1, 3] = np.nan
_x_inf = X.copy()
_x_inf[0, 0] = np.inf

KRON_MATMUL = [
    ("x list", lambda: kron_matmul([[1.0] * 12], [E3, E4]), (TypeError, "x")),
    ("x None", lambda: kron_matmul(None, [E3, E4]), (TypeError, "x")),
    ("factors array of rows", lambda: kron_matmul(X, np.eye(12)), (ValueError, r"factors\[0\]")),
    ("factors string", lambda: kron_matmul(X, "ab"), (TypeError, "factors")),
    ("factors empty", lambda: kron_matmul(X, []), (ValueError, "factors")),
    ("factors int", lambda: kron_matmul(X, 3), (TypeError, "factors")),
    ("factor 1-D", lambda: kron_matmul(X, [np.ones(3), E4]), (ValueError, r"factors\[0\]")),
    ("factor 3-D", lambda: kron_matmul(X, [E3, np.ones((1, 4, 4))]), (ValueError, r"factors\[1\]")),
    ("x int", lambda: kron_matmul(np.ones((2, 12), dtype=np.int64), [E3, E4]), (TypeError, "x")),
    ("x bool", lambda: kron_matmul(np.ones((2, 12), dtype=bool), [E3, E4]), (TypeError, "x")),
    ("x complex", lambda: kron_matmul(X.astype(complex), [E3, E4]), (TypeError, "x")),
    ("factor int", lambda: kron_matmul(X, [E3, np.eye(4, dtype=np.int32)]),
     (TypeError, r"factors\[1\]")),
    ("y complex", lambda: kron_matmul(X, [E3, E4], beta=1.0, y=X.astype(np.complex64)),
     (TypeError, "y")),
    ("x big-endian", lambda: kron_matmul(X.astype(">f8"), [E3, E4]),
     lambda out: np.testing.assert_array_equal(out, X)),
    ("x 0-D", lambda: kron_matmul(np.float64(1.0), [E3, E4]), (ValueError, "x")),
    ("x wrong length", lambda: kron_matmul(np.ones((2, 11)), [E3, E4]), (ValueError, "x.*12")),
    ("x wrong length left", lambda: kron_matmul(np.ones((11, 2)), [E3, E4], side="left"),
     (ValueError, "x.*12")),
    ("y wrong shape", lambda: kron_matmul(X, [E3, E4], beta=1.0, y=np.ones((3, 12))),
     (ValueError, "y")),
    ("beta without y", lambda: kron_matmul(X, [E3, E4], beta=1.0, y=None), (ValueError, "y")),
    ("side", lambda: kron_matmul(X, [E3, E4], side="up"), (ValueError, "side")),
    ("side list", lambda: kron_matmul(X, [E3, E4], side=["right"]), (ValueError, "side")),
    ("algorithm", lambda: kron_matmul(X, [E3, E4], algorithm="fast"), (ValueError, "algorithm")),
    ("unknown keyword", lambda: kron_matmul(X, [E3, E4], sid="left"), (TypeError, "sid")),
    ("positional option", lambda: kron_matmul(X, [E3, E4], "left"), (TypeError, "positional")),
    ("alpha array", lambda: kron_matmul(X, [E3, E4], alpha=np.ones(2)), (TypeError, "alpha")),
    ("alpha string", lambda: kron_matmul(X, [E3, E4], alpha="2"), (TypeError, "alpha")),
    ("alpha huge", lambda: kron_matmul(X, [E3, E4], alpha=10 ** 400), (ValueError, "alpha")),
    ("empty batch", lambda: kron_matmul(np.ones((0, 12)), [E3, E4]), _zeros((0, 12))),
    ("empty batch left", lambda: kron_matmul(np.ones((12, 0)), [E3, E4], side="left"),
     _zeros((12, 0))),
    ("empty factor rows", lambda: kron_matmul(np.ones((2, 0)), [np.ones((0, 3))]),
     _zeros((2, 3))),
    ("empty factor cols", lambda: kron_matmul(np.ones((2, 3)), [np.ones((3, 0))]),
     _zeros((2, 0))),
    ("NaN propagates", lambda: kron_matmul(_x_nan, [E3, np.ones((4, 4))], algorithm="sliced"),
     _like_dense(_dense_product(_x_nan, np.kron(E3, np.ones((4, 4)))))),
    ("NaN propagates left", lambda: kron_matmul(_x_nan.T, [E3, np.ones((4, 4))], side="left"),
     _like_dense(_dense_product(np.kron(E3, np.ones((4, 4))), _x_nan.T))),
    ("Inf propagates", lambda: kron_matmul(_x_inf, [np.ones((3, 3)), E4], algorithm="sliced"),
     _like_dense(_dense_product(_x_inf, np.kron(np.ones((3, 3)), E4)))),
    ("Inf propagates shuffle", lambda: kron_matmul(_x_inf, [np.ones((3, 3)), E4],
                                                   algorithm="shuffle"),
     _like_dense(_dense_product(_x_inf, np.kron(np.ones((3, 3)), E4)))),
]


@pytest.mark.parametrize("call,expected", [pytest.param(c, e, id=i) for i, c, e in KRON_MATMUL])
def test_kron_matmul_bad_input(call, expected):
    _run(call, expected)


def test_kron_matmul_mixed_libraries():
    torch = _torch()
    with pytest.raises(TypeError, match=r"factors\[0\].*one library"):
        kron_matmul(X, [torch.eye(3, dtype=torch.float64), E4])
    with pytest.raises(TypeError, match="y"):
        kron_matmul(X, [E3, E4], beta=1.0, y=torch.ones(2, 12, dtype=torch.float64))


def test_kron_matmul_mixed_devices():
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    with pytest.raises(ValueError, match=r"factors\[0\].*device"):
        kron_matmul(torch.ones(2, 12, device="cuda"), [torch.eye(3), torch.eye(4, device="cuda")])


# ---------------------------------------------------------------------------------------------
# kron

A2 = np.arange(6.0).reshape(2, 3)

KRON = [
    ("a list", lambda: kron([[1.0]], A2), (TypeError, "a")),
    ("b None", lambda: kron(A2, None), (TypeError, "b")),
    ("a int", lambda: kron(np.ones((2, 2), dtype=int), A2), (TypeError, "a")),
    ("b bool", lambda: kron(A2, np.ones((2, 2), dtype=bool)), (TypeError, "b")),
    ("b complex", lambda: kron(A2, A2.astype(complex)), (TypeError, "b")),
    ("a big-endian", lambda: kron(A2.astype(">f8"), np.eye(2)),
     lambda out: np.testing.assert_array_equal(out, np.kron(A2, np.eye(2)))),
    ("empty", lambda: kron(np.ones((0, 2)), A2), _zeros((0, 6))),
    ("NaN", lambda: kron(np.array([[np.nan]]), np.ones((1, 2))),
     lambda out: np.testing.assert_array_equal(np.isnan(out), [[True, True]])),
]


@pytest.mark.parametrize("call,expected", [pytest.param(c, e, id=i) for i, c, e in KRON])
def test_kron_bad_input(call, expected):
    _run(call, expected)


# ---------------------------------------------------------------------------------------------
# KSFactor and structured_matmul

V = np.ones((2, 3, 2, 2))
F = KSFactor((2, 3, 2, 2), V)  # 12 x 8
XS = np.arange(24.0).reshape(3, 8)

KSFACTOR = [
    ("pattern short", lambda: KSFactor((2, 3, 2), V), (ValueError, "pattern")),
    ("pattern zero", lambda: KSFactor((0, 3, 2, 2), np.ones((0, 3, 2, 2))),
     (ValueError, "pattern")),
    ("pattern float", lambda: KSFactor((2.0, 3, 2, 2), V), (TypeError, "pattern")),
    ("pattern string", lambda: KSFactor("abcd", V), (ValueError, "pattern")),
    ("values list", lambda: KSFactor((1, 1, 1, 1), [[[[1.0]]]]), (TypeError, "values")),
    ("values shape", lambda: KSFactor((2, 3, 2, 2), np.ones((2, 3, 2))), (ValueError, "values")),
    ("values int", lambda: KSFactor((2, 3, 2, 2), V.astype(int)), (TypeError, "values")),
    ("values complex", lambda: KSFactor((2, 3, 2, 2), V.astype(complex)), (TypeError, "values")),
    ("values bool", lambda: KSFactor((2, 3, 2, 2), V.astype(bool)), (TypeError, "values")),
    ("values big-endian", lambda: KSFactor((2, 3, 2, 2), V.astype(">f8")).to_dense(),
     lambda out: np.testing.assert_array_equal(out, F.to_dense())),
    ("unknown keyword", lambda: KSFactor((2, 3, 2, 2), V, layout="x"), (TypeError, "layout")),
]


@pytest.mark.parametrize("call,expected", [pytest.param(c, e, id=i) for i, c, e in KSFACTOR])
def test_ksfactor_bad_input(call, expected):
    _run(call, expected)


_xs_nan = XS.copy()
_xs_nan[1, 0] = np.nan


def _structural(x, factor):
    """x @ factor.T with NaN exactly where a NaN of x meets the factor's support."""
    dense = np.asarray(factor.to_dense())
    support = dense != 0
    ref = np.nan_to_num(x) @ dense.T
    ref[(np.isnan(x).astype(int) @ support.T.astype(int)) > 0] = np.nan
    return _like_dense(ref)

STRUCTURED = [
    ("x list", lambda: structured_matmul([[1.0] * 8], F), (TypeError, "x")),
    ("factors array", lambda: structured_matmul(XS, np.ones((12, 8))), (TypeError, "factors")),
    ("factors list of arrays", lambda: structured_matmul(XS, [np.ones((12, 8))]),
     (TypeError, "factors")),
    ("factors empty", lambda: structured_matmul(XS, []), (ValueError, "factors")),
    ("x int", lambda: structured_matmul(XS.astype(int), F), (TypeError, "x")),
    ("x bool", lambda: structured_matmul(XS.astype(bool), F), (TypeError, "x")),
    ("x complex", lambda: structured_matmul(XS.astype(complex), F), (TypeError, "x")),
    ("x big-endian", lambda: structured_matmul(XS.astype(">f8"), F),
     lambda out: np.testing.assert_allclose(out, XS @ F.to_dense().T)),
    ("x 0-D", lambda: structured_matmul(np.float64(1.0), F), (ValueError, "x")),
    ("x wrong length", lambda: structured_matmul(np.ones((3, 7)), F), (ValueError, "x.*8")),
    ("batch_last 3-D", lambda: structured_matmul(np.ones((8, 2, 2)), F, layout="batch_last"),
     (ValueError, "x")),
    ("layout", lambda: structured_matmul(XS, F, layout="rows"), (ValueError, "layout")),
    ("algorithm", lambda: structured_matmul(XS, F, algorithm="fast"), (ValueError, "algorithm")),
    ("unknown keyword", lambda: structured_matmul(XS, F, side="left"), (TypeError, "side")),
    ("chain mismatch", lambda: structured_matmul(XS, [F, F]), (ValueError, "factors")),
    ("empty batch", lambda: structured_matmul(np.ones((0, 8)), F), _zeros((0, 12))),
    ("empty batch_last", lambda: structured_matmul(np.ones((8, 0)), F, layout="batch_last"),
     _zeros((12, 0))),
    # structural zeros are not stored: a NaN of x reaches the outputs its row meets in the
    # factor's support only (not every output, as 0·NaN in a dense product would)
    ("NaN propagates", lambda: structured_matmul(_xs_nan, F, algorithm="kernel"),
     _structural(_xs_nan, F)),
    ("NaN propagates bmm", lambda: structured_matmul(_xs_nan, F, algorithm="bmm"),
     _structural(_xs_nan, F)),
]


@pytest.mark.parametrize("call,expected", [pytest.param(c, e, id=i) for i, c, e in STRUCTURED])
def test_structured_matmul_bad_input(call, expected):
    _run(call, expected)


def test_structured_matmul_mixed_libraries():
    torch = _torch()
    with pytest.raises(TypeError, match="one library"):
        structured_matmul(torch.ones(3, 8, dtype=torch.float64), F)


# ---------------------------------------------------------------------------------------------
# plan, explain, namespace

SHAPES = ((2, 12), (3, 3), (4, 4))

PLAN = [
    ("op unknown", lambda: plan("kron_matmull", *SHAPES), (ValueError, "op")),
    ("op None", lambda: plan(None, *SHAPES), (ValueError, "op")),
    ("dtype banana", lambda: plan("kron_matmul", *SHAPES, dtype="banana"), (ValueError, "dtype")),
    ("dtype int32", lambda: plan("kron_matmul", *SHAPES, dtype="int32"), (ValueError, "dtype")),
    ("dtype np.int64", lambda: plan("kron_matmul", *SHAPES, dtype=np.int64),
     (ValueError, "dtype")),
    ("dtype complex", lambda: plan("kron_matmul", *SHAPES, dtype="complex64"),
     (ValueError, "dtype")),
    ("device", lambda: plan("kron_matmul", *SHAPES, device="tpu"), (ValueError, "device")),
    ("algorithm", lambda: plan("kron_matmul", *SHAPES, algorithm="fast"),
     (ValueError, "algorithm")),
    ("mismatched shapes", lambda: plan("kron_matmul", (2, 11), (3, 3), (4, 4)), (ERR, "")),
    ("shape not a tuple", lambda: plan("kron_matmul", 12, (3, 3)), (ERR, "")),
    ("shape of strings", lambda: plan("kron_matmul", ("a", 12), (3, 3)), (ERR, "")),
    ("float dtype object", lambda: plan("kron_matmul", *SHAPES, dtype=np.float32),
     lambda out: out[0].name),
]


@pytest.mark.parametrize("call,expected", [pytest.param(c, e, id=i) for i, c, e in PLAN])
def test_plan_bad_input(call, expected):
    _run(call, expected)


@pytest.mark.parametrize("kwargs,match", [
    ({"dtype": "banana"}, "dtype"),
    ({"device": "tpu"}, "device"),
    ({"algorithm": "fast"}, "algorithm"),
])
def test_explain_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        explain("kron_matmul", *SHAPES, file=None, **kwargs)
    assert "kron_matmul" in explain("kron_matmul", *SHAPES, file=None)


@pytest.mark.parametrize("arg", [[1.0, 2.0], None, "x", 3.0])
def test_namespace_bad_input(arg):
    with pytest.raises(TypeError):
        namespace(arg)


def test_namespace_of_good_input_extends_linalg():
    xp = namespace(np.ones(3))
    assert hasattr(xp.linalg, "kron_matmul")


# ---------------------------------------------------------------------------------------------
# huge dimensions: an error or a MemoryError, never a crash (subprocess)

_TESTS = os.path.dirname(os.path.abspath(__file__))

HUGE = {
    "kron_matmul factor 2^31 rows": """
        f = np.broadcast_to(1.0, (2**31, 1))
        x = np.broadcast_to(1.0, (2**31,))
        kron_matmul(x, [f], algorithm="sliced")
    """,
    "kron_matmul product of factors beyond int64": """
        fs = [np.broadcast_to(1.0, (2**16, 1))] * 5
        kron_matmul(np.ones(3), fs)
    """,
    "kron_matmul huge batch": """
        x = np.broadcast_to(1.0, (2**40, 4))
        kron_matmul(x, [np.eye(2), np.eye(2)])
    """,
    "structured_matmul huge pattern": """
        v = np.broadcast_to(1.0, (2**20, 2**20, 1, 1))
        structured_matmul(np.ones((2, 2**20)), KSFactor((2**20, 2**20, 1, 1), v))
    """,
    "plan huge shapes": """
        plan("kron_matmul", (2**62, 2**31), (2**31, 2**31))
        plan("structured_matmul", (2**40, 2**20), (2**20, 1, 1, 1))
    """,
}


@pytest.mark.parametrize("name", sorted(HUGE))
def test_huge_dimensions_do_not_crash(name):
    code = ("import sys; sys.path.insert(0, %r)\n" % _TESTS
            + "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
            + "import numpy as np\nfrom kronlinalg import kron_matmul, structured_matmul, plan\n"
            + "from kronlinalg.structured import KSFactor\ntry:\n"
            + textwrap.indent(textwrap.dedent(HUGE[name]), "    ")
            + "    print('result')\n"
            + "except (TypeError, ValueError, MemoryError, OverflowError) as exc:\n"
            + "    print('error', type(exc).__name__, exc)\n")
    # (run from the tests' folder: from the repository root, the source tree would shadow the
    # installed package)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, cwd=os.path.dirname(os.path.abspath(__file__)),
                          env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert "result" in proc.stdout or "error" in proc.stdout, proc.stdout + proc.stderr
    if "OverflowError" in proc.stdout:
        pytest.fail(f"an OverflowError names no argument: {proc.stdout}")
