"""Heterogeneous and link-prediction datasets: a mag-shaped synthetic generator,
ogbn-mag as a ``HeteroData``, and a link split of any homogeneous graph.

The synthetic heterogeneous graph has ogbn-mag's four node types and four relations
(Wang et al., 2020; sizes as OGB ships them, times ``scale``), each with its reverse
so that every type's messages reach papers:

========================================  ===========  ==================================
edge type                                 mean degree  degree distribution
========================================  ===========  ==================================
author -writes-> paper                    9.7 / paper  power-law authors per paper; an
                                                       author writes in its own class with
                                                       probability ``homophily``
paper -cites-> paper                      7.4 / paper  power-law citations received;
                                                       same-class citing papers with
                                                       probability ``homophily``
paper -has_topic-> field_of_study         10.2 / paper power-law field popularity
author -affiliated_with-> institution     0.92 / author  one institution per author (92%),
                                                       power-law institution size
========================================  ===========  ==================================

Papers are the target type: ``MAG_CLASSES`` venues, class-informative Gaussian
features; the other types get features near their class's centroid (authors) or
plain noise (institutions, fields). Deterministic per ``seed``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from autotune.errors import DatasetError

MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740,
             "field_of_study": 59_965}
MAG_FEATURES = 128
MAG_CLASSES = 349
TARGET_ATTR = "target_node_type"  # a HeteroData's global attribute naming its target type
LINK_SPLIT = (0.05, 0.10)  # validation and test shares of the edges, RandomLinkSplit's
# the share of training edges used for supervision only, not for message passing
# (RandomLinkSplit's disjoint_train_ratio): a model that sees the very edge it must
# score learns to spot that edge, and a held-out edge is never in its subgraph
DISJOINT_TRAIN = 0.3


def synthetic_mag(*, scale: float = 1.0, seed: int = 0, homophily: float = 0.8,
                  feature_signal: float = 0.3, num_classes: int = MAG_CLASSES,
                  num_features: int = MAG_FEATURES):
    """A mag-shaped ``HeteroData`` (see the module docstring), ``scale`` times
    ogbn-mag's node counts; papers carry ``y`` and train/val/test masks."""
    from torch_geometric.data import HeteroData

    from autotune.datasets import _homophilous_sources, _power_law_degrees, random_masks

    if not (scale > 0 and math.isfinite(scale)):
        raise DatasetError(f"--scale must be a positive number (got {scale})")
    gen = torch.Generator().manual_seed(seed)
    n = {t: max(int(round(count * scale)), 4 * num_classes if t in ("paper", "author")
                else 8) for t, count in MAG_NODES.items()}
    y = torch.randint(0, num_classes, (n["paper"],), generator=gen)
    author_y = torch.randint(0, num_classes, (n["author"],), generator=gen)
    centroids = torch.randn(num_classes, num_features, generator=gen) * feature_signal
    data = HeteroData()
    data["paper"].x = torch.randn(n["paper"], num_features, generator=gen) + centroids[y]
    data["paper"].y = y
    data["author"].x = torch.randn(n["author"], num_features, generator=gen) + \
        centroids[author_y]
    for t in ("institution", "field_of_study"):
        data[t].x = torch.randn(n[t], num_features, generator=gen)

    def incoming(mean: float, dst_count: int) -> Tensor:
        return torch.repeat_interleave(torch.arange(dst_count),
                                       _power_law_degrees(dst_count, mean, 2.2, gen))

    dst = incoming(9.7, n["paper"])
    data["author", "writes", "paper"].edge_index = torch.stack(
        [_homophilous_sources(y[dst], author_y, homophily, gen), dst])
    dst = incoming(7.4, n["paper"])
    data["paper", "cites", "paper"].edge_index = torch.stack(
        [_homophilous_sources(y[dst], y, homophily, gen), dst])
    data["paper", "has_topic", "field_of_study"].edge_index = _popular_targets(
        n["paper"], 10.2, n["field_of_study"], gen)
    data["author", "affiliated_with", "institution"].edge_index = _popular_targets(
        n["author"], 0.92, n["institution"], gen)
    _add_reverse(data)
    random_masks(data["paper"], n["paper"], gen)
    data[TARGET_ATTR] = "paper"
    data.num_classes = num_classes
    return data


def _popular_targets(num_src: int, mean: float, num_dst: int, gen: torch.Generator) -> Tensor:
    """About ``mean`` edges per source, to targets drawn by power-law popularity."""
    from autotune.datasets import _power_law_degrees

    count = int(round(mean * num_src))
    src = torch.randint(0, num_src, (count,), generator=gen) if mean < 1 else \
        torch.arange(num_src).repeat_interleave(int(round(mean)))[:count]
    weight = _power_law_degrees(num_dst, 10.0, 2.2, gen).double()
    dst = torch.multinomial(weight, src.numel(), replacement=True, generator=gen)
    return torch.stack([src, dst])


