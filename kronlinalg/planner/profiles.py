"""Device profiles: what the cost model knows about a CPU or GPU.

Known GPUs come from a table (datasheets; the H100 SXM row from our own measurements in
../shared/bench/h100-anchors-2026-11-22.json).  An unknown GPU gets values derived from its CUDA
device properties; the CPU gets values derived from its core count and SIMD width.  Either way a
calibration stored in the cache (kronlinalg.calibrate()) overrides the table field by field.

Conventions: `bandwidth` counts bytes read plus bytes written per second (what a large copy
achieves); `gemm_flops` is what the vendor GEMM reaches on large square products, per dtype;
tensor-core rates are ops (2 per multiply-add) per cycle per SM.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import sys
from dataclasses import dataclass, field

from . import profile_cache as _cache

__all__ = ["DeviceProfile", "KNOWN_GPUS", "profile_for", "resolve_device", "invalidate",
           "cpu_key", "gpu_identity", "table_row", "blas_threads"]


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    kind: str  # "cpu" or "cuda"
    source: str  # "table", "derived", "calibrated"
    cc: tuple | None = None  # compute capability
    units: int = 1  # SMs (GPU) or cores (CPU)
    clock_hz: float = 1.0e9
    bandwidth: float = 1.0e10  # bytes/s, read + write
    gemm_flops: dict = field(default_factory=dict)  # dtype name -> flop/s of (cu)BLAS GEMM
    simd_bytes: int = 0  # CPU vector register width
    cache_bytes: float = 0.0  # data that stays on chip between passes (CPU: L2s, GPU: L2)
    l1_bytes: float = 32768.0  # CPU: one core's L1 data cache
    launch_s: float = 0.0  # one kernel launch (GPU) or one library call (CPU)
    # shared memory and tensor cores (KAMI's parameters)
    L_sm: float = 0.0  # load latency, cycles
    B_sm: float = 128.0  # bytes/cycle/SM
    theta: dict = field(default_factory=dict)  # stride in 4-byte words -> bandwidth fraction
    tc_ops: dict = field(default_factory=dict)  # "fp16"/"bf16"/"tf32"/"fp64" -> ops/cycle/SM
    n_tc: int = 4
    coef: dict = field(default_factory=dict)  # fitted predictor constants (see _kron.py)
    key: str = ""  # cache key of the device

    def flops(self, dtype: str) -> float:
        """GEMM rate for dtype; half types run at the float16 rate, unknown ones at float32's."""
        g = self.gemm_flops
        if dtype in g:
            return g[dtype]
        if dtype == "bfloat16" and "float16" in g:
            return g["float16"]
        return g.get("float32", 1.0e10)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["theta"] = {str(k): v for k, v in self.theta.items()}
        return d

    def updated(self, fields: dict) -> DeviceProfile:
        """A copy with `fields` (e.g. a cached calibration) replacing the table's values."""
        known = {f.name for f in dataclasses.fields(self)}
        new = {k: v for k, v in fields.items() if k in known}
        if "cc" in new and new["cc"] is not None:
            new["cc"] = tuple(new["cc"])
        if "theta" in new:
            new["theta"] = {int(k): float(v) for k, v in new["theta"].items()}
        for name in ("gemm_flops", "tc_ops", "coef"):  # merge: a partial calibration keeps the rest
            if name in new:
                new[name] = {**getattr(self, name), **new[name]}
        return dataclasses.replace(self, **new)


_T = 1.0e12


def _gpu(name, cc, sms, clock_ghz, bw, f32, f64, f16, L_sm, tc, l2_mb, launch_s=4.0e-6):
    return DeviceProfile(name=name, kind="cuda", source="table", cc=cc, units=sms,
                         cache_bytes=l2_mb * 2.0 ** 20,
                         clock_hz=clock_ghz * 1e9, bandwidth=bw,
                         gemm_flops={"float32": f32, "float64": f64, "float16": f16,
                                     "bfloat16": f16},
                         launch_s=launch_s, L_sm=L_sm, B_sm=128.0,
                         # a warp reading 4-byte words at stride s hits gcd(s, 32) words per bank
                         theta={s: 1.0 / math.gcd(s, 32) for s in (1, 2, 4, 8, 16, 32)},
                         tc_ops=tc)


