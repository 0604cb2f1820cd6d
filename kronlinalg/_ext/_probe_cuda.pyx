# cython: language_level=3
"""Thin wrapper of the GPU calibration probes (kernels/probe/probe.h): raw cycle counts out.

Each call runs one thread block on the current device and synchronises it (calibration only).
kronlinalg.planner._calibrate turns the counts into model parameters.
"""
from .status cimport check_status
from libc.stdint cimport int32_t, int64_t


cdef extern from "probe.h" nogil:
    int kl_probe_smem_latency(int32_t iters, int64_t *cycles)
    int kl_probe_smem_bandwidth(int32_t warps, int32_t iters, int32_t stride, int64_t *cycles,
                                int64_t *bytes)
    int kl_probe_mma(int32_t kind, int32_t warps, int32_t iters, int64_t *cycles, int64_t *ops)
    const char *kl_last_error()


MMA_KINDS = {"fp16": 0, "bf16": 1, "tf32": 2, "fp64": 3}


cdef _check(int status):
    check_status(status)


def smem_latency(int iters=4096):
    """{'cycles', 'loads'}: one thread's chain of dependent shared-memory loads."""
    cdef int64_t cycles = 0
    cdef int status
    with nogil:
        status = kl_probe_smem_latency(iters, &cycles)
    _check(status)
    return {"cycles": cycles, "loads": iters}


def smem_bandwidth(int stride=1, int warps=32, int iters=4096):
    """{'cycles', 'bytes', 'stride', 'warps'}: 4-byte loads with lane stride `stride` words."""
    cdef int64_t cycles = 0, nbytes = 0
    cdef int status
    with nogil:
        status = kl_probe_smem_bandwidth(warps, iters, stride, &cycles, &nbytes)
    _check(status)
    return {"cycles": cycles, "bytes": nbytes, "stride": stride, "warps": warps}


def mma(kind, int warps=16, int iters=2048):
    """{'cycles', 'ops', 'kind', 'warps'}: mma.sync throughput of one SM (ops = 2·m·n·k)."""
    if kind not in MMA_KINDS:
        raise ValueError(f"kind: expected one of {sorted(MMA_KINDS)}, got {kind!r}")
    cdef int32_t k = MMA_KINDS[kind]
    cdef int64_t cycles = 0, ops = 0
    cdef int status
    with nogil:
        status = kl_probe_mma(k, warps, iters, &cycles, &ops)
    _check(status)
    return {"cycles": cycles, "ops": ops, "kind": kind, "warps": warps}
