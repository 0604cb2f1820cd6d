"""plan(), explain() and choose(): rank the registered candidates by predicted time.

Plans are cached by (op, shapes, dtype, device, options): the operations call choose() on every
call, so a repeated shape must cost a dictionary lookup, not a model evaluation.
"""

from __future__ import annotations

import sys
import threading
from typing import NamedTuple

import numpy as np

from ..common import signatures as _signatures
from ..common.dtypes import FLOAT as _FLOAT_DTYPES
from . import profiles as _profiles, registry as _registry

__all__ = ["Choice", "plan", "explain", "choose", "clear_cache", "record"]

_MAX_ENTRIES = 4096  # shapes seen by one process; beyond this the cache starts again
_PLANS: dict = {}
_LOCK = threading.Lock()  # writers and eviction (threads, free-threaded CPython)


class Choice(NamedTuple):
    name: str  # the candidate
    seconds: float  # predicted time
    details: dict  # the predictor's terms (passes, bytes, flops, ...)


def clear_cache() -> None:
    """Forget every cached plan and every operation's per-signature choice."""
    _signatures.changed()


def _drop_plans() -> None:
    global _PLANS
    with _LOCK:
        _PLANS = {}


_signatures.on_change(_drop_plans)
_registry._listeners.append(clear_cache)


def _dtype_name(dtype) -> str:
    if isinstance(dtype, str):
        return dtype
    name = getattr(dtype, "name", None)  # numpy / CuPy dtypes and the scalar types
    if isinstance(name, str):
        return name
    if isinstance(dtype, type):
        return dtype.__name__
    return str(dtype).rsplit(".", 1)[-1]  # torch.float32, array-api-strict dtypes


def _key(op, shapes, dtype, device, algorithm, options):
    key = (op, shapes, dtype, device, algorithm, tuple(sorted(options.items())))
    try:
        hash(key)
        return key
    except TypeError:  # a shape given as a list: cache under its tuple form
        return (op, tuple(tuple(s) for s in shapes), dtype, device, algorithm,
                tuple(sorted((k, repr(v)) for k, v in options.items())))


_DEVICES: dict = {}  # device strings already resolved (not 'cuda', which follows the current GPU)


def _device(device) -> str:
    if type(device) is str:
        dev = _DEVICES.get(device)
        if dev is None:
            dev = _profiles.resolve_device(device)
            if device.strip().lower() not in ("cuda", "gpu"):
                _DEVICES[device] = dev
        return dev
    if type(device) is np.ndarray:
        return "cpu"
    return _profiles.resolve_device(device)


def plan(op, *shapes, dtype="float64", device="cpu", algorithm=None, **options):
    """Ranked candidates for `op` on operands of these shapes: a list of Choice, fastest first.

    op: 'kron_matmul' (shapes: x, then each factor) or 'matmul' (shapes: a, b).
    dtype: the compute dtype; device: 'cpu', 'cuda', 'cuda:N', an array, or a profile name
    such as 'h100-sxm' (to plan for a GPU that is not present).  algorithm= forces one
    candidate (the list then holds only it); other keywords are the operation's options.
    """
    dtype = _dtype_name(dtype)
    device = _device(device)
    key = _key(op, shapes, dtype, device, algorithm, options)
    hit = _PLANS.get(key)
    if hit is None:
        hit = _plan_uncached(op, key[1], dtype, device, algorithm, options)
        _store(key, hit)
    return list(hit)


def choose(op, *shapes, dtype="float64", device="cpu", **options) -> str:
    """Name of the fastest predicted candidate (what algorithm='auto' runs)."""
    return plan(op, *shapes, dtype=dtype, device=device, **options)[0].name


