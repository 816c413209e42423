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
link, ``HeteroData``   the same on the supervised edge type   ROC-AUC on that type's
                       (``--link-edge-type``); the encoder    split
                       lifted with ``to_hetero``, the dot
                       product of a source-type and a
                       target-type embedding
graph, ``GraphSet``    PyG's ``DataLoader`` over the          accuracy on the split's
                       training graphs (whole graphs, no      graphs
                       sampler); a readout per graph,
                       cross-entropy on the graphs
=====================  =====================================  ==========================

A step's seeds are the seed nodes (node tasks), the positive supervision edges
(link) or the graphs (graph): throughput is seed nodes/s, seed edges/s or graphs/s.
"""
from __future__ import annotations

import abc
import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from autotune.config import MODELS, TrialConfig
from autotune.data import LINK_ATTR, GraphSet, link_edge_type, target_type
from autotune.errors import ConfigError, DatasetError
from autotune.pipeline._models import GraphClassifier, HeteroEncoder, lift_to_hetero, make_model
from autotune.sampling import GraphLoader, fanouts_per_edge_type, time_attribute
from autotune.taskinfo import TASKS, TaskInfo, task_info

LINK_NEGATIVES = 1.0  # binary negatives per positive edge in training
EVAL_BATCH = 1024  # a node task's seeds an evaluation batch, at least
# a node task evaluates the whole graph in one call where its first layer's messages
# fit in this (Cora: 60 MB; the quick start's synthetic graph, 4.8 GB, is sampled)
WHOLE_GRAPH_BYTES = 512 * 2**20


class Task(abc.ABC):
    """What the pipeline, the trial and the guard ask of a task, and all they ask: its
    row of :mod:`autotune.taskinfo` (``info``: unit, metric, traits), whether its
    graph is heterogeneous, whether its batches come from the neighbour sampler
    (``samples``) and how many seed nodes one batch item takes there. The defaults
    are a homogeneous graph's, sampled with the config's fanout."""

    info: TaskInfo
    hetero = False
    samples = True  # its batches come from the neighbour sampler
    seed_nodes_per_item = 1  # the sampler's seed nodes per batch item

    def check(self, config: TrialConfig) -> None:
        """The knobs this task (on this kind of graph) cannot take: a ConfigError."""
        if config.edge_fanouts:
            raise ConfigError("edge_fanouts names edge types of a heterogeneous graph (got a "
                              "homogeneous one); use num_neighbors")

    def fanouts(self, config: TrialConfig, data):
        """The sampler's ``num_neighbors``: the config's list."""
        return list(config.num_neighbors)

    @abc.abstractmethod
    def model(self, config: TrialConfig, data, num_classes: int | None) -> nn.Module:
        """The model the config describes, for this task's output."""

    @abc.abstractmethod
    def loader(self, loader_cls, data, graph_sampler, seeds_from, **kwargs):
        """The training loader over ``data``, its seeds from ``seeds_from``."""

    @abc.abstractmethod
    def loss(self, pipe, batch) -> Tensor:
        """A training step's loss on ``batch``."""

    @abc.abstractmethod
    def seeds(self, batch) -> int:
        """The batch's seeds: what its throughput counts."""

    @abc.abstractmethod
    def evaluate(self, pipe, data, split: str) -> float:
        """The task's metric (``info.metric``) on ``split``."""

    def evaluate_all(self, pipe, data, splits: tuple[str, ...]) -> list[float]:
        """The task's metric on each of ``splits``, in their order."""
        return [self.evaluate(pipe, data, split) for split in splits]


