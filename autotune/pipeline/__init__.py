"""The training pipeline a :class:`TrialConfig` describes: ``_build`` (every knob
takes effect there: :func:`build`, :class:`Pipeline`), ``_tasks`` (node, link and graph
tasks, homogeneous or not), ``_models`` (the built-in models), ``_source`` (where an
epoch's batches come from, and the one timer of training steps), ``_training`` (the
one epoch loop, :func:`fit`, and whole trainings, :func:`train_from`) and
``_allocator`` (glibc's heap held). A run that tunes itself is a package of its own
above this one, :mod:`autotune.tuning`.
"""
from __future__ import annotations

from autotune.imports import lazy_exports

_EXPORTS = {
    "heap_state": "_allocator",
    "hold_heap": "_allocator",
    "Pipeline": "_build",
    "build": "_build",
    "check_config": "_build",
    "device_sync": "_build",
    "gpu_room": "_build",
    "limit_gpu_memory": "_build",
    "BatchSource": "_source",
    "PipelineSource": "_source",
    "Step": "_source",
    "Window": "_source",
    "timed": "_source",
    "handover_seconds": "_source",
    "check_dataset": "_tasks",
    "Epoch": "_training",
    "TrainResult": "_training",
    "TrainSpec": "_training",
    "TrainingInterrupted": "_training",
    "Training": "_training",
    "evaluate": "_training",
    "fit": "_training",
    "prepare_training": "_training",
    "train_from": "_training",
}
# reachable here before the tuning package, with a FutureWarning
_MOVED = {name: "autotune.tuning"
          for name in ("TunedLoop", "TunedRun", "TuneLog", "TuneSpec", "WindowEvent", "train")}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS, moved=_MOVED)
