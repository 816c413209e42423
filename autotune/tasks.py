"""What differs between the pipelines autotune builds: the task (node
classification, link prediction) and the graph (homogeneous, heterogeneous).

=====================  =====================================  ==========================
task                   loader, loss                           metric (guard, ``train``)
=====================  =====================================  ==========================
node, ``Data``         ``NodeLoader`` on the train mask,      accuracy
                       cross-entropy on the seeds
node, ``HeteroData``   ``NodeLoader`` on the target type's    accuracy on the target type
                       train mask; the model lifted with
                       ``to_hetero``
link, ``Data``         ``LinkLoader`` on the training edges,  ROC-AUC on the split's
                       one random negative per positive       edges and negatives
                       (binary); dot-product decoder, BCE
=====================  =====================================  ==========================

A step's seeds are the seed nodes (node tasks) or the positive supervision edges
(link): throughput is seed nodes/s or seed edges/s.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from autotune.errors import ConfigError

LINK_NEGATIVES = 1.0  # binary negatives per positive edge in training


class NodeTask:
    """Node classification on a homogeneous graph."""

    name, unit, metric = "node", "nodes", "accuracy"

    def loader(self, loader_cls, data, sampler, seeds_from, **kwargs):
        """The training loader over ``data`` (the GPU-resident view with
        ``gpu_sampling``), its seeds from ``seeds_from`` (the dataset itself)."""
        return loader_cls(data, node_sampler=sampler, input_nodes=seeds_from.train_mask,
                          **kwargs)

    def loss(self, pipe, batch) -> Tensor:
        out = pipe.model(batch.x, pipe.edges(batch))[:batch.batch_size]
        return F.cross_entropy(out.float(), batch.y[:batch.batch_size])

    def seeds(self, batch) -> int:
        return int(batch.batch_size)

    def evaluate(self, pipe, data, split: str) -> float:
        """Share of the split's nodes classified right, on subgraphs sampled with the
        config's fanout (as PyG's examples evaluate), in the config's autocast."""
        from torch_geometric.loader import NodeLoader

        loader = NodeLoader(pipe.loader.data, node_sampler=pipe.loader.node_sampler,
                            input_nodes=_mask(data, split), batch_size=pipe.config.batch_size,
                            transform=pipe.loader.transform)
        return _accuracy(pipe, loader, lambda batch: (
            pipe.eager_model(batch.x, pipe.edges(batch)), batch.y, batch.batch_size))


class HeteroNodeTask(NodeTask):
    """Node classification of a heterogeneous graph's target type."""

    def __init__(self, target: str) -> None:
        self.target = target

    def loader(self, loader_cls, data, sampler, seeds_from, **kwargs):
        return loader_cls(data, node_sampler=sampler,
                          input_nodes=(self.target, seeds_from[self.target].train_mask),
                          **kwargs)

    def loss(self, pipe, batch) -> Tensor:
        store = batch[self.target]
        out = pipe.model(batch.x_dict, batch.edge_index_dict)[self.target][:store.batch_size]
        return F.cross_entropy(out.float(), store.y[:store.batch_size])

    def seeds(self, batch) -> int:
        return int(batch[self.target].batch_size)

    def evaluate(self, pipe, data, split: str) -> float:
        from torch_geometric.loader import NodeLoader

        loader = NodeLoader(pipe.loader.data, node_sampler=pipe.loader.node_sampler,
                            input_nodes=(self.target, _mask(data[self.target], split)),
                            batch_size=pipe.config.batch_size, transform=pipe.loader.transform)

        def run(batch):
            store = batch[self.target]
            out = pipe.eager_model(batch.x_dict, batch.edge_index_dict)[self.target]
            return out, store.y, store.batch_size

        return _accuracy(pipe, loader, run)


