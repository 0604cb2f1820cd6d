"""The cost model: which algorithm runs a given operation fastest on a given device.

    >>> import kronlinalg
    >>> best = kronlinalg.plan("kron_matmul", (1024, 4096), (8, 8), (8, 8), (8, 8), (8, 8),
    ...                        dtype="float32")[0]
    >>> best.name
    'sliced'
    >>> kronlinalg.explain("kron_matmul", (64, 256), (16, 16), (16, 16))  # doctest: +SKIP

Candidates are data (`Candidate`, `register`); predictions combine KAMI's cycle formulas
(`_kami`), roofline terms (`_roofline`), MSMES's Strassen model (`_msmes`) and a device profile
(`_profiles`, refined by `calibrate()` and cached per device).
"""

from . import _kron, _matmul  # noqa: F401  (registers the operations' candidates)
from ._kron import kron_flops
from ._calibrate import calibrate
from ._kami import kami, kami_1d, kami_2d, kami_3d, kami_params
from ._msmes import msmes_level, msmes_time
from ._plan import Choice, choose, clear_cache, explain, plan, record
from ._profiles import KNOWN_GPUS, DeviceProfile, profile_for
from ._registry import Candidate, Problem, candidates, register, register_op
from ._roofline import roofline

__all__ = ["plan", "explain", "choose", "calibrate", "Candidate", "Choice", "Problem",
           "register", "register_op", "candidates", "DeviceProfile", "KNOWN_GPUS",
           "profile_for", "clear_cache", "record", "kami", "kami_1d", "kami_2d", "kami_3d", "kami_params",
           "msmes_level", "msmes_time", "roofline", "kron_flops"]
