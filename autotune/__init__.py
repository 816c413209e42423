"""autotune: a Pareto autotuner for PyTorch Geometric training pipelines.

Public names are imported lazily, so that ``autotune --help`` does not pay for
importing torch and PyG.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from autotune import logging as logging  # autotune.logging.set_verbosity, as optuna.logging
from autotune.imports import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "AutotuneError": "errors",
    "ConfigError": "errors",
    "DatasetError": "errors",
    "BackendUnavailableError": "errors",
    "SearchSpaceError": "errors",
    "StorageError": "errors",
    "StudyNotFoundError": "errors",
    "GuardError": "errors",
    "search": "study",
    "prepare_search": "study",
    "SearchResult": "study",
    "SearchPlan": "study",
    "SearchRequest": "study",
    "TrialRecord": "study",
    "StudyRecord": "study",
    "train": "tuning",
    "TrainResult": "pipeline",
    "TrainingInterrupted": "pipeline",
    "TunedLoop": "tuning",
    "TuneSpec": "tuning",
    "TuneLog": "tuning",
    "RunRecorder": "study",
    "TaskInfo": "taskinfo",
    "load_study": "study",
    "NeighborSampler": "sampling",
    "make_sampler": "sampling",
    "NeighborLoader": "sampling",
    "LinkNeighborLoader": "sampling",
    "TrialConfig": "config",
    "load_config": "export",
    "DatasetRef": "data",
    "load_dataset": "data",
    "synthetic_reddit": "data",
    "build": "pipeline",
    "Pipeline": "pipeline",
    "MeasureSpec": "specs",
    "TrialResult": "trial",
    "TrialLimits": "specs",
    "run_trial": "trial",
    "hold_heap": "pipeline",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from autotune.pipeline import hold_heap
    from autotune.config import TrialConfig
    from autotune.export import load_config
    from autotune.data import DatasetRef, load_dataset
    from autotune.data import synthetic_reddit
    from autotune.errors import (AutotuneError, BackendUnavailableError, ConfigError,
                                 DatasetError, GuardError, SearchSpaceError, StorageError,
                                 StudyNotFoundError)
    from autotune.study import SearchPlan, SearchRequest, SearchResult, prepare_search, \
        search
    from autotune.study import StudyRecord, TrialRecord
    from autotune.taskinfo import TaskInfo
    from autotune.pipeline import TrainingInterrupted, TrainResult
    from autotune.tuning import TunedLoop, TuneLog, TuneSpec, train
    from autotune.study import RunRecorder
    from autotune.study import load_study
    from autotune.specs import MeasureSpec, TrialLimits
    from autotune.pipeline import Pipeline, build
    from autotune.trial import TrialResult
    from autotune.trial import run_trial
    from autotune.sampling import LinkNeighborLoader, NeighborLoader, NeighborSampler, \
        make_sampler

# the packages a user reaches as attributes (autotune.study.RunRecorder), each imported
# on first use
SUBPACKAGES = ("compare", "config", "data", "pipeline", "sampling", "specs", "study", "trial",
               "tuning")

__getattr__ = lazy_exports(__name__, _EXPORTS, SUBPACKAGES)
