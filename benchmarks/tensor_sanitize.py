"""kernels/tensor on small problems, for compute-sanitizer.  The one-pass MTTKRP kernel:
both modes, ranks 7 and 64, output rows that leave the 128-row tile partly empty, an inner
size that puts index boundaries inside the 32-row stages; its half-storage variant (float16,
bfloat16; mode 0) and CP-ALS's half-intermediate contractions; the one-launch factor update
(spd solve) and its two-launch form: ranks 7, 33 and 64, right-hand sides not a multiple of 32, float32 and float64;
float16's Gram scale of the half variant, the Gram-scaled copy.
Prints the errors against float64.

    compute-sanitizer --tool memcheck --kernel-name kns=mttkrp python benchmarks/tensor_sanitize.py
    compute-sanitizer --tool racecheck --kernel-name kns=spd_solve python benchmarks/tensor_sanitize.py
"""

import numpy as np
import torch

from kronlinalg import tensor as kt
from kronlinalg.tensor import fused

fused.MIN_ELEMENTS = 0
rng = np.random.default_rng(0)
worst = 0.0
for shape, rank, variant in (((70, 36, 40), 7, 0), ((70, 36, 40), 64, 1),
                             ((9, 33, 132), 64, 0), ((9, 33, 132), 7, 1)):
    fused.VARIANT = variant
    if True:
        x = rng.standard_normal(shape).astype(np.float32)
        fs = [rng.standard_normal((d, rank)).astype(np.float32) for d in shape]
        xd = torch.as_tensor(x, device="cuda")
        fd = [torch.as_tensor(f, device="cuda") for f in fs]
        for mode in (0, 2):
            before = fused.LAUNCHES
            got = kt.mttkrp(xd, (None, fd), mode).cpu().double().numpy()
            assert fused.LAUNCHES == before + 1, (shape, rank, mode)
            xm = np.moveaxis(x.astype(np.float64), mode, 0).reshape(shape[mode], -1)
            o = [f.astype(np.float64) for i, f in enumerate(fs) if i != mode]
            ref = xm @ np.einsum("ir,jr->ijr", *o).reshape(-1, rank)
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            worst = max(worst, err)
            print(shape, rank, mode, variant, f"{err:.2e}")
# the half-storage variant (mode 0): float16 / bfloat16, both block shapes, inner sizes 72 / 136
# (index boundaries inside the 64-p stages) and 64, output rows below and above one tile
for shape, rank, variant, dt in (((70, 36, 72), 7, 0, "float16"), ((70, 36, 72), 64, 1, "bfloat16"),
                                 ((9, 33, 136), 33, 0, "bfloat16"), ((130, 5, 64), 64, 1, "float16"),
                                 ((70, 36, 72), 7, 2, "float16"), ((130, 5, 136), 64, 2, "bfloat16")):
    fused.HALF_VARIANT = variant
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    fs = [rng.standard_normal((d, rank)).astype(np.float32) for d in shape]
    xh = torch.as_tensor(x, device="cuda").to(getattr(torch, dt))
    before = fused.LAUNCHES
    got = fused.stored_mttkrp(xh, [torch.as_tensor(f, device="cuda") for f in fs])
    assert fused.LAUNCHES == before + 1, (shape, rank, dt)
    ref = (xh.double().cpu().numpy().reshape(shape[0], -1)
           @ np.einsum("ir,jr->ijr", *[f.astype(np.float64) for f in fs[1:]]).reshape(-1, rank))
    err = np.linalg.norm(got.cpu().double().numpy() - ref) / np.linalg.norm(ref)
    worst = max(worst, err)
    print(shape, rank, 0, variant, dt, f"{err:.2e}")
# float16's Gram scale (fused.GRAM_SCALE): U and V unscaled with their Gram matrices
for shape, rank, variant in (((70, 36, 72), 7, 0), ((130, 5, 136), 64, 2), ((70, 36, 72), 33, 2)):
    fused.HALF_VARIANT = variant
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    fd = [torch.as_tensor(1e3 * rng.standard_normal((d, rank)).astype(np.float32), device="cuda")
          for d in shape]
    xh = torch.as_tensor(x, device="cuda").half()
    got = fused.stored_mttkrp(xh, fd, grams=[f.T @ f for f in fd])
    assert fused.LAST["gram_scale"], (shape, rank)
    ref = (xh.double().cpu().numpy().reshape(shape[0], -1)
           @ np.einsum("ir,jr->ijr", *[f.cpu().double().numpy() for f in fd[1:]]).reshape(-1, rank))
    err = np.linalg.norm(got.cpu().double().numpy() - ref) / np.linalg.norm(ref)
    worst = max(worst, err)
    print(shape, rank, 0, variant, "float16 gram scale", f"{err:.2e}")
