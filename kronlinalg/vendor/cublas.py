"""cuBLAS strided-batched GEMM on device pointers, through CuPy's cuBLAS bindings.

structured_matmul's "strided" algorithm multiplies the (i, j) blocks of a Kronecker-sparse
factor as one batched GEMM on strided views of x and y (no permutes, no copies): a call the
array libraries' matmul does not offer for such views (CuPy copies them to contiguous first).
CuPy's handle serves CuPy arrays and CUDA torch tensors alike (on torch's stream for torch).
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import numpy as np

from . import cublaslt as _cublaslt

# cudaDataType and cublasComputeType_t values (cuBLAS 11+ headers)
_DATA_TYPE = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 14}
from ..common.dtypes import ITEMSIZE
_COMPUTE_32F, _COMPUTE_64F = 68, 70
_GEMM_DEFAULT = -1
# alpha = 1, beta = 0 on the host, in the compute type (float32 for the half types)
_SCALARS = {"float32": (np.ones(1, np.float32), np.zeros(1, np.float32)),
            "float64": (np.ones(1, np.float64), np.zeros(1, np.float64))}
# their host addresses and the compute type, by whether the data are float64
_ALPHA_BETA_COMPUTE = {wide: (*(s.ctypes.data for s in _SCALARS[name]), compute)
                       for wide, name, compute in ((False, "float32", _COMPUTE_32F),
                                                    (True, "float64", _COMPUTE_64F))}
INT_MAX = 2**31 - 1  # cuBLAS's 32-bit sizes and leading dimensions
OP_N, OP_T = 0, 1


@functools.cache
def _bindings():
    try:
        import cupy
        from cupy_backends.cuda.libs import cublas
    except Exception:  # no CuPy (a torch-only install): the algorithm does not apply
        return None
    return cupy, cublas


def available() -> bool:
    return _bindings() is not None


def dtypes() -> tuple:
    return tuple(_DATA_TYPE)


@functools.lru_cache(maxsize=64)
def _external_stream(stream: int, device: int):
    """CuPy's wrapper of a foreign (torch) stream, made once per stream."""
    cupy = _bindings()[0]
    with warnings.catch_warnings():  # CuPy 14 deprecates it for objects with __cuda_stream__;
        warnings.simplefilter("ignore", DeprecationWarning)  # a raw handle has none
        return cupy.cuda.ExternalStream(stream, device)


def _scope(device: int, stream: int, cupy_owned: bool):
    cupy = _bindings()[0]
    stack = contextlib.ExitStack()
    stack.enter_context(cupy.cuda.Device(device))
    if not cupy_owned:  # torch's stream: CuPy's bindings set the handle to CuPy's current one
        stack.enter_context(_external_stream(stream, device))
    return stack


def _on(device: int, stream: int, cupy_owned: bool):
    """The context CuPy's bindings need to run on (device, stream): none when CuPy's current
    device and stream are already the caller's (usually: torch's default stream is CuPy's
    too), else _scope."""
    cupy = _bindings()[0]
    direct = (cupy.cuda.runtime.getDevice() == device
              and (cupy_owned or cupy.cuda.get_current_stream().ptr == stream))
    return contextlib.nullcontext() if direct else _scope(device, stream, cupy_owned)


def gemm(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, *, dtype: str, device: int, stream: int,
         cupy_owned: bool):
    """One column-major GEMM C = alpha A B + beta C on device pointers (no transposes), float64
    (DGEMM) or float32 (cuBLAS's GemmEx with 32-bit compute: IEEE, as gemm_strided_batched), alpha
    and beta taken from the host: strassen_cublas writes each product straight into its C block
    with them.  On CuPy's current device and stream when those are the caller's, else entered for
    the call (torch's stream wrapped, as gemm_strided_batched does)."""
    cupy, cublas = _bindings()
    wide = dtype == "float64"
    scal = np.array([alpha, beta], dtype=np.float64 if wide else np.float32)
    a_ptr, b_ptr = scal.ctypes.data, scal.ctypes.data + scal.itemsize
    with _on(device, stream, cupy_owned):
        handle = cupy.cuda.device.get_cublas_handle()
        mode = cublas.getPointerMode(handle)
        cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
        try:
            if wide:
                cublas.dgemm(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, m, n, k, a_ptr, a,
                             lda, b, ldb, b_ptr, c, ldc)
            else:  # (a batch of one: the binding gemm_strided_batched already runs)
                dt = _DATA_TYPE[dtype]
                cublas.gemmStridedBatchedEx(handle, OP_N, OP_N, m, n, k, a_ptr, a, dt, lda, 0, b,
                                            dt, ldb, 0, b_ptr, c, dt, ldc, 0, 1, _COMPUTE_32F,
                                            _GEMM_DEFAULT)
        finally:
            cublas.setPointerMode(handle, mode)


def gemm_strided_batched(calls, *, dtype: str, device: int, stream: int, cupy_owned: bool,
                         tune: bool = False):
    """Run column-major GEMMs C = op(A) op(B), each a strided batch:
    ``calls`` = [(trans_a, trans_b, m, n, k, A, lda, stride_a, B, ldb, stride_b, C, ldc,
    stride_c, batch)], pointers as ints, strides in elements; alpha = 1, beta = 0, accumulation
    in float32 (float64 for float64).  A GEMM whose signature was tuned (see _cublaslt) runs
    the cuBLASLt algorithm that won; with ``tune``, a signature not tuned yet is tuned first."""
    cupy, cublas = _bindings()
    dt = _DATA_TYPE[dtype]
    alpha, beta, compute = _ALPHA_BETA_COMPUTE[dtype == "float64"]
    lt = (tune or _cublaslt.any_tuned()) and _cublaslt.enabled()  # (no signature work if not)
    with _on(device, stream, cupy_owned):
        handle = cupy.cuda.device.get_cublas_handle()
        for call in calls:
            def default(call=call):
                ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch = call
                cublas.gemmStridedBatchedEx(handle, ta, tb, m, n, k, alpha, a, dt, lda, sa, b,
                                            dt, ldb, sb, beta, c, dt, ldc, sc, batch, compute,
                                            _GEMM_DEFAULT)

            plan = None
            if lt:
                sig = _cublaslt.signature(call, dt, ITEMSIZE[dtype])
                plan = _cublaslt.lookup(sig)
                if plan is None and tune and not _cublaslt.is_tuned(sig):
                    plan = _cublaslt.tune(sig, call, default, wide=dtype == "float64",
                                          device=device, stream=stream)
            if plan is None or plan.run(plan.choice, call, device, stream) != 0:
                default()
