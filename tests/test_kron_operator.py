"""KroneckerOperator against dense float64 references (np.kron of the rounded factors), on every
backend present; torch gradients by gradcheck/gradgradcheck; properties; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kronlinalg import KroneckerOperator
from kronlinalg.kron_operator import eigenvalue_grid
from _helpers import to_numpy, to_xp

# solves and logdets of well-conditioned SPD systems (eigenvalues in [0.5, ~4]): a few ulps
# of the condition number
TOL = {"float64": 1e-10, "float32": 2e-4}
SHAPES = [(3, 4, 5), (7,), (2, 3), (5, 1, 6), (2, 2, 2, 3)]
SHIFTS = [0.0, 0.3]


def spd(rng, n):
    a = rng.standard_normal((n, n))
    return a @ a.T / n + 0.5 * np.eye(n)


def dense(factors):
    out = np.ones((1, 1))
    for f in factors:
        out = np.kron(out, f)
    return out


def make(xp, rng, sizes, dtype="float64", square=True):
    host = [spd(rng, n) if square else rng.standard_normal(n) for n in sizes]
    arrs = [to_xp(xp, f, dtype) for f in host]
    return KroneckerOperator(arrs), [to_numpy(a).astype(np.float64) for a in arrs]


def close(got, ref, dtype, tol=None):
    got = to_numpy(got).astype(np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.all(np.isfinite(got))
    err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300)
    assert err <= (tol or TOL[dtype]), err


def rmatmul(v, op, xp):
    # array-api-strict's arrays raise TypeError on `v @ op` instead of deferring to op
    return op.rmatmul(v) if xp.name == "array_api_strict" else v @ op


def poisoned_like(xp, rng, shape, dtype):
    return to_xp(xp, rng.standard_normal(shape), dtype)


# ------------------------------------------------------------------------ values

@pytest.mark.parametrize("sizes", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dense_diagonal_products(xp, rng, sizes, dtype):
    op, host = make(xp, rng, sizes, dtype)
    ref = dense(host)
    n = ref.shape[0]
    assert op.shape == (n, n) and op.ndim == 2
    close(op.to_dense(), ref, dtype, 1e-6 if dtype == "float32" else 1e-14)
    close(op.diagonal(), np.diag(ref), dtype, 1e-6 if dtype == "float32" else 1e-14)
    x = poisoned_like(xp, rng, (n, 3), dtype)
    xh = to_numpy(x).astype(np.float64)
    x_before = xh.copy()
    close(op @ x, ref @ xh, dtype)
    close(op.T @ x, ref.T @ xh, dtype)
    v = poisoned_like(xp, rng, (2, n), dtype)
    close(rmatmul(v, op, xp), to_numpy(v).astype(np.float64) @ ref, dtype)
    close(op @ x[:, 0], ref @ xh[:, 0], dtype)
    assert np.array_equal(to_numpy(x), x_before.astype(to_numpy(x).dtype))


def test_rectangular_products(xp, rng):
    factors = [rng.standard_normal(s) for s in ((2, 3), (4, 1), (3, 5))]
    op = KroneckerOperator([to_xp(xp, f) for f in factors])
    ref = dense(factors)
    assert op.shape == ref.shape == (24, 15)
    close(op.to_dense(), ref, "float64")
    x = rng.standard_normal((2, 15, 4))
    close(op @ to_xp(xp, x), ref @ x, "float64")
    y = rng.standard_normal((3, 24))
    close(rmatmul(to_xp(xp, y), op, xp), y @ ref, "float64")
    close(op.T.to_dense(), ref.T, "float64")
    with pytest.raises(ValueError, match="factors\\[0\\].*square"):
        op.solve(to_xp(xp, rng.standard_normal(15)))
    with pytest.raises(ValueError, match="square"):
        op.diagonal()


def test_compose_mixed_product(xp, rng):
    a, ha = make(xp, rng, (3, 4))
    b, hb = make(xp, rng, (3, 4))
    close((a @ b).to_dense(), dense(ha) @ dense(hb), "float64")


@pytest.mark.parametrize("sizes", SHAPES)
@pytest.mark.parametrize("shift", SHIFTS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_solve_logdet(xp, rng, sizes, shift, dtype):
    op, host = make(xp, rng, sizes, dtype)
    a = dense(host) + shift * np.eye(math.prod(sizes))
    n = a.shape[0]
    for shape in ((n,), (n, 3), (2, n, 2)):
        b = poisoned_like(xp, rng, shape, dtype)
        bh = to_numpy(b).astype(np.float64)
        before = bh.copy()
        x = op.solve(b, shift=shift)
        assert str(x.dtype).endswith(dtype)
        close(x, np.linalg.solve(a, bh) if len(shape) < 3 else np.linalg.solve(a[None], bh), dtype)
        assert np.array_equal(to_numpy(b).astype(np.float64), before)  # b untouched
    sign, ref_logdet = np.linalg.slogdet(a)
    assert sign > 0
    got = float(to_numpy(op.logdet(shift)))
    assert abs(got - ref_logdet) <= TOL[dtype] * max(1.0, abs(ref_logdet)) * 10
    b = poisoned_like(xp, rng, (n, 2), dtype)
    bh = to_numpy(b).astype(np.float64)
    quad, ld = op.inv_quad_logdet(b, shift=shift)
    close(quad, np.sum(bh * np.linalg.solve(a, bh)), dtype)
    # (as logdet above: absolute below 1 - a logdet near 0 has no relative accuracy to speak of)
    assert abs(float(to_numpy(ld)) - ref_logdet) <= TOL[dtype] * max(1.0, abs(ref_logdet)) * 10


def test_repeated_solves_reuse_and_change_shift(xp, rng):
    op, host = make(xp, rng, (4, 5))
    b = to_xp(xp, rng.standard_normal(20))
    for shift in (0.1, 0.1, 2.0, 0.1):
        ref = np.linalg.solve(dense(host) + shift * np.eye(20), to_numpy(b))
        close(op.solve(b, shift), ref, "float64")


def test_eigh(xp, rng):
    op, host = make(xp, rng, (3, 4))
    vals, vecs = op.eigh()
    assert len(vals) == len(vecs) == 2
    for lam, q, f in zip(vals, vecs, host):
        lam, q = to_numpy(lam), to_numpy(q)
        close(q @ np.diag(lam) @ q.T, f, "float64", 1e-13)
        assert np.all(np.diff(lam) >= 0)
    grid = to_numpy(eigenvalue_grid(xp.namespace, vals))
    np.testing.assert_allclose(np.sort(grid), np.linalg.eigvalsh(dense(host)), rtol=1e-12)
    assert op.eigh() is op.eigh()  # cached


def test_logdet_gradient_closed_form(xp, rng):
    op, host = make(xp, rng, (3, 2, 4))
    shift = 0.2
    grads, gs = op.logdet_gradient(shift)
    a_inv = np.linalg.inv(dense(host) + shift * np.eye(24))
    assert abs(float(to_numpy(gs)) - np.trace(a_inv)) < 1e-10 * np.trace(a_inv)
    # tr(A⁻¹ dK) for dK = I ⊗ E ⊗ I with a symmetric E: tr(G1 E)
    e = rng.standard_normal((2, 2))
    e = e + e.T
    dk = np.kron(np.kron(np.eye(3), e), np.eye(4))
    want = np.trace(a_inv @ (np.kron(np.kron(host[0], e), host[2])))
    got = np.trace(to_numpy(grads[1]) @ e)
    assert abs(got - want) < 1e-10 * max(1.0, abs(want))
    assert dk.shape == (24, 24)


@pytest.mark.filterwarnings("ignore:invalid value encountered in log")
def test_logdet_of_indefinite_is_nan():
    op = KroneckerOperator([np.diag([1.0, -2.0]), np.eye(2)])
    assert np.isnan(op.logdet())
    assert np.isfinite(op.logdet(shift=3.0))


def test_mixed_factor_dtypes_promote(rng):
    fs = [spd(rng, 3).astype(np.float32), spd(rng, 4)]
    op = KroneckerOperator(fs)
    assert op.dtype == np.float64
    b = rng.standard_normal(12).astype(np.float32)
    x = op.solve(b, 0.5)
    assert x.dtype == np.float64
    close(x, np.linalg.solve(dense([f.astype(np.float64) for f in fs]) + 0.5 * np.eye(12), b),
          "float64")


# ------------------------------------------------------------------------ torch autograd

def _torch_inputs(torch, rng, sizes, rhs):
    fs = [torch.tensor(spd(rng, n), requires_grad=True) for n in sizes]
    s = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(rng.standard_normal(rhs), requires_grad=True)
    return fs, s, b


def _sym(a):
    # solve/logdet read symmetric factors (eigh's lower triangle): gradcheck through a
    # symmetric parametrisation, as for torch.linalg.eigh
    return (a + a.mT) / 2


@pytest.mark.parametrize("sizes,rhs", [((3, 4), (12, 2)), ((2, 3, 2), (12,))])
def test_gradcheck_solve_logdet(rng, sizes, rhs):
    torch = pytest.importorskip("torch")
    fs, s, b = _torch_inputs(torch, rng, sizes, rhs)

    def solve(b, s, *fs):
        return KroneckerOperator([_sym(f) for f in fs]).solve(b, s)

    def logdet(s, *fs):
        return KroneckerOperator([_sym(f) for f in fs]).logdet(s)

    def inv_quad_logdet(b, s, *fs):
        q, ld = KroneckerOperator([_sym(f) for f in fs]).inv_quad_logdet(b, s)
        return q + ld

    assert torch.autograd.gradcheck(solve, (b, s, *fs))
    assert torch.autograd.gradcheck(logdet, (s, *fs))
    assert torch.autograd.gradcheck(inv_quad_logdet, (b, s, *fs))
    assert torch.autograd.gradgradcheck(solve, (b, s, *fs))
    assert torch.autograd.gradgradcheck(logdet, (s, *fs))


def test_gradcheck_products_dense_diagonal(rng):
    torch = pytest.importorskip("torch")
    fs = [torch.tensor(rng.standard_normal(sh), requires_grad=True) for sh in ((2, 3), (3, 2))]
    x = torch.tensor(rng.standard_normal((6, 2)), requires_grad=True)
    y = torch.tensor(rng.standard_normal((2, 6)), requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *f: KroneckerOperator(f) @ x, (x, *fs))
    assert torch.autograd.gradcheck(lambda y, *f: y @ KroneckerOperator(f), (y, *fs))
    assert torch.autograd.gradcheck(lambda *f: KroneckerOperator(f).to_dense(), tuple(fs))
    sq = [torch.tensor(spd(rng, n), requires_grad=True) for n in (2, 3)]
    assert torch.autograd.gradcheck(lambda *f: KroneckerOperator(f).diagonal(), tuple(sq))


def test_gradient_with_repeated_eigenvalues_is_finite(rng):
    """Identity-like factors (every eigenvalue repeated): eigh's backward would divide by zero
    gaps; the operator's does not."""
    torch = pytest.importorskip("torch")
    fs = [torch.eye(3, dtype=torch.float64, requires_grad=True),
          torch.tensor(2.0 * np.eye(4), requires_grad=True)]
    s = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(rng.standard_normal(12), requires_grad=True)
    op = KroneckerOperator(fs)
    # d logdet(F1 ⊗ F2 + s I) at F1 = I, F2 = 2I: dF1 = Σ_b μ_b / (μ_b + s) · I = 4·2/2.5 · I,
    # ds = 12 / 2.5
    g1, gs = torch.autograd.grad(op.logdet(s), (fs[0], s))
    np.testing.assert_allclose(g1.numpy(), 3.2 * np.eye(3), rtol=1e-13, atol=1e-14)
    assert abs(float(gs) - 4.8) < 1e-13
    loss = op.logdet(s) + (b * op.solve(b, s)).sum()
    loss.backward()
    for t in (*fs, s, b):
        assert torch.all(torch.isfinite(t.grad))


