"""The layers of pyproject.toml's import-linter contracts hold, and lint-imports
would catch a break: an upward import inside a function, and a circle."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache", "--config", str(root / "pyproject.toml")],
                          cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_layers_and_no_circles_hold():
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    assert "2 kept, 0 broken" in run.stdout


@pytest.fixture
def copy(tmp_path) -> Path:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(ROOT / "autotune", tmp_path / "autotune",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "search_spaces", tmp_path / "search_spaces")
    return tmp_path


@pytest.mark.parametrize("module, line, broken", [
    # the sampler's kernels reaching up into the search layer, inside a function
    ("kernels.py", "def _up():\n    from autotune import pareto  # noqa\n", "layers:"),
    # the synthetic generators and the datasets importing each other
    ("synthetic.py", "def _back():\n    from autotune import datasets  # noqa\n",
     "no import circles"),
])
def test_lint_imports_catches_a_break(copy, module, line, broken):
    path = copy / "autotune" / module
    path.write_text(path.read_text() + "\n\n" + line)
    run = _lint(copy)
    assert run.returncode != 0, run.stdout[-2000:]
    assert "1 kept, 1 broken" in run.stdout
    assert next(line for line in run.stdout.splitlines() if "BROKEN" in line).startswith(broken)
