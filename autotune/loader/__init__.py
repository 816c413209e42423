"""Deprecated: ``autotune.loader`` was the loaders' module before the package layout.

``from autotune.loader import NeighborLoader`` (as the docs once wrote) keeps working
with a FutureWarning; the loaders live in :mod:`autotune.sampling` (and on
``autotune`` itself).
"""
from __future__ import annotations

import warnings
from typing import Any

from autotune import sampling

_MOVED = ("NeighborLoader", "LinkNeighborLoader", "NeighborSampler", "make_sampler")


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'autotune.loader' has no attribute {name!r}")
    warnings.warn(f"autotune.loader is deprecated; import {name} from autotune.sampling "
                  f"(or autotune.{name})", FutureWarning, stacklevel=2)
    value = globals()[name] = getattr(sampling, name)  # warned once
    return value


__all__ = list(_MOVED)
