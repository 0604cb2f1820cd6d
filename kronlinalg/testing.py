"""What kronlinalg's own tests and benchmarks need beyond the public functions, in one documented
place (so that they import no private name).

``extension(name)``: a compiled extension (``"kron_cpu"``, ``"kron_cuda"``, ``"structured_cpu"``,
``"structured_cuda"``, ``"probe_cuda"``, ...) or None when this build lacks it — for tests and
benchmarks of the kernels themselves.  Its functions take raw pointers and strides: they are
not an API for users.
"""

from __future__ import annotations

from ._ext import load as _load

__all__ = ["extension"]


def extension(name: str):
    """The compiled extension ``kronlinalg._ext._<name>``, or None when it was not built."""
    return _load(name)
