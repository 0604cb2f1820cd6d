"""Roofline terms: a kernel takes at least its bytes over the bandwidth and its flops over the
peak rate it can reach; the larger bound wins (compute and memory traffic overlap)."""

from __future__ import annotations

__all__ = ["roofline", "memory_time", "compute_time"]


def memory_time(nbytes: float, bandwidth: float) -> float:
    """Seconds to move `nbytes` at `bandwidth` bytes/s."""
    return nbytes / bandwidth


def compute_time(flops: float, rate: float) -> float:
    """Seconds for `flops` at `rate` flop/s."""
    return flops / rate


def roofline(flops: float, nbytes: float, rate: float, bandwidth: float,
             overhead: float = 0.0) -> float:
    """max(flops/rate, bytes/bandwidth) + a fixed overhead (launch, call)."""
    return max(flops / rate, nbytes / bandwidth) + overhead
