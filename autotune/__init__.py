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
    "NeighborSampler": "autotune.sampler",
    "make_sampler": "autotune.sampler",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from autotune.errors import AutotuneError, BackendUnavailableError, ConfigError, DatasetError
    from autotune.sampler import NeighborSampler, make_sampler


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
