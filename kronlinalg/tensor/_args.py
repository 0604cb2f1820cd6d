"""Argument checks and small shared helpers of kronlinalg.tensor (each error names the argument)."""

from __future__ import annotations

import math

import array_api_compat

from ..common import validation

PRECISIONS = ("tf32", "ieee", "float16", "bfloat16")


def matrices(name, mats):
    if (isinstance(mats, (str, bytes)) or not hasattr(mats, "__len__")
            or hasattr(mats, "shape")):
        raise TypeError(f"{name}: expected a sequence of arrays, got {type(mats).__name__}")
    mats = list(mats)
    if not mats:
        raise ValueError(f"{name}: expected a non-empty sequence of arrays, got none")
    return mats


def check(named: dict):
    """(namespace, result dtype) of the named arrays: one library, one device, real floats."""
    xp, dt = validation.floating_arrays(named)
    return xp, getattr(xp, dt) if hasattr(xp, dt) else None


def mode(name, value, ndim):
    value = validation.count(name, value)
    if not -ndim <= value < ndim:
        raise ValueError(f"{name}: mode {value} is out of range for a tensor of {ndim} "
                         "dimensions")
    return value % ndim


def cast(xp, a, dtype):
    return a if dtype is None or a.dtype == dtype else xp.astype(a, dtype)


def cp(name, cp_tensor):
    """(weights or None, factors) of a CP tensor given as (weights, factors) or a CPTensor."""
    if (isinstance(cp_tensor, (str, bytes)) or not hasattr(cp_tensor, "__len__")
            or len(cp_tensor) != 2):
        raise TypeError(f"{name}: expected (weights, factors), got {type(cp_tensor).__name__}")
    weights, factors = cp_tensor
    return weights, matrices(f"{name}.factors", factors)


def cp_factors(name, tensor, factors):
    """The rank R shared by factors that fit the tensor's modes (ValueError naming the one that
    does not)."""
    nd = tensor.ndim
    if len(factors) != nd:
        raise ValueError(f"{name}: {len(factors)} factors for a tensor of {nd} dimensions")
    r = None
    for i, f in enumerate(factors):
        if f.ndim != 2 or int(f.shape[0]) != int(tensor.shape[i]):
            raise ValueError(f"{name}.factors[{i}]: expected shape ({tensor.shape[i]}, R), "
                             f"got {tuple(f.shape)}")
        r = int(f.shape[1]) if r is None else r
        if int(f.shape[1]) != r:
            raise ValueError(f"{name}.factors[{i}]: {f.shape[1]} columns, factors[0] has {r}")
    return r


def tensor_arg(tensor):
    xp, dt = check({"tensor": tensor})
    if tensor.ndim < 2:
        raise ValueError(f"tensor: expected at least 2 dimensions, got shape "
                         f"{tuple(tensor.shape)}")
    return xp, cast(xp, tensor, dt)


def iterations(n_iter_max, tol):
    n = validation.count("n_iter_max", n_iter_max)
    if n < 0:
        raise ValueError(f"n_iter_max: expected a non-negative integer, got {n}")
    tol = validation.scalar("tol", tol)
    if not tol >= 0:
        raise ValueError(f"tol: expected a non-negative number, got {tol}")
    return n, tol


def precision(value, tensor):
    """The float32 compute mode: "tf32" (default; tensor cores, 10-bit mantissa inputs),
    "ieee", or a half type for the tensor's storage ("float16"/"bfloat16", CUDA only)."""
    if value is None:
        return "tf32"
    if value not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {value!r}")
    if value in ("float16", "bfloat16"):
        from ..common import backend

        if not backend.on_cuda(tensor):
            raise ValueError(f"precision: {value!r} storage needs a CUDA array (CuPy or a "
                             "CUDA torch tensor)")
        if value == "bfloat16" and not backend.is_torch(tensor):
            raise ValueError("precision: 'bfloat16' storage needs a CUDA torch tensor (CuPy "
                             "has no bfloat16); 'float16' works on both")
    return value


def callback_arg(callback):
    if callback is not None and not callable(callback):
        raise TypeError("callback: expected a callable callback(iteration, fit)")
    return callback


def generator(random_state):
    import numpy as np

    if random_state is None or isinstance(random_state, (int, np.integer)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, (np.random.Generator, np.random.RandomState)):
        return random_state
    raise TypeError(f"random_state: expected None, an int or a NumPy generator, got "
                    f"{type(random_state).__name__}")


def hooi_converged(eng, core, norm_x, errors, it, tol, progress):
    """One HOOI sweep's bookkeeping: its relative error (from the core's norm: the factors are
    orthonormal) appended to errors and reported as the fit; True once two sweeps' errors differ
    by less than tol (stop)."""
    err = math.sqrt(abs(norm_x ** 2 - eng.norm(core) ** 2)) / (norm_x or 1.0)
    errors.append(err)
    progress.report(it, 1.0 - err)
    return it >= 1 and abs(errors[-2] - errors[-1]) < tol


def tucker_factors(init, xp, dims, ranks, random_state, like, convert):
    """A Tucker fit's starting factors other than from its HOSVD: init "random" (orthonormal
    columns, QR of uniform draws on like's device) or (core, factors), each factor through
    convert and checked against (dims[n], ranks[n]).  The errors name init."""
    if isinstance(init, str) and init == "random":
        rng = generator(random_state)
        return [xp.linalg.qr(random(xp, rng, (d, r), like))[0] for d, r in zip(dims, ranks)]
    if isinstance(init, str):
        raise ValueError(f"init: expected 'svd', 'random' or (core, factors), got {init!r}")
    if not hasattr(init, "__len__") or isinstance(init, (str, bytes)) or len(init) != 2:
        raise TypeError("init: expected 'svd', 'random' or (core, factors)")
    factors = [convert(f) for f in init[1]]
    if len(factors) != len(dims) or any(tuple(f.shape) != (d, r)
                                        for f, d, r in zip(factors, dims, ranks)):
        raise ValueError(f"init: expected factors of shapes {list(zip(dims, ranks))}")
    return factors


def random(xp, rng, shape, like):
    """Uniform [0, 1) values drawn on the host (reproducible across libraries), on like's
    device in like's dtype."""
    import numpy as np

    vals = (rng.random_sample(shape) if isinstance(rng, np.random.RandomState)
            else rng.random(shape))
    return xp.asarray(vals, dtype=like.dtype, device=array_api_compat.device(like))


class Progress:
    """verbose: a tqdm bar with the fit when tqdm is installed, else one printed line per
    iteration; callback(iteration, fit) for programs."""

    def __init__(self, name, verbose, n, callback):
        self.name, self.verbose, self.callback = name, verbose, callback
        self.bar = None
        if verbose:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=n, desc=f"{name} fit")

    def report(self, iteration, fit):
        if self.bar is not None:
            self.bar.set_postfix(fit=f"{fit:.6f}")
            self.bar.update(1)
        elif self.verbose:
            print(f"{self.name} iteration {iteration}: fit {fit:.8f}")
        if self.callback is not None:
            self.callback(iteration, fit)

    def close(self):
        if self.bar is not None:
            self.bar.close()
