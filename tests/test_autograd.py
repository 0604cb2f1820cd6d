"""PyTorch autograd through kron_matmul: the compiled kernels run forward, and the gradients in x,
every factor and y match those of a dense float64 reference (x @ torch.kron(...)).

Runs on the CPU (torch CPU tensors, the CPU kernel) and, marked gpu, on CUDA tensors.
"""

from __future__ import annotations

import math

import pytest

import kronlinalg
from _helpers import GRAD_RTOL

torch = pytest.importorskip("torch")

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=DEVICES)
def device(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch: no CUDA device")
    return torch.device(request.param)


def _rand(gen, shape, dtype, device, grad=True):
    a = torch.randn(shape, generator=gen, dtype=torch.float64)
    a = torch.where(a.abs() < 0.05, torch.full_like(a, 0.5), a)
    return a.to(device=device, dtype=dtype).requires_grad_(grad)


def _dense(factors):
    k = factors[0]
    for f in factors[1:]:
        k = torch.kron(k, f)
    return k


def _reference(x, factors, side, alpha, beta, y):
    """Same graph in float64 with the dense Kronecker product, on detached copies."""
    x64 = x.detach().double().requires_grad_(x.requires_grad)
    f64 = [f.detach().double().requires_grad_(f.requires_grad) for f in factors]
    y64 = None if y is None else y.detach().double().requires_grad_(y.requires_grad)
    k = _dense(f64)
    out = alpha * (x64 @ k if side == "right" else k @ x64)
    if beta != 0.0:
        out = out + beta * y64
    return out, x64, f64, y64


def _relerr(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def _run(device, dtype, shapes, side, lead, n=4, alpha=1.0, beta=0.0, needs=None, y_shape=None,
         seed=0):
    gen = torch.Generator().manual_seed(seed)
    P = math.prod(s[0] for s in shapes)
    Q = math.prod(s[1] for s in shapes)
    needs = needs or {"x": True, "f": [True] * len(shapes), "y": True}
    xs = tuple(lead) + ((P,) if side == "right" else (Q, n))
    x = _rand(gen, xs, dtype, device, needs["x"])
    fs = [_rand(gen, s, dtype, device, g) for s, g in zip(shapes, needs["f"])]
    y = None
    if beta != 0.0:
        ys = y_shape or (tuple(lead) + ((Q,) if side == "right" else (P, n)))
        y = _rand(gen, ys, dtype, device, needs["y"])
    out = kronlinalg.kron_matmul(x, fs, side=side, alpha=alpha, beta=beta, y=y,
                                 algorithm="sliced")
    assert out.requires_grad
    ref, x64, f64, y64 = _reference(x, fs, side, alpha, beta, y)
    tol = GRAD_RTOL[dtype_name(dtype)]
    assert _relerr(out, ref) <= tol
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    out.backward(g.to(device=device, dtype=out.dtype))
    ref.backward(g.to(ref.device))  # the float64 reference lives where the inputs do
    pairs = [(x, x64)] + list(zip(fs, f64)) + ([(y, y64)] if y is not None else [])
    for got, want in pairs:
        if not want.requires_grad:
            assert got.grad is None
            continue
        assert got.grad is not None and got.grad.shape == got.shape
        assert got.grad.dtype == got.dtype and got.grad.device == got.device
        assert _relerr(got.grad, want.grad) <= tol, (got.shape, _relerr(got.grad, want.grad))


def dtype_name(dt):
    return str(dt).rsplit(".", 1)[-1]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("shapes", [
    [(3, 4), (2, 5)],
    [(4, 4), (4, 4), (4, 4)],
    [(5, 2), (3, 3), (2, 4), (3, 2)],
    [(7, 3)],
], ids=["2f", "3f", "4f", "1f"])
def test_gradients_match_dense_reference(device, dtype, side, shapes):
    _run(device, dtype, shapes, side, lead=(2, 3), alpha=0.5)


@pytest.mark.parametrize("side", ["right", "left"])
def test_gradient_of_y_and_beta(device, side):
    _run(device, torch.float64, [(3, 2), (4, 3)], side, lead=(5,), alpha=2.0, beta=-0.5)


def test_broadcast_y_gradient(device):
    _run(device, torch.float64, [(3, 2), (4, 3)], "right", lead=(2, 5), beta=1.5, y_shape=(6,))


def test_only_some_inputs_require_grad(device):
    needs = {"x": False, "f": [True, False, True], "y": True}
    _run(device, torch.float64, [(2, 3), (3, 3), (4, 2)], "right", lead=(6,), needs=needs)


def test_vector_left_product(device):
    gen = torch.Generator().manual_seed(1)
    x = _rand(gen, (12,), torch.float64, device)
    fs = [_rand(gen, s, torch.float64, device) for s in [(2, 3), (5, 4)]]
    out = kronlinalg.kron_matmul(x, fs, side="left", algorithm="sliced")
    ref, x64, f64, _ = _reference(x, fs, "left", 1.0, 0.0, None)
    out.sum().backward()
    ref.sum().backward()
    assert _relerr(x.grad, x64.grad) <= 1e-11
    for f, r in zip(fs, f64):
        assert _relerr(f.grad, r.grad) <= 1e-11


def test_gradcheck(device):
    gen = torch.Generator().manual_seed(2)
    x = _rand(gen, (3, 6), torch.float64, device)
    a = _rand(gen, (2, 3), torch.float64, device)
    b = _rand(gen, (3, 2), torch.float64, device)
    torch.autograd.gradcheck(lambda x, a, b: kronlinalg.kron_matmul(x, [a, b], alpha=1.5,
                                                                      algorithm="sliced"),
                             (x, a, b))
    xl = _rand(gen, (2, 6, 4), torch.float64, device)
    torch.autograd.gradcheck(lambda x, a, b: kronlinalg.kron_matmul(x, [a, b], side="left",
                                                                      algorithm="sliced"),
                             (xl, a.detach().mT.contiguous().requires_grad_(),
                              b.detach().mT.contiguous().requires_grad_()))


def test_forward_uses_compiled_kernel(device, monkeypatch):
    """With grad enabled, the forward product goes through the sliced kernels, not shuffle."""
    import importlib

    kron_mod = importlib.import_module("kronlinalg.kron")

    called = []
    monkeypatch.setattr(kron_mod, "_shuffle", lambda spec: called.append(spec) or 1 / 0)
    gen = torch.Generator().manual_seed(3)
    x = _rand(gen, (4, 12), torch.float64, device)
    fs = [_rand(gen, s, torch.float64, device) for s in [(3, 3), (4, 4)]]
    out = kronlinalg.kron_matmul(x, fs, algorithm="sliced")
    out.sum().backward()
    assert not called
    assert x.grad is not None


def test_shuffle_still_differentiable(device):
    gen = torch.Generator().manual_seed(4)
    x = _rand(gen, (4, 6), torch.float64, device)
    fs = [_rand(gen, s, torch.float64, device) for s in [(2, 2), (3, 3)]]
    out = kronlinalg.kron_matmul(x, fs, algorithm="shuffle")
    out.sum().backward()
    ref, x64, _, _ = _reference(x, fs, "right", 1.0, 0.0, None)
    ref.sum().backward()
    assert _relerr(x.grad, x64.grad) <= 1e-12


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_gradients_cuda(dtype):
    if not torch.cuda.is_available():
        pytest.skip("torch: no CUDA device")
    gen = torch.Generator().manual_seed(5)
    dt = getattr(torch, dtype)
    dev = torch.device("cuda")
    x = _rand(gen, (8, 256), dt, dev)
    fs = [_rand(gen, (16, 16), dt, dev), _rand(gen, (16, 16), dt, dev)]
    out = kronlinalg.kron_matmul(x, fs, algorithm="sliced")
    assert out.dtype == dt
    ref, x64, f64, _ = _reference(x, fs, "right", 1.0, 0.0, None)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    out.backward(g.to(dev, dt))
    ref.backward(g.to(ref.device))  # the float64 reference lives where the inputs do
    assert _relerr(x.grad, x64.grad) <= 3e-2
    for f, r in zip(fs, f64):
        assert _relerr(f.grad, r.grad) <= 3e-2


# ---------------------------------------------------------------------------------------------
# derivatives of every order: the backward is made of kron_matmul calls, so gradgradcheck holds


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (-0.7, 0.4)])
def test_gradgradcheck_kron(device, side, alpha, beta):
    gen = torch.Generator().manual_seed(7)
    fs = [_rand(gen, (3, 2), torch.float64, device), _rand(gen, (2, 3), torch.float64, device)]
    if side == "right":
        x = _rand(gen, (4, 6), torch.float64, device)
        out_shape = (4, 6)
    else:
        x = _rand(gen, (6, 5), torch.float64, device)
        out_shape = (6, 5)
    y = _rand(gen, out_shape, torch.float64, device)

    def f(x, f0, f1, y):
        return kronlinalg.kron_matmul(x, [f0, f1], side=side, alpha=alpha, beta=beta, y=y,
                                      algorithm="sliced")

    assert torch.autograd.gradcheck(f, (x, *fs, y))
    assert torch.autograd.gradgradcheck(f, (x, *fs, y))


