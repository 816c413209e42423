"""Datasets: ``_datasets`` (PyG's dataset classes, OGB, files, functions, caches:
:class:`DatasetRef`, :func:`load_dataset`), ``_splits`` (heterogeneous target types,
node masks and link splits), ``_graphsets`` (graph-level sets of many small graphs)
and ``_synthetic`` (the generated graphs).
"""
from __future__ import annotations

from autotune.imports import lazy_exports

_EXPORTS = {
    "Dataset": "_datasets",
    "DatasetRef": "_datasets",
    "export_dataset": "_datasets",
    "load_dataset": "_datasets",
    "root_default": "_datasets",
    "same_dataset": "_datasets",
    "GraphSet": "_graphsets",
    "LINK_ATTR": "_splits",
    "link_edge_type": "_splits",
    "target_type": "_splits",
    "synthetic_reddit": "_synthetic",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
