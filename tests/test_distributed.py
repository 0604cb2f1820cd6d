"""kronlinalg.distributed: results equal the single-process ones, bytes equal the formulas,
bad input is the same ValueError on every rank.

Two kinds of ranks: threads in this process (a Communicator over queues, for hypothesis
properties) and real processes under ``mpiexec`` (mpi4py + the mpich wheel, the test extras)
and ``torch.distributed.run`` (gloo), running tests/distributed_worker.py from the tests folder.
"""

from __future__ import annotations

import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kronlinalg
from kronlinalg import distributed as kd
from kronlinalg.planner.costs import distributed as costs

HERE = Path(__file__).resolve().parent


# -- ranks as threads --------------------------------------------------------------------------
class ThreadGroup:
    def __init__(self, size):
        self.size = size
        self.data = {(s, d): queue.Queue() for s in range(size) for d in range(size)}
        self.meta = {(s, d): queue.Queue() for s in range(size) for d in range(size)}


class ThreadComm(kd.Communicator):
    """Rank `rank` of a ThreadGroup: point-to-point through queues (copies, as a wire would)."""

    name = "threads"

    def __init__(self, group, rank):
        super().__init__()
        self.group, self.rank, self.size = group, rank, group.size

    def _exchange(self, sends, recvs):
        for p, b in sends.items():
            self.group.data[(self.rank, p)].put(np.array(b, copy=True))
        for q, buf in recvs.items():
            buf[...] = self.group.data[(q, self.rank)].get(timeout=30)

    def _gather_meta(self, vector, timeout):
        for p in range(self.size):
            self.group.meta[(self.rank, p)].put(vector.copy())
        try:
            return np.stack([self.group.meta[(q, self.rank)].get(timeout=timeout)
                             for q in range(self.size)])
        except queue.Empty:
            raise TimeoutError from None

    def _allgather(self, buf):
        return self._gather_meta(np.asarray(buf), 30.0)

    def _barrier(self):
        self._gather_meta(np.zeros(1, np.int64), 30.0)


def run_ranks(size, fn, skip=()):
    """fn(comm) on `size` thread ranks (ranks in skip do not call); results or exceptions."""
    group = ThreadGroup(size)
    out = [None] * size

    def body(r):
        try:
            out[r] = fn(ThreadComm(group, r))
        except Exception as e:  # noqa: BLE001 - handed back to the test
            out[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size) if r not in skip]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def run_ranks_ok(size, fn):
    """run_ranks, raising the first rank's exception."""
    out = run_ranks(size, fn)
    for r in out:
        if isinstance(r, Exception):
            raise r
    return out


def dense(factors):
    out = factors[0]
    for f in factors[1:]:
        out = np.kron(out, f)
    return out


# -- plans and layouts -----------------------------------------------------------------------
def test_rounds_follow_fastkron():
    # X 1 × 256, four 4 × 4 factors on G_K = 4 (FastKron's figure 8): N_local = 3, 2 rounds
    rounds = kd.kron_rounds([(4, 4)] * 4, (1, 4))
    assert [(r.first, r.stop) for r in rounds] == [(1, 4), (0, 1)]
    assert len(kd.kron_rounds([(4, 4)] * 4, (1, 4), "per_factor")) == 4
    assert len(kd.kron_rounds([(3, 5), (2, 7)], (4, 1))) == 1  # G_K = 1: one local round
    assert kd.kron_bytes(10, [(4, 4)] * 4, (10, 1), 0, 4) == 0  # G_K = 1 sends nothing
    with pytest.raises(ValueError, match="G_K = 3 admits no schedule"):
        kd.kron_rounds([(2, 2), (2, 2)], (1, 3))


def test_bytes_formula_for_equal_factors():
    # P = Q: every round moves G_M · TG_M · (K − TG_K) values in all
    p, n, g_m, g_k, tg_m = 2, 4, 2, 4, 3
    k = p ** n
    total = sum(kd.kron_bytes(g_m * tg_m, [(p, p)] * n, (g_m, g_k), r, 1) for r in range(g_m * g_k))
    tg_k = k // g_k
    assert total == g_m * n * tg_m * (k - tg_k) / math.log(tg_k, p)  # FastKron's formula


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6, 7, 12])
def test_grid_choice_covers_any_rank_count(size):
    grid = kd.kron_grid(4096, [(8, 8)] * 4, size, dtype="float32", device="cpu")
    assert grid[0] * grid[1] == size
    best = kronlinalg.plan("distributed_kron_matmul", (4096, 4096), *[(8, 8)] * 4,
                           dtype="float32", ranks=size)
    assert {c.name for c in best} == {"fastkron", "per_factor"}
    assert best[0].details["grid"] == grid


