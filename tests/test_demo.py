"""The ``kronlinalg`` command: ``kronlinalg demo`` (the CG solve with a Kronecker GP kernel) runs
and reports, through the console entry point and, where it is installed, the script itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

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
    proc = subprocess.run([script, "demo", "--device", "cpu", "--grid", "5", "6", "--rhs", "2",
                           "--iters", "5"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
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
    rc = main(["demo", "--device", "gpu", "--grid", "16", "16", "16", "--rhs", "4",
               "--iters", "10"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "on gpu" in out and "speedup" in out
