"""Per-device calibration cache: one JSON file per device in the user's cache directory.

Location: $KRONLINALG_CACHE_DIR if set, else $XDG_CACHE_HOME/kronlinalg, else
~/.cache/kronlinalg (the platformdirs convention on Linux, without the dependency).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from ..common import config

__all__ = ["cache_dir", "cache_path", "load", "store", "SCHEMA"]

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


def load(device_key: str) -> dict | None:
    """The stored calibration of `device_key`, or None (missing, unreadable, other schema)."""
    try:
        with open(cache_path(device_key), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("key") != device_key:
        return None
    return data


def store(device_key: str, fields: dict) -> Path:
    """Write the calibration atomically (a reader never sees half a file); returns the path."""
    path = cache_path(device_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"schema": SCHEMA, "key": device_key, **fields}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
