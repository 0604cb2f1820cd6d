"""Tuned GEMM choices kept on disk between processes, as PyTorch's TunableOp keeps its results
file: with ``KRONLINALG_GEMM_CACHE=path``, each signature ``_cublaslt.tune`` settles is written
there (the chosen cuBLASLt configuration's 64 bytes, or that cuBLAS's default won) under a scope
naming the device and the cuBLASLt version, and a later process with the same file adopts it on
the signature's first call instead of timing the candidates again.  A configuration is only
kept for the library version that produced it (cuBLASLt's algorithm descriptors are
serialisable for that version alone).  The file is JSON; writes merge with what other processes
wrote since it was read and replace it atomically.
"""

from __future__ import annotations

import json
import os
import tempfile

from ..common import config

_LOADED: dict = {}  # path -> {key: entry}


def path():
    """The cache file, or None (no cache)."""
    return config.get("KRONLINALG_GEMM_CACHE") or None


def _read(file: str) -> dict:
    try:
        with open(file) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    return entries if isinstance(entries, dict) else {}


def _key(scope: str, sig) -> str:
    return scope + "|" + ",".join(str(v) for v in sig)


def get(scope: str, sig):
    """The entry recorded for sig in this scope ({"algo": hex or None, "workspace": bytes}),
    or None."""
    file = path()
    if file is None:
        return None
    if file not in _LOADED:
        _LOADED[file] = _read(file)
    entry = _LOADED[file].get(_key(scope, sig))
    return entry if isinstance(entry, dict) and "algo" in entry else None


def put(scope: str, sig, algo, workspace: int = 0):
    """Record sig's choice: algo the configuration's bytes, None for cuBLAS's default."""
    file = path()
    if file is None:
        return
    entry = {"algo": None if algo is None else bytes(algo).hex(), "workspace": int(workspace)}
    merged = _read(file)  # (what other processes wrote since this one read the file)
    merged[_key(scope, sig)] = entry
    _LOADED[file] = merged
    folder, tmp = os.path.dirname(os.path.abspath(file)), None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".kl-gemm-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"entries": merged}, f, indent=0, sort_keys=True)
        os.replace(tmp, file)
    except OSError:  # (a read-only place: the choice still holds for this process)
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def forget():
    """Drop what was read from the files (the next get reads them again)."""
    _LOADED.clear()
