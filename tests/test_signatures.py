"""The fast path's array signatures: keys that tell apart what a replay must not confuse, and
None (the full path) for anything else."""

import math

import numpy as np
import pytest

from kronlinalg.common.signatures import arrays_signature

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def test_host_keys():
    a = np.random.default_rng(0).standard_normal((3, 4))
    for arrays in ([a, a.T, a[:, ::2]], [a.astype(np.float32), np.ones((5,))],
                   [np.ones((2, 3, 4))[..., 1:]]):
        want = tuple((np.ndarray, x.shape, x.strides, x.dtype) for x in arrays)
        assert arrays_signature(arrays, True) == want
        assert arrays_signature(tuple(arrays), True) == want
        assert arrays_signature(arrays, False) is None  # host arrays: only where asked


def test_keys_tell_layouts_apart():
    a = np.arange(12.0).reshape(3, 4)
    keys = {arrays_signature([x], True)
            for x in (a, a.T, a.astype(np.float32), a[:, :2], a.copy(order="F"))}
    assert len(keys) == 5


def test_anything_else_takes_the_full_path():
    a = np.ones((2, 2))

    class Sub(np.ndarray):
        pass

    assert arrays_signature([], True) is None
    assert arrays_signature([a.view(Sub)], True) is None
    assert arrays_signature([a, a.view(Sub)], True) is None
    assert arrays_signature([a, [1.0, 2.0]], True) is None
    assert arrays_signature([1.0], True) is None
    if torch is not None:
        t = torch.ones(2, 2)  # CPU tensors are not replayed by these keys
        assert arrays_signature([t], True) is None
        assert arrays_signature([a, t], True) is None


@pytest.mark.gpu
def test_cuda_keys():
    cupy = pytest.importorskip("cupy")
    x = cupy.ones((3, 4), dtype=cupy.float32)
    assert arrays_signature([x, x.T], False) == tuple(
        (cupy.ndarray, v.shape, v.strides, v.dtype, v.data.device_id) for v in (x, x.T))
    assert arrays_signature([x, np.ones(2)], False) is None


@pytest.mark.gpu
def test_replayed_signature_then_torch_func():
    """A signature cached outside a transform, then the same per-example shapes under
    torch.func.vmap / grad on CUDA: the full path (a replay would read the wrappers' pointers)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA torch")
    import kronlinalg

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(5, 16, device="cuda", dtype=torch.float64, generator=g)
    fs = [torch.randn(4, 4, device="cuda", dtype=torch.float64, generator=g) for _ in range(2)]
    kron = torch.kron(fs[0], fs[1])
    for _ in range(2):  # the second call replays
        kronlinalg.kron_matmul(x[0], fs)
    got = torch.func.vmap(lambda r: kronlinalg.kron_matmul(r, fs))(x)
    torch.testing.assert_close(got, x @ kron, rtol=1e-12, atol=1e-12)
    grad = torch.func.grad(lambda r: kronlinalg.kron_matmul(r, fs).sum())(x[0])
    torch.testing.assert_close(grad, kron.sum(dim=1), rtol=1e-12, atol=1e-12)


def _odd_size1_strides(torch, t):
    """t's values in a contiguous tensor whose size-1 dimensions have unusual strides."""
    strides = [s if n != 1 else 7 + i for i, (n, s) in enumerate(zip(t.shape, t.stride()))]
    return torch.as_strided(t.clone(), t.shape, strides)


