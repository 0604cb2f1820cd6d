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

from .calibration import calibrate
from .kami import kami, kami_1d, kami_2d, kami_3d, kami_params
from .msmes import msmes_level, msmes_time
from .ranking import Choice, choose, clear_cache, explain, plan, record
from .profiles import KNOWN_GPUS, DeviceProfile, profile_for
from .registry import Candidate, Problem, candidates, register, register_op
from .roofline import roofline
from .costs import matmul as _matmul_costs  # noqa: F401  (registration)
from .costs.kron import kron_flops

__all__ = ["plan", "explain", "choose", "calibrate", "Candidate", "Choice", "Problem",
           "register", "register_op", "candidates", "DeviceProfile", "KNOWN_GPUS",
           "profile_for", "clear_cache", "record", "kami", "kami_1d", "kami_2d", "kami_3d", "kami_params",
           "msmes_level", "msmes_time", "roofline", "kron_flops"]
