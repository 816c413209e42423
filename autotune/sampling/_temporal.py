"""Temporal neighbour sampling for :class:`autotune.NeighborSampler`, with PyG's
semantics (``time_attr``, ``input_time``, ``edge_label_time``, ``temporal_strategy``).

What pyg-lib does, and this module does in torch ops: the time attribute is a node
attribute (a neighbour's time is its node's) or an edge attribute (an edge's own
time); each seed has a time (``input_time``, else its node's time); every sampled
node or edge is no later than the time of the seed whose subgraph it joins, so each
seed has its own subgraph (temporal sampling is disjoint). ``"uniform"`` draws among
the neighbours no later than the seed, ``"last"`` keeps the ``k`` latest of them.

Each CSC column is put in time order once (:func:`time_ordered`), so a hop's window
is a prefix of its column, found by a binary search over all frontier nodes at once
(:func:`autotune.sampling._subgraph.not_later`). Why not a library: pyg-lib does this and is
not on PyPI; torch-sparse has no temporal sampler.
"""
from __future__ import annotations

from torch import Tensor
import torch

from autotune.config import TEMPORAL_STRATEGIES
from autotune.errors import ConfigError
from autotune.sampling._subgraph import csc_columns

EdgeType = tuple[str, str, str]


def time_attribute(data, time_attr: str) -> tuple[dict, dict]:
    """The graph's times as ``(node_time, edge_time)``: one is empty, the other maps
    node types (``None``: homogeneous) or edge types to their time tensor."""
    from torch_geometric.data import HeteroData

    if isinstance(data, HeteroData):
        node = {t: data[t][time_attr] for t in data.node_types if time_attr in data[t]}
        edge = {t: data[t][time_attr] for t in data.edge_types if time_attr in data[t]}
    else:
        node = {None: data[time_attr]} if time_attr in data and \
            data.is_node_attr(time_attr) else {}
        edge = {None: data[time_attr]} if time_attr in data and \
            data.is_edge_attr(time_attr) else {}
    if node and edge:
        raise ValueError(f"The time attribute '{time_attr}' holds both node-level and "
                         "edge-level information")
    if not node and not edge:
        raise ValueError(f"The time attribute '{time_attr}' is neither a node-level or "
                         f"edge-level attribute (the graph's attributes: "
                         f"{', '.join(sorted(_attribute_names(data))) or 'none'})")
    return node, edge


def _attribute_names(data) -> set[str]:
    return {key for store in data.stores for key in store.keys()}


def check_strategy(strategy: str) -> str:
    if strategy not in TEMPORAL_STRATEGIES:
        raise ConfigError(f"temporal_strategy must be one of "
                          f"{', '.join(TEMPORAL_STRATEGIES)} (got {strategy!r})")
    return strategy


def time_ordered(colptr: Tensor, row: Tensor, perm: Tensor | None, *,
                 src_time: Tensor | None = None, edge_time: Tensor | None = None
                 ) -> tuple[Tensor, Tensor, int]:
    """One edge type's neighbour times in time order within each CSC column:
    ``(time, order, steps)``; ``order[p]`` is the CSC position of sorted entry ``p``,
    and ``steps`` binary-search rounds cover the largest column. The time is the
    source node's (``src_time``) or the edge's own (``edge_time``, in the original
    edge order; ``perm`` maps CSC positions to it)."""
    if src_time is not None:
        times = src_time.to(row.device)[row]
    else:
        times = edge_time.to(row.device).view(-1)
        times = times if perm is None else times[perm]
    num_cols = colptr.numel() - 1
    column = csc_columns(colptr)
    by_time = torch.argsort(times, stable=True)
    order = by_time[torch.argsort(column[by_time], stable=True)]
    widest = int((colptr[1:] - colptr[:-1]).max()) if num_cols else 0
    return times[order].contiguous(), order, widest.bit_length() + 1


def seed_times(sampler, seeds: dict[str, Tensor], given: Tensor | dict | None) -> Tensor:
    """Each subgraph's seed time, in the order subgraphs are numbered (the seed types
    in ``seeds`` order): ``given`` (``input_time``/``edge_label_time``), else each seed
    node's own time, which node-level time alone has."""
    parts = []
    for node_type, ids in seeds.items():
        if isinstance(given, dict):
            time = given.get(node_type)
        else:
            time = given
        if time is None:
            time = sampler.node_time.get(node_type)
            if time is None:
                raise ConfigError(
                    "temporal sampling needs a time for every seed: pass input_time "
                    "(edge_label_time for links)" + ("" if not sampler.node_time else
                    f"; seed type {node_type!r} has no '{sampler.time_attr}'"))
            time = time.to(ids.device)[ids]
        if time.numel() != ids.numel():
            raise ConfigError(f"got {time.numel()} seed times for {ids.numel()} seeds; "
                              "give one time per seed")
        parts.append(time.to(ids.device).view(-1))
    return torch.cat(parts)
