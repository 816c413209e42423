from __future__ import annotations

import json
import os
import re
import shlex

import optuna
import pytest
from _helpers import cli
import yaml

from autotune.config import TrialConfig
from autotune.export import load_config

FAST = ["--dataset", "synthetic", "--scale", "0.004", "--steps", "3", "--warmup", "1",
        "--warmup-time", "0",
        "--max-seconds", "0.5",
        "--seed", "1", "--confirm", "0"]


def autotune(*args, cwd=None):
    return cli(*args, cwd=cwd, timeout=900)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """One 5-trial search on the quick space, then a resumed run to 7 trials. (Beside
    other tests: what is asserted of their windows' precision holds on a busy machine,
    where a window that ran out of time says so.)"""
    tmp = tmp_path_factory.mktemp("search")
    common = [*FAST, "--root", str(tmp / "data"), "--studies-dir", str(tmp / "studies"),
              "--space", "quick", "--study-name", "e2e"]
    storage = f"sqlite:///{tmp / 'studies' / 'e2e.db'}"
    first = autotune("search", *common, "--n-trials", "5")
    numbers_after_first = [t.number for t in optuna.load_study(study_name="e2e",
                                                                storage=storage).trials]
    second = autotune("search", *common, "--n-trials", "7")
    return tmp, first, second, storage, numbers_after_first


@pytest.mark.slow
def test_search_end_to_end(searched):
    tmp, first, second, storage, numbers_after_first = searched
    assert first.returncode == 0, first.stderr
    assert "Pareto front (fastest first)" in first.stdout
    assert first.stdout.count("] #") == 5, first.stdout  # one progress line per trial
    study = optuna.load_study(study_name="e2e", storage=storage)
    assert study.metric_names == ["throughput (seed nodes/s)", "peak memory (MiB)"]
    t0 = study.trials[0]
    assert t0.user_attrs["role"] == "baseline" and study.user_attrs["baseline_trial"] == 0
    assert t0.user_attrs["config"]["batch_size"] == 1024
    assert list(t0.user_attrs["config"]["num_neighbors"]) == [25, 10]
    assert "seed_nodes_per_s" in t0.user_attrs["summary"]
    assert "main_affinity" in t0.user_attrs["observed"]
    assert {"dataset", "env", "space"} <= set(study.user_attrs)
    pareto = yaml.safe_load((tmp / "studies" / "e2e" / "pareto.yaml").read_text())
    rows = pareto["front"]
    assert rows
    for a in rows:
        for b in rows:
            dominates = (a["throughput"] >= b["throughput"] and a["memory_mib"] <= b["memory_mib"]
                         and a != b)
            assert not dominates or (a["throughput"], a["memory_mib"]) == \
                (b["throughput"], b["memory_mib"])


@pytest.mark.slow
def test_the_closing_front_is_shows_and_studies_gives_its_figures(searched):
    """The front the search closes with is the one ``show`` prints, line for line;
    ``studies`` gives that front's best throughput (confirmed figures where measured,
    not one round's) and its default pick; every trial ``show`` lists has its config."""
    tmp, _, second, storage, _ = searched
    where = ["--studies-dir", str(tmp / "studies")]
    shown = autotune("show", *where, "--study-name", "e2e")
    assert shown.returncode == 0, shown.stderr

    def front(text):
        block = text.split("Pareto front")[1]
        return [line for line in block.split("\n\n")[0].strip().splitlines()
                if not line.startswith("drift:")]
    assert front(second.stdout) == front(shown.stdout)
    listed = shown.stdout.split("All trials")[1].strip().splitlines()[2:]
    assert listed and all(re.search(r" b\d+ f\[", line) for line in listed), listed
    rows = json.loads(autotune("studies", *where, "--format", "json").stdout)
    front_json = json.loads(autotune("show", *where, "--format", "json").stdout)["pareto"]
    assert rows[0]["best"] == max(r["throughput"] for r in front_json)
    assert rows[0]["default_trial"] == next(r["trial"] for r in front_json
                                            if any(m.startswith("default") for m in r["marks"]))


