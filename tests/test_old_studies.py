"""A study written by an older autotune (tests/fixtures/study-ca91c29.db, made by
tests/fixtures/make_study.py at commit ca91c29, before the packages, the renamed
neighbour-sampling backend and the stored trial role) opens, shows, exports and
resumes, as a user's studies/ folder would after an upgrade."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _helpers import cli

from autotune.config import TrialConfig

FIXTURES = Path(__file__).parent / "fixtures"
NAME = "study-ca91c29"


@pytest.fixture
def studies(tmp_path) -> Path:
    """A copy of the old study (the fixture itself is never written)."""
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copy(FIXTURES / f"{NAME}.db", folder / f"{NAME}.db")
    return folder


def _args(studies: Path) -> list[str]:
    return ["--study-name", NAME, "--studies-dir", str(studies)]


def test_an_old_study_reads_back_typed_with_todays_names(studies):
    from autotune.study import TrialRecord, load_study

    study, _ = load_study(NAME, studies_dir=studies)
    records = [TrialRecord.from_frozen(t) for t in study.get_trials()]
    assert len(records) == 12 and all(r.complete for r in records)
    assert all(isinstance(r.config, TrialConfig) and r.config.sampling_backend == "builtin"
               for r in records)
    assert all(r.observed.sampling_backend for r in records)
    assert [r.role for r in records] == ["baseline"] + ["prior"] * 3 + ["searched"] + \
        ["confirmation"] * 7, "the role is worked out from the markers it stored"
    assert [r.prior for r in records[1:4]] == ["bf16", "workers-on-free-cores",
                                               "in-process-sampling"]
    assert records[0].baseline and all(r.confirm is not None for r in records[5:])


def test_an_old_study_shows_and_exports(studies, tmp_path):
    from autotune.export import load_config

    shown = cli("show", *_args(studies))
    assert shown.returncode == 0, shown.stderr
    assert "<- default" in shown.stdout and "builtin" in shown.stdout
    out = tmp_path / "best.yaml"
    exported = cli("export", *_args(studies), "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert load_config(out).sampling_backend == "builtin"


@pytest.mark.slow
def test_an_old_study_resumes(studies, tmp_path):
    import runpy

    args = runpy.run_path(str(FIXTURES / "make_study.py"))["ARGS"]
    at = args.index("--n-trials") + 1
    args = [*args[:at], "6", *args[at + 1:]]  # one more trial than it has
    # a loose confirmation: what resumes is under test, not how precise 0.5-s windows
    # of a tiny graph can get (at the default ±10%, 77 pairs and 90 s of the suite)
    args += ["--confirm-precision", "0.4"]
    resumed = cli("search", *args, "--root", str(tmp_path / "data"), *_args(studies))
    assert resumed.returncode == 0, resumed.stderr
    assert "[  6/6]" in resumed.stdout, resumed.stdout
    assert "Pareto front" in resumed.stdout
