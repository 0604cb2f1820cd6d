"""KSPacked: a chain packed for repeated products, against the float64 references of
test_structured, on every backend.

What it must keep: the values as they were when packed (a snapshot), the forms each algorithm
derives from them made once and reused, the same results as the unpacked chain through every
algorithm and through the per-signature fast path, and a planner that prices the algorithms
without their per-call weight work.
"""

from __future__ import annotations

import numpy as np
from kronlinalg.planner.costs import structured as costs
import pytest

import kronlinalg
from kronlinalg.vendor import cublaslt

from kronlinalg import structured
from kronlinalg.structured import KSChain, KSFactor, KSPacked, structured_matmul
from _helpers import assert_close, random
from test_structured import (CHAINS, LAYOUTS, chain_dense_ref, kernel_dtype, make_chain,
                             reference, rtol_for, x_for)


def _cublas_runs(xp) -> bool:
    from kronlinalg.vendor import cublas

    return xp.is_cuda and cublas.available()


def _algorithms(xp):
    return ("auto", "kernel", "bmm", "dense") + (("strided", "block_dense") if _cublas_runs(xp)
                                                 else ())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_packed_matches_the_reference_through_every_algorithm(xp, rng, layout):
    """Single factors with a, d > 1 and odd sizes, and chains, in every dtype the algorithm
    computes; three calls each with fresh x (the second and third take the fast path and the
    kept forms), and the unpacked chain of the same signature in between."""
    cases = [[(3, 4, 6, 5)], [(2, 7, 3, 4)], [(3, 9, 5, 1)], [(1, 6, 9, 24)],
             list(CHAINS["monarch_wide"]()), list(CHAINS["vit_s16_qkv"]())]
    for algorithm in _algorithms(xp):
        dtypes = xp.dtypes if algorithm in ("strided", "block_dense") else (kernel_dtype(xp),)
        for dtype in dtypes:
            for pats in cases:
                chain = make_chain(xp, rng, pats, dtype)
                packed = KSPacked(chain)
                for call in range(3):
                    x, x64 = x_for(xp, rng, chain, layout, int(rng.integers(1, 40)), dtype)
                    ref = reference(x64, chain, layout)
                    msg = f"{pats} {layout} {algorithm} {dtype} call {call}: "
                    y = structured_matmul(x, packed, layout=layout, algorithm=algorithm)
                    assert_close(y, ref, xp, dtype, rtol_for(dtype, chain), msg=msg)
                    y = structured_matmul(x, chain, layout=layout, algorithm=algorithm)
                    assert_close(y, ref, xp, dtype, rtol_for(dtype, chain), msg="unpacked " + msg)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_distinct_packed_chains_of_one_signature(xp, rng, layout):
    """Several KSPacked chains of one signature (shapes, dtype, layout): each call after the
    first takes the fast path planned for another chain, and must form and use its own
    weights."""
    dtype = kernel_dtype(xp)
    patterns = [(2, 3, 4, 3), (1, 4, 6, 6)] if layout == "batch_last" else [(3, 5, 4, 2)]
    for algorithm in _algorithms(xp):
        for call in range(3):
            chain = make_chain(xp, rng, patterns, dtype)
            packed = KSPacked(chain)
            x, x64 = x_for(xp, rng, chain, layout, 9, dtype)
            y = structured_matmul(x, packed, layout=layout, algorithm=algorithm)
            assert_close(y, reference(x64, chain, layout), xp, dtype, rtol_for(dtype, chain),
                         msg=f"{algorithm} chain {call}: ")


@pytest.mark.parametrize("algorithm", ("bmm", "dense", "kernel"))
def test_packed_values_are_a_snapshot(xp, rng, algorithm):
    """Changing the original arrays after packing, before and after the first call, changes
    nothing the packed chain computes."""
    dtype = kernel_dtype(xp)
    chain = make_chain(xp, rng, [(2, 3, 4, 3), (1, 4, 6, 6)], dtype)
    ref_chain = KSChain([KSFactor(f.pattern, xp.asarray(f.values, copy=True)) for f in chain])
    packed = KSPacked(chain)
    for call in range(2):
        for f in chain:  # new values in the originals, in place
            new, _ = random(xp, rng, f.pattern, dtype)
            f.values[...] = new
        x, x64 = x_for(xp, rng, chain, "batch_first", 7, dtype)
        y = structured_matmul(x, packed, algorithm=algorithm)
        assert_close(y, reference(x64, ref_chain, "batch_first"), xp, dtype,
                     msg=f"call {call}: ")


