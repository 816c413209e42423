"""Neighbour sampling, PyG's ``NodeLoader`` contract kept: ``_neighbor``
(:class:`NeighborSampler`, the CSC graph and the sampling backends), ``_subgraph``
(the multi-hop loop), ``_temporal`` and ``_links`` (time windows, link seeds and
negatives), ``_kernels`` (the Triton kernels) and ``_loader`` (the drop-in loaders).
"""
from __future__ import annotations

from autotune.imports import lazy_exports

_EXPORTS = {
    "gather_rows": "_kernels",
    "GraphLoader": "_loader",
    "LinkNeighborLoader": "_loader",
    "NeighborLoader": "_loader",
    "LookaheadNodeLoader": "_loader",
    "chain": "_loader",
    "NeighborSampler": "_neighbor",
    "fanouts_per_edge_type": "_neighbor",
    "load_or_build_csc": "_neighbor",
    "load_or_build_cscs": "_neighbor",
    "make_sampler": "_neighbor",
    "resolve_backend": "_neighbor",
    "time_attribute": "_temporal",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