def test_torch_gradients_match_dense(rng):
    torch = pytest.importorskip("torch")
    fs, s, b = _torch_inputs(torch, rng, (3, 4), (12, 2))
    q, ld = KroneckerOperator(fs).inv_quad_logdet(b, s)
    got = torch.autograd.grad(q + ld, (b, s, *fs))
    fd = [f.detach().clone().requires_grad_() for f in fs]
    sd, bd = s.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    a = torch.kron(fd[0], fd[1]) + sd * torch.eye(12, dtype=torch.float64)
    ref = (bd * torch.linalg.solve(a, bd)).sum() + torch.logdet(a)
    want = torch.autograd.grad(ref, (bd, sd, *fd))
    for g, w in zip(got, want):
        w = _sym(w) if w.ndim == 2 and w.shape[0] == w.shape[1] and w.shape[0] < 12 else w
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-9, atol=1e-11)


# ------------------------------------------------------------------------ properties

def test_properties_solve_inverts_matmul():
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies

    @hyp.given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3),
               shift=st.floats(0.0, 3.0), rhs=st.integers(1, 3), seed=st.integers(0, 2**31))
    def check(sizes, shift, rhs, seed):
        rng = np.random.default_rng(seed)
        fs = [spd(rng, n) for n in sizes]
        op = KroneckerOperator(fs)
        b = rng.standard_normal((math.prod(sizes), rhs))
        x = op.solve(b, shift)
        np.testing.assert_allclose(op @ x + shift * x, b, rtol=1e-9, atol=1e-9)
        lam = np.linalg.eigvalsh(dense(fs))
        np.testing.assert_allclose(op.logdet(shift), np.sum(np.log(lam + shift)), rtol=1e-10)
        np.testing.assert_allclose((op.T @ b), dense(fs).T @ b, rtol=1e-10, atol=1e-12)

    check()


