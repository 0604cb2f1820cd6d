"""Where arrays live and how the kernels see them.

The only module that knows about NumPy / CuPy / PyTorch specifics: it classifies an array as
host or CUDA memory, exposes its pointer and element strides, allocates outputs in the caller's
library and names the stream to launch on.  Operations above it never touch pointers.
"""

from __future__ import annotations

import contextlib
import functools
import math
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
        # NumPy dtypes by name: a big-endian float64 is 'float64' (to_numpy converts its data)
        name = dtype.name if isinstance(dtype, np.dtype) else str(dtype).rsplit(".", 1)[-1]
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
    """Host view of a CPU array from any DLPack-capable library, ready for the kernels: zero-copy
    unless its layout is one the kernels cannot walk (byte strides that are not a multiple of
    the itemsize, e.g. a field of a NumPy structured array, or an unaligned address) or whose
    byte order is not the machine's: such an array is copied into a C-contiguous native one
    (see :func:`strides_ok`)."""
    if isinstance(a, np.ndarray):
        n = a
    elif is_torch(a):
        # (lazy negated/conjugated views have no NumPy form: resolving copies only those)
        n = (a.detach() if a.requires_grad else a).resolve_neg().resolve_conj().numpy()
    else:
        try:
            n = np.from_dlpack(a)
        except (TypeError, AttributeError, BufferError, RuntimeError):
            n = np.asarray(a)
    if host_ready(n):
        return n
    return np.ascontiguousarray(n, dtype=n.dtype.newbyteorder("="))


def host_ready(n: np.ndarray) -> bool:
    """Whether the kernels can use NumPy array n as it is (to_numpy returns it uncopied): the
    machine's byte order, and an aligned address or strides they can walk."""
    return n.dtype.isnative and (n.flags.aligned or strides_ok(n))


class LayoutError(ValueError):
    """An array whose memory the kernels cannot address in elements (byte strides that are not a
    multiple of the itemsize, or an address not aligned to it).  to_numpy() and kernel_ready()
    copy such arrays; reaching host_view()/device_view() with one is a bug of the caller."""


def _byte_layout(a):
    """(address, byte strides, itemsize) of a NumPy or CuPy array."""
    if is_cupy(a):
        return a.data.ptr, a.strides, a.itemsize
    return host_address(a), a.strides, a.itemsize


def strides_ok(a) -> bool:
    """Whether a NumPy or CuPy array's address and byte strides are whole multiples of its
    itemsize (dimensions of length 0 or 1 are never stepped along, so theirs do not count).
    torch tensors have element strides: always True."""
    if is_torch(a):
        return True
    ptr, strides, item = _byte_layout(a)
    if 0 in a.shape:
        return True
    if ptr % item:
        return False
    return all(s % item == 0 for s, n in zip(strides, a.shape) if n > 1)


def kernel_ready(a):
    """a itself where the kernels can address it in elements (see strides_ok), else a
    C-contiguous copy in a's library and on a's device.  Cheap: call it on every kernel input."""
    if isinstance(a, np.ndarray):
        return to_numpy(a)
    if is_cupy(a) and not strides_ok(a):  # (CuPy's own copy faults on it: refuse)
        raise LayoutError(f"a CuPy array of byte strides {tuple(a.strides)} and itemsize "
                          f"{a.itemsize} cannot be read on the GPU; copy it on the host first")
    return a


