"""Every run-time knob of kronlinalg, in one table: name, type, default and what it does.

Python code reads a knob only through :func:`get` (never ``os.environ``); the C++ kernels read
theirs through ``kernels/common/knobs.hpp``.  Both kinds are listed here, so this table is the
whole list.  Knobs are read when they are used (not cached at import), so a test or a session
can change one with ``os.environ`` and see its effect on the next call.

    >>> from kronlinalg.common import config
    >>> config.get("KRONLINALG_GEMM_TUNE")
    '1'
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Knob", "KNOBS", "get", "describe"]


@dataclass(frozen=True)
class Knob:
    name: str
    type: type  # str, int or float: what get() returns
    default: object
    doc: str
    reader: str = "python"  # "python" (read by kronlinalg/) or "c++" (kernels/common/knobs.hpp)


KNOBS: dict = {k.name: k for k in (
    # --- caches and tuning (Python) ---
    Knob("KRONLINALG_CACHE_DIR", str, "",
         "directory of the per-device calibration profiles (default $XDG_CACHE_HOME/kronlinalg "
         "or ~/.cache/kronlinalg)"),
    Knob("KRONLINALG_GEMM_TUNE", str, "1",
         "cuBLASLt algorithm tuning of packed weights' GEMMs: 1 on, 0 off, 'all' also unpacked "
         "calls"),
    Knob("KRONLINALG_GEMM_SEARCH", str, "",
         "'0' keeps the GEMM tuning to cuBLASLt's heuristic list (no neighbour search)"),
    Knob("KRONLINALG_GEMM_SEARCH_BUDGET", float, 0.15,
         "seconds the GEMM tuning may spend searching per GEMM"),
    Knob("KRONLINALG_GEMM_CACHE", str, "",
         "JSON file keeping the tuned GEMM choices across processes (per device and cuBLASLt "
         "version)"),
    Knob("KRONLINALG_TEST_SEED", int, 0,
         "tests: the seed of the per-test random generator (0: a fresh one, reported on failure)"),
    # --- float32 modes (read by Python and by C++ at the first use) ---
    Knob("KRONLINALG_KRON_FP32", str, "",
         "'ffma': kron_matmul's CUDA float32 runs IEEE CUDA-core FMAs by default (not 3xTF32)",
         "both"),
    Knob("KRONLINALG_BS_FP32", str, "",
         "'ffma': spmm/spgemm's CUDA float32 runs IEEE CUDA-core FMAs by default", "both"),
    Knob("KRONLINALG_KS_FP32", str, "",
         "'ffma': structured_matmul's CUDA float32 runs IEEE CUDA-core FMAs by default", "both"),
    Knob("KRONLINALG_BATCHED_FP32", str, "",
         "'ffma': batched_matmul's CUDA float32 runs IEEE CUDA-core FMAs by default (not 3xTF32)",
         "both"),
    # --- kernel tuning switches (C++, for comparisons and sweeps) ---
    Knob("KRONLINALG_BATCHED_LARGE", int, 96,
         "batched_matmul float16/bfloat16/3xTF32 (float64: variable sizes only): order from "
         "which 128 x 128 tiles run (0: off)",
         "c++"),
    Knob("KRONLINALG_BATCHED_STAGING", int, 1,
         "batched_matmul's large tiles, variable sizes: 1 stages unaligned rows in place (their "
         "aligned chunks by cp.async, shifted before use), 0 loads them synchronously", "c++"),
    Knob("KRONLINALG_BATCHED_WGMMA", int, 1,
         "batched_matmul's half types on the warpgroup-MMA kernel (sm_90a builds on an H100): "
         "0 never, 1 uniform stacks of 16-byte aligned rows from order 96 with k >= 64 and "
         "the products of variable batches whose rows are 16-byte aligned, 2 every variable "
         "product of order >= 96 too, 3 and every uniform stack of aligned rows", "c++"),
    Knob("KRONLINALG_BATCHED_WG_STAGED", int, 1,
         "batched_matmul: the half types' variable products of order >= 96 whose rows sit at "
         "other offsets on the staged form of the warpgroup-MMA kernel (their chunks land by "
         "cp.async and are shifted in shared memory; the default with the kernel on), 0 on the "
         "mma.sync kernel", "c++"),
    Knob("KRONLINALG_BATCHED_TINY", int, 1,
         "batched_matmul: 0 turns off the tiny-product kernel (orders <= 32, dense row-major "
         "operands a fixed stride apart)", "c++"),
    Knob("KRONLINALG_BATCHED_THIN", int, 1,
         "batched_matmul: 0 turns off the thin-product kernel (float16 / bfloat16 / 3xTF32 "
         "low-rank stacks: k <= 32 from order 64, dense row-major operands a fixed stride apart)",
         "c++"),
    Knob("KRONLINALG_BATCHED_THIN_OPTS", int, -1,
         "batched_matmul's thin-product kernel, for comparisons (-1: the launcher's measured "
         "choice): bit 0 blocks of 8 warps (128 x 128 tiles) instead of 4 (64 x 128), bit 1 the "
         "half types' results out by bulk copies (compute capability 9.0+), bit 2 float32's "
         "warps in rows of the tile instead of a 2-column grid, bit 3 float32's grid results "
         "staged half a warp's tile at a time and out by bulk copies (compute capability 9.0+)",
         "c++"),
    Knob("KRONLINALG_BATCHED_MID", int, 48,
         "batched_matmul: order from which uniform stacks run the 64 x 64 tiles of the same "
         "kernel (0: off)", "c++"),
    Knob("KRONLINALG_KRON_NATURAL", int, 1,
         "0 turns off kron's natural-order tensor-core kernel", "c++"),
    Knob("KRONLINALG_KRON_NATURAL_T", int, 0, "natural kernel: lines per line tile (0: planned)",
         "c++"),
    Knob("KRONLINALG_KRON_NATURAL_TI", int, 0, "natural kernel: i per column tile (0: planned)",
         "c++"),
    Knob("KRONLINALG_KRON_NATURAL_TI_MIN", int, 8, "natural kernel: narrowest column tile, 8 or 4",
         "c++"),
    Knob("KRONLINALG_KRON_NATURAL_WARPS", int, 0, "natural kernel: warps per block, 4 or 8",
         "c++"),
    Knob("KRONLINALG_KRON_NATURAL_SHORTER", int, -1,
         "P x P groups split into shorter natural passes, not sliced: -1 half, 1 +float64, 0 none",
         "c++"),
    Knob("KRONLINALG_KRON_NATURAL_STAGES", int, 0, "natural kernel: load buffers, 2 or 3", "c++"),
    Knob("KRONLINALG_KRON_NATURAL_RING", int, 1, "0 turns off the ring form of the natural kernel",
         "c++"),
    Knob("KRONLINALG_KRON_NATURAL_RING_TI", int, -1,
         "ring kernel column tiles: 16 or 32 i; 0 only groups that fit no other kernel", "c++"),
    Knob("KRONLINALG_KRON_NATURAL_RING_HALF", int, 3,
         "half ring kernel: 0 none, 1 groups no other tile fits, 2 +P=32 columns of 64 i, 3 +P=16",
         "c++"),
    Knob("KRONLINALG_KRON_CLUSTER", int, 0,
         "1 enables kron's 16-block cluster kernel for six 8x8 float32 factors (sm_90)", "c++"),
    Knob("KRONLINALG_KS_KT", int, -1,
         "structured kernel: 1 always, 0 never reads K transposed (unset: the launcher decides)",
         "c++"),
    Knob("KRONLINALG_KS_TILES", str, "", "'narrow' keeps the structured kernel's 8-warp tiles",
         "c++"),
    Knob("KRONLINALG_KS_WGMMA", int, -1,
         "structured kernel: 1 always, 0 never takes the wgmma form (unset: the launcher decides)",
         "c++"),
    Knob("KRONLINALG_BS_PANEL", int, -1,
         "spmm's half-precision panel kernel: bit 0 C staged for 16-byte stores, bit 1 A read "
         "L2 evict-first, bit 2 strip-major grid where X exceeds the L2 (every dtype), bit 3 "
         "persistent, bits 4-7 the 256-column pipeline depth (4/8/12), bits 8-15 a persistent "
         "grid cap, bit 16 strip-major always; -1: the default",
         "c++"),
    Knob("KRONLINALG_STRASSEN_LEAF", int, -1,
         "strassen FP64 leaf on sm_90: 0 the own mma.sync kernel; CUTLASS mainloops 1 128x128 "
         "m16n8k4, 2 128x64 m16n8k4 (-1: the built default; 1, 2 need a build with CUTLASS; "
         "other values: the own kernel)", "c++"),
    Knob("KRONLINALG_STRASSEN_WINOGRAD", int, 1,
         "strassen_cublas at one level, float64, beta = 0: 1 Winograd's form (products "
         "straight into C, one combine pass), 2 the same with its sums pass on a second stream "
         "beside the first product, 0 Strassen's sums with a product buffer"),
    Knob("KRONLINALG_EMULATE_RN", str, "",
         "batched_matmul's CPU emulator of its CUDA kernels (tests): set, tensor-core sums "
         "round to nearest instead of truncating", "c++"),
    Knob("KRONLINALG_KS_NATURAL", int, -1,
         "structured kernel: 1 always, 0 never takes the natural-order form", "c++"),
)}


def get(name: str):
    """The knob's value from the environment, converted to its type (the default when unset,
    empty or not convertible)."""
    knob = KNOBS[name]  # KeyError: a knob that is not in the table is a bug
    raw = os.environ.get(name, "")
    if raw == "":
        return knob.default
    try:
        return knob.type(raw)
    except ValueError:
        return knob.default


def describe() -> str:
    """The table as text (``python -c "from kronlinalg.common import config; print(config.describe())"``)."""
    width = max(map(len, KNOBS))
    return "\n".join(f"{k.name.ljust(width)}  {k.reader:6}  default {k.default!r}: {k.doc}"
                     for k in KNOBS.values())
