"""Heterogeneous and link-prediction datasets: ogbn-mag as a ``HeteroData``, the
target type of a heterogeneous graph, masks from an OGB split, and a link split of
any homogeneous graph. The mag-shaped generator is in :mod:`autotune.data._synthetic`.
"""
from __future__ import annotations

import torch
from torch import Tensor

from autotune.errors import DatasetError

TARGET_ATTR = "target_node_type"  # a HeteroData's global attribute naming its target type
LINK_ATTR = "link_edge_type"  # a split HeteroData's global attribute: its supervised type
LINK_SPLIT = (0.05, 0.10)  # validation and test shares of the edges, RandomLinkSplit's
# the share of training edges used for supervision only, not for message passing
# (RandomLinkSplit's disjoint_train_ratio): a model that sees the very edge it must
# score learns to spot that edge, and a held-out edge is never in its subgraph
DISJOINT_TRAIN = 0.3


def add_reverse(data) -> None:
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
    add_reverse(data)
    masks_from_split(data["paper"], {key: ids["paper"] for key, ids in split.items()})
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


def masks_from_split(data, split: dict) -> None:
    for name, mask in split_masks(data.num_nodes, split["train"], split["valid"],
                                  split["test"]).items():
        data[name] = mask


def split_masks(count: int, train: Tensor, val: Tensor, test: Tensor) -> dict[str, Tensor]:
    """``train_mask``, ``val_mask`` and ``test_mask`` over ``count`` items, each
    selecting the given ids: one split, whether nodes or whole graphs."""
    out = {}
    for name, ids in (("train", train), ("val", val), ("test", test)):
        mask = torch.zeros(count, dtype=torch.bool)
        mask[ids] = True
        out[f"{name}_mask"] = mask
    return out


def edge_type_named(data, name: str | None) -> tuple[str, str, str]:
    """The edge type ``name`` picks on a heterogeneous graph: ``src__rel__dst`` or a
    relation name that one edge type has."""
    names = ["__".join(t) for t in data.edge_types]
    if name is None:
        raise DatasetError("--task link on a heterogeneous graph needs the edge type to "
                           "predict: --link-edge-type (link_edge_type=), one of "
                           f"{', '.join(names)}")
    by_rel = [t for t in data.edge_types if t[1] == name]
    if name in names:
        return data.edge_types[names.index(name)]
    if len(by_rel) == 1:
        return by_rel[0]
    raise DatasetError(f"--link-edge-type {name!r} is not an edge type of the graph; its edge "
                       f"types: {', '.join(names)}")


def link_edge_type(data) -> tuple[str, str, str]:
    """The supervised edge type of a heterogeneous link split."""
    return tuple(data[LINK_ATTR].split("__"))


def hetero_link_split(data, seed: int, edge_type: tuple[str, str, str]):
    """:func:`link_split` for one edge type of a heterogeneous graph: ``RandomLinkSplit``
    with ``edge_types`` and, where the graph has it, the reverse type
    (``rev_<rel>``, :func:`add_reverse`) in ``rev_edge_types``, so a held-out edge
    leaves both directions of the message-passing graph. The split lands on the edge
    type's store (``train_edge_label_index``, ``val_edge_label_index``, ...) and
    :data:`LINK_ATTR` names it."""
    import torch_geometric.transforms as T

    src, rel, dst = edge_type
    if data[edge_type].edge_index.size(1) < 20:
        raise DatasetError(f"--task link needs edges of {src}__{rel}__{dst} to split (got "
                           f"{data[edge_type].edge_index.size(1)})")
    reverse = (dst, f"rev_{rel}", src)
    base = _skeleton(data, {et: data[et].edge_index for et in data.edge_types})
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        split = T.RandomLinkSplit(num_val=LINK_SPLIT[0], num_test=LINK_SPLIT[1],
                                  disjoint_train_ratio=DISJOINT_TRAIN,
                                  add_negative_train_samples=False, edge_types=[edge_type],
                                  rev_edge_types=[reverse] if reverse in data.edge_types
                                  else None)
        train, val, test = split(base)
    finally:
        torch.random.set_rng_state(state)
    out = _skeleton(data, {et: train[et].edge_index for et in data.edge_types})
    out[edge_type].train_edge_label_index = train[edge_type].edge_label_index
    for name, part in (("val", val), ("test", test)):
        out[edge_type][f"{name}_edge_label_index"] = part[edge_type].edge_label_index
        out[edge_type][f"{name}_edge_label"] = part[edge_type].edge_label
    out[LINK_ATTR] = "__".join(edge_type)
    out.num_classes = 1
    return out


def _skeleton(data, edges: dict):
    """A HeteroData with ``data``'s node features and counts and the given edges only
    (no labels or masks: a link split does not use them)."""
    out = data.__class__()
    for node_type in data.node_types:
        out[node_type].x = data[node_type].x
        out[node_type].num_nodes = data[node_type].num_nodes
    for edge_type, edge_index in edges.items():
        out[edge_type].edge_index = edge_index
    return out
