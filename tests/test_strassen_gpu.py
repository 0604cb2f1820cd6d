"""strassen_matmul's CUDA kernels at the issue's sizes: the m16n8k8 FP64 leaf ("strassen", levels
0-4), Strassen reloaded (sum leaves, 1 level) and strassen_cublas (1 level: the sums
workspace; 2 levels), float64, N in {1001, 2048, 4096, 4097} and 3000x5000 @ 5000x1234, alpha 0.7, beta in {0, -0.3}; the error against an extended-precision
reference on sampled rows, at most 2·3^L times cuBLAS's; inputs bitwise untouched, two calls
bitwise identical."""

from __future__ import annotations

import numpy as np
import pytest

import kronlinalg

cp = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

SHAPES = [(1001, 1001, 1001), (2048, 2048, 2048), (4096, 4096, 4096), (4097, 4097, 4097),
          (3000, 5000, 1234)]
CASES = ([("strassen", L) for L in range(5)] + [("strassen_reloaded", 1)]
         + [("strassen_cublas", L) for L in (1, 2)])
EPS = np.finfo(np.float64).eps


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "x".join(map(str, s)))
def problem(request):
    if cp.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("no CUDA device")
    m, k, n = request.param
    rng = np.random.default_rng(m + 3 * k + 7 * n)
    a64, b64, c64 = (rng.standard_normal(s) for s in ((m, k), (k, n), (m, n)))
    rows = np.sort(rng.choice(m, size=24, replace=False))
    ld = np.longdouble
    exact = a64[rows].astype(ld) @ b64.astype(ld)  # the sampled rows of a @ b
    return {"a": cp.asarray(a64), "b": cp.asarray(b64), "c": cp.asarray(c64), "rows": rows,
            "exact": exact, "c64": c64}


def _err(out, p, alpha, beta):
    ref = p["exact"] * np.longdouble(alpha) + np.longdouble(beta) * p["c64"][p["rows"]]
    got = cp.asnumpy(out[cp.asarray(p["rows"])]).astype(np.longdouble)
    return float(np.abs(got - ref).max()), float(np.abs(ref).max())


@pytest.mark.parametrize("beta", [0.0, -0.3])
def test_kernels_against_reference(problem, beta):
    a, b, c = problem["a"], problem["b"], problem["c"]
    a0, b0 = a.copy(), b.copy()
    base, scale = _err(0.7 * (a @ b) + beta * c, problem, 0.7, beta)
    floor = 32 * EPS * scale
    for algorithm, L in CASES:
        out = kronlinalg.strassen_matmul(a, b, c=c, alpha=0.7, beta=beta, levels=L,
                                         algorithm=algorithm)
        err, _ = _err(out, problem, 0.7, beta)
        bound = 2.0 * 3.0 ** L * max(base, floor)
        assert err <= bound, f"{algorithm} L={L}: error {err:.3g} > {bound:.3g}"
        again = kronlinalg.strassen_matmul(a, b, c=c, alpha=0.7, beta=beta, levels=L,
                                           algorithm=algorithm)
        assert bool(cp.all(again == out)), f"{algorithm} L={L}: not deterministic"
    assert bool(cp.all(a == a0)) and bool(cp.all(b == b0)), "inputs changed"


def test_reloaded_unaligned_views_and_overwrite():
    """Views one element off 16-byte alignment (the kernels' element copies), and overwrite
    mode (reloaded only reads a and b: they come back bitwise)."""
    rng = np.random.default_rng(5)
    big_a, big_b = (cp.asarray(rng.standard_normal(s)) for s in ((515, 771), (771, 259)))
    a, b = big_a[1:, 1:], big_b[1:, 1:]
    ref = cp.asnumpy(a) @ cp.asnumpy(b)
    out = kronlinalg.strassen_matmul(a, b, levels=1, algorithm="strassen_reloaded")
    assert np.abs(cp.asnumpy(out) - ref).max() <= 1e-11 * np.abs(ref).max()
    a2, b2 = a.copy(), b.copy()
    kronlinalg.strassen_matmul(a2, b2, levels=1, algorithm="strassen_reloaded",
                               overwrite_inputs=True)
    assert bool(cp.all(a2 == a)) and bool(cp.all(b2 == b))


