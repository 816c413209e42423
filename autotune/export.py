"""The export file: the one config a study (or a tuned run) chose, written for the
user's own training code and read back by ``autotune train --config``, ``trial``,
``search --config`` and :func:`load_config`. Its writer and its reader live here
together, so that the format has one home:

- :func:`export_document` makes the document (the config, its measured figures,
  where they were measured and the command that measures it again), and
  :func:`write_export_file` writes it atomically, as YAML or JSON;
- :func:`read_export` reads it back (or a config written by hand), and
  :func:`load_config` returns only its config.

What goes into ``measured`` (a search's pick, or a tuned run's winner) is the
study's business: ``autotune.study`` gathers it and calls the writer.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config import TrialConfig, one_line
from autotune.errors import ConfigError
from autotune.files import atomic_write, dump
from autotune.taskinfo import TASKS

CONFIG_FORMAT = 1
# TrialConfig's fields that describe the model the built-in pipeline trains; a user's
# own loop (TunedLoop) trains its own model, so its export leaves them out
MODEL_FIELDS = ("model", "hidden_channels", "lr", "dropout", "dropout_masks")


@dataclass(frozen=True)
class Export:
    """A config file read back: the config, and for a file ``autotune export`` wrote,
    the dataset it was measured on (name, root, scale, seed) and its ``measured``
    figures (trial number, ``throughput`` in its task's unit, peak memory); None for
    a config written by hand."""

    config: TrialConfig
    dataset_ref: dict[str, Any] | None = None
    measured: dict[str, Any] | None = None


def export_document(config: TrialConfig, measured: dict[str, Any], *, dataset_ref: dict,
                    dataset: dict, env: dict, study: str, storage: str,
                    out: str | Path) -> dict[str, Any]:
    """The export of ``config``: its knobs, its ``measured`` figures, the dataset and
    environment they were measured on, the study (and its ``storage``, masked) they
    come from, and the command that measures it again, which reads ``out``. A
    config from a user's own loop (no dataset name) carries neither the model's
    fields, which were the user's, nor a command (it could not name the data)."""
    own = not dataset_ref.get("name")
    reproduce = None if own else shlex.join(
        ["autotune", "trial", "--dataset", str(dataset_ref.get("name")),
         "--root", str(dataset_ref.get("root")), "--scale", str(dataset_ref.get("scale")),
         "--data-seed", str(dataset_ref.get("seed")), "--config", str(out)])
    knobs = config.meaningful()
    if own:
        knobs = {k: v for k, v in knobs.items() if k not in MODEL_FIELDS}
    return {"format": CONFIG_FORMAT, "config": knobs, "model": None if own else config.model,
            "measured": measured, "env": env, "dataset": dataset, "dataset_ref": dataset_ref,
            "study": study, "storage": storage, "reproduce": reproduce}


def write_export_file(document: dict[str, Any], out: str | Path) -> Path:
    """Writes ``document`` to ``out`` atomically: JSON where it ends in .json, else YAML."""
    out = Path(out)
    return atomic_write(out, dump(document, "json" if out.suffix == ".json" else "yaml"))


def read_export(path: str | Path) -> Export:
    """Reads a config exported by ``autotune export`` (or written by hand) from YAML
    or JSON. An export from before ``throughput`` was written has it under its
    unit's key (``seed_nodes_per_s``), which is copied."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config '{path}': {exc.strerror}") from exc
    try:
        blob = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config '{path}' is not valid YAML: {one_line(exc)}") from exc
    if not (isinstance(blob, dict) and "config" in blob):  # a hand-written config
        if blob is None:
            raise ConfigError(f"config '{path}' is empty; give the knobs to change "
                              "(batch_size: 512, ...), or leave out --config to measure the "
                              "default config")
        return Export(TrialConfig.from_dict(blob, source=f"config '{path}'"))
    fmt = blob.get("format", CONFIG_FORMAT)
    if fmt != CONFIG_FORMAT:
        raise ConfigError(f"config '{path}' has format {fmt!r}; this autotune reads "
                          f"format {CONFIG_FORMAT}")
    ref = blob.get("dataset_ref")
    return Export(TrialConfig.from_dict(blob["config"], source=f"config '{path}'"),
                  dataset_ref=ref if isinstance(ref, dict) and "name" in ref else None,
                  measured=_measured(blob.get("measured")))


def _measured(measured: Any) -> dict[str, Any] | None:
    if not isinstance(measured, dict):
        return None
    keys = [key for key in ["throughput"] + [t.throughput_key for t in TASKS.values()]
            if key in measured]
    return {**measured, "throughput": measured[keys[0]]} if keys else None


def load_config(path: str | Path) -> TrialConfig:
    """The config of a file ``autotune export`` wrote (or one written by hand): its
    measured figures and environment ride along under other keys
    (:func:`read_export` reads them)."""
    return read_export(path).config