fused.HALF_VARIANT = 0
# CP-ALS's half-intermediate contractions: K a multiple of 8, J not a multiple of the warps'
# rows, K beyond one 256-wide block
for (r, j, k), dt in (((3, 37, 72), "float16"), ((5, 41, 776), "bfloat16")):
    y = torch.as_tensor(rng.uniform(-4, 4, (r, j, k)).astype(np.float32), device="cuda")
    yh = y.to(getattr(torch, dt))
    for leading, n in ((False, k), (True, j)):
        f = torch.as_tensor(rng.standard_normal((r, n)).astype(np.float32), device="cuda")
        got = fused.half_contract(yh, f, leading).double()
        ref = (torch.einsum("rjk,rj->rk", yh.double(), f.double()) if leading
               else torch.einsum("rjk,rk->rj", yh.double(), f.double()))
        err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
        worst = max(worst, err)
        print("half contraction", (r, j, k), dt, "leading" if leading else "trailing", f"{err:.2e}")
from kronlinalg.tensor import solve

for rank, n, count, dt in ((7, 33, 2, "float32"), (33, 70, 3, "float64"), (64, 45, 2, "float32"),
                           (64, 640, 1, "float64")):
    grams = []
    for _ in range(count):
        f = rng.standard_normal((rank, 3 * rank))
        grams.append(f @ f.T / f.shape[1])
    y = rng.standard_normal((rank, n))
    gd = [torch.as_tensor(g.astype(dt), device="cuda") for g in grams]
    yd = torch.as_tensor(y.astype(dt), device="cuda")
    before = solve.LAUNCHES
    got = solve.solve(gd, yd, 1e-6 if dt == "float32" else 1e-14)
    assert solve.LAUNCHES == before + 1, (rank, n, count, dt)
    # its two-launch form (factor, then solve from the workspace)
    ws = solve.factor(gd, 1e-6 if dt == "float32" else 1e-14)
    two = solve.solve([], yd, 1e-6 if dt == "float32" else 1e-14, factored=ws)
    assert torch.equal(two, got), (rank, n, count, dt)
    # the inverse form (factor and invert, then the product)
    wsi = solve.factor(gd, 1e-6 if dt == "float32" else 1e-14, inverse=True)
    three = solve.solve([], yd, 1e-6 if dt == "float32" else 1e-14, factored=wsi, inverse=True)
    print("spd inverse product", rank, n, count, dt,
          f"{float(torch.linalg.norm(three - got) / torch.linalg.norm(got)):.1e}")
    v = np.prod(np.stack([g.astype(dt).astype(np.float64) for g in grams]), axis=0)
    v += (1e-6 if dt == "float32" else 1e-14) * v.diagonal().max() * np.eye(rank)
    ref = np.linalg.solve(v, y.astype(dt).astype(np.float64))
    err = np.linalg.norm(got.cpu().double().numpy() - ref) / np.linalg.norm(ref)
    worst = max(worst, err)
    print("spd solve", rank, n, count, dt, f"{err:.2e}")
# CP-ALS's fit terms in one launch
solve.FIT_KERNEL = True
for rank, n, count, dt in ((7, 33, 2, torch.float32), (64, 640, 3, torch.float64)):
    gs = [torch.randn(rank, rank, dtype=dt, device="cuda") for _ in range(count)]
    w, y, f = torch.rand(rank, dtype=dt, device="cuda"), *(torch.randn(rank, n, dtype=dt,
                                                                      device="cuda") for _ in range(2))
    rec2, ip = solve.fit_terms(gs, w, y, f)
    had = torch.stack(gs).double().prod(0)
    ref = float(w.double() @ had @ w.double()), float(((y.double() * f.double()).sum(1) * w).sum())
    print("fit terms", rank, n, count, dt, f"{abs(float(rec2) - ref[0]):.1e}",
          f"{abs(float(ip) - ref[1]):.1e}")
    # with the last factor's Gram formed in the same launch
    rec2g, ipg, gl = solve.fit_terms(gs, w, y, f, last_gram=True)
    print("fit terms + gram", rank, n, count, dt,
          f"{float((gl - f @ f.T).abs().max()):.1e}", bool(torch.equal(gl, gl.T)))
# the half path's one-launch operand scaling
from kronlinalg.tensor import scaling

scaling.KERNEL = True
for rank, n in ((7, 130), (64, 640)):
    a = torch.randn(rank, n, device="cuda") * 100
    padded, s_ = scaling.scaled_copy(a, pad64=True)
    half, s2 = scaling.scaled_copy(a, out_dtype=torch.float16)
    err = float((padded[:, :rank] - a.T / a.abs().max()).abs().max())
    print("scaled copy", rank, n, f"{err:.1e}", float(s_) == float(a.abs().max()) == float(s2))
# the Gram-scaled copy (a grid of blocks; counts not a multiple of 4 threads' elements)
for rank, n in ((7, 131), (64, 640)):
    a = torch.randn(rank, n, device="cuda") * 100
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        out_, s3 = scaling.gram_scaled_copy(a, a @ a.T, dt)
        err = float((out_.float() - a / s3).abs().max())
        print("gram scaled copy", rank, n, dt, f"{err:.1e}", float(s3) >= float(a.abs().max()))
torch.cuda.synchronize()
print(f"sanitize script done, worst relative error {worst:.2e}")
