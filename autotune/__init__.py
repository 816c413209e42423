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
    "search": "autotune.study",
    "prepare_search": "autotune.study",
    "SearchResult": "autotune.study",
    "SearchPlan": "autotune.study",
    "SearchRequest": "autotune.study",
    "TrialRecord": "autotune.study",
    "StudyRecord": "autotune.study",
    "train": "autotune.pipeline",
    "TrainResult": "autotune.pipeline",
    "TaskInfo": "autotune.taskinfo",
    "load_study": "autotune.study",
    "NeighborSampler": "autotune.sampling",
    "make_sampler": "autotune.sampling",
    "NeighborLoader": "autotune.sampling",
    "LinkNeighborLoader": "autotune.sampling",
    "TrialConfig": "autotune.config",
    "load_config": "autotune.config",
    "DatasetRef": "autotune.data",
    "load_dataset": "autotune.data",
    "synthetic_reddit": "autotune.data",
    "build": "autotune.pipeline",
    "Pipeline": "autotune.pipeline",
    "MeasureSpec": "autotune.specs",
    "TrialResult": "autotune.trial",
    "TrialLimits": "autotune.specs",
    "run_trial": "autotune.trial",
    "hold_heap": "autotune.pipeline",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from autotune.pipeline import hold_heap
    from autotune.config import TrialConfig, load_config
    from autotune.data import DatasetRef, load_dataset
    from autotune.data import synthetic_reddit
    from autotune.errors import (AutotuneError, BackendUnavailableError, ConfigError,
                                 DatasetError, GuardError, SearchSpaceError, StorageError,
                                 StudyNotFoundError)
    from autotune.study import SearchPlan, SearchRequest, SearchResult, prepare_search, \
        search
    from autotune.study import StudyRecord, TrialRecord
    from autotune.taskinfo import TaskInfo
    from autotune.pipeline import TrainResult, train
    from autotune.study import load_study
    from autotune.specs import MeasureSpec, TrialLimits
    from autotune.pipeline import Pipeline, build
    from autotune.trial import TrialResult
    from autotune.trial import run_trial
    from autotune.sampling import LinkNeighborLoader, NeighborLoader, NeighborSampler, \
        make_sampler


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
