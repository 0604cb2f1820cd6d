"""Per-device calibration cache: one JSON file per device in the user's cache directory.

Location: $KRONLINALG_CACHE_DIR if set, else $XDG_CACHE_HOME/kronlinalg, else
~/.cache/kronlinalg (the platformdirs convention on Linux, without the dependency).

What is read is validated (:func:`problems`: schema, types and plausible bounds per field): a
file that fails is ignored, with one warning naming it, and the planner keeps the built-in
profile.  A directory that cannot be written keeps the calibration in memory for the process
(one warning), so a measurement is never lost to a permission error.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import threading
import warnings
from pathlib import Path

from ..common import config

__all__ = ["cache_dir", "cache_path", "load", "store", "problems", "BOUNDS", "SCHEMA"]

# Bump when the meaning of a stored field changes: older files are then ignored, not misread.
SCHEMA = 1


def cache_dir() -> Path:
    env = config.get("KRONLINALG_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kronlinalg"


def cache_path(device_key: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", device_key).strip("_") or "device"
    return cache_dir() / f"profile-{safe}.json"


# Plausible bounds per numeric field (inclusive): any device from a laptop CPU to a future GPU
# lies well inside them; a value outside is a broken file or a broken measurement.
BOUNDS = {
    "bandwidth": (1.0e8, 1.0e14),  # bytes/s, read + write
    "clock_hz": (1.0e7, 1.0e11),
    "units": (1, 1_000_000),
    "simd_bytes": (0, 1024),
    "cache_bytes": (0.0, 1.0e11),
    "l1_bytes": (0.0, 1.0e9),
    "launch_s": (1.0e-9, 1.0),
    "L_sm": (0.0, 1.0e5),
    "B_sm": (1.0e-3, 1.0e5),
    "n_tc": (0, 1024),
    "measured_at": (0.0, 1.0e11),
}
_DICT_BOUNDS = {  # dict fields: bounds of every value
    "gemm_flops": (1.0e6, 1.0e18),  # flop/s per dtype
    "theta": (1.0e-4, 10.0),  # bandwidth fraction per stride
    "tc_ops": (0.0, 1.0e7),  # ops/cycle/SM per kind
}
_STRINGS = ("name", "source", "kind", "key")
_INTS = ("units", "simd_bytes", "n_tc")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def problems(fields: dict) -> list:
    """What is wrong with a calibration (a stored file's fields or a new measurement), as
    readable strings; [] when every field has its type and lies within its plausible bounds
    (BOUNDS).  Unknown fields are not checked (the profile ignores them)."""
    if not isinstance(fields, dict):
        return [f"expected a JSON object, got {type(fields).__name__}"]
    out = []
    for name, (lo, hi) in BOUNDS.items():
        if name not in fields:
            continue
        v = fields[name]
        if not _number(v) or (name in _INTS and not isinstance(v, int)):
            out.append(f"{name}: expected a finite number, got {v!r}")
        elif not lo <= v <= hi:
            out.append(f"{name}: {v!r} is outside the plausible range [{lo:g}, {hi:g}]")
    for name, (lo, hi) in _DICT_BOUNDS.items():
        if name not in fields:
            continue
        d = fields[name]
        if not isinstance(d, dict):
            out.append(f"{name}: expected an object, got {d!r}")
            continue
        for k, v in d.items():
            if not _number(v):
                out.append(f"{name}[{k!r}]: expected a finite number, got {v!r}")
            elif not lo <= v <= hi:
                out.append(f"{name}[{k!r}]: {v!r} is outside the plausible range [{lo:g}, {hi:g}]")
        if name == "theta" and not all(str(k).isdigit() for k in d):
            out.append(f"theta: keys must be strides (integers), got {sorted(map(str, d))}")
    for name in _STRINGS:
        if name in fields and not isinstance(fields[name], str):
            out.append(f"{name}: expected a string, got {fields[name]!r}")
    cc = fields.get("cc")
    if cc is not None and not (isinstance(cc, (list, tuple)) and len(cc) == 2
                               and all(isinstance(c, int) and not isinstance(c, bool) for c in cc)):
        out.append(f"cc: expected [major, minor] or null, got {cc!r}")
    coef = fields.get("coef")
    if coef is not None:
        if not isinstance(coef, dict) or not all(
                isinstance(terms, dict) and all(_number(v) and v >= 0 for v in terms.values())
                for terms in coef.values()):
            out.append("coef: expected {family: {term: non-negative number}}")
    return out


_lock = threading.Lock()
_WARNED: set = set()  # (file, "read"/"write") warned about: one warning each per process
_MEMORY: dict = {}  # path -> calibration kept in memory because the directory is not writable


def _warn_once(path: Path, text: str, what: str = "read") -> None:
    with _lock:
        if (str(path), what) in _WARNED:
            return
        _WARNED.add((str(path), what))
    warnings.warn(text, RuntimeWarning, stacklevel=4)


def load(device_key: str) -> dict | None:
    """The stored calibration of `device_key`, or None (missing, unreadable, other schema or
    key, or failing validation: then one RuntimeWarning names the file)."""
    path = cache_path(device_key)
    with _lock:
        kept = _MEMORY.get(str(path))
    if kept is not None:
        return dict(kept)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (FileNotFoundError, NotADirectoryError):  # nothing stored (yet)
        return None
    except (OSError, ValueError) as exc:
        _warn_once(path, f"kronlinalg: ignoring the calibration cache file {path} "
                         f"({type(exc).__name__}: {exc}); the planner uses the built-in profile")
        return None
    if isinstance(data, dict) and isinstance(data.get("schema"), int) and data["schema"] != SCHEMA:
        return None  # another version's file: ignored, not misread (no warning)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("key") != device_key:
        _warn_once(path, f"kronlinalg: ignoring the calibration cache file {path} (not a "
                         f"calibration of schema {SCHEMA} for {device_key!r}); the planner uses "
                         "the built-in profile")
        return None
    bad = problems(data)
    if bad:
        _warn_once(path, f"kronlinalg: ignoring the calibration cache file {path}: "
                         f"{'; '.join(bad)}; the planner uses the built-in profile (run "
                         "kronlinalg.calibrate(force=True) to measure again)")
        return None
    return data


def store(device_key: str, fields: dict) -> Path | None:
    """Write the calibration atomically (a reader never sees half a file); returns the path.
    Where the directory cannot be written, the calibration is kept in memory for this process
    (load() returns it), one RuntimeWarning says so, and None is returned."""
    path = cache_path(device_key)
    data = {"schema": SCHEMA, "key": device_key, **fields}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    except OSError as exc:
        with _lock:
            _MEMORY[str(path)] = data
        _warn_once(path, f"kronlinalg: cannot write the calibration cache {path} "
                         f"({type(exc).__name__}: {exc}); the calibration is kept in memory for "
                         "this process only (set KRONLINALG_CACHE_DIR to a writable directory)",
                   "write")
        return None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        with _lock:
            _MEMORY[str(path)] = data
        _warn_once(path, f"kronlinalg: cannot write the calibration cache {path} "
                         f"({type(exc).__name__}: {exc}); the calibration is kept in memory for "
                         "this process only", "write")
        return None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    with _lock:
        _MEMORY.pop(str(path), None)
        _WARNED.discard((str(path), "read"))  # a file written now is new: warn again if it breaks
    return path
