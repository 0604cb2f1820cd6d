"""``kronlinalg demo``: Gaussian-process regression on a grid with a Kronecker-structured kernel.

Data: a smooth function of D variables, observed with noise at every point of an
n1 × … × nD grid.  Model: a product of RBF kernels, K = s²·K1 ⊗ … ⊗ KD (one length-scale per
axis), plus noise σ²·I.  Fit: a few Adam steps on the negative log marginal likelihood

    NLL = ½ yᵀ (K + σ²I)⁻¹ y + ½ log det(K + σ²I) + (N/2) log 2π

through KroneckerOperator.inv_quad_logdet (a solve and a logdet from the cached per-factor
eigendecompositions); gradients by torch autograd when the arrays are torch tensors, else in
closed form from KroneckerOperator.logdet_gradient (NumPy, CuPy).  Predict: the posterior mean
at the cells' midpoints (points never observed) through a rectangular Kronecker operator.

The same fit and prediction then run through the peer: linear_operator's
KroneckerProductLinearOperator (GPyTorch's Kronecker operator) when it is installed and the
arrays are torch tensors, else the dense N × N covariance (Cholesky/LU), and the demo prints
both times and checks the two fits agree.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .kron_operator import KroneckerOperator


def add_arguments(parser) -> None:
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                        help="auto: the GPU when torch or CuPy sees one, else the CPU")
    parser.add_argument("--backend", choices=("auto", "numpy", "torch", "cupy"), default="auto",
                        help="array library (auto: torch when installed, else NumPy; CuPy on a "
                             "GPU without torch)")
    parser.add_argument("--grid", type=int, nargs="+", default=None,
                        help="points per grid axis (default: 12 12 6 on CPU, 32 32 32 on GPU)")
    parser.add_argument("--steps", type=int, default=20, help="Adam steps of the fit")
    parser.add_argument("--lr", type=float, default=0.1, help="Adam learning rate")
    parser.add_argument("--compare", choices=("auto", "gpytorch", "dense", "none"),
                        default="auto", help="the peer model (auto: linear_operator when "
                        "installed with torch, else dense when N <= --dense-max)")
    parser.add_argument("--dense-max", type=int, default=4096,
                        help="largest N the dense peer is run for")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    parser.add_argument("--seed", type=int, default=0)


# ---------------------------------------------------------------------------- array libraries

class _Lib:
    """The array library and device: creation, host transfer, synchronisation."""

    def __init__(self, name, module, device, dtype):
        self.name, self.module, self.device = name, module, device
        self.torch = name == "torch"
        self.dtype = getattr(module, dtype)
        self.where = "gpu" if device not in (None, "cpu") else "cpu"

    def asarray(self, a):
        a = np.asarray(a, dtype=np.float64)
        if self.torch:
            return self.module.tensor(a, dtype=self.dtype, device=self.device)
        return self.module.asarray(a, dtype=self.dtype)

    def host(self, a) -> np.ndarray:
        if self.torch:
            return a.detach().cpu().double().numpy()
        return np.asarray(a.get() if hasattr(a, "get") else a, dtype=np.float64)

    def sync(self):
        if self.torch and self.where == "gpu":
            self.module.cuda.synchronize()
        elif self.name == "cupy":
            self.module.cuda.get_current_stream().synchronize()


def _pick(args) -> _Lib:
    want_gpu = args.device in ("auto", "gpu")
    torch = cupy = None
    if args.backend in ("auto", "torch"):
        try:
            import torch
        except ImportError:
            if args.backend == "torch":
                raise SystemExit("--backend torch: torch is not installed") from None
    if args.backend in ("auto", "cupy") and want_gpu:
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() == 0:
                cupy = None
        except Exception:  # no CuPy, or no driver / device
            cupy = None
    if torch is not None and want_gpu and torch.cuda.is_available() and args.backend != "cupy":
        return _Lib("torch", torch, "cuda", args.dtype)
    no_torch_gpu = torch is None or not torch.cuda.is_available()
    if cupy is not None and (no_torch_gpu or args.backend == "cupy"):
        return _Lib("cupy", cupy, "gpu", args.dtype)
    if args.device == "gpu":
        raise SystemExit("--device gpu: no usable GPU through torch or CuPy")
    if args.backend == "cupy":
        raise SystemExit("--backend cupy: no usable GPU through CuPy")
    if torch is not None and args.backend != "numpy":
        return _Lib("torch", torch, "cpu", args.dtype)
    return _Lib("numpy", np, None, args.dtype)


# ---------------------------------------------------------------------------- the model

def _sqdist(lib, a, b):
    return lib.asarray((np.asarray(a)[:, None] - np.asarray(b)[None, :]) ** 2)


def _factors(lib, axes, theta, points=None):
    """Per-axis kernel matrices (the output scale in the first) and the squared distances;
    theta = (log ℓ1, …, log ℓD, log s², log σ²), torch tensors or floats."""
    exp = lib.module.exp if lib.torch and lib.module.is_tensor(theta) else math.exp
    out, dists = [], []
    for i, t in enumerate(axes):
        d = _sqdist(lib, points[i] if points is not None else t, t)
        ell2 = exp(2 * theta[i])
        k = lib.module.exp(d * (-0.5 / ell2))
        out.append(k * exp(theta[-2]) if i == 0 else k)
        dists.append(d / ell2)
    return out, dists


def _problem(args, lib):
    grid = args.grid
    rng = np.random.default_rng(args.seed)
    axes = [np.linspace(0.0, 1.0, n) for n in grid]
    mids = [(t[1:] + t[:-1]) / 2 if len(t) > 1 else t for t in axes]

    def truth(pts):
        vals = np.ones(1)
        for i, t in enumerate(pts):
            vals = np.multiply.outer(vals, np.sin(2.2 * t + 0.7 * i) + 0.3 * np.cos(5.0 * t))
        return vals.reshape(-1)

    y = truth(axes) + 0.1 * rng.standard_normal(math.prod(grid))  # noise σ = 0.1
    theta0 = np.array([math.log(0.3)] * len(grid) + [0.0, math.log(0.1)])
    return axes, mids, lib.asarray(y), truth(mids), theta0


def _nll_grad_closed_form(lib, axes, y, theta):
    """NLL and its gradient for NumPy/CuPy: d NLL/dθ = ½ tr(A⁻¹ dA) - ½ αᵀ dA α, α = A⁻¹y, with
    tr(A⁻¹ dK) = Σ tr(Gi dFi) from KroneckerOperator.logdet_gradient."""
    xp = lib.module
    factors, dists = _factors(lib, axes, theta)
    noise = math.exp(theta[-1])
    op = KroneckerOperator(factors)
    alpha = op.solve(y, noise)
    nll = 0.5 * float(xp.sum(y * alpha)) + 0.5 * float(op.logdet(noise))
    grads, g_shift = op.logdet_gradient(noise)
    g = np.zeros_like(theta)
    for i, (f, d) in enumerate(zip(factors, dists)):
        df = f * d  # d Fi / d log ℓi for the RBF
        dk = list(factors)
        dk[i] = df
        quad = float(xp.sum(alpha * KroneckerOperator(dk).matmul(alpha)))
        g[i] = 0.5 * float(xp.sum(grads[i] * df)) - 0.5 * quad
    k_alpha = y - noise * alpha  # K α
    n = y.shape[0]
    g[-2] = 0.5 * (n - noise * float(g_shift)) - 0.5 * float(xp.sum(alpha * k_alpha))
    g[-1] = 0.5 * noise * float(g_shift) - 0.5 * noise * float(xp.sum(alpha * alpha))
    return nll + 0.5 * n * math.log(2 * math.pi), g


def _solve_kron(lib, factors, noise, y):
    return KroneckerOperator(factors).solve(y, noise)


def _nll_grad_dense(lib, axes, y, theta):
    xp = lib.module
    factors, dists = _factors(lib, axes, theta)
    noise = math.exp(theta[-1])
    k = KroneckerOperator(factors).to_dense()
    n = y.shape[0]
    a = k + noise * xp.eye(n, dtype=k.dtype)
    a_inv = xp.linalg.inv(a)  # the trace terms need A⁻¹ itself: N³, as a dense GP pays
    alpha = a_inv @ y
    nll = 0.5 * float(xp.sum(y * alpha)) + 0.5 * float(xp.linalg.slogdet(a)[1])
    w = a_inv - alpha[:, None] * alpha[None, :]  # tr(A⁻¹dA) - αᵀdAα = Σ (A⁻¹ - ααᵀ) ∘ dA
    g = np.zeros_like(theta)
    for i, (f, d) in enumerate(zip(factors, dists)):
        dk = list(factors)
        dk[i] = f * d
        g[i] = 0.5 * float(xp.sum(w * KroneckerOperator(dk).to_dense()))
    g[-2] = 0.5 * float(xp.sum(w * k))
    g[-1] = 0.5 * noise * float(xp.trace(w))
    return nll + 0.5 * n * math.log(2 * math.pi), g


def _solve_dense(lib, factors, noise, y):
    k = KroneckerOperator(factors).to_dense()
    return lib.module.linalg.solve(k + noise * lib.module.eye(y.shape[0], dtype=k.dtype), y)


def _torch_model(solver):
    """NLL and gradient by torch autograd, for one way of computing (yᵀA⁻¹y, log det A)."""
    def nll_grad(lib, axes, y, theta):
        torch = lib.module
        th = torch.tensor(theta, dtype=lib.dtype, device=lib.device, requires_grad=True)
        factors, _ = _factors(lib, axes, th)
        noise = torch.exp(th[-1])
        quad, logdet = solver(torch, factors, noise, y)
        nll = 0.5 * (quad + logdet) + 0.5 * y.shape[0] * math.log(2 * math.pi)
        nll.backward()
        return float(nll.detach()), th.grad.double().cpu().numpy()

    return nll_grad


def _kron_torch(torch, factors, noise, y):
    return KroneckerOperator(factors).inv_quad_logdet(y, noise)


def _gpytorch_operator(factors, noise):
    from linear_operator.operators import DenseLinearOperator, KroneckerProductLinearOperator

    op = KroneckerProductLinearOperator(*(DenseLinearOperator(f) for f in factors))
    return op.add_diagonal(noise.reshape(()))


def _gpytorch_torch(torch, factors, noise, y):
    return _gpytorch_operator(factors, noise).inv_quad_logdet(y[:, None], logdet=True)


def _solve_gpytorch(lib, factors, noise, y):
    noise = lib.module.tensor(noise, dtype=lib.dtype, device=lib.device)
    return _gpytorch_operator(factors, noise).solve(y[:, None]).reshape(-1)


def _dense_chol(torch, factors, noise, y):
    k = KroneckerOperator(factors).to_dense()
    return torch.linalg.cholesky(k + noise * torch.eye(y.shape[0], dtype=k.dtype, device=k.device))


def _dense_torch(torch, factors, noise, y):
    chol = _dense_chol(torch, factors, noise, y)
    alpha = torch.cholesky_solve(y[:, None], chol).reshape(-1)
    return (y * alpha).sum(), 2 * torch.log(torch.diagonal(chol)).sum()


def _solve_dense_torch(lib, factors, noise, y):
    chol = _dense_chol(lib.module, factors, noise, y)
    return lib.module.cholesky_solve(y[:, None], chol).reshape(-1)


# ---------------------------------------------------------------------------- fit and predict

def _fit(lib, nll_grad, axes, y, theta0, steps, lr):
    """Adam on θ (a handful of numbers, updated on the host): the same steps for every model."""
    theta, m, v = theta0.copy(), np.zeros_like(theta0), np.zeros_like(theta0)
    b1, b2 = 0.9, 0.999
    nll = None
    for step in range(1, steps + 1):
        nll, g = nll_grad(lib, axes, y, theta)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        theta = theta - lr * (m / (1 - b1 ** step)) / (np.sqrt(v / (1 - b2 ** step)) + 1e-8)
    return theta, nll


def _predict(lib, solve, axes, mids, y, theta):
    """Posterior mean at the midpoints: (⊗ K(mid_i, t_i)) α with α = (K + σ²I)⁻¹ y, the cross
    covariance a rectangular Kronecker operator."""
    theta = [float(t) for t in theta]
    factors, _ = _factors(lib, axes, theta)
    alpha = solve(lib, factors, math.exp(theta[-1]), y)
    cross, _ = _factors(lib, axes, theta, points=mids)
    return KroneckerOperator(cross) @ alpha


def _timed(lib, fn):
    lib.sync()
    t0 = time.perf_counter()
    out = fn()
    lib.sync()
    return time.perf_counter() - t0, out


def _peer(args, lib, n):
    want = args.compare
    if want == "none":
        return None
    if want in ("auto", "gpytorch") and lib.torch:
        try:
            import linear_operator  # noqa: F401

            return "gpytorch", _torch_model(_gpytorch_torch), _solve_gpytorch
        except ImportError:
            if want == "gpytorch":
                raise SystemExit("--compare gpytorch: linear_operator is not installed") from None
    if want == "gpytorch":
        raise SystemExit("--compare gpytorch needs torch arrays (--backend torch)")
    if n > args.dense_max:
        print(f"  (dense peer skipped: N = {n} > --dense-max {args.dense_max})")
        return None
    if lib.torch:
        return "dense", _torch_model(_dense_torch), _solve_dense_torch
    return "dense", _nll_grad_dense, _solve_dense


def run(args) -> int:
    lib = _pick(args)
    args.grid = args.grid or ([32, 32, 32] if lib.where == "gpu" else [12, 12, 6])
    if any(n < 1 for n in args.grid) or args.steps < 1:
        raise SystemExit("--grid: every axis needs at least one point; --steps: at least 1")
    axes, mids, y, truth, theta0 = _problem(args, lib)
    n = math.prod(args.grid)
    how = "torch autograd" if lib.torch else "closed-form gradients"
    print(f"kronlinalg demo on {lib.where} ({lib.name}, {args.dtype}): GP regression on a "
          f"{'x'.join(map(str, args.grid))} grid, N = {n}, product RBF kernel + noise; "
          f"{args.steps} Adam steps ({how}), then the posterior mean at the cell midpoints")
    ours = _torch_model(_kron_torch) if lib.torch else _nll_grad_closed_form
    models = [("kronlinalg", ours, _solve_kron)]
    peer = _peer(args, lib, n)
    if peer is not None:
        models.append(peer)

    results = {}
    for name, nll_grad, solve in models:
        _fit(lib, nll_grad, axes, y, theta0, 1, args.lr)  # warm-up: kernels load, caches fill
        t_fit, (theta, nll) = _timed(
            lib, lambda: _fit(lib, nll_grad, axes, y, theta0, args.steps, args.lr))
        _predict(lib, solve, axes, mids, y, theta)  # warm-up
        t_pred, mean = _timed(lib, lambda: _predict(lib, solve, axes, mids, y, theta))
        rmse = float(np.sqrt(np.mean((lib.host(mean) - truth) ** 2)))
        results[name] = (t_fit, t_pred, theta, nll, rmse)
        ell = ", ".join(f"{math.exp(t):.3f}" for t in theta[:-2])
        label = {"kronlinalg": "kronlinalg.KroneckerOperator",
                 "gpytorch": "linear_operator KroneckerProduct",
                 "dense": f"dense {lib.name} (N x N)"}[name]
        print(f"  {label:34s} fit {t_fit * 1e3:9.1f} ms ({t_fit / args.steps * 1e3:7.2f} ms/step)"
              f"  predict {t_pred * 1e3:7.2f} ms  NLL/N {nll / n:+.4f}  lengthscales {ell}  "
              f"noise {math.sqrt(math.exp(theta[-1])):.4f}  RMSE vs truth {rmse:.4f}")
    if len(results) < 2:
        return 0
    (_, a), (peer_name, b) = results.items()
    print(f"  speedup of kronlinalg over {peer_name}: {b[0] / a[0]:.2f}x on the fit, "
          f"{b[1] / a[1]:.2f}x on the prediction")
    tol = 1e-6 if args.dtype == "float64" else 2e-2
    gap = float(np.max(np.abs(a[2] - b[2])))
    if gap > tol * args.steps or abs(a[3] - b[3]) > tol * args.steps * max(1.0, abs(a[3])):
        print(f"  WARNING: the two fits disagree (hyperparameters differ by {gap:.2e})")
        return 1
    print(f"  the two fits agree: hyperparameters within {gap:.1e}, NLL within "
          f"{abs(a[3] - b[3]):.1e}")
    return 0
