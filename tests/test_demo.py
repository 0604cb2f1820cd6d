"""The ``kronlinalg`` command: ``kronlinalg demo`` (Gaussian-process regression on a grid with a
Kronecker kernel, fitted beside a peer model) runs and reports, through the console entry point
and, where it is installed, the script itself."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from kronlinalg.__main__ import main


def _fits(out):
    """{model label: (NLL/N, RMSE)} from the demo's report."""
    rows = re.findall(r"^  (\S.*?)\s+fit .*NLL/N ([-+0-9.]+) .*RMSE vs truth ([0-9.]+)", out, re.M)
    return {label: (float(nll), float(rmse)) for label, nll, rmse in rows}


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_demo_fits_beside_dense(capsys, backend):
    if backend == "torch":
        pytest.importorskip("torch")
    rc = main(["demo", "--device", "cpu", "--backend", backend, "--grid", "6", "7", "5",
               "--steps", "8", "--compare", "dense"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "N = 210" in out and "speedup" in out and "the two fits agree" in out
    fits = _fits(out)
    assert len(fits) == 2, out
    (nll_k, rmse_k), (nll_d, rmse_d) = fits.values()
    assert abs(nll_k - nll_d) < 1e-3 and abs(rmse_k - rmse_d) < 1e-3
    # the noise is 0.1: a fitted model predicts the noise-free function better than that
    assert rmse_k < 0.1, out


def test_demo_fit_improves_the_likelihood(capsys):
    nll = []
    for steps in ("1", "15"):
        assert main(["demo", "--device", "cpu", "--backend", "numpy", "--grid", "8", "6",
                     "--steps", steps, "--compare", "none"]) == 0
        nll.append(next(iter(_fits(capsys.readouterr().out).values()))[0])
    assert nll[1] < nll[0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_demo_dtypes(capsys, dtype):
    rc = main(["demo", "--device", "cpu", "--backend", "numpy", "--grid", "5", "6",
               "--steps", "5", "--dtype", dtype])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert dtype in out and "speedup" in out


def test_demo_beside_linear_operator(capsys):
    pytest.importorskip("torch")
    pytest.importorskip("linear_operator")
    rc = main(["demo", "--device", "cpu", "--backend", "torch", "--grid", "6", "5", "4",
               "--steps", "5", "--compare", "gpytorch"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "linear_operator" in out and "the two fits agree" in out


def test_demo_bad_arguments():
    with pytest.raises(SystemExit):
        main(["demo", "--device", "tpu"])
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(SystemExit):
        main(["demo", "--grid", "0", "3"])


def test_command_name(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith("usage: kronlinalg ")


def _script():
    """The installed ``kronlinalg`` script: next to this interpreter, else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "kronlinalg")
    return here if os.access(here, os.X_OK) else shutil.which("kronlinalg")


def test_console_script(tmp_path):
    script = _script()
    if script is None:
        pytest.skip("the kronlinalg console script is not installed on PATH")
    # from a directory that holds no kronlinalg/, as a user runs it
    proc = subprocess.run([script, "demo", "--device", "cpu", "--grid", "5", "6", "--steps", "3"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "speedup" in proc.stdout


def test_source_tree_import_says_what_to_do():
    """From the repository root, ``import kronlinalg`` finds the checkout's kronlinalg/ first:
    with a regular install that has no compiled extensions and must fail with one clear line
    (an editable install imports through its own finder and works)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isfile(os.path.join(root, "kronlinalg", "__init__.py")):
        pytest.skip("not run from a source checkout")
    proc = subprocess.run([sys.executable, "-c", "import kronlinalg"], cwd=root,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("ImportError: kronlinalg: this is the source tree"), proc.stderr
        assert "pip install" in last and "kronlinalg demo" in last


@pytest.mark.gpu
def test_demo_gpu(capsys):
    rc = main(["demo", "--device", "gpu", "--grid", "16", "16", "16", "--steps", "5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "on gpu" in out and "speedup" in out and "the two fits agree" in out
