"""Compiled kernels.  `cuda` is None when the package was built without CUDA."""
from . import _kron_cpu as kron_cpu

try:
    from . import _kron_cuda as kron_cuda
except ImportError:  # built without nvcc
    kron_cuda = None

__all__ = ["kron_cpu", "kron_cuda"]

try:
    from . import _ks_cpu as ks_cpu
except ImportError:  # a checkout built before the structured kernels existed
    ks_cpu = None
try:
    from . import _ks_cuda as ks_cuda
except ImportError:  # built without nvcc
    ks_cuda = None

__all__ += ["ks_cpu", "ks_cuda"]

try:
    from . import _probe_cuda as probe_cuda
except ImportError:  # built without nvcc
    probe_cuda = None

__all__ += ["probe_cuda"]
