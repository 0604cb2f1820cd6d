"""kronlinalg.calibrate(): measure the present device and cache what the cost model needs.

CPU: copy bandwidth (a large NumPy copy) and BLAS throughput (NumPy matmul).  GPU: the clock64()
probes of kernels/probe (shared-memory latency, bandwidth and bank-conflict factors, tensor-core
rates), copy bandwidth and cuBLAS throughput through CuPy.  The result is stored per device
(_cache) and every later plan uses it.
"""

from __future__ import annotations

import statistics
import time
import warnings

from . import profile_cache as _cache, ranking as _plan, profiles as _profiles

__all__ = ["calibrate", "implausible", "measure_cpu", "measure_gpu", "MIN_FRACTION"]


def calibrate(device=None, force=False, *, quick=False):
    """Measure `device` ('cpu', 'cuda', 'cuda:N', an array; None: the current GPU if one is
    usable, else the CPU), store the result in the cache and return the updated profile.

    A device calibrated before is not measured again unless force=True.  quick=True uses small
    problem sizes (seconds instead of tens of seconds, noisier numbers): for tests.

    A measurement outside the plausible bounds (profile_cache.BOUNDS), or (full measurements)
    far below what the profile expects of the device (MIN_FRACTION: a busy machine), is taken
    once more; if the second is no better, a RuntimeWarning says so, nothing is stored and the
    current profile is returned.  A cache directory that cannot be written keeps the
    calibration in memory for this process (a RuntimeWarning says so).
    """
    if device is None:
        device = "cuda" if _gpu_usable() else "cpu"
    dev = _profiles.resolve_device(device)
    if dev in _profiles.KNOWN_GPUS:
        raise ValueError(f"device: {device!r} names a table profile, not a present device")
    base = _profiles.profile_for(dev)
    stored = _cache.load(base.key) or {}
    if not force and stored.get("source") == "calibrated":
        return base
    measure = (lambda: measure_cpu(quick)) if base.kind == "cpu" else (lambda: measure_gpu(dev, quick))
    # quick measurements are small and noisy by design (tests): only their types and bounds
    # are checked; a full one far below what the profile expects is measured again
    expected = None if quick else base
    fields = measure()
    bad = implausible(fields, expected)
    if bad:  # a busy machine, a throttled device: measure once more before believing it
        fields = measure()
        bad = implausible(fields, expected)
    if bad:
        warnings.warn(f"kronlinalg.calibrate: the measurement of {base.name} ({dev}) is not "
                      f"plausible ({'; '.join(bad)}), twice: it is not stored and the planner "
                      "keeps its current profile (calibrate again on an idle machine)",
                      RuntimeWarning, stacklevel=2)
        return base
    if "coef" in stored:  # keep fitted predictor coefficients across re-calibrations
        fields["coef"] = stored["coef"]
    fields.update(source="calibrated", name=base.name, measured_at=time.time())
    return _store(dev, base.key, fields)


# A measurement this far below what the profile expects of the device is taken as disturbed
# (other tenants, throttling), not as the device's rate.
MIN_FRACTION = {"bandwidth": 0.3, "gemm_flops": 0.05}


def implausible(fields: dict, expected) -> list:
    """Why a new measurement is not to be believed, as strings ([] if it is): a field of the
    wrong type or outside the plausible bounds (profile_cache.problems), or bandwidth or GEMM
    rates far below what the profile `expected` (a DeviceProfile: the table row, the derived
    values or an earlier calibration) says of the device (MIN_FRACTION; expected=None: the
    bounds only)."""
    bad = _cache.problems(fields)
    if bad or expected is None:
        return bad
    bw = fields.get("bandwidth")
    if bw is not None and bw < MIN_FRACTION["bandwidth"] * expected.bandwidth:
        bad.append(f"bandwidth {bw:.3g} B/s is under {MIN_FRACTION['bandwidth']:.0%} of the "
                   f"expected {expected.bandwidth:.3g}")
    for dt, rate in (fields.get("gemm_flops") or {}).items():
        want = expected.flops(dt)
        if rate < MIN_FRACTION["gemm_flops"] * want:
            bad.append(f"gemm_flops[{dt!r}] {rate:.3g} flop/s is under "
                       f"{MIN_FRACTION['gemm_flops']:.0%} of the expected {want:.3g}")
    return bad


