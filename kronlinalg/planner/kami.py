"""KAMI's cycle model of communication-avoiding GEMM inside one thread block.

p warps hold sub-blocks of A, B and C in registers and exchange them through shared memory in
stages; the products run on the SM's tensor cores.  The model counts cycles, not seconds, so it
is independent of the clock and can be checked against clock64() breakdowns.

Symbols (DESIGN §3): m, n, k the GEMM sizes; p warps; s_e bytes per element; L_sm shared-memory
load latency (cycles); B_sm shared-memory bandwidth (bytes/cycle/SM); θr, θw the fraction of
that bandwidth reads and writes achieve (1 = conflict-free, 1/2 = two-way bank conflicts);
O_tc ops/cycle of one tensor core (an op is a multiply or an add: 2mnk per product); n_tc tensor
cores per SM.

We use the paper's closed forms.  Its per-stage T_cp expressions for 2D and 3D contain typos;
the closed forms below and its worked numbers agree (tests/test_planner.py checks them).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["KamiCycles", "kami_1d", "kami_2d", "kami_3d", "kami", "kami_params"]


class KamiCycles(NamedTuple):
    V_cm: float  # bytes moved through shared memory in one stage (all warps together)
    T_cm: float  # cycles of one communication stage: one latency plus one V_cm transfer
    T_cp: float  # tensor-core cycles for the whole product
    T_all: float  # total: every stage's communication plus the computation
    stages: float  # p (1D), √p (2D), ∛p (3D)


def _model(stages, volume, m, n, k, s_e, L_sm, B_sm, theta_r, theta_w, O_tc, n_tc):
    V_cm = volume * s_e
    # The first stage writes the operands, each later stage reads another warp's share.
    comm = L_sm * stages + V_cm / (theta_w * B_sm) + (stages - 1) * V_cm / (theta_r * B_sm)
    T_cp = 2.0 * m * n * k / (n_tc * O_tc)
    return KamiCycles(V_cm, comm / stages, T_cp, comm + T_cp, stages)


def kami_1d(m, n, k, p, s_e, L_sm, B_sm, theta_r=1.0, theta_w=1.0, O_tc=32.0, n_tc=4):
    """1D: B's k×n panel is the traffic; p stages."""
    return _model(p, k * n, m, n, k, s_e, L_sm, B_sm, theta_r, theta_w, O_tc, n_tc)


def kami_2d(m, n, k, p, s_e, L_sm, B_sm, theta_r=1.0, theta_w=1.0, O_tc=32.0, n_tc=4):
    """2D: √p × √p warps exchange A and B panels; √p stages."""
    return _model(p ** 0.5, m * k + n * k, m, n, k, s_e, L_sm, B_sm, theta_r, theta_w, O_tc,
                  n_tc)


def kami_3d(m, n, k, p, s_e, L_sm, B_sm, theta_r=1.0, theta_w=1.0, O_tc=32.0, n_tc=4):
    """3D: ∛p × ∛p × ∛p warps; as 2D with ∛p stages."""
    return _model(round(p ** (1.0 / 3.0), 12), m * k + n * k, m, n, k, s_e, L_sm, B_sm, theta_r,
                  theta_w, O_tc, n_tc)


def kami(dims, m, n, k, p, **params):
    """Dispatch on the arrangement: dims = 1, 2 or 3."""
    try:
        fn = {1: kami_1d, 2: kami_2d, 3: kami_3d}[dims]
    except KeyError:
        raise ValueError(f"dims: expected 1, 2 or 3, got {dims!r}") from None
    return fn(m, n, k, p, **params)


_TC_KIND = {"float64": "fp64", "float32": "tf32", "float16": "fp16", "bfloat16": "bf16"}
from ..common.dtypes import ITEMSIZE as _ITEMSIZE


def kami_params(profile, dtype, stride=1) -> dict:
    """The model's device parameters from a (calibrated) profile, for kami()/kami_1d()…:
    tensor-core kind by dtype (float32 runs as TF32), θ for the warps' access stride in words.
    Divide the cycles by profile.clock_hz for seconds."""
    kind = _TC_KIND.get(dtype, "fp16")
    rate = profile.tc_ops.get(kind)
    if not rate:
        raise ValueError(f"dtype: {profile.name} has no {kind} tensor-core rate for {dtype}")
    theta = profile.theta.get(stride, 1.0)
    return {"s_e": _ITEMSIZE.get(dtype, 4), "L_sm": profile.L_sm, "B_sm": profile.B_sm,
            "theta_r": theta, "theta_w": theta, "O_tc": rate / profile.n_tc,
            "n_tc": profile.n_tc}
