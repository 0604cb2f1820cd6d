"""``python -m kronlinalg demo``: the CG solve with a Kronecker GP kernel runs and reports."""

from __future__ import annotations

import pytest

from kronlinalg.__main__ import main


def test_demo_cpu(capsys):
    rc = main(["demo", "--device", "cpu", "--grid", "8", "9", "10", "--rhs", "3",
               "--iters", "10"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "speedup" in out
    assert "720" in out  # the order of the system, 8 * 9 * 10
    assert "WARNING" not in out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_demo_dtypes(capsys, dtype):
    rc = main(["demo", "--device", "cpu", "--grid", "5", "6", "--rhs", "2", "--iters", "5",
               "--dtype", dtype])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert dtype in out and "speedup" in out


def test_demo_bad_arguments():
    with pytest.raises(SystemExit):
        main(["demo", "--device", "tpu"])
    with pytest.raises(SystemExit):
        main([])


@pytest.mark.gpu
def test_demo_gpu(capsys):
    rc = main(["demo", "--device", "gpu", "--grid", "16", "16", "16", "--rhs", "4",
               "--iters", "10"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "on gpu" in out and "speedup" in out
