"""Small batched_matmul calls for compute-sanitizer (memcheck): every dtype and kernel shape,
odd sizes, transposed / strided / broadcast operands, beta != 0, variable sizes (lists, packed
with a device table whose rows leave the buffers).

    compute-sanitizer --tool memcheck python benchmarks/batched_sanitize.py [--quick] [--large-only]
    compute-sanitizer --tool racecheck python benchmarks/batched_sanitize.py --tiny-only

--tiny-only: the tiny-product and thin-product kernels' cases alone (dense stacks of orders <= 32,
every dtype, and of a short k, the half types and float32: odd sizes, partial tiles, products a
padded stride apart, a shared B, beta).
"""

import sys

import numpy as np
import torch

import kronlinalg

quick = "--quick" in sys.argv  # two dtypes, three shapes (memcheck is slow)
large_only = "--large-only" in sys.argv  # only the 128 x 128 kernel's cases (racecheck)
tiny_only = "--tiny-only" in sys.argv  # only the tiny-product kernel's cases
worst = {}
dev = "cuda"
for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
    key = str(dtype) + " tiny"
    for (m, k, n) in ((16, 16, 16), (32, 32, 32), (5, 7, 3), (17, 9, 31), (1, 1, 1)):
        a = torch.randn(2, 37, m, k, device=dev).to(dtype)
        b = torch.randn(2, 37, k, n, device=dev).to(dtype)
        c = torch.randn(2, 37, m, n, device=dev).to(dtype)
        for x, y, cc in ((a, b, c), (a[:, ::2], b[:, ::2], c[:, ::2]), (a, b[0, 0], c)):
            out = kronlinalg.batched_matmul(x, y, c=cc, beta=0.5, alpha=2.0, algorithm="kami1d")
            ref = 2.0 * (x.double() @ y.double()) + 0.5 * cc.double()
            err = float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
            worst[key] = max(worst.get(key, 0.0), err)
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    key = str(dtype) + " thin"
    for (m, k, n) in ((128, 16, 128), (71, 24, 264), (33, 16, 72), (136, 8, 200)):
        a = torch.randn(5, m, k, device=dev).to(dtype)
        b = torch.randn(5, k, n, device=dev).to(dtype)
        c = torch.randn(5, m, n, device=dev).to(dtype)
        for x, y, cc in ((a, b, c), (a[::2], b[::2], c[::2]), (a, b[0], c)):
            out = kronlinalg.batched_matmul(x, y, c=cc, beta=0.5, alpha=2.0, algorithm="kami1d")
            ref = 2.0 * (x.double() @ y.double()) + 0.5 * cc.double()
            err = float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
            worst[key] = max(worst.get(key, 0.0), err)
if tiny_only:
    dtypes = ()
    large_only = True
dtypes = (torch.float64, torch.float16) if quick else (torch.float64, torch.float32,
                                                        torch.float16, torch.bfloat16)
shapes = ((5, 7, 3), (17, 33, 31), (65, 40, 70)) if quick else (
    (1, 1, 1), (5, 7, 3), (16, 16, 16), (17, 33, 31), (65, 40, 70))