def test_packed_forms_are_made_once(xp, rng):
    """The dense product and bmm's weight stacks are formed on the first call and the same
    arrays serve the next ones; bmm's stacks are contiguous (the pre-permuted weights)."""
    dtype = kernel_dtype(xp)
    packed = KSPacked(make_chain(xp, rng, [(2, 3, 4, 3), (1, 4, 6, 6)], dtype))
    x, _ = x_for(xp, rng, packed, "batch_first", 5, dtype)
    assert packed.forms == {}
    structured_matmul(x, packed, algorithm="dense")
    structured_matmul(x, packed, algorithm="bmm")
    kept = dict(packed.forms)
    assert {k[0] for k in kept} == {"dense", "bmm"}
    assert len([k for k in kept if k[0] == "bmm"]) == 2  # one stack per factor
    structured_matmul(x, packed, algorithm="dense")
    structured_matmul(x, packed, algorithm="bmm")
    assert all(packed.forms[k] is v for k, v in kept.items())
    w = packed.forms[("dense", dtype)]
    np.testing.assert_allclose(np.asarray(_host(w), dtype=np.float64), chain_dense_ref(packed),
                               rtol=1e-5, atol=1e-6)
    assert "formed=['bmm', 'dense']" in repr(packed)


def _host(a):
    from _helpers import to_numpy

    return to_numpy(a)


def test_packed_torch_values_are_detached(rng):
    """Packed torch values track no gradients; x's gradient still flows (through bmm or
    dense, as for any call that needs autograd)."""
    torch = pytest.importorskip("torch")
    v = torch.tensor(rng.standard_normal((2, 3, 4, 2)), requires_grad=True)
    packed = KSPacked(KSFactor((2, 3, 4, 2), v))
    assert not packed[0].values.requires_grad
    x = torch.tensor(rng.standard_normal((5, 16)), requires_grad=True)
    y = structured_matmul(x, packed)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.ones((5, 12)) @ chain_dense_ref(packed),
                               rtol=1e-12)
    assert v.grad is None


def test_packed_rejects_what_a_chain_rejects(rng):
    with pytest.raises(TypeError, match="factors"):
        KSPacked("not factors")
    with pytest.raises(ValueError, match="factors"):
        KSPacked([])
    a = KSFactor((1, 2, 3, 1), np.ones((1, 2, 3, 1)))
    with pytest.raises(ValueError, match="shapes of a chain must match"):
        KSPacked([a, a])


def test_packed_cost_terms():
    """Packed: dense without forming K (nor multiplying a chain's factors), strided without
    transposing K, block_dense without forming its blocks; the GEMM terms unchanged."""
    from kronlinalg.planner import profiles

    prof = profiles.KNOWN_GPUS["h100-sxm"]
    shapes = ((2 * 5 * 3, 1000), (2, 4, 5, 3))
    per_call = costs.normalise(shapes, {"layout": "batch_last"})
    packed = costs.normalise(shapes, {"layout": "batch_last", "packed": True})
    assert not per_call["packed"] and packed["packed"]
    for terms, gone in ((costs.FAMILIES["dense"], ("build", "build_calls")),
                        (costs.FAMILIES["block_dense"], ("densify",))):
        t0, t1 = terms(per_call, 2, prof, "float16"), terms(packed, 2, prof, "float16")
        assert all(t0[k] > 0 and t1[k] == 0 for k in gone)
        assert t1["gemm_flop"] == t0["gemm_flop"] and t1["gemm_mem"] == t0["gemm_mem"]
    b0 = costs.FAMILIES["block_dense"](per_call, 2, prof, "float16")
    b1 = costs.FAMILIES["block_dense"](packed, 2, prof, "float16")
    assert b1["calls"] == pytest.approx(b0["calls"] - prof.launch_s)
    s0 = costs.FAMILIES["strided"](per_call, 2, prof, "float16")
    s1 = costs.FAMILIES["strided"](packed, 2, prof, "float16")
    assert s1["calls"] == pytest.approx(s0["calls"] - prof.launch_s)
    assert s0["gemm_mem"] - s1["gemm_mem"] == pytest.approx(2 * 2 * 4 * 5 * 3 * 2 / prof.bandwidth)
    # a chain: the product of the factors' dense forms is no per-call flop either
    chain = ((1000, 16), (1, 16, 4, 4), (4, 4, 4, 1))
    d0 = costs.FAMILIES["dense"](costs.normalise(chain, {}), 4, prof, "float32")
    d1 = costs.FAMILIES["dense"](costs.normalise(chain, {"packed": True}), 4, prof,
                                 "float32")
    assert d1["gemm_flop"] == pytest.approx(2.0 * 1000 * 64 * 16 / prof.flops("float32"))
    assert d0["gemm_flop"] > d1["gemm_flop"]
    with pytest.raises(TypeError, match="packed"):
        costs.normalise(shapes, {"layout": "batch_last", "packed": "yes"})


def test_packed_calls_plan_as_packed(rng, monkeypatch):
    """structured_matmul asks the planner with packed=True for a KSPacked (and without it for
    the same factors unpacked); tune() records under the same options."""
    seen = []
    real = structured._plan_options

    def spy(spec):
        out = real(spec)
        seen.append(out)
        return out

    monkeypatch.setattr(structured, "_plan_options", spy)
    chain = make_chain(_numpy_backend(), rng, [(2, 3, 4, 3)], "float64")
    x = rng.standard_normal((6, chain.shape[1]))
    structured_matmul(x, KSPacked(chain))
    structured_matmul(x, chain)
    assert seen == [{"layout": "batch_first", "packed": True}, {"layout": "batch_first"}]


def _numpy_backend():
    from _helpers import make_backend

    return make_backend("numpy")


