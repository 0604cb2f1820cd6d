"""BatchedBlockSparseMatrix and spmm_batched against dense float64 references, on every backend
present: random shared block patterns with empty block rows, edge blocks of shapes not divisible
by b, odd batches, empty and full patterns; the CUDA kernel on poisoned outputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kronlinalg
from kronlinalg import BatchedBlockSparseMatrix, spmm_batched

from _helpers import RTOL, assert_close, to_numpy, to_xp


def stack_pattern(rng, batch, m, k, b, density, empty_rows=True):
    """(dense float64 stack (batch, m, k) whose blocks are nonzero where one shared random mask
    says, the mask)."""
    R, C = -(-m // b), -(-k // b)
    mask = rng.random((R, C)) < density
    if empty_rows and R > 2:
        mask[rng.integers(0, R)] = False
    vals = rng.standard_normal((batch, R * b, C * b))
    vals = np.where(np.abs(vals) < 0.05, 0.5, vals)
    return (np.kron(mask, np.ones((b, b)))[None] * vals)[:, :m, :k], mask


def from_mask(xp, a, mask, b, dtype):
    """A BatchedBlockSparseMatrix built with the constructor (the mask's blocks, even where a
    block is all zero) in backend xp, and its exact values as float64."""
    batch, m, k = a.shape
    R, C = mask.shape
    padded = np.zeros((batch, R * b, C * b))
    padded[:, :m, :k] = a
    rows, cols = np.nonzero(mask)
    grid = padded.reshape(batch, R, b, C, b).transpose(0, 1, 3, 2, 4)
    val = to_xp(xp, np.ascontiguousarray(grid[:, rows, cols]), dtype)
    rp = np.zeros(R + 1, dtype=np.int64)
    np.cumsum(mask.sum(axis=1), out=rp[1:])
    A = BatchedBlockSparseMatrix(val, to_xp(xp, rp), to_xp(xp, cols.astype(np.int64)),
                                 shape=(m, k))
    return A, to_numpy(A.to_dense()).astype(np.float64)


def algorithms_for(xp, dtype, A, n):
    names = ["auto", "gather", "dense"]
    if xp.is_cuda:
        if dtype in ("float16", "bfloat16") and A.block == 16 and max(A.shape[1:]) <= 256:
            names.append("blocksparse")
    elif A.shape[1] % A.block == 0 and A.shape[2] % A.block == 0:
        names.append("blocksparse")  # the C++ SpMM over the block-diagonal stack
    return names


@pytest.mark.parametrize("batch,m,k,n,b,d", [(5, 64, 64, 64, 16, 0.5), (3, 40, 50, 7, 16, 0.6),
                                             (3, 48, 32, 5, 16, 0.6), (2, 64, 96, 9, 32, 0.5),
                                             (7, 256, 256, 24, 16, 0.5), (1, 16, 16, 1, 16, 1.0),
                                             (4, 96, 37, 3, 8, 0.4), (2, 130, 100, 20, 32, 0.5),
                                             (9, 128, 80, 130, 16, 0.3)])
def test_spmm_batched_matches_dense(xp, rng, batch, m, k, n, b, d):
    for dtype in xp.dtypes:
        a, mask = stack_pattern(rng, batch, m, k, b, d)
        A, ae = from_mask(xp, a, mask, b, dtype)
        x = to_xp(xp, rng.standard_normal((batch, k, n)), dtype)
        xe = to_numpy(x).astype(np.float64)
        ref = ae @ xe
        for algorithm in algorithms_for(xp, dtype, A, n):
            what = f"{dtype} {algorithm}: "
            assert_close(spmm_batched(A, x, algorithm=algorithm), ref, xp, dtype, msg=what)
            assert_close(spmm_batched(A, x, alpha=-0.5, algorithm=algorithm), -0.5 * ref, xp,
                         dtype, msg=what + "alpha ")
        assert_close(A @ x, ref, xp, dtype)


def test_spmm_batched_empty_and_full_patterns(xp, rng):
    dtype = xp.dtypes[-1]
    for mask in (np.zeros((3, 2), dtype=bool), np.ones((3, 2), dtype=bool)):
        a = rng.standard_normal((5, 48, 32)) * np.kron(mask, np.ones((16, 16)))[None]
        A, ae = from_mask(xp, a, mask, 16, dtype)
        assert A.nnz_blocks == mask.sum()
        x = to_xp(xp, rng.standard_normal((5, 32, 9)), dtype)
        ref = ae @ to_numpy(x).astype(np.float64)
        for algorithm in ("auto", "gather", "dense") + (() if xp.is_cuda else ("blocksparse",)):
            got = spmm_batched(A, x, algorithm=algorithm)
            assert tuple(got.shape) == (5, 48, 9)
            assert_close(got, ref, xp, dtype, msg=f"{mask.sum()} blocks {algorithm}: ")
    # nothing to compute: batch 0, n = 0, m = 0
    for batch, m, k, n in ((0, 32, 32, 4), (3, 32, 32, 0), (2, 0, 16, 3)):
        A, _ = from_mask(xp, np.zeros((batch, m, k)), np.ones((-(-m // 16), -(-k // 16)), bool),
                         16, dtype)
        got = spmm_batched(A, to_xp(xp, np.ones((batch, k, n)), dtype))
        assert tuple(got.shape) == (batch, m, n)
        assert not np.any(to_numpy(got))


@pytest.mark.gpu
@pytest.mark.parametrize("order", [64, 128, 256, 48])
def test_batched_kernel_every_tile(xp, rng, order):
    """The CUDA kernel at every RHS tile (16, 32, 64 columns; n not a multiple of 8 goes through
    a padded copy; a strided X) and pipeline (2-4 stages by the shared memory; the
    two-stage one), an odd batch, half and bfloat16, on poisoned output memory."""
    if not xp.is_cuda:
        pytest.skip("the CUDA kernel")
    from kronlinalg.blocksparse_batched import bs_cuda

    batch = 33
    a, mask = stack_pattern(rng, batch, order, order, 16, 0.5)
    prev, prev_c = bs_cuda.batched_pipeline(), bs_cuda.batched_c_stage()
    try:
        for dtype in [d for d in xp.dtypes if d in ("float16", "bfloat16")]:
            A, ae = from_mask(xp, a, mask, 16, dtype)
            for n, pipeline in itertools.product((8, 13, 16, 40, 64, 100, 256), (0, 1)):
                bs_cuda.batched_pipeline(pipeline)
                bs_cuda.batched_c_stage(1 - pipeline)  # C staged (16-byte stores) or not
                x = to_xp(xp, rng.standard_normal((batch, order, n)), dtype)
                ref = ae @ to_numpy(x).astype(np.float64)
                poison = to_xp(xp, np.full(batch * order * max(n, 8) + 4096, np.nan), dtype)
                del poison  # its memory goes back to the pool the result comes from
                for _ in range(2):  # the second call takes the fast path
                    got = spmm_batched(A, x, alpha=2.0, algorithm="blocksparse")
                    assert_close(got, 2.0 * ref, xp, dtype, msg=f"{dtype} n={n} {pipeline}: ")
    finally:
        bs_cuda.batched_pipeline(prev)
        bs_cuda.batched_c_stage(prev_c)
    for dtype in [d for d in xp.dtypes if d in ("float16", "bfloat16")]:
        A, ae = from_mask(xp, a, mask, 16, dtype)
        wide = to_xp(xp, rng.standard_normal((batch, order, 80)), dtype)[:, :, 8:72]
        ref = ae @ to_numpy(wide).astype(np.float64)
        assert_close(spmm_batched(A, wide, algorithm="blocksparse"), ref, xp, dtype,
                     msg=f"{dtype} strided X: ")


@pytest.mark.gpu
@pytest.mark.parametrize("m,k", [(256, 256), (128, 120), (40, 50), (64, 64)])
def test_batched_kernel_narrow_forms(xp, rng, m, k):
    """Narrow right-hand sides in each of the kernel's forms (batched_narrow: the 8-column tile
    for n of 5-8, bulk loads; and neither; n <= 4 always on the 8-column tile, and a replay
    made under one form runs under the next): n of 1-16, k not a multiple of 16 (X's
    rows past k must read as zeros), an X whose rows are not packed (no bulk loads), an odd
    batch, on poisoned output memory."""
    if not xp.is_cuda:
        pytest.skip("the CUDA kernel")
    from kronlinalg.blocksparse_batched import bs_cuda

    batch = 33
    a, mask = stack_pattern(rng, batch, m, k, 16, 0.5)
    prev = bs_cuda.batched_narrow()
    try:
        for dtype in [d for d in xp.dtypes if d in ("float16", "bfloat16")]:
            A, ae = from_mask(xp, a, mask, 16, dtype)
            code = {"float16": 2, "bfloat16": 3}[dtype]
            for n, forms in itertools.product((1, 3, 4, 8, 16), (3, 2, 1, 0)):
                bs_cuda.batched_narrow(forms)
                tile = bs_cuda.batched_tile_n(code, m, k, max(n, 4), A.nnz_blocks)
                assert tile == (8 if n <= 4 or n <= 8 and forms & 1 else 16), (n, forms, tile)
                x = to_xp(xp, rng.standard_normal((batch, k, n)), dtype)
                ref = ae @ to_numpy(x).astype(np.float64)
                poison = to_xp(xp, np.full(batch * m * 16 + 4096, np.nan), dtype)
                del poison  # its memory goes back to the pool the result comes from
                for _ in range(2):  # the second call takes the fast path
                    got = spmm_batched(A, x, alpha=-1.5, algorithm="blocksparse")
                    assert_close(got, -1.5 * ref, xp, dtype, msg=f"{dtype} n={n} {forms}: ")
            bs_cuda.batched_narrow(3)
            for n in (4, 8):  # rows 16 apart: the columns of a wider X
                x = to_xp(xp, rng.standard_normal((batch, k, 16)), dtype)[:, :, :n]
                ref = ae @ to_numpy(x).astype(np.float64)
                assert_close(spmm_batched(A, x, algorithm="blocksparse"), ref, xp, dtype,
                             msg=f"{dtype} n={n} strided X: ")
    finally:
        bs_cuda.batched_narrow(prev)


@pytest.mark.gpu
def test_batched_kernel_refuses_what_it_cannot_run(xp, rng):
    if not xp.is_cuda:
        pytest.skip("the CUDA kernel")
    a, mask = stack_pattern(rng, 2, 64, 64, 16, 0.5)
    A, _ = from_mask(xp, a, mask, 16, "float32")
    with pytest.raises(ValueError, match="blocksparse"):
        spmm_batched(A, to_xp(xp, np.ones((2, 64, 8)), "float32"), algorithm="blocksparse")
    big, bmask = stack_pattern(rng, 2, 320, 32, 16, 0.5)
    B, be = from_mask(xp, big, bmask, 16, "float16")
    x = to_xp(xp, rng.standard_normal((2, 32, 8)), "float16")
    assert_close(spmm_batched(B, x), be @ to_numpy(x).astype(np.float64), xp, "float16")


def test_conversions_round_trip(xp, rng):
    dtype = xp.dtypes[-1]
    a, mask = stack_pattern(rng, 4, 70, 45, 16, 0.4)
    arr = to_xp(xp, a, dtype)
    A = BatchedBlockSparseMatrix.from_dense(arr)
    exact = to_numpy(arr)
    assert np.array_equal(to_numpy(A.to_dense()), exact)
    assert A.shape == (4, 70, 45) and A.batch == 4 and A.block == 16
    assert A.nnz_blocks == int(mask.sum()) and A.block_grid == (5, 3)
    for i in (0, 3):
        assert np.array_equal(to_numpy(A.matrix(i).to_dense()), exact[i])
    assert "BatchedBlockSparseMatrix" in repr(A)


def test_padding_is_zeroed(rng):
    val = rng.standard_normal((2, 1, 16, 16))
    A = BatchedBlockSparseMatrix(val, np.array([0, 1]), np.array([0]), shape=(10, 12))
    dense = A.to_dense()
    assert dense.shape == (2, 10, 12)
    assert np.array_equal(dense, val[:, 0, :10, :12])
    assert not np.any(A.val[:, 0, 10:, :]) and not np.any(A.val[:, 0, :, 12:])
    assert np.any(val[:, 0, 10:, :])  # the caller's array is untouched


def _bad():
    v = np.ones((2, 2, 16, 16))
    rp, ci = np.array([0, 1, 2]), np.array([0, 1])
    return [
        ("val", lambda: BatchedBlockSparseMatrix(v[0], rp, ci, shape=(32, 32)), ValueError),
        ("val", lambda: BatchedBlockSparseMatrix(v[..., :8], rp, ci, shape=(32, 32)),
         ValueError),
        ("row_ptr", lambda: BatchedBlockSparseMatrix(v, rp[:2], ci, shape=(32, 32)), ValueError),
        ("col_idx", lambda: BatchedBlockSparseMatrix(v, rp, np.array([0, 5]), shape=(32, 32)),
         ValueError),
        ("col_idx", lambda: BatchedBlockSparseMatrix(v, np.array([0, 2, 2]), np.array([1, 0]),
                                                     shape=(32, 32)), ValueError),
        ("shape", lambda: BatchedBlockSparseMatrix(v, rp, ci, shape=32), TypeError),
        ("A", lambda: spmm_batched(np.ones((2, 32, 32)), np.ones((2, 32, 3))), TypeError),
        ("X", lambda: spmm_batched(BatchedBlockSparseMatrix(v, rp, ci, shape=(32, 32)),
                                   np.ones((3, 32, 3))), ValueError),
        ("X", lambda: spmm_batched(BatchedBlockSparseMatrix(v, rp, ci, shape=(32, 32)),
                                   np.ones((32, 3))), ValueError),
        ("X", lambda: spmm_batched(BatchedBlockSparseMatrix(v, rp, ci, shape=(32, 32)),
                                   np.ones((2, 32, 3), dtype=np.int64)), TypeError),
        ("alpha", lambda: spmm_batched(BatchedBlockSparseMatrix(v, rp, ci, shape=(32, 32)),
                                       np.ones((2, 32, 3)), alpha="x"), TypeError),
        ("algorithm", lambda: spmm_batched(BatchedBlockSparseMatrix(v, rp, ci, shape=(32, 32)),
                                           np.ones((2, 32, 3)), algorithm="nope"), ValueError),
        ("a", lambda: BatchedBlockSparseMatrix.from_dense(np.ones((32, 32))), ValueError),
        ("block", lambda: BatchedBlockSparseMatrix.from_dense(np.ones((1, 32, 32)), block=12),
         ValueError),
    ]


@pytest.mark.parametrize("case", range(len(_bad())))
def test_bad_input(case):
    name, make, exc = _bad()[case]
    with pytest.raises(exc, match=name):
        make()


def test_mixed_libraries():
    torch = pytest.importorskip("torch")
    A = BatchedBlockSparseMatrix.from_dense(np.ones((2, 32, 32)))
    with pytest.raises(TypeError, match="X"):
        spmm_batched(A, torch.ones((2, 32, 3), dtype=torch.float64))


def test_inputs_untouched(rng):
    a, mask = stack_pattern(rng, 3, 48, 48, 16, 0.5)
    A = BatchedBlockSparseMatrix.from_dense(a)
    val = A.val.copy()
    x = rng.standard_normal((3, 48, 5))
    x0 = x.copy()
    for algorithm in ("gather", "dense", "blocksparse"):
        spmm_batched(A, x, alpha=3.0, algorithm=algorithm)
    assert np.array_equal(x, x0) and np.array_equal(A.val, val)


def test_planner_registration():
    names = {c.name for c in kronlinalg.planner.candidates("spmm_batched")}
    assert {"blocksparse", "gather", "dense"} <= names
    plan = kronlinalg.plan("spmm_batched", (100, 64, 64), (100, 64, 8), dtype="float64",
                           block=16, nnzb=8, lib="numpy")
    assert plan[0].name == "blocksparse" and {p.name for p in plan} == {"blocksparse", "gather",
                                                                         "dense"}
    edge = kronlinalg.plan("spmm_batched", (100, 60, 64), (100, 64, 8), dtype="float64",
                           block=16, nnzb=8, lib="numpy")  # the C++ path needs whole blocks
    assert {p.name for p in edge} == {"gather", "dense"} and edge[0].name == "dense"


hyp = pytest.importorskip("hypothesis")
st = hyp.strategies


@hyp.given(batch=st.integers(0, 4), m=st.integers(0, 40), k=st.integers(0, 40),
           n=st.integers(0, 6), b=st.sampled_from([8, 16]), density=st.floats(0.0, 1.0),
           seed=st.integers(0, 2**32 - 1), alpha=st.floats(-2, 2),
           algorithm=st.sampled_from(["auto", "gather", "dense", "blocksparse"]))
def test_property_spmm_batched(batch, m, k, n, b, density, seed, alpha, algorithm):
    rng = np.random.default_rng(seed)
    if algorithm == "blocksparse":  # the C++ path takes whole blocks
        m, k = m // b * b, k // b * b
    a, _ = stack_pattern(rng, batch, m, k, b, density)
    A = BatchedBlockSparseMatrix.from_dense(a, block=b)
    x = rng.standard_normal((batch, k, n))
    got = spmm_batched(A, x, alpha=alpha, algorithm=algorithm)
    ref = alpha * (a @ x)
    assert got.shape == ref.shape
    nrm = np.linalg.norm(ref)
    assert np.linalg.norm(got - ref) <= 1e-12 * (nrm if nrm else 1.0)
    assert np.array_equal(A.to_dense(), a)
    assert RTOL["float64"] == 1e-12


def test_predictor_prices_the_padded_right_hand_side():
    """A right-hand side of 4 columns takes the padding copy and the Python path (H100, session
    12, FP16, batch 10⁴, 50 %: order 64 ours 0.101 ms against torch.bmm 0.063, order 128 0.139
    against 0.181): the kernel's prediction goes above the dense one at order 64, stays below
    at 128, and RHS 8 (no padding) stays ours."""
    import types

    from kronlinalg.planner import profiles
    from kronlinalg.planner.costs import blocksparse as costs

    prof = profiles.KNOWN_GPUS["h100-sxm"]

    def both(order, n):
        q = order // 16
        info = {"batch": 10_000, "m": order, "k": order, "n": n, "block": 16,
                "nnzb": q * q // 2, "lib": "torch", "gpu_tile": 16}
        pr = types.SimpleNamespace(info=info, kind="cuda", dtype="float16")
        return (costs.predict_batched_ours(pr, prof)[0],
                costs.predict_batched_dense(pr, prof)[0])

    ours, dense = both(64, 4)
    assert ours > dense
    ours, dense = both(128, 4)
    assert ours < dense
    ours, dense = both(64, 8)
    assert ours < dense


def test_predictor_prices_the_columns_the_kernel_computes():
    """Where the kernel takes n = 4 itself (facts' gpu_cols 4, its 8-column tile) no padding
    copy is priced, and the bytes are those of 4 columns."""
    import types

    from kronlinalg.planner import profiles
    from kronlinalg.planner.costs import blocksparse as costs

    prof = profiles.KNOWN_GPUS["h100-sxm"]
    info = {"batch": 10_000, "m": 64, "k": 64, "n": 4, "block": 16, "nnzb": 8, "lib": "torch"}
    native = types.SimpleNamespace(info=dict(info, gpu_tile=8, gpu_cols=4), kind="cuda",
                                   dtype="float16")
    padded = types.SimpleNamespace(info=dict(info, gpu_tile=8, gpu_cols=8), kind="cuda",
                                   dtype="float16")
    t_native, d_native = costs.predict_batched_ours(native, prof)
    t_padded, d_padded = costs.predict_batched_ours(padded, prof)
    assert d_native["terms"]["padding"] == 0.0 < d_padded["terms"]["padding"]
    assert d_native["bytes"] == 10_000 * (8 * 256 + 64 * 4 + 64 * 4) * 2
    assert t_native < t_padded