class LinkTask:
    """Link prediction on a homogeneous graph's link split
    (:func:`autotune.graphs.link_split`): the model encodes nodes, a dot product of
    two embeddings scores an edge."""

    name, unit, metric = "link", "edges", "ROC-AUC"

    def loader(self, loader_cls, data, sampler, seeds_from, **kwargs):
        from torch_geometric.loader import LinkLoader
        from torch_geometric.sampler import NegativeSampling

        return LinkLoader(data, link_sampler=sampler,
                          edge_label_index=seeds_from.train_edge_label_index,
                          neg_sampling=NegativeSampling("binary", LINK_NEGATIVES), **kwargs)

    def loss(self, pipe, batch) -> Tensor:
        z = pipe.model(batch.x, pipe.edges(batch))
        return F.binary_cross_entropy_with_logits(score(z, batch.edge_label_index),
                                                  batch.edge_label.float())

    def seeds(self, batch) -> int:
        return int(batch.input_id.numel())

    @torch.no_grad()
    def evaluate(self, pipe, data, split: str) -> float:
        """ROC-AUC of the split's edges against its negatives, each scored on a
        subgraph sampled around its endpoints with the config's fanout."""
        from torch_geometric.loader import LinkLoader

        name = f"{split}_edge_label"
        if f"{name}_index" not in data:
            raise ConfigError(f"the dataset has no {name}_index; a link split has one")
        loader = LinkLoader(pipe.loader.data, link_sampler=pipe.loader.link_sampler,
                            edge_label_index=data[f"{name}_index"], edge_label=data[name],
                            batch_size=pipe.config.batch_size, transform=pipe.loader.transform)
        scores, labels = [], []
        model = pipe.eager_model
        model.eval()
        try:
            for batch in loader:
                batch = batch.to(pipe.device, non_blocking=True)
                with pipe.autocast():
                    z = model(batch.x, pipe.edges(batch))
                scores.append(score(z, batch.edge_label_index).float().cpu())
                labels.append(batch.edge_label.cpu())
        finally:
            model.train()
        return roc_auc(torch.cat(scores), torch.cat(labels))


def score(z: Tensor, pairs: Tensor) -> Tensor:
    """The dot-product decoder: one logit per ``(src, dst)`` column of ``pairs``."""
    return (z[pairs[0]] * z[pairs[1]]).sum(-1)


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve: the chance that a random positive scores above a
    random negative, ties counting half (the Mann-Whitney U statistic, mid-ranks)."""
    labels = labels.bool()
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        raise ConfigError(f"ROC-AUC needs positives and negatives (got {pos} and {neg})")
    order = torch.argsort(scores.double())
    sorted_scores = scores.double()[order]
    ranks = torch.empty(scores.numel(), dtype=torch.float64)
    _, inverse, counts = torch.unique_consecutive(sorted_scores, return_inverse=True,
                                                  return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    ranks[order] = (ends - (counts.double() - 1) / 2)[inverse]  # mid-rank of each tie run
    u = float(ranks[labels].sum()) - pos * (pos + 1) / 2
    return u / (pos * neg)


def _mask(store, split: str) -> Tensor:
    name = f"{split}_mask"
    if name not in store:
        raise ConfigError(f"the dataset has no {name}; accuracy needs one")
    return store[name]


@torch.no_grad()
def _accuracy(pipe, loader, run) -> float:
    model = pipe.eager_model
    model.eval()
    correct = total = 0
    try:
        for batch in loader:
            batch = batch.to(pipe.device, non_blocking=True)
            with pipe.autocast():
                out, y, size = run(batch)
            correct += int((out[:size].argmax(-1) == y[:size]).sum())
            total += int(size)
    finally:
        model.train()
    if total == 0:
        raise ConfigError("the evaluation mask selects no node")
    return correct / total


class HeteroEncoder(nn.Module):
    """The SAGE model of :class:`autotune.pipeline.SAGE` in a form ``to_hetero`` can
    trace: lazy input sizes (node types differ) and dropout as a module."""

    def __init__(self, hidden_channels: int, out_channels: int, num_layers: int,
                 dropout: float) -> None:
        from torch_geometric.nn import SAGEConv

        super().__init__()
        sizes = [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = nn.ModuleList(SAGEConv((-1, -1), size) for size in sizes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = self.dropout(x.relu())
        return x


def lift_to_hetero(model: nn.Module, data) -> nn.Module:
    """``to_hetero(model, data.metadata(), aggr="sum")``, its lazy sizes set by one
    forward pass over one node of each type."""
    from torch_geometric.nn import to_hetero

    try:
        hetero = to_hetero(model, data.metadata(), aggr="sum")
    except Exception as exc:  # torch.fx could not trace the model
        raise ConfigError(f"to_hetero could not lift the model ({type(exc).__name__}: "
                          f"{str(exc)[:160]}); a heterogeneous dataset needs a model that "
                          "torch.fx can trace") from exc
    x = {t: data[t].x[:1].float() for t in data.node_types}
    edges = {t: torch.empty(2, 0, dtype=torch.long) for t in data.edge_types}
    with torch.no_grad():
        hetero(x, edges)
    return hetero


def task_for(config, data):
    """The task a config's ``task`` and its dataset's graph call for."""
    from torch_geometric.data import HeteroData

    if isinstance(data, HeteroData):
        if config.task == "link":
            raise ConfigError("task 'link' needs a homogeneous graph (got a HeteroData); "
                              "use task node")
        from autotune.graphs import target_type

        return HeteroNodeTask(target_type(data))
    if config.task == "link":
        if "train_edge_label_index" not in data:
            raise ConfigError("task 'link' needs a link split of the graph (the dataset has "
                              "no train_edge_label_index); load it with task='link'")
        return LinkTask()
    return NodeTask()