class NodeTask(Task):
    """Node classification on a homogeneous graph."""

    info = TASKS["node"]

    def model(self, config: TrialConfig, data, num_classes: int | None) -> nn.Module:
        """A classifier over the classes."""
        classes = num_classes if num_classes is not None else int(data.y.max()) + 1
        return make_model(config, data.num_features, classes)

    def loader(self, loader_cls, data, graph_sampler, seeds_from, **kwargs):
        """The training loader over ``data`` (the GPU-resident view with
        ``gpu_sampling``), its seeds from ``seeds_from`` (the dataset itself)."""
        return loader_cls(data, node_sampler=graph_sampler, input_nodes=seeds_from.train_mask,
                          **kwargs)

    def loss(self, pipe, batch) -> Tensor:
        out = pipe.model(batch.x, pipe.edges(batch))[:batch.batch_size]
        return F.cross_entropy(out.float(), batch.y[:batch.batch_size])

    def seeds(self, batch) -> int:
        return int(batch.batch_size)

    def evaluate(self, pipe, data, split: str) -> float:
        """Share of the split's nodes classified right, in the config's autocast: on
        the whole graph in one call where it fits (:func:`whole_graph_fits`: every
        node's whole neighbourhood, what PyG's examples' layer-wise inference gives),
        else on subgraphs sampled with the config's fanout (as PyG's examples
        evaluate a large graph), in batches of the training's size or
        :data:`EVAL_BATCH`, the larger (a small training batch, Cora's 16, would make
        evaluating an epoch cost several times its training)."""
        if whole_graph_fits(pipe.config, data):
            return _whole_graph_accuracies(pipe, data, (split,))[0]
        from torch_geometric.loader import NodeLoader

        loader = NodeLoader(pipe.loader.data, node_sampler=pipe.loader.node_sampler,
                            input_nodes=_mask(data, split),
                            batch_size=max(pipe.config.batch_size, EVAL_BATCH),
                            transform=pipe.loader.transform)
        return _accuracy(pipe, loader, lambda batch: (
            pipe.eager_model(batch.x, pipe.edges(batch)), batch.y, batch.batch_size))

    def evaluate_all(self, pipe, data, splits: tuple[str, ...]) -> list[float]:
        """Each split's accuracy; where the graph is evaluated whole
        (:func:`whole_graph_fits`), from one forward over it for all of them."""
        if not whole_graph_fits(pipe.config, data):
            return super().evaluate_all(pipe, data, splits)
        return _whole_graph_accuracies(pipe, data, splits)


def whole_graph_fits(config: TrialConfig, data) -> bool:
    """Whether a homogeneous graph is evaluated whole: where its first layer's
    messages (an edge's row of the wider of the features and the hidden channels,
    float32, a row each edge) and every node's rows fit in :data:`WHOLE_GRAPH_BYTES`,
    and its sampling is not temporal (a seed sees only its past neighbours there).
    A heterogeneous graph never is (its task evaluates it sampled)."""
    from torch_geometric.data import HeteroData

    if isinstance(data, HeteroData) or config.time_attr is not None or \
            "edge_index" not in data or data.x is None:
        return False
    width = max(data.num_features, config.hidden_channels)
    rows = data.edge_index.size(1) * width + data.num_nodes * (width + config.hidden_channels)
    return 4 * rows <= WHOLE_GRAPH_BYTES


class HeteroGraph:
    """What a task on a heterogeneous graph shares, whatever it predicts: the knobs it
    refuses and a fanout per edge type. Mixed in before the task's class."""

    hetero = True

    def check(self, config: TrialConfig) -> None:
        if config.model in ("gcn", "gat"):
            raise ConfigError(f"model {config.model} does not take the bipartite edge types of "
                              "a heterogeneous graph; use model sage or your own factory")
        if config.aggregation == "sparse":
            raise ConfigError("aggregation 'sparse' builds one homogeneous adjacency per batch "
                              "(got a heterogeneous graph); use aggregation scatter")
        if config.dropout_masks == "bits":
            raise ConfigError("dropout_masks 'bits' is not traced by to_hetero, which lifts "
                              "the model to a heterogeneous graph (got one); use "
                              "dropout_masks bernoulli")

    def fanouts(self, config: TrialConfig, data):
        """A dict with the config's list for every edge type but those
        ``edge_fanouts`` names (an edge type it names that the graph lacks is a
        ConfigError from the sampler)."""
        out = {"__".join(t): list(config.num_neighbors) for t in data.edge_types}
        out.update({k: list(v) for k, v in (config.edge_fanouts or {}).items()})
        return out


