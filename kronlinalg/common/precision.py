"""The float32 mode of a CUDA kernel family ("tf32x3" or "ieee"), process-wide, as
``kron.float32_precision`` and ``structured.float32_precision`` expose it."""

from __future__ import annotations

from . import config, signatures

MODES = ("tf32x3", "ieee")  # the C entry points' order (kl_*_float32_mode)


class Float32Precision:
    """The mode of one extension (``ext.float32_mode``; None without CUDA, then the mode is
    only remembered), its default "ieee" when the environment variable `env` is "ffma"."""

    def __init__(self, ext, env):
        self._ext = ext
        self._host = "ieee" if config.get(env) == "ffma" else "tf32x3"

    def __call__(self, precision=None) -> str:
        prev = MODES[self._ext.float32_mode()] if self._ext is not None else self._host
        if precision is None:
            return prev
        if precision not in MODES:
            raise ValueError(f"precision: expected one of {MODES}, got {precision!r}")
        if self._ext is not None:
            self._ext.float32_mode(MODES.index(precision))
        self._host = precision
        if precision != prev:  # the planner's cached choices follow the mode
            signatures.changed()
        return prev