def test_grid_choice_weighs_communication():
    # a slow link and rows to spare: no column split; rows too few for the ranks: split K
    assert kd.kron_grid(8192, [(16, 16)] * 4, 4, bandwidth=1e8)[1] == 1
    assert kd.kron_grid(2, [(16, 16)] * 4, 4)[1] >= 2


def test_matmul_candidates_are_registered():
    plans = kronlinalg.plan("distributed_matmul", (4096, 4096), (4096, 4096), dtype="float64",
                            ranks=7)
    assert {c.name for c in plans} == {"strassen_winograd", "classical"}
    # 7 ranks: one product each against 8 products over 7 ranks
    assert plans[0].name == "strassen_winograd"


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7])
def test_product_segments_balance(size):
    segs = costs.product_segments(7, 10, size)
    lengths = [sum(c1 - c0 for _, c0, c1 in s) for s in segs]
    assert sum(lengths) == 70 and max(lengths) - min(lengths) <= 1
    covered = sorted((i, c) for s in segs for i, c0, c1 in s for c in range(c0, c1))
    assert covered == [(i, c) for i in range(7) for c in range(10)]


def test_layouts_round_trip():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((11, 12))
    for grid in ((3, 2), (1, 4), (4, 1)):
        blocks = [kd.kron_shard(x, grid, r) for r in range(grid[0] * grid[1])]
        assert [b.shape[0] for b in blocks[::grid[1]]] == [len(range(*kd.rows_split(11, grid[0], i)))
                                                           for i in range(grid[0])]
        assert np.array_equal(kd.kron_assemble(blocks, grid, np), x)
    y = rng.standard_normal((6, 10))
    for size in (1, 2, 3, 7):
        assert np.array_equal(kd.quadrant_assemble([kd.quadrant_shard(y, size, r)
                                                    for r in range(size)], np), y)


def test_communicator_refuses_other_objects():
    with pytest.raises(TypeError, match="comm: expected an mpi4py communicator"):
        kd.communicator(object())
    assert kd.communicator(None).size == 1  # torch.distributed not initialised: one rank


def test_import_loads_no_communication_library():
    code = ("import sys, kronlinalg; "
            "print(sorted(m for m in ('mpi4py', 'torch', 'cupy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- thread ranks: properties ----------------------------------------------------------------
@st.composite
def kron_problems(draw):
    size = draw(st.integers(1, 6))
    g_k = draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    n = draw(st.integers(1, 4))
    shapes = [(draw(st.sampled_from([1, 2, 3, 4, 6])), draw(st.sampled_from([1, 2, 3, 4, 6])))
              for _ in range(n)]
    m = draw(st.integers(size // g_k, 9))
    alg = draw(st.sampled_from(["fastkron", "per_factor"]))
    pipeline = draw(st.integers(1, 3))
    return size, (size // g_k, g_k), shapes, m, alg, pipeline


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kron_problems(), st.integers(0, 2 ** 31))
def test_kron_matmul_equals_single_process(problem, seed):
    size, grid, shapes, m, alg, pipeline = problem
    try:
        rounds = kd.kron_rounds(shapes, grid, alg)
    except ValueError:
        return  # no schedule for this G_K (G_K = 1 always has one; checked above)
    rng = np.random.default_rng(seed)
    factors = [rng.standard_normal(s) for s in shapes]
    x = rng.standard_normal((m, math.prod(p for p, _ in shapes)))
    want = x @ dense(factors)

    def work(comm):
        xs = kd.kron_shard(x, grid, comm.rank).copy()
        before = xs.copy()
        y = kd.kron_matmul(xs, factors, comm=comm, grid=grid, algorithm=alg,
                           pipeline=pipeline)
        assert np.array_equal(xs, before)
        return y, comm.bytes_sent

    out = run_ranks_ok(size, work)
    got = kd.kron_assemble([y for y, _ in out], grid, np)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    for r, (_, sent) in enumerate(out):
        assert sent == kd.kron_bytes(m, shapes, grid, r, 8, alg)
    assert len(rounds) >= 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 7), st.integers(1, 6), st.integers(1, 6), st.integers(1, 6),
       st.sampled_from(["strassen_winograd", "classical"]), st.integers(1, 5),
       st.integers(0, 2 ** 31))
def test_strassen_matmul_equals_classical(size, m2, k2, n2, alg, pipeline, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((2 * m2, 2 * k2))
    b = rng.standard_normal((2 * k2, 2 * n2))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)

    def work(comm):
        a_s = kd.quadrant_shard(a32, size, comm.rank)
        b_s = kd.quadrant_shard(b32, size, comm.rank)
        before = (a_s.copy(), b_s.copy())
        c_s = kd.strassen_matmul(a_s, b_s, comm=comm, algorithm=alg, pipeline=pipeline)
        assert np.array_equal(a_s, before[0]) and np.array_equal(b_s, before[1])
        return c_s, comm.bytes_sent

    out = run_ranks_ok(size, work)
    for r, (_, sent) in enumerate(out):  # the same bytes for every pipeline count
        assert sent == kd.strassen_bytes(2 * m2, 2 * k2, 2 * n2, size, r, 4, alg)
    got = kd.quadrant_assemble([c for c, _ in out], np)
    assert got.dtype == np.float32
    classical = a32 @ b32
    ref = a @ b
    eps = np.finfo(np.float32).eps
    scale = np.abs(a).max() * np.abs(b).max() * 2 * k2
    # one Strassen–Winograd level: within 2 · 3 × the classical error (the single-device bound)
    err = np.abs(got - ref).max() / scale
    err_classical = max(np.abs(classical - ref).max() / scale, eps)
    assert err <= 6 * err_classical, (err, err_classical)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 7), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from(["strassen_winograd", "classical"]), st.sampled_from([2, 3]),
       st.integers(1, 3), st.integers(0, 2 ** 31))
