"""Checks on the table of every rank's metadata (distributed.comm.agree): the same table on
every rank, so each check raises the same ValueError on every rank."""

from __future__ import annotations

__all__ = ["dtype_code", "dtype_of_code", "same", "group_text", "count"]

_DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128", "int32",
           "int64")


def dtype_code(name: str) -> int:
    return _DTYPES.index(name) if name in _DTYPES else len(_DTYPES)


def dtype_of_code(code: int) -> str:
    return _DTYPES[code] if code < len(_DTYPES) else "other"


def group_text(table, field, show=str) -> str:
    """'rank(s) [0, 2]: a; rank(s) [1]: b' — the ranks grouped by their value of field."""
    groups = {}
    for r, row in enumerate(table):
        groups.setdefault(row[field], []).append(r)
    return "; ".join(f"ranks {rs}: {show(v)}" for v, rs in sorted(groups.items(), key=lambda kv: kv[1]))


def same(table, field, argument, what, show=str) -> int:
    """The common value of field; a ValueError naming argument when the ranks differ."""
    values = {row[field] for row in table}
    if len(values) != 1:
        raise ValueError(f"{argument}: {what} differ between ranks ({group_text(table, field, show)})")
    return table[0][field]


def count(value, argument: str) -> int:
    """value as a count (an int, not a bool); a TypeError naming argument otherwise (this
    rank's own argument: checked before the agreement, so the ranks then compare it)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument}: expected an int, got {type(value).__name__}")
    return value