def record(op, *shapes, times, dtype="float64", device="cpu", **options) -> list:
    """Make measured times the plan for these shapes in this process: `times` maps candidate
    names to seconds (e.g. each candidate timed on the caller's arrays, as
    ``structured.tune`` does).  plan(), choose() and so algorithm='auto' then rank by them
    (their details say ``measured``) until clear_cache().  Returns the new plan."""
    if not times:
        raise ValueError("times: no candidate was measured")
    dtype = _dtype_name(dtype)
    device = _device(device)
    key = _key(op, shapes, dtype, device, None, options)
    known = {c.name for c in _registry.candidates(op)}
    unknown = sorted(set(times) - known)
    if unknown:
        raise ValueError(f"times: {unknown} are not candidates of {op} ({sorted(known)})")
    ranked = tuple(sorted((Choice(name, float(sec), {"measured": True})
                           for name, sec in times.items()), key=lambda ch: ch.seconds))
    _signatures.changed()  # the operations' fast paths hold the earlier choice
    _store(key, ranked)
    return list(ranked)


def _store(key, ranked) -> None:
    global _PLANS
    with _LOCK:
        if len(_PLANS) >= _MAX_ENTRIES:
            _PLANS = {}
        _PLANS[key] = ranked


def _plan_uncached(op, shapes, dtype, device, algorithm, options):
    shapes = tuple(tuple(int(n) for n in s) for s in shapes)
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(_FLOAT_DTYPES)} (the dtypes kronlinalg "
                         f"computes in), got {dtype!r}")
    _registry.check_options(op, options)
    info = _registry.normalise(op, shapes, options)
    profile = _profiles.profile_for(device)
    problem = _registry.Problem(op, shapes, dtype, device, profile.kind, dict(options), info)
    info.update(_registry.facts(problem))
    cands = [c for c in _registry.candidates(op, profile.kind) if c.applies(problem)]
    if algorithm is not None:
        names = sorted({c.name for c in cands})
        cands = [c for c in cands if c.name == algorithm]
        if not cands:
            raise ValueError(f"algorithm: {algorithm!r} does not run {op} on {device} for these "
                             f"shapes; candidates here: {names}")
    if not cands:
        raise ValueError(f"device: no candidate for {op} runs on {device!r}")
    out = []
    for c in cands:
        res = c.predict(problem, profile)
        seconds, details = res if isinstance(res, tuple) else (res, {})
        details = {"family": c.family or f"{c.name}/{profile.kind}", **details}
        if algorithm is not None:
            details["forced"] = True
        out.append(Choice(c.name, float(seconds), details))
    out.sort(key=lambda ch: ch.seconds)
    return tuple(out)


def _fmt_time(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def _fmt_details(d: dict) -> str:
    parts = []
    for k, v in d.items():
        if k in ("family", "forced", "terms"):
            continue
        parts.append(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}")
    # the model's terms, largest first: what the time is made of
    terms = sorted(d.get("terms", {}).items(), key=lambda kv: -kv[1])
    parts += [f"{k} {_fmt_time(v)}" for k, v in terms]
    return ", ".join(parts)


def explain(op, *shapes, dtype="float64", device="cpu", algorithm=None, file="stdout",
            **options):
    """Print the table of plan()'s ranking (to sys.stdout, or to the open text `file`); with
    file=None return it as a string instead."""
    choices = plan(op, *shapes, dtype=dtype, device=device, algorithm=algorithm, **options)
    dev = _device(device)
    prof = _profiles.profile_for(dev)
    shape_txt = " ".join("x".join(map(str, s)) or "()" for s in shapes)
    head = (f"{op} {shape_txt} {_dtype_name(dtype)} on {dev} ({prof.name}, profile: "
            f"{prof.source})")
    best = choices[0].seconds
    rows = [("", "candidate", "predicted", "vs best", "model terms")]
    for i, ch in enumerate(choices):
        rows.append(("*" if i == 0 else "", ch.name, _fmt_time(ch.seconds),
                     f"{ch.seconds / best:.2f}x" if best > 0 else "-", _fmt_details(ch.details)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [head] + ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4]
                      for r in rows]
    text = "\n".join(line.rstrip() for line in lines)
    if file is None:
        return text
    print(text, file=sys.stdout if file == "stdout" else file)
    return None
