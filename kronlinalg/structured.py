"""Kronecker-sparse products: ``x @ (K1 … KL)ᵀ`` in one pass per factor, never forming K.

An operation of the skeleton (kronlinalg._operation).  Its operands are the Kronecker-sparse
factors of kronlinalg.ks (re-exported here: KSFactor, KSChain, KSPacked and the families).
Algorithms: the compiled one-pass kernel ("kernel": CPU, or CUDA for CuPy arrays / CUDA torch
tensors), the cuBLAS ones ("strided", "block_dense": kronlinalg/_structured_cublas.py), "bmm"
(permute, batched matmul, permute) and "dense" (``x @ K.to_dense().T``) through the caller's
array library.  A KSPacked chain (weights fixed, as in inference) keeps what these derive
from the weights between calls, and the planner then prices them without that work.

    >>> import numpy as np, kronlinalg
    >>> chain = kronlinalg.structured.monarch(16, 16, 4, rng=0)
    >>> x = np.ones((3, 16))
    >>> y = kronlinalg.structured_matmul(x, chain)
    >>> bool(np.allclose(y, x @ chain.to_dense().T))
    True
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass

import array_api_compat
import numpy as np

from . import planner, structured_cublas as cublas_algos
from ._ext import load
from ._operation import Algorithm, Call, Operation
from .common import backend, dtypes, precision, validation
from .common.signatures import arrays_signature
from .ks import (KSChain, KSFactor, KSPacked, as_chain, block_butterfly, block_diagonal,
                 butterfly, formed, low_rank, monarch)
from .planner.costs import structured as costs
from .vendor import cublaslt

__all__ = ["KSFactor", "KSChain", "KSPacked", "structured_matmul", "tune", "float32_precision",
           "butterfly", "block_butterfly", "monarch", "low_rank", "block_diagonal"]

LAYOUTS = costs.LAYOUTS
ks_cpu, ks_cuda = load("structured_cpu"), load("structured_cuda")
_CODE = dtypes.KERNEL_CODE
_rows_view = cublas_algos.rows_view


@dataclass
class _KSCall(Call):
    """A validated structured_matmul call."""

    x: object = None
    chain: tuple = ()  # KSFactor, K1 first
    layout: str = "batch_first"
    rows: int = 0  # B: the batch
    in_len: int = 0  # columns of the product (x's feature length)
    out_len: int = 0
    out_shape: tuple = ()
    result_dtype: str = ""
    compute_dtype: str = ""
    forms: dict | None = None  # a KSPacked's formed weights (None: formed per call)


def _prepare(x, factors, *, layout="batch_first") -> _KSCall:
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    chain = as_chain(factors)
    named = {"x": x, **{f"factors[{t}].values": f.values for t, f in enumerate(chain)}}
    xp, result = validation.floating_arrays(named)
    M, N = chain[0].shape[0], chain[-1].shape[1]
    shape = tuple(x.shape)
    if x.ndim == 0:
        raise ValueError("x: expected at least 1 dimension, got a 0-D array")
    if layout == "batch_first":
        if shape[-1] != N:
            raise ValueError(
                f"x: last dimension must equal the number of columns of the factor product "
                f"(a·c·d of the last factor) = {N} for layout='batch_first', got shape {shape}")
        rows, out_shape = math.prod(shape[:-1]), shape[:-1] + (M,)
    else:
        if x.ndim > 2:
            raise ValueError(f"x: layout='batch_last' takes x of shape (N, B) or (N,), got shape "
                             f"{shape}")
        if shape[0] != N:
            raise ValueError(
                f"x: first dimension must equal the number of columns of the factor product "
                f"(a·c·d of the last factor) = {N} for layout='batch_last', got shape {shape}")
        rows, out_shape = (shape[1] if x.ndim == 2 else 1), (M,) + shape[1:]
    # the CUDA kernel computes half types natively (float32 accumulation); elsewhere in float32
    compute = result if backend.on_cuda(x) else dtypes.compute(result)
    forms = factors.forms if isinstance(factors, KSPacked) else None
    return _KSCall(xp, x, tuple(named.values()), rows == 0, x=x, chain=chain, layout=layout,
                   rows=rows, in_len=N, out_len=M, out_shape=out_shape, result_dtype=result,
                   compute_dtype=compute, forms=forms)

def _empty(call: _KSCall):
    return call.xp.zeros(call.out_shape, dtype=getattr(call.xp, call.result_dtype),
                         device=array_api_compat.device(call.x))


def _plan_query(call: _KSCall) -> tuple:
    """(shapes, dtype, options) under which the planner knows this call's signature."""
    shapes = (tuple(call.x.shape),) + tuple(f.pattern for f in call.chain)
    return shapes, call.compute_dtype, _plan_options(call)