def test_properties_products_any_shapes():
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies

    @hyp.given(shapes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1,
                               max_size=3),
               rhs=st.integers(1, 3), seed=st.integers(0, 2**31))
    def check(shapes, rhs, seed):
        rng = np.random.default_rng(seed)
        fs = [rng.standard_normal(s) for s in shapes]
        op, ref = KroneckerOperator(fs), dense(fs)
        assert op.shape == ref.shape
        x = rng.standard_normal((ref.shape[1], rhs))
        v = rng.standard_normal((rhs, ref.shape[0]))
        np.testing.assert_allclose(op @ x, ref @ x, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(v @ op, v @ ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(op.T.to_dense(), ref.T, rtol=0, atol=0)
        if all(p == q for p, q in shapes):
            np.testing.assert_allclose(op.diagonal(), np.diag(ref), rtol=0, atol=0)

    check()


# ------------------------------------------------------------------------ bad input

def test_bad_input(rng):
    with pytest.raises(TypeError, match="factors"):
        KroneckerOperator(np.eye(3)[0, 0])
    with pytest.raises(ValueError, match="factors"):
        KroneckerOperator([])
    with pytest.raises(ValueError, match="factors\\[1\\]"):
        KroneckerOperator([np.eye(2), np.ones(3)])
    with pytest.raises(TypeError, match="factors\\[0\\]"):
        KroneckerOperator([np.eye(2, dtype=np.int64)])
    with pytest.raises(TypeError, match="factors"):
        KroneckerOperator("ab")
    op = KroneckerOperator([np.eye(2), np.eye(3)])
    with pytest.raises(ValueError, match="b: expected shape"):
        op.solve(np.ones(5))
    with pytest.raises(ValueError, match="b: expected shape"):
        op.solve(np.ones((5, 6)))
    with pytest.raises(TypeError, match="shift"):
        op.solve(np.ones(6), shift="1")
    with pytest.raises(TypeError, match="shift"):
        op.logdet(shift=np.ones(2))
    with pytest.raises(TypeError, match="b"):
        op.solve(np.ones(6, dtype=np.int32))
    with pytest.raises(TypeError, match="float32 or float64"):
        KroneckerOperator([np.eye(2, dtype=np.float16)]).logdet()
    with pytest.raises(ValueError, match="x"):
        op @ np.ones(5)


def test_bad_input_torch():
    torch = pytest.importorskip("torch")
    op = KroneckerOperator([torch.eye(2, dtype=torch.float64)])
    with pytest.raises(TypeError, match="b: array from"):
        op.solve(np.ones(2))
    with pytest.raises(TypeError, match="shift"):
        KroneckerOperator([np.eye(2)]).solve(np.ones(2), shift=torch.tensor(1.0))


@pytest.mark.gpu
def test_gpu_solve_stays_on_device(xp, rng):
    if not xp.is_cuda:
        pytest.skip("a GPU backend")
    op, host = make(xp, rng, (16, 8, 4))
    b = to_xp(xp, rng.standard_normal((512, 2)))
    x = op.solve(b, 0.1)
    assert str(op.device) == str(xp.device) or "cuda" in str(op.device).lower()
    close(x, np.linalg.solve(dense(host) + 0.1 * np.eye(512), to_numpy(b)), "float64")
