from __future__ import annotations

import pytest
import yaml

from autotune.config import TrialConfig
from autotune.export import load_config
from autotune.errors import ConfigError


def test_defaults_follow_pyg_reddit_example():
    c = TrialConfig()
    assert (c.batch_size, c.num_neighbors, c.hidden_channels, c.num_layers, c.lr) == \
        (1024, (25, 10), 256, 2, 0.01)
    assert c.compile_mode == "none" and c.amp_dtype == "float32" and not c.checkpointing


def test_round_trip_through_dict():
    c = TrialConfig(batch_size=512, num_neighbors=[15, 5], num_workers=2, loader_cores=[1],
                    compute_cores=[0], compile_mode="default", shapes="padded",
                    amp_dtype="bfloat16", checkpointing=True, sampling_backend="builtin")
    assert c.num_neighbors == (15, 5) and c.loader_cores == (1,)
    assert TrialConfig.from_dict(c.to_dict()) == c
    hash(c)  # frozen and hashable


@pytest.mark.parametrize("changes, match", [
    ({"batch_size": 0}, r"batch_size must be a positive int \(got 0\)"),
    ({"num_neighbors": (25,)}, r"one entry per layer: 2 layers \(got 1"),
    ({"num_neighbors": (25, 0)}, r"num_neighbors must be"),
    ({"compile_mode": "fast"}, r"compile_mode must be one of .* \(got 'fast'\)"),
    ({"amp_dtype": "float8"}, r"amp_dtype must be one of"),
    ({"shapes": "padded"}, r"padded' only helps a compiled model"),
    ({"loader_cores": (0,)}, r"loader_cores needs num_workers > 0"),
    ({"compute_cores": (0, 0)}, r"lists a core twice"),
    ({"num_workers": -1}, r"num_workers must be an int >= 0 \(got -1\)"),
    ({"checkpointing": "yes"}, r"checkpointing must be true or false"),
    ({"sampling_backend": "torch"}, r"sampling_backend must be one of builtin, pyg, auto"),
])
def test_validation_names_the_problem(changes, match):
    with pytest.raises(ConfigError, match=match):
        TrialConfig(**changes)


def test_unknown_keys_are_errors():
    with pytest.raises(ConfigError, match=r"unknown keys batchsize"):
        TrialConfig.from_dict({"batchsize": 3})


def test_load_config_reads_plain_and_exported_files(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("batch_size: 256\nnum_neighbors: [10, 5]\n")
    assert load_config(plain) == TrialConfig(batch_size=256, num_neighbors=(10, 5))
    exported = tmp_path / "export.yaml"
    exported.write_text(yaml.safe_dump({"format": 1, "config": {"batch_size": 64},
                                        "measured": {"seed_nodes_per_s": 1.0}}))
    assert load_config(exported).batch_size == 64
    future = tmp_path / "future.yaml"
    future.write_text(yaml.safe_dump({"format": 9, "config": {}}))
    with pytest.raises(ConfigError, match="format 9"):
        load_config(future)
    broken = tmp_path / "broken.yaml"
    broken.write_text("batch_size: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)


def test_an_export_holds_only_the_knobs_that_mean_something():
    """A CPU config's export leaves out GPU sampling and where it keeps the features,
    the pad ladder of dynamic shapes, the prefetch factor without loader workers and
    the recompile limit without compiling; read back, the config is the same."""
    cpu = TrialConfig(num_workers=0)
    shown = cpu.meaningful()
    for idle in ("gpu_sampling", "feature_placement", "pad_ladder", "prefetch_factor",
                 "recompile_limit"):
        assert idle not in shown
    assert TrialConfig.from_dict(shown) == cpu
    busy = TrialConfig(num_workers=2, prefetch_factor=4, compile_mode="default",
                       shapes="padded", pad_ladder="geometric", recompile_limit=3)
    assert {"prefetch_factor": 4, "pad_ladder": "geometric", "recompile_limit": 3}.items() \
        <= busy.meaningful().items()
    gpu = TrialConfig(device="cuda", gpu_sampling=True, sampling_backend="builtin",
                      feature_placement="pinned")
    assert gpu.meaningful()["feature_placement"] == "pinned"
    assert "feature_placement" not in TrialConfig(device="cuda").meaningful()