def _plan_options(call: _KSCall) -> dict:
    """The planner's options of a call: the layout, and packed=True for a KSPacked."""
    return {"layout": call.layout, **({"packed": True} if call.forms is not None else {})}


def _signature(arrays, options, algorithm):
    """Hashable signature of a call on CUDA or NumPy arrays, or None (the full path)."""
    if len(arrays) != 2:
        return None
    x, factors = arrays
    packed = isinstance(factors, KSPacked)
    if isinstance(factors, KSFactor):
        factors = (factors,)
    elif isinstance(factors, KSChain):
        factors = factors.factors
    elif type(factors) not in (list, tuple) or not all(isinstance(f, KSFactor) for f in factors):
        return None
    sig = arrays_signature([x] + [f.values for f in factors], host=True)
    if sig is None:
        return None
    return (options.get("layout", "batch_first"), algorithm, packed, sig,
            tuple([f.pattern for f in factors]))


def _facts(problem) -> dict:
    """What the build and the kernels say about a problem: whether the kernels and cuBLAS
    algorithms exist here, the float32 mode the CUDA kernel runs, and the tile the CUDA
    launcher picks for each factor (kl_ks_cuda_tile: its own dispatch, probed, no launch)."""
    info = problem.info
    out = {"fp32_mode": float32_precision(),
           "kernel_built": (ks_cuda if problem.kind == "cuda" else ks_cpu) is not None,
           "cublas": cublas_algos.available(problem.kind == "cuda", problem.dtype)}
    code = _TILE_DTYPE.get(problem.dtype)
    if problem.kind != "cuda" or ks_cuda is None or code is None:
        return out
    prof = planner.profile_for(problem.device)
    # sm_90: wgmma shapes where the build has them (a negative count says so)
    units = -prof.units if tuple(prof.cc or ()) == (9, 0) else prof.units
    layout = 0 if info["layout"] == "batch_first" else 1
    tiles = {}
    for p in info["patterns"]:
        try:
            tn, tk, tl, tj, kind = ks_cuda.tile(p, info["B"], layout, code, units)
        except RuntimeError:  # a problem the kernel does not take: the estimate stands
            continue
        tiles[p] = (tn, tk, tl, tj, kind != 0)
    out["cuda_tiles"] = tiles
    return out


_TILE_DTYPE = {"float32": 0, "float16": 2, "bfloat16": 3}


_float32_precision = precision.Float32Precision(ks_cuda, "KRONLINALG_KS_FP32")


def float32_precision(precision=None) -> str:
    """How the CUDA kernel computes float32, for the whole process: ``"tf32x3"`` (the default)
    on tensor cores as three TF32 products per product (x = hi + lo; relative error ~1e-6 to
    7e-6 at c = 1024, against ~5e-7 with FMAs), or ``"ieee"``: CUDA-core float32 FMAs, about
    1.3-1.8x slower on compute-heavy patterns.  ``KRONLINALG_KS_FP32=ffma`` makes ``"ieee"`` the
    default.  With an argument, sets the mode (the planner's cached choices are dropped: its
    model follows the mode); returns the previous mode."""
    return _float32_precision(precision)


# ---------------------------------------------------------------------------------------------
# the compiled kernel: one call per factor, last factor first


def _finish(spec, out):
    return backend.cast(spec.xp, out, spec.result_dtype)


def _strided_runs(spec) -> bool:
    """Whether "strided" can run this product: cuBLAS for the compute dtype on a CUDA array,
    every factor's GEMMs of 32-bit sizes."""
    return (cublas_algos.available(backend.on_cuda(spec.x), spec.compute_dtype)
            and costs.strided_all_fit([f.pattern for f in spec.chain], spec.layout, spec.rows))


