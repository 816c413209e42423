"""autotune: a Pareto autotuner for PyTorch Geometric training pipelines.

Public names are imported lazily, so that ``autotune --help`` does not pay for
importing torch and PyG.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "AutotuneError": "autotune.errors",
    "ConfigError": "autotune.errors",
    "DatasetError": "autotune.errors",
    "BackendUnavailableError": "autotune.errors",
    "SearchSpaceError": "autotune.errors",
    "StorageError": "autotune.errors",
    "StudyNotFoundError": "autotune.errors",
    "GuardError": "autotune.errors",
    "search": "autotune.study.api",
    "prepare_search": "autotune.study.api",
    "SearchResult": "autotune.study.api",
    "SearchPlan": "autotune.study.api",
    "SearchRequest": "autotune.study.api",
    "TrialRecord": "autotune.study.records",
    "StudyRecord": "autotune.study.records",
    "train": "autotune.training",
    "TrainResult": "autotune.training",
    "TaskInfo": "autotune.taskinfo",
    "load_study": "autotune.study.studies",
    "NeighborSampler": "autotune.sampler",
    "make_sampler": "autotune.sampler",
    "TrialConfig": "autotune.config",
    "load_config": "autotune.config",
    "DatasetRef": "autotune.datasets",
    "load_dataset": "autotune.datasets",
    "synthetic_reddit": "autotune.synthetic",
    "build": "autotune.pipeline",
    "Pipeline": "autotune.pipeline",
    "MeasureSpec": "autotune.specs",
    "TrialResult": "autotune.result",
    "TrialLimits": "autotune.specs",
    "run_trial": "autotune.runner",
    "hold_heap": "autotune.allocator",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from autotune.allocator import hold_heap
    from autotune.config import TrialConfig, load_config
    from autotune.datasets import DatasetRef, load_dataset
    from autotune.synthetic import synthetic_reddit
    from autotune.errors import (AutotuneError, BackendUnavailableError, ConfigError,
                                 DatasetError, GuardError, SearchSpaceError, StorageError,
                                 StudyNotFoundError)
    from autotune.study.api import SearchPlan, SearchRequest, SearchResult, prepare_search, \
        search
    from autotune.study.records import StudyRecord, TrialRecord
    from autotune.taskinfo import TaskInfo
    from autotune.training import TrainResult, train
    from autotune.study.studies import load_study
    from autotune.specs import MeasureSpec, TrialLimits
    from autotune.pipeline import Pipeline, build
    from autotune.result import TrialResult
    from autotune.runner import run_trial
    from autotune.sampler import NeighborSampler, make_sampler


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