def _add_reverse(data) -> None:
    for src, rel, dst in list(data.edge_types):
        if src != dst:
            data[dst, f"rev_{rel}", src].edge_index = data[src, rel, dst].edge_index.flip(0)


def mag_from_ogb(graph, split: dict):
    """ogbn-mag as OGB's ``PygNodePropPredDataset`` gives it (a ``Data`` of dicts)
    turned into a ``HeteroData`` with reverse relations. Only papers have features
    in ogbn-mag; each other type gets the mean of its neighbours' features (authors
    from their papers, institutions from their authors, fields from their papers),
    a common parameter-free start for this graph."""
    from torch_geometric.data import HeteroData
    from torch_geometric.utils import scatter

    from autotune.datasets import _masks_from_split

    data = HeteroData()
    for node_type, count in graph.num_nodes_dict.items():
        data[node_type].num_nodes = int(count)
    data["paper"].x = graph.x_dict["paper"].float()
    data["paper"].y = graph.y_dict["paper"].view(-1)
    for edge_type, edge_index in graph.edge_index_dict.items():
        data[edge_type].edge_index = edge_index
    for edge_type, side in ((("author", "writes", "paper"), 1),  # authors from papers
                            (("author", "affiliated_with", "institution"), 0),
                            (("paper", "has_topic", "field_of_study"), 0)):
        edge_index = data[edge_type].edge_index
        source, target = edge_type[-1 if side else 0], edge_type[0 if side else -1]
        data[target].x = scatter(data[source].x[edge_index[side]], edge_index[1 - side], dim=0,
                                 dim_size=data[target].num_nodes, reduce="mean")
    _add_reverse(data)
    _masks_from_split(data["paper"], {key: ids["paper"] for key, ids in split.items()})
    data[TARGET_ATTR] = "paper"
    return data


def target_type(data) -> str:
    """The node type a heterogeneous graph's labels are on: its ``target_node_type``,
    else the one node type holding both ``y`` and ``train_mask``."""
    if TARGET_ATTR in data:
        return data[TARGET_ATTR]
    labelled = [t for t in data.node_types if "y" in data[t] and "train_mask" in data[t]]
    if len(labelled) != 1:
        raise DatasetError("a heterogeneous dataset needs one node type with y and "
                           f"train_mask (got {labelled or 'none'}); or set "
                           f"data.{TARGET_ATTR}")
    return labelled[0]


def check_hetero(data, what: str) -> None:
    """Every node type needs features; the target type needs labels and masks."""
    target = target_type(data)
    bare = [t for t in data.node_types if "x" not in data[t]]
    if bare:
        raise DatasetError(f"{what} HeteroData whose node types {', '.join(bare)} have no "
                           "features x (every node type needs some)")
    missing = [k for k in ("y", "train_mask") if k not in data[target]]
    if missing:
        raise DatasetError(f"{what} HeteroData whose target type {target} lacks "
                           f"{', '.join(missing)}")


def link_split(data, seed: int):
    """``RandomLinkSplit`` of a homogeneous graph: 5% of the edges for validation and
    10% for test (with as many negatives each), the rest for training: 30% of those
    are the supervision edges, the other 70% the message-passing graph
    (:data:`DISJOINT_TRAIN`). An undirected graph is split by undirected edge.
    Deterministic per ``seed``."""
    import torch_geometric.transforms as T
    from torch_geometric.data import Data
    from torch_geometric.utils import is_undirected

    if "edge_index" not in data or data.edge_index.size(1) < 20:
        raise DatasetError("--task link needs a graph with edges to split (got "
                           f"{0 if 'edge_index' not in data else data.edge_index.size(1)})")
    undirected = is_undirected(data.edge_index, num_nodes=data.num_nodes)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        split = T.RandomLinkSplit(num_val=LINK_SPLIT[0], num_test=LINK_SPLIT[1],
                                  is_undirected=undirected, disjoint_train_ratio=DISJOINT_TRAIN,
                                  add_negative_train_samples=False)
        train, val, test = split(Data(x=data.x, edge_index=data.edge_index,
                                      num_nodes=data.num_nodes))
    finally:
        torch.random.set_rng_state(state)
    out = Data(x=data.x, edge_index=train.edge_index, num_nodes=data.num_nodes)
    out.train_edge_label_index = train.edge_label_index
    for name, part in (("val", val), ("test", test)):
        out[f"{name}_edge_label_index"] = part.edge_label_index
        out[f"{name}_edge_label"] = part.edge_label
    out.num_classes = 1
    return out