def _values_desc(view):
    return (view.ptr,) + tuple(view.strides)


def _run_cpu(spec: _KSCall, want_replay=False):
    """The product through the CPU kernel; with want_replay, (result, replayer) where the
    replayer (ks_cpu.HostChainReplay) repeats the same kernel calls on new NumPy arrays of the
    same signature, or is None when this call needed casts or copies, or was not NumPy's."""
    if ks_cpu is None:
        raise RuntimeError("structured_matmul: the CPU kernel is not built (reinstall kronlinalg)")
    xp, cdt = spec.xp, spec.compute_dtype
    xn = backend.to_numpy(backend.cast(xp, spec.x, cdt))
    first = spec.layout == "batch_first"
    cur = np.reshape(xn, (spec.rows, spec.in_len) if first else (spec.in_len, spec.rows))
    # (a replay reads x's memory as the rows: NumPy's x itself, of the compute dtype, viewed)
    clean = (xn is spec.x and cdt == spec.result_dtype
             and backend.host_address(cur) == backend.host_address(xn))
    vals = [backend.to_numpy(backend.cast(xp, f.values, cdt)) for f in reversed(spec.chain)]
    code = _CODE[cdt]
    steps = []
    for f, v in zip(reversed(spec.chain), vals):
        a, b, c, d = f.pattern
        xv = backend.host_view(cur)
        ld, ok = _rows_view(xv.shape, xv.strides, spec.layout)
        if not ok:
            cur = np.ascontiguousarray(cur)
            xv = backend.host_view(cur)
            ld = xv.strides[0] if cur.shape[0] > 1 else cur.shape[1]
        clean = clean and ok and v is f.values
        out_2d = (spec.rows, a * b * d) if first else (a * b * d, spec.rows)
        out = np.empty(out_2d, dtype=cdt)
        vdesc = _values_desc(backend.host_view(v))
        ks_cpu.matmul(f.pattern, spec.rows, 0 if first else 1, vdesc, (xv.ptr, ld),
                      (out.ctypes.data, out.shape[1]), code)
        steps.append((tuple(f.pattern), tuple(vdesc[1:]), ld, out_2d))
        cur = out
    out = _finish(spec, backend.from_host(spec.x, xp, np.reshape(cur, spec.out_shape)))
    if not want_replay:
        return out
    if not clean:
        return out, None
    return out, ks_cpu.HostChainReplay(spec.rows, 0 if first else 1, code, tuple(spec.out_shape),
                                        tuple(steps), np.dtype(cdt), KSFactor, KSChain)


def _run_cuda(spec: _KSCall, want_replay=False):
    """The product through the CUDA kernel; with want_replay, (result, replayer) where the
    replayer (ks_cuda.ChainReplay) repeats the same launches on new arrays of the same signature,
    or is None when this call needed casts or copies."""
    if ks_cuda is None:
        raise RuntimeError(
            "structured_matmul: got a CUDA array, but kronlinalg was built without CUDA "
            "(reinstall with nvcc on PATH, or -Csetup-args=-Dcuda=enabled)")
    kron_cuda = load("kron_cuda")

    xp, cdt = spec.xp, spec.compute_dtype
    if cdt not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"algorithm: the CUDA kernel computes float32, float16 and bfloat16, not "
                         f"{cdt}; use algorithm='bmm' or 'dense' (or 'auto') for {cdt}")
    kron_cuda.device_check()  # one check for every kernel family: is a GPU usable at all
    first = spec.layout == "batch_first"
    x = backend.cast(xp, spec.x, cdt)
    code = _CODE[cdt]
    in_shape = (spec.rows, spec.in_len) if first else (spec.in_len, spec.rows)
    clean = x is spec.x and cdt == spec.result_dtype
    steps = []
    with backend.cuda_device_scope(x):
        stream = backend.cuda_stream(x)
        cur = xp.reshape(x, in_shape)
        # (a replay reads x's pointer as the rows: only where this reshape is a view)
        clean = clean and backend.device_view(cur).ptr == backend.device_view(x).ptr
        for f in reversed(spec.chain):
            a, b, c, d = f.pattern
            v = backend.contiguous(backend.cast(xp, f.values, cdt))  # the kernel reads K in (a,b,c,d) order
            xv = backend.device_view(cur)
            ld, ok = _rows_view(xv.shape, xv.strides, spec.layout)
            if not ok:
                cur = backend.contiguous(cur)
                xv = backend.device_view(cur)
                ld = xv.strides[0] if xv.shape[0] > 1 else xv.shape[1]
            clean = clean and ok and v is f.values
            out_2d = (spec.rows, a * b * d) if first else (a * b * d, spec.rows)
            out = backend.empty_like_lib(cur, out_2d, cdt)
            vdesc = _values_desc(backend.device_view(v))
            ks_cuda.matmul(f.pattern, spec.rows, 0 if first else 1, vdesc, (xv.ptr, ld),
                           (backend.device_view(out).ptr, out.shape[1]), code, stream)
            steps.append((f.pattern, vdesc[1:], ld, out_2d))
            cur = out
    out = _finish(spec, xp.reshape(cur, spec.out_shape))
    if not want_replay:
        return out
    if not clean:
        return out, None
    cupy = backend.is_cupy(x)
    return out, ks_cuda.ChainReplay(
        spec.rows, 0 if first else 1, code, tuple(spec.out_shape), tuple(steps),
        type(x) if cupy else functools.partial(backend.replay_template, x), cupy,
        np.dtype(cdt) if cupy else None,
        backend.device_index(x), backend.current_stream_getter(x), KSFactor, KSChain)


