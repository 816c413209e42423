from __future__ import annotations

import optuna
import pytest

from autotune.config import TrialConfig
from autotune.errors import ConfigError
from autotune.study._space import SPACES_DIR, in_space, load_space, params_for, suggest_config
from autotune.topology import Topology

TWO = Topology(cpus=(0, 1), cores=((0,), (1,)), nodes=((0, 1),))
TWO_NODES = Topology(cpus=(0, 1, 2, 3), cores=((0,), (1,), (2,), (3,)), nodes=((0, 1), (2, 3)))

BASE = TrialConfig(num_workers=2)


@pytest.mark.parametrize("name", ["quick", "default", "reddit"])
def test_shipped_spaces_load(name):
    space = load_space(name, device="cpu", cores=2, baseline=BASE)
    assert space.knobs and not space.pinned


def test_default_space_is_device_aware():
    cpu = load_space("default", device="cpu", cores=2, topology=TWO_NODES)
    gpu = load_space("default", device="cuda", cores=2, topology=TWO_NODES)
    assert "reduce-overhead" not in cpu.knobs["compile_mode"].choices
    assert "float16" not in cpu.knobs["amp_dtype"].choices
    assert any("reduce-overhead is left out" in n for n in cpu.notes)
    assert cpu.knobs["gpu_sampling"].choices == (False,)
    assert "reduce-overhead" in gpu.knobs["compile_mode"].choices and not gpu.notes
    assert gpu.knobs["gpu_sampling"].choices == (False, True)


@pytest.mark.parametrize("native", [True, False])
def test_the_space_is_the_same_on_every_cpu(monkeypatch, native):
    """A study made on a CPU that computes bfloat16 natively resumes on one that
    emulates it (an AVX2-only EPYC), and hosts of both kinds share one study: the
    space keeps bfloat16 on every CPU. Only the priors follow the CPU's flags (the
    bf16 prior, test_staged's test_priors_follow_the_device)."""
    from autotune import env

    monkeypatch.setattr(env, "cpu_flags", lambda: {"avx512_bf16"} if native else {"avx2"})
    cpu = load_space("quick", device="cpu", cores=2)
    assert cpu.knobs["amp_dtype"].choices == ("float32", "bfloat16")
    assert not any("bfloat16" in n for n in cpu.notes)


