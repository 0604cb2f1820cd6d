"""Helpers shared by the tests: backends, conversions, and a float64 reference check.

Every test compares against a dense float64 reference built with NumPy on the *actual* input
values (after rounding to the tested dtype), so the tolerance only has to cover the
computation, not the rounding of the inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import array_api_compat
import numpy as np
import pytest

#: relative Frobenius tolerance of a result in this dtype against the float64 reference
RTOL = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 2e-2}

# gradients go through more operations than the forward product: a little more room
GRAD_RTOL = {"float64": 1e-11, "float32": 1e-4}


@dataclass
class Backend:
    """One array library on one device, as the `xp` fixture hands it to a test.

    ``module`` is the library itself (numpy, torch, cupy, array_api_strict), ``namespace`` the
    array-API namespace its arrays report (``array_api_compat.array_namespace``), ``device`` the
    device its arrays live on.  Attribute access falls through to ``namespace``, so tests can
    write ``xp.float32``, ``xp.asarray``, ``xp.broadcast_to`` for any backend.
    """

    name: str
    module: object
    device: object = None
    dtypes: tuple = ("float32", "float64")
    namespace: object = field(default=None, repr=False)

    def __post_init__(self):
        if self.namespace is None:
            sample = self._raw_asarray(np.zeros(1))
            self.namespace = array_api_compat.array_namespace(sample)

    def __getattr__(self, name):
        if name in ("namespace", "module"):  # not yet set: avoid recursion in __post_init__
            raise AttributeError(name)
        return getattr(self.namespace, name)

    @property
    def is_torch(self) -> bool:
        return self.name.startswith("torch")

    @property
    def is_cuda(self) -> bool:
        return self.name in ("cupy", "torch_cuda")

    def _raw_asarray(self, a: np.ndarray):
        if self.name.startswith("torch"):
            return self.module.from_numpy(np.ascontiguousarray(a)).to(self.device)
        if self.name == "cupy":
            with self.module.cuda.Device(self.device.id if self.device is not None else 0):
                return self.module.asarray(a)
        return self.module.asarray(a)

    def dtype(self, name: str):
        return getattr(self.module, name)

    def __str__(self):
        return self.name


def _gpu_count_cupy() -> int:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def _torch_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def cuda_libs() -> list:
    """The GPU array libraries usable here, by module name: "torch" (CUDA torch), "cupy"."""
    return (["torch"] if _torch_cuda() else []) + (["cupy"] if _gpu_count_cupy() > 0 else [])


def gpu_array(lib: str, a):
    """NumPy array a on the GPU in library lib ("torch" or "cupy"), C-contiguous."""
    if lib == "torch":
        import torch

        return torch.as_tensor(np.ascontiguousarray(a), device="cuda")
    import cupy

    return cupy.asarray(np.ascontiguousarray(a))


def host_array(lib: str, a) -> np.ndarray:
    """A GPU array of library lib back on the host."""
    return a.cpu().numpy() if lib == "torch" else a.get()


def make_backend(name: str) -> Backend:
    """The backend called `name`, or pytest.skip with the reason it is not usable here."""
    if name == "numpy":
        return Backend("numpy", np, "cpu", ("float16", "float32", "float64"))
    if name == "array_api_strict":
        xs = pytest.importorskip("array_api_strict")
        return Backend("array_api_strict", xs, xs.Device("CPU_DEVICE"))
    if name == "torch":
        torch = pytest.importorskip("torch")
        return Backend("torch", torch, torch.device("cpu"),
                       ("float16", "bfloat16", "float32", "float64"))
    if name == "cupy":
        cupy = pytest.importorskip("cupy")
        if _gpu_count_cupy() == 0:
            pytest.skip("cupy: no CUDA device")
        return Backend("cupy", cupy, cupy.cuda.Device(0), ("float16", "float32", "float64"))
    if name == "torch_cuda":
        torch = pytest.importorskip("torch")
        if not _torch_cuda():
            pytest.skip("torch: no CUDA device")
        return Backend("torch_cuda", torch, torch.device("cuda", 0),
                       ("float16", "bfloat16", "float32", "float64"))
    raise ValueError(name)


CPU_BACKENDS = ("numpy", "array_api_strict", "torch")
GPU_BACKENDS = ("cupy", "torch_cuda")


# ---------------------------------------------------------------------------------------------
# conversions


def to_xp(xp: Backend, a, dtype: str | None = None):
    """`a` (NumPy) as an array of backend `xp`, on its device, in `dtype` (default: a's)."""
    a = np.asarray(a)
    if dtype is None:
        dtype = a.dtype.name
    if dtype == "bfloat16":  # NumPy has no bfloat16: round through torch
        if not xp.is_torch:
            raise ValueError(f"{xp.name} has no bfloat16")
        t = xp.module.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        return t.to(device=xp.device, dtype=xp.module.bfloat16)
    return xp._raw_asarray(np.ascontiguousarray(a, dtype=dtype))


def to_numpy(a) -> np.ndarray:
    """A host NumPy copy (or view) of any backend's array; bfloat16 comes back as float32."""
    if isinstance(a, np.ndarray):
        return a
    mod = type(a).__module__
    if mod.startswith("torch"):
        import torch

        t = a.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.to(torch.float32)
        return t.numpy()
    if mod.startswith("cupy"):
        return a.get()
    try:
        return np.from_dlpack(a)
    except Exception:
        return np.asarray(a)


def dtype_name(dt) -> str:
    return str(dt).rsplit(".", 1)[-1]


def random(xp: Backend, rng: np.random.Generator, shape, dtype: str):
    """(array in xp, its exact values as float64 NumPy): the reference sees the rounded inputs.

    Entries are standard normal, bounded away from zero so no input is accidentally trivial.
    """
    a = rng.standard_normal(shape)
    a = np.where(np.abs(a) < 0.05, 0.5, a)
    arr = to_xp(xp, a, dtype)
    return arr, to_numpy(arr).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# references and checks


def kron_dense(factors) -> np.ndarray:
    k = np.ones((1, 1))
    for f in factors:
        k = np.kron(k, np.asarray(f, dtype=np.float64))
    return k


def _right_by_factors(x: np.ndarray, factors) -> np.ndarray:
    """x @ kron(factors) one factor at a time (tensordot on the unfolded row), in float64."""
    lead = x.shape[:-1]
    cur = x.reshape(lead + tuple(f.shape[0] for f in factors))
    for f in factors:
        cur = np.tensordot(cur, f, axes=([len(lead)], [0]))
    return cur.reshape(lead + (math.prod(f.shape[1] for f in factors),))


def kron_matmul_ref(x, factors, side="right", alpha=1.0, beta=0.0, y=None) -> np.ndarray:
    """Float64 reference of kron_matmul: x @ np.kron(F1, ..., FN) (or kron @ x for side="left").

    The dense Kronecker product is used while it is small; beyond that, the same product one
    factor at a time with np.tensordot (still float64, independent of the library).
    """
    x = np.asarray(x, dtype=np.float64)
    factors = [np.asarray(f, dtype=np.float64) for f in factors]
    dense = math.prod(f.size for f in factors) <= 4_000_000
    if side == "right":
        out = x @ kron_dense(factors) if dense else _right_by_factors(x, factors)
    elif dense:
        out = kron_dense(factors) @ x
    elif x.ndim == 1:
        out = _right_by_factors(x, [f.T for f in factors])
    else:
        out = np.swapaxes(_right_by_factors(np.swapaxes(x, -1, -2), [f.T for f in factors]), -1, -2)
    out = alpha * out
    if beta != 0.0:
        out = out + beta * np.asarray(y, dtype=np.float64)
    return out


def same_device(a, b) -> bool:
    return str(a) == str(b)


def assert_close(actual, expected, xp: Backend, dtype: str, rtol: float | None = None, *,
                 msg: str = ""):
    """`actual` is an xp array of `dtype` on xp's device whose values match `expected` (float64).

    The relative Frobenius error ||actual - expected|| / ||expected|| must be at most `rtol`
    (per-dtype default); an all-zero or empty reference is compared absolutely.
    """
    ns = array_api_compat.array_namespace(actual)
    assert ns is xp.namespace, f"{msg}namespace {ns.__name__}, expected {xp.namespace.__name__}"
    expected = np.asarray(expected, dtype=np.float64)
    assert tuple(actual.shape) == expected.shape, (
        f"{msg}shape {tuple(actual.shape)}, expected {expected.shape}")
    assert dtype_name(actual.dtype) == dtype, f"{msg}dtype {actual.dtype}, expected {dtype}"
    dev = array_api_compat.device(actual)
    assert same_device(dev, xp.device), f"{msg}device {dev}, expected {xp.device}"
    got = to_numpy(actual).astype(np.float64)
    assert np.all(np.isfinite(got)), f"{msg}non-finite entries in the result"
    if rtol is None:
        rtol = RTOL[dtype]
    ref_norm = np.linalg.norm(expected)
    err = np.linalg.norm(got - expected)
    if ref_norm == 0.0:
        assert err <= rtol, f"{msg}absolute error {err:.3e} against an all-zero reference"
    else:
        rel = err / ref_norm
        assert rel <= rtol, f"{msg}relative Frobenius error {rel:.3e} > {rtol:.1e}"


# tensor references (the GPU tensor test files)

def unfold(x, mode):
    return np.reshape(np.moveaxis(x, mode, 0), (x.shape[mode], -1))


def kr_ref(mats):
    res = mats[0]
    for m in mats[1:]:
        res = np.einsum("ir,jr->ijr", res, m).reshape(-1, res.shape[1])
    return res


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def planted_cp(rng, shape, rank, noise, relative=False):
    """(x, init): a CP tensor of `rank` standard-normal factors plus noise — `noise` times
    N(0, 1), or times the tensor's RMS with relative=True — and starting factors in [0, 1)."""
    fs = [rng.standard_normal((d, rank)) for d in shape]
    x = np.reshape(kr_ref(fs).sum(1), shape)
    scale = noise * np.linalg.norm(x) / np.sqrt(x.size) if relative else noise
    x = x + scale * rng.standard_normal(shape)
    return x, [rng.random((d, rank)) for d in shape]