# Datasheet rows: bandwidth at 90 % of the datasheet figure and GEMM at 75-90 % of peak (what
# cuBLAS reaches on large squares, by the H100's measured ratios) unless measured.  L_sm from
# published microbenchmarks; tensor-core ops/cycle/SM from the dense datasheet peaks.
KNOWN_GPUS = {
    "h100-sxm": _gpu("NVIDIA H100 SXM", (9, 0), 132, 1.98, 2.96 * _T, 51 * _T, 57 * _T,
                     791 * _T, 30, {"fp16": 4096, "bf16": 4096, "tf32": 2048, "fp64": 256}, 50),
    "h100-pcie": _gpu("NVIDIA H100 PCIe", (9, 0), 114, 1.755, 1.8 * _T, 39 * _T, 44 * _T,
                      600 * _T, 30, {"fp16": 4096, "bf16": 4096, "tf32": 2048, "fp64": 256}, 50),
    "h200": _gpu("NVIDIA H200", (9, 0), 132, 1.98, 4.3 * _T, 51 * _T, 57 * _T, 791 * _T, 30,
                 {"fp16": 4096, "bf16": 4096, "tf32": 2048, "fp64": 256}, 50),
    "a100": _gpu("NVIDIA A100", (8, 0), 108, 1.41, 1.83 * _T, 17.5 * _T, 17.5 * _T, 250 * _T,
                 29, {"fp16": 2048, "bf16": 2048, "tf32": 1024, "fp64": 128}, 40),
    "v100": _gpu("NVIDIA V100", (7, 0), 80, 1.53, 0.81 * _T, 14 * _T, 7 * _T, 94 * _T, 19,
                 {"fp16": 1024}, 6),
    "l40s": _gpu("NVIDIA L40S", (8, 9), 142, 2.52, 0.78 * _T, 64 * _T, 1.3 * _T, 250 * _T, 30,
                 {"fp16": 1024, "bf16": 1024, "tf32": 512}, 96),
    "rtx4090": _gpu("NVIDIA GeForce RTX 4090", (8, 9), 128, 2.52, 0.9 * _T, 58 * _T, 1.2 * _T,
                    130 * _T, 30, {"fp16": 512, "bf16": 512, "tf32": 256}, 72),
}

# How a device's marketing name maps to a row; SM counts split parts of one compute capability.
# (GH200 matches "H200": its HBM is closer to the H200's than to the H100's.)
_NAME_HINTS = (("H200", "h200"), ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"),
               ("A100", "a100"), ("V100", "v100"), ("L40S", "l40s"), ("4090", "rtx4090"))


def table_row(name: str, cc, sms: int):
    for hint, row in _NAME_HINTS:
        if hint.lower() in name.lower():
            return KNOWN_GPUS[row]
    for row in KNOWN_GPUS.values():
        if row.cc == tuple(cc) and row.units == sms:
            return row
    return None


# ---------------------------------------------------------------------------------------------
# the present devices


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cpu_clock_hz() -> float:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("cpu MHz"):
                    return float(line.split(":", 1)[1]) * 1e6
    except (OSError, ValueError):
        pass
    return 2.5e9


def _cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _simd_bytes() -> int:
    """Widest vector unit NumPy found at run time (its dispatch sees what this CPU offers)."""
    import numpy as np

    try:
        found = set(np.show_config(mode="dicts")["SIMD Extensions"]["found"])
    except (KeyError, TypeError, ValueError):
        found = set()
    # NumPy < 2.4 names features (AVX512F, AVX2), later ones microarchitecture levels (X86_V4)
    if found & {"AVX512F", "X86_V4"} or any(f.startswith("AVX512") for f in found):
        return 64
    if found & {"AVX2", "X86_V3"}:
        return 32
    return 16


def cpu_key() -> str:
    return f"cpu-{_cpu_model()}-{_cpu_cores()}c"


