"""The CUDA launcher's tile choice, asked of the launcher itself (ks.h kl_ks_cuda_tile: the
dispatch of kl_ks_matmul_cuda in probe mode, no launch and no GPU), against cases derived by
hand from the rules in kernels/structured/ks_cuda.cu and ks_cuda_launch.cuh.  Runs wherever the
CUDA extension was built, GPU or not."""
from __future__ import annotations

import pytest

from kronlinalg.testing import extension

ks_cuda = extension("structured_cuda")
pytestmark = pytest.mark.skipif(ks_cuda is None, reason="the CUDA extension was not built")

F32, F64, F16, BF16 = 0, 1, 2, 3
FIRST, LAST = 0, 1
SIMPLE, PIPE, NATURAL, WGMMA = 0, 1, 2, 3


@pytest.fixture
def fp32_mode():
    """Sets the kernel's float32 mode (0 3xTF32, 1 IEEE) for one test."""
    prev = ks_cuda.float32_mode()
    yield ks_cuda.float32_mode
    ks_cuda.float32_mode(prev)


@pytest.fixture(autouse=True)
def _default_knobs(monkeypatch):
    for knob in ("KRONLINALG_KS_NATURAL", "KRONLINALG_KS_WGMMA", "KRONLINALG_KS_KT"):
        monkeypatch.delenv(knob, raising=False)


@pytest.mark.parametrize("pattern, batch, layout, tile", [
    # d = 3, 6: whole-d tiles of 6 / 12 warps
    ((1, 64, 64, 3), 1000, FIRST, (64, 64, 8, 3, SIMPLE)),
    ((2, 32, 24, 6), 64, LAST, (64, 64, 8, 6, SIMPLE)),
    # d = 1: pick_tk(b, {32, 128}): b = 32 -> 32 (1 + 8/32 < 4 + 8/128), b = 128 -> 128
    ((1, 32, 64, 1), 1000, FIRST, (512, 32, 8, 1, SIMPLE)),
    ((1, 128, 64, 1), 1000, FIRST, (128, 128, 8, 1, SIMPLE)),
    # d = 4: pick_tk(b, {16, 64}): b = 64 -> 64, b = 24 -> 16 (1.33 + 0.5 < 2.67 + 0.125)
    ((1, 64, 64, 4), 7, LAST, (64, 64, 8, 4, SIMPLE)),
    ((1, 24, 64, 4), 7, LAST, (256, 16, 8, 4, SIMPLE)),
    # pick_tj: 16 -> 8 (the float32 kernel's TJ = 16 is 8), d = 5 -> 8, d = 10 -> 16 -> 8
    ((1, 64, 64, 16), 64, FIRST, (64, 32, 4, 8, SIMPLE)),
    ((1, 64, 64, 5), 64, FIRST, (64, 32, 4, 8, SIMPLE)),
    ((4, 16, 16, 10), 64, LAST, (64, 32, 4, 8, SIMPLE)),
    ((1, 64, 64, 2), 64, FIRST, (128, 64, 8, 2, SIMPLE)),
])
def test_float32_ieee(fp32_mode, pattern, batch, layout, tile):
    fp32_mode(1)
    assert ks_cuda.tile(pattern, batch, layout, F32, 132) == tile


