"""The library-first search: ``autotune.search`` with the user's own model and data,
from Python and from the CLI, and the rules that make that safe."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch
import yaml

import autotune
import user_models
from _helpers import cli, loss_and_grads
from autotune.config import TrialConfig
from autotune.export import load_config
from autotune.errors import ConfigError, DatasetError, StudyNotFoundError
from autotune.specs import MeasureSpec

TESTS = Path(__file__).resolve().parent
MODEL = "user_models:graphconv"
SPACE = {"knobs": {"batch_size": {"choices": [32, 64]}, "num_neighbors": {"choices": [[5, 5]]},
                   "num_workers": 0, "checkpointing": {"choices": [False, True]},
                   "sampling_backend": "builtin"},
         "fixed": {"hidden_channels": 16}}
FAST = MeasureSpec(warmup_steps=1, min_warmup_s=0.0,
                   min_steps=3, min_window_s=0.0, max_window_s=0.5)


def test_a_factory_crosses_processes_by_its_import_path():
    from autotune.imports import import_object, import_path_of

    assert import_path_of(user_models.graphconv, what="model factory", option="model=") == MODEL
    assert import_object(MODEL, what="model factory", option="--model") is user_models.graphconv

    def local(in_channels, out_channels, config):
        return None

    for bad, why in ((lambda a, b, c: None, "lambda or a local function"),
                     (local, "lambda or a local function")):
        with pytest.raises(ConfigError, match=why):
            import_path_of(bad, what="model factory", option="model=")
    with pytest.raises(ConfigError, match="cannot import module 'no_such_pkg.mod'"):
        import_object("no_such_pkg.mod:f", what="model factory", option="--model")
    with pytest.raises(ConfigError, match="has no model factory 'nothing'"):
        import_object("user_models:nothing", what="model factory", option="--model")
    with pytest.raises(ConfigError, match="import path"):
        TrialConfig(model="not a path")


def test_every_knob_reaches_a_user_model(tiny_synthetic):
    """Checkpointing wraps every MessagePassing layer wherever it sits; padding keeps
    the loss and gradients exact; bfloat16 reaches the layers; the probe sees them."""
    from autotune.trial._window import probe_model
    from autotune.pipeline._models import make_model
    from autotune.pipeline import build
    from autotune.pipeline._build import PadToBucket, apply_checkpointing

    config = TrialConfig(model=MODEL, hidden_channels=16, batch_size=32, num_neighbors=(5, 5),
                         sampling_backend="builtin", dropout=0.0)
    torch.manual_seed(0)
    model = make_model(config, tiny_synthetic.num_features, 4)
    assert isinstance(model, user_models.GraphConvNet)
    twin = copy.deepcopy(model)
    assert apply_checkpointing(twin) == 2
    batch = next(iter(build(config, tiny_synthetic, num_classes=4).loader))
    padded = PadToBucket("pow2")(copy.copy(batch))
    losses = [loss_and_grads(m, b) for m, b in ((model, batch), (twin, batch), (model, padded))]
    for loss, grads in losses[1:]:
        torch.testing.assert_close(loss, losses[0][0])
        for g, g0 in zip(grads, losses[0][1]):
            torch.testing.assert_close(g, g0)
    pipe = build(config.replace(checkpointing=True, amp_dtype="bfloat16"), tiny_synthetic,
                 num_classes=4)
    assert pipe.checkpointed_layers == 2
    probe = probe_model(pipe, next(iter(pipe.loader)))
    assert probe["conv_types"] == ["GraphConv"] and probe["conv_layers"] == 2
    assert probe["checkpointed_layers"] == 2 and probe["model"] == MODEL
    assert "bfloat16" in probe["conv_linear_dtypes"]


def test_a_factory_that_returns_no_module_is_refused(tiny_synthetic):
    from autotune.pipeline._models import make_model

    with pytest.raises(ConfigError, match="must return a torch.nn.Module"):
        make_model(TrialConfig(model="user_models:not_a_module"), 8, 2)


def test_a_dataset_function_is_checked(tmp_path):
    from autotune.data import load_dataset

    data = load_dataset("user_models:tiny_graph", root=tmp_path)
    assert data.stats()["num_features"] == 24 and data.num_classes == 3
    with pytest.raises(DatasetError, match="returned a Tensor"):
        load_dataset("user_models:not_data", root=tmp_path)
    with pytest.raises(DatasetError, match="cannot import module"):
        load_dataset("nowhere.mod:f", root=tmp_path)


@pytest.mark.slow
def test_search_a_user_model_and_data_from_python(tmp_path, capsys):
    result = autotune.search(dataset=user_models.tiny_graph, model=user_models.graphconv,
                             space=SPACE, n_trials=3, optuna_sampler="random", root=str(tmp_path / "d"),
                             studies_dir=tmp_path / "studies", study_name="mine",
                             measure=FAST, confirm=0)
    assert [t.state for t in result.trials] == ["complete"] * 3, \
        [t.fail_reason or t.stderr_tail for t in result.trials]
    for t in result.trials:
        assert t.config.model == MODEL
        assert t.observed.conv_types == ["GraphConv"] and t.observed.conv_layers == 2
        assert t.observed.checkpointed_layers == (2 if t.config.checkpointing else 0)
    assert result.baseline is not None and result.baseline.number == 0
    assert result.knee is not None and result.front
    assert result.pareto_path.exists()
    out = result.export(tmp_path / "best.yaml")
    assert load_config(out).model == MODEL
    assert yaml.safe_load(out.read_text())["model"] == MODEL
    err = capsys.readouterr().err  # the default progress: the CLI's lines, on stderr
    assert [f"[  {n}/3] #{n - 1}" in err for n in (1, 2, 3)] == [True] * 3, err
    assert "-> #0   measuring" in err
    assert len(repr(result.knee)) < 200 and len(repr(result)) < 400, repr(result)
    assert repr(result.knee).startswith(f"<TrialRecord #{result.knee.number} complete")


@pytest.mark.slow
def test_search_a_user_model_from_the_cli_and_train_it(tmp_path):
    env = {"PYTHONPATH": str(TESTS)}
    common = ["--dataset", "user_models:tiny_graph", "--model", MODEL, "--root",
              str(tmp_path / "d"), "--studies-dir", str(tmp_path / "s"), "--study-name", "cli",
              "--space", "quick", "--hidden", "16", "--steps", "3", "--warmup", "1",
              "--warmup-time", "0",
              "--max-seconds", "0.5"]
    run = cli("search", *common, "--n-trials", "2", "--confirm", "0", env=env, cwd=tmp_path,
              timeout=600, fresh=True)
    assert run.returncode == 0, run.stderr
    study = optuna.load_study(study_name="cli", storage=f"sqlite:///{tmp_path / 's' / 'cli.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert {t.user_attrs["config"]["model"] for t in study.trials} == {MODEL}
    # the search ran in a fresh interpreter, on PYTHONPATH as a user sets it; these two
    # run here, where tests/ is on the import path already (no 6 s import each)
    export = cli("export", "--study-name", "cli", "--studies-dir", str(tmp_path / "s"),
                 "--out", str(tmp_path / "best.yaml"), cwd=tmp_path, timeout=120)
    assert export.returncode == 0, export.stderr
    train = cli("train", "--config", str(tmp_path / "best.yaml"), "--dataset",
                "user_models:tiny_graph", "--root", str(tmp_path / "d"), "--epochs", "1", "-f",
                "json", cwd=tmp_path, timeout=300)
    assert train.returncode == 0, train.stderr
    assert '"model": "user_models:graphconv"' in train.stdout


def test_a_lambda_model_is_refused_before_any_trial(tmp_path):
    with pytest.raises(ConfigError, match="lambda or a local function"):
        autotune.search(model=lambda a, b, c: None, studies_dir=tmp_path / "s",
                        root=str(tmp_path / "d"), scale=0.004)
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").glob("*.db"))


def test_a_space_that_fixes_three_layers_takes_the_baseline(tmp_path):
    """The baseline's 2-layer fanout is fitted to the space's layer count before it is
    compared with the space (it used to be refused: '(25, 10) needs 3 entries')."""
    from autotune.study._space import load_space
    from autotune.study import default_config

    path = tmp_path / "three.yaml"
    path.write_text("knobs:\n  num_neighbors: {choices: [[10, 5, 5], [5, 5, 5]]}\n"
                    "fixed:\n  num_layers: 3\n")
    base = default_config("cpu")
    space = load_space(str(path), baseline=base)
    assert space.outside["num_neighbors"] == ((25, 10, 10), (10, 5, 5))
    assert (25, 10, 10) in space.widened().knobs["num_neighbors"].choices
    assert space.baseline(base).num_neighbors == (25, 10, 10)


def test_reading_commands_import_neither_torch_nor_pyg(tmp_path):
    storage = f"sqlite:///{tmp_path / 'r.db'}"
    optuna.create_study(study_name="r", storage=storage, directions=["maximize", "minimize"])
    code = ("import sys\nfrom autotune.cli import main\n"
            f"for argv in (['show', '--study-name', 'r', '--storage', '{storage}'],\n"
            f"             ['show', '--study-name', 'nosuch', '--storage', '{storage}'],\n"
            f"             ['export', '--study-name', 'r', '--storage', '{storage}', '--out',"
            f" '{tmp_path / 'x.yaml'}']):\n"
            "    main(argv)\n"
            "bad = [m for m in ('torch', 'torch_geometric') if m in sys.modules]\n"
            "assert not bad, bad\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "no study 'nosuch'" in run.stderr and "(studies there: r)" in run.stderr


def test_an_unknown_study_is_a_study_not_found_error(tmp_path):
    from autotune.study import load_study

    storage = f"sqlite:///{tmp_path / 'r.db'}"
    optuna.create_study(study_name="there", storage=storage)
    with pytest.raises(StudyNotFoundError, match=r"studies there: there\); pass --study-name "
                                                 r"\(study_name=\)"):
        load_study("nosuch", storage=storage)


@pytest.mark.parametrize("options, needle", [
    ({"optuna_sampler": "nope"}, "--optuna-sampler (optuna_sampler=) must be one of"),
    ({"n_trials": 0}, "--n-trials (n_trials=) must be a positive integer"),
    ({"timeout": -1}, "--timeout (timeout=) must be a duration"),
    ({"grace_period": 5}, "--grace-period must be longer than --heartbeat"),
    ({"confirm_rounds": 2}, "--confirm-rounds (confirm_rounds=) must be a whole number >= 3"),
    ({"max_memory": "lots"}, "--max-memory (max_memory=)"),
    ({"space": "quik"}, "did you mean 'quick'"),
    ({"space": {"knobs": {"turbo": 1}}}, "unknown knob key 'turbo'"),
])
def test_bad_api_options_are_refused_before_the_dataset_is_prepared(tmp_path, options, needle):
    with pytest.raises(ConfigError) as err:
        autotune.prepare_search(**{"root": str(tmp_path / "data"), "scale": 0.004,
                                   "studies_dir": tmp_path / "s", **options})
    assert needle in str(err.value)
    assert not (tmp_path / "data").exists(), "nothing may be prepared for refused options"


def test_knobs_that_mean_nothing_on_the_dataset_are_warned_about(tmp_path):
    space = {"knobs": {"batch_size": {"choices": [4096, 8192]},
                       "num_neighbors": {"choices": [[5000, 5000]]}, "num_workers": 0,
                       "sampling_backend": "builtin"}}
    plan = autotune.prepare_search(dataset=user_models.ring_graph, space=space,
                                   root=str(tmp_path / "d"), studies_dir=tmp_path / "s")
    warnings = [n for n in plan.notes if n.startswith("warning: ")]
    assert any("holds all" in w and "batch_size changes nothing" in w for w in warnings)
    assert any("largest in-degree (3)" in w for w in warnings), plan.notes
    quiet = autotune.prepare_search(dataset=user_models.tiny_graph, space={
        "knobs": {"batch_size": {"choices": [128, 256]}, "num_neighbors": {"choices": [
            [10, 5], [15, 10]]}}}, root=str(tmp_path / "d"), studies_dir=tmp_path / "s2")
    assert not [n for n in quiet.notes if n.startswith("warning: ")], quiet.notes