def store_coefficients(device, coef: dict):
    """Keep fitted predictor coefficients ({family: {term: value}}) in `device`'s cache entry
    (benchmarks/planner_quality.py --tune); the measured fields stay as they are."""
    dev = _profiles.resolve_device(device)
    key = _profiles.profile_for(dev).key
    fields = {k: v for k, v in (_cache.load(key) or {}).items() if k not in ("schema", "key")}
    fields["coef"] = {**fields.get("coef", {}), **coef}
    return _store(dev, key, fields)


def _store(dev, key, fields):
    _cache.store(key, fields)
    _profiles.invalidate()
    _plan.clear_cache()
    return _profiles.profile_for(dev)


def _gpu_usable() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device: all mean "calibrate the CPU"
        return False


def _best_time(fn, reps: int) -> float:
    """Fastest of `reps` runs: what the hardware can do, not how busy the machine was."""
    fn()  # warm-up: first-touch page faults, thread-pool start
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_cpu(quick: bool) -> dict:
    import numpy as np

    # Many short runs, best kept: on a shared machine some of them run undisturbed.  The copy
    # is larger than a server's L3 share, so it measures DRAM.
    nbytes = (4 if quick else 64) << 20
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    bandwidth = 2.0 * nbytes / _best_time(lambda: np.copyto(dst, src), 3 if quick else 15)
    gemm = {}
    n = 128 if quick else 768
    for dt in ("float32", "float64"):
        a = np.ones((n, n), dtype=dt)
        gemm[dt] = 2.0 * n ** 3 / _best_time(lambda: a @ a, 3 if quick else 20)
    tiny = np.ones((2, 2))
    calls = 200
    t = _best_time(lambda: [tiny @ tiny for _ in range(calls)], 3 if quick else 10) / calls
    return {"bandwidth": bandwidth, "gemm_flops": gemm, "launch_s": t,
            "raw": {"copy_bytes": nbytes, "gemm_n": n}}


def measure_gpu(dev: str, quick: bool) -> dict:
    import cupy

    from ..common.probes import gpu_probes

    probe_cuda = gpu_probes()

    index = int(dev.split(":")[1])
    with cupy.cuda.Device(index):
        fields = _probe_fields(probe_cuda, quick) if probe_cuda is not None else {}
        fields.update(_cupy_rates(cupy, quick))
    return fields


def _probe_fields(probe, quick: bool) -> dict:
    """Model parameters from the raw clock64() counts (which are kept in 'raw' for reference)."""
    iters = 1024 if quick else 8192
    lat = probe.smem_latency(iters)
    bw = {s: probe.smem_bandwidth(stride=s, warps=32, iters=iters // 2)
          for s in (1, 2, 4, 8, 16, 32)}
    mma = {}
    for kind in ("fp16", "bf16", "tf32", "fp64"):
        try:
            mma[kind] = probe.mma(kind, warps=16, iters=iters // 8)
        except RuntimeError:  # an arch without this mma shape
            continue
    base = bw[1]["cycles"]
    return {
        "L_sm": lat["cycles"] / lat["loads"],
        "B_sm": bw[1]["bytes"] / bw[1]["cycles"],
        "theta": {str(s): base / r["cycles"] for s, r in bw.items()},
        "tc_ops": {k: r["ops"] / r["cycles"] for k, r in mma.items()},
        "raw": {"smem_latency": lat, "smem_bandwidth": {str(s): r for s, r in bw.items()},
                "mma": mma},
    }


def _cupy_rates(cupy, quick: bool) -> dict:
    def gpu_time(fn, reps):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        fn()
        times = []
        for _ in range(reps):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
        return statistics.median(times)

    nbytes = (32 if quick else 512) << 20
    src = cupy.ones(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    bandwidth = 2.0 * nbytes / gpu_time(lambda: cupy.copyto(dst, src), 5 if quick else 15)
    del src, dst
    gemm = {}
    n = 1024 if quick else 8192
    for dt in ("float32", "float64", "float16"):
        a = cupy.ones((n, n), dtype=dt)
        gemm[dt] = 2.0 * n ** 3 / gpu_time(lambda: a @ a, 3 if quick else 10)
        del a
    gemm["bfloat16"] = gemm["float16"]
    one = cupy.zeros(1, dtype=cupy.float32)
    calls = 500
    one += 1
    cupy.cuda.get_current_stream().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        one += 1
    cupy.cuda.get_current_stream().synchronize()
    launch = (time.perf_counter() - t0) / calls
    return {"bandwidth": bandwidth, "gemm_flops": gemm, "launch_s": launch,
            "raw_rates": {"copy_bytes": nbytes, "gemm_n": n}}
