"""The one dtype table: the floating dtypes kronlinalg computes, their sizes, the codes the C
entry points take, and the dtype each computes in.

    >>> from kronlinalg.common import dtypes
    >>> dtypes.ITEMSIZE["bfloat16"], dtypes.KERNEL_CODE["float64"], dtypes.compute("float16")
    (2, 1, 'float32')
"""

from __future__ import annotations

__all__ = ["FLOAT", "HALF", "ITEMSIZE", "KERNEL_CODE", "compute"]

FLOAT = ("float16", "bfloat16", "float32", "float64")
HALF = ("float16", "bfloat16")
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# the kernels' dtype codes (kernels/include/kronlinalg/status.h: KL_FLOAT32 ...), one table for
# every operation's C entry points
KERNEL_CODE = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3}


def compute(name: str) -> str:
    """The dtype a CPU kernel computes `name` in: half types accumulate (and are computed) in
    float32; the CUDA kernels keep half types in memory and accumulate in float32."""
    return "float32" if name in HALF else name
