"""What a new user meets in the first hour (issue 26), each a test: one's own modules
from the current folder, a Data object, a resumed study from another folder, the
default progress, the lock wait, printed commands that paste, small searches that
sample the space, an honest importance plot, and the smaller things. The bad inputs
among them are in the catalogue (test_bad_input.py), the interrupts in
test_hardening.py."""
from __future__ import annotations

import shlex
import threading
import time
from argparse import Namespace
from types import SimpleNamespace

import optuna
import pytest
from _helpers import cli

import autotune
from autotune.errors import ConfigError

FAST = ["--steps", "2", "--warmup", "1", "--warmup-time", "0", "--max-seconds", "0.5"]
MODELS = '''
from torch_geometric.nn import SAGEConv
import torch


class Net(torch.nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.conv = SAGEConv(i, o)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


def factory(in_channels, out_channels, config):
    return Net(in_channels, out_channels)
'''
DATA = '''
def load():
    from autotune.data import synthetic_reddit

    return synthetic_reddit(scale=0.003, seed=1, mean_degree=8, num_features=12,
                            num_classes=3)
'''


def test_the_current_folders_modules_import_as_with_python_m(tmp_path):
    """The installed ``autotune`` script (not ``python -m``) in the folder that holds
    mymodels.py and mydata.py: the command and its trial process both import them."""
    (tmp_path / "mymodels.py").write_text(MODELS)
    (tmp_path / "mydata.py").write_text(DATA)
    proc = cli("trial", "--model", "mymodels:factory", "--dataset", "mydata:load", *FAST,
               "--studies-dir", "studies", "--root", "data", "-f", "json", cwd=tmp_path,
               script=True, env={"PYTHONPATH": None}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert '"status": "ok"' in proc.stdout


def test_a_data_object_is_a_dataset(tmp_path):
    """PyG's Data objects are callable: a Data is still saved as data, not taken for a
    dataset function."""
    import user_models

    plan = autotune.prepare_search(dataset=user_models.tiny_graph(), space="quick",
                                   root=str(tmp_path / "d"), studies_dir=tmp_path / "s")
    assert plan.options.dataset.name.endswith(".pt")
    assert plan.dataset_stats["num_nodes"] == user_models.tiny_graph().num_nodes


@pytest.mark.parametrize("given, use", [({"max_seconds": 3}, "measure=MeasureSpec(max_window_s"),
                                        ({"trial_timeout": 60}, "limits=TrialLimits("),
                                        ({"warmup": 2}, "measure=MeasureSpec(warmup_steps"),
                                        ({"n_trial": 3}, "n_trials=")])
def test_a_wrong_keyword_names_the_right_one(given, use):
    for call in (autotune.search, autotune.prepare_search):
        with pytest.raises(ConfigError) as err:
            call(**given)
        assert f"takes no keyword {next(iter(given))}=" in str(err.value)
        assert use in str(err.value)


def test_a_search_s_windows_are_shorter_than_a_lone_trial_s(tmp_path):
    """A search's windows stop at SEARCH_WINDOW_S (the confirmation's pairs decide its
    front); a lone trial's at MeasureSpec's: from the CLI and the Python API alike,
    and --max-seconds given wins."""
    from autotune.cli._flags import build_parser
    from autotune.specs import SEARCH_WINDOW_S, MeasureSpec

    assert SEARCH_WINDOW_S < MeasureSpec.max_window_s
    parser = build_parser()
    assert parser.parse_args(["search"]).max_seconds == SEARCH_WINDOW_S
    assert parser.parse_args(["search", "--max-seconds", "45"]).max_seconds == 45
    assert parser.parse_args(["trial"]).max_seconds == MeasureSpec.max_window_s
    plan = autotune.prepare_search(dataset="synthetic", scale=0.004, space="quick",
                                   root=str(tmp_path / "d"), studies_dir=tmp_path / "s")
    assert plan.options.measure.max_window_s == SEARCH_WINDOW_S


def test_a_study_resumes_from_another_folder_and_names_what_differs(tmp_path, monkeypatch):
    """A study's dataset identity holds what defines the data: not the root (a
    relative --root is another folder elsewhere), and a refusal names the field."""
    studies = tmp_path / "studies"
    common = dict(dataset="synthetic", scale=0.004, space="quick", studies_dir=studies,
                  study_name="s")
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        autotune.prepare_search(root="./data", **common)  # the second one joins the first
    with pytest.raises(ConfigError) as err:
        autotune.prepare_search(root="./data", **{**common, "scale": 0.005})
    assert "created with another dataset_ref scale (0.004, now 0.005)" in str(err.value)


def test_delete_removes_the_studys_own_file_and_lock(tmp_path):
    from autotune.cli import main
    from autotune.storage import open_storage, study_lock
    from autotune.study import default_storage

    url = default_storage(tmp_path, "gone")
    optuna.create_study(study_name="gone", storage=open_storage(url))
    with study_lock(url, "gone"):
        pass
    assert {"gone.db", "gone.db.lock"} <= {p.name for p in tmp_path.iterdir()}
    assert main(["delete", "--study-name", "gone", "--studies-dir", str(tmp_path), "--yes"]) == 0
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("gone.db")]