# ---------------------------------------------------------------------------------------------
# the array-library algorithms


def bmm_weights(xp, values, pattern, layout):
    """The factor's (i, j) blocks as a stack for batched matmul: (a·d, c, b) for batch_first
    (x blocks times Kᵀ blocks), (a·d, b, c) for batch_last."""
    a, b, c, d = pattern
    perm = (0, 3, 2, 1) if layout == "batch_first" else (0, 3, 1, 2)
    shape = (a * d, c, b) if layout == "batch_first" else (a * d, b, c)
    return xp.reshape(xp.permute_dims(values, perm), shape)


def bmm_apply(xp, cur, kb, pattern, layout):
    """One factor by permute → batched matmul → permute (the KS paper's "bmm" baseline)."""
    a, b, c, d = pattern
    if layout == "batch_first":
        B = cur.shape[0]
        if a * d == 1:
            return cur @ kb[0, ...]
        xp_ = xp.reshape(xp.permute_dims(xp.reshape(cur, (B, a, c, d)), (1, 3, 0, 2)), (a * d, B, c))
        yp = xp.matmul(xp_, kb)  # (a·d, B, b)
        return xp.reshape(xp.permute_dims(xp.reshape(yp, (a, d, B, b)), (2, 0, 3, 1)), (B, a * b * d))
    B = cur.shape[1]
    if a * d == 1:
        return kb[0, ...] @ cur
    xp_ = xp.reshape(xp.permute_dims(xp.reshape(cur, (a, c, d, B)), (0, 2, 1, 3)), (a * d, c, B))
    yp = xp.matmul(kb, xp_)  # (a·d, b, B)
    return xp.reshape(xp.permute_dims(xp.reshape(yp, (a, d, b, B)), (0, 2, 1, 3)), (a * b * d, B))


def _bmm(spec: _KSCall):
    xp, cdt = spec.xp, spec.compute_dtype
    first = spec.layout == "batch_first"
    cur = xp.reshape(backend.cast(xp, spec.x, cdt),
                     (spec.rows, spec.in_len) if first else (spec.in_len, spec.rows))
    for t in reversed(range(len(spec.chain))):
        f = spec.chain[t]
        kb = formed(spec.forms, ("bmm", t, cdt, spec.layout), lambda: _bmm_stack(spec, f, cdt))
        cur = bmm_apply(xp, cur, kb, f.pattern, spec.layout)
    return _finish(spec, xp.reshape(cur, spec.out_shape))


def _bmm_stack(spec, f, cdt):
    """bmm's weights of one factor: a view of its values per call, a contiguous copy (the
    paper's pre-permuted weights) in a KSPacked."""
    kb = bmm_weights(spec.xp, backend.cast(spec.xp, f.values, cdt), f.pattern, spec.layout)
    return kb if spec.forms is None else backend.contiguous(kb)


