"""One rank of tests/test_distributed.py: run as ``mpiexec -n K python distributed_worker.py
CASE`` (or under torch.distributed with CASE torch_gloo).  Rank 0 prints one JSON line with
what the test asserts; every rank prints its error message (ERR <rank> <message>) for the
bad-input cases."""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

import kronlinalg
from kronlinalg import distributed as kd


def _random_factor_shapes(rng, g_k):
    """Distinct (P_i, Q_i) with a schedule on g_k column blocks (some need several rounds)."""
    menu = [2, 3, 4, 6]
    for _ in range(200):
        n = int(rng.integers(2, 5))
        shapes = [(int(rng.choice(menu)), int(rng.choice(menu))) for _ in range(n)]
        k = math.prod(p for p, _ in shapes)
        if k > 600 or math.prod(q for _, q in shapes) > 600:
            continue
        try:
            kd.kron_rounds(shapes, (1, g_k))
            kd.kron_rounds(shapes, (1, g_k), "per_factor")
        except ValueError:
            continue
        return shapes
    raise RuntimeError("no factor shapes found")


def case_kron(comm, c):
    rank, size = c.rank, c.size
    rng = np.random.default_rng(1234 + size)
    report = {"checked": 0, "max_rel": 0.0, "bytes_ok": True, "multi_round": 0, "paper": []}
    for grid in [(size // d, d) for d in range(1, size + 1) if size % d == 0]:
        for trial in range(3):
            shapes = _random_factor_shapes(rng, grid[1])
            m = int(rng.integers(1, 4)) * grid[0] + int(rng.integers(1, grid[0] + 1))
            k = math.prod(p for p, _ in shapes)
            factors = [rng.standard_normal(s) for s in shapes]
            x = rng.standard_normal((m, k))
            ref = x @ _dense(factors)
            for alg in ("fastkron", "per_factor"):
                for dtype in (np.float64, np.float32):
                    c.reset_counters()
                    xs = np.ascontiguousarray(kd.kron_shard(x.astype(dtype), grid, rank))
                    before = xs.copy()
                    fs = [f.astype(dtype) for f in factors]
                    y = kd.kron_matmul(xs, fs, comm=c, grid=grid, algorithm=alg,
                                       pipeline=1 + trial % 2)  # 2: parts overlap
                    assert np.array_equal(xs, before), "input modified"
                    want = kd.kron_bytes(m, shapes, grid, rank, np.dtype(dtype).itemsize, alg)
                    report["bytes_ok"] &= c.bytes_sent == want
                    blocks = comm.allgather(np.asarray(y))
                    full = kd.kron_assemble(blocks, grid, np)
                    rel = np.linalg.norm(full - ref) / np.linalg.norm(ref)
                    tol = 1e-12 if dtype == np.float64 else 1e-5
                    if not rel < tol:
                        raise AssertionError(f"grid {grid} {alg} {dtype} {shapes} m={m}: {rel}")
                    report["max_rel"] = max(report["max_rel"], float(rel) if dtype == np.float64 else 0)
                    report["checked"] += 1
                    if len(kd.kron_rounds(shapes, grid, alg)) > 1 and grid[1] > 1:
                        report["multi_round"] += 1
    # the paper's count, P = Q: G_M · TG_M · (K − TG_K) values per round, ⌈N / N_local⌉
    # rounds, N_local = ⌊log_P TG_K⌋ (FastKron writes N / log_P TG_K: equal where it divides)
    for p, n in ((4, 4), (2, 4), (3, 3)):
        for grid in [(size // d, d) for d in range(2, size + 1) if size % d == 0]:
            tg_m, k = 3, p ** n
            m = tg_m * grid[0]
            try:
                rounds = kd.kron_rounds([(p, p)] * n, grid)
            except ValueError:
                continue
            c.reset_counters()
            x = rng.standard_normal((m, k))
            y = kd.kron_matmul(np.ascontiguousarray(kd.kron_shard(x, grid, rank)),
                               [np.eye(p)] * n, comm=c, grid=grid)
            assert np.allclose(np.asarray(y), kd.kron_shard(x, grid, rank))
            total = comm.allreduce(c.bytes_sent) // 8
            tg_k = k // grid[1]
            n_local = 0
            while p ** (n_local + 1) <= tg_k and tg_k % p ** (n_local + 1) == 0:
                n_local += 1
            count = grid[0] * tg_m * (k - tg_k) * -(-n // n_local)
            paper = grid[0] * n * tg_m * (k - tg_k) / math.log(tg_k, p)
            report["paper"].append({"p": p, "n": n, "grid": list(grid), "sent": total,
                                    "count": count, "paper": paper,
                                    "exact": n % n_local == 0, "rounds": len(rounds)})
    return report


def _dense(factors):
    out = factors[0]
    for f in factors[1:]:
        out = np.kron(out, f)
    return out


def case_strassen(comm, c):
    rank, size = c.rank, c.size
    rng = np.random.default_rng(99 + size)
    report = {"checked": 0, "ratios": [], "bytes_ok": True}
    for m, k, n in ((14, 10, 12), (32, 32, 32), (2 * size + 6, 2 * size + 2, 4 * size + 2)):
        a = rng.standard_normal((m, k))
        b = rng.standard_normal((k, n))
        ref = a @ b
        for dtype in (np.float64, np.float32):
            res = {}
            for alg in ("classical", "strassen_winograd"):
                a_s = kd.quadrant_shard(a.astype(dtype), size, rank)
                b_s = kd.quadrant_shard(b.astype(dtype), size, rank)
                c.reset_counters()
                pipeline = 1 + report["checked"] % 3  # 2, 3: chunks in flight beside products
                c_s = kd.strassen_matmul(a_s, b_s, comm=c, algorithm=alg, pipeline=pipeline)
                want = kd.strassen_bytes(m, k, n, size, rank, np.dtype(dtype).itemsize, alg)
                report["bytes_ok"] &= c.bytes_sent == want
                full = kd.quadrant_assemble(comm.allgather(np.asarray(c_s)), np)
                assert full.dtype == dtype, full.dtype
                res[alg] = float(np.abs(full - ref).max() / (np.abs(a).max() * np.abs(b).max() * k))
                report["checked"] += 1
            eps = float(np.finfo(dtype).eps)
            # one Strassen level: error within 2·3 × classical's (the single-GPU bound), and
            # both near rounding
            assert res["classical"] < 4 * eps, res
            assert res["strassen_winograd"] < 2 * 3 * max(res["classical"], eps), res
            report["ratios"].append(res["strassen_winograd"] / max(res["classical"], eps))
    return report


def case_bad(comm, c, what):
    rank, size = c.rank, c.size
    rng = np.random.default_rng(5)
    factors = [rng.standard_normal((2, 3)), rng.standard_normal((4, 2))]
    x = rng.standard_normal((7, 8))
    grid = (size, 1)
    xs = kd.kron_shard(x, grid, rank)
    kwargs = {}
    if what == "bad_shapes" and rank == size - 1:
        xs = xs[:, :-1]  # one rank's block is a column short
    if what == "bad_rows" and rank == 0:
        xs = np.concatenate([xs, xs], axis=0)
    if what == "bad_factors" and rank == size - 1:
        factors = [factors[0], factors[1] + 1e-13]  # differ in the last bits on one rank
    if what == "missing_rank":
        kwargs["timeout"] = 2.0
        if rank == size - 1:
            time.sleep(3.0)
            # join late with the same metadata size so the others' collective completes
            from mpi4py import MPI  # noqa: F401

            comm.Iallgather(np.zeros(24, np.int64), np.empty((size, 24), np.int64)).Wait()
            return {"missing": True}
    try:
        kd.kron_matmul(xs, factors, comm=comm, grid=grid, **kwargs)
        print(f"ERR {rank} none", flush=True)
    except ValueError as e:
        print(f"ERR {rank} {e}", flush=True)
    return {}


def case_strassen_bad(comm, c):
    rank, size = c.rank, c.size
    a = np.ones((8, 8))
    a_s = kd.quadrant_shard(a, size, rank)
    b_s = kd.quadrant_shard(a, size, rank)
    if rank == 0:
        b_s = np.concatenate([b_s, b_s], axis=1)
    try:
        kd.strassen_matmul(a_s, b_s, comm=comm)
        print(f"ERR {rank} none", flush=True)
    except ValueError as e:
        print(f"ERR {rank} {e}", flush=True)
    return {}


def main():
    case = sys.argv[1]
    if case == "torch_gloo":
        return torch_gloo()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    c = kd.communicator(comm)
    if case == "kron":
        report = case_kron(comm, c)
    elif case == "strassen":
        report = case_strassen(comm, c)
    elif case == "strassen_bad":
        report = case_strassen_bad(comm, c)
    else:
        report = case_bad(comm, c, case)
    comm.Barrier()
    if c.rank == 0:
        print("REPORT " + json.dumps(report), flush=True)


def torch_gloo():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(7)
    shapes = [(2, 3), (2, 2), (3, 4)]
    factors = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    x = torch.randn(5, 12, generator=g, dtype=torch.float64)
    grid = (1, size)
    y = kd.kron_matmul(kd.kron_shard(x, grid, rank).contiguous(), factors, comm=None, grid=grid)
    parts = [torch.empty_like(y) for _ in range(size)]
    dist.all_gather(parts, y.contiguous())
    full = kd.kron_assemble(parts, grid)
    ref = kronlinalg.kron_matmul(x, factors)
    a = torch.randn(12, 10, generator=g, dtype=torch.float64)
    b = torch.randn(10, 8, generator=g, dtype=torch.float64)
    cs = kd.strassen_matmul(kd.quadrant_shard(a, size, rank), kd.quadrant_shard(b, size, rank),
                            comm=None)
    cparts = [torch.empty_like(cs) for _ in range(size)]
    dist.all_gather(cparts, cs.contiguous())
    cfull = kd.quadrant_assemble(cparts)
    if rank == 0:
        print("REPORT " + json.dumps({"kron": float((full - ref).abs().max()),
                                      "strassen": float((cfull - a @ b).abs().max()),
                                      "type": type(full).__name__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0) if os.environ.get("KL_WORKER_HARD_EXIT") else None