@pytest.mark.parametrize("pattern, batch, layout, tile", [
    # d = 1 on a small slab (b·c <= 384·512), batch_last or b > 64: 4-warp 128 x 64 tiles
    ((1, 128, 64, 1), 64, LAST, (128, 64, 16, 1, PIPE)),
    ((1, 128, 64, 1), 64, FIRST, (128, 64, 16, 1, PIPE)),
    # ... batch_first with b <= 64: the k tile of 64 pads b = 64 less than 128
    ((1, 64, 64, 1), 64, FIRST, (256, 64, 16, 1, PIPE)),
    # ... a large slab: a tie of the paddings goes to 128 x 128
    ((1, 1024, 1024, 1), 64, LAST, (128, 128, 16, 1, PIPE)),
    # whole-d spans, l chunks of 8 for float32
    ((1, 64, 64, 2), 64, FIRST, (128, 64, 8, 2, PIPE)),
    ((1, 64, 64, 6), 64, FIRST, (64, 32, 8, 6, PIPE)),
    # runs of 8, 4, 2, 1 j
    ((1, 64, 64, 24), 64, FIRST, (64, 32, 8, 8, PIPE)),
    ((1, 64, 64, 12), 64, FIRST, (64, 64, 8, 4, PIPE)),
    ((1, 64, 64, 10), 64, FIRST, (128, 64, 8, 2, PIPE)),
    ((1, 64, 64, 7), 64, FIRST, (128, 128, 8, 1, PIPE)),
    # c % 8 != 0: no pipelined kernel, the CUDA-core one
    ((1, 64, 12, 4), 64, FIRST, (64, 64, 8, 4, SIMPLE)),
    # batch_last with a batch that is no multiple of 8: X's rows are not 16-byte aligned
    ((1, 64, 64, 2), 7, LAST, (128, 64, 8, 2, SIMPLE)),
    ((1, 64, 64, 2), 1, LAST, (128, 64, 8, 2, SIMPLE)),
])
def test_float32_tf32x3(fp32_mode, pattern, batch, layout, tile):
    fp32_mode(0)
    assert ks_cuda.tile(pattern, batch, layout, F32, 132) == tile


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("pattern, batch, layout, units, tile", [
    # the natural-layout kernel: batch_first d = 3, and d = 2 with b·c <= 128²
    ((1, 64, 64, 3), 25088, FIRST, 132, (64, 64, 32, 3, NATURAL)),
    ((1, 128, 128, 2), 25088, FIRST, 132, (128, 64, 32, 2, NATURAL)),
    # d = 3 batch_last: the pipelined span shape, l chunks of 32
    ((1, 64, 64, 3), 25088, LAST, 132, (64, 64, 32, 3, PIPE)),
    # d = 2 batch_first, b·c >= 2·128²: wide 128 x 128 where a·⌈B/128⌉·⌈b/128⌉ >= 2·units
    # (196·2 = 392: >= 264, < 400)
    ((1, 256, 256, 2), 25088, FIRST, 132, (128, 128, 32, 2, PIPE)),
    ((1, 256, 256, 2), 25088, FIRST, 200, (128, 64, 32, 2, PIPE)),
    ((1, 256, 256, 2), 64, FIRST, 132, (128, 64, 32, 2, PIPE)),
    # runs of 8 j batch_last with b·c >= 128²: wide 64 x 64
    ((1, 128, 128, 8), 25088, LAST, 108, (64, 64, 16, 8, PIPE)),
    ((1, 64, 128, 8), 25088, LAST, 108, (64, 32, 16, 8, PIPE)),
    # d = 1: l chunks of 64, the k tile that pads b least (ties: 128)
    ((1, 64, 64, 1), 1000, LAST, 132, (256, 64, 64, 1, PIPE)),
    ((1, 256, 64, 1), 1000, LAST, 132, (128, 128, 64, 1, PIPE)),
    # c % 8 != 0: the one-stage mma.sync kernel, 8192 outputs per block, TL = 16
    ((1, 64, 12, 4), 1000, FIRST, 132, (128, 16, 16, 4, SIMPLE)),
    ((1, 64, 12, 1), 1000, LAST, 132, (128, 64, 16, 1, SIMPLE)),
    ((1, 64, 12, 24), 1000, LAST, 132, (64, 16, 16, 8, SIMPLE)),
])
def test_half(dtype, pattern, batch, layout, units, tile):
    assert ks_cuda.tile(pattern, batch, layout, dtype, units) == tile


def test_knobs_are_read_per_call(monkeypatch):
    monkeypatch.setenv("KRONLINALG_KS_NATURAL", "0")
    assert ks_cuda.tile((1, 64, 64, 3), 25088, FIRST, F16, 132) == (64, 64, 32, 3, PIPE)
    monkeypatch.setenv("KRONLINALG_KS_NATURAL", "1")
    assert ks_cuda.tile((1, 256, 256, 2), 25088, FIRST, F16, 132) == (128, 64, 32, 2, NATURAL)


def test_wgmma():
    """units < 0: an sm_90; the wgmma shapes where the build has them (gpu_arch 90a)."""
    p = (1, 128, 64, 1)
    assert ks_cuda.tile(p, 25088, FIRST, F16, 132) == (128, 128, 64, 1, PIPE)
    assert ks_cuda.tile(p, 25088, FIRST, F16, -132) in ((128, 128, 64, 1, WGMMA),
                                                       (128, 128, 64, 1, PIPE))
    built = ks_cuda.tile(p, 25088, FIRST, F16, -132)[4] == WGMMA
    if built:
        assert ks_cuda.tile((1, 128, 128, 2), 25088, FIRST, F16, -132)[4] == NATURAL
        assert ks_cuda.tile((1, 256, 256, 2), 64, FIRST, F16, -132) == (128, 128, 32, 2, WGMMA)
        assert ks_cuda.tile((1, 128, 128, 4), 64, FIRST, F16, -132) == (64, 128, 32, 4, WGMMA)
        assert ks_cuda.tile((1, 64, 64, 6), 64, FIRST, F16, -132) == (64, 64, 32, 6, WGMMA)
        assert ks_cuda.tile((1, 128, 64, 1), 64, LAST, F16, -132)[4] == PIPE
        assert ks_cuda.tile((1, 64, 64, 1), 64, FIRST, F16, -132)[4] == PIPE  # b <= 64


def test_errors():
    with pytest.raises(RuntimeError, match="unsupported dtype"):
        ks_cuda.tile((1, 64, 64, 2), 64, FIRST, F64, 132)
    with pytest.raises(RuntimeError, match="invalid problem"):
        ks_cuda.tile((0, 64, 64, 2), 64, FIRST, F16, 132)
