"""Importing the source tree instead of an installed build fails with one line saying what to do.

``python -m kronlinalg`` or ``python -c "import kronlinalg"`` run from the repository root put
the root first on ``sys.path``, so the checkout's ``kronlinalg/`` (which has no compiled
extensions) shadows the installed package and the first extension import would fail deep inside
the package with a confusing circular-import error.  An installed build has ``_ext/_kron_cpu*``
next to this file; an editable install (meson-python) answers through its own import finder, so
``importlib.util.find_spec`` is the test that covers both.
"""

from __future__ import annotations

import importlib.util
import os

__all__ = ["check"]


def check() -> None:
    """Raise ImportError with one line of advice when the compiled extensions are missing."""
    try:
        found = importlib.util.find_spec(f"{__package__}._ext._kron_cpu") is not None
    except ImportError:
        found = False
    if found:
        return
    ext = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext")
    raise ImportError(
        f"kronlinalg: this is the source tree, not an installed build (no compiled extensions "
        f"in {ext}); install it with `python -m pip install .` and run from outside the "
        f"repository root, or use the `kronlinalg` command (e.g. `kronlinalg demo`)")


check()