def _dense(spec: _KSCall):
    xp, cdt = spec.xp, spec.compute_dtype
    w = formed(spec.forms, ("dense", cdt), lambda: KSChain(
        [KSFactor(f.pattern, backend.cast(xp, f.values, cdt)) for f in spec.chain]).to_dense())
    x = backend.cast(xp, spec.x, cdt)
    out = cublas_algos.dense_gemm(spec, x, w) if spec.forms is not None else None
    if out is None:
        out = x @ w.mT if spec.layout == "batch_first" else w @ x
    return _finish(spec, out)



# ---------------------------------------------------------------------------------------------
# replays: a call whose signature was validated and planned before runs with only its arrays new


def _chain_forms(factors):
    chain = (factors.factors if isinstance(factors, KSChain) else
             (factors,) if isinstance(factors, KSFactor) else tuple(factors))
    return chain, (factors.forms if isinstance(factors, KSPacked) else None)


def _rerun(run):
    """replay() of an algorithm without a launch recipe: the same run on a copy of the call."""
    def replay(call):
        template = dataclasses.replace(call, x=None, lead=None, arrays=(), chain=(), forms=None)

        def replayer(x, factors, *, layout="batch_first"):
            chain, forms = _chain_forms(factors)
            return run(dataclasses.replace(template, x=x, lead=x, chain=chain, forms=forms))

        return run(call), replayer

    return replay


def _with_recipe(run_recipe):
    """replay() of an algorithm whose runner returns (result, recipe): the recipe's launches."""
    def replay(call):
        out, recipe = run_recipe(call)
        if recipe is None:
            return out, None
        launch, steps = recipe

        def replayer(x, factors, *, layout="batch_first"):
            chain, forms = _chain_forms(factors)
            return launch(steps, x, chain, forms)

        return out, replayer

    return replay


def _kernel(call):
    return _run_cuda(call) if backend.on_cuda(call.x) else _run_cpu(call)


def _kernel_replay(call):
    if backend.on_cuda(call.x):
        return _run_cuda(call, want_replay=True)
    return _run_cpu(call, want_replay=True)


def _strided(call):
    return cublas_algos.strided(call)


def _block_dense(call):
    return cublas_algos.strided(call, dense_slabs=True)


# ---------------------------------------------------------------------------------------------
# applicability (stated once: the planner's applies, and the ValueError of a forced algorithm)


def _kernel_applies(problem) -> bool:
    if not problem.info.get("kernel_built", True):
        return False
    if problem.kind == "cuda":
        return problem.dtype in ("float32", "float16", "bfloat16")
    return problem.dtype in ("float32", "float64")


def _strided_applies(problem) -> bool:
    return problem.info.get("cublas", False) and costs.strided_applies(problem.info)


def _block_dense_applies(problem) -> bool:
    return problem.info.get("cublas", False) and costs.block_dense_applies(problem.info)


def tune(x, factors, /, *, layout="batch_first", repeats=5):
    """Time every algorithm that runs this product (the kernel and the strided GEMMs where they
    apply, bmm, dense) on these arrays and make the fastest what ``algorithm="auto"`` runs for
    calls of the same signature (shapes, dtype, device, layout) in this process: the measured
    counterpart of the cost model, for workloads that repeat one shape (like
    ``torch.backends.cudnn.benchmark``).
    Each algorithm runs once to warm up, then `repeats` times, each waited for; the median
    counts.  ``kronlinalg.planner.clear_cache()`` returns to the model.  Returns ``{algorithm:
    seconds}``, fastest first."""
    import time

    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: expected a positive int, got {repeats!r}")

    def host_times(runs):
        out = []
        for run in runs:
            backend.synchronize(x)
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                run()
                backend.synchronize(x)
                samples.append(time.perf_counter() - t0)
            out.append(float(np.median(samples)))
        return out

    ranked = _measure(_prepare(x, factors, layout=layout), x, factors, host_times)
    return {c.name: c.seconds for c in ranked}