@pytest.mark.parametrize("winograd", ["0", "1", "2"])
def test_cublas_one_level_forms(monkeypatch, winograd):
    """strassen_cublas at one and two levels with beta = 0 in both forms (the knob
    KRONLINALG_STRASSEN_WINOGRAD: 1 Winograd's, products straight into C and one combine pass;
    2 the same with the sums pass on a second stream; 0 the sums form): odd, non-square and unaligned operands, alpha 0.7, C poisoned beforehand
    by the pool (it must not be read), inputs untouched, bitwise repeatable."""
    if cp.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("no CUDA device")
    monkeypatch.setenv("KRONLINALG_STRASSEN_WINOGRAD", winograd)
    rng = np.random.default_rng(32)
    for m, k, n in ((1001, 1001, 1001), (300, 500, 122), (258, 130, 262)):
        big_a, big_b = rng.standard_normal((m + 1, k + 1)), rng.standard_normal((k + 1, n + 1))
        dev_a, dev_b = cp.asarray(big_a), cp.asarray(big_b)
        for o in (0, 1):  # o = 1: views one element in (8-byte aligned only)
            a64, b64 = big_a[o:o + m, o:o + k], big_b[o:o + k, o:o + n]
            a, b = dev_a[o:o + m, o:o + k], dev_b[o:o + k, o:o + n]
            a0, b0 = a.copy(), b.copy()
            junk = cp.full((m, n), cp.nan)  # freed: the result may reuse its pool block
            del junk
            rows = np.unique(np.r_[rng.choice(m, size=min(m, 24), replace=False), m - 1])
            ref = 0.7 * (a64[rows].astype(np.longdouble) @ b64.astype(np.longdouble))
            classical = cp.asnumpy(0.7 * (a @ b))[rows].astype(np.longdouble)
            base = max(float(np.abs(classical - ref).max()),
                       32 * EPS * float(np.abs(ref).max()))
            for L in (1, 2):  # two levels: Winograd's form in each (sums form: private copy)
                out = kronlinalg.strassen_matmul(a, b, alpha=0.7, levels=L,
                                                 algorithm="strassen_cublas")
                err = float(np.abs(cp.asnumpy(out)[rows].astype(np.longdouble) - ref).max())
                bound = 2.0 * 3.0 ** L * base
                assert err <= bound, f"{m}x{k}x{n} L={L}: error {err:.3g} > {bound:.3g}"
                again = kronlinalg.strassen_matmul(a, b, alpha=0.7, levels=L,
                                                   algorithm="strassen_cublas")
                assert bool(cp.all(again == out)), "not deterministic"
                assert bool(cp.all(a == a0)) and bool(cp.all(b == b0)), "inputs changed"