def test_studies_in_an_empty_folder_says_where_it_looked(tmp_path, capsys):
    from autotune.cli import main

    assert main(["studies", "--studies-dir", str(tmp_path)]) == 0
    assert f"no studies in '{tmp_path}'" in capsys.readouterr().out


@pytest.mark.parametrize("storage", [None, "postgresql://tuner:s3cret@db-host/autotune"])
def test_printed_commands_paste(tmp_path, storage):
    from autotune.cli._main import _command, _study_flags

    name = "études-图表 ✓"
    args = Namespace(storage=storage, studies_dir=str(tmp_path / "my studies"))
    line = _command("autotune", "export", "--study-name", name, *_study_flags(args))
    assert "s3cret" not in line
    words = shlex.split(line.split("  (")[0])
    assert words[:4] == ["autotune", "export", "--study-name", name]
    if storage is None:
        assert words[4:] == ["--studies-dir", str(tmp_path / "my studies")]
    else:
        assert words[4:] == ["--storage", "$AUTOTUNE_STORAGE"]
        assert '--storage "$AUTOTUNE_STORAGE"' in line and "AUTOTUNE_STORAGE to the" in line


def test_a_lock_wait_says_who_holds_it_and_for_how_long(tmp_path):
    from autotune.storage import file_lock

    path, taken, said = tmp_path / "measure-cpu.lock", threading.Event(), []

    def hold():
        with file_lock(path, holder="pid 4242, trial 7 of study other"):
            taken.set()
            time.sleep(0.8)

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait(10)
    with file_lock(path, on_wait=lambda who, waited: said.append((who, waited)),
                   every_s=0.3) as waited:
        assert waited >= 0.5
    holder.join()
    assert len(said) >= 2 and said[0][0].startswith("pid 4242, trial 7 of study other for ")
    assert said[-1][1] >= 0.3


def test_the_prior_rows_take_the_spaces_values():
    """With --n-trials 4, only the baseline and the prior rows run: they measure the
    user's space, not the baseline's fanout [25, 10] outside it, and a note says so."""
    from autotune.study._space import load_space
    from autotune.study import default_config
    from autotune.study._priors import machine_facts, prior_configs

    base = default_config("cpu")
    space = load_space("quick", baseline=base)
    assert space.outside["num_neighbors"] == ((25, 10), (15, 10))
    rows = prior_configs(space.baseline(base), space, machine_facts("cpu"))
    assert rows, "no prior row applies"
    for name, config in rows:
        assert config.batch_size in (512, 1024) and config.num_neighbors in ((10, 5), (15, 10))
        assert config.num_workers in (0, 1), name
    assert any("num_neighbors [25, 10]" in n and "outside this space" in n and
               "never proposed" in n and "num_neighbors [15, 10]" in n
               for n in space.notes), space.notes


def test_an_interrupted_prior_row_is_queued_again_as_a_prior_row():
    from autotune.study import _records as rec
    from autotune.study._recovery import requeue_once

    study = optuna.create_study()
    study.enqueue_trial({"batch_size": 512}, user_attrs={rec.PRIOR: "bf16"})
    trial = study.ask({"batch_size": optuna.distributions.CategoricalDistribution([512])})
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    requeue_once(study, study.trials[0])
    retry = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [(t.system_attrs["fixed_params"], t.user_attrs) for t in retry] == \
        [({"batch_size": 512}, {rec.RETRY_OF: 0, rec.ROLE: "prior", rec.PRIOR: "bf16"})]