def test_hessian_matches_dense(device):
    """The issue's example: the Hessian in one factor, nonzero and equal to the dense one's."""
    gen = torch.Generator().manual_seed(3)
    x = _rand(gen, (5, 12), torch.float64, device, grad=False)
    a = _rand(gen, (3, 3), torch.float64, device)
    b = _rand(gen, (4, 4), torch.float64, device, grad=False)
    ours = torch.autograd.functional.hessian(
        lambda a: (kronlinalg.kron_matmul(x, [a, b], algorithm="sliced") ** 2).sum(), a)
    dense = torch.autograd.functional.hessian(lambda a: ((x @ torch.kron(a, b)) ** 2).sum(), a)
    assert ours.abs().max() > 1.0
    torch.testing.assert_close(ours, dense, rtol=1e-10, atol=1e-10)


def test_grad_create_graph(device):
    gen = torch.Generator().manual_seed(5)
    x = _rand(gen, (2, 6), torch.float64, device)
    fs = [_rand(gen, (2, 2), torch.float64, device), _rand(gen, (3, 3), torch.float64, device)]
    (g,) = torch.autograd.grad(kronlinalg.kron_matmul(x, fs).pow(2).sum(), fs[0],
                               create_graph=True)
    assert g.requires_grad and g.grad_fn is not None
    (gg,) = torch.autograd.grad(g.sum(), x)
    (ref,) = torch.autograd.grad(
        torch.autograd.grad((x @ torch.kron(*fs)).pow(2).sum(), fs[0], create_graph=True)[0].sum(), x)
    torch.testing.assert_close(gg, ref)