@pytest.mark.parametrize("levels", [1, 2])
@pytest.mark.parametrize("beta", [0.0, -0.3])
def test_cublas_torch_on_a_side_stream(beta, levels):
    """strassen_cublas at one and two levels on CUDA torch tensors, float64: with beta = 0
    Winograd's form, its products straight into C (or a scratch block) through CuPy's cuBLAS
    bindings on torch's stream; with beta != 0 the sums form (one level) or the private copy
    (two).  Run on a torch side stream (the bindings must follow it), odd and non-square
    sizes, alpha 0.7; error within 2·3^L x classical's, inputs untouched, bitwise
    repeatable."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(41)
    for m, k, n in ((1001, 1001, 1001), (300, 501, 122)):
        a64, b64, c64 = (rng.standard_normal(s) for s in ((m, k), (k, n), (m, n)))
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            a, b, c = (torch.tensor(v, device="cuda") for v in (a64, b64, c64))
            a0, b0 = a.clone(), b.clone()
            out = kronlinalg.strassen_matmul(a, b, c=c, alpha=0.7, beta=beta, levels=levels,
                                             algorithm="strassen_cublas")
            again = kronlinalg.strassen_matmul(a, b, c=c, alpha=0.7, beta=beta, levels=levels,
                                               algorithm="strassen_cublas")
            classical = 0.7 * (a @ b) + beta * c
        side.synchronize()
        rows = np.unique(np.r_[rng.choice(m, size=24, replace=False), m - 1])
        ref = (0.7 * (a64[rows].astype(np.longdouble) @ b64.astype(np.longdouble))
               + np.longdouble(beta) * c64[rows])
        base = max(float(np.abs(classical.cpu().numpy()[rows] - ref).max()),
                   32 * EPS * float(np.abs(ref).max()))
        err = float(np.abs(out.cpu().numpy()[rows].astype(np.longdouble) - ref).max())
        bound = 2.0 * 3.0 ** levels * base
        assert err <= bound, f"{m}x{k}x{n}: error {err:.3g} > {bound:.3g}"
        assert bool(torch.equal(again, out)), "not deterministic"
        assert bool(torch.equal(a, a0)) and bool(torch.equal(b, b0)), "inputs changed"


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_cublas_winograd_float32_is_ieee(lib):
    """strassen_cublas in float32, one and two levels: Winograd's form (beta = 0, products by
    cuBLAS's GemmEx with 32-bit compute) and with beta the sums form / private copy; odd and
    non-square sizes, alpha 0.7; the error within 2·3^L x that of the library's IEEE float32
    matmul (TF32 products would miss it by ~1000x), inputs untouched, bitwise repeatable."""
    rng = np.random.default_rng(73)
    if lib == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        to_dev = lambda v: torch.tensor(v, dtype=torch.float32, device="cuda")  # noqa: E731
        host = lambda v: v.cpu().numpy()  # noqa: E731
        same = torch.equal
    else:
        to_dev = lambda v: cp.asarray(v, dtype=cp.float32)  # noqa: E731
        host, same = cp.asnumpy, lambda u, v: bool(cp.all(u == v))
    for m, k, n in ((1001, 1001, 1001), (300, 501, 122)):
        a64, b64, c64 = (rng.standard_normal(s).astype(np.float32).astype(np.float64)
                         for s in ((m, k), (k, n), (m, n)))
        a, b, c = to_dev(a64), to_dev(b64), to_dev(c64)
        a0, b0 = host(a).copy(), host(b).copy()
        rows = np.unique(np.r_[rng.choice(m, size=24, replace=False), m - 1])
        for beta in (0.0, -0.3):
            ref = 0.7 * (a64[rows] @ b64) + beta * c64[rows]
            classical = host(0.7 * (a @ b) + beta * c)[rows].astype(np.float64)
            base = max(float(np.abs(classical - ref).max()),
                       32 * np.finfo(np.float32).eps * float(np.abs(ref).max()))
            for L in (1, 2):
                out = kronlinalg.strassen_matmul(a, b, c=c, alpha=0.7, beta=beta, levels=L,
                                                 algorithm="strassen_cublas")
                err = float(np.abs(host(out)[rows].astype(np.float64) - ref).max())
                bound = 2.0 * 3.0 ** L * base
                assert err <= bound, f"{lib} {m}x{k}x{n} beta={beta} L={L}: {err:.3g} > {bound:.3g}"
                again = kronlinalg.strassen_matmul(a, b, c=c, alpha=0.7, beta=beta, levels=L,
                                                   algorithm="strassen_cublas")
                assert same(again, out), "not deterministic"
        assert np.array_equal(host(a), a0) and np.array_equal(host(b), b0), "inputs changed"
