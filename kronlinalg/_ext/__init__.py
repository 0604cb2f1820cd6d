"""Compiled kernels.  `cuda` is None when the package was built without CUDA."""
from . import _kron_cpu as kron_cpu

try:
    from . import _kron_cuda as kron_cuda
except ImportError:  # built without nvcc
    kron_cuda = None

__all__ = ["kron_cpu", "kron_cuda"]
