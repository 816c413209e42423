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
    where = subprocess.run([str(py), "-c", "import autotune, autotune.study._space as s; "
                            "print(autotune.__file__); print(s.SPACES_DIR)"],
                           capture_output=True, text=True, cwd=tmp_path)
    module, spaces = where.stdout.split()
    assert str(venv) in module and str(venv) in spaces, where.stdout
    assert (Path(spaces) / "quick.yaml").exists()
    run = subprocess.run([str(venv / "bin" / "autotune"), "search", "--space", "quick",
                          "--n-trials", "1", "--dataset", "synthetic", "--scale", "0.004",
                          "--steps", "2", "--warmup", "1",
                          "--warmup-time", "0", "--max-seconds", "0.5", "--root",
                          str(tmp_path / "data")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("] #") == 1 and "Pareto front" in run.stdout


def _stand_in_wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel of ``name`` ``version`` holding an empty module and no requirements: a
    stand-in distribution for pip's resolver, installed without an index."""
    import zipfile

    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {f"{dist}/__init__.py": f"__version__ = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: autotune-tests\n"
                              "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


def _requirements() -> list:
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def test_the_torch_requirement_takes_a_gpu_machines_build_and_the_tested_one():
    """A range with an upper bound, as PyG's: the H100's 2.11+cu130 and the 2.13.0 CPU
    build CI pins (.ci/constraints.txt) are in it, an untested next minor is not."""
    torch_req = next(r for r in _requirements() if r.name == "torch")
    assert torch_req.specifier.contains("2.11.0+cu130", prereleases=False)
    assert torch_req.specifier.contains("2.13.0")
    assert not torch_req.specifier.contains("2.14.0")
    pinned = (ROOT / ".ci" / "constraints.txt").read_text().split()
    assert "torch==2.13.0" in pinned


@pytest.mark.slow
def test_installing_beside_a_cuda_torch_keeps_it(tmp_path):
    """Offline: an environment that already holds torch 2.11.0+cu130 (a stand-in
    distribution) installs autotune, and pip keeps that torch."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _stand_in_wheel(wheels, "torch", "2.11.0+cu130")
    for req in _requirements():
        if req.name != "torch":  # the lowest version each requirement takes
            low = next((s.version for s in req.specifier if s.operator in (">=", "==")), "1.0")
            _stand_in_wheel(wheels, req.name, low)
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
           "--find-links", str(wheels), "--disable-pip-version-check"]
    subprocess.run([*pip, "torch==2.11.0+cu130"], check=True, capture_output=True)
    # built here, where setuptools builds wheels (a new venv's bundled one cannot)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                    "--no-build-isolation", "-w", str(wheels), str(ROOT)], check=True,
                   capture_output=True, cwd=tmp_path)
    install = subprocess.run([*pip, "autotune"], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list",
                             "--format=freeze"], capture_output=True, text=True, check=True)
    assert "torch==2.11.0+cu130" in listed.stdout.split(), listed.stdout
    assert any(line.startswith("autotune==") for line in listed.stdout.split())
