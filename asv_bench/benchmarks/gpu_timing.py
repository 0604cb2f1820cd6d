"""What the GPU benchmarks of strassen, batched, block-sparse, tensor and the Kronecker operator
share: torch on CUDA or a skip, and device time by CUDA events (median of `reps` calls after a
warm-up), next to asv's own wall-clock ``time_*``."""

from __future__ import annotations

import statistics


def cuda_torch():
    """torch with a CUDA device, or NotImplementedError (asv: the benchmark is skipped)."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - torch is in the test extras
        raise NotImplementedError("torch is not installed") from err
    if not torch.cuda.is_available():
        raise NotImplementedError("no CUDA GPU visible to torch")
    return torch


def randn(torch, shape, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(
        getattr(torch, dtype))


def event_ms(torch, fn, reps=10):
    """Median device time of one call of fn, in ms (CUDA events around each call)."""
    fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def free(torch):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
