"""kronlinalg.integrations.gpytorch against dense torch and linear_operator's own
KroneckerProductLinearOperator on the same factors; a GPyTorch ExactGP trained through it.
Skipped where torch or linear_operator is not installed."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("linear_operator")

from linear_operator.operators import (DenseLinearOperator,  # noqa: E402
                                       KroneckerProductLinearOperator)

from kronlinalg.integrations.gpytorch import (KroneckerLinearOperator,  # noqa: E402
                                              from_linear_operator)


def spd(rng, n):
    a = rng.standard_normal((n, n))
    return torch.tensor(a @ a.T / n + 0.5 * np.eye(n))


def dense(factors, shift):
    out = torch.ones(1, 1, dtype=torch.float64)
    for f in factors:
        out = torch.kron(out, f)
    return out + shift * torch.eye(out.shape[0], dtype=torch.float64)


def test_values_against_dense(rng):
    fs = [spd(rng, n) for n in (3, 4, 5)]
    op = KroneckerLinearOperator(*fs, shift=0.2)
    ref = dense(fs, 0.2)
    assert op.shape == ref.shape
    b = torch.tensor(rng.standard_normal((60, 3)))
    torch.testing.assert_close(op.to_dense(), ref, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(op @ b, ref @ b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(op.mT @ b, ref.mT @ b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(op.diagonal(), torch.diagonal(ref), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(op.solve(b), torch.linalg.solve(ref, b), rtol=1e-10, atol=1e-12)
    left = torch.tensor(rng.standard_normal((2, 60)))
    torch.testing.assert_close(op.solve(b, left), left @ torch.linalg.solve(ref, b), rtol=1e-10,
                               atol=1e-12)
    torch.testing.assert_close(op.logdet(), torch.logdet(ref), rtol=1e-12, atol=1e-12)
    quad, ld = op.inv_quad_logdet(b, logdet=True)
    torch.testing.assert_close(quad, (b * torch.linalg.solve(ref, b)).sum(), rtol=1e-10, atol=0)
    torch.testing.assert_close(ld, torch.logdet(ref), rtol=1e-12, atol=1e-12)
    per_column, _ = op.inv_quad_logdet(b, reduce_inv_quad=False)
    torch.testing.assert_close(per_column, (b * torch.linalg.solve(ref, b)).sum(0), rtol=1e-10,
                               atol=0)


def test_noise_keeps_the_structure(rng):
    fs = [spd(rng, n) for n in (4, 3)]
    op = KroneckerLinearOperator(*fs).add_diagonal(torch.tensor(0.5, dtype=torch.float64))
    assert isinstance(op, KroneckerLinearOperator)
    torch.testing.assert_close(op.to_dense(), dense(fs, 0.5), rtol=1e-13, atol=1e-13)
    general = KroneckerLinearOperator(*fs).add_diagonal(torch.arange(12, dtype=torch.float64))
    assert not isinstance(general, KroneckerLinearOperator)
    torch.testing.assert_close(general.to_dense(),
                               dense(fs, 0.0) + torch.diag(torch.arange(12, dtype=torch.float64)))


def test_gradients_match_linear_operator(rng):
    host = [spd(rng, n) for n in (5, 4, 3)]
    b = torch.tensor(rng.standard_normal((60, 2)))

    def loss(make):
        fs = [f.clone().requires_grad_() for f in host]
        s = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
        quad, ld = make(fs, s).inv_quad_logdet(b, logdet=True)
        return quad + ld, torch.autograd.grad(quad + ld, (*fs, s))

    ours, g_ours = loss(lambda fs, s: KroneckerLinearOperator(*fs, shift=s))
    peer, g_peer = loss(lambda fs, s: KroneckerProductLinearOperator(
        *(DenseLinearOperator(f) for f in fs)).add_diagonal(s))
    torch.testing.assert_close(ours, peer, rtol=1e-10, atol=0)
    for a, p in zip(g_ours, g_peer):
        p = 0.5 * (p + p.mT) if p.ndim == 2 else p  # symmetric factors: symmetric gradients
        torch.testing.assert_close(a, p, rtol=1e-7, atol=1e-9)


def test_from_linear_operator(rng):
    fs = [spd(rng, n) for n in (3, 5)]
    kp = KroneckerProductLinearOperator(*(DenseLinearOperator(f) for f in fs))
    ours = from_linear_operator(kp)
    torch.testing.assert_close(ours.to_dense(), kp.to_dense(), rtol=1e-13, atol=1e-13)
    noisy = from_linear_operator(kp.add_diagonal(torch.tensor(0.7, dtype=torch.float64)))
    torch.testing.assert_close(noisy.to_dense(), dense(fs, 0.7), rtol=1e-13, atol=1e-13)
    with pytest.raises(TypeError, match="op"):
        from_linear_operator(DenseLinearOperator(fs[0]))
    with pytest.raises(ValueError, match="shift"):
        KroneckerLinearOperator(*fs, shift=torch.ones(2, dtype=torch.float64))


def test_gpytorch_exact_gp_trains_through_it(rng):
    """An ExactGP on a 2-D grid whose covariance is a KroneckerLinearOperator of per-axis RBF
    kernels: GaussianLikelihood's noise becomes the shift, ExactMarginalLogLikelihood's
    inv_quad_logdet runs here, and the loss equals the dense model's."""
    gpytorch = pytest.importorskip("gpytorch")
    axes = [torch.linspace(0, 1, n, dtype=torch.float64) for n in (9, 7)]
    x = torch.cartesian_prod(*axes)
    y = torch.sin(3 * x[:, 0]) * torch.cos(2 * x[:, 1]) + 0.05 * torch.tensor(
        rng.standard_normal(x.shape[0]))

    class GridGP(gpytorch.models.ExactGP):
        def __init__(self, structured):
            super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood().double())
            self.structured = structured
            self.mean_module = gpytorch.means.ZeroMean()
            self.kernels = torch.nn.ModuleList(
                [gpytorch.kernels.RBFKernel().double() for _ in axes])

        def forward(self, points):
            factors = [k(t[:, None]).to_dense() for k, t in zip(self.kernels, axes)]
            covar = (KroneckerLinearOperator(*factors) if self.structured else
                     DenseLinearOperator(dense(factors, 0.0)))
            return gpytorch.distributions.MultivariateNormal(self.mean_module(points), covar)

    losses = {}
    for structured in (True, False):
        torch.manual_seed(0)
        model = GridGP(structured)
        model.train()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        history = []
        with gpytorch.settings.max_cholesky_size(10_000):  # the dense peer: Cholesky
            for _ in range(5):
                opt.zero_grad()
                loss = -mll(model(x), y)
                loss.backward()
                opt.step()
                history.append(float(loss.detach()))
        losses[structured] = history
    assert losses[True][-1] < losses[True][0]
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-8)
    assert all(math.isfinite(v) for v in losses[True])
