"""kronlinalg.tensor against TensorLy 0.10 (torch and CuPy backends) on one GPU, float32.

Same initialisation and iteration count on both sides.  Per-iteration times of CP-ALS are the
difference between a run of HI and a run of LO iterations, divided by HI − LO (setup and
initialisation cancel), median of repeats, CUDA-synchronised wall clock.  Fits are the real
1 − ‖X − X̂‖/‖X‖ computed in float64 from the returned factors.

    python benchmarks/tensor_gpu.py --out tensor.json [--budget 150] [--cpu]

--cpu: the CPU comparison instead (160³ rank 16 against TensorLy-NumPy; run it under
OMP_NUM_THREADS=2 taskset -c 0,1 for the 2-core figure).  Writes JSON and a markdown table
beside it (same name, .md) after every section, so a run cut short still reports.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import numpy as np

from kronlinalg import tensor as kt
from kronlinalg.tensor import fused, scaling, solve

RESULTS: dict = {"sections": {}}
# parafac's variants timed at 640³ rank 64 (--cp-modes replaces them).  A variant's tags set
# every switch, whatever the library's defaults (a switch not tagged is off): the defaults
# are tf32-pf-fk-sg-sc-iv-fg, float16-hv2-hy-pf-fk-gs-gl-sg-sc-iv-fs-fg and
# bfloat16-hv2-hy-pf-fk-bc-sg-sc-fs-fg (no -iv for bfloat16; see cp_section)
CP_MODES = ["tf32-pf-fk-sg-sc-iv-fg", "tf32-pf-fk", "tf32", "tf32-nopipe", "tf32-lu",
            "tf32-library", "ieee", "float16-hv2-hy-pf-fk-gs-gl-sg-sc-iv-fs-fg",
            "float16-hv2-hy-pf-fk", "float16-old", "bfloat16-hv2-hy-pf-fk-bc-sg-sc-fs-fg",
            "bfloat16-hv2-hy-pf-fk", "bfloat16-old"]
HALF_DEFAULTS = (fused.HALF, fused.DEFER_SCALE, fused.HALF_INTERMEDIATE, fused.HALF_VARIANT,
                 solve.PREFACTOR, fused.HALF_CONTRACT, solve.FIT_KERNEL, scaling.KERNEL)
SWEEP_DEFAULTS = (fused.GRAM_SCALE, scaling.GRAM_LHS, scaling.BF16_CAST, kt.cp_als.SIDE_GRAMS,
                  kt.cp_als.SIDE_COPY, solve.INVERSE, fused.FOLD_SCALE, solve.FIT_GRAM)
# the sweeps profiled kernel by kernel in the half section (--profile-modes replaces them)
PROFILE_MODES = ["float16-hv2-hy-pf-fk", "float16-hv2-hy-pf-fk-gs-gl-sg-sc-iv-fs-fg",
                 "bfloat16-hv2-hy-pf-fk-bc-sg-sc-iv-fs-fg", "tf32-pf-fk",
                 "tf32-pf-fk-sg-sc-iv-fg"]
ROWS: list = []
START = time.perf_counter()


def apply_tags(variant):
    """Set every switch of parafac's paths from a variant's tags (see cp_section; a switch not
    tagged is off); returns the precision (the variant's first word)."""
    tags = variant.split("-")[1:]
    fused.ENABLED = "library" not in tags
    fused.VARIANT = 1 if "v1" in tags else 0
    fused.HALF = not ("old" in tags or "nokernel" in tags)
    fused.DEFER_SCALE = "old" not in tags
    fused.HALF_INTERMEDIATE = "hy" in tags or "hyb" in tags
    fused.HALF_VARIANT = 1 if "hv1" in tags else 2 if "hv2" in tags else 0
    fused.HALF_CONTRACT = "hyb" not in tags
    solve.PREFACTOR = "pf" in tags
    solve.FIT_KERNEL = "fk" in tags
    scaling.KERNEL = "sk" in tags
    fused.GRAM_SCALE = "gs" in tags
    scaling.GRAM_LHS = "gl" in tags
    scaling.BF16_CAST = "bc" in tags
    kt.cp_als.SIDE_GRAMS = "sg" in tags
    kt.cp_als.SIDE_COPY = "sc" in tags
    solve.INVERSE = "iv" in tags
    fused.FOLD_SCALE = "fs" in tags
    solve.FIT_GRAM = "fg" in tags
    solve.SOLVER = "lu" if "lu" in tags else "cholesky" if "cholesky" in tags else "auto"
    solve.VARIANT = 0 if "s0" in tags else 1
    kt.cp_als.PIPELINE = "nopipe" not in tags
    return variant.split("-")[0]


def restore_defaults():
    fused.ENABLED, fused.VARIANT, solve.SOLVER = True, 0, "auto"
    solve.VARIANT, kt.cp_als.PIPELINE = 1, True
    (fused.HALF, fused.DEFER_SCALE, fused.HALF_INTERMEDIATE, fused.HALF_VARIANT,
     solve.PREFACTOR, fused.HALF_CONTRACT, solve.FIT_KERNEL, scaling.KERNEL) = HALF_DEFAULTS
    (fused.GRAM_SCALE, scaling.GRAM_LHS, scaling.BF16_CAST, kt.cp_als.SIDE_GRAMS,
     kt.cp_als.SIDE_COPY, solve.INVERSE, fused.FOLD_SCALE, solve.FIT_GRAM) = SWEEP_DEFAULTS


def elapsed():
    return time.perf_counter() - START


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def wall(fn, reps=5, warm=1):
    for _ in range(warm):
        fn()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def events(fn, reps=20):
    """GPU time of fn (CUDA events around reps back-to-back calls, warm), seconds per call."""
    import torch

    fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3 / reps


def per_iteration(run, lo, hi, reps=3):
    """(seconds per iteration, the result of the last hi run)."""
    run(lo)
    sync()
    ts, res = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        run(lo)
        sync()
        t1 = time.perf_counter()
        res = run(hi)
        sync()
        t2 = time.perf_counter()
        ts.append(((t2 - t1) - (t1 - t0)) / (hi - lo))
    return statistics.median(ts), res


def per_iteration_cb(run, lo, hi, reps=3):
    """(seconds per iteration, the result of the last run) from the times at which parafac's
    callback reports iterations lo…hi of one run (each report follows that iteration's host
    synchronisation): the setup, the initialisation and the CUDA graph's capture, whose time
    varies by milliseconds between runs, stay out of the difference."""
    run(lo, None)
    sync()
    ts, res = [], None
    for _ in range(reps):
        stamps = []
        res = run(hi, lambda i, fit: stamps.append(time.perf_counter()))
        sync()
        ts.append((stamps[hi - 1] - stamps[lo - 1]) / (hi - lo))
    return statistics.median(ts), res


def fit_of(x64, cp_tensor):
    """1 − ‖X − X̂‖/‖X‖ in float64, X̂ rebuilt in slabs of mode 0 (the full Khatri–Rao product
    of N−1 factors of the gene tensor at R = 1000 would take 135 GiB)."""
    import torch

    w, fs = cp_tensor
    fs = [torch.as_tensor(f).to(x64.device, torch.float64) for f in fs]
    if w is not None:
        fs[0] = fs[0] * torch.as_tensor(w).to(x64.device, torch.float64)[None, :]
    rest = fs[1]
    for f in fs[2:]:
        rest = (rest[:, None, :] * f[None, :, :]).reshape(-1, f.shape[1])
    x2 = x64.reshape(x64.shape[0], -1)
    step = max(1, (1 << 27) // x2.shape[1])
    err2 = 0.0
    for i in range(0, x2.shape[0], step):
        err2 += float(torch.sum((x2[i:i + step] - fs[0][i:i + step] @ rest.T) ** 2))
    return 1 - math.sqrt(err2) / float(torch.linalg.vector_norm(x64))


def tucker_error(x64, core, factors):
    """‖X − X̂‖/‖X‖ of orthonormal factors: sqrt(‖X‖² − ‖core‖²)/‖X‖ (float64)."""
    import torch

    core = torch.as_tensor(core).to(x64.device, torch.float64)
    nx = float(torch.linalg.vector_norm(x64))
    nc = float(torch.linalg.vector_norm(core))
    return math.sqrt(abs(nx * nx - nc * nc)) / nx


def row(section, impl, ms, **extra):
    r = {"section": section, "impl": impl, "ms": round(ms, 4), **extra}
    ROWS.append(r)
    print(json.dumps(r), flush=True)


def save(out):
    RESULTS["rows"] = ROWS
    RESULTS["elapsed_s"] = round(elapsed(), 1)
    with open(out, "w") as f:
        json.dump(RESULTS, f, indent=1)
    lines = ["| section | implementation | ms | notes |", "| --- | --- | --- | --- |"]
    for r in ROWS:
        notes = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("section", "impl", "ms"))
        lines.append(f"| {r['section']} | {r['impl']} | {r['ms']} | {notes} |")
    with open(out.rsplit(".", 1)[0] + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


class TF32:
    """TensorLy-torch with TF32 matmuls (the same tensor-core mode as ours) for a fair row."""

    def __enter__(self):
        import torch

        m = torch.backends.cuda.matmul
        self.prev = m.fp32_precision
        m.fp32_precision = "tf32"

    def __exit__(self, *a):
        import torch

        torch.backends.cuda.matmul.fp32_precision = self.prev


def cp_section(out, n, rank, lo, hi, reps, label, tensorly_cupy=True, ours_modes=None):
    import torch
    import tensorly as tl
    from tensorly.cp_tensor import CPTensor
    from tensorly.decomposition import parafac as tl_parafac

    shape = (n,) * 3 if isinstance(n, int) else tuple(n)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(shape, device="cuda", generator=g)
    x64 = x.double()
    fs = [torch.rand((d, rank), device="cuda", generator=g) for d in shape]
    ones = torch.ones(rank, device="cuda")

    def ours(precision, xx=x, ff=fs):
        return lambda k, cb: kt.parafac(xx, rank, init=(None, [f.clone() for f in ff]),
                                        n_iter_max=k, tol=0, precision=precision, callback=cb)

    ref_fit = None
    # variants: -library (the cuBLAS GEMM chain, no one-pass kernel), -v1 (the kernel's other
    # block shape), -lu / -cholesky (the factor updates through torch's solves, not the
    # one-launch kernel of kronlinalg.tensor.solve), -s0 (that kernel's first factorization),
    # -nopipe (the CUDA graph's sweeps not pipelined); half storage: -old (session 5's path:
    # no half kernel, the GEMMs' scale on their intermediates), -nokernel (no half kernel),
    # -hy (the library pass's intermediate in the half type, contracted by the half kernels;
    # -hyb: by torch's bmm), -hv1 / -hv2 (the half kernel's 256-row / b-major blocks); -pf: the updates'
    # factorizations on a side stream (solve.PREFACTOR); -fk: the fit terms in one launch;
    # -sk: the half operands' scaling in one launch each (scaling.KERNEL); -gs: float16's
    # MTTKRP kernel scaled from the Grams (fused.GRAM_SCALE); -gl: float16's GEMM operand
    # scaled from its Gram (scaling.GRAM_LHS); -bc: bfloat16's GEMM operand cast unscaled
    # (scaling.BF16_CAST); -sg: Grams on the side stream (cp_als.SIDE_GRAMS); -sc: the graph's
    # copies on a side stream, no stacking of the fit terms (cp_als.SIDE_COPY); -iv: the
    # prefactored updates as products by the systems' inverses (solve.INVERSE); -fs: the half
    # intermediate's pending scale applied by its contractions (fused.FOLD_SCALE); -fg: the
    # last mode's Gram formed by the fit kernel (solve.FIT_GRAM)
    for precision in ours_modes or CP_MODES:
        variant = precision
        precision = apply_tags(variant)
        try:
            t, res = per_iteration_cb(ours(precision), lo, hi, reps)
            how = dict(kt.cp_als.LAST_RUN)
            fit = fit_of(x64, res)
            if precision == "ieee":
                ref_fit = fit
            row(label, f"kronlinalg torch {variant}",
                1e3 * t, fit=round(fit, 6), fit9=f"{fit:.9f}",
                nan=not all(bool(torch.isfinite(f).all()) for f in res[1]),
                run=how.get("reason", "")[:120], solve_kernel=how.get("solve_kernel"))
        except Exception as e:  # noqa: BLE001
            row(label, f"kronlinalg torch {variant}", float("nan"), error=repr(e)[:200])
        finally:
            restore_defaults()
        save(out)
    if label.startswith("cp640"):  # float64 on the GPU: the fits' reference
        init64 = [f.double() for f in fs]
        t, res = per_iteration_cb(lambda k, cb: kt.parafac(x64, rank, init=(None, init64),
                                                           n_iter_max=k, tol=0, callback=cb),
                                  lo, hi, 1)
        fit = fit_of(x64, res)
        row(label, "kronlinalg torch float64", 1e3 * t, fit=round(fit, 6), fit9=f"{fit:.9f}")
        try:
            import cupy as cp

            xc = cp.from_dlpack(x)
            fc = [cp.from_dlpack(f) for f in fs]
            t, res = per_iteration_cb(
                lambda k, cb: kt.parafac(xc, rank, init=(None, [f.copy() for f in fc]),
                                         n_iter_max=k, tol=0, callback=cb), lo, hi, reps)
            row(label, "kronlinalg cupy tf32", 1e3 * t,
                fit=round(fit_of(x64, (None, [torch.from_dlpack(f) for f in res[1]])), 6))
        except Exception as e:  # noqa: BLE001
            row(label, "kronlinalg cupy tf32", float("nan"), error=repr(e)[:200])
        save(out)
    tl.set_backend("pytorch")

    def theirs(k):
        return tl_parafac(x, rank, init=CPTensor((ones.clone(), [f.clone() for f in fs])),
                          n_iter_max=k, tol=0)

    try:
        t, res = per_iteration(theirs, lo, hi, reps)
        fit = fit_of(x64, res)
        row(label, "tensorly torch (ieee)", 1e3 * t, fit=round(fit, 6),
            nan=not all(bool(torch.isfinite(f).all()) for f in res[1]))
        with TF32():
            t, res = per_iteration(theirs, lo, hi, reps)
        row(label, "tensorly torch tf32", 1e3 * t, fit=round(fit_of(x64, res), 6))
    except torch.OutOfMemoryError as e:
        row(label, "tensorly torch", float("nan"), error="out of memory: " + str(e)[:90])
        res = None
    torch.cuda.empty_cache()
    save(out)
    if tensorly_cupy:
        try:
            import cupy as cp

            tl.set_backend("cupy")
            xc = cp.from_dlpack(x)
            fc = [cp.from_dlpack(f) for f in fs]
            t, res = per_iteration(
                lambda k: tl_parafac(xc, rank, init=CPTensor((cp.ones(rank, cp.float32),
                                                              [f.copy() for f in fc])),
                                     n_iter_max=k, tol=0), lo, hi, reps)
            row(label, "tensorly cupy", 1e3 * t,
                fit=round(fit_of(x64, (None, [torch.from_dlpack(f) for f in res[1]])), 6))
        except Exception as e:  # noqa: BLE001
            row(label, "tensorly cupy", float("nan"), error=repr(e)[:200])
        tl.set_backend("pytorch")
        save(out)
    RESULTS["sections"][label] = {"shape": shape, "rank": rank, "iterations": [lo, hi],
                                  "ieee_fit": ref_fit}
    del x, x64


def mttkrp_section(out, n=640, rank=64):
    import torch
    import tensorly as tl
    from tensorly.tenalg import unfolding_dot_khatri_rao as tl_mttkrp

    tl.set_backend("pytorch")
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn((n, n, n), device="cuda", generator=g)
    fs = [torch.rand((n, rank), device="cuda", generator=g) for _ in range(3)]
    for mode in range(3):
        ref = tl_mttkrp(x.double(), (None, [f.double() for f in fs]), mode)
        for precision in ("tf32", "tf32-v1", "tf32-library", "ieee"):
            fused.ENABLED = not precision.endswith("-library")
            fused.VARIANT = 1 if precision.endswith("-v1") else 0
            prec = precision.split("-")[0]
            try:
                got = kt.mttkrp(x, (None, fs), mode, precision=prec)
                err = float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))
                t = wall(lambda: kt.mttkrp(x, (None, fs), mode, precision=prec), 10)
                row("mttkrp640", f"kronlinalg {precision} mode {mode}", 1e3 * t,
                    rel_err=f"{err:.1e}", gpu_ms=round(1e3 * events(
                        lambda: kt.mttkrp(x, (None, fs), mode, precision=prec)), 4),
                    kernel=dict(fused.LAST) if prec == "tf32" and fused.ENABLED else "")
            finally:
                fused.ENABLED, fused.VARIANT = True, 0
        if mode == 0:  # the half kernel on the tensor stored in the half type (parafac's)
            for dt, variant in (("float16", 0), ("float16", 1), ("float16", 2),
                                ("bfloat16", 0), ("bfloat16", 1), ("bfloat16", 2)):
                fused.HALF_VARIANT = variant
                try:
                    s = float(x.abs().max())
                    xh = (x / s).to(getattr(torch, dt))
                    got = fused.stored_mttkrp(xh, fs, 0, s)
                    err = float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))
                    gpu = events(lambda: fused.stored_mttkrp(xh, fs, 0, s))
                    row("mttkrp640", f"kronlinalg {dt}-storage kernel v{variant} mode 0",
                        1e3 * wall(lambda: fused.stored_mttkrp(xh, fs, 0, s), 10),
                        rel_err=f"{err:.1e}", gpu_ms=round(1e3 * gpu, 4),
                        tb_s=round(xh.numel() * 2 / gpu / 1e12, 2), kernel=dict(fused.LAST))
                    del xh
                except Exception as e:  # noqa: BLE001
                    row("mttkrp640", f"kronlinalg {dt}-storage kernel v{variant} mode 0",
                        float("nan"), error=repr(e)[:200])
                finally:
                    fused.HALF_VARIANT = HALF_DEFAULTS[3]
        t = wall(lambda: tl_mttkrp(x, (None, fs), mode), 10)
        row("mttkrp640", f"tensorly torch (ieee) mode {mode}", 1e3 * t,
            gpu_ms=round(1e3 * events(lambda: tl_mttkrp(x, (None, fs), mode)), 4))
        with TF32():
            t = wall(lambda: tl_mttkrp(x, (None, fs), mode), 10)
        row("mttkrp640", f"tensorly torch tf32 mode {mode}", 1e3 * t)
        save(out)


