"""The fast path's array signatures: the compiled arrays_signature gives exactly the Python
twin's keys, and keys tell apart what a replay must not confuse."""

import numpy as np
import pytest

from kronlinalg.common import signatures

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

IMPLS = [signatures.arrays_signature_python, signatures.arrays_signature]


def _host_cases(rng):
    a = rng.standard_normal((3, 4))
    return [
        [a, a.T, a[:, ::2]],
        [a.astype(np.float32), np.ones((5,), np.float64)],
        [np.ones((2, 3, 4))[..., 1:]],
    ]


@pytest.mark.parametrize("host", [True, False])
def test_compiled_equals_python(host):
    rng = np.random.default_rng(0)
    for arrays in _host_cases(rng):
        py = signatures.arrays_signature_python(arrays, host)
        assert signatures.arrays_signature(arrays, host) == py
        assert signatures.arrays_signature(tuple(arrays), host) == py
        if host:
            assert py == tuple((np.ndarray, a.shape, a.strides, a.dtype) for a in arrays)
        else:
            assert py is None


@pytest.mark.parametrize("impl", IMPLS)
def test_keys_tell_layouts_apart(impl):
    a = np.arange(12.0).reshape(3, 4)
    keys = {impl([x], True) for x in (a, a.T, a.astype(np.float32), a[:, :2], a.copy(order="F"))}
    assert len(keys) == 5


@pytest.mark.parametrize("impl", IMPLS)
def test_anything_else_takes_the_full_path(impl):
    a = np.ones((2, 2))

    class Sub(np.ndarray):
        pass

    assert impl([], True) is None
    assert impl([a.view(Sub)], True) is None
    assert impl([a, a.view(Sub)], True) is None
    assert impl([a, [1.0, 2.0]], True) is None
    assert impl([1.0], True) is None
    if torch is not None:
        t = torch.ones(2, 2)  # CPU tensors are not replayed by these keys
        assert impl([t], True) is None
        assert impl([a, t], True) is None
