"""The study side of a search (``autotune.search`` is its entry point): one module per concern.

- :mod:`.api`: :func:`search`, :func:`prepare_search`, :class:`SearchResult`;
- :mod:`.options`: :class:`SearchOptions`, the search's options and their defaults;
- :mod:`.loop`: reserve, measure, tell;
- :mod:`.recovery`: interrupted, stale and orphan trials, re-queued once;
- :mod:`.constraints`: memory budget and accuracy guard as Optuna constraints;
- :mod:`.samplers`: the Optuna samplers;
- :mod:`.records`: :class:`TrialRecord`, the attribute keys;
- :mod:`.front`: the Pareto rows, ``pareto.yaml`` and exports;
- :mod:`.studies`: naming, finding and loading studies;
- :mod:`.identity`: creating or joining a study, and what it must keep;
- :mod:`._optuna`: the one adapter to Optuna's private API.

Reading a study (records, front, studies) imports neither torch nor PyG.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.study.api import SearchPlan, SearchResult, prepare_search, search
    from autotune.study.records import TrialRecord

_LAZY = {"search": "api", "prepare_search": "api", "SearchResult": "api", "SearchPlan": "api",
         "TrialRecord": "records"}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    import importlib

    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune.study' has no attribute {name!r}")
    return getattr(importlib.import_module(f"autotune.study.{module}"), name)