def tucker_section(out, n=640, rank=64):
    import torch
    import tensorly as tl
    from tensorly.decomposition import tucker as tl_tucker

    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn((n, n, n), device="cuda", generator=g)
    x64 = x.double()
    for label, kw in (("hosvd", {"n_iter_max": 0}), ("hosvd+1 hooi", {"n_iter_max": 1})):
        for precision, svd in (("tf32", "eigh"), ("tf32", "eigh-sequential"), ("ieee", "eigh"),
                               ("tf32", "randomized")):
            kt.hooi.CONCURRENT_HOSVD = svd != "eigh-sequential"
            how = svd.replace("-sequential", "")
            try:
                res = kt.tucker(x, rank, precision=precision, tol=0, svd=how, **kw)
                t = wall(lambda: kt.tucker(x, rank, precision=precision, tol=0, svd=how, **kw), 3)
            finally:
                kt.hooi.CONCURRENT_HOSVD = True
            row("tucker640", f"kronlinalg {label} {precision} {svd}", 1e3 * t,
                rel_error=round(tucker_error(x64, *res), 6))
        save(out)
    tl.set_backend("pytorch")
    res = tl_tucker(x, rank=[rank] * 3, init="svd", n_iter_max=1, tol=0)
    t = wall(lambda: tl_tucker(x, rank=[rank] * 3, init="svd", n_iter_max=1, tol=0), 2, 0)
    row("tucker640", "tensorly torch svd+1 hooi", 1e3 * t,
        rel_error=round(tucker_error(x64, res[0], res[1]), 6))
    save(out)
    # where our time goes: one Gram (GEMM of the layout) and one 640×640 eigh
    a = x.reshape(n, n * n)
    with TF32():
        t = wall(lambda: a @ a.T, 5)
    row("tucker640", "diag: gram mode 0 tf32", 1e3 * t)
    t = wall(lambda: a @ a.T, 5)
    row("tucker640", "diag: gram mode 0 ieee", 1e3 * t)
    gm = (a @ a.T).contiguous()
    t = wall(lambda: torch.linalg.eigh(gm), 5)
    row("tucker640", "diag: eigh 640 float32", 1e3 * t)
    g3 = torch.stack([gm, gm + torch.eye(n, device="cuda"), gm * 2])
    row("tucker640", "diag: eigh batched 3x640 float32", 1e3 * wall(lambda: torch.linalg.eigh(g3), 5))
    gm64 = gm.double()
    row("tucker640", "diag: eigh 640 float64", 1e3 * wall(lambda: torch.linalg.eigh(gm64), 3))
    try:
        prev = torch.backends.cuda.preferred_linalg_library()
        torch.backends.cuda.preferred_linalg_library("magma")
        try:
            row("tucker640", "diag: eigh 640 float32 magma",
                1e3 * wall(lambda: torch.linalg.eigh(gm), 5))
            row("tucker640", "diag: eigh batched 3x640 magma",
                1e3 * wall(lambda: torch.linalg.eigh(g3), 3))
        finally:
            torch.backends.cuda.preferred_linalg_library(prev)
    except Exception as e:  # noqa: BLE001
        row("tucker640", "diag: eigh magma", float("nan"), error=repr(e)[:200])
    try:
        import cupy as cp

        gc = cp.from_dlpack(gm)
        row("tucker640", "diag: cupy eigh 640 float32", 1e3 * wall(lambda: cp.linalg.eigh(gc), 5))
    except Exception as e:  # noqa: BLE001
        row("tucker640", "diag: cupy eigh", float("nan"), error=repr(e)[:200])
    try:
        import cupy as cp

        tl.set_backend("cupy")
        xc = cp.from_dlpack(x)
        t = wall(lambda: tl_tucker(xc, rank=[rank] * 3, init="svd", n_iter_max=1, tol=0), 1, 1)
        row("tucker640", "tensorly cupy svd+1 hooi", 1e3 * t)
        tl.set_backend("pytorch")
    except Exception as e:  # noqa: BLE001
        row("tucker640", "tensorly cupy svd+1 hooi", float("nan"), error=repr(e)[:200])
    save(out)


