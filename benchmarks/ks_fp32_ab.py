"""float32 Kronecker-sparse kernel: 3xTF32 (pipelined, default) against the CUDA-core kernel
(KRONLINALG_KS_FP32=ffma), same patterns, one process each; prints ms and relative error."""
import os

import cupy as cp
import numpy as np

from kronlinalg.testing import extension
ks_cuda = extension("structured_cuda")

B = 25088
pats = [(1, 768, 768, 1), (1, 512, 512, 8), (1, 192, 48, 6), (1, 128, 128, 4), (4, 512, 512, 4),
        (1, 64, 64, 64), (1, 256, 1024, 3)]
rng = np.random.default_rng(0)
mode = os.environ.get("KRONLINALG_KS_FP32", "tf32x3")
for p in pats:
    a, b, c, d = p
    n, m = a * c * d, a * b * d
    v = cp.asarray(rng.standard_normal(p), dtype=cp.float32)
    for layout in (0, 1):
        x = cp.asarray(rng.standard_normal((B, n) if layout == 0 else (n, B)), dtype=cp.float32)
        y = cp.empty((B, m) if layout == 0 else (m, B), dtype=cp.float32)
        st = cp.cuda.get_current_stream().ptr
        f = lambda: ks_cuda.matmul(p, B, layout, (v.data.ptr,) + tuple(s // 4 for s in v.strides),
                                   (x.data.ptr, x.shape[1]), (y.data.ptr, y.shape[1]), 0, st)
        f()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        ts = []
        for _ in range(10):
            e0.record(); f(); e1.record(); e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1))
        w = v.get().astype(np.float64)
        # dense reference on a slice of the batch
        K = np.zeros((m, n))
        for i in range(a):
            for j in range(d):
                K[np.ix_(i * b * d + np.arange(b) * d + j, i * c * d + np.arange(c) * d + j)] = w[i, :, :, j]
        xs = x.get().astype(np.float64)
        ys = y.get().astype(np.float64)
        if layout == 0:
            ref, got = xs[:256] @ K.T, ys[:256]
        else:
            ref, got = K @ xs[:, :256], ys[:, :256]
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        print(f"{mode:7s} {str(p):18s} {'bf' if layout == 0 else 'bl'} {np.median(ts):8.3f} ms  err {err:.1e}", flush=True)
