"""Compiled kernels, one extension per operation and device: ``_<op>_cpu``, ``_<op>_cuda``.

``load("kron_cuda")`` is the extension, or None when this build lacks it (no nvcc at build
time); the operations keep what they load as module attributes.
"""

import importlib

__all__ = ["load"]


def load(name: str):
    """The extension module ``_<name>`` (e.g. "kron_cpu"), or None when it was not built."""
    try:
        return importlib.import_module(f"._{name}", __name__)
    except ImportError:
        return None
