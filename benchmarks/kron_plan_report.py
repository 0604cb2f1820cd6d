"""Print the CUDA kron plan (passes, kernels, tiles, grid) of each kron_large case, contiguous
x @ kron with 16-byte aligned x and y; needs a GPU.  For a person reading where time goes.

    python benchmarks/kron_plan_report.py [--dtype float32] [--cases benchmarks/data/cases.json]
"""
import argparse
import json

from kronlinalg.testing import extension
kron_cuda = extension("kron_cuda")


def plan_text(m, p, n, dtype):
    k = p ** n
    descs = [(0, p, p, p, 1)] * n
    return kron_cuda.config(1, m, descs, (256, m * k, k, 1), (256, m * k, k, 1),
                            kron_cuda.DTYPES[dtype])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--cases", default="benchmarks/data/cases.json")
    args = ap.parse_args()
    if kron_cuda is None:
        raise SystemExit("kronlinalg was built without CUDA")
    for m, p, n in json.load(open(args.cases))["kron_large"]["cases"]:
        print(f"== {m}x{p}^{n} {args.dtype} (x: {4 * m * p ** n / 2 ** 20:.0f} MiB)")
        print(plan_text(m, p, n, args.dtype))


if __name__ == "__main__":
    main()
