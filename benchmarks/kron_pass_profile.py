"""One call of each of a few kron_large cases, for Nsight Compute's per-pass kernel times (each
pass of the natural-order plan is one kernel launch):

    ncu --clock-control none --metrics gpu__time_duration.sum,\\
dram__throughput.avg.pct_of_peak_sustained_elapsed -k regex:natural \\
        python benchmarks/kron_pass_profile.py [float64:1024x8^6,bfloat16:1024x32^4 ...]
"""
import math
import sys

import cupy as cp

import kronlinalg
from kronlinalg.testing import extension

kron_cuda = extension("kron_cuda")
DEFAULT = ("float64:1024x8^6,float64:1024x16^5,float64:1024x32^4,float64:1024x64^3,"
           "float16:1024x16^5,float16:1024x32^4,float32:1024x32^4")
for spec in (sys.argv[1] if len(sys.argv) > 1 else DEFAULT).split(","):
    dtype, case = spec.split(":")
    m, rest = case.split("x")
    p, n = (int(v) for v in rest.split("^"))
    m = int(m)
    k = p ** n
    rng = cp.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype="float32").astype(dtype)
    fs = [(rng.standard_normal((p, p)) / math.sqrt(p)).astype(dtype) for _ in range(n)]
    descs = [(0, p, p, p, 1) for _ in range(n)]
    plan = kron_cuda.config(1, m, descs, (256, m * k, k, 1), (256, m * k, k, 1),
                            kron_cuda.DTYPES[dtype])
    print(f"== case {dtype} {case}\n{plan}", flush=True)
    kronlinalg.kron_matmul(x, fs, algorithm="sliced")
    cp.cuda.Device().synchronize()
    del x