def _element_strides(a, strides, item) -> tuple:
    out = []
    for s, n in zip(strides, a.shape):
        if s % item == 0:
            out.append(s // item)
        elif n <= 1:  # never stepped along
            out.append(0)
        else:
            raise LayoutError(
                f"array of shape {tuple(a.shape)} and dtype {a.dtype} has byte strides "
                f"{tuple(strides)}, not multiples of its itemsize {item} (a field of a structured "
                "array?): pass it through kernel_ready()/to_numpy() first, which copy it")
    return tuple(out)


@dataclass(frozen=True)
class DeviceView:
    """A CUDA array as the kernels see it: pointer, shape and strides in elements."""

    ptr: int
    shape: tuple
    strides: tuple


def device_view(a) -> DeviceView:
    """Pointer, shape and element strides of a CUDA array; LayoutError (a ValueError) for a
    CuPy array whose byte strides are not itemsize multiples (kernel_ready() copies those)."""
    if is_cupy(a):
        item = a.itemsize
        ptr = a.data.ptr
        if ptr % item and a.size > 1:
            raise LayoutError(f"array of dtype {a.dtype} at an address not aligned to its "
                              f"itemsize {item}: pass it through kernel_ready() first")
        return DeviceView(ptr, tuple(a.shape), _element_strides(a, a.strides, item))
    return DeviceView(a.data_ptr(), tuple(a.shape), tuple(a.stride()))


def host_view(a: np.ndarray) -> DeviceView:
    """Pointer, shape and element strides of a NumPy array; LayoutError (a ValueError) where the
    byte strides are not itemsize multiples (to_numpy() copies those)."""
    item = a.itemsize
    strides = a.strides
    for s in strides:
        if s % item:
            return DeviceView(host_address(a), a.shape, _element_strides(a, strides, item))
    return DeviceView(host_address(a), a.shape, tuple(s // item for s in strides))


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
    return current_stream_getter(a)(device_index(a))


def device_index(a) -> int:
    """Index of the GPU a CuPy array or CUDA torch tensor lives on."""
    return a.data.device_id if is_cupy(a) else a.get_device()


def current_device_getter(a):
    """device() -> index of the current GPU in a's library, resolved once for a replay (torch:
    its C entry point; torch.cuda.current_device() adds microseconds of Python checks)."""
    if is_cupy(a):
        return _cupy().cuda.runtime.getDevice
    torch = _torch()
    return getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def current_stream_getter(a):
    """stream(device) -> handle of the stream a's library works on, on that (current) device,
    resolved once for a replay (no objects made per call where the library allows)."""
    if is_cupy(a):
        cupy = _cupy()
        ptr = getattr(cupy.cuda.stream, "get_current_stream_ptr", None)
        if ptr is not None:
            return lambda device: ptr()
        return lambda device: cupy.cuda.get_current_stream().ptr
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton uses
    return raw or (lambda device: torch.cuda.current_stream(device).cuda_stream)


def synchronize(a) -> None:
    """Wait for the work queued on a's stream (CUDA arrays; nothing to wait for on the host)."""
    if not on_cuda(a):
        return
    if is_cupy(a):
        with a.device:
            _cupy().cuda.get_current_stream().synchronize()
        return
    _torch().cuda.current_stream(a.device).synchronize()


_NO_SWITCH = contextlib.nullcontext()


def cuda_device_scope(a):
    """Context manager that makes a's GPU current while we launch (nothing to do, the usual
    case, when it already is)."""
    if is_cupy(a):
        if a.data.device_id == _cupy().cuda.runtime.getDevice():
            return _NO_SWITCH
        return a.device
    if current_device_getter(a)() == a.get_device():  # the usual case: nothing to switch
        return _NO_SWITCH
    return _torch().cuda.device(a.device)


def is_c_contiguous(a) -> bool:
    """Whether a's elements lie in C order without gaps, as a kernel reading a row-major buffer
    needs (NumPy/CuPy: flags; torch: is_contiguous; the strides of length-1 axes do not count)."""
    return a.is_contiguous() if is_torch(a) else bool(a.flags.c_contiguous)


def replay_empty(a, dtype_name_: str, shape):
    """empty() for a replay's results of one shape in a's library, resolved once: CuPy arrays on
    the current device (``cupy.ndarray(shape, dtype)``, what cupy.empty makes), torch tensors of
    a's dtype and device as ``torch.empty_like`` of a replay_template (a replay whose result
    dtype is its input's).  Replays run with a's device current."""
    if is_cupy(a):
        return functools.partial(type(a), tuple(shape), np.dtype(dtype_name_))
    return functools.partial(_torch().empty_like, replay_template(a, tuple(shape)))


def replay_template(like, shape):
    """A torch tensor that a replay allocates its results of `shape` from, as
    ``torch.empty_like(template)`` (one tensor argument parses in a third less host time than
    ``new_empty(shape)``: 2.19 against 2.98 µs on an H100 host), with like's dtype and device.
    A result of at most REAL_TEMPLATE_BYTES gets a real contiguous tensor: empty_like of a dense
    tensor copies its strides, ~0.2 µs less than the general path (1.08 against 1.31 µs, CPU
    torch 2.13), which matters only to host-bound tiny products — and a replay keeps that much
    alive (at most 64 MiB over a full signature cache of 4096).  A larger one gets a stride-0
    view of one element, whose empty_like is contiguous too (torch's preserve_format keeps only
    dense strides), so no result-sized buffer stays alive."""
    if math.prod(shape) * like.element_size() <= REAL_TEMPLATE_BYTES or math.prod(shape) <= 1:
        return like.new_empty(shape)
    return like.new_empty(()).expand(shape)


REAL_TEMPLATE_BYTES = 16 << 10


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


def native_matmul(a, b, xp):
    """The array library's own matmul for a repeated a @ b: np.matmul for NumPy arrays,
    torch.bmm for two torch stacks (3-D, one batch) of one dtype, torch.matmul for other
    torch tensors of one dtype (array_api_compat's wrappers add ~0.2 µs to a
    ~1 µs NumPy call and ~1 µs to torch's; they matter only for type promotion), else
    xp.matmul."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        return np.matmul
    torch = _torch()
    if torch is not None and type(a) is torch.Tensor and type(b) is torch.Tensor and (
            a.dtype == b.dtype):
        # two 3-D stacks of one batch: torch.bmm, the same cuBLAS call for half the host time
        # of torch.matmul's dispatch on CUDA (H100 host: 16-17 µs a call against 32)
        if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0]:
            return torch.bmm
        return torch.matmul
    return xp.matmul


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


def cast(xp, a, dtype_name_: str):
    """a in dtype `dtype_name_` (a itself when it already is)."""
    return a if dtype_name(a.dtype) == dtype_name_ else xp.astype(a, getattr(xp, dtype_name_))


def cupy_module():
    """CuPy if the caller has imported it (never imports it: arrays decide the library)."""
    return _cupy()
