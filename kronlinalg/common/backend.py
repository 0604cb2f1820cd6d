"""Where arrays live and how the kernels see them.

The only module that knows about NumPy / CuPy / PyTorch specifics: it classifies an array as
host or CUDA memory, exposes its pointer and element strides, allocates outputs in the caller's
library and names the stream to launch on.  Operations above it never touch pointers.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import numpy as np

from .dtypes import compute as kernel_dtype  # noqa: F401  (the operations' name for it)


def _torch():
    return sys.modules.get("torch")


def _cupy():
    return sys.modules.get("cupy")


def is_torch(a) -> bool:
    torch = _torch()
    return torch is not None and isinstance(a, torch.Tensor)


def is_cupy(a) -> bool:
    cupy = _cupy()
    return cupy is not None and isinstance(a, cupy.ndarray)


def on_cuda(a) -> bool:
    """True for CuPy arrays and CUDA torch tensors: the arrays the CUDA kernels take."""
    return is_cupy(a) or (is_torch(a) and a.is_cuda)


_dtype_names: dict = {}


def dtype_name(dtype) -> str:
    """'float32' for numpy, CuPy, torch and array-api-strict dtypes alike (memoised: hot path)."""
    # keyed by type too: dtypes of different libraries must never be compared with each other
    # (array-api-strict warns when its dtypes meet NumPy's)
    key = (type(dtype), dtype)
    try:
        return _dtype_names[key]
    except (KeyError, TypeError):
        name = str(dtype).rsplit(".", 1)[-1]
        try:
            _dtype_names[key] = name
        except TypeError:  # unhashable dtype object
            pass
        return name


def cuda_array_key(a, allow_grad: bool = False):
    """(type, shape, strides, dtype, device) of a CuPy array or a CUDA torch tensor (one that
    needs no autograd unless allow_grad); None for anything else.  Hashable and cheap: packed
    kernel layouts and the operations' per-call fast paths are cached under it."""
    t = type(a)
    cupy = _cupy()
    if cupy is not None and t is cupy.ndarray:
        return (t, a.shape, a.strides, a.dtype, a.data.device_id)
    torch = _torch()
    if (torch is not None and t is torch.Tensor and a.is_cuda
            and (allow_grad or not a.requires_grad)):
        return (t, a.shape, a.stride(), a.dtype, a.get_device())
    return None


def host_array_key(a):
    """(type, shape, strides, dtype) of a NumPy array (exactly: no subclass); else None."""
    if type(a) is np.ndarray:
        return (np.ndarray, a.shape, a.strides, a.dtype)
    return None


def host_address(a: np.ndarray) -> int:
    """Address of a NumPy array's first element (cheaper than a.ctypes.data)."""
    return a.__array_interface__["data"][0]


def to_numpy(a) -> np.ndarray:
    """Zero-copy host view of a CPU array from any DLPack-capable library."""
    if isinstance(a, np.ndarray):
        return a
    if is_torch(a):
        return a.detach().numpy() if a.requires_grad else a.numpy()
    try:
        return np.from_dlpack(a)
    except (TypeError, AttributeError, BufferError, RuntimeError):
        return np.asarray(a)


@dataclass(frozen=True)
class DeviceView:
    """A CUDA array as the kernels see it: pointer, shape and strides in elements."""

    ptr: int
    shape: tuple
    strides: tuple


def device_view(a) -> DeviceView:
    if is_cupy(a):
        item = a.itemsize
        return DeviceView(a.data.ptr, tuple(a.shape), tuple(s // item for s in a.strides))
    return DeviceView(a.data_ptr(), tuple(a.shape), tuple(a.stride()))


def host_view(a: np.ndarray) -> DeviceView:
    item = a.itemsize
    return DeviceView(host_address(a), a.shape, tuple(s // item for s in a.strides))


def address_getter(a):
    """A function giving the address of the first element of arrays of a's library (CuPy
    arrays or torch tensors), chosen once per call rather than once per array."""
    return _cupy_address if is_cupy(a) else _torch_address


def _cupy_address(a) -> int:
    return a.data.ptr


def _torch_address(a) -> int:
    return a.data_ptr()


def cuda_stream(a) -> int:
    """Handle of the stream the caller's library is working on (no synchronisation)."""
    if is_cupy(a):
        return _cupy().cuda.get_current_stream().ptr
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton uses: no objects
    if raw is not None:
        return raw(a.get_device())
    return torch.cuda.current_stream(a.device).cuda_stream


def synchronize(a) -> None:
    """Wait for the work queued on a's stream (CUDA arrays; nothing to wait for on the host)."""
    if not on_cuda(a):
        return
    if is_cupy(a):
        with a.device:
            _cupy().cuda.get_current_stream().synchronize()
        return
    _torch().cuda.current_stream(a.device).synchronize()


def cuda_device_scope(a):
    """Context manager that makes a's GPU current while we launch."""
    if is_cupy(a):
        return a.device
    torch = _torch()
    if torch.cuda.current_device() == a.get_device():  # the usual case: nothing to switch
        return contextlib.nullcontext()
    return torch.cuda.device(a.device)


def empty_like_lib(a, shape, dtype_name_: str):
    """Uninitialised array of `shape` in a's library, on a's device."""
    if is_cupy(a):
        return _cupy().empty(shape, dtype=dtype_name_)
    torch = _torch()
    return torch.empty(shape, dtype=getattr(torch, dtype_name_), device=a.device)


def from_host(like, xp, out: np.ndarray):
    """A host result as an array of like's library (zero-copy where the library allows)."""
    if isinstance(like, np.ndarray):
        return out
    if is_torch(like):
        return _torch().from_numpy(out)
    import array_api_compat

    try:  # land on the caller's device (array-api-strict has several "CPU" devices)
        return xp.from_dlpack(out, device=array_api_compat.device(like))
    except TypeError:  # a library whose from_dlpack predates the device argument
        return xp.from_dlpack(out)


def contiguous(a):
    """C-contiguous copy of an array (or a itself if it already is); a copy for libraries
    without a notion of layout (array-api-strict)."""
    if is_cupy(a):
        return _cupy().ascontiguousarray(a)
    if is_torch(a):
        return a.contiguous()
    if isinstance(a, np.ndarray):
        return np.ascontiguousarray(a)
    import array_api_compat

    return array_api_compat.array_namespace(a).asarray(a, copy=True)


def kind(a) -> str:
    """The planner's device kind of an array: 'cuda' or 'cpu'."""
    return "cuda" if on_cuda(a) else "cpu"


def grad_mode(arrays):
    """How gradients must flow through a call on these arrays: None (no torch input needs
    them), "autograd" (torch.autograd: grad mode on and an input requires grad) or "transform"
    (an input is wrapped by torch.func's grad/vmap: only torch's own ops see through it)."""
    torch = _torch()
    if torch is None:
        return None
    mode = None
    for a in arrays:
        if not isinstance(a, torch.Tensor):
            continue
        if _functorch_wrapped(torch, a):
            return "transform"
        if mode is None and a.requires_grad and torch.is_grad_enabled():
            mode = "autograd"
    return mode


def _functorch_wrapped(torch, a) -> bool:
    try:
        return torch._C._functorch.is_functorch_wrapped_tensor(a)
    except AttributeError:  # a torch without functorch
        return False