@pytest.mark.slow
def test_search_reports_precision_priors_and_each_trials_split(searched):
    """The progress lines carry each trial's precision, speed-up with its uncertainty
    and time split; the prior table ran right after the baseline; the front shows
    every figure's precision and leaves screened trials out."""
    tmp, first, _, storage, _ = searched
    lines = [ln for ln in first.stdout.splitlines() if "] #" in ln]
    # a figure's precision, or "±?" when --max-seconds ran out, or the screen stopped
    # it, before two blocks (then the line says IMPRECISE, or screened out): what the
    # window promises, however loaded the machine
    assert all(re.search(r"±\d+\.\d%", ln) or ("±?" in ln and (
        "IMPRECISE" in ln or "screened out" in ln)) for ln in lines), lines
    assert all(re.search(r"start \d+\.\d\ds, build [\d.]+s, warm-up [\d.]+s, window "
                         r"[\d.]+s", ln) for ln in lines), lines
    assert all(re.search(r"\d\.\d\dx ±\d+\.\d\d", ln) or "±?" in ln + lines[0]
               for ln in lines[1:]), lines  # a speed-up's interval needs both precisions
    study = optuna.load_study(study_name="e2e", storage=storage)
    queued = study.user_attrs["priors"]
    assert queued and [t.user_attrs.get("prior") for t in study.trials[1:1 + len(queued)]] \
        == queued
    # then the fast end of the fastest row: the quick space's least-work fanout, no
    # checkpointing (the rows' configs are front candidates: a prior row is never
    # screened against rows of its own speed)
    after = study.trials[1 + len(queued)]
    assert after.user_attrs.get("prior") == "fast-end", after.user_attrs
    assert list(after.user_attrs["config"]["num_neighbors"]) == [10, 5]
    assert after.user_attrs["config"]["checkpointing"] is False
    assert all(t.user_attrs["window"]["stopped"] in ("precise", "max-seconds", "screened")
               for t in study.trials if t.state.name == "COMPLETE")
    pareto = yaml.safe_load((tmp / "studies" / "e2e" / "pareto.yaml").read_text())
    screened = {t.number for t in study.trials
                if t.user_attrs.get("window", {}).get("stopped") == "screened"}
    assert all(row["precision"] is not None for row in pareto["front"])
    assert not screened & {row["trial"] for row in pareto["front"]}
    assert "±95%" in first.stdout


@pytest.mark.slow
def test_second_run_resumes_numbering(searched):
    tmp, first, second, storage, numbers_after_first = searched
    assert second.returncode == 0, second.stderr
    study = optuna.load_study(study_name="e2e", storage=storage)
    assert numbers_after_first == [0, 1, 2, 3, 4]
    assert [t.number for t in study.trials] == [0, 1, 2, 3, 4, 5, 6]
    assert second.stdout.count("] #") == 2


@pytest.mark.slow
def test_export_loads_back_equal(searched, tmp_path):
    tmp, *_ = searched
    out = tmp_path / "best.yaml"
    proc = autotune("export", "--study-name", "e2e", "--studies-dir", str(tmp / "studies"),
                    "--pick", "trial:0", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp / 'studies' / 'e2e.db'}")
    assert load_config(out) == TrialConfig.from_dict(study.trials[0].user_attrs["config"])
    blob = yaml.safe_load(out.read_text())
    assert blob["measured"]["seed_nodes_per_s"] == study.trials[0].values[0]
    assert blob["env"]["torch"] and "autotune trial --dataset synthetic" in blob["reproduce"]
    knee = autotune("export", "--study-name", "e2e", "--studies-dir", str(tmp / "studies"),
                    "--out", str(tmp_path / "knee.json"))
    assert knee.returncode == 0, knee.stderr
    assert json.loads((tmp_path / "knee.json").read_text())["config"]
    shown = autotune("show", "--study-name", "e2e", "--studies-dir", str(tmp / "studies"),
                     "--format", "json")
    assert shown.returncode == 0 and len(json.loads(shown.stdout)["trials"]) == 7