@pytest.mark.skipif(torch is None, reason="torch keys")
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_torch_keys_name_contiguity_not_strides(device):
    """A contiguous torch tensor's key says "contiguous" (True) instead of its strides: tensors
    that differ only in the strides of size-1 dimensions share it — and a replay remembered for
    one gives the right answer for the other — while every other layout keeps its own key."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA torch")
    import kronlinalg

    g = torch.Generator(device=device).manual_seed(3)
    a = torch.randn(3, 4, device=device, dtype=torch.float64, generator=g)
    cuda = device == "cuda"
    keys = {arrays_signature([v], False, True)
            for v in (a, a.T, a[:, :2], a.float(), a.T.contiguous())}
    assert len(keys) == 5 and None not in keys
    assert arrays_signature([a], False, True)[0][2] is True
    assert arrays_signature([a.T], False, True)[0][2] == (1, 4)
    x = torch.randn(1, 1, 12, device=device, dtype=torch.float64, generator=g)[0]
    fs = [torch.randn(3, 2, device=device, dtype=torch.float64, generator=g),
          torch.randn(4, 3, device=device, dtype=torch.float64, generator=g)]
    odd = _odd_size1_strides(torch, x)
    assert odd.is_contiguous() and odd.stride() != x.stride()
    assert arrays_signature([x] + fs, False, True) == arrays_signature([odd] + fs, False, True)
    dense = torch.kron(fs[0], fs[1])
    for _ in range(2):  # remembered, then replayed
        kronlinalg.kron_matmul(x, fs)
    for v in (odd, x):  # the replay of x's signature on odd's layout, and back
        torch.testing.assert_close(kronlinalg.kron_matmul(v, fs), v @ dense,
                                   rtol=1e-12, atol=1e-12)
    assert not cuda or arrays_signature([x], False)[0][4] == x.get_device()


def test_compiled_front_replays_only_what_the_full_path_would():
    """kron_matmul's compiled front (ScaledFront): after one call remembered the signature,
    repeated calls with every kind of scalar and option give the full path's answer — or its
    error — never a replay of something else."""
    import kronlinalg

    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 12))
    fs = [rng.standard_normal((3, 2)), rng.standard_normal((4, 3))]
    dense = np.kron(fs[0], fs[1])
    y = rng.standard_normal((5, 6))
    kronlinalg.kron_matmul(x, fs)  # remembered
    for alpha in (1.0, 2, np.float64(0.25), -3.5):
        out = kronlinalg.kron_matmul(x, fs, alpha=alpha)
        np.testing.assert_allclose(out, float(alpha) * (x @ dense), rtol=1e-13, atol=1e-13)
    for beta in (0, 0.0, np.float32(0.0)):
        np.testing.assert_allclose(kronlinalg.kron_matmul(x, fs, beta=beta), x @ dense,
                                   rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(kronlinalg.kron_matmul(x, tuple(fs), alpha=0.5, beta=-1.0, y=y),
                               0.5 * (x @ dense) - y, rtol=1e-13, atol=1e-13)
    x2 = rng.standard_normal((5, 12))  # new values, same signature: the replay reads them
    np.testing.assert_allclose(kronlinalg.kron_matmul(x2, fs), x2 @ dense, rtol=1e-13, atol=1e-13)
    with pytest.raises((TypeError, ValueError)):
        kronlinalg.kron_matmul(x, fs, alpha="2")
    with pytest.raises((TypeError, ValueError)):
        kronlinalg.kron_matmul(x, fs, side=["right"])
    with pytest.raises(ValueError, match="algorithm"):
        kronlinalg.kron_matmul(x, fs, algorithm="nope")


@pytest.mark.skipif(torch is None, reason="torch-only: the replays' result templates")
@pytest.mark.parametrize("shape", [(8, 512), (1, 625), (3, 1, 7), (5,), (1, 1), (1,), (), (0, 5),
                                   (2, 0), (64, 256), (4097,)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_replay_template_allocates_contiguous_results(shape, dtype):
    """torch replays allocate results as torch.empty_like(template): the result must be a fresh
    contiguous tensor of the shape, with like's dtype and device, while the template itself holds
    at most REAL_TEMPLATE_BYTES, or one element, of storage (a replay keeps nothing large
    alive)."""
    from kronlinalg.common.backend import REAL_TEMPLATE_BYTES, replay_template

    like = torch.ones((3, 4), dtype=getattr(torch, dtype))
    template = replay_template(like, shape)
    nbytes = math.prod(shape) * like.element_size()
    held = template.untyped_storage().nbytes()
    assert held == (nbytes if nbytes <= REAL_TEMPLATE_BYTES else like.element_size())
    outs = [torch.empty_like(template) for _ in range(2)]
    for out in outs:
        assert tuple(out.shape) == shape and out.dtype == like.dtype
        assert out.device == like.device and not out.requires_grad
        assert out.is_contiguous()
        assert out.stride() == torch.empty(shape).stride()
    if outs[0].numel():
        assert outs[0].data_ptr() != outs[1].data_ptr() != template.data_ptr()
        outs[0].fill_(1.0)
        outs[1].fill_(2.0)
        assert bool((outs[0] == 1).all()) and bool((outs[1] == 2).all())


@pytest.mark.skipif(torch is None, reason="torch-only: replay allocators")
@pytest.mark.parametrize("shape", [(7, 3, 5), (8, 512), (64, 256, 2)])
def test_replay_empty_makes_fresh_results_like_its_array(shape):
    """backend.replay_empty (batched_matmul's CUDA replay): each call a fresh contiguous tensor of
    the shape with a's dtype and device."""
    from kronlinalg.common.backend import replay_empty

    a = torch.ones((2, 3), dtype=torch.float64)
    empty = replay_empty(a, "float64", shape)
    outs = [empty() for _ in range(2)]
    for out in outs:
        assert tuple(out.shape) == shape and out.dtype == a.dtype and out.device == a.device
        assert out.is_contiguous() and not out.requires_grad
    assert outs[0].data_ptr() != outs[1].data_ptr()


def test_is_c_contiguous_is_the_libraries_own_flag():
    """backend.is_c_contiguous, the check before a kernel reads a row-major buffer: NumPy's flag,
    torch's is_contiguous (length-1 axes' strides do not count), never a view's gaps."""
    from kronlinalg.common.backend import is_c_contiguous

    a = np.arange(24.0).reshape(2, 3, 4)
    for x, want in ((a, True), (a[:, :, ::2], False), (a.transpose(0, 2, 1), False),
                    (a[:1], True), (np.ones((3, 1))[:, :1], True), (a[:, 1:2, :], False),
                    (a[:, :, 1:], False)):
        assert is_c_contiguous(x) is want
    if torch is not None:
        t = torch.arange(24.0).reshape(2, 3, 4)
        for x, want in ((t, True), (t[:, :, ::2], False), (t.transpose(1, 2), False),
                        (t[:1], True), (t[:, 1:2, :], False), (t[:, :, 1:], False)):
            assert is_c_contiguous(x) is want


def test_numpy_pair_memo_replays_only_the_same_layout():
    """matmul's and batched_matmul's compiled fronts remember the last NumPy pair they replayed
    by the arrays' C fields (dimensions, strides, dtype object): every change of layout or dtype
    — a transposed view of the same shape, another byte order, a cleared cache, more dimensions
    than the memo holds — must still give the right answer, never the remembered pair's replay."""
    import kronlinalg
    from kronlinalg.common.signatures import changed

    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
    for _ in range(3):  # remembered, replayed, replayed from the memo
        np.testing.assert_allclose(kronlinalg.matmul(a, b), a @ b, rtol=1e-13, atol=1e-13)
    variants = [
        (a.T, b),  # same shape, other strides
        (a, b.T),
        (a.astype(np.float32), b.astype(np.float32)),
        (a.astype(">f8"), b),  # equal shape, another dtype object
        (np.asfortranarray(a), b),
        (a[:, :5], b[:5]),
        (rng.standard_normal((6, 6)), b),  # new values, same layout: the memo's replay
    ]
    for x, y in variants:
        for _ in range(3):
            want = np.asarray(x, dtype=np.float64) @ np.asarray(y, dtype=np.float64)
            got = kronlinalg.matmul(x, y)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            assert got.dtype == np.matmul(x, y).dtype
        np.testing.assert_allclose(kronlinalg.matmul(a, b), a @ b, rtol=1e-13, atol=1e-13)
    changed()  # a cleared cache: the memo is no longer trusted
    np.testing.assert_allclose(kronlinalg.matmul(a, b), a @ b, rtol=1e-13, atol=1e-13)
    deep = rng.standard_normal((1,) * 8 + (3, 4))  # ten dimensions: beyond the memo
    other = rng.standard_normal((4, 2))
    for _ in range(3):
        np.testing.assert_allclose(kronlinalg.matmul(deep, other), deep @ other, rtol=1e-13,
                                   atol=1e-13)
    s, t = rng.standard_normal((9, 5, 7)), rng.standard_normal((9, 7, 3))
    for alpha in (1.0, 2.0, -0.5, 3):
        for _ in range(2):
            np.testing.assert_allclose(kronlinalg.batched_matmul(s, t, alpha=alpha),
                                       alpha * (s @ t), rtol=1e-12, atol=1e-12)
    # same shapes, other strides: the blocked kernel's replay reads the strides it was made for
    s2 = rng.standard_normal((9, 7, 5)).transpose(0, 2, 1)
    t2 = np.asfortranarray(rng.standard_normal((9, 7, 3)))
    s32, t32 = s.astype(np.float32), t.astype(np.float32)  # same layout in elements, not bytes
    sbe, tbe = s.astype(">f8"), t.astype(">f8")  # same byte strides, another dtype object
    for algorithm in ("blocked", "library", "auto"):
        for x, y in ((s, t), (s, t), (sbe, tbe), (sbe, tbe), (s, t), (s2, t), (s2, t), (s, t2),
                     (s, t2), (s32, t32), (s32, t32), (s, t)):
            tol = 1e-5 if x.dtype == np.float32 else 1e-12
            want = x.astype(np.float64) @ y.astype(np.float64)
            got = kronlinalg.batched_matmul(x, y, algorithm=algorithm)
            assert got.dtype == np.float32 if x.dtype == np.float32 else got.dtype == np.float64
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
            np.testing.assert_allclose(kronlinalg.matmul(x, y), want, rtol=tol, atol=tol)


def _kron_ref(x, fs):
    k = np.ones((1, 1))
    for f in fs:
        k = np.kron(k, np.asarray(f, dtype=np.float64))
    return np.asarray(x, dtype=np.float64) @ k


def _call_memo_cases(xp, device):
    """(description, x, factors) after a remembered (x0, f0) call: each differs from it in one
    thing the memo of the last replayed call must notice."""
    rng = np.random.default_rng(11)

    def arr(shape, dtype="float64"):
        a = rng.standard_normal(shape).astype(dtype)
        return a if xp is None else xp(a, device)

    x0 = arr((3, 12))
    f0 = [arr((3, 3)), arr((4, 4))]
    yield "same", x0, f0
    yield "new values, same layout", arr((3, 12)), [arr((3, 3)), arr((4, 4))]
    yield "transposed factor (strides)", x0, [f0[0], arr((4, 4)).T]
    yield "float32 x (dtype)", arr((3, 12), "float32"), f0
    yield "one more row (shape)", arr((4, 12)), f0
    yield "factor shapes swapped", x0, [f0[1][:3, :3], arr((4, 4))]
    yield "one factor fewer", arr((3, 4)), [f0[1]]
    yield "one more factor, same x", x0, f0 + [arr((1, 1)) * 0 + 2]
    yield "strided x", arr((3, 24))[:, ::2], f0
    yield "same again", x0, f0


@pytest.mark.parametrize("lib", ["numpy", pytest.param("torch", marks=pytest.mark.skipif(
    torch is None, reason="torch")), pytest.param("cupy", marks=pytest.mark.gpu),
    pytest.param("torch-cuda", marks=pytest.mark.gpu)])
def test_last_call_memo_replays_only_the_same_call(lib):
    """kron_matmul's compiled front remembers the last call it replayed and compares the next
    call's arrays field by field instead of building their key: every change of shape, strides,
    dtype or factor count between calls is a different call (the right answer, never the old
    replay's), and a call after the cache is cleared or with autograd takes the full path."""
    import kronlinalg
    from kronlinalg.common import signatures

    if lib == "numpy":
        xp, device = None, None
    elif lib == "cupy":
        cupy = pytest.importorskip("cupy")
        xp, device = (lambda a, d: cupy.asarray(a)), None
    else:
        device = "cuda" if lib == "torch-cuda" else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            pytest.skip("no CUDA torch")
        xp = lambda a, d: torch.from_numpy(np.ascontiguousarray(a)).to(d)  # noqa: E731

    def host(a):
        if hasattr(a, "detach"):
            return a.detach().cpu().numpy()
        return a.get() if hasattr(a, "get") else a

    cases = list(_call_memo_cases(xp, device))
    _, x0, f0 = cases[0]
    for _ in range(3):  # the second call replays from the key, the third from the memo
        kronlinalg.kron_matmul(x0, f0)
    for name, x, fs in cases:
        for _ in range(2):
            got = host(kronlinalg.kron_matmul(x, fs))
            want = _kron_ref(host(x), [host(f) for f in fs])
            tol = 1e-5 if got.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
        for _ in range(2):  # back to the remembered call, then on from it
            got = host(kronlinalg.kron_matmul(x0, f0))
            np.testing.assert_allclose(got, _kron_ref(host(x0), [host(f) for f in f0]),
                                       rtol=1e-12, atol=1e-12, err_msg=name)
    kronlinalg.kron_matmul(x0, f0, side="right")
    # the other side on a square product: the memo's side is part of the call
    xs = x0.T
    got = host(kronlinalg.kron_matmul(xs, f0, side="left"))
    k = _kron_ref(np.eye(12), [host(f) for f in f0])
    np.testing.assert_allclose(got, k @ host(xs), rtol=1e-12, atol=1e-12)
    signatures.changed()  # a cleared cache: the memo is not read again
    np.testing.assert_allclose(host(kronlinalg.kron_matmul(x0, f0)),
                               _kron_ref(host(x0), [host(f) for f in f0]), rtol=1e-12, atol=1e-12)
    if lib.startswith("torch"):
        f = f0[0].clone().requires_grad_(True)
        out = kronlinalg.kron_matmul(x0, [f, f0[1]])
        assert out.grad_fn is not None  # autograd: never the remembered replay
        fd = f0[1].clone()
        for _ in range(3):
            kronlinalg.kron_matmul(x0, [f0[0], fd])
        fd.data = torch.zeros_like(fd)  # new storage, no version bump: the pointer is read again
        np.testing.assert_allclose(host(kronlinalg.kron_matmul(x0, [f0[0], fd])), 0.0)