def test_strassen_levels_equal_classical(size, mb, kb, nb, alg, levels, pipeline, seed):
    """L nested levels over ranks (7^L products, blocks of a 2^L split, every addition on the
    strips): the product to L levels' error bound (2 · 3^L × the classical error), inputs
    untouched, and the bytes the counter saw equal to strassen_bytes."""
    split = 2 ** levels
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((split * mb, split * kb))
    b = rng.standard_normal((split * kb, split * nb))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)

    def work(comm):
        a_s = kd.quadrant_shard(a32, size, comm.rank, levels)
        b_s = kd.quadrant_shard(b32, size, comm.rank, levels)
        before = (a_s.copy(), b_s.copy())
        c_s = kd.strassen_matmul(a_s, b_s, comm=comm, algorithm=alg, levels=levels,
                                 pipeline=pipeline)
        assert np.array_equal(a_s, before[0]) and np.array_equal(b_s, before[1])
        return c_s, comm.bytes_sent

    out = run_ranks_ok(size, work)
    for r, (_, sent) in enumerate(out):
        assert sent == kd.strassen_bytes(split * mb, split * kb, split * nb, size, r, 4, alg,
                                         levels)
    got = kd.quadrant_assemble([c for c, _ in out], np, levels)
    ref = a @ b
    eps = np.finfo(np.float32).eps
    scale = np.abs(a).max() * np.abs(b).max() * split * kb
    err = np.abs(got - ref).max() / scale
    err_classical = max(np.abs(a32 @ b32 - ref).max() / scale, eps)
    assert err <= 2 * 3 ** levels * err_classical, (err, err_classical)


def test_strassen_levels_programs():
    """The composed programs: 7^L (8^L) products, each block of C from its own sums; the
    two-level Strassen–Winograd program on exact integers equals A @ B, and so does the layout
    round trip of every level count."""
    from kronlinalg.distributed.strassen import program

    for levels in (1, 2, 3):
        assert len(program("strassen_winograd", levels)[2]) == 7 ** levels
        assert len(program("classical", levels)[2]) == 8 ** levels
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (8, 12)).astype(np.float64)
    b = rng.integers(-3, 4, (12, 4)).astype(np.float64)
    out = run_ranks(3, lambda comm: kd.strassen_matmul(
        kd.quadrant_shard(a, 3, comm.rank, 2), kd.quadrant_shard(b, 3, comm.rank, 2),
        comm=comm, levels=2))
    assert np.array_equal(kd.quadrant_assemble(out, np, 2), a @ b)
    for levels in (1, 2, 3):
        x = rng.standard_normal((3, 8 * 5))
        for size in (1, 2, 5):
            strips = [kd.quadrant_shard(x, size, r, levels) for r in range(size)]
            assert np.array_equal(kd.quadrant_assemble(strips, np, levels), x)
    with pytest.raises(ValueError, match="levels"):
        kd.strassen_matmul(a, b, comm=kd.SelfCommunicator(), levels=4)
    with pytest.raises(ValueError, match="divisible by 4"):
        kd.strassen_matmul(np.ones((6, 8)), np.ones((8, 8)), comm=kd.SelfCommunicator(),
                           levels=2)