def test_bad_space_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("knobs:\n  batch_size: {choices: []}\n")
    proc = autotune("search", *FAST, "--root", str(tmp_path / "data"), "--studies-dir",
                    str(tmp_path / "studies"), "--space", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "bad.yaml" in proc.stderr and "'batch_size'" in proc.stderr
    assert "non-empty list" in proc.stderr


@pytest.mark.slow
def test_pinned_space_measures_one_configuration(tmp_path):
    space = tmp_path / "pinned.yaml"  # pinned to the baseline's values, so not widened
    workers = min(6, len(os.sched_getaffinity(0)))
    space.write_text("knobs:\n  batch_size: 1024\n  num_neighbors: [25, 10]\n"
                     f"  num_workers: {workers}\n  compile_mode: none\n  amp_dtype: float32\n"
                     "  checkpointing: false\n  sampling_backend: builtin\nfixed:\n  hidden_channels: 16\n")
    proc = autotune("search", *FAST, "--root", str(tmp_path / "data"), "--studies-dir",
                    str(tmp_path / "studies"), "--space", str(space), "--study-name", "pin",
                    "--n-trials", "3")
    assert proc.returncode == 0, proc.stderr
    trial_dirs = list((tmp_path / "studies" / "pin" / "trials").iterdir())
    assert len(trial_dirs) == 1, "a pinned space has one configuration to measure"
    study = optuna.load_study(study_name="pin",
                              storage=f"sqlite:///{tmp_path / 'studies' / 'pin.db'}")
    assert len(study.trials) == 1  # no slot spent on repeats: it stops, and says why
    assert "stopped early: the space is exhausted: all 1 of its configs are measured" in \
        proc.stdout


def test_export_without_completed_trials_exits_2(tmp_path):
    storage = f"sqlite:///{tmp_path / 'empty.db'}"
    optuna.create_study(study_name="empty", storage=storage, directions=["maximize", "minimize"])
    proc = autotune("export", "--study-name", "empty", "--storage", storage, "--out",
                    str(tmp_path / "x.yaml"))
    assert proc.returncode == 2 and "no completed feasible trial" in proc.stderr


@pytest.mark.slow
def test_memory_budget_is_an_optuna_constraint(tmp_path):
    args = ["search", *FAST, "--root", str(tmp_path / "data"), "--studies-dir",
            str(tmp_path / "studies"), "--space", "quick", "--n-trials", "2"]
    # below what any trial holds: refused before the first trial (the catalogue's case)
    # and above it, but below what this pipeline takes: every trial over it, said
    proc = autotune(*args, "--study-name", "tight", "--max-memory", "260MiB")
    assert proc.returncode == 1, proc.stderr  # every trial over the budget: said, not hidden
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("autotune:")
            and "measurement lock" not in ln]  # a parallel test's search may hold it
    assert len(said) == 1 and "every completed trial is over --max-memory" in said[0], said
    tight = optuna.load_study(study_name="tight",
                              storage=f"sqlite:///{tmp_path / 'studies' / 'tight.db'}")
    assert all(t.constraints["memory"] > 0 for t in tight.trials)
    assert tight.best_trials == [], "no trial fits 1 MiB, so none may be best"
    assert "no completed trial yet" in proc.stdout or "Pareto front" in proc.stdout
    loose = autotune(*args, "--study-name", "loose", "--max-memory", "1TiB")
    assert loose.returncode == 0, loose.stderr
    study = optuna.load_study(study_name="loose",
                              storage=f"sqlite:///{tmp_path / 'studies' / 'loose.db'}")
    assert study.best_trials and "best-under-budget" in loose.stdout
    again = autotune(*args, "--study-name", "loose", "--max-memory", "2TiB")
    assert again.returncode == 2 and "another max_memory_bytes" in again.stderr


def test_storage_password_is_masked(tmp_path):
    from autotune.storage import masked

    assert masked("postgresql://tuner:s3cret@db/autotune") == \
        "postgresql://tuner:***@db/autotune"
    proc = autotune("show", "--study-name", "x", "--storage",
                    "postgresql+nosuchdriver://tuner:s3cret@127.0.0.1:1/autotune")
    assert proc.returncode == 2 and "s3cret" not in proc.stderr + proc.stdout


def test_malformed_storage_url_exits_2(tmp_path):
    proc = autotune("show", "--study-name", "x", "--storage", "not a url")
    assert proc.returncode == 2 and "is not a database URL" in proc.stderr


