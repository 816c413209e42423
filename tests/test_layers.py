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


def test_the_top_holds_packages_and_a_few_shared_modules_each_in_a_layer():
    """autotune/ is a package per concept and at most fourteen modules beside them,
    and the layers contract names every one of them (a module inside a package
    takes its layer from its folder)."""
    import tomllib

    top = sorted(p.stem for p in (ROOT / "autotune").glob("*.py"))
    packages = sorted(p.name for p in (ROOT / "autotune").iterdir()
                      if (p / "__init__.py").is_file())
    assert len(top) <= 14, top
    assert {"cli", "study", "trial", "pipeline", "data", "sampling"} <= set(packages)
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = contract["contracts"][0]["layers"]
    named = {name.strip().removeprefix("autotune.") for layer in layers
             for name in layer.split(":")}
    assert named == (set(top) | set(packages)) - {"__init__"}, named ^ set(top + packages)
    for package in packages:  # each re-exports its public names from private modules
        modules = [p.stem for p in (ROOT / "autotune" / package).glob("*.py")]
        assert all(m.startswith("_") for m in modules), (package, modules)


@pytest.mark.parametrize("module, line, broken, summary", [
    # the sampler's kernels reaching up into the search layer, inside a function
    ("sampling/_kernels.py", "def _up():\n    from autotune.study import _pareto  # noqa\n",
     "layers:", "0 kept, 2 broken"),  # and a circle of the packages sampling and study
    # the synthetic generators and the datasets importing each other
    ("data/_synthetic.py", "def _back():\n    from autotune.data import _datasets  # noqa\n",
     "no import circles", "1 kept, 1 broken"),
])
def test_lint_imports_catches_a_break(copy, module, line, broken, summary):
    path = copy / "autotune" / module
    path.write_text(path.read_text() + "\n\n" + line)
    run = _lint(copy)
    assert run.returncode != 0, run.stdout[-2000:]
    assert summary in run.stdout
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


PRINTS = ("autotune/cli/_main.py", "autotune/cli/_render.py", "autotune/cli/_report.py",
          "autotune/study/_progress.py")


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
            if name != "autotune/study/_records.py" and (
                    isinstance(node, ast.Attribute) and "user_attr" in node.attr or
                    isinstance(node, ast.keyword) and node.arg == "user_attrs"):
                found.append(f"{name}:{node.lineno}: {text[:60]}")
            if isinstance(node, ast.Compare) and name not in (
                    "autotune/taskinfo.py", "autotune/pipeline/_tasks.py") and "task" in text and \
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
    docstring included), cli/_main.py under 700."""
    import ast

    long = [f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name, tree in _modules() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > 50]
    assert not long, "\n".join(long)
    assert len((ROOT / "autotune" / "cli" / "_main.py").read_text().splitlines()) < 700


def test_the_layout_page_names_every_module():
    """docs/layout.md is drawn from the packages: every module of every package, and
    every shared module at the top, is named there."""
    page = (ROOT / "docs" / "layout.md").read_text()
    missing = [path.relative_to(ROOT).as_posix() for path in (ROOT / "autotune").rglob("*.py")
               if path.stem not in ("__init__", "__main__") and f"`{path.stem}`" not in page]
    assert not missing, missing


# The modules that keep imports of autotune's own modules inside functions, and why
# (their docstrings say so): the CLI, its dashboard and renderer stay fast to import
# (autotune --help), the trial process times its imports, the fork server imports
# after setting its protocol aside, the options read the storage only when asked.
LAZY = {"autotune/cli/_main.py": "fast", "autotune/cli/_dashboard.py": "fast",
        "autotune/cli/_render.py": "only when", "autotune/trial/_worker.py": "timed apart",
        "autotune/trial/_forkserver.py": "set aside", "autotune/study/_options.py": "only when"}


def test_imports_are_at_module_level_unless_a_lazy_one_says_why():
    import ast

    inside = {}
    for name, tree in _modules():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                            "autotune"):
                        inside.setdefault(name, []).append(f"{node.lineno}: {node.module}")
    unexplained = {name: at for name, at in inside.items() if name not in LAZY}
    assert not unexplained, unexplained
    for name, why in LAZY.items():
        assert why in (ROOT / name).read_text(), f"{name} does not say why it imports lazily"
