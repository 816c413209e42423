from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import assert_window_kept_its_promise, cli

ROOT = Path(__file__).resolve().parents[1]


def autotune(*args, cwd=None, timeout=300):
    return cli(*args, cwd=cwd, timeout=timeout)


def _one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("autotune: error:")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_help_does_not_import_torch():
    code = ("import sys; from autotune.cli._main import build_parser; build_parser(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("imports, call", [
    ("from autotune.env import end_quickly", "end_quickly(); end_quickly()"),
    ("from autotune.cli import main", "main(['show', '--help'])"),
    ("from autotune.trial._worker import main", "main(['-', '-'])")],
    ids=["end_quickly", "the command", "a trial's worker"])
def test_a_process_ends_with_its_objects_frozen_out_of_the_last_collections(imports, call):
    """What made a command's end slow (benchmarks/exit.py): the handler that
    freezes what is left is registered once, and has run by the process's last exit
    handler (the first registered)."""
    code = ("import atexit, gc\n"
            "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
            f"{imports}\n"
            "before = atexit._ncallbacks()\n"
            f"try:\n    {call}\nexcept (SystemExit, OSError, ValueError):\n    pass\n"
            "print('handlers added:', atexit._ncallbacks() - before)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "handlers added: 1" in proc.stdout.splitlines(), proc.stdout
    assert proc.stdout.rstrip().endswith("frozen at exit: True"), proc.stdout


def test_trial_help_has_an_example():
    proc = autotune("trial", "--help")
    assert proc.returncode == 0
    assert "autotune trial --dataset synthetic --scale 0.05" in proc.stdout


def test_missing_dataset_offline_exits_2(tmp_path):
    proc = autotune("trial", "--dataset", "Reddit", "--root", str(tmp_path / "none"),
                    "--studies-dir", str(tmp_path / "studies"))
    _one_line_error(proc, "'Reddit'", str(tmp_path / "none"), "reddit_data.npz")


@pytest.mark.parametrize("args, needles", [
    (["--scale", "0"], ["--scale", "positive"]),
    (["--steps", "-3"], ["--steps"]),
    (["--memory-limit", "lots"], ["--memory-limit", "8GiB"]),
    (["--dataset", "Redit"], ["unknown dataset 'Redit'"]),
])
def test_bad_flags_exit_2_with_one_line(tmp_path, args, needles):
    proc = autotune("trial", *args, "--root", str(tmp_path), "--studies-dir",
                    str(tmp_path / "studies"))
    _one_line_error(proc, *needles)


def test_config_with_unknown_keys_exits_2(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("batch_size: 64\nturbo: true\n")
    proc = autotune("trial", "--config", str(cfg), "--root", str(tmp_path))
    _one_line_error(proc, "unknown keys turbo", str(cfg))


@pytest.mark.slow
def test_trial_prints_json(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("batch_size: 64\nnum_neighbors: [5, 5]\nhidden_channels: 16\n")
    proc = autotune("trial", "--dataset", "synthetic", "--scale", "0.004", "--root",
                    str(tmp_path / "data"), "--config", str(cfg), "--steps", "4", "--warmup",
                    "1", "--warmup-time", "0", "--max-seconds", "0.5", "--precision", "5%",
                    "--format", "json",
                    "--studies-dir", str(tmp_path / "studies"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "ok"
    assert_window_kept_its_promise(len(result["step_times_s"]), result["window"], 4, 0.5)
    window = result["window"]
    assert window["target"] == 0.05 and window["stopped"] in ("precise", "max-seconds")
    assert 0 < window["wall_s"] < 0.5 + 1.0  # --max-seconds, plus at most one step
    assert result["summary"]["seed_nodes_per_s"] > 0
    assert list((tmp_path / "studies" / "trials").iterdir())


@pytest.mark.slow
def test_trial_profile_writes_a_trace_and_prints_the_top_ops(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("batch_size: 64\nnum_neighbors: [5, 5]\nhidden_channels: 16\n")
    prof = tmp_path / "prof"
    proc = autotune("trial", "--dataset", "synthetic", "--scale", "0.004", "--root",
                    str(tmp_path / "data"), "--config", str(cfg), "--warmup", "1",
                    "--warmup-time", "0",
                    "--max-seconds", "0.5", "--profile", str(prof), "--profile-steps", "3",
                    "--studies-dir", str(tmp_path / "studies"))
    assert proc.returncode == 0, proc.stderr
    trace = json.loads((prof / "trace.json").read_text())
    steps = [e for e in trace["traceEvents"] if e.get("name") == "autotune.step"]
    assert len(steps) == 3, "the 2 warm-up steps are run, not recorded"
    assert "profile: 3 steps after the window (not measured)" in proc.stdout
    assert "Self CPU" in proc.stdout and "aten::" in proc.stdout  # the top-ops table
    assert (prof / "top-ops.txt").read_text().strip() in proc.stdout
    result_file, = (tmp_path / "studies" / "trials").glob("*/result.json")
    result = json.loads(result_file.read_text())
    assert result["profile"]["trace"] == str(prof.resolve() / "trace.json")
    assert result["status"] == "ok" and result["window"]["stopped"]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in (ROOT / "README.md").read_text()


def test_every_benchmark_script_imports(monkeypatch):
    """Each script in benchmarks/ imports (what it takes from autotune, and from the
    scripts beside it, still exists there); no test runs them (they take minutes)."""
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    scripts = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py"))
    assert "quickstart" in scripts and "verdicts" in scripts
    try:
        for name in scripts:
            assert importlib.import_module(name).__file__ == \
                str(ROOT / "benchmarks" / f"{name}.py"), name
    finally:
        for name in scripts:  # none stays importable by its bare name
            sys.modules.pop(name, None)


def test_public_names_resolve():
    import autotune

    for name in autotune.__all__:
        assert getattr(autotune, name) is not None


def test_durations_take_units():
    from autotune.cli._flags import _duration, _warmup_time

    assert [_duration(t) for t in ("90", "90s", "15m", "2h", "1.5h")] == \
        [90, 90, 900, 7200, 5400]
    assert [_warmup_time(t) for t in ("0", "0s", "2s", "1.5")] == [0, 0, 2, 1.5]
    with pytest.raises(argparse.ArgumentTypeError, match="a duration such as 2s, or 0"):
        _warmup_time("-1")
    with pytest.raises(argparse.ArgumentTypeError):
        _duration("0")  # a timeout or a window of 0 s is no duration
    proc = autotune("search", "--timeout", "15x")
    assert proc.returncode == 2 and "must be a duration such as 90s, 15m or 2h" in proc.stderr


def test_study_management_lists_picks_the_only_one_and_deletes_on_yes(tmp_path):
    import optuna

    studies = tmp_path / "studies"
    studies.mkdir()
    optuna.create_study(study_name="solo", storage=f"sqlite:///{studies / 'solo.db'}",
                        directions=["maximize", "minimize"])
    env = {"AUTOTUNE_STUDIES_DIR": str(studies)}
    run = lambda *a: cli(*a, env=env, timeout=120)  # noqa: E731
    listed = run("studies", "-f", "json")
    assert listed.returncode == 0, listed.stderr
    assert [r["study"] for r in json.loads(listed.stdout)] == ["solo"]
    shown = run("show")  # the only study, found through $AUTOTUNE_STUDIES_DIR
    assert shown.returncode == 0 and "study solo in" in shown.stdout, shown.stderr
    refused = run("delete", "--study-name", "solo")
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    assert optuna.load_study(study_name="solo", storage=f"sqlite:///{studies / 'solo.db'}")
    deleted = run("delete", "--study-name", "solo", "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(run("studies", "-f", "json").stdout) == []
    optuna.create_study(study_name="a", storage=f"sqlite:///{studies / 'a.db'}")
    optuna.create_study(study_name="b", storage=f"sqlite:///{studies / 'b.db'}")
    two = run("show")
    assert two.returncode == 2 and "2 studies in" in two.stderr and "--study-name" in two.stderr


def test_a_datasets_identity_is_what_defines_its_data(tmp_path, monkeypatch):
    """Not where its files lie: a generated graph is the same at any root, a real one
    under any folder, a .pt file by any path to it; its scale and seed define it."""
    from autotune.data import DatasetRef

    monkeypatch.chdir(tmp_path)
    relative = DatasetRef("synthetic", root="data", scale=0.5)
    absolute = DatasetRef("synthetic", root=str(tmp_path / "data"), scale=0.5)
    assert relative.identity() == absolute.identity()
    assert relative.identity() == DatasetRef("synthetic", root="other", scale=0.5).identity()
    assert relative.identity() != DatasetRef("synthetic", root="data", scale=0.4).identity()
    assert relative.identity() != DatasetRef("synthetic", root="data", scale=0.5,
                                             seed=1).identity()
    assert DatasetRef("Cora", root="a").identity() == DatasetRef("Cora", root="b").identity()
    assert DatasetRef("g.pt").identity() == DatasetRef(str(tmp_path / "g.pt")).identity()


def test_debug_after_the_command_shows_the_traceback():
    proc = autotune("show", "--study-name", "x", "--storage", "not a url", "--debug")
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "StorageError" in proc.stderr


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly(tmp_path):
    import optuna

    storage = f"sqlite:///{tmp_path / 'many.db'}"
    study = optuna.create_study(study_name="many", storage=storage,
                                directions=["maximize", "minimize"])
    for i in range(300):  # about 260 KB of JSON: four times what a pipe buffer holds
        study.add_trial(optuna.trial.create_trial(values=[float(i), float(i)],
                                                  user_attrs={"config": None}))
    proc = cli("show", "--storage", storage, "-f", "json", background=True)
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err
