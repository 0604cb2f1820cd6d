"""The one-pass MTTKRP kernel (kernels/tensor) on small tensors, for compute-sanitizer:
both modes, ranks 7 and 64, output rows that leave the 128-row tile partly empty, an inner
size that puts index boundaries inside the 32-row stages.  Prints the error against float64.

    compute-sanitizer --tool memcheck --kernel-name kns=mttkrp python benchmarks/tensor_sanitize.py
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
torch.cuda.synchronize()
print(f"sanitize script done, worst relative error {worst:.2e}")