def graphed(fn, reps=20):
    """GPU time of fn without its host launch costs: reps calls captured as one CUDA graph,
    replayed between CUDA events (warm), seconds per call."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        g.replay()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3 / (5 * reps)


def replay_breakdown(prof, path, label, keep=1):
    """The GPU kernels of each CUDA-graph replay in a profile (grouped by the correlation id of
    their cudaGraphLaunch): per replay its span, busy time and the idle time before it; for the
    `keep` middle replays every kernel in order with the gap before it.  Returns the text."""
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    launches = {e["args"].get("correlation") for e in events
                if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e.get("name", "")}
    replays: dict = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            c = e.get("args", {}).get("correlation")
            if c in launches:
                replays.setdefault(c, []).append(e)
    how = "by cudaGraphLaunch correlation"
    if not replays:  # (no correlation to the launches: split the kernels at host waits)
        how = "split at gaps above 12 us"
        ks = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy",
                                                               "gpu_memset")),
                    key=lambda k: k["ts"])
        cur, end = [], None
        for k in ks:
            if cur and k["ts"] - end > 12:
                replays[len(replays)] = cur
                cur = []
            cur.append(k)
            end = k["ts"] + k["dur"] if end is None else max(end, k["ts"] + k["dur"])
        if cur:
            replays[len(replays)] = cur
    lines = [f"== {label}: {len(replays)} groups ({how})"]
    order = sorted(replays.values(), key=lambda ks: min(k["ts"] for k in ks))
    prev_end = None
    for ks in order:
        ks.sort(key=lambda k: k["ts"])
        t0, t1 = ks[0]["ts"], max(k["ts"] + k["dur"] for k in ks)
        busy = sum(k["dur"] for k in ks)
        idle = "" if prev_end is None else f", idle before {t0 - prev_end:.1f} us"
        lines.append(f"replay: {len(ks)} kernels, span {t1 - t0:.1f} us, busy {busy:.1f} us"
                     f"{idle}")
        prev_end = t1
    mid = order[len(order) // 2: len(order) // 2 + keep]
    for ks in mid:
        lines.append("  gap_us  dur_us  kernel")
        end = ks[0]["ts"]
        for k in ks:
            lines.append(f"  {k['ts'] - end:6.1f} {k['dur']:7.1f}  {k['name'][:110]}")
            end = max(end, k["ts"] + k["dur"])
    return "\n".join(lines)


def diag_section(out, n=640, rank=64):
    """Where a CP-ALS iteration's time goes: the root GEMM's orientations and storage types,
    the factor update's routes (GPU time without launch costs: captured as a CUDA graph), a
    profile of three eager iterations, and every kernel of a replayed sweep (CUDA graph) with
    the one-launch factor update and with torch's LU."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn((n, n, n), device="cuda", generator=g)
    c = torch.rand((n, rank), device="cuda", generator=g)
    x2 = x.reshape(n * n, n)
    ct = c.T.contiguous()
    with TF32():
        row("diag", "gemm C^T X(IJ,K)^T tf32", 1e3 * wall(lambda: ct @ x2.T, 10),
            gpu_ms=round(1e3 * events(lambda: ct @ x2.T), 4))
        xa = x.reshape(n, n * n)
        row("diag", "gemm A^T X(I,JK) tf32", 1e3 * wall(lambda: ct @ xa, 10),
            gpu_ms=round(1e3 * events(lambda: ct @ xa), 4))
        y = ct @ x2.T
        yb = y.reshape(rank, n, n)
        row("diag", "bmm trailing (R,I,J)(R,J,1)", 1e3 * wall(lambda: yb @ ct[:, :, None], 10),
            gpu_ms=round(1e3 * events(lambda: yb @ ct[:, :, None]), 4))
        row("diag", "bmm leading (R,1,I)(R,I,J)", 1e3 * wall(lambda: ct[:, None, :] @ yb, 10),
            gpu_ms=round(1e3 * events(lambda: ct[:, None, :] @ yb), 4))
    xh = (x / x.abs().max()).half()
    ch = ct.half()
    row("diag", "gemm fp16 out fp32 (mm out_dtype)",
        1e3 * wall(lambda: torch.mm(ch, xh.reshape(n * n, n).T, out_dtype=torch.float32), 10),
        gpu_ms=round(1e3 * events(
            lambda: torch.mm(ch, xh.reshape(n * n, n).T, out_dtype=torch.float32)), 4))
    row("diag", "copy 1.05 GB (d2d)", 1e3 * wall(lambda: x.clone(), 10))
    del xh, y, yb
    # the factor update: V = G1 ∘ G2 (+ ridge), solved against the MTTKRP (R, 640)
    fa, fb = (torch.rand((rank, n), device="cuda", generator=g) for _ in range(2))
    g1, g2 = fa @ fa.T, fb @ fb.T
    rhs = torch.rand((rank, n), device="cuda", generator=g)

    def library(cholesky):
        def f():  # kronlinalg.tensor's library route (_engine.Engine.solve_spd), inline
            v = g1 * g2
            diag = torch.diagonal(v)
            vr = v + torch.diag_embed(torch.full_like(diag, 1e-6) * diag.amax().clamp_min(1e-30))
            if cholesky:
                low = torch.linalg.cholesky_ex(vr)[0]
                z = torch.linalg.solve_triangular(low, rhs, upper=False)
                return torch.linalg.solve_triangular(low.mT, z, upper=True)
            return torch.linalg.solve_ex(vr, rhs, check_errors=False)[0]
        return f

    v = g1 * g2 + 1e-3 * torch.eye(rank, device="cuda")

    def chol():
        lo = torch.linalg.cholesky_ex(v)[0]
        return torch.cholesky_solve(rhs, lo)

    def kernel(variant):
        def f():
            solve.VARIANT = variant
            return solve.solve([g1, g2], rhs, 1e-6)
        return f

    for name, fn in (("update: one-launch kernel (hadamard+ridge+LDL^T+solve)", kernel(1)),
                     ("update: one-launch kernel, variant 0", kernel(0)),
                     ("update: hadamard+ridge+solve_ex (torch LU)", library(False)),
                     ("update: hadamard+ridge+cholesky_ex+2 trsm", library(True)),
                     ("solve_ex 64x64, 640 rhs", lambda: torch.linalg.solve_ex(v, rhs)),
                     ("cholesky_ex + cholesky_solve", chol),
                     ("gram 64x640x64 (ieee)", lambda: fa @ fa.T)):
        try:
            row("diag", name, 1e3 * wall(fn, 20), gpu_ms_graphed=round(1e3 * graphed(fn), 4))
        except Exception as e:  # noqa: BLE001
            row("diag", name, float("nan"), error=repr(e)[:200])
        finally:
            solve.VARIANT = 1
    save(out)
    fs = [torch.rand((n, rank), device="cuda", generator=g) for _ in range(3)]
    from torch.profiler import ProfilerActivity, profile

    texts = []
    kt.parafac(x, rank, init=(None, [f.clone() for f in fs]), n_iter_max=3, tol=0)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        kt.parafac(x, rank, init=(None, [f.clone() for f in fs]), n_iter_max=3, tol=0)
        sync()
    texts.append("== eager sweeps (3 iterations), by kernel\n" + prof.key_averages().table(
        sort_by="cuda_time_total", row_limit=30))
    for solver in ("auto", "lu"):
        solve.SOLVER = solver
        try:
            run = lambda: kt.parafac(x, rank, init=(None, [f.clone() for f in fs]),
                                     n_iter_max=8, tol=0)
            run()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                run()
                sync()
            texts.append(replay_breakdown(prof, out.rsplit(".", 1)[0] + f"_trace_{solver}.json",
                                          f"graph sweeps, solver {solver}, "
                                          f"{kt.cp_als.LAST_RUN.get('reason')}"))
        except Exception as e:  # noqa: BLE001
            texts.append(f"== graph profile {solver} failed: {e!r}"[:400])
        finally:
            solve.SOLVER = "auto"
    import os

    for solver in ("auto", "lu"):  # (only the text comes back: at most 8 files)
        try:
            os.remove(out.rsplit(".", 1)[0] + f"_trace_{solver}.json")
        except OSError:
            pass
    text = "\n\n".join(texts)
    with open(out.rsplit(".", 1)[0] + "_profile.txt", "w") as f:
        f.write(text)
    print(text[-9000:])