def _space(tmp_path, text):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, match", [
    ("knobs:\n  batchsize: {choices: [1]}\n", r"space.yaml.*unknown knob key 'batchsize'; "
                                               r"allowed: batch_size"),
    ("knobs:\n  batch_size: {choices: []}\n", r"knob 'batch_size': 'choices' must be a "
                                              r"non-empty list"),
    ("knobs:\n  num_workers: {low: 3, high: 1}\n", r"knob 'num_workers': low 3 > high 1"),
    ("knobs:\n  compile_mode: {choices: [turbo]}\n", r"'turbo' is not allowed; use none"),
    ("knobs: [1, 2]\n", r"'knobs' must be a non-empty mapping"),
    ("knobs:\n  batch_size: {choices: [1, 2}\n", r"is not valid YAML"),
    ("knobs:\n  amp_dtype: {low: 1, high: 2}\n", r"a low/high range works only for"),
    ("knobs:\n  batch_size: 64\nfixed:\n  colour: red\n", r"unknown fixed key 'colour'"),
    ("knobs:\n  num_neighbors: {choices: [[5, 5, 5]]}\n", r"needs one entry per layer"),
    ("knobs:\n  num_neighbors: [[25, 10]]\n", r"\[\[25, 10\]\] is not a fanout"),
    ("knobs:\n  batch_size: {choices: [[1, 2]]}\n", r"choices must be single values"),
])
def test_malformed_spaces_name_file_key_and_fix(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_space(str(_space(tmp_path, text)), device="cpu", cores=2)


def test_cpu_downgrades_a_pinned_gpu_only_choice(tmp_path):
    space = load_space(str(_space(tmp_path, "knobs:\n  compile_mode: reduce-overhead\n")),
                       device="cpu", cores=2)
    assert space.knobs["compile_mode"].choices == ("default",)
    assert "downgraded to default" in space.notes[0]


def test_conditional_knobs():
    space = load_space("quick", device="cpu", cores=2, baseline=BASE)
    trial = optuna.trial.FixedTrial({"batch_size": 512, "num_neighbors": "10,5",
                                     "num_workers": 0, "amp_dtype": "float32",
                                     "checkpointing": False, "compile_mode": "none",
                                     "sampling_backend": "builtin"})
    config = suggest_config(trial, space, device="cpu", topology=TWO)
    assert config.loader_cores is None and config.compute_cores is None
    assert config.num_neighbors == (10, 5) and config.hidden_channels == 64
    with_workers = optuna.trial.FixedTrial({**trial.params, "num_workers": 1,
                                            "affinity": "split"})
    config = suggest_config(with_workers, space, device="cpu", topology=TWO)
    assert (config.loader_cores, config.compute_cores) == ((0,), (1,))


def test_the_space_stays_as_written_and_notes_the_baseline_outside_it():
    """The baseline's values outside the space are noted, not added to it; only a
    study made before that (:meth:`SearchSpace.widened`) holds them."""
    space = load_space("quick", device="cpu", cores=2, baseline=BASE)
    assert space.knobs["num_neighbors"].choices == ((10, 5), (15, 10))
    assert space.knobs["num_workers"].choices == (0, 1)
    assert space.knobs["sampling_backend"].choices == ("builtin",), "a pinned knob stays pinned"
    assert space.outside == {"num_neighbors": ((25, 10), (15, 10)), "num_workers": (2, 1)}
    assert space.baseline_outside() == {"num_neighbors": [25, 10], "num_workers": 2}
    baseline = space.baseline(BASE)
    assert not in_space(baseline, space)
    widened = space.widened()
    assert in_space(baseline, widened) and widened.outside == space.outside
    trial = optuna.trial.FixedTrial(params_for(baseline, widened))
    assert suggest_config(trial, widened, device="cpu", topology=TWO) == baseline


def test_affinity_strategies_the_machine_cannot_build_are_left_out(tmp_path):
    path = _space(tmp_path, "knobs:\n  num_workers: {choices: [0, 1]}\n"
                            "  affinity: {choices: [none, split, compact, "
                            "loader-on-numa0/compute-on-numa1]}\n")
    space = load_space(str(path), device="cpu", cores=2, topology=TWO)
    assert space.knobs["affinity"].choices == ("none", "split", "compact")
    assert any("needs 2 NUMA nodes" in n and "has 1" in n for n in space.notes)
    pinned = _space(tmp_path, "knobs:\n  affinity: loader-on-numa0/compute-on-numa1\n")
    with pytest.raises(ConfigError, match="needs 2 NUMA nodes"):
        load_space(str(pinned), device="cpu", cores=2, topology=TWO)


def test_model_facts_override_fixed_and_fit_fanouts():
    space = load_space("quick", device="cpu", cores=2, baseline=BASE,
                       facts={"model": "gat", "num_layers": 3, "hidden_channels": 32})
    assert space.fixed == {"hidden_channels": 32, "model": "gat", "num_layers": 3}
    assert set(space.knobs["num_neighbors"].choices) == {(10, 5, 5), (15, 10, 10)}
    assert space.outside["num_neighbors"][0] == (25, 10, 10)
    assert any("fitted to 3 layers" in n for n in space.notes)
    baseline = space.baseline(BASE)
    assert (baseline.model, baseline.num_layers, baseline.num_neighbors) == \
        ("gat", 3, (25, 10, 10))
    space = space.widened()
    trial = optuna.trial.FixedTrial(params_for(baseline, space))
    assert suggest_config(trial, space, device="cpu", topology=TWO) == baseline


def test_spaces_dir_has_a_schema_doc():
    assert (SPACES_DIR / "README.md").exists()


def test_a_bare_checkout_finds_the_shipped_spaces(monkeypatch):
    """Run from a checkout on PYTHONPATH (as on the GPU machine, where nothing is
    installed), the shipped spaces are the repository's search_spaces/: a search
    there failed with "search space 'default' not found" after the package moved."""
    import importlib.util

    from autotune.study import _space

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert (_space._spaces_dir() / "default.yaml").is_file()
    assert _space._spaces_dir() == SPACES_DIR.resolve()


def test_aggregation_is_suggested_only_without_compile():
    space = load_space("default", device="cpu", cores=2, baseline=BASE)
    assert space.knobs["aggregation"].choices == ("scatter", "sparse")
    params = {"batch_size": 1024, "num_neighbors": "25,10", "num_workers": 0,
              "amp_dtype": "float32", "checkpointing": False, "sampling_backend": "builtin",
              "dropout_masks": "bernoulli", "feature_dtype": "float32"}
    eager = suggest_config(optuna.trial.FixedTrial(
        {**params, "compile_mode": "none", "aggregation": "sparse"}), space, device="cpu",
        topology=TWO)
    assert eager.aggregation == "sparse"
    assert params_for(eager, space)["aggregation"] == "sparse"
    trial = optuna.trial.FixedTrial({**params, "compile_mode": "default", "shapes": "dynamic",
                                     "aggregation": "sparse"})
    compiled = suggest_config(trial, space, device="cpu", topology=TWO)
    assert compiled.aggregation == "scatter", "a compiled config never aggregates sparsely"
    assert "aggregation" not in params_for(compiled, space)


def test_a_compiled_configs_eager_twin_takes_its_aggregation_not_a_sampled_one():
    """Compiled configs aggregate by scatter (sparse is eager-only): the twin queued
    before one must be that very config uncompiled, with aggregation scatter set,
    not left for the sampler to draw (it drew sparse, the twin never matched, and the
    variant was deferred again and again)."""
    from autotune.study._space import eager_params, eager_twin

    space = load_space("default", device="cpu", cores=2, baseline=BASE)
    params = {"batch_size": 1024, "num_neighbors": "25,10", "num_workers": 0,
              "compile_mode": "default", "shapes": "dynamic", "amp_dtype": "float32",
              "checkpointing": False, "sampling_backend": "builtin", "dropout_masks": "bernoulli",
              "feature_dtype": "float32"}
    compiled = suggest_config(optuna.trial.FixedTrial(params), space, device="cpu",
                              topology=TWO)
    twin = eager_params(params, space, "cpu")
    assert twin["aggregation"] == "scatter" and "shapes" not in twin
    assert suggest_config(optuna.trial.FixedTrial(twin), space, device="cpu",
                          topology=TWO).key() == eager_twin(compiled).key()


def test_a_model_that_refuses_sparse_aggregation_leaves_it_out_with_a_note():
    space = load_space("default", device="cpu", cores=2, facts={"model": "gat"})
    assert space.knobs["aggregation"].choices == ("scatter",)
    assert any("aggregation sparse left out: model gat" in n for n in space.notes)
    assert load_space("default", device="cpu", cores=2).knobs["aggregation"].choices == \
        ("scatter", "sparse")
