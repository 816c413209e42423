"""The training pipeline a :class:`TrialConfig` describes: ``_build`` (every knob
takes effect there: :func:`build`, :class:`Pipeline`), ``_tasks`` (node, link and graph
tasks, homogeneous or not), ``_models`` (the built-in models), ``_training``
(:func:`train`: whole epochs with a config), ``_tuning`` (a training run that tunes
itself), ``_tuned_loop`` (the same under the caller's own loop) and ``_allocator`` (glibc's heap held).
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
    "check_dataset": "_tasks",
    "TrainResult": "_training",
    "TrainSpec": "_training",
    "TrainingInterrupted": "_training",
    "Training": "_training",
    "evaluate": "_training",
    "fit": "_training",
    "train": "_training",
    "TunedLoop": "_tuned_loop",
    "TunedRun": "_tuning",
    "TuneLog": "_tuning",
    "TuneSpec": "_tuning",
    "WindowEvent": "_tuning",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
