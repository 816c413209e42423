"""A wheel install (``pip install .``, not editable) carries the shipped search
spaces and runs a search: nothing may depend on the source checkout."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_wheel_install_runs_a_search_on_a_shipped_space(tmp_path):
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    # The dependencies (torch, PyG, optuna) come from this environment, read-only.
    Path(site.stdout.strip(), "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(ROOT)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run([str(py), "-c", "import autotune, autotune.space as s; "
                            "print(autotune.__file__); print(s.SPACES_DIR)"],
                           capture_output=True, text=True, cwd=tmp_path)
    module, spaces = where.stdout.split()
    assert str(venv) in module and str(venv) in spaces, where.stdout
    assert (Path(spaces) / "quick.yaml").exists()
    run = subprocess.run([str(venv / "bin" / "autotune"), "search", "--space", "quick",
                          "--n-trials", "1", "--dataset", "synthetic", "--scale", "0.004",
                          "--steps", "2", "--warmup", "1", "--max-seconds", "0.5", "--root",
                          str(tmp_path / "data")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("] #") == 1 and "Pareto front" in run.stdout