def half_section(out, n=640, rank=64):
    """Where a float16-storage CP-ALS iteration's time goes: every kernel of a replayed sweep
    (CUDA graph) for the new path (the half kernel, deferred scales), the old one and the
    half intermediate; and the library pass's pieces alone (GPU time, events)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn((n, n, n), device="cuda", generator=g)
    fs = [torch.rand((n, rank), device="cuda", generator=g) for _ in range(3)]
    xh = (x / x.abs().max()).half()
    ah = (fs[0].T / fs[0].abs().max()).half().contiguous()
    xa = xh.reshape(n, n * n)
    for name, fn in (("gemm fp16 A^T X(I,JK) out fp32", lambda: torch.mm(ah, xa,
                                                                         out_dtype=torch.float32)),
                     ("gemm fp16 A^T X(I,JK) out fp16", lambda: torch.mm(ah, xa))):
        try:
            row("half", name, 1e3 * wall(fn, 10), gpu_ms=round(1e3 * events(fn), 4))
        except Exception as e:  # noqa: BLE001
            row("half", name, float("nan"), error=repr(e)[:200])
    y32 = torch.mm(ah, xa, out_dtype=torch.float32).reshape(rank, n, n)
    y16 = torch.mm(ah, xa).reshape(rank, n, n)
    v32 = fs[2].T.contiguous()[:, :, None]
    v16 = v32.half()
    f2 = fs[2].T.contiguous()
    for name, fn in (("half contraction kernel trailing fp16", lambda: fused.half_contract(
                         y16, f2, False)),
                     ("half contraction kernel leading fp16", lambda: fused.half_contract(
                         y16, f2, True)),
                     ("bmm trailing fp32 (R,J,K)(R,K,1)", lambda: y32 @ v32),
                     ("bmm trailing fp16 out fp32", lambda: torch.bmm(y16, v16,
                                                                      out_dtype=torch.float32)),
                     ("bmm leading fp16 out fp32", lambda: torch.bmm(
                         v16.transpose(1, 2), y16, out_dtype=torch.float32))):
        try:
            row("half", name, 1e3 * wall(fn, 10), gpu_ms=round(1e3 * events(fn), 4))
        except Exception as e:  # noqa: BLE001
            row("half", name, float("nan"), error=repr(e)[:200])
    del y32, y16, xh, xa
    save(out)
    texts = []
    for variant in PROFILE_MODES:
        prec = apply_tags(variant)
        try:
            run = lambda: kt.parafac(x, rank, init=(None, [f.clone() for f in fs]),
                                     n_iter_max=8, tol=0, precision=prec)
            run()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                run()
                sync()
            texts.append(replay_breakdown(prof, out.rsplit(".", 1)[0] + "_trace_half.json",
                                          f"sweeps, {variant}, "
                                          f"{kt.cp_als.LAST_RUN.get('reason')}"))
        except Exception as e:  # noqa: BLE001
            texts.append(f"== profile {variant} failed: {e!r}"[:400])
        finally:
            restore_defaults()
    import os

    try:
        os.remove(out.rsplit(".", 1)[0] + "_trace_half.json")
    except OSError:
        pass
    text = "\n\n".join(texts)
    with open(out.rsplit(".", 1)[0] + "_half_profile.txt", "w") as f:
        f.write(text)
    print(text[-6000:])


def shard_section(out, shape=(640, 640, 2560), rank=64, cap=2 << 30, iters=4):
    """CP of a 4.2 GB host tensor with the GPU pool capped at 2 GB (run first, on an empty
    pool), against the same decomposition in memory (same initial factors and iteration
    count: the fits must agree); the per-iteration time against the transfers it needs."""
    import gc

    import torch

    g = torch.Generator(device="cuda").manual_seed(4)
    xd = torch.randn(shape, device="cuda", generator=g)
    host = torch.empty(shape, pin_memory=True)
    host.copy_(xd)
    fs = [torch.rand((d, rank), device="cuda", generator=g) for d in shape]
    init = (None, [f.cpu() for f in fs])
    del xd
    slab = host[:40].clone().pin_memory()
    dev = torch.empty(slab.shape, device="cuda")
    h2d = wall(lambda: dev.copy_(slab, non_blocking=True), 5)
    h2d_bw = slab.numel() * 4 / h2d
    del dev, slab
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(cap / total)
    try:
        t, res = per_iteration_cb(
            lambda k, cb: kt.parafac(host, rank, init=init, n_iter_max=k, tol=0, callback=cb,
                                     device="cuda", memory_limit=cap), 1, iters, 1)
        facts = dict(kt.cp_als.LAST_RUN)
        peak = torch.cuda.max_memory_allocated()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    need = facts["streamed_bytes_per_iteration"] / h2d_bw
    xd = host.to("cuda")
    t_mem, res_mem = per_iteration_cb(
        lambda k, cb: kt.parafac(xd, rank, init=(None, [f.clone() for f in fs]), n_iter_max=k,
                                 tol=0, callback=cb), 1, iters, 1)
    x64 = xd.double()
    del xd
    row("shard640x640x2560", "in memory tf32", 1e3 * t_mem, fit=round(fit_of(x64, res_mem), 6),
        iterations=iters)
    row("shard640x640x2560", "shard, pool capped at 2 GiB", 1e3 * t,
        fit=round(fit_of(x64, res), 6), iterations=iters, h2d_GBps=round(h2d_bw / 1e9, 1),
        transfers_ms=round(1e3 * need, 1), ratio=round(t / need, 2),
        resident_rows=facts["resident_rows"], slab_rows=facts["slab_rows"],
        passes=facts["passes_per_iteration"], peak_alloc_GB=round(peak / 1e9, 2),
        allocated_before_GB=round(before / 1e9, 3))
    save(out)
    # Tucker (HOSVD from Gram matrices + HOOI), ranks 64, the same capped pool (which counts
    # every tensor alive: the float64 copy goes first)
    del x64, res, res_mem
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.set_per_process_memory_fraction(cap / total)
    try:
        def shard_tucker(k, cb=None):
            return kt.tucker(host, rank, n_iter_max=k, tol=0, callback=cb, device="cuda",
                             memory_limit=cap)

        shard_tucker(0)
        sync()
        t0 = time.perf_counter()
        res0 = shard_tucker(0)
        sync()
        t_hosvd = time.perf_counter() - t0
        facts0 = dict(kt.hooi.LAST_RUN)
        t_it, res_t = per_iteration_cb(shard_tucker, 1, 3, 1)
        facts_t = dict(kt.hooi.LAST_RUN)
        peak_t = torch.cuda.max_memory_allocated()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    per_pass = facts_t["streamed_bytes_per_pass"] / h2d_bw
    del res0
    xd = host.to("cuda")
    x64 = xd.double()
    t0 = time.perf_counter()
    mem0 = kt.tucker(xd, rank, n_iter_max=0, tol=0)
    sync()
    t_mem0 = time.perf_counter() - t0
    t_mem, mem_t = per_iteration_cb(lambda k, cb: kt.tucker(xd, rank, n_iter_max=k, tol=0,
                                                            callback=cb), 1, 3, 1)
    del xd
    row("shard640x640x2560", "tucker in memory (HOSVD alone)", 1e3 * t_mem0,
        rel_error=round(tucker_error(x64, *mem0), 6))
    row("shard640x640x2560", "tucker in memory, per HOOI iteration", 1e3 * t_mem,
        rel_error=round(tucker_error(x64, *mem_t), 6), iterations=3)
    row("shard640x640x2560", "tucker shard (HOSVD alone + core)", 1e3 * t_hosvd,
        passes=facts0["passes"], transfers_ms=round(1e3 * facts0["passes"] * per_pass, 1),
        ratio=round(t_hosvd / (facts0["passes"] * per_pass), 2))
    row("shard640x640x2560", "tucker shard, per HOOI iteration", 1e3 * t_it,
        rel_error=round(tucker_error(x64, *res_t), 6), iterations=3,
        passes=facts_t["passes_per_iteration"],
        transfers_ms=round(1e3 * facts_t["passes_per_iteration"] * per_pass, 1),
        ratio=round(t_it / (facts_t["passes_per_iteration"] * per_pass), 2),
        resident_rows=facts_t["resident_rows"], slab_rows=facts_t["slab_rows"],
        peak_alloc_GB=round(peak_t / 1e9, 2))
    save(out)


def cpu_section(out):
    import tensorly as tl
    from tensorly.cp_tensor import CPTensor
    from tensorly.decomposition import parafac as tl_parafac

    tl.set_backend("numpy")
    rng = np.random.default_rng(0)
    for dt in ("float32", "float64"):
        x = rng.standard_normal((160, 160, 160)).astype(dt)
        fs = [rng.random((160, 16)).astype(dt) for _ in range(3)]
        t, _ = per_iteration(lambda k: kt.parafac(x, 16, init=(None, [f.copy() for f in fs]),
                                                  n_iter_max=k, tol=0), 2, 8, 3)
        row("cpu160", f"kronlinalg numpy {dt}", 1e3 * t)
        t, _ = per_iteration(lambda k: tl_parafac(
            x, 16, init=CPTensor((np.ones(16, dt), [f.copy() for f in fs])), n_iter_max=k,
            tol=0), 2, 8, 3)
        row("cpu160", f"tensorly numpy {dt}", 1e3 * t)
        save(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tensor.json")
    ap.add_argument("--budget", type=float, default=150)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--cp-modes", default="", help="comma-separated parafac variants of the "
                    "cp640 section (default: CP_MODES)")
    ap.add_argument("--profile-modes", default="", help="comma-separated parafac variants "
                    "profiled kernel by kernel in the half section (default: PROFILE_MODES)")
    ap.add_argument("--sections", default="", help="comma-separated: mttkrp, cp640, tucker, "
                    "shard, diag, half, cp160^4, gene100, gene500, gene1000 (default: all but shard, "
                    "which should run in a process of its own)")
    a = ap.parse_args()
    if a.cpu:
        cpu_section(a.out)
        return
    import torch

    if a.cp_modes:
        CP_MODES[:] = a.cp_modes.split(",")
    if a.profile_modes:
        PROFILE_MODES[:] = a.profile_modes.split(",")
    RESULTS["device"] = torch.cuda.get_device_name()
    RESULTS["torch"] = torch.__version__
    named = {
        "mttkrp": lambda: mttkrp_section(a.out),
        "cp640": lambda: cp_section(a.out, 640, 64, 4, 14, 5, "cp640 r64"),
        "tucker": lambda: tucker_section(a.out),
        "shard": lambda: shard_section(a.out),
        "diag": lambda: diag_section(a.out),
        "half": lambda: half_section(a.out),
        "cp160^4": lambda: cp_section(a.out, (160, 160, 160, 160), 32, 4, 8, 2, "cp160^4 r32",
                                      tensorly_cupy=False, ours_modes=("tf32-pf", "ieee")),
    }
    for r in (100, 500, 1000):
        named[f"gene{r}"] = (lambda r=r: cp_section(a.out, (40490, 449, 44), r, 4, 6, 1,
                                                    f"gene r{r}", tensorly_cupy=False,
                                                    ours_modes=("tf32",)))
    # shard mode caps the process's pool at 2 GiB, which counts every tensor still alive:
    # run it alone (`--sections shard`), not after the others (two H100 runs ran out of the cap
    # there with 1.8 and 3.2 GiB already allocated by the earlier sections)
    steps = [named[k] for k in (a.sections.split(",") if a.sections
                                else [k for k in named if k != "shard"])]
    for step in steps:
        if elapsed() > a.budget:
            RESULTS["cut"] = "budget"
            break
        try:
            step()
        except Exception as e:  # noqa: BLE001
            row("error", "step", float("nan"), error=repr(e)[:300])
        torch.cuda.empty_cache()
        save(a.out)
    save(a.out)


if __name__ == "__main__":
    main()
