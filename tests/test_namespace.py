"""kronlinalg.namespace: the caller's namespace with our functions in ``linalg``."""

from __future__ import annotations

import math
import sys
import types

import array_api_compat
import numpy as np
import pytest

import kronlinalg
from _helpers import assert_close, kron_matmul_ref, random, to_numpy


def _module_of(xp):
    """The plain library module a user would pass: numpy, torch, array_api_strict, cupy."""
    return xp.module


def test_namespace_of_numpy_module():
    ns = kronlinalg.namespace(np)
    assert callable(ns.linalg.kron_matmul)


@pytest.mark.parametrize("how", ["module", "array"])
def test_kron_matmul_through_namespace(xp, rng, how):
    x, xn = random(xp, rng, (4, 12), "float64")
    ns = kronlinalg.namespace(_module_of(xp) if how == "module" else x)
    assert isinstance(ns, types.ModuleType)
    fs, fns = zip(*(random(xp, rng, s, "float64") for s in [(3, 2), (4, 5)]))
    out = ns.linalg.kron_matmul(x, list(fs))
    assert_close(out, kron_matmul_ref(xn, fns), xp, "float64")
    out = ns.linalg.kron_matmul(x, list(fs), algorithm="shuffle", alpha=2.0)
    assert_close(out, kron_matmul_ref(xn, fns, "right", 2.0), xp, "float64")
    k = ns.linalg.kron(fs[0], fs[1])
    assert_close(k, np.kron(*fns), xp, "float64")
    kron_module = sys.modules["kronlinalg.kron"]
    assert ns.linalg.kron_matmul is kron_module.kron_matmul
    assert ns.linalg.kron is kron_module.kron


def test_pass_through_names_are_the_base_namespaces(xp, rng):
    x, _ = random(xp, rng, (3, 3), "float32")
    base = array_api_compat.array_namespace(x)
    ns = kronlinalg.namespace(x)
    assert ns.asarray is base.asarray
    assert ns.float32 is base.float32
    assert ns.float64 is base.float64
    assert ns.matmul is kronlinalg.matmul  # routed by the cost model
    assert ns.linalg.matmul is kronlinalg.matmul
    assert ns.__array_api_version__ == base.__array_api_version__
    if hasattr(base, "linalg"):
        assert ns.linalg.vector_norm is base.linalg.vector_norm
    with pytest.raises(AttributeError):
        ns.no_such_function_anywhere  # noqa: B018
    assert {"linalg", "asarray"} <= set(dir(ns))
    assert {"kron_matmul", "kron"} <= set(dir(ns.linalg))
    # the extended namespace is reused, not rebuilt per call
    assert kronlinalg.namespace(x) is ns


def test_namespace_of_module_passes_through(xp, rng):
    mod = _module_of(xp)
    ns = kronlinalg.namespace(mod)
    # a module that is already an array namespace (NumPy 2, array-api-strict) is its own base;
    # others (torch, CuPy) are wrapped by array-api-compat
    bases = [getattr(mod, "asarray", None),
             array_api_compat.array_namespace(random(xp, rng, (2,), "float64")[0]).asarray]
    assert any(ns.asarray is b for b in bases)
    assert str(ns.float32) == str(getattr(mod, "float32"))
    y = ns.asarray([1.0, 2.0], dtype=ns.float64)
    assert array_api_compat.array_namespace(y) is xp.namespace
    if hasattr(ns, "linalg") and hasattr(ns.linalg, "matmul"):
        m = ns.asarray([[1.0, 2.0], [3.0, 4.0]])
        r = ns.linalg.matmul(m, m)
        np.testing.assert_allclose(np.asarray(r.tolist() if hasattr(r, "tolist") else r),
                                   [[7.0, 10.0], [15.0, 22.0]])


def test_kron_matmul_left_through_namespace(xp, rng):
    x, xn = random(xp, rng, (20, 3), "float32")
    ns = kronlinalg.namespace(x)
    fs, fns = zip(*(random(xp, rng, s, "float32") for s in [(3, 4), (2, 5)]))
    out = ns.linalg.kron_matmul(x, list(fs), side="left")
    assert_close(out, kron_matmul_ref(xn, fns, "left"), xp, "float32")


@pytest.mark.parametrize("bad", [3, 2.5, "numpy", None, [1.0, 2.0], (1.0,), math, types],
                         ids=lambda v: getattr(v, "__name__", type(v).__name__))
def test_bad_argument_is_a_type_error(bad):
    with pytest.raises(TypeError, match="^x_or_namespace"):
        kronlinalg.namespace(bad)


def test_argument_is_positional_only():
    with pytest.raises(TypeError):
        kronlinalg.namespace(x_or_namespace=np)


def test_matmul_through_namespace_matches_the_library(xp, rng):
    """namespace(x).matmul and .linalg.matmul: the array API's matmul semantics (1-D operands,
    broadcasting) with the library's values."""
    ns = kronlinalg.namespace(xp.namespace)
    base = xp.namespace
    for sa, sb in [((5, 4), (4, 3)), ((4,), (4, 3)), ((5, 4), (4,)), ((2, 1, 5, 4), (3, 4, 2))]:
        a, _ = random(xp, rng, sa, "float64")
        b, _ = random(xp, rng, sb, "float64")
        want = base.matmul(a, b)
        for fn in (ns.matmul, ns.linalg.matmul):
            got = fn(a, b)
            assert tuple(got.shape) == tuple(want.shape)
            assert_close(got, to_numpy(want).astype(np.float64), xp, "float64")