def _measure(spec: _KSCall, x, factors, time_runs) -> list:
    """Run every algorithm of this product once on the caller's arrays (its GEMMs tuned on the
    way), time them with ``time_runs(runs)`` (seconds each) and make that the plan of the
    signature (planner.record); returns the ranked plan.  Strided is among them wherever it
    runs, also where the model leaves it out (its GEMMs are bmm's, but its formulation is
    sometimes cuBLAS's fastest)."""
    from . import planner

    shapes, dtype, opts = _plan_query(spec)
    opts = dict(opts, dtype=dtype, device=spec.x)
    names = [c.name for c in planner.plan("structured_matmul", *shapes, **opts)]
    if "strided" not in names and _strided_runs(spec):
        names.append("strided")
    runs = [functools.partial(structured_matmul, x, factors, layout=spec.layout, algorithm=name)
            for name in names]
    for run in runs:
        with cublaslt.tuning():  # the first run picks the GEMMs' algorithms (strided, …)
            run()
    times = dict(zip(names, time_runs(runs)))
    return planner.record("structured_matmul", *shapes, times=times, **opts)


def _measure_pays(spec: _KSCall) -> bool:
    """Whether the planner measures instead of modelling: packed weights of one factor with
    a = d = 1 on CUDA arrays that CuPy's events can time.  Such a product is one GEMM whichever
    algorithm runs it, and which formulation cuBLAS runs fastest (batched, plain, tuned, our
    kernel) differs by up to 15 % with no pattern the model can see; packed weights say the
    signature repeats, as they do for the GEMM tuning.  KRONLINALG_GEMM_TUNE=0 turns both off."""
    if spec.forms is None or len(spec.chain) != 1 or not _cupy_times(spec.x):
        return False
    a, _, _, d = spec.chain[0].pattern
    return a == 1 and d == 1 and cublaslt.enabled()


def _cupy_times(x) -> bool:
    """Whether CuPy's events on its current stream time the work queued for x: CuPy arrays,
    and CUDA torch tensors on CuPy's current device and stream (both libraries' default stream,
    unless either was told otherwise)."""
    cupy = backend.cupy_module()
    if cupy is None or not backend.on_cuda(x):
        return False
    return backend.is_cupy(x) or (x.get_device() == cupy.cuda.runtime.getDevice() and
                                   backend.cuda_stream(x) == cupy.cuda.get_current_stream().ptr)


def _measured_choice(spec: _KSCall, factors):
    """The fastest algorithm of this signature, measured once on the caller's arrays (device
    time in interleaved rounds, _measure) and recorded with the planner (plan() then says
    ``measured``); None where the model decides (``_measure_pays``)."""
    if not _measure_pays(spec):
        return None
    from . import planner

    shapes, dtype, opts = _plan_query(spec)
    opts = dict(opts, dtype=dtype, device=spec.x)
    first = planner.plan("structured_matmul", *shapes, **opts)[0]
    if first.details.get("measured"):
        return first.name

    def device_times(runs):
        ms = cublaslt._device_times(runs, cublaslt._spin_kernel(), MEASURE_ROUNDS,
                                     spin_ns=MEASURE_SPIN_NS)
        return [t * 1e-3 for t in ms]

    try:
        return _measure(spec, spec.x, factors, device_times)[0].name
    except Exception as exc:  # (no NVRTC for the timing kernel, out of memory, ...)
        warnings.warn(f"kronlinalg: measuring structured_matmul's algorithms failed ({exc!r}); "
                      "the cost model chooses", RuntimeWarning, stacklevel=3)
        return None


MEASURE_ROUNDS = 7
# ahead of each timed call: longer than the host time of a torch call's permutes and GEMM
# (~0.1 ms), which would otherwise count against bmm and dense
MEASURE_SPIN_NS = 500_000



# ---------------------------------------------------------------------------------------------
# the operation and its algorithms

OPERATION = Operation(
    "structured_matmul", prepare=_prepare, plan_query=_plan_query, normalise=costs.normalise,
    empty=_empty, signature=_signature, grad_algorithm="bmm", facts=_facts,
    options=("layout", "packed"),
    measure=lambda call, arrays: _measured_choice(call, arrays[1]),
    doc="x @ (K1 … KL)ᵀ for Kronecker-sparse factors; shapes: x, then each pattern")
