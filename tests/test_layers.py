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


def _modules():
    import ast

    for path in sorted((ROOT / "autotune").rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _main_blocks(tree) -> set:
    """The nodes under ``if __name__ == "__main__":`` and in a module's ``main``."""
    import ast

    inside = set()
    for node in ast.walk(tree):
        main = isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) or \
            isinstance(node, ast.FunctionDef) and node.name == "main"
        if main:
            inside.update(id(n) for n in ast.walk(node))
    return inside


PRINTS = ("autotune/cli.py", "autotune/render.py", "autotune/report.py")


def test_the_library_logs_and_reads_records_through_their_accessors():
    """No print or direct stderr write outside the CLI, the renderer and the report
    (and a module's own main); no Optuna user attribute outside study/records.py;
    no task compared by name outside taskinfo.py and tasks.py."""
    import ast

    found = []
    for name, tree in _modules():
        mains = _main_blocks(tree)
        for node in ast.walk(tree):
            text = ast.unparse(node) if isinstance(node, (ast.Call, ast.Attribute,
                                                         ast.Compare, ast.keyword)) else ""
            if isinstance(node, ast.Call) and name not in PRINTS and id(node) not in mains \
                    and (text.startswith("print(") or text.startswith("sys.stderr.write")):
                found.append(f"{name}:{node.lineno}: {text[:60]}")
            if name != "autotune/study/records.py" and (
                    isinstance(node, ast.Attribute) and "user_attr" in node.attr or
                    isinstance(node, ast.keyword) and node.arg == "user_attrs"):
                found.append(f"{name}:{node.lineno}: {text[:60]}")
            if isinstance(node, ast.Compare) and name not in (
                    "autotune/taskinfo.py", "autotune/tasks.py") and "task" in text and \
                    any(isinstance(c, ast.Constant) and c.value in ("node", "link", "graph")
                        for c in ast.walk(node)):
                found.append(f"{name}:{node.lineno}: {text[:60]}")
    assert not found, "\n".join(found)


def test_the_autotune_logger_is_routed_levelled_and_silenced(capsys):
    import logging

    import autotune.logging as at_logging

    log = at_logging.get_logger("autotune.storage")
    at_logging.enable_default_handler()
    try:
        log.info("a lock wait")
        at_logging.set_verbosity(logging.ERROR)
        log.warning("a storage retry")
        assert at_logging.get_verbosity() == logging.ERROR
    finally:
        at_logging.disable_default_handler()
        at_logging.set_verbosity(logging.NOTSET)
    assert capsys.readouterr().err == "autotune: a lock wait\n"


def test_no_function_over_50_lines_and_a_thin_cli():
    """Issue 37's bounds, kept: every function in autotune/ at most 50 lines (its
    docstring included), cli.py under 700."""
    import ast

    long = [f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name, tree in _modules() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > 50]
    assert not long, "\n".join(long)
    assert len((ROOT / "autotune" / "cli.py").read_text().splitlines()) < 700
