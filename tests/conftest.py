"""Backends as a fixture: every test that takes `xp` runs once per array library present.

CPU backends (NumPy, array-api-strict, torch) skip with a reason when not importable; GPU
backends (CuPy, torch CUDA) carry the `gpu` marker and skip when no CUDA device is visible, so
`pytest -m gpu` selects exactly the GPU runs and `pytest -m "not gpu"` the CPU ones.
"""

from __future__ import annotations

import os
import sys

import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_TESTS)

# `python -m pytest` from the repository root puts the root first on sys.path, where kronlinalg/
# is the source tree without its compiled extensions.  Test the installed package instead (a
# regular install, or an editable one, whose import hook does not go through sys.path).
if "kronlinalg" not in sys.modules:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT]
sys.path.insert(0, _TESTS)

from _helpers import CPU_BACKENDS, GPU_BACKENDS, make_backend  # noqa: E402

try:
    from hypothesis import HealthCheck, settings

    # bounded property tests: the whole suite must stay within minutes on two cores
    settings.register_profile(
        "kronlinalg",
        deadline=None,
        max_examples=40,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        print_blob=True,
    )
    # deeper local runs: HYPOTHESIS_PROFILE=slow python -m pytest tests/test_properties.py
    settings.register_profile(
        "slow",
        deadline=None,
        max_examples=2000,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        print_blob=True,
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "kronlinalg"))
except ImportError:  # hypothesis is a test dependency; tests that need it importorskip
    pass


_PARAMS = [pytest.param(name, id=name) for name in CPU_BACKENDS] + [
    pytest.param(name, id=name, marks=pytest.mark.gpu) for name in GPU_BACKENDS
]


@pytest.fixture(params=_PARAMS, scope="session")
def xp(request):
    """The backend under test (a `_helpers.Backend`): library, array namespace and device."""
    return make_backend(request.param)


@pytest.fixture
def rng(request):
    """A fresh generator per test; its seed is reported when the test fails.

    Set KRONLINALG_TEST_SEED to rerun with a reported seed.
    """
    import numpy as np

    fixed = os.environ.get("KRONLINALG_TEST_SEED")
    seed = int(fixed) if fixed else int(np.random.SeedSequence().entropy % (2**32))
    request.node.user_properties.append(("seed", seed))
    request.node._kronlinalg_seed = seed
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item, "_kronlinalg_seed", None)
    if seed is not None and report.failed:
        text = f"numpy default_rng seed {seed}: rerun with KRONLINALG_TEST_SEED={seed}"
        report.sections.append(("random seed", text))


def pytest_collection_modifyitems(config, items):
    # KRONLINALG_TEST_SHARD=i/n keeps every n-th test from the i-th (0-based): n processes run a
    # long file at once on one device (benchmarks/gpu_tests.sh's TESTS_SHARDS)
    shard = os.environ.get("KRONLINALG_TEST_SHARD")
    if shard:
        i, n = (int(v) for v in shard.split("/"))
        items[:] = items[i::n]
    # A test that asks for a GPU backend through `xp` carries the gpu marker already (param
    # marks); tests marked gpu by hand also skip cleanly when there is no device.
    from _helpers import _gpu_count_cupy, _torch_cuda

    if _gpu_count_cupy() > 0 or _torch_cuda():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