_DOCS = {"kernel": "one-pass Kronecker-sparse kernel, one launch per factor",
         "strided": "cuBLAS strided-batched GEMMs on views of x and y (batch_last or d = 1), "
                    "or on planar copies of them (batch_first, d > 1)",
         "block_dense": "each factor's a diagonal blocks formed dense, one cuBLAS "
                        "strided-batched GEMM on views of x and y (d times the flops)",
         "bmm": "permute → batched matmul → permute through the array library",
         "dense": "x @ K.to_dense().T through the array library"}
for _kind in ("cpu", "cuda"):
    OPERATION.register(Algorithm(
        "kernel", _kernel, costs.predictor("kernel", _kind), devices=(_kind,),
        applies=_kernel_applies, replay=_kernel_replay, doc=_DOCS["kernel"]))
    for _name, _run in (("bmm", _bmm), ("dense", _dense)):
        OPERATION.register(Algorithm(
            _name, _run, costs.predictor(_name, _kind), devices=(_kind,), replay=_rerun(_run),
            autograd=("autograd", "transform"), doc=_DOCS[_name]))
OPERATION.register(Algorithm(
    "strided", _strided, costs.predictor("strided", "cuda"), devices=("cuda",),
    applies=_strided_applies, doc=_DOCS["strided"],
    replay=_with_recipe(lambda call: cublas_algos.strided(call, want_recipe=True))))
OPERATION.register(Algorithm(
    "block_dense", _block_dense, costs.predictor("block_dense", "cuda"), devices=("cuda",),
    applies=_block_dense_applies, doc=_DOCS["block_dense"],
    replay=_with_recipe(lambda call: cublas_algos.strided(call, want_recipe=True,
                                                          dense_slabs=True))))


def structured_matmul(x, factors, /, *, layout="batch_first", algorithm="auto"):
    """``x @ (K1 … KL)ᵀ`` (layout="batch_first") or ``(K1 … KL) @ x`` (layout="batch_last") for
    Kronecker-sparse factors Kℓ, without forming them.

    Parameters
    ----------
    x : array
        batch_first: shape ``(..., N)``, leading dimensions are batch dimensions;
        batch_last: shape ``(N, B)`` or ``(N,)``.  N = a·c·d of the last factor.
    factors : KSFactor, KSChain, KSPacked or sequence of KSFactor
        K1 … KL; the shapes must chain.  Values and x must come from one library and device.
        A KSPacked keeps what the algorithms derive from the weights between calls.
    layout : {"batch_first", "batch_last"}
    algorithm : {"auto", "kernel", "strided", "block_dense", "bmm", "dense"}
        "kernel": the compiled one-pass kernel (CPU; CUDA for CuPy arrays and CUDA torch
        tensors), one launch per factor; "strided": CUDA with CuPy installed: each factor's
        (i, j) blocks as cuBLAS strided-batched GEMMs reading x and writing y in place
        (batch_last, or d = 1; K transposed first), or on planar copies of them (batch_first
        with d > 1); "block_dense": CUDA with CuPy installed: each factor's a diagonal blocks
        (b·d × c·d) formed dense by one launch, then one strided-batched GEMM in place (d times
        the flops of the others, no copies of x or y);
        "bmm": permute → batched matmul → permute through the array library; "dense":
        ``x @ K.to_dense().T`` through the array library; "auto": the planner's choice
        (``kronlinalg.explain("structured_matmul", x.shape, *patterns)``); for a KSPacked of
        one a = d = 1 factor on CUDA arrays (one GEMM whichever way it runs), measured: the
        first call times the algorithms on these arrays and keeps the fastest.

    Returns
    -------
    array in x's namespace and on x's device, of shape ``(..., M)`` (batch_first) or ``(M, B)``
    / ``(M,)`` (batch_last), M = a·b·d of the first factor, in the promoted dtype of x and the
    values (float16/bfloat16 accumulate in float32; on the CPU they are computed in float32).
    """
    if _FRONT is not None:
        return ks_cuda.chain_call(_FRONT, x, factors, layout, algorithm)
    return OPERATION(x, factors, layout=layout, algorithm=algorithm)


# the public call's first step, compiled with the CUDA extension (the fast path is CUDA-only):
# a repeated signature replays without the skeleton's Python frames
_FRONT = (ks_cuda.ChainFront(OPERATION, OPERATION.fast_cache, KSFactor, KSChain, KSPacked)
          if ks_cuda is not None else None)