@pytest.mark.parametrize("leaf", [None, "library", "auto", "strassen"])
@pytest.mark.parametrize("alg", ["strassen_winograd", "classical"])
def test_strassen_leaves(alg, leaf):
    """Every leaf (None: strassen_matmul's for Strassen–Winograd, the library's for the split)
    gives the product; an unknown leaf is the same ValueError on every rank."""
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((20, 28)), rng.standard_normal((28, 12))
    out = run_ranks_ok(3, lambda comm: kd.strassen_matmul(
        kd.quadrant_shard(a, 3, comm.rank), kd.quadrant_shard(b, 3, comm.rank), comm=comm,
        algorithm=alg, leaf=leaf))
    np.testing.assert_allclose(kd.quadrant_assemble(out, np), a @ b, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="leaf"):
        kd.strassen_matmul(a, b, comm=kd.SelfCommunicator(), algorithm=alg, leaf="cublas")


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_strassen_pipeline_changes_no_value(size):
    # chunks of columns give each product column the same sums: the result of every pipeline
    # count equals pipeline=1's to rounding (bitwise where the BLAS's columns do not depend on
    # the block width), and the counter the formula
    rng = np.random.default_rng(size)
    a, b = rng.standard_normal((18, 26)), rng.standard_normal((26, 34))

    def work(pipeline):
        def body(comm):
            c_s = kd.strassen_matmul(kd.quadrant_shard(a, size, comm.rank),
                                     kd.quadrant_shard(b, size, comm.rank), comm=comm,
                                     pipeline=pipeline)
            return c_s, comm.bytes_sent
        out = run_ranks_ok(size, body)
        return kd.quadrant_assemble([c for c, _ in out], np), [s for _, s in out]

    one, sent_one = work(1)
    np.testing.assert_allclose(one, a @ b, rtol=1e-13, atol=1e-13 * np.abs(a @ b).max())
    for pipeline in (2, 3, 9, 40):  # 40: more chunks than a rank has columns
        got, sent = work(pipeline)
        np.testing.assert_allclose(got, one, rtol=1e-14, atol=1e-14 * np.abs(one).max())
        assert sent == sent_one == [kd.strassen_bytes(18, 26, 34, size, r, 8)
                                    for r in range(size)]


def test_strassen_bytes_formula_by_hand():
    # 4 ranks, n/2 = k/2 = 8 (strips of 2 columns): Strassen–Winograd's 56 product columns,
    # 14 a rank; rank 0 owns Q0 and Q1[:, 0:6] and holds columns 0:2 of every T_i and S_i
    m2, k2, n2 = 5, 8, 8
    per = {}
    # to rank 1: T1, T2, T3 strips (5 × 2 each) + S2 cols 0:2 + S3 cols 0:2 (8 × 2 each)
    per[1] = 3 * m2 * 2 + 2 * k2 * 2
    # to rank 2 (Q3[:, 4:8], Q4, Q5[:, 0:2]): T3, T4, T5 strips + S4 cols 0:2 + S5 cols 0:2
    per[2] = 3 * m2 * 2 + 2 * k2 * 2
    # to rank 3 (Q5[:, 2:8], Q6): T5, T6 strips + S6 cols 0:2
    per[3] = 2 * m2 * 2 + k2 * 2
    # back from its own pieces Q0 (8 columns) and Q1[:, 0:6]: all but its own columns 0:2
    back = m2 * (8 - 2) + m2 * (6 - 2)
    assert kd.strassen_bytes(2 * m2, 2 * k2, 2 * n2, 4, 0, 8) == 8 * (sum(per.values()) + back)