def test_torch_func_grad_and_vmap(device):
    """torch.func transforms see through kron_matmul (the algorithm made of torch's own ops
    runs under them): grad and vmap agree with the dense product."""
    gen = torch.Generator().manual_seed(9)
    x = _rand(gen, (3, 6), torch.float64, device, grad=False)
    fs = [_rand(gen, (2, 2), torch.float64, device, grad=False),
          _rand(gen, (3, 3), torch.float64, device, grad=False)]
    g = torch.func.grad(lambda f0: kronlinalg.kron_matmul(x, [f0, fs[1]]).sum())(fs[0])
    ref = torch.func.grad(lambda f0: (x @ torch.kron(f0, fs[1])).sum())(fs[0])
    torch.testing.assert_close(g, ref)
    xs = _rand(gen, (4, 3, 6), torch.float64, device, grad=False)
    v = torch.func.vmap(lambda xi: kronlinalg.kron_matmul(xi, fs))(xs)
    torch.testing.assert_close(v, xs @ torch.kron(*fs))


@pytest.mark.parametrize("layout", ["batch_first", "batch_last"])
def test_gradgradcheck_structured(device, layout):
    from kronlinalg.structured import KSFactor

    gen = torch.Generator().manual_seed(11)
    v1 = _rand(gen, (2, 2, 3, 1), torch.float64, device)
    v2 = _rand(gen, (1, 3, 2, 2), torch.float64, device)
    x = _rand(gen, (3, 4) if layout == "batch_first" else (4, 3), torch.float64, device)

    def f(x, v1, v2):
        chain = [KSFactor((2, 2, 3, 1), v1), KSFactor((1, 3, 2, 2), v2)]
        return kronlinalg.structured_matmul(x, chain, layout=layout)

    assert torch.autograd.gradcheck(f, (x, v1, v2))
    assert torch.autograd.gradgradcheck(f, (x, v1, v2))
