"""kronlinalg.distributed on several GPUs (one process per GPU, torchrun, NCCL), or a CPU dry
run (gloo, small sizes: --cpu).

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 4 benchmarks/distributed_gpu.py

One launch; sub-groups of 1, 2 and 4 ranks run the weak-scaling points (the other ranks wait):
- Kron-Matmul float32, M = 1024 rows per GPU (M = 1024 · G), K = 16^5 and 32^4: the grid the
  cost model picks, and the column split (1, G) by "fastkron" (local rounds, one exchange per
  round) against "per_factor" (an exchange after every factor); parallel efficiency =
  t(1 GPU, M = 1024) / t(G GPUs, M = 1024 · G).
- 1024 × 16^6 (68.7 GB of X: too big for one GPU) on 4 GPUs against one GPU's 256 × 16^6
  (the same work per GPU).
- Strassen–Winograd FP64 N = 32768 on 4 GPUs against one GPU's torch.matmul (cuBLAS DGEMM) and
  the classical 2 × 2 split on the same 4 GPUs.
Correctness first: each distributed result is compared with one process's on small sizes.
Writes distributed_gpu.json and distributed_gpu.md to $OUT (rank 0).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import kronlinalg
from kronlinalg import distributed as kd

CPU = "--cpu" in sys.argv
OUT = os.environ.get("OUT", "/tmp/out")
# ONLY=strassen: the correctness check, the link and the Strassen–Winograd part alone
ONLY = os.environ.get("ONLY", "")
# column chunks of the Strassen engine (1: no overlap); STRASSEN_PIPELINES=1,4 to shorten
PIPELINES = tuple(int(k) for k in os.environ.get("STRASSEN_PIPELINES", "1,2,4,8,16").split(","))
# Strassen–Winograd's variants timed, leaf:levels (the classical split: one level, the library
# leaf: the baseline); names strassen_winograd[_L<levels>][_leaf<leaf>]
SW_VARIANTS = tuple((v.split(":")[0], int(v.split(":")[1])) for v in os.environ.get(
    "SW_VARIANTS", "library:1,library:2,strassen:1").split(","))


def variant_name(alg, levels, leaf="library"):
    return (alg + ("" if levels == 1 else f"_L{levels}")
            + ("" if leaf == "library" else f"_leaf{leaf}"))
HP_PIPELINES = tuple(int(k) for k in os.environ.get("HP_PIPELINES", "1,4,8").split(","))


def log(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def sync():
    if not CPU:
        torch.cuda.synchronize()


def timed(fn, group, reps, warm=1):
    """Median over reps of the slowest rank's time (seconds)."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        dist.barrier(group=group)
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=DEV)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        times.append(float(t))
    return statistics.median(times)