class HeteroNodeTask(HeteroGraph, NodeTask):
    """Node classification of a heterogeneous graph's target type."""

    def __init__(self, target: str) -> None:
        self.target = target

    def model(self, config: TrialConfig, data, num_classes: int | None) -> nn.Module:
        """The classifier lifted with ``to_hetero`` (the built-in SAGE in the form it
        can trace, or the user's factory with lazy input sizes)."""
        store = data[self.target]
        classes = num_classes if num_classes is not None else int(store.y.max()) + 1
        if config.model in MODELS:
            base = HeteroEncoder(config.hidden_channels, classes, config.num_layers,
                                 config.dropout)
        else:
            base = make_model(config, -1, classes)
        return lift_to_hetero(base, data)

    def loader(self, loader_cls, data, graph_sampler, seeds_from, **kwargs):
        return loader_cls(data, node_sampler=graph_sampler,
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


class LinkTask(Task):
    """Link prediction on a homogeneous graph's link split
    (:func:`autotune.data._splits.link_split`): the model encodes nodes, a dot product of
    two embeddings scores an edge."""

    info = TASKS["link"]
    # an edge's two ends, and its negative's (LINK_NEGATIVES per positive), at most
    seed_nodes_per_item = int(2 * (1 + LINK_NEGATIVES))

    def model(self, config: TrialConfig, data, num_classes: int | None) -> nn.Module:
        """An encoder into ``hidden_channels`` (the dot-product decoder has no weights)."""
        return make_model(config, data.num_features, config.hidden_channels)

    def loader(self, loader_cls, data, graph_sampler, seeds_from, **kwargs):
        from torch_geometric.loader import LinkLoader
        from torch_geometric.sampler import NegativeSampling

        return LinkLoader(data, link_sampler=graph_sampler,
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
        return _link_auc(pipe, loader, lambda model, batch: score(
            model(batch.x, pipe.edges(batch)), batch.edge_label_index),
            lambda batch: batch.edge_label)


class HeteroLinkTask(HeteroGraph, LinkTask):
    """Link prediction of one edge type ``(src, rel, dst)`` of a heterogeneous graph's
    link split (:func:`autotune.data._splits.hetero_link_split`)."""

    def __init__(self, edge_type: tuple[str, str, str]) -> None:
        self.edge_type = edge_type

    def model(self, config: TrialConfig, data, num_classes: int | None) -> nn.Module:
        """The encoder into ``hidden_channels``, lifted with ``to_hetero``."""
        if config.model in MODELS:
            base = HeteroEncoder(config.hidden_channels, config.hidden_channels,
                                 config.num_layers, config.dropout)
        else:
            base = make_model(config, -1, config.hidden_channels)
        return lift_to_hetero(base, data)

    def loader(self, loader_cls, data, graph_sampler, seeds_from, **kwargs):
        from torch_geometric.loader import LinkLoader
        from torch_geometric.sampler import NegativeSampling

        index = (self.edge_type, seeds_from[self.edge_type].train_edge_label_index)
        return LinkLoader(data, link_sampler=graph_sampler, edge_label_index=index,
                          neg_sampling=NegativeSampling("binary", LINK_NEGATIVES), **kwargs)

    def _scores(self, model, batch) -> Tensor:
        z = model(batch.x_dict, batch.edge_index_dict)
        pairs = batch[self.edge_type].edge_label_index
        src, dst = z[self.edge_type[0]], z[self.edge_type[-1]]
        return (src[pairs[0]] * dst[pairs[1]]).sum(-1)

    def loss(self, pipe, batch) -> Tensor:
        return F.binary_cross_entropy_with_logits(
            self._scores(pipe.model, batch), batch[self.edge_type].edge_label.float())

    def seeds(self, batch) -> int:
        return int(batch[self.edge_type].input_id.numel())

    @torch.no_grad()
    def evaluate(self, pipe, data, split: str) -> float:
        from torch_geometric.loader import LinkLoader

        store, name = data[self.edge_type], f"{split}_edge_label"
        if f"{name}_index" not in store:
            raise ConfigError(f"the dataset's {'__'.join(self.edge_type)} has no "
                              f"{name}_index; a link split has one")
        loader = LinkLoader(pipe.loader.data, link_sampler=pipe.loader.link_sampler,
                            edge_label_index=(self.edge_type, store[f"{name}_index"]),
                            edge_label=store[name], batch_size=pipe.config.batch_size,
                            transform=pipe.loader.transform)
        return _link_auc(pipe, loader, self._scores,
                         lambda batch: batch[self.edge_type].edge_label)


class GraphTask(Task):
    """Graph classification (:mod:`autotune.data._graphsets`): batches of whole graphs from
    PyG's ``DataLoader``, a model that returns one row per graph. A user's factory
    is called as ``forward(x, edge_index, batch)``, with ``edge_attr=`` too when its
    forward takes an ``edge_attr`` argument."""

    info = TASKS["graph"]
    samples = False

    def check(self, config: TrialConfig) -> None:
        _no_gpu_sampling(config, "task graph")
        if config.feature_dtype != "float32":
            raise ConfigError(f"feature_dtype {config.feature_dtype} is how a sampled batch's "
                              "features are stored and gathered (got task graph, whose "
                              "batches are whole graphs); use feature_dtype float32")
        if config.edge_fanouts:
            raise ConfigError("edge_fanouts names edge types of a heterogeneous graph (got a "
                              "graph-level dataset); leave it out")

    def fanouts(self, config: TrialConfig, data):
        return []  # whole graphs: nothing is sampled

    def model(self, config: TrialConfig, data, num_classes: int | None) -> nn.Module:
        classes = num_classes if num_classes is not None else data.num_classes
        if config.model in MODELS:
            return GraphClassifier(config, data.num_features, classes)
        return make_model(config, data.num_features, classes)

    def loader(self, loader_cls, data, graph_sampler, seeds_from, **kwargs):
        return GraphLoader(data.split("train"), **kwargs)

    def _forward(self, pipe, model, batch) -> tuple[Tensor, int]:
        """The model's rows for the batch's real graphs, and how many there are."""
        graphs = int(getattr(batch, "num_real_graphs", batch.num_graphs))
        kwargs = {}
        if isinstance(model, GraphClassifier) or isinstance(
                getattr(model, "_orig_mod", None), GraphClassifier):
            kwargs["num_graphs"] = graphs + ("num_real_graphs" in batch)
        elif _takes_edge_attr(model):
            kwargs["edge_attr"] = batch.edge_attr
        out = model(batch.x, pipe.edges(batch), batch.batch, **kwargs)
        return out[:graphs], graphs

    def loss(self, pipe, batch) -> Tensor:
        out, graphs = self._forward(pipe, pipe.model, batch)
        return F.cross_entropy(out.float(), batch.y[:graphs])

    def seeds(self, batch) -> int:
        return int(getattr(batch, "num_real_graphs", batch.num_graphs))

    def evaluate(self, pipe, data, split: str) -> float:
        """Share of the split's graphs classified right, in the config's autocast."""
        if f"{split}_mask" not in data:
            raise ConfigError(f"the dataset has no {split}_mask; accuracy needs one")
        loader = GraphLoader(data.split(split), batch_size=pipe.config.batch_size,
                             transform=pipe.loader.transform)

        def run(batch):
            out, graphs = self._forward(pipe, pipe.eager_model, batch)
            return out, batch.y, graphs

        return _accuracy(pipe, loader, run)


def _takes_edge_attr(model: nn.Module) -> bool:
    import inspect

    forward = getattr(model, "_orig_mod", model).forward
    return "edge_attr" in inspect.signature(forward).parameters


def _link_auc(pipe, loader, scores_of, labels_of) -> float:
    """ROC-AUC over a link loader's batches: ``scores_of(model, batch)`` in the config's
    autocast, ``labels_of(batch)`` the batch's 1/0 labels."""
    scores, labels = [], []
    model = pipe.eager_model
    model.eval()
    try:
        for batch in loader:
            batch = batch.to(pipe.device, non_blocking=True)
            with pipe.autocast():
                scores.append(scores_of(model, batch).float().cpu())
            labels.append(labels_of(batch).cpu())
    finally:
        model.train()
    return roc_auc(torch.cat(scores), torch.cat(labels))


def _no_gpu_sampling(config: TrialConfig, got: str) -> None:
    if config.gpu_sampling:
        raise ConfigError("gpu_sampling samples node and link batches on the GPU (got "
                          f"{got}, whose batches are whole graphs); use gpu_sampling false")


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


def _whole_graph_accuracies(pipe, data, splits: tuple[str, ...]) -> list[float]:
    """Each split's accuracy from one forward over the whole graph, the graph its
    one batch."""
    graph = data.to(pipe.device, non_blocking=True)
    with _evaluating(pipe) as model:
        logits = model(graph.x, graph.edge_index)
    return [_share_right(logits[mask], graph.y[mask])
            for mask in (_mask(graph, split) for split in splits)]


def _share_right(out: Tensor, y: Tensor) -> float:
    """The share of rows of ``out`` whose arg-max is their ``y``; an empty split is
    an error, not a score."""
    if not len(y):
        raise ConfigError("the evaluation mask selects no node")
    return int((out.argmax(-1) == y).sum()) / len(y)


@contextlib.contextmanager
def _evaluating(pipe) -> Iterator[nn.Module]:
    """The eager model in eval mode, without gradients, in the config's autocast;
    back in training mode after."""
    model = pipe.eager_model
    model.eval()
    try:
        with torch.no_grad(), pipe.autocast():
            yield model
    finally:
        model.train()


def _accuracy(pipe, loader, run) -> float:
    """The share right over ``loader``'s batches, each through ``run`` (its logits,
    labels and seeds)."""
    correct = total = 0
    with _evaluating(pipe):
        for batch in loader:
            out, y, size = run(batch.to(pipe.device, non_blocking=True))
            correct += int((out[:size].argmax(-1) == y[:size]).sum())
            total += int(size)
    if total == 0:
        raise ConfigError("the evaluation mask selects no node")
    return correct / total


def check_dataset(config: TrialConfig, dataset) -> None:
    """What ``config`` asks of a prepared dataset, checked before any trial starts:
    the task fits the graph, the model and knobs fit the task, there are training
    seeds, every edge type the fanouts name exists, and a user's model factory
    builds a model for it (one that raises is a ``UserCodeError``)."""
    task = task_for(config, dataset.data)
    task.check(config)
    info = task_info(config)
    if config.time_attr is not None:
        _check_time(config, dataset)
    if not dataset.num_train:
        raise DatasetError(f"dataset {dataset.name} has no training {info.seeds} (its "
                           f"{info.seeds_attr} selects none): a trial would have nothing to "
                           f"train on; give it a non-empty {info.seeds_attr}")
    if task.hetero:
        fanouts_per_edge_type(task.fanouts(config, dataset.data), dataset.data.edge_types)
    elif config.model not in MODELS:  # a user's factory builds here, before any trial
        task.model(config, dataset.data, dataset.num_classes)


def _check_time(config: TrialConfig, dataset) -> None:
    """A search's temporal sampling needs node-level times: each seed trains at its
    own node's time (edge-level times need seed times the dataset does not give)."""
    try:
        node, _ = time_attribute(dataset.data, config.time_attr)
    except ValueError as exc:
        raise DatasetError(f"--time-attr (time_attr=): {exc}") from None
    if not node:
        raise DatasetError(f"--time-attr '{config.time_attr}' is an edge attribute of "
                           f"dataset {dataset.name}; a search needs a node attribute (each "
                           "seed trains at its own node's time)")


def task_for(config, data):
    """The task object a config's ``task`` and its dataset's graph call for: the one
    place a task's name picks its code."""
    from torch_geometric.data import HeteroData

    info = task_info(config)
    if isinstance(data, GraphSet) != info.whole_graphs:
        raise ConfigError(f"task {info.name!r} does not fit the dataset (got " + (
            "a graph-level dataset of many small graphs); use task graph" if
            isinstance(data, GraphSet) else "one graph); task graph needs many small "
            "graphs: synthetic-molecules, a TU-format folder or a function returning an "
            "InMemoryDataset"))
    if info.whole_graphs:
        return GraphTask()
    if isinstance(data, HeteroData):
        if info.split:
            if LINK_ATTR not in data:
                raise ConfigError(f"task {info.name!r} on a HeteroData trains on its link "
                                  f"split; load it with task={info.name!r} and an edge type")
            return HeteroLinkTask(link_edge_type(data))
        if LINK_ATTR in data:
            raise ConfigError(f"task {info.name!r} needs labelled nodes (got a link split "
                              f"of {data[LINK_ATTR]}); use task link")
        return HeteroNodeTask(target_type(data))
    if info.seeds_attr not in data:
        raise ConfigError(f"task {info.name!r} needs a dataset with {info.seeds_attr} (got "
                          f"none); load it with task={info.name!r}")
    return _BY_NAME[info.name]()


_BY_NAME = {cls.info.name: cls for cls in (NodeTask, LinkTask, GraphTask)}  # a Data's task, by name
