# cython: language_level=3
"""Thin wrapper of the CPU Kronecker-sparse kernel: pointers, pattern, strides in; status out."""
from libc.stdint cimport int64_t, uintptr_t

from .fields cimport buffer_address
from .status cimport check_status
from .structured_abi cimport (factor_chain, fill_problem, kl_ks_matmul_cpu, kl_ks_problem,
                             kl_last_error)

import numpy as np


def matmul(pattern, batch, int layout, values, x, y, int dtype, int num_threads=0):
    """One factor: Y = X Kᵀ (layout 0) or Y = K X (layout 1), written into y; RuntimeError on failure.

    pattern (a, b, c, d); values (ptr, s0, s1, s2, s3); x, y (ptr, leading dimension), elements.
    """
    cdef kl_ks_problem c
    fill_problem(&c, pattern, batch, layout, values, x, y)
    cdef int status
    with nogil:
        status = kl_ks_matmul_cpu(&c, dtype, num_threads)
    check_status(status)


cdef class HostChainReplay:
    """The CPU kernel's passes of a structured_matmul call again, for NumPy arrays of the same
    signature (the operation's replayer, called ``(x, factors, layout=…)``): one kernel call
    per factor, last factor first, through pointers — x's rows are x's memory, each
    intermediate a fresh row-major array, the last result allocated in the result's shape —
    so a tiny product pays no Python frame of the skeleton.  None (the full path) for a chain of
    another length.

    steps: per factor (pattern, values strides in elements, x's leading dimension, the
    result's 2D shape); the signature fixed every array's shape, strides and dtype."""

    cdef list steps
    cdef int layout, dtype
    cdef int64_t rows
    cdef tuple out_shape
    cdef object npdtype, empty, factor_type, chain_type

    def __init__(self, int64_t rows, int layout, int dtype, tuple out_shape, steps, npdtype,
                 factor_type, chain_type):
        self.rows, self.layout, self.dtype = rows, layout, dtype
        self.out_shape = out_shape
        self.steps = list(steps)
        self.npdtype = npdtype
        self.empty = np.empty
        self.factor_type, self.chain_type = factor_type, chain_type

    def __call__(self, x, factors, *, layout="batch_first"):
        # (the signature fixed the layout, the patterns and the arrays' layouts: not read again)
        chain = factor_chain(factors, self.factor_type, self.chain_type)
        cdef Py_ssize_t n = len(self.steps), i
        if len(chain) != n:
            return None
        cdef kl_ks_problem c
        cdef uintptr_t src = buffer_address(x)
        cdef int status
        out = None
        for i in range(n):
            pattern, vstrides, x_ld, out_2d = self.steps[i]
            prev = out  # (the intermediate this step reads stays alive until it has run)
            out = self.empty(self.out_shape if i == n - 1 else out_2d, self.npdtype)
            fill_problem(&c, pattern, self.rows, self.layout,
                         (buffer_address(chain[n - 1 - i].values),) + vstrides, (src, x_ld),
                         (buffer_address(out), out_2d[1]))
            with nogil:
                status = kl_ks_matmul_cpu(&c, self.dtype, 0)
            check_status(status)
            src = <uintptr_t> c.y
        return out