def _cpu_cache(level: int, default: float) -> float:
    """Size of one core's data (or unified) cache of `level`, from sysfs."""
    try:
        base = "/sys/devices/system/cpu/cpu0/cache"
        for entry in sorted(os.listdir(base)):
            with open(f"{base}/{entry}/level", encoding="utf-8") as fh:
                if fh.read().strip() != str(level):
                    continue
            with open(f"{base}/{entry}/type", encoding="utf-8") as fh:
                if fh.read().strip() == "Instruction":
                    continue
            with open(f"{base}/{entry}/size", encoding="utf-8") as fh:
                text = fh.read().strip().upper()
            scale = {"K": 2**10, "M": 2**20}.get(text[-1], 1)
            return float(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return default


def blas_threads(cores: int) -> int:
    """Threads NumPy's BLAS gives a large product: the thread count its environment sets
    (OpenBLAS's variable, MKL's, then OpenMP's, the ones those libraries read when they load),
    at most the cores; the cores when none is set."""
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        text = os.environ.get(var, "").split(",")[0].strip()
        if text.isdigit() and int(text) > 0:
            return max(1, min(cores, int(text)))
    return max(1, cores)


def _cpu_profile() -> DeviceProfile:
    cores, simd, clock = _cpu_cores(), _simd_bytes(), _cpu_clock_hz()
    # Two FMA ports per core: peak = cores·lanes·2 flops·2 ports·clock; OpenBLAS reaches about
    # half of it (measured on an Ice Lake Xeon), float64 half of float32.
    peak32 = cores * (simd // 4) * 4 * clock
    return DeviceProfile(name=_cpu_model(), kind="cpu", source="derived", units=cores,
                         clock_hz=clock, bandwidth=1.0e10 * min(cores, 8), simd_bytes=simd,
                         gemm_flops={"float32": 0.5 * peak32, "float64": 0.25 * peak32},
                         # L2s only: on shared machines other tenants own most of the L3
                         cache_bytes=_cpu_cache(2, 2.0**20) * cores,
                         l1_bytes=_cpu_cache(1, 32768.0), launch_s=2.0e-6, key=cpu_key())


def gpu_identity(index: int) -> tuple:
    """(name, compute capability, SM count, properties dict) of CUDA device `index`."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        try:
            import cupy
        except ImportError:
            cupy = None
    if cupy is not None:
        try:
            props = cupy.cuda.runtime.getDeviceProperties(index)
        except Exception as exc:  # CuPy without a driver or device
            raise RuntimeError(f"device: no GPU {index} through CuPy ({exc}); plan for a known "
                               f"GPU by name instead, e.g. device='h100-sxm'") from None
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        return name, (props["major"], props["minor"]), int(props["multiProcessorCount"]), props
    try:  # no CuPy: a CUDA torch is the other way to reach the GPU
        import torch

        p = torch.cuda.get_device_properties(index)
    except Exception as exc:  # no torch, a CPU-only torch, or no device
        raise RuntimeError(f"device: no GPU {index} to plan for ({type(exc).__name__}: {exc}); "
                           f"plan for a known GPU by name instead, e.g. device='h100-sxm'") from None
    return p.name, (p.major, p.minor), p.multi_processor_count, {}


def _derived_gpu(name, cc, sms, props) -> DeviceProfile:
    """An unknown GPU from its properties (CUDA 13 dropped clockRate from the struct: the
    attribute query is the fallback, then a typical clock)."""
    clock_khz = props.get("clockRate") or _attribute(13) or 1.5e6  # cudaDevAttrClockRate
    mem_khz = props.get("memoryClockRate") or _attribute(36) or 0  # cudaDevAttrMemoryClockRate
    bus = props.get("memoryBusWidth") or 0
    bw = 2.0 * mem_khz * 1e3 * bus / 8 * 0.85 if mem_khz and bus else 1.0e12
    lanes = 64 if cc[0] < 8 or tuple(cc) == (8, 0) else 128  # FP32 lanes per SM
    f32 = sms * lanes * 2 * clock_khz * 1e3 * 0.75
    full_fp64 = tuple(cc) in ((6, 0), (7, 0), (8, 0), (9, 0))
    tc = {"fp16": 1024 if cc[0] >= 8 else 512}
    l2_mb = (props.get("l2CacheSize") or 8 * 2**20) / 2**20
    return _gpu(name, tuple(cc), sms, clock_khz / 1e6, bw, f32, f32 / 2 if full_fp64 else f32 / 64,
                f32 * 8, 30, tc, l2_mb).updated({"source": "derived"})


def _attribute(attr: int):
    try:
        import cupy

        return cupy.cuda.runtime.deviceGetAttribute(attr, cupy.cuda.runtime.getDevice())
    except Exception:  # no CuPy or an attribute this driver does not know
        return None


def _gpu_profile(index: int) -> DeviceProfile:
    name, cc, sms, props = gpu_identity(index)
    row = table_row(name, cc, sms)
    base = row if row is not None else _derived_gpu(name, cc, sms, props)
    return dataclasses.replace(base, name=name, cc=tuple(cc), units=sms,
                               key=f"cuda-{name}-sm{cc[0]}{cc[1]}-{sms}")


# ---------------------------------------------------------------------------------------------
# resolution: whatever the caller passed as `device` -> a canonical string -> a profile


def resolve_device(device) -> str:
    """'cpu', 'cuda:N' or a KNOWN_GPUS row name, from a string, int, array or device object."""
    if device is None:
        return "cpu"
    if isinstance(device, DeviceProfile):
        return device.key or device.name
    if isinstance(device, str):
        d = device.strip().lower()
        if d in ("cpu", "host", "numpy") or d in KNOWN_GPUS:
            return "cpu" if d in ("host", "numpy") else d
        if d in ("cuda", "gpu"):
            return f"cuda:{_current_gpu()}"
        if d.startswith(("cuda:", "gpu:")) and d[d.index(":") + 1:].isdigit():
            return "cuda:" + d[d.index(":") + 1:]
        raise ValueError(f"device: expected 'cpu', 'cuda', 'cuda:N' or one of "
                         f"{sorted(KNOWN_GPUS)}, got {device!r}")
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    from ..common import backend as _backend

    if _backend.is_cupy(device):
        return f"cuda:{device.device.id}"
    if _backend.is_torch(device):
        device = device.device
    if hasattr(device, "type") and hasattr(device, "index"):  # torch.device
        if device.type == "meta":
            raise ValueError("device: a torch 'meta' device has no hardware to plan for; pass "
                             "'cpu', 'cuda' or a profile name such as 'h100-sxm'")
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"device: kronlinalg plans for 'cpu' and 'cuda' devices, got "
                             f"{device.type!r}")
        return "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
    if hasattr(device, "id") and type(device).__module__.startswith("cupy"):  # cupy Device
        return f"cuda:{device.id}"
    return "cpu"  # NumPy and every other host array


def _current_gpu() -> int:
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        return cupy.cuda.runtime.getDevice()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return 0


_PROFILES: dict = {}
_EXPLICIT: dict = {}  # profiles handed in as objects, by key


def profile_for(device) -> DeviceProfile:
    """The profile the planner uses for `device`: table or derived values, then the cache."""
    if isinstance(device, DeviceProfile):
        _EXPLICIT[resolve_device(device)] = device
        return device
    d = resolve_device(device)
    prof = _PROFILES.get(d) or _EXPLICIT.get(d)
    if prof is None:
        if d == "cpu":
            base = _cpu_profile()
        elif d in KNOWN_GPUS:
            base = dataclasses.replace(KNOWN_GPUS[d], key=d)
        else:
            base = _gpu_profile(int(d.split(":")[1]))
        cached = _cache.load(base.key)
        prof = base.updated(cached) if cached else base
        _PROFILES[d] = prof
    return prof


def invalidate() -> None:
    """Forget resolved profiles (after a calibration or a change of cache directory)."""
    _PROFILES.clear()
