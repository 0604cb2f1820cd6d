"""The GPU calibration probes (clock64() micro-benchmarks of kernels/probe), for the planner's
calibrate(): a device facility shared by every operation, so the planner reaches the compiled
probes through here and never imports an extension itself."""

from __future__ import annotations

from .._ext import load

__all__ = ["gpu_probes"]


def gpu_probes():
    """The compiled probe module (smem_latency, ..., see kronlinalg/_ext/_probe_cuda.pyx), or
    None in a build without CUDA."""
    return load("probe_cuda")