def randn(shape, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(shape, dtype=dtype, device=DEV, generator=g)


def check_correct(groups):
    """Small problems: distributed == one process, on every group size."""
    out = {}
    for g, (grp, members) in groups.items():
        if dist.get_rank() not in members:
            continue
        r = members.index(dist.get_rank())
        shapes = [(4, 8), (8, 4), (8, 8)]
        fs = [randn(s, torch.float64, 10 + i) for i, s in enumerate(shapes)]
        x = randn((37, 256), torch.float64, 3)
        ref = kronlinalg.kron_matmul(x, fs)
        errs = []
        for grid in [(g // d, d) for d in range(1, g + 1) if g % d == 0]:
            for alg in ("fastkron", "per_factor"):
                y = kd.kron_matmul(kd.kron_shard(x, grid, r).contiguous(), fs, comm=grp,
                                   grid=grid, algorithm=alg)
                want = kd.kron_shard(ref, grid, r)
                errs.append(float((y - want).abs().max() / ref.abs().max()))
        a, b = randn((512, 384), torch.float64, 4), randn((384, 256), torch.float64, 5)
        for alg in ("strassen_winograd", "classical"):
            c = kd.strassen_matmul(kd.quadrant_shard(a, g, r).contiguous(),
                                   kd.quadrant_shard(b, g, r).contiguous(), comm=grp, algorithm=alg)
            want = kd.quadrant_shard(a @ b, g, r)
            errs.append(float((c - want).abs().max() / (a @ b).abs().max()))
        out[g] = max(errs)
    return out


def cupy_nccl_check():
    """The CuPy NCCL adapter: kron_matmul and strassen_matmul on CuPy arrays, all ranks."""
    try:
        import cupy
        from cupy.cuda import nccl

        rank, world = dist.get_rank(), dist.get_world_size()
        uid = [nccl.get_unique_id() if rank == 0 else None]
        dist.broadcast_object_list(uid, src=0)
        comm = nccl.NcclCommunicator(world, uid[0], rank)
        rng = cupy.random.default_rng(5)
        fs = [rng.standard_normal((8, 8)) for _ in range(3)]
        x = rng.standard_normal((37, 512))
        ref = kronlinalg.kron_matmul(x, fs)
        grid = (1, world)
        y = kd.kron_matmul(cupy.ascontiguousarray(kd.kron_shard(x, grid, rank)), fs, comm=comm,
                           grid=grid)
        err = float(cupy.abs(y - kd.kron_shard(ref, grid, rank)).max() / cupy.abs(ref).max())
        a, b = rng.standard_normal((256, 128)), rng.standard_normal((128, 64))
        c = kd.strassen_matmul(kd.quadrant_shard(a, world, rank), kd.quadrant_shard(b, world, rank),
                               comm=comm)
        err2 = float(cupy.abs(c - kd.quadrant_shard(a @ b, world, rank)).max())
        t = torch.tensor([max(err, err2)], device=DEV, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t)
    except Exception as e:  # noqa: BLE001 - reported, the benchmark goes on
        return f"failed: {type(e).__name__}: {e}"


def kron_point(grp, members, m_total, p, n, grid, alg, reps, pipeline=1):
    r = members.index(dist.get_rank())
    k = p ** n
    rows = kd.rows_split(m_total, grid[0], r // grid[1])
    x = randn((rows[1] - rows[0], k // grid[1]), torch.float32, 100 + r)
    fs = [randn((p, p), torch.float32, 7 + i) / p ** 0.5 for i in range(n)]
    comm = kd.communicator(grp)
    fn = (lambda: kd.kron_matmul(x, fs, comm=comm, grid=grid, algorithm=alg, pipeline=pipeline))
    t = timed(fn, grp, reps)
    del x
    if not CPU:
        torch.cuda.empty_cache()
    return t


def main():
    global DEV
    dist.init_process_group("gloo" if CPU else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if CPU:
        DEV = torch.device("cpu")
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        DEV = torch.device("cuda", torch.cuda.current_device())
    sizes = [g for g in (1, 2, 4) if g <= world]
    groups = {}
    for g in sizes:  # every rank makes every group (new_group is collective)
        members = list(range(g))
        groups[g] = (dist.new_group(members), members)
    res = {"device": torch.cuda.get_device_name() if not CPU else "cpu", "ranks": world,
           "correct_max_rel": check_correct(groups)}
    log("correctness (max rel. error by group size):", res["correct_max_rel"])
    link = kd.calibrate(groups[world][0], like=torch.empty(1, device=DEV),
                        nbytes=(1 << 20) if CPU else (1 << 28))
    res["link"] = link
    log("link:", link)
    m_row = 64 if CPU else 1024
    cases = [(16, 3), (8, 4)] if CPU else [(16, 5), (32, 4)]
    reps = 3 if CPU else 10
    rows = []
    for p, n in ([] if ONLY == "strassen" else cases):
        base = None
        for g in sizes:
            grp, members = groups[g]
            entry = {"case": f"{m_row * g} x {p}^{n}", "gpus": g}
            if rank in members:
                auto = kd.kron_grid(m_row * g, [(p, p)] * n, g, dtype="float32",
                                    device="cpu" if CPU else "cuda",
                                    latency_s=link["latency_s"], bandwidth=link["bandwidth"])
                entry["auto_grid"] = list(auto)
                entry["t_auto"] = kron_point(grp, members, m_row * g, p, n, auto, "fastkron", reps)
                if g > 1:
                    entry["t_split_fastkron"] = kron_point(grp, members, m_row * g, p, n, (1, g),
                                                           "fastkron", reps)
                    entry["t_split_per_factor"] = kron_point(grp, members, m_row * g, p, n, (1, g),
                                                             "per_factor", reps)
                    entry["t_split_fastkron_pipeline4"] = kron_point(
                        grp, members, m_row * g, p, n, (1, g), "fastkron", reps, pipeline=4)
            dist.barrier()
            if rank == 0:
                if g == 1:
                    base = entry["t_auto"]
                entry["efficiency_auto"] = base / entry["t_auto"]
                if g > 1:
                    entry["efficiency_split"] = base / entry["t_split_fastkron"]
                    entry["speedup_vs_per_factor"] = (entry["t_split_per_factor"]
                                                      / entry["t_split_fastkron"])
                rows.append(entry)
                log(entry)
    res["kron_weak"] = rows
    save(res)
    # Strassen–Winograd FP64
    n_mm = 1024 if CPU else 32768
    if world >= 4:
        res["strassen"] = strassen_part(groups, n_mm, rank)
        save(res)
        if not CPU:  # after the save: a failure here loses nothing measured above
            res["strassen_high_priority"] = high_priority_part(n_mm, rank)
    save(res)
    # too big for one GPU: 1024 x 16^6 on 4 GPUs vs one GPU's 256 x 16^6
    big_m, big_p, big_n = (64, 8, 5) if CPU else (1024, 16, 6)
    if world >= 4 and ONLY != "strassen":
        grp, members = groups[4]
        one = kron_point(groups[1][0], [0], big_m // 4, big_p, big_n, (1, 1), "fastkron",
                         3) if rank == 0 else None
        dist.barrier()
        entry = {"case": f"{big_m} x {big_p}^{big_n}", "gpus": 4,
                 "t_one_gpu_quarter_rows": one}
        for grid in ((4, 1), (1, 4)):
            for alg in (("fastkron", "per_factor") if grid[1] > 1 else ("fastkron",)):
                try:
                    entry[f"t_{grid[0]}x{grid[1]}_{alg}"] = kron_point(grp, members, big_m, big_p,
                                                                      big_n, grid, alg, 3)
                except torch.OutOfMemoryError as e:
                    entry[f"t_{grid[0]}x{grid[1]}_{alg}"] = f"OOM: {str(e)[:80]}"
                    torch.cuda.empty_cache()
        if rank == 0:
            for key in list(entry):
                if key.startswith("t_4") or key.startswith("t_1x4"):
                    if isinstance(entry[key], float):
                        entry["eff_" + key[2:]] = one / entry[key]
            log(entry)
        res["kron_big"] = entry
    save(res)
    if not CPU and ONLY != "strassen":
        res["cupy_nccl"] = cupy_nccl_check()
        log("cupy nccl adapter:", res["cupy_nccl"])
    if rank == 0:
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, "distributed_gpu.json"), "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.join(OUT, "distributed_gpu.md"), "w") as f:
            f.write(markdown(res))
        print(markdown(res), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def strassen_part(groups, n_mm, rank):
    """FP64 N × N on 4 ranks: Strassen–Winograd and the classical split, each without
    (pipeline=1) and with the exchanges overlapping the products (pipeline=k), one GPU's
    torch.matmul, and one half-size product a rank alone (the products' floor)."""
    grp, members = groups[4]
    g = 4
    r = members.index(rank)
    a = randn((n_mm, n_mm // 2 // g * 2), torch.float64, 200 + r)
    b = randn((n_mm, n_mm // 2 // g * 2), torch.float64, 300 + r)
    comm = kd.communicator(grp)
    variants = [("classical", 1, "library")] + [("strassen_winograd", lv, leaf)
                                                for leaf, lv in SW_VARIANTS]
    sw = {"pipelines": list(PIPELINES), "n": n_mm,
          "variants": [variant_name(*v) for v in variants]}
    for alg, lv, leaf in variants:
        name = variant_name(alg, lv, leaf)
        for k in PIPELINES:
            comm.reset_counters()
            t = timed(lambda: kd.strassen_matmul(a, b, comm=comm, algorithm=alg, levels=lv,
                                                 leaf=leaf, pipeline=k), grp, 5)
            sw[f"{name}_p{k}"] = t
            sw[f"{name}_p{k}_bytes_per_call"] = comm.bytes_sent / 6
            log(f"strassen: {name} pipeline={k}: {t * 1e3:.1f} ms")
        if len(PIPELINES) > 1:  # the overlap changes no value: pipeline=4 against 1
            one = kd.strassen_matmul(a, b, comm=comm, algorithm=alg, levels=lv, leaf=leaf,
                                     pipeline=1)
            four = kd.strassen_matmul(a, b, comm=comm, algorithm=alg, levels=lv, leaf=leaf,
                                      pipeline=4)
            diff = torch.tensor([float((one - four).abs().max() / one.abs().max())],
                                device=DEV, dtype=torch.float64)
            dist.all_reduce(diff, op=dist.ReduceOp.MAX, group=grp)
            sw[f"{name}_p4_vs_p1_max_rel"] = float(diff)
            del one, four
        if not CPU:
            torch.cuda.empty_cache()
    # the floor: one product of half-size blocks a rank (all ranks at once), no exchange
    h = n_mm // 2
    x, y = randn((h, h), torch.float64, 400 + r), randn((h, h), torch.float64, 500 + r)
    sw["one_product_per_rank"] = timed(lambda: torch.matmul(x, y), grp, 3)
    # the same through the single-GPU strassen_matmul (the planner's choice): the leaf of
    # leaf="strassen", all ranks at once
    sw["one_product_per_rank_strassen"] = timed(lambda: kronlinalg.strassen_matmul(x, y), grp, 3)
    log(f"strassen: one half-size product a rank: torch.matmul "
        f"{sw['one_product_per_rank'] * 1e3:.1f} ms, strassen_matmul "
        f"{sw['one_product_per_rank_strassen'] * 1e3:.1f} ms")
    del x, y, a, b
    if not CPU:
        torch.cuda.empty_cache()
    dist.barrier()
    if rank == 0:
        A = randn((n_mm, n_mm), torch.float64, 1)
        B = randn((n_mm, n_mm), torch.float64, 2)
        sw["one_gpu_matmul"] = timed(lambda: torch.matmul(A, B), groups[1][0], 3)
        del A, B
        names = sw["variants"]
        best = {nm: min(PIPELINES, key=lambda k: sw[f"{nm}_p{k}"]) for nm in names}
        sw["best_pipeline"] = best
        for nm in names:
            sw[nm] = sw[f"{nm}_p{best[nm]}"]
            if nm != "classical":
                sw[f"{nm}_vs_one_gpu"] = sw["one_gpu_matmul"] / sw[nm]
                sw[f"{nm}_vs_classical"] = sw["classical"] / sw[nm]
                sw[f"{nm}_vs_classical_p1"] = sw["classical_p1"] / sw[nm]
        if "strassen_winograd" in sw:
            sw["speedup_vs_one_gpu"] = sw["one_gpu_matmul"] / sw["strassen_winograd"]
            sw["speedup_vs_classical"] = sw["classical"] / sw["strassen_winograd"]
            sw["speedup_vs_classical_p1"] = sw["classical_p1"] / sw["strassen_winograd"]
        sw["floor_strassen_winograd"] = 1.75 * sw["one_product_per_rank"]
        sw["floor_classical"] = 2.0 * sw["one_product_per_rank"]
        log("strassen:", sw)
    dist.barrier()
    return sw


def high_priority_part(n_mm, rank):
    """The overlap again on a 4-rank group whose NCCL stream has high priority (its thread
    blocks go before the DGEMM's waiting ones as SMs free up): SW and classical at pipeline
    1, 4 and 8.  Not yet run on GPUs."""
    try:
        opts = dist.ProcessGroupNCCL.Options()
        opts.is_high_priority_stream = True
    except (AttributeError, TypeError) as e:  # the same on every rank: no collective yet
        return f"no ProcessGroupNCCL.Options: {e}"
    grp = dist.new_group(list(range(4)), pg_options=opts)
    if rank >= 4:
        return None
    a = randn((n_mm, n_mm // 2 // 4 * 2), torch.float64, 200 + rank)
    b = randn((n_mm, n_mm // 2 // 4 * 2), torch.float64, 300 + rank)
    comm = kd.communicator(grp)
    out = {}
    for alg, lv, leaf in [("classical", 1, "library")] + [("strassen_winograd", lv, leaf)
                                                          for leaf, lv in SW_VARIANTS]:
        name = variant_name(alg, lv, leaf)
        for k in HP_PIPELINES:
            out[f"{name}_p{k}"] = timed(
                lambda: kd.strassen_matmul(a, b, comm=comm, algorithm=alg, levels=lv,
                                           leaf=leaf, pipeline=k), grp, 5)
            log(f"strassen, high-priority NCCL stream: {name} pipeline={k}: "
                f"{out[f'{name}_p{k}'] * 1e3:.1f} ms")
    del a, b
    torch.cuda.empty_cache()
    return out


def save(res):
    if dist.get_rank() == 0:
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, "distributed_gpu.json"), "w") as f:
            json.dump(res, f, indent=1)


def markdown(res):
    ms = lambda t: f"{t * 1e3:.2f}" if isinstance(t, float) else str(t)  # noqa: E731
    lines = [f"device: {res['device']} × {res['ranks']}; link: latency "
             f"{res['link']['latency_s'] * 1e6:.1f} us, {res['link']['bandwidth'] / 1e9:.1f} GB/s "
             "a rank (all-to-all)"]
    if res.get("kron_weak"):
        lines += ["", "| case | GPUs | grid (model) | t model grid ms | eff. | t (1,G) fastkron ms | "
                  "eff. | t (1,G) per_factor ms | fastkron speed-up |",
                  "|---|---|---|---|---|---|---|---|---|"]
    for e in res.get("kron_weak", []):
        lines.append(f"| {e['case']} | {e['gpus']} | {tuple(e['auto_grid'])} | {ms(e['t_auto'])} | "
                     f"{e['efficiency_auto']:.0%} | {ms(e.get('t_split_fastkron', '-'))} | "
                     f"{e['efficiency_split']:.0%} | " if e["gpus"] > 1 else
                     f"| {e['case']} | 1 | {tuple(e['auto_grid'])} | {ms(e['t_auto'])} | 100% | - | - | ")
        lines[-1] += (f"{ms(e['t_split_per_factor'])} | {e['speedup_vs_per_factor']:.2f}× |"
                      if e["gpus"] > 1 else "- | - |")
    if "kron_big" in res:
        lines += ["", "big: " + json.dumps(res["kron_big"])]
    if "strassen" in res and "one_gpu_matmul" in res["strassen"]:
        s = res["strassen"]
        lines += ["", f"FP64 N = {s['n']}, 4 ranks; one GPU torch.matmul {ms(s['one_gpu_matmul'])} "
                  f"ms; one half-size product a rank {ms(s['one_product_per_rank'])} ms (floor: "
                  f"SW 1.75×, classical 2×)", "",
                  "| variant | pipeline | ms | vs classical (same k) | vs classical best | "
                  "vs 1 GPU |", "|---|---|---|---|---|---|"]
        for nm in s.get("variants", ["classical", "strassen_winograd"]):
            for k in s["pipelines"]:
                t, cl_t = s[f"{nm}_p{k}"], s[f"classical_p{k}"]
                lines.append(f"| {nm} | {k} | {ms(t)} | {cl_t / t:.3f}× | "
                             f"{s['classical'] / t:.3f}× | {s['one_gpu_matmul'] / t:.2f}× |")
        lines += ["", f"best pipeline: {s['best_pipeline']}; pipeline 4 vs 1 max rel. "
                  "difference: " + ", ".join(f"{key[:-17]} {v:.1e}" for key, v in s.items()
                                              if key.endswith("_p4_vs_p1_max_rel"))]
    if isinstance(res.get("strassen_high_priority"), dict):
        hp = res["strassen_high_priority"]
        lines += ["", "high-priority NCCL stream: " + ", ".join(
            f"{key} {ms(t)} ms" for key, t in hp.items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
