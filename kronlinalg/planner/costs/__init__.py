"""Cost files: one per operation (its normaliser, terms and predictors), with its fitted
coefficients as data beside it (<op>.json)."""

from __future__ import annotations

import json
from pathlib import Path


def load_coefficients(module_file: str) -> dict:
    """The coefficient table stored beside a cost module (``kron.py`` -> ``kron.json``): a dict
    of family -> {term: weight}; keys starting with "_" are notes, not families."""
    path = Path(module_file).with_suffix(".json")
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return {k: v for k, v in data.items() if not k.startswith("_")}
