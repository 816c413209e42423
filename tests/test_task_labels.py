"""A link study speaks in seed edges/s and ROC-AUC wherever autotune shows it:
``studies``, ``show``, ``export``, ``report`` (its HTML and the Pareto plot's axes),
the dashboard note and ``train``; a node study in seed nodes/s and accuracy."""
from __future__ import annotations

import json

import optuna
import pytest
import yaml
from _helpers import cli

from autotune.config import TrialConfig
from autotune.trial import WindowStats
from autotune.storage import open_storage
from autotune.study import _records as rec
from autotune.study import TrialRecord
from autotune.study._records import DIRECTIONS
from autotune.taskinfo import TASKS, task_info


def _study(folder, task: str) -> str:
    """A study of ``task`` with a baseline and two more completed trials."""
    name = f"labels-{task}"
    url = f"sqlite:///{folder / f'{name}.db'}"
    folder.mkdir(exist_ok=True)
    study = optuna.create_study(study_name=name, storage=open_storage(url),
                                directions=DIRECTIONS)
    study.set_user_attr(rec.STUDY_DATASET_REF, {"name": "Cora", "root": str(folder),
                                                "scale": 1.0, "seed": 0, "task": task})
    study.set_user_attr(rec.STUDY_DATASET, {"name": "Cora", "num_nodes": 2708,
                                            "num_edges": 10556, "num_train": 1000})
    study.set_user_attr(rec.STUDY_DEVICE, "cpu")
    study.set_user_attr(rec.STUDY_BASELINE, 0)
    window = WindowStats(wall_s=2.0, block_steps=2, blocks=[[1, 1.0]] * 4, precision=0.02,
                         target=0.03, stopped="precise")
    for number, (rate, mib, batch) in enumerate([(1000.0, 900.0, 256), (2000.0, 800.0, 512),
                                                 (1500.0, 500.0, 128)]):
        config = TrialConfig(task=task, batch_size=batch)
        record = TrialRecord(number, config=config, status="ok",
                             role="baseline" if number == 0 else "searched",
                             window=window, step_times_s=(0.01, 0.012, 0.011))
        study.add_trial(optuna.trial.create_trial(values=[rate, mib],
                                                  user_attrs=record.to_attrs()))
    return name


@pytest.mark.parametrize("task", list(TASKS))
def test_every_reading_command_labels_the_study_by_its_task(tmp_path, task):
    info, other = task_info(task), next(t for t in TASKS.values() if t.name != task)
    studies = tmp_path / "studies"
    name = _study(studies, task)
    where = ["--studies-dir", str(studies)]
    listed = cli("studies", *where)
    shown = cli("show", "--study-name", name, *where)
    exported = cli("export", "--study-name", name, *where, "--out", str(tmp_path / "e.yaml"))
    report = cli("report", "--study-name", name, *where, "--out", str(tmp_path / "report"))
    for run in (listed, shown, exported, report):
        assert run.returncode == 0, run.stderr
    for text in (listed.stdout, shown.stdout, exported.stdout,
                 (tmp_path / "report" / "report.html").read_text()):
        assert info.unit in text and other.unit not in text, text
    blob = yaml.safe_load((tmp_path / "e.yaml").read_text())["measured"]
    assert blob["unit"] == info.unit and info.throughput_key in blob
    assert other.throughput_key not in blob
    as_json = json.loads(cli("studies", *where, "-f", "json").stdout)
    assert as_json[0]["unit"] == info.unit and as_json[0]["task"] == task


@pytest.mark.parametrize("task", list(TASKS))
def test_the_pareto_plot_and_the_note_name_the_tasks_unit(tmp_path, task, monkeypatch):
    from autotune.cli import _report as report
    from autotune.study import load_study

    name = _study(tmp_path, task)
    study, _ = load_study(name, storage=f"sqlite:///{tmp_path / f'{name}.db'}")
    drawn = {}
    monkeypatch.setattr(report, "_save", lambda fig, path: drawn.setdefault("fig", fig))
    report._pareto_png(study, rec.points(study), tmp_path / "p.png")
    axes = drawn["fig"].axes[0]
    assert axes.get_ylabel() == f"throughput ({task_info(task).unit})"
    assert axes.get_xlabel() == "peak memory (MiB)"
    note = report.study_note(study)
    assert task_info(task).unit in note and f"task {task}" in note


def test_train_of_a_link_config_reports_edges_and_roc_auc(tmp_path):
    config = tmp_path / "link.yaml"
    config.write_text("task: link\nbatch_size: 256\nnum_neighbors: [5, 5]\n"
                      "hidden_channels: 16\nnum_workers: 0\n")
    run = cli("train", "--config", str(config), "--dataset", "synthetic", "--scale", "0.004",
              "--root", str(tmp_path / "data"), "--epochs", "1", "--studies-dir",
              str(tmp_path / "studies"))
    assert run.returncode == 0, run.stderr[-2000:]
    header = run.stdout.splitlines()[1]
    assert "seed edges/s" in header and "val ROC-AUC" in header and "nodes" not in header
    assert "best validation ROC-AUC" in run.stdout and "accuracy" not in run.stdout
    assert "seed edges/s" in run.stdout.splitlines()[-1]


@pytest.mark.parametrize("task, key", [("node", "accuracy"), ("link", "roc_auc")])
def test_the_guards_stored_metric_is_named_for_what_it_holds(tmp_path, task, key):
    from autotune.study._guard import Verdict

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 's.db'}"),
                                directions=DIRECTIONS)
    config = TrialConfig(task=task)
    trial = study.ask()
    rec.store(trial, config=config.to_dict())
    rec.store_verdict(trial, Verdict(0.8, 0.9, 0.95, 3.0, 2.0, 40), config)
    study.tell(trial, [100.0, 50.0])
    record = TrialRecord.from_frozen(study.trials[0])
    assert study.trials[0].user_attrs["validation"] == {key: 0.8}
    assert record.val_metric == 0.8 and record.guard_ratio == pytest.approx(0.8 / 0.9)
    assert record.guard_shortfall == pytest.approx(0.95 * 0.9 - 0.8) and record.below_guard
    # a study made before: val_acc (ROC-AUC in a link study) and accuracy_* read anew
    old = study.ask()
    for name, value in (("config", config.to_dict()), ("val_acc", 0.7),
                        ("accuracy_ratio", 0.7 / 0.9), ("accuracy_shortfall", 0.155)):
        old.set_user_attr(name, value)
    study.tell(old, [90.0, 40.0])
    legacy = TrialRecord.from_frozen(study.trials[1])
    assert legacy.validation == {key: 0.7} and legacy.guard_shortfall == 0.155
    assert legacy.below_guard and legacy.guard_ratio == pytest.approx(0.7 / 0.9)
