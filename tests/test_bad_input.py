"""The bad-input catalogue: each case exits 2 with one line that names the problem
and the fix, shows no traceback, and leaves the stored study and every file of the
studies folder exactly as they were.

The cases run in this process, through ``autotune.cli._main.main`` (all that ``python -m
autotune`` adds is ``sys.exit``): a fresh interpreter per case cost 4 s of imports
each. The study they must not touch is made by a real ``autotune search``, and
``test_debug_shows_the_traceback`` runs the command as a user does."""
from __future__ import annotations


import os
from pathlib import Path

import optuna
import pytest
from _helpers import cli

TINY = ["--dataset", "synthetic", "--scale", "0.004", "--steps", "2", "--warmup", "1",
        "--warmup-time", "0",
        "--max-seconds", "0.5"]
HETERO = ["--dataset", "synthetic-hetero", "--scale", "0.004"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A study with one completed trial, which no bad input may change."""
    tmp = tmp_path_factory.mktemp("bad")
    common = ["--root", str(tmp / "data"), "--studies-dir", str(tmp / "studies")]
    proc = _cli("search", *TINY, *common, "--space", "quick", "--study-name", "base",
                "--n-trials", "1")
    assert proc.returncode == 0, proc.stderr
    files = {"bad.yaml": "knobs:\n  batch_size: {choices: [1,\n",
             "unknown.yaml": "knobs:\n  turbo: {choices: [1]}\n",
             "empty.yaml": "knobs:\n  batch_size: {choices: []}\n",
             "range.yaml": "knobs:\n  num_workers: {low: 3, high: 1}\n",
             "workers.yaml": "knobs:\n  num_workers: {choices: [0, 4096]}\n",
             "cores.yaml": "compute_cores: [4096]\n",
             "many.yaml": "num_workers: 4096\n",
             "ro.yaml": "compile_mode: reduce-overhead\n",
             "keys.yaml": "batch_size: 64\nturbo: true\n",
             "gcn-sparse.yaml": "knobs:\n  aggregation: sparse\nfixed:\n  model: gcn\n",
             "sparse-compiled.yaml": "aggregation: sparse\ncompile_mode: default\n",
             "edge-type.yaml": "knobs:\n  num_neighbors.paper__reads__paper: {choices: [[5, 5]]}\n",
             "edge-fanouts.yaml": "edge_fanouts: {paper__reads__paper: [5, 5]}\n",
             "word-batch.yaml": "knobs:\n  batch_size: {choices: [big, 512]}\n",
             "negative-batch.yaml": "knobs:\n  batch_size: {choices: [-5, -6]}\n",
             "empty-config.yaml": "",
             "precision.yaml": "precision: sharp\nknobs:\n  batch_size: {choices: [512]}\n",
             "user-bits.yaml": "dropout_masks: bits\nmodel: user_models:raising\n",
             "pinned-cpu.yaml": "feature_placement: pinned\n",
             "hand.yaml": "batch_size: 512\n",
             "placement.yaml": "knobs:\n  feature_placement: {choices: [gpu, disk]}\n"}
    _no_training_nodes(tmp / "no-train.pt")
    (tmp / "profiled").mkdir()
    (tmp / "profiled" / "trace.json").write_text("{}")
    for name, text in files.items():
        (tmp / name).write_text(text)
    storage = f"sqlite:///{tmp / 'studies' / 'base.db'}"
    optuna.create_study(study_name="one-way", storage=storage, direction="maximize")
    readonly = tmp / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    return tmp, common, storage


def _no_training_nodes(path):
    import torch

    from autotune.data import synthetic_reddit

    data = synthetic_reddit(scale=0.003, seed=0, mean_degree=8, num_features=8, num_classes=2)
    data.train_mask = torch.zeros_like(data.train_mask)
    torch.save(data, path)


def _cli(*args):
    # tests/ on the path: user_models' broken factories and dataset function
    path = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    return cli(*args, timeout=300, env={"PYTHONPATH": os.pathsep.join(filter(None, path))})


def _main(args, capsys) -> tuple[int, str, str]:
    """``autotune ARGS`` in this process: its exit code, stdout and stderr."""
    from autotune.cli import main

    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _files(folder):
    """Every file under ``folder`` with the digest of its bytes, a SQLite database's
    of its content (its -wal and -shm are SQLite's journal, which a mere reader's
    checkpoint rewrites): a bad input adds, removes or changes none."""
    import hashlib
    import sqlite3

    def content(path):
        if path.suffix != ".db":
            return path.read_bytes()
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return "\n".join(db.iterdump()).encode()
        finally:
            db.close()

    return {str(p.relative_to(folder)): hashlib.sha256(content(p)).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def _state(storage):
    out = []
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        out.append((summary.study_name, [(t.number, t.state.name, t.values, t.user_attrs)
                                         for t in study.trials], study.user_attrs))
    return out


CASES = {
    "precision zero": (["search", "--precision", "0"], ["--precision", "such as 3% or 0.03"]),
    "precision over 100%": (["search", "--precision", "150%"], ["--precision", "'150%'"]),
    "precision not a number": (["trial", "--precision", "tight"], ["--precision", "'tight'"]),
    "screen precision": (["search", "--screen-precision", "1"], ["--screen-precision"]),
    "budget zero": (["search", "--budget", "0"], ["--budget", "such as 90s, 15m or 2h"]),
    "a GPU memory cap that is no size": (["search", "--gpu-memory-limit", "lots"],
                                         ["--gpu-memory-limit", "'lots'"]),
    "a GPU memory cap on CPU trials": (["trial", "--device", "cpu", "--gpu-memory-limit",
                                        "4GiB"], ["--gpu-memory-limit", "run on cpu"]),
    "budget unit": (["search", "--budget", "20 minutes"], ["--budget", "'20 minutes'"]),
    "unknown dataset": (["search", "--dataset", "Redit"], ["unknown dataset 'Redit'",
                                                          "use one of"]),
    "dataset missing offline": (["trial", "--dataset", "Cora", "--root", "{tmp}/empty"],
                                ["'Cora' is not under root", "ind.cora.x", "--root"]),
    "malformed YAML": (["search", "--space", "{tmp}/bad.yaml"], ["bad.yaml", "not valid YAML"]),
    "unknown key in a space": (["search", "--space", "{tmp}/unknown.yaml"],
                               ["unknown.yaml", "'turbo'", "allowed: batch_size"]),
    "empty choice list": (["search", "--space", "{tmp}/empty.yaml"],
                          ["'batch_size'", "non-empty list"]),
    "low > high": (["search", "--space", "{tmp}/range.yaml"],
                   ["'num_workers'", "low 3 > high 1"]),
    "accuracy guard above 1": (["search", "--accuracy-guard", "1.5"],
                               ["--accuracy-guard", "(0, 1]"]),
    "unknown objective": (["search", "--objectives", "throughput,latency"],
                          ["--objectives", "throughput,memory,accuracy"]),
    "gat heads do not divide hidden": (["search", "--model", "gat", "--hidden", "30"],
                                       ["model gat", "multiple of 4"]),
    "affinity core the machine lacks": (["trial", "--config", "{tmp}/cores.yaml"],
                                        ["compute_cores", "[4096]", "available"]),
    "more workers than cores (space)": (["search", "--space", "{tmp}/workers.yaml"],
                                        ["4096 workers", "use at most"]),
    "more workers than cores (config)": (["trial", "--config", "{tmp}/many.yaml"],
                                         ["num_workers 4096 exceeds", "use at most"]),
    "reduce-overhead on cpu": (["trial", "--config", "{tmp}/ro.yaml", "--device", "cpu"],
                               ["reduce-overhead", "use compile_mode default"]),
    "malformed storage URL": (["search", "--storage", "not a url"],
                              ["not a database URL", "sqlite:///"]),
    "unreachable storage": (["search", "--storage", "postgresql://u:s3cret@127.0.0.1:1/x"],
                            ["cannot open storage", "u:***@127.0.0.1:1"]),
    "study with other directions": (["search", "--study-name", "one-way", "--storage",
                                     "{storage}"], ["'one-way'", "--study-name"]),
    "study with another space": (["search", "--study-name", "base", "--space", "default"],
                                 ["'base'", "another space", "--study-name"]),
    "--n-trials 0": (["search", "--n-trials", "0"], ["--n-trials", "positive integer"]),
    "--n-trials negative": (["search", "--n-trials", "-4"], ["--n-trials"]),
    "unparsable --max-memory": (["search", "--max-memory", "lots"],
                                ["--max-memory", "8GiB"]),
    "memory size without a unit": (["search", "--max-memory", "8"],
                                   ["--max-memory: 8: give a unit", "8GiB", "8000MB"]),
    "a memory budget no trial can hold": (["search", "--max-memory", "1MiB"],
                                          ["--max-memory", "1 MiB is below what any trial "
                                           "holds", "every trial would be over it"]),
    "a busy share of zero": (["search", "--max-busy", "0"], ["--max-busy", "(0, 1]"]),
    "a confirm precision of 100%": (["search", "--confirm-precision", "100%"],
                                    ["--confirm-precision", "a fraction in (0, 1)"]),
    "misspelt space": (["search", "--space", "quik"], ["'quik' not found",
                                                       "did you mean 'quick'"]),
    "unknown study": (["show", "--study-name", "bsae"], ["no study 'bsae'", "studies there:",
                                                         "did you mean 'base'"]),
    "model factory that does not import": (["search", "--model", "nowhere.mod:factory"],
                                           ["--model", "cannot import module 'nowhere.mod'"]),
    "malformed model name": (["search", "--model", "sage!"],
                                        ["model must be one of", "package.module:factory"]),
    "duration without a known unit": (["search", "--timeout", "15x"],
                                      ["--timeout", "a duration such as 90s, 15m or 2h"]),
    "misspelt choice": (["search", "--optuna-sampler", "tpee"], ["invalid choice: 'tpee'",
                                                          "did you mean 'tpe'"]),
    "delete without --yes": (["delete", "--study-name", "base"], ["would delete study 'base'",
                                                                  "pass --yes"]),
    "export with no completed trial": (["export", "--study-name", "one-way", "--storage",
                                        "{storage}", "--out", "{tmp}/x.yaml"],
                                       ["no completed feasible trial", "autotune search"]),
    "export of a missing trial": (["export", "--study-name", "base", "--pick", "trial:99",
                                   "--out", "{tmp}/x.yaml"], ["no completed trial 99"]),
    "config file with unknown keys": (["trial", "--config", "{tmp}/keys.yaml"],
                                      ["unknown keys turbo", "allowed:"]),
    "unwritable studies folder": (["search", "--studies-dir", "{tmp}/readonly/studies"],
                                  ["--studies-dir", "not writable"]),
    "sparse aggregation in a gcn space": (["search", "--space", "{tmp}/gcn-sparse.yaml"],
                                          ["knob 'aggregation'", "exact for model sage and gin"]),
    "sparse aggregation compiled": (["trial", "--config", "{tmp}/sparse-compiled.yaml"],
                                    ["aggregation 'sparse' runs eagerly", "compile_mode none"]),
    "profile folder holding a trace": (["trial", "--profile", "{tmp}/profiled"],
                                       ["--profile folder", "already holds trace.json"]),
    "profile into an unwritable folder": (["trial", "--profile", "{tmp}/readonly/p"],
                                          ["--profile", "not writable"]),
    "edge type the graph lacks (space)": (
        ["search", *HETERO, "--space", "{tmp}/edge-type.yaml"],
        ["edge type 'paper__reads__paper'", "which the graph lacks",
         "('author', 'writes', 'paper')", "('paper', 'cites', 'paper')"]),
    "edge type the graph lacks (config)": (
        ["trial", *HETERO, "--config", "{tmp}/edge-fanouts.yaml"],
        ["edge type 'paper__reads__paper'", "its edge types: ('author', 'writes', 'paper')"]),
    "link prediction on a heterogeneous graph, no edge type": (
        ["search", *HETERO, "--task", "link"],
        ["--task link on a heterogeneous graph needs", "--link-edge-type",
         "author__writes__paper"]),
    "link prediction of an edge type the graph lacks": (
        ["search", *HETERO, "--task", "link", "--link-edge-type", "paper__reads__paper"],
        ["--link-edge-type 'paper__reads__paper' is not an edge type", "paper__cites__paper"]),
    "a link edge type on a node task": (
        ["trial", *HETERO, "--link-edge-type", "writes"],
        ["--link-edge-type picks the edge type of --task link", "task 'node'"]),
    "a time attribute the graph lacks": (
        ["search", "--time-attr", "when"],
        ["--time-attr (time_attr=)", "'when' is neither a node-level or edge-level",
         "train_mask"]),
    "a graph-level dataset with --task node": (
        ["search", "--dataset", "synthetic-molecules", "--scale", "0.002"],
        ["dataset synthetic-molecules is graph-level", "use --task graph"]),
    "one graph with --task graph": (
        ["trial", "--task", "graph"],
        ["--task graph needs many small graphs", "synthetic-molecules"]),
    "a link edge type on a homogeneous graph": (
        ["search", "--task", "link", "--link-edge-type", "writes"],
        ["--link-edge-type names an edge type of a heterogeneous graph", "homogeneous"]),
    "gat on a heterogeneous graph": (["trial", *HETERO, "--model", "gat"],
                                     ["model gat", "use model sage"]),
    "a word among the batch sizes": (["search", "--space", "{tmp}/word-batch.yaml"],
                                     ["knob 'batch_size'", "'big'", "positive int"]),
    "negative batch sizes": (["search", "--space", "{tmp}/negative-batch.yaml"],
                             ["knob 'batch_size'", "-5", "positive int"]),
    "a model factory that raises": (["search", "--model", "user_models:raising"],
                                    ["model factory 'user_models:raising' raised ValueError",
                                     "hidden size must be even"]),
    "a model factory of the wrong signature": (
        ["search", "--model", "user_models:nofeat"],
        ["model factory 'user_models:nofeat' raised TypeError", "takes 0 positional"]),
    "a model factory that raises (trial)": (
        ["trial", "--model", "user_models:raising"],
        ["model factory 'user_models:raising' raised ValueError"]),
    "a dataset function that raises": (
        ["search", "--dataset", "user_models:broken_data"],
        ["dataset function 'user_models:broken_data' raised FileNotFoundError", "edges.csv"]),
    "no training nodes": (["search", "--dataset", "{tmp}/no-train.pt"],
                          ["no training nodes", "train_mask selects none"]),
    "a study name too long for a file": (["search", "--study-name", "s" * 300],
                                         ["--study-name", "300 bytes", "at most 200"]),
    "an empty config file": (["trial", "--config", "{tmp}/empty-config.yaml"],
                             ["empty-config.yaml' is empty", "leave out --config"]),
    "--confirm negative": (["search", "--confirm", "-1"], ["--confirm", "whole number >= 0"]),
    "--confirm not a number": (["search", "--confirm", "all"], ["--confirm", "'all'"]),
    "--confirm-rounds below 3": (["search", "--confirm-rounds", "2"],
                                 ["--confirm-rounds", ">= 3"]),
    "--control-every not a duration": (["search", "--control-every", "soon"],
                                       ["--control-every", "'soon'"]),
    "a space's precision not a fraction": (["search", "--space", "{tmp}/precision.yaml"],
                                           ["precision.yaml", "precision must be a fraction"]),
    "bits dropout with a user's model": (["trial", "--config", "{tmp}/user-bits.yaml"],
                                         ["dropout_masks 'bits'", "draws its own"]),
    "pinned features without GPU sampling": (["trial", "--config", "{tmp}/pinned-cpu.yaml"],
                                             ["feature_placement pinned", "gpu_sampling"]),
    "a feature placement that does not exist": (["search", "--space", "{tmp}/placement.yaml"],
                                                ["feature_placement", "disk"]),
    "a confirmation by neither pairs nor rounds": (["search", "--confirm-by", "both"],
                                                   ["--confirm-by", "'both'"]),
    "training a config that names no dataset": (["train", "--config", "{tmp}/hand.yaml",
                                                  "--epochs", "1"],
                                                 ["hand.yaml names no dataset", "--dataset"]),
    "misspelt pick": (["export", "--study-name", "base", "--pick", "knie", "--out",
                       "{tmp}/x.yaml"], ["--pick", "did you mean 'knee'"]),
}


@pytest.mark.bad_input
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(base, case, capsys):
    tmp, common, storage = base
    args, needles = CASES[case]
    command, *rest = [a.format(tmp=tmp, storage=storage) for a in args]
    defaults = [*TINY, *common] if command in ("search", "trial") else common[2:]
    args = [command, *defaults, *rest]  # argparse keeps the last of a repeated flag
    before, files = _state(storage), _files(tmp / "studies")
    code, out, err = _main(args, capsys)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error:"), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "s3cret" not in err + out
    assert _state(storage) == before, "a bad input changed the stored study"
    assert _files(tmp / "studies") == files, "a bad input left a file behind or changed one"


@pytest.mark.bad_input
def test_float16_where_the_build_lacks_it(monkeypatch, capsys, tmp_path):
    import autotune.pipeline._build
    from autotune.cli import main

    monkeypatch.setattr(autotune.pipeline._build, "amp_supported", lambda device, dtype: False)
    cfg = tmp_path / "fp16.yaml"
    cfg.write_text("amp_dtype: float16\n")
    assert main(["trial", "--config", str(cfg), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "amp_dtype float16 is not supported on cpu" in err[0]
    assert "use bfloat16 or float32" in err[0]


def test_debug_shows_the_traceback():
    proc = _cli("--debug", "search", "--dataset", "Redit")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_debug_shows_where_a_users_factory_failed(base):
    tmp, common, _ = base
    proc = _cli("--debug", "search", *TINY, *common, "--model", "user_models:raising")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and 'user_models.py", line' in proc.stderr
    assert "in raising" in proc.stderr and "UserCodeError" in proc.stderr