@pytest.mark.slow
def test_model_flags_are_study_facts(tmp_path):
    """--model/--hidden/--layers reach every trial (fanouts fitted to the layers),
    and resuming the study with another model is refused before any trial."""
    common = [*FAST, "--root", str(tmp_path / "data"), "--studies-dir",
              str(tmp_path / "studies"), "--space", "quick", "--study-name", "gcn3"]
    first = autotune("search", *common, "--n-trials", "2", "--model", "gcn", "--layers", "3",
                     "--hidden", "32")
    assert first.returncode == 0, first.stderr
    assert "fanouts fitted to 3 layers" in first.stdout
    study = optuna.load_study(study_name="gcn3",
                              storage=f"sqlite:///{tmp_path / 'studies' / 'gcn3.db'}")
    configs = [t.user_attrs["config"] for t in study.trials]
    assert len(configs) == 2 and all(t.state.name == "COMPLETE" for t in study.trials)
    for config in configs:
        assert (config["model"], config["num_layers"], config["hidden_channels"]) == \
            ("gcn", 3, 32)
        assert len(config["num_neighbors"]) == 3
    again = autotune("search", *common, "--n-trials", "3", "--model", "sage")
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "pipeline facts" in again.stderr and "--model" in again.stderr
    assert len(optuna.load_study(study_name="gcn3", storage=study._storage).trials) == 2


@pytest.mark.slow
def test_the_printed_export_hint_works_when_pasted(searched, tmp_path):
    tmp, first, *_ = searched
    hint = next(ln for ln in first.stdout.splitlines() if ln.startswith("export: "))
    args = shlex.split(hint[len("export: "):])
    assert args[0] == "autotune" and "--studies-dir" in args, hint
    args = [str(tmp_path / "best.yaml") if a == "best.yaml" else a for a in args[1:]]
    proc = autotune(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert load_config(tmp_path / "best.yaml")


@pytest.mark.slow
def test_same_named_studies_in_two_storages_keep_their_files(tmp_path):
    """The second study, same name, other storage, same --studies-dir: the first's
    pareto.yaml and trial logs stay byte for byte."""
    common = [*FAST, "--root", str(tmp_path / "data"), "--studies-dir", str(tmp_path / "studies"),
              "--space", "quick", "--n-trials", "1", "--study-name", "twin"]
    first = autotune("search", *common)
    assert first.returncode == 0, first.stderr
    folder = tmp_path / "studies" / "twin"
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert folder / "pareto.yaml" in before and folder / "trials" / "0" / "result.json" in before
    second = autotune("search", *common, "--storage", f"sqlite:///{tmp_path / 'other' / 'x.db'}")
    assert second.returncode == 0, second.stderr
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    others = [p for p in (tmp_path / "studies").iterdir() if p.name.startswith("twin@")]
    assert len(others) == 1 and (others[0] / "pareto.yaml").exists()
    assert (others[0] / "trials" / "0" / "result.json").exists()


@pytest.mark.slow
def test_export_to_stdout_picks_the_only_study(searched, tmp_path):
    tmp, *_ = searched
    proc = autotune("export", "--studies-dir", str(tmp / "studies"), "--out", "-")
    assert proc.returncode == 0, proc.stderr
    blob = yaml.safe_load(proc.stdout)
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp / 'studies' / 'e2e.db'}")
    assert blob["study"] == "e2e"
    stored = study.trials[blob["measured"]["trial"]].user_attrs["config"]
    assert blob["config"] == TrialConfig.from_dict(stored).meaningful()  # the knobs at work
    assert TrialConfig.from_dict(blob["config"]).key() == TrialConfig.from_dict(stored).key()


@pytest.mark.slow
def test_each_trial_announces_itself_as_it_starts(searched):
    _, first, *_ = searched
    lines = first.stdout.splitlines()
    started = [i for i, ln in enumerate(lines) if "measuring b" in ln]
    finished = [i for i, ln in enumerate(lines) if "] #" in ln]
    assert len(started) == len(finished) == 5
    assert all(s < f for s, f in zip(started, finished)), "announced before its result"
    estimates = [i for i, ln in enumerate(lines) if ln.startswith("estimate: the baseline took")]
    assert len(estimates) == 1 and finished[0] < estimates[0] < started[1], first.stdout