def test_the_importance_leaves_out_knobs_that_never_changed(tmp_path):
    from autotune.cli._report import _importance_png, _varied_knobs

    dist = {"batch_size": optuna.distributions.CategoricalDistribution([512, 1024]),
            "amp_dtype": optuna.distributions.CategoricalDistribution(["float32", "bfloat16"])}
    study = optuna.create_study(directions=["maximize", "minimize"])
    for i in range(8):
        study.add_trial(optuna.trial.create_trial(
            params={"batch_size": 512, "amp_dtype": ["float32", "bfloat16"][i % 2]},
            distributions=dist, values=[1000.0 + 500 * (i % 2) + i, 300.0 - i]))
    assert _varied_knobs(study.trials) == (["amp_dtype"], ["batch_size"])
    path, note = _importance_png(study, tmp_path / "importance.png")
    assert path.exists()
    assert note == "8 completed trials; left out, never changed: batch_size"


@pytest.mark.parametrize("ratio, word", [(2.2, "(faster)"), (0.5, "(slower)"), (1.0, None)])
def test_train_explains_a_ratio_in_its_own_direction(ratio, word):
    from autotune.cli._render import train_summary

    best = SimpleNamespace(val_metric=0.9, test_metric=0.8, epoch=2, steps=10)
    result = SimpleNamespace(best=best, throughput=1000.0 * ratio, unit="seed nodes/s",
                             metric="accuracy", to_dict=lambda: {}, tuning=None,
                             training=SimpleNamespace(train_s=0.0, eval_s=0.0))
    _, lines = train_summary(result, {"throughput": 1000.0, "trial": 4}, epochs=3,
                             config_path="best.yaml")
    why = [line for line in lines if line.startswith("why")]
    assert (why[0].split()[2].rstrip(":") if why else None) == word
    if ratio > 1.5:
        assert "loader start-up" not in why[0]


def test_an_unknown_precision_reads_the_same_in_both_tables():
    from autotune.cli._render import front_table, trials_table
    from autotune.study._front import FrontRow
    from autotune.study import TrialRecord
    from autotune.taskinfo import task_info

    config = autotune.TrialConfig()
    record = TrialRecord(0, "complete", (1000.0, 300.0), config, status="ok")
    row = FrontRow(0, 1000.0, 300.0, None, None, None, config=config.to_dict())
    assert "±?" in trials_table([record], task_info("node")).splitlines()[-1]
    assert "±?" in front_table([row], task_info("node")).splitlines()[-1]


def test_a_librarys_warning_is_one_line_without_its_path(monkeypatch, capsys):
    """``autotune report`` printed an Optuna UserWarning with its site-packages path:
    a command prints a warning as one line (``--debug`` keeps Python's form)."""
    import warnings

    import autotune.cli._main as cli_module

    def warns(args):
        warnings.warn("Some regimes have less than 3 trials.\n  (see the docs)", UserWarning)
        return 0

    monkeypatch.setitem(cli_module.COMMANDS, "studies", warns)
    assert cli_module.main(["studies"]) == 0
    assert capsys.readouterr().err == ("autotune: warning: Some regimes have less than 3 "
                                       "trials. (see the docs) (UserWarning)\n")


def test_autotune_logging_is_there_after_import_autotune():
    """docs/python-api.md's ``autotune.logging.set_verbosity(logging.ERROR)`` works
    after ``import autotune`` alone, and imports no torch."""
    import subprocess
    import sys

    code = ("import logging, sys, autotune; autotune.logging.set_verbosity(logging.ERROR); "
            "assert 'torch' not in sys.modules; print('ok')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_a_failed_dataset_load_leaves_no_folder(tmp_path):
    """``--dataset Reddit`` without its files: exit 2 with where to put them, and no
    empty data/Reddit/raw/ (nor a studies folder) left behind."""
    run = cli("search", "--dataset", "Reddit", "--n-trials", "1", cwd=tmp_path)
    assert run.returncode == 2 and "reddit_data.npz" in run.stderr, run.stderr
    assert list(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))


def test_install_hints_match_how_autotune_was_installed(monkeypatch):
    """An editable install from a folder (as the README's commands make) is told to
    install the extra from that folder; an install from an index, from the index."""
    import json
    from importlib import metadata

    from autotune.env import install_hint

    class Dist:
        def __init__(self, blob):
            self.blob = blob

        def read_text(self, name):
            return None if self.blob is None else json.dumps(self.blob)

    monkeypatch.setattr(metadata, "distributions", lambda name: [Dist(None), Dist(
        {"url": "file:///home/me/autotune", "dir_info": {"editable": True}})])
    assert install_hint("ogb") == "pip install -e '/home/me/autotune[ogb]'"
    monkeypatch.setattr(metadata, "distributions", lambda name: [Dist(None)])
    assert install_hint("postgres") == "pip install 'autotune[postgres]'"
