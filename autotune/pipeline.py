"""Builds a PyG training pipeline from a ``TrialConfig``: every knob takes effect here.

=================  ===============================================================
knob               where it acts
=================  ===============================================================
batch_size         ``NodeLoader(batch_size=...)``
num_neighbors      the sampler's fanout
sampler            :func:`autotune.sampler.make_sampler` (builtin, pyg, auto)
gpu_sampling       CSR, features and sampling on the GPU (the Triton sampler, one batch
                   ahead: :class:`autotune.loader.LookaheadNodeLoader`), no workers
                   (CUDA only); otherwise CPU sampling with pinned, non-blocking
                   copies on CUDA
model              :func:`make_model`: sage (default), gcn, gat, or a user's
                   factory by import path
num_workers        ``NodeLoader(num_workers=..., persistent_workers=True)``
prefetch_factor    ``NodeLoader(prefetch_factor=...)`` when workers are used
loader_cores       ``NodeLoader.enable_cpu_affinity(loader_cores=...)``
compute_cores      ``os.sched_setaffinity`` + ``torch.set_num_threads``
compile_mode       ``torch.compile(model, mode=..., dynamic=shapes == "dynamic")``
shapes/pad_ladder  :class:`PadToBucket`, a loader transform
amp_dtype          ``torch.autocast`` (+ ``GradScaler`` for float16)
checkpointing      :class:`CheckpointedConv` around every MessagePassing layer
aggregation        :meth:`Pipeline.edges`: ``edge_index`` (scatter) or a CSR ``adj_t``
                   (a sparse matrix product), built per batch on its device
edge_fanouts       the sampler's fanout of named edge types (heterogeneous graphs)
task               :mod:`autotune.tasks`: node classification (``Data`` or
                   ``HeteroData``, the model lifted by ``to_hetero``) or link prediction
=================  ===============================================================

The trial worker and a user's own training loop (``autotune.build``) use this
same code, so what was measured is what trains.
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from autotune.config import GAT_HEADS, TrialConfig
from autotune.env import check_cores
from autotune.errors import ConfigError, DeviceMemoryError
from autotune.sampler import make_sampler, resolve_backend
from autotune.tasks import HeteroEncoder, HeteroNodeTask, lift_to_hetero, task_for

GEOMETRIC_STEP = 1.25
MIN_BUCKET = 64
GPU_HEADROOM = 0.10  # of the GPU's memory, kept for the model, its batches and the allocator


class GNN(nn.Module):
    """A stack of conv layers with ReLU and dropout between them, as in PyG's
    examples/reddit.py. Subclasses say which conv each layer is."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5) -> None:
        super().__init__()
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        last = len(sizes) - 2
        self.convs = nn.ModuleList(self.conv(a, b, i == last)
                                   for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])))
        self.dropout = dropout

    def conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        raise NotImplementedError

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, _in_dtype_of(edge_index, x))
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), p=self.dropout, training=self.training)
        return x


def _in_dtype_of(edges: Tensor, x: Tensor) -> Tensor:
    """A sparse adjacency (``aggregation: sparse``) with ``x``'s dtype: under autocast
    the second layer's input is bfloat16 while the adjacency holds float32 ones, which
    torch.sparse refuses to multiply. ``edge_index`` passes through."""
    if edges.layout == torch.strided or edges.dtype == x.dtype:
        return edges
    return edges.to(x.dtype)


class SAGE(GNN):
    """GraphSAGE with mean aggregation (PyG's examples/reddit.py, the default)."""

    def conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        from torch_geometric.nn import SAGEConv

        return SAGEConv(in_channels, out_channels)


def sparse_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """The batch's ``adj_t`` as a torch CSR matrix (row ``i`` holds the sources of
    ``i``'s in-edges, ones as values), which PyG's layers aggregate with a sparse
    matrix product instead of a scatter. Built on ``edge_index``'s device with no host
    sync: a stable sort by target and a ``searchsorted`` for the row pointers."""
    src, dst = edge_index
    dst_sorted, perm = torch.sort(dst, stable=True)
    crow = torch.searchsorted(dst_sorted, torch.arange(num_nodes + 1, device=dst.device))
    values = torch.ones(src.numel(), device=src.device)
    return torch.sparse_csr_tensor(crow, src[perm], values, size=(num_nodes, num_nodes))


class GCN(GNN):
    """GCN (Kipf and Welling) with self-loops and symmetric normalisation."""

    def conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        return GCNLayer(in_channels, out_channels)