# ---------------------------------------------------------------------------------------------
# measured choice: a packed single factor with a = d = 1 on CuPy arrays is one GEMM however it
# runs; the first auto call times the algorithms and records the fastest with the planner

def _packed_plan(x_shape, pattern, dtype, device, layout="batch_first"):
    from kronlinalg import planner

    return planner.plan("structured_matmul", tuple(x_shape), pattern, dtype=dtype, device=device,
                        layout=layout, packed=True)


def _measured(x, pattern, layout) -> bool:
    dtype = kronlinalg.common.backend.dtype_name(x.dtype)
    return bool(_packed_plan(x.shape, pattern, dtype, x, layout)[0].details.get("measured"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_measured_choice_only_where_it_pays(xp, rng, layout, monkeypatch):
    """Measured for a = d = 1 packed on CUDA arrays, CuPy's or torch's on the default stream
    (not unpacked, not a or d > 1, not with KRONLINALG_GEMM_TUNE=0, never on the host); every
    call, measured or not, matches the float64 reference, the first call and the fast-path
    calls after it."""
    from kronlinalg import planner

    dtype = kernel_dtype(xp)
    planner.clear_cache()
    try:
        for pats, tune_env, want in [([(1, 48, 40, 1)], "1", True), ([(1, 24, 72, 1)], "0", False),
                                     ([(2, 24, 16, 1)], "1", False),
                                     ([(1, 16, 24, 3)], "1", False)]:
            monkeypatch.setenv("KRONLINALG_GEMM_TUNE", tune_env)
            chain = make_chain(xp, rng, pats, dtype)
            packed = KSPacked(chain)
            for call in range(3):
                x, x64 = x_for(xp, rng, chain, layout, 37, dtype)
                ref = reference(x64, chain, layout)
                y = structured_matmul(x, packed, layout=layout)
                assert_close(y, ref, xp, dtype, rtol_for(dtype, chain), msg=f"{pats} {call}")
            expect = (want and xp.is_cuda and kronlinalg.common.backend.cupy_module() is not None
                      and cublaslt.enabled())
            assert _measured(x, pats[0], layout) == expect, (pats, tune_env, xp.name)
            structured_matmul(x, chain, layout=layout)  # (unpacked: the model, never measured)
    finally:
        planner.clear_cache()


def test_measured_choice_flow_on_a_stand_in(rng, monkeypatch):
    """The measuring itself, on the host with CuPy's timer replaced: each candidate runs (warm-up
    and timed), the fastest by the stand-in's times becomes the plan (marked measured) and what
    auto runs, once per signature; a failing measurement warns and leaves the model's choice."""
    from kronlinalg.vendor import cublaslt
    from kronlinalg import planner

    seen = []

    def fake_times(runs, spin, rounds, screen=False, spin_ns=None):
        seen.append((len(runs), rounds, spin_ns))
        for run in runs:
            run()
        return [3.0, 1.0, 2.0, 4.0][:len(runs)]  # ms: the second candidate wins

    monkeypatch.setattr(structured, "_cupy_times", lambda x: True)
    monkeypatch.setattr(cublaslt, "enabled", lambda: True)
    monkeypatch.setattr(cublaslt, "_spin_kernel", lambda: None)
    monkeypatch.setattr(cublaslt, "_device_times", fake_times)
    backend = _numpy_backend()
    planner.clear_cache()
    try:
        chain = make_chain(backend, rng, [(1, 7, 5, 1)], "float64")
        packed = KSPacked(chain)
        names = [c.name for c in _packed_plan((6, 5), (1, 7, 5, 1), "float64", "cpu")]
        for call in range(3):
            x = rng.standard_normal((6, 5))
            y = structured_matmul(x, packed)
            np.testing.assert_allclose(y, x @ chain.to_dense().T, rtol=1e-12)
        assert seen == [(len(names), structured.MEASURE_ROUNDS, structured.MEASURE_SPIN_NS)]
        first = _packed_plan((6, 5), (1, 7, 5, 1), "float64", "cpu")[0]
        assert first.details.get("measured") and first.name == names[1]
        assert first.seconds == pytest.approx(1e-3)
        # a d > 1 factor, and unpacked weights, are left to the model
        other = make_chain(backend, rng, [(1, 7, 5, 2)], "float64")
        structured_matmul(rng.standard_normal((6, 10)), KSPacked(other))
        structured_matmul(rng.standard_normal((6, 5)), chain)
        assert len(seen) == 1

        def broken(*args, **kwargs):
            raise RuntimeError("no timer")

        monkeypatch.setattr(cublaslt, "_device_times", broken)
        fresh = make_chain(backend, rng, [(1, 9, 4, 1)], "float64")
        x = rng.standard_normal((3, 4))
        with pytest.warns(RuntimeWarning, match="cost model chooses"):
            y = structured_matmul(x, KSPacked(fresh))
        np.testing.assert_allclose(y, x @ fresh.to_dense().T, rtol=1e-12)
        assert not _packed_plan((3, 4), (1, 9, 4, 1), "float64", "cpu")[0].details.get("measured")
    finally:
        planner.clear_cache()