for dtype in () if large_only else dtypes:
    for algo in ("kami1d", "kami2d"):
        for (m, k, n) in shapes:
            a = torch.randn(3, m, k, device=dev).to(dtype)
            b = torch.randn(3, k, n, device=dev).to(dtype)
            c = torch.randn(1, n, device=dev).to(dtype)
            for x, y in ((a, b), (a.mT.contiguous().mT, b[:, :, :].mT.contiguous().mT)):
                out = kronlinalg.batched_matmul(x, y, c=c, beta=0.5, alpha=2.0, algorithm=algo)
                ref = 2.0 * (x.double() @ y.double()) + 0.5 * c.double()
                err = float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                key = str(dtype)
                worst[key] = max(worst.get(key, 0.0), err)
        # variable sizes: a list with empty products, and a packed buffer with a device table
        sizes = [(3, 4, 5), (0, 2, 2), (7, 0, 3), (9, 9, 0), (33, 17, 65)]
        xs = [torch.randn(m, k, device=dev).to(dtype) for m, n, k in sizes]
        ys = [torch.randn(k, n, device=dev).to(dtype) for m, n, k in sizes]
        outs = kronlinalg.batched_matmul(xs, ys, algorithm=algo)
        for x, y, o in zip(xs, ys, outs):
            if o.numel():
                ref = x.double() @ y.double()
                e = float((o.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                worst[str(dtype)] = max(worst[str(dtype)], e)
        tab = torch.tensor([[3, 4, 5], [2, 2, 2], [50, 50, 50]], device=dev)  # row 3 too large
        abuf = torch.randn(40, device=dev).to(dtype)
        bbuf = torch.randn(40, device=dev).to(dtype)
        kronlinalg.batched_matmul(abuf, bbuf, sizes=tab, out_size=20, algorithm=algo)
        # packed odd orders: rows at every alignment (the realigning and element loaders)
        orders = [9, 17, 70, 33, 5, 1, 23]
        tot = sum(o * o for o in orders)
        abuf, bbuf = (torch.randn(tot, device=dev).to(dtype) for _ in range(2))
        tab = torch.tensor([[o, o, o] for o in orders], device=dev)
        out = kronlinalg.batched_matmul(abuf, bbuf, sizes=tab, out_size=tot, algorithm=algo)
        off = 0
        for o in orders:
            ref = abuf[off:off + o * o].view(o, o).double() @ bbuf[off:off + o * o].view(o, o).double()
            e = float((out[off:off + o * o].view(o, o).double() - ref).abs().max()
                      / ref.abs().max().clamp_min(1e-30))
            worst[str(dtype)] = max(worst[str(dtype)], e)
            off += o * o
        # many products (groups claim several), k = 0 and m = 0 rows among them
        gen = np.random.default_rng(5)
        sz = gen.integers(1, 70, (300, 3))
        sz[::7, 2] = 0
        sz[3::11, 0] = 0
        na, nb, nd = (int((sz[:, i] * sz[:, j]).sum()) for i, j in ((0, 2), (2, 1), (0, 1)))
        abuf, bbuf = torch.randn(na, device=dev).to(dtype), torch.randn(nb, device=dev).to(dtype)
        kronlinalg.batched_matmul(abuf, bbuf, sizes=torch.from_numpy(sz).to(dev), out_size=nd,
                                  algorithm=algo)
# the 128 x 128 half-type kernel (orders >= 96): aligned and odd rows (the staging variant),
# a transposed A, beta with a broadcast C; a packed batch split between the two kernels
for dtype in () if tiny_only else (torch.float16, torch.float32, torch.float64) if quick else (
        torch.float16, torch.bfloat16, torch.float32, torch.float64):
    key = str(dtype) + " 128x128"
    for (m, k, n) in ((128, 128, 128), (130, 97, 129), (64, 50, 63), (136, 200, 96)):  # (64: 64 x 64 tiles)
        a = torch.randn(2, m, k, device=dev).to(dtype)
        b = torch.randn(2, k, n, device=dev).to(dtype)
        c = torch.randn(1, n, device=dev).to(dtype)
        for x, y in ((a, b), (a.mT.contiguous().mT, b)):
            out = kronlinalg.batched_matmul(x, y, c=c, beta=0.5, alpha=2.0, algorithm="kami1d")
            ref = 2.0 * (x.double() @ y.double()) + 0.5 * c.double()
            err = float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
            worst[key] = max(worst.get(key, 0.0), err)
    orders = [130, 97, 5, 200, 64, 1, 0, 99]
    tot = sum(o * o for o in orders)
    abuf, bbuf = (torch.randn(tot, device=dev).to(dtype) for _ in range(2))
    tab = torch.tensor([[o, o, o] for o in orders], device=dev)
    out = kronlinalg.batched_matmul(abuf, bbuf, sizes=tab, out_size=tot, algorithm="kami1d")
    off = 0
    for o in orders:
        if o:
            ref = (abuf[off:off + o * o].view(o, o).double()
                   @ bbuf[off:off + o * o].view(o, o).double())
            e = float((out[off:off + o * o].view(o, o).double() - ref).abs().max()
                      / ref.abs().max().clamp_min(1e-30))
            worst[key] = max(worst[key], e)
        off += o * o
torch.cuda.synchronize()
print("worst relative error by dtype:", worst)
bad = {k: v for k, v in worst.items() if v > (1e-12 if "64" in k else 1e-5 if "32" in k else 2e-2)}
sys.exit(1 if bad else 0)