def test_bad_input_same_error_on_every_thread_rank():
    rng = np.random.default_rng(1)
    factors = [rng.standard_normal((2, 2))] * 2
    x = rng.standard_normal((5, 4))

    def work(comm):
        fs = [f + (comm.rank == 2) for f in factors]
        return kd.kron_matmul(kd.kron_shard(x, (3, 1), comm.rank), fs, comm=comm, grid=(3, 1))

    out = run_ranks(3, work)
    assert all(isinstance(e, ValueError) for e in out)
    assert len({str(e) for e in out}) == 1 and "factors" in str(out[0])

    out = run_ranks(3, lambda comm: kd.kron_matmul(kd.kron_shard(x, (3, 1), comm.rank), factors,
                                                   comm=comm, grid=(3, 1), timeout=0.5),
                    skip=(1,))
    msgs = {str(e) for r, e in enumerate(out) if r != 1}
    assert len(msgs) == 1 and "within 0.5 s" in msgs.pop()

    with pytest.raises(ValueError, match="algorithm"):
        kd.kron_matmul(x, factors, comm=kd.SelfCommunicator(), grid=(1, 1), algorithm="x")
    with pytest.raises(TypeError, match="grid"):
        kd.kron_matmul(x, factors, comm=kd.SelfCommunicator(), grid=3)
    with pytest.raises(ValueError, match="pipeline"):
        kd.kron_matmul(x, factors, comm=kd.SelfCommunicator(), grid=(1, 1), pipeline=0)

    a = rng.standard_normal((4, 8))
    with pytest.raises(ValueError, match="pipeline: expected a positive count"):
        kd.strassen_matmul(a, a.T.copy(), comm=kd.SelfCommunicator(), pipeline=0)
    with pytest.raises(TypeError, match="pipeline: expected an int"):
        kd.strassen_matmul(a, a.T.copy(), comm=kd.SelfCommunicator(), pipeline=True)
    out = run_ranks(3, lambda comm: kd.strassen_matmul(
        kd.quadrant_shard(a, 3, comm.rank), kd.quadrant_shard(a.T.copy(), 3, comm.rank),
        comm=comm, pipeline=1 + (comm.rank == 1)))
    assert all(isinstance(e, ValueError) for e in out) and len({str(e) for e in out}) == 1
    assert str(out[0]).startswith("pipeline: the pipeline counts differ")


def test_calibrate_on_thread_ranks():
    out = run_ranks_ok(3, lambda comm: kd.calibrate(comm, nbytes=1 << 16, repeats=2,
                                                    install=False))
    assert all(r == out[0] for r in out)
    assert out[0]["latency_s"] >= 0 and out[0]["bandwidth"] > 0


# -- real processes: mpiexec and torch.distributed -------------------------------------------
def _mpiexec():
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def _launch(n, case, timeout=120):
    pytest.importorskip("mpi4py")
    mpiexec = _mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec next to the interpreter (pip install mpich)")
    # an Open MPI mpiexec (a system one) refuses root and more ranks than cores unless told;
    # MPICH's ignores these variables
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    return subprocess.run([mpiexec, "-n", str(n), sys.executable, "distributed_worker.py", case],
                          cwd=HERE, capture_output=True, text=True, timeout=timeout, env=env)


def _report(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, proc.stdout + proc.stderr
    return json.loads(lines[-1][7:])


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_mpi_kron_matmul(n):
    rep = _report(_launch(n, "kron"))
    assert rep["checked"] > 0 and rep["bytes_ok"]
    assert rep["max_rel"] < 1e-13
    if n > 1 and n != 3:
        assert rep["multi_round"] > 0
    for row in rep["paper"]:
        assert row["sent"] == row["count"], row
        if row["exact"]:
            assert row["sent"] == pytest.approx(row["paper"]), row


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7])
def test_mpi_strassen_winograd(n):
    rep = _report(_launch(n, "strassen"))
    assert rep["checked"] == 12 and rep["bytes_ok"]


@pytest.mark.parametrize("case,argument", [("bad_shapes", "x: every rank must hold"),
                                           ("bad_rows", "x: the row blocks"),
                                           ("bad_factors", "factors: the factors"),
                                           ("missing_rank", "comm: not every rank"),
                                           ("strassen_bad", "b: rank 0 holds")])
def test_mpi_bad_input_same_error_everywhere(case, argument):
    proc = _launch(3, case, timeout=60)
    # the ranks' lines reach mpiexec's stdout interleaved, at times two on one line
    errs = {int(m[1]): m[2] for m in re.finditer(r"ERR (\d+) (.*?)(?=ERR \d+ |\n|$)",
                                                  proc.stdout)}
    ranks = {0, 1} if case == "missing_rank" else {0, 1, 2}
    assert set(errs) == ranks, proc.stdout + proc.stderr
    assert len(set(errs.values())) == 1, errs
    assert errs[0].startswith(argument), errs[0]


def test_torch_gloo():
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "distributed_worker.py", "torch_gloo"],
                          cwd=HERE, capture_output=True, text=True, timeout=120)
    rep = _report(proc)
    assert rep["type"] == "Tensor"
    assert rep["kron"] < 1e-12 and rep["strassen"] < 1e-12
