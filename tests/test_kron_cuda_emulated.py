"""The CUDA kron kernels' indexing on the CPU: the natural-order tensor-core kernels (float64
DMMA, float16, bfloat16) run under a host emulator (kernels/kron/kron_cuda_ptx_emu.h), no GPU
needed.  Their GPU runs are in test_kron_cuda.py."""
from __future__ import annotations

import os

import pytest


def test_mma_natural_kernels_emulated(tmp_path):
    """kernels/kron/kron_natural_emulate.cpp runs the float64, float16 and bfloat16 natural-order
    kernels with one thread per CUDA thread (the mma fragments from the PTX ISA's layouts) on
    the CPU: every P, line and column tiles, several passes, alpha and beta, partial tiles,
    nothing written past y; and the half types' ring kernel (its mbarriers emulated)."""
    import shutil
    import subprocess

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")
    cuda_inc = next((p for p in ("/usr/local/cuda/include", "/usr/include")
                     if os.path.exists(os.path.join(p, "cuda_fp16.h"))), None)
    if shutil.which("g++") is None or cuda_inc is None:
        pytest.skip("needs g++ and the CUDA headers")
    exe = tmp_path / "kron_natural_emulate"
    src = os.path.join(root, "kron")
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-DKL_EMU", f"-I{cuda_inc}",
                    f"-I{src}", f"-I{root}/include", f"-I{root}/common",
                    os.path.join(src, "kron_natural_emulate.cpp"), "-o", str(exe)], check=True)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "0 failures" in res.stdout