class GCNLayer(nn.Module):
    """``GCNConv`` that stays in the autocast dtype. GCNConv builds its normalisation
    weights in its input's dtype and adds a float32 bias, so under bfloat16 autocast
    its output came back as float32 although its linear layer ran in bfloat16. Here
    the input is cast to the autocast dtype and the bias is added in it, as autocast
    does for a linear layer's bias."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv = GCNConv(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        device = x.device.type
        if torch.is_autocast_enabled(device):
            x = x.to(torch.get_autocast_dtype(device))
        out = self.conv(x, edge_index)
        return out + self.bias.to(out.dtype)


class GAT(GNN):
    """GAT with ``GAT_HEADS`` concatenated heads per hidden layer (hidden_channels is
    split over them) and one head in the output layer. Under autocast its linear
    layers run in the autocast dtype; its attention and messages stay float32 (the
    attention vectors are float32 parameters), which the trial's probe reports."""

    def conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        from torch_geometric.nn import GATConv

        if last:
            return GATConv(in_channels, out_channels, heads=1)
        return GATConv(in_channels, out_channels // GAT_HEADS, heads=GAT_HEADS)


MODELS = {"sage": SAGE, "gcn": GCN, "gat": GAT}


class CheckpointedConv(nn.Module):
    """Recomputes a message-passing layer's activations in the backward pass instead
    of storing them. Any call signature passes through (``x, edge_index``, edge
    attributes, ...)."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, *args, **kwargs):
        if not torch.is_grad_enabled():
            return self.conv(*args, **kwargs)
        return torch.utils.checkpoint.checkpoint(self.conv, *args, use_reentrant=False,
                                                 **kwargs)


def apply_checkpointing(model: nn.Module) -> int:
    """Wraps every outermost ``MessagePassing`` submodule of ``model``, wherever it
    sits (a ModuleList, an attribute, a nested block); returns how many."""
    from torch_geometric.nn import MessagePassing

    wrapped = 0
    for parent in list(model.modules()):
        if isinstance(parent, (MessagePassing, CheckpointedConv)):
            continue  # a layer's own message-passing parts recompute with it
        for name, child in list(parent.named_children()):
            if isinstance(child, MessagePassing):
                setattr(parent, name, CheckpointedConv(child))
                wrapped += 1
    if isinstance(model, MessagePassing):
        raise ConfigError("checkpointing wraps the message-passing layers inside a model; "
                          f"the model is itself one ({type(model).__name__}): wrap it in an "
                          "nn.Module")
    if wrapped == 0 and not any(isinstance(m, CheckpointedConv) for m in model.modules()):
        raise ConfigError("checkpointing needs a model with MessagePassing layers "
                          f"(got {type(model).__name__} with none)")
    return sum(isinstance(m, CheckpointedConv) for m in model.modules())


def make_model(config: TrialConfig, in_channels: int, out_channels: int) -> nn.Module:
    """The model ``config.model`` names: a built-in (sage, gcn, gat) or a user's
    factory ``(in_channels, out_channels, config) -> nn.Module`` by import path."""
    if config.model in MODELS:
        return MODELS[config.model](in_channels, config.hidden_channels, out_channels,
                                    config.num_layers, config.dropout)
    from autotune.imports import import_object

    factory = import_object(config.model, what="model factory", option="--model (model=)")
    model = factory(in_channels, out_channels, config)
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model factory {config.model!r} returned a "
                          f"{type(model).__name__}; it must return a torch.nn.Module")
    return model


def bucket(n: int, ladder: str) -> int:
    """The smallest rung of the ladder that holds ``n``: powers of two, or a
    geometric ladder with ratio 1.25 starting at 64."""
    if n <= MIN_BUCKET:
        return MIN_BUCKET
    if ladder == "pow2":
        return 1 << math.ceil(math.log2(n))
    rung = MIN_BUCKET
    while rung < n:
        rung = math.ceil(rung * GEOMETRIC_STEP)
    return rung


class PadToBucket:
    """Pads a sampled subgraph's node and edge counts up to a bucket ladder, so a
    compiled model sees few distinct shapes. Padding nodes have zero features and
    only padding edges (among themselves) point at them, so real nodes' outputs,
    the loss over the seeds and the gradients equal the unpadded ones."""

    def __init__(self, ladder: str) -> None:
        self.ladder = ladder

    def __call__(self, batch):
        from torch_geometric.data import HeteroData

        if isinstance(batch, HeteroData):
            return self._hetero(batch)
        n, e = batch.num_nodes, batch.edge_index.size(1)
        self._pad_nodes(batch, n)
        batch.edge_index = self._pad_edges(batch.edge_index, n, n)
        batch.num_real_nodes, batch.num_real_edges = n, e
        return batch

    def _pad_nodes(self, store, n: int) -> None:
        n_pad = bucket(n + 1, self.ladder) - n  # at least one padding node
        store.x = torch.cat([store.x, store.x.new_zeros(n_pad, store.x.size(1))])
        if "y" in store:
            store.y = torch.cat([store.y, store.y.new_zeros(n_pad)])
        store.num_nodes = n + n_pad

    def _pad_edges(self, edge_index: Tensor, src_pad: int, dst_pad: int) -> Tensor:
        e = edge_index.size(1)
        pad = torch.tensor([[src_pad], [dst_pad]], dtype=edge_index.dtype,
                           device=edge_index.device).expand(2, bucket(e, self.ladder) - e)
        return torch.cat([edge_index, pad], dim=1)

    def _hetero(self, batch):
        """Per node type: each type's nodes padded to its own bucket, each edge type's
        padding edges joining its source type's first padding node to its target's."""
        real = {t: int(batch[t].num_nodes) for t in batch.node_types}
        edges = 0
        for edge_type in batch.edge_types:
            store = batch[edge_type]
            edges += store.edge_index.size(1)
            store.edge_index = self._pad_edges(store.edge_index, real[edge_type[0]],
                                               real[edge_type[-1]])
        for node_type, n in real.items():
            self._pad_nodes(batch[node_type], n)
        batch.num_real_nodes, batch.num_real_edges = sum(real.values()), edges
        return batch


def amp_supported(device: str, dtype: str) -> bool:
    """Whether autocast to ``dtype`` runs on ``device`` with this build of torch."""
    if dtype == "float32":
        return True
    torch_dtype = getattr(torch, dtype)
    try:
        if not torch.amp.is_autocast_available(device):
            return False
        with torch.autocast(device_type=device, dtype=torch_dtype):
            out = torch.nn.functional.linear(torch.ones(2, 2, device=device),
                                             torch.ones(2, 2, device=device))
        return out.dtype == torch_dtype
    except RuntimeError:
        return False


def check_config(config: TrialConfig) -> None:
    """Checks what depends on this machine: cores, device, dtype, sampler backend."""
    check_cores("loader_cores", config.loader_cores)
    check_cores("compute_cores", config.compute_cores)
    cores = len(os.sched_getaffinity(0))
    if config.num_workers > cores:
        raise ConfigError(f"num_workers {config.num_workers} exceeds the {cores} cores "
                          f"available; use at most {cores}")
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for but torch sees no CUDA device "
                          "(got torch " + torch.__version__ + "); use device cpu")
    if config.device == "cpu" and config.compile_mode == "reduce-overhead":
        raise ConfigError("compile_mode reduce-overhead captures CUDA graphs and does nothing "
                          "more on cpu; use compile_mode default")
    if not amp_supported(config.device, config.amp_dtype):
        raise ConfigError(f"amp_dtype {config.amp_dtype} is not supported on "
                          f"{config.device} by this torch build; use bfloat16 or float32")
    resolve_backend(config.sampler)


def gpu_resident_bytes(data) -> dict[str, int]:
    """What ``gpu_sampling`` puts on the GPU before the first batch, from sizes alone:
    the CSC (colptr, row, and the edge permutation, counted even when the edges are
    already in CSC order), features, labels and the sampler's two id maps."""
    n, e = int(data.num_nodes), int(data.edge_index.size(1))
    return {"graph (CSC)": (n + 1) * 8 + 2 * e * 8,
            "features": data.x.numel() * data.x.element_size(),
            "labels": data.y.numel() * data.y.element_size(),
            "sampler maps": 2 * (n + 1) * 8}


def check_gpu_fit(need: dict[str, int], free: int, total: int) -> None:
    """Fails fast, before anything is built, when the GPU-resident graph would not
    leave :data:`GPU_HEADROOM` of the device free."""
    from autotune.env import format_bytes

    room = free - int(GPU_HEADROOM * total)
    if sum(need.values()) <= room:
        return
    parts = ", ".join(f"{name} {format_bytes(size)}" for name, size in need.items())
    raise DeviceMemoryError(
        f"gpu_sampling needs {format_bytes(sum(need.values()))} on the GPU ({parts}) and "
        f"{format_bytes(max(room, 0))} is free beyond a {100 * GPU_HEADROOM:g}% headroom "
        f"({format_bytes(free)} of {format_bytes(total)} free); use gpu_sampling false, "
        "which samples on the CPU and copies each batch")


def worker_core_sets(loader_cores: tuple[int, ...], num_workers: int) -> list[list[int]]:
    """Deals a loader core set out to workers: worker i gets cores i, i + w, ...; with
    fewer cores than workers, workers share cores round-robin."""
    if len(loader_cores) >= num_workers:
        return [list(loader_cores[i::num_workers]) for i in range(num_workers)]
    return [[loader_cores[i % len(loader_cores)]] for i in range(num_workers)]


@dataclass
class Pipeline:
    """What :func:`build` returns: a loader, a model and an optimizer, wired to a config.

    Example::

        pipe = autotune.build(autotune.load_config("best.yaml"), data)
        with pipe.activate():
            for batch in pipe.loader:
                loss = pipe.train_step(batch)
    """

    config: TrialConfig
    loader: object
    model: nn.Module
    eager_model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    device: torch.device
    checkpointed_layers: int
    sampler_backend: str
    task: object = None  # autotune.tasks: what a step's loss and seeds are
    worker_cores: list[list[int]] | None = None
    _lr: Tensor | None = field(default=None, repr=False)

    def autocast(self):
        dtype = self.config.amp_dtype
        return torch.autocast(device_type=self.device.type, dtype=getattr(torch, dtype),
                              enabled=dtype != "float32")

    def edges(self, batch):
        """What the conv layers aggregate over: ``edge_index`` (``aggregation: scatter``)
        or a CSR ``adj_t`` built from it (``sparse``)."""
        if self.config.aggregation == "sparse":
            return sparse_adjacency(batch.edge_index, int(batch.num_nodes))
        return batch.edge_index

    def train_step(self, batch) -> Tensor:
        """One optimisation step; returns the loss as a tensor (no host sync)."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        if not self.config.gpu_sampling:  # GPU-resident batches are built on the device
            batch = batch.to(self.device, non_blocking=True)
        with self.autocast():
            loss = self.task.loss(self, batch)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def set_lr(self, lr: float) -> None:
        """Changes the learning rate in place: the tensor keeps compiled code valid."""
        self._lr.fill_(lr)

    @contextlib.contextmanager
    def activate(self) -> Iterator[Pipeline]:
        """Applies the compute-core affinity (and thread count) to this process and
        the loader-core affinity to workers started inside the block."""
        restore_cores, restore_threads = os.sched_getaffinity(0), torch.get_num_threads()
        compute = self.config.compute_cores
        try:
            if compute is not None:
                os.sched_setaffinity(0, compute)
                torch.set_num_threads(len(compute))
            with contextlib.ExitStack() as stack:
                if self.worker_cores is not None:
                    stack.enter_context(self.loader.enable_cpu_affinity(self.worker_cores))
                yield self
        finally:
            if compute is not None:
                os.sched_setaffinity(0, restore_cores)
                torch.set_num_threads(restore_threads)


def build(config: TrialConfig, data, model: nn.Module | None = None, *,
          num_classes: int | None = None, cache_file: str | os.PathLike | None = None,
          cache_dir: str | os.PathLike | None = None) -> Pipeline:
    """Builds the loader, model and optimizer that ``config`` describes, on ``data``."""
    check_config(config)
    task = task_for(config, data)
    check_task(config, task)
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    if config.gpu_sampling:
        check_gpu_fit(gpu_resident_bytes(data), *torch.cuda.mem_get_info(device))
    backend = resolve_backend(config.sampler)
    sampler = make_sampler(data, fanouts(config, data), backend=backend, seed=config.seed,
                           cache_file=cache_file, cache_dir=cache_dir,
                           device=device if config.gpu_sampling else None)
    loader_data = _gpu_resident(data, device) if config.gpu_sampling else data
    workers = config.num_workers
    loader = task.loader(
        _loader_class(sampler), loader_data, sampler, data,
        batch_size=config.batch_size, shuffle=True, num_workers=workers,
        persistent_workers=workers > 0, prefetch_factor=config.prefetch_factor if workers else None,
        pin_memory=device.type == "cuda" and not config.gpu_sampling,
        transform=PadToBucket(config.pad_ladder) if config.shapes == "padded" else None)
    if model is None:
        model = task_model(config, task, data, num_classes)
    model = model.to(device)
    checkpointed = apply_checkpointing(model) if config.checkpointing else 0
    lr = torch.tensor(config.lr)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    compiled = model
    if config.compile_mode != "none":
        compiled = torch.compile(model, mode=config.compile_mode,
                                 dynamic=config.shapes == "dynamic")
    scaler = torch.amp.GradScaler(device.type, enabled=config.amp_dtype == "float16")
    worker_cores = worker_core_sets(config.loader_cores, workers) if config.loader_cores else None
    return Pipeline(config=config, loader=loader, model=compiled, eager_model=model,
                    optimizer=optimizer, scaler=scaler, device=device,
                    checkpointed_layers=checkpointed, sampler_backend=_describe(sampler),
                    task=task, worker_cores=worker_cores, _lr=lr)


def check_dataset(config: TrialConfig, dataset) -> None:
    """What ``config`` asks of a prepared dataset, checked before any trial starts:
    the task fits the graph, the model and knobs fit the task, and every edge type
    the fanouts name exists."""
    check_task(config, task_for(config, dataset.data))
    if dataset.hetero:
        from autotune.sampler import fanouts_per_edge_type

        fanouts_per_edge_type(fanouts(config, dataset.data), dataset.data.edge_types)


def check_task(config: TrialConfig, task) -> None:
    """The knobs a task or a heterogeneous graph cannot take."""
    hetero = isinstance(task, HeteroNodeTask)
    if config.gpu_sampling and (hetero or task.name == "link"):
        raise ConfigError("gpu_sampling samples homogeneous node batches with the Triton "
                          f"kernel (got {'a heterogeneous graph' if hetero else 'task link'}); "
                          "use gpu_sampling false")
    if hetero and config.model in ("gcn", "gat"):
        raise ConfigError(f"model {config.model} does not take the bipartite edge types of a "
                          "heterogeneous graph; use model sage or your own factory")
    if hetero and config.aggregation == "sparse":
        raise ConfigError("aggregation 'sparse' builds one homogeneous adjacency per batch "
                          "(got a heterogeneous graph); use aggregation scatter")
    if not hetero and config.edge_fanouts:
        raise ConfigError("edge_fanouts names edge types of a heterogeneous graph (got a "
                          "homogeneous one); use num_neighbors")


def fanouts(config: TrialConfig, data):
    """The sampler's ``num_neighbors``: the config's list, or on a heterogeneous graph
    a dict with that list for every edge type but those ``edge_fanouts`` names (an
    edge type it names that the graph lacks is a ConfigError from the sampler)."""
    from torch_geometric.data import HeteroData

    if not isinstance(data, HeteroData):
        return list(config.num_neighbors)
    out = {"__".join(t): list(config.num_neighbors) for t in data.edge_types}
    out.update({k: list(v) for k, v in (config.edge_fanouts or {}).items()})
    return out


def task_model(config: TrialConfig, task, data, num_classes: int | None) -> nn.Module:
    """The model a task trains: a classifier over the classes, an encoder into
    ``hidden_channels`` for link prediction (the decoder has no weights), lifted with
    ``to_hetero`` on a heterogeneous graph."""
    if isinstance(task, HeteroNodeTask):
        store = data[task.target]
        classes = num_classes if num_classes is not None else int(store.y.max()) + 1
        if config.model in MODELS:
            base = HeteroEncoder(config.hidden_channels, classes, config.num_layers,
                                 config.dropout)
        else:
            base = make_model(config, -1, classes)
        return lift_to_hetero(base, data)
    if task.name == "link":
        return make_model(config, data.num_features, config.hidden_channels)
    classes = num_classes if num_classes is not None else int(data.y.max()) + 1
    return make_model(config, data.num_features, classes)


def _describe(sampler) -> str:
    """``autotune.NeighborSampler`` (with its hop kernel where it is not the torch
    path) or ``torch_geometric.NeighborSampler``."""
    name = type(sampler).__module__.split(".")[0] + "." + type(sampler).__name__
    kernel = getattr(sampler, "kernel", "torch")
    return name if kernel == "torch" else f"{name} ({kernel} kernel)"


def _loader_class(sampler) -> type:
    """``NodeLoader``, or the GPU-resident pipeline's loader, which samples one batch
    ahead on the GPU (:class:`autotune.loader.LookaheadNodeLoader`)."""
    if getattr(sampler, "slots", False) and sampler.device.type == "cuda":
        from autotune.loader import LookaheadNodeLoader

        return LookaheadNodeLoader
    from torch_geometric.loader import NodeLoader

    return NodeLoader


def _gpu_resident(data, device: torch.device):
    """A view of ``data`` for GPU sampling: features and labels on the GPU, and an
    empty GPU ``edge_index`` so PyG builds each batch's edges there (the sampler
    holds the graph itself)."""
    from torch_geometric.data import Data

    return Data(x=data.x.to(device), y=data.y.to(device), num_nodes=data.num_nodes,
                edge_index=torch.empty(2, 0, dtype=torch.long, device=device))
