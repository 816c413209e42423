"""Builds a PyG training pipeline from a ``TrialConfig``: every knob takes effect here.

=================  ===============================================================
knob               where it acts
=================  ===============================================================
batch_size         ``NodeLoader(batch_size=...)``
num_neighbors      the sampler's fanout
sampling_backend   :func:`autotune.sampling.make_sampler`'s backend (builtin, pyg, auto)
gpu_sampling       CSR, features and sampling on the GPU (the Triton sampler, one batch
                   ahead: :class:`autotune.sampling.LookaheadNodeLoader`), no workers
                   (CUDA only); otherwise CPU sampling with pinned, non-blocking
                   copies on CUDA
feature_placement  with gpu_sampling: features on the GPU, or pinned in host memory
                   and each batch's rows gathered by a GPU kernel
                   (:class:`HostFeatures`, :func:`autotune.sampling._kernels.gather_rows`)
feature_dtype      the dtype the loader stores and gathers features in
                   (:func:`stored_features`); :class:`FloatFeatures` makes a batch's
                   ``x`` float32 again before the model
model              :func:`autotune.pipeline._models.make_model`: sage (default), gcn, gat, or a user's
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
time_attr          the sampler's ``time_attr`` (temporal sampling, each seed at its
                   node's time) and ``temporal_strategy``
task               :mod:`autotune.pipeline._tasks`: node classification (``Data`` or
                   ``HeteroData``, the model lifted by ``to_hetero``), link prediction
                   or graph classification (whole graphs, no sampler)
=================  ===============================================================

The trial worker and a user's own training loop (``autotune.build``) use this
same code, so what was measured is what trains.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch import Tensor, nn
from torch_geometric.data import Data, HeteroData

from autotune.config import TrialConfig
from autotune.env import check_cores, format_bytes
from autotune.errors import ConfigError, DeviceMemoryError
from autotune.pipeline._allocator import hold_heap
from autotune.pipeline._models import FollowingAdjacency, mask_holders, set_masks
from autotune.pipeline._tasks import task_for
from autotune.sampling import LookaheadNodeLoader, chain, gather_rows, make_sampler, resolve_backend

GEOMETRIC_STEP = 1.25
MIN_BUCKET = 64
# of the GPU's memory, kept free beyond what the fit check counts: the allocator's
# rounding and fragmentation, cuBLAS/cuSPARSE workspaces, CUDA's own context
GPU_HEADROOM = 0.05
LOOKAHEAD_BATCHES = 2  # batches on the GPU at once: the one trained, the one sampled ahead
# float32-sized tensors a layer holds per batch node and output channel at its peak
# (linear outputs, their sum, the activation, the dropout mask, the gradients as the
# backward frees them): calibrated on the GPU-resident bfloat16 trials' reserved
# memory (docs/gpu.md, "Figures behind the code")
ACTIVATION_COPIES = 4
ADAM_COPIES = 4  # a parameter, its gradient and Adam's two moments


SPARSE_BETA = "Sparse CSR tensor support is in beta state"


def sparse_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """The batch's ``adj_t`` as a torch CSR matrix (row ``i`` holds the sources of
    ``i``'s in-edges, ones as values), which PyG's layers aggregate with a sparse
    matrix product instead of a scatter. Built on ``edge_index``'s device with no host
    sync: a stable sort by target and a ``searchsorted`` for the row pointers."""
    src, dst = edge_index
    dst_sorted, perm = torch.sort(dst, stable=True)
    crow = torch.searchsorted(dst_sorted, torch.arange(num_nodes + 1, device=dst.device))
    values = torch.ones(src.numel(), device=src.device)
    # valid by construction: the invariant checks opted out of (torch warns where that is
    # left implicit), and torch's once-a-process "beta" notice kept off the user's output
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", SPARSE_BETA, UserWarning)
        return torch.sparse_csr_tensor(crow, src[perm], values, size=(num_nodes, num_nodes),
                                       check_invariants=False)


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
        from torch_geometric.data import Batch

        if isinstance(batch, HeteroData):
            return self._hetero(batch)
        if isinstance(batch, Batch):
            return self._graphs(batch)
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

    def _graphs(self, batch):
        """A batch of whole graphs: the padding nodes form one more graph (the
        ``batch`` vector says so), so pooling each real graph is unchanged; edge
        attributes get zero rows for the padding edges."""
        n, e, graphs = batch.num_nodes, batch.edge_index.size(1), batch.num_graphs
        n_pad = bucket(n + 1, self.ladder) - n
        batch.x = torch.cat([batch.x, batch.x.new_zeros(n_pad, batch.x.size(1))])
        batch.batch = torch.cat([batch.batch, batch.batch.new_full((n_pad,), graphs)])
        batch.edge_index = self._pad_edges(batch.edge_index, n, n)
        if "edge_attr" in batch and batch.edge_attr is not None:
            extra = batch.edge_index.size(1) - e
            batch.edge_attr = torch.cat([batch.edge_attr, batch.edge_attr.new_zeros(
                extra, *batch.edge_attr.shape[1:])])
        batch.num_real_nodes, batch.num_real_edges = n, e
        batch.num_real_graphs = graphs
        return batch

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
    resolve_backend(config.sampling_backend)


def gpu_resident_bytes(data, feature_placement: str = "gpu") -> dict[str, int]:
    """What ``gpu_sampling`` puts on the GPU before the first batch, from sizes alone,
    summed over a heterogeneous graph's types: the CSC of each edge type (colptr,
    row, and the edge permutation, counted even when the edges are already in CSC
    order), features (unless pinned in host memory), labels and the sampler's two id
    maps per node type."""
    def size(tensors) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    hetero = isinstance(data, HeteroData)
    csc = 0
    for (_, _, dst), store in data.edge_items() if hetero else [((None, None, None), data)]:
        if "edge_index" in store:
            n_dst = data[dst].num_nodes if hetero else data.num_nodes
            csc += (int(n_dst) + 1) * 8 + 2 * int(store.edge_index.size(1)) * 8
    need = {"graph (CSC)": csc,
            "features": size(s.x for s in data.node_stores if "x" in s),
            "labels": size(s.y for s in data.node_stores if "y" in s),
            "sampler maps": sum(2 * (int(s.num_nodes) + 1) * 8 for s in data.node_stores)}
    if feature_placement == "pinned":
        del need["features"]
    return need


def cuda_index(device: torch.device | str) -> int:
    """The index of a CUDA ``device``, the current device's for ``torch.device("cuda")``.
    torch's per-process memory-fraction calls take an index or a device that names
    one, and raise ``ValueError`` for a device without one."""
    device = torch.device(device)
    return device.index if device.index is not None else torch.cuda.current_device()


def batch_working_bytes(config: TrialConfig, data, num_classes: int | None,
                        seed_nodes_per_item: int = 1) -> dict[str, int]:
    """What the GPU holds beside the resident graph while a trial trains, from sizes
    alone, for the largest batch the fanout allows: the model with Adam's state, and
    :data:`LOOKAHEAD_BATCHES` batches (their node ids and edges, their gathered
    features in float32 and, with ``feature_dtype bfloat16``, the stored copy), with
    one batch's activations and their gradients; with ``aggregation scatter`` each
    layer also holds a message per edge of its input width (the first layer's is
    the features', often the largest tensor of the step). An estimate: the model is
    counted as SAGE (two linear maps a layer), and a heterogeneous graph as one node
    type whose hops take the largest fanout of any edge type."""
    hetero = isinstance(data, HeteroData)
    nodes_total = sum(int(s.num_nodes) for s in data.node_stores)
    widths = [int(s.x.size(-1)) for s in data.node_stores if "x" in s]
    width = max(widths, default=0)
    hop = config.batch_size * seed_nodes_per_item
    nodes, edges = hop, 0
    for fanout in (config.num_neighbors if not hetero else
                   [max(f) for f in zip(*[config.num_neighbors,
                                          *(config.edge_fanouts or {}).values()])]):
        hop *= max(int(fanout), 0)
        nodes, edges = nodes + hop, edges + hop
    nodes = min(nodes, nodes_total)
    stored = 2 if config.feature_dtype == "bfloat16" else 0
    batch = nodes * (8 + width * (4 + stored)) + edges * 2 * 8
    hidden = config.hidden_channels
    layer_inputs = [width] + [hidden] * (config.num_layers - 1)
    messages = sum(edges * w * 4 for w in layer_inputs) \
        if config.aggregation == "scatter" else edges * 3 * 8  # a CSR per batch
    activations = config.num_layers * nodes * hidden * 4 * ACTIVATION_COPIES + messages
    classes = num_classes or hidden
    params = sum(w * hidden + hidden for w in layer_inputs) * 2 + hidden * classes
    return {"model and Adam": params * 4 * ADAM_COPIES,
            "batches": LOOKAHEAD_BATCHES * batch, "activations": activations}


def gpu_need(config: TrialConfig, data, num_classes: int | None,
                  task=None) -> dict[str, int]:
    """Everything the fit check counts for a GPU-resident trial, by part."""
    per_item = getattr(task, "seed_nodes_per_item", 1)
    return {**gpu_resident_bytes(data, config.feature_placement),
            **batch_working_bytes(config, data, num_classes, per_item)}


def limit_gpu_memory(limit_bytes: int, device: torch.device) -> None:
    """Caps this process's CUDA caching allocator at ``limit_bytes`` (``--gpu-memory-limit``)."""
    index = cuda_index(device)
    total = torch.cuda.get_device_properties(index).total_memory
    if limit_bytes > total:
        raise ConfigError(f"--gpu-memory-limit {format_bytes(limit_bytes)} is more than "
                          f"the GPU has ({format_bytes(total)})")
    torch.cuda.set_per_process_memory_fraction(limit_bytes / total, index)


def gpu_room(device: torch.device) -> tuple[int, int]:
    """(free, total) bytes on the GPU for this process: the device's, or within the
    cap :func:`limit_gpu_memory` set."""
    index = cuda_index(device)
    free, total = torch.cuda.mem_get_info(index)
    fraction = torch.cuda.get_per_process_memory_fraction(index)
    if fraction < 1:
        cap = int(fraction * total)
        free, total = min(free, cap - torch.cuda.memory_reserved(index)), cap
    return free, total


def check_gpu_fit(need: dict[str, int], free: int, total: int) -> None:
    """Fails fast, before anything is built, when what a GPU-resident trial puts on the
    GPU (:func:`gpu_resident_bytes` and :func:`batch_working_bytes`) would not leave
    :data:`GPU_HEADROOM` of the device free, saying what would fit: the graph with
    its features in pinned host memory (``feature_placement pinned``), or only CPU
    sampling."""
    room = free - int(GPU_HEADROOM * total)
    if sum(need.values()) <= room:
        return
    parts = ", ".join(f"{name} {format_bytes(size)}" for name, size in need.items())
    structure = sum(size for name, size in need.items() if name != "features")
    if "features" in need and structure <= room:
        instead = (f"use feature_placement pinned, which keeps the features in pinned host "
                   f"memory and needs {format_bytes(structure)} on the GPU")
    else:
        instead = "use gpu_sampling false, which samples on the CPU and copies each batch"
    raise DeviceMemoryError(
        f"gpu_sampling needs {format_bytes(sum(need.values()))} on the GPU ({parts}) and "
        f"{format_bytes(max(room, 0))} is free beyond a {100 * GPU_HEADROOM:g}% headroom "
        f"({format_bytes(free)} of {format_bytes(total)} free); {instead}")


def end_workers(loader) -> None:
    """Ends a persistent-workers loader's worker processes now. PyG's loaders hold
    themselves (their bound ``collate_fn``), so a dropped one goes to the cyclic
    garbage collector, which finalises its iterator after its own index queues: the
    shutdown message never reaches the workers and each is joined for torch's 5 s
    timeout (10.5 s for two, against 0.02 s for a plain DataLoader, freed at ``del``)."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        loader._iterator = None
        iterator._shutdown_workers()


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
    sampling_backend: str
    task: object = None  # autotune.pipeline._tasks: what a step's loss and seeds are
    worker_cores: list[list[int]] | None = None
    _lr: Tensor | None = field(default=None, repr=False)
    feature_storage: str = ""  # where the loader gathers features from, in which dtype
    gpu_fit_bytes: int | None = None  # what the fit check counted (gpu_sampling)

    def autocast(self):
        dtype = self.config.amp_dtype
        return torch.autocast(device_type=self.device.type, dtype=getattr(torch, dtype),
                              enabled=dtype != "float32")

    @property
    def own_masks(self) -> bool:
        """Whether its model's dropout masks are the built-in models' (set as its
        config's ``dropout_masks`` says), not a user's model's own."""
        return bool(mask_holders(self.eager_model))

    def edges(self, batch):
        """What the conv layers aggregate over: ``edge_index`` (``aggregation: scatter``)
        or a CSR ``adj_t`` built from it (``sparse``): a :class:`FollowingAdjacency`
        where a layer's input may be of a lower dtype (bfloat16 autocast or features),
        on a CPU and uncompiled (compiled, or on a GPU, where it has not run, the plain
        one: a user's layers then fail there as they would without autotune)."""
        if self.config.aggregation != "sparse":
            return batch.edge_index
        adj = sparse_adjacency(batch.edge_index, int(batch.num_nodes))
        lower = (self.config.amp_dtype, self.config.feature_dtype) != ("float32", "float32")
        if lower and self.device.type == "cpu" and self.config.compile_mode == "none":
            return Tensor._make_subclass(FollowingAdjacency, adj)
        return adj

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

    def gradients(self, batch, seed: int = 0, masks: str | None = None) -> Tensor:
        """The loss's gradient on ``batch`` with respect to the model's parameters,
        flattened in float32, under this config's autocast and feature dtype (the
        batch's features rounded to it, as its loader stores them), with the random
        state seeded by ``seed`` and dropout drawing its masks as ``masks`` says (None:
        as this config's ``dropout_masks``), so that two pipelines' probes share their
        masks; no optimisation step, and the parameters' ``.grad`` untouched: the
        numerics check's probe."""
        set_masks(self.eager_model, masks or self.config.dropout_masks)
        params = [p for p in self.model.parameters() if p.requires_grad]
        batch = batch.clone()
        if not self.config.gpu_sampling:
            batch = batch.to(self.device)
        stored = getattr(torch, self.config.feature_dtype)
        for store in batch.node_stores:
            if "x" in store and store.x.is_floating_point() and store.x.dtype != stored:
                store.x = store.x.to(stored).to(store.x.dtype)
        self.model.train()
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            with self.autocast():
                loss = self.task.loss(self, batch)
            grads = torch.autograd.grad(loss.float(), params, allow_unused=True)
        return torch.cat([(g if g is not None else torch.zeros_like(p)).float().flatten()
                          for g, p in zip(grads, params)])

    def in_float32(self) -> Pipeline:
        """This pipeline computing in float32: no autocast, its features as its loader
        gives them (float32), its eager model (a compiled one would compile again for
        another autocast); the same parameters, loader and knobs otherwise. The
        numerics check's reference (:func:`autotune.tuning.numerics_check`)."""
        return dataclasses.replace(self, model=self.eager_model, config=self.config.replace(
            amp_dtype="float32", feature_dtype="float32"))

    def close(self) -> None:
        """Ends the loader's worker processes now (:func:`end_workers`): 10 s lost
        before a guard training with two workers, left to the garbage collector.
        ``with build(...) as pipe:`` closes it at the block's end."""
        end_workers(self.loader)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def set_lr(self, lr: float) -> None:
        """Changes the learning rate in place: the tensor keeps compiled code valid."""
        self._lr.fill_(lr)

    @contextlib.contextmanager
    def activate(self) -> Iterator[Pipeline]:
        """Applies the compute-core affinity (and thread count) to this process and
        the loader-core affinity to workers started inside the block. glibc's malloc
        is held in its late-training state for the rest of the process
        (:func:`autotune.pipeline._allocator.hold_heap`), so that a window's early steps run
        as a long training's later ones do."""
        hold_heap()
        set_masks(self.eager_model, self.config.dropout_masks)  # a model shared by pipelines
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
          cache_dir: str | os.PathLike | None = None, order=None,
          optimizer: torch.optim.Optimizer | None = None) -> Pipeline:
    """Builds the loader, model and optimizer ``config`` describes, on ``data``; a
    Sampler ``order`` of seeds replaces the shuffle, and ``optimizer`` (with ``model``)
    continues a training: its state, its learning rate and the random state kept."""
    check_config(config)
    task = task_for(config, data)
    task.check(config)
    if optimizer is None:
        torch.manual_seed(config.seed)
    device = torch.device(config.device)
    features = stored_features(data, config.feature_dtype)  # data itself in float32
    fit = gpu_need(config, features, num_classes, task) if config.gpu_sampling else None
    if fit is not None:
        check_gpu_fit(fit, *gpu_room(device))
    sampler = _sampler(config, task, data, device, cache_file, cache_dir)
    loader_data = _gpu_resident(features, device, config.feature_placement) \
        if config.gpu_sampling else features
    transform, gather = _transform(config, features, device)
    workers = config.num_workers
    loader = task.loader(
        _loader_class(sampler), loader_data, sampler, data,
        batch_size=config.batch_size, shuffle=order is None, num_workers=workers,
        **({} if order is None else {"sampler": order}),
        persistent_workers=workers > 0, prefetch_factor=config.prefetch_factor if workers else None,
        pin_memory=device.type == "cuda" and not config.gpu_sampling,
        transform=transform)
    if model is None:
        model = task.model(config, data, num_classes)
    model = model.to(device)
    checkpointed = apply_checkpointing(model) if config.checkpointing else 0
    lr = torch.tensor(config.lr) if optimizer is None else optimizer.param_groups[0]["lr"]
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    compiled = model
    if config.compile_mode != "none":
        compiled = torch.compile(model, mode=config.compile_mode,
                                 dynamic=config.shapes == "dynamic")
    scaler = torch.amp.GradScaler(device.type, enabled=config.amp_dtype == "float16")
    worker_cores = worker_core_sets(config.loader_cores, workers) if config.loader_cores else None
    return Pipeline(config=config, loader=loader, model=compiled, eager_model=model,
                    optimizer=optimizer, scaler=scaler, device=device,
                    checkpointed_layers=checkpointed, sampling_backend=_describe(sampler),
                    task=task, worker_cores=worker_cores, _lr=lr,
                    gpu_fit_bytes=sum(fit.values()) if fit is not None else None,
                    feature_storage=_feature_storage(
                        list(gather.x.values()) if gather is not None else
                        [s.x for s in loader_data.node_stores if "x" in s]
                        if task.samples else None))


def _sampler(config: TrialConfig, task, data, device: torch.device, cache_file, cache_dir):
    """The neighbour sampler ``config`` asks for; None for a task that batches whole
    graphs."""
    if not task.samples:
        return None
    return make_sampler(data, task.fanouts(config, data), backend=resolve_backend(config.sampling_backend),
                        seed=config.seed, cache_file=cache_file, cache_dir=cache_dir,
                        device=device if config.gpu_sampling else None,
                        time_attr=config.time_attr, temporal_strategy=config.temporal_strategy)


def _transform(config: TrialConfig, features, device: torch.device):
    """What the loader applies to each batch (padding, float features, the pinned
    features' gather), and that gather (None unless features stay pinned)."""
    transform = PadToBucket(config.pad_ladder) if config.shapes == "padded" else None
    if config.feature_dtype != "float32":
        transform = chain(FloatFeatures(), transform)
    gather = HostFeatures(features, device) \
        if config.gpu_sampling and config.feature_placement == "pinned" else None
    if gather is not None:
        transform = chain(gather, transform)
    return transform, gather


def _describe(sampler) -> str:
    """``autotune.NeighborSampler`` (with its hop kernel where it is not the torch
    path), ``torch_geometric.NeighborSampler``, or none (whole graphs)."""
    if sampler is None:
        return "none (whole graphs)"
    name = type(sampler).__module__.split(".")[0] + "." + type(sampler).__name__
    kernel = getattr(sampler, "kernel", "torch")
    return name if kernel == "torch" else f"{name} ({kernel} kernel)"


def _loader_class(sampler) -> type:
    """``NodeLoader``, or the GPU-resident pipeline's loader, which samples one batch
    ahead on the GPU (:class:`autotune.sampling.LookaheadNodeLoader`); none for
    whole graphs."""
    if sampler is None:
        return None
    if getattr(sampler, "slots", False) and sampler.device.type == "cuda":
        return LookaheadNodeLoader
    from torch_geometric.loader import NodeLoader

    return NodeLoader


def stored_features(data, dtype: str):
    """``data`` with its node features in ``dtype`` (a shallow copy: structure and
    labels shared), or ``data`` itself for float32."""
    import copy

    if dtype == "float32":
        return data
    out = copy.copy(data)
    for store in out.node_stores:
        if "x" in store and store.x.is_floating_point():
            store.x = store.x.to(getattr(torch, dtype))
    return out


class FloatFeatures:
    """A loader transform: a batch's ``x`` (each node type's) as float32, as the
    model takes it (the features were stored and gathered in a smaller dtype)."""

    def __call__(self, batch):
        for store in batch.node_stores:
            if "x" in store and store.x.is_floating_point():
                store.x = store.x.float()
        return batch


def _feature_storage(stored: list[Tensor] | None) -> str:
    """Where and in which dtype a batch's features are gathered from, read off the
    tensors built (``observed.feature_storage``): e.g. ``bfloat16 on cuda:0``,
    ``float32 in pinned host memory``; "" for batches of whole graphs (None)."""
    if stored is None:
        return ""
    if not stored:
        return "none"
    x = stored[0]
    where = "in pinned host memory" if x.is_pinned() else \
        ("in host memory" if x.device.type == "cpu" else f"on {x.device}")
    return f"{str(x.dtype).removeprefix('torch.')} {where}"


def _gpu_resident(data, device: torch.device, feature_placement: str = "gpu"):
    """A view of ``data`` (``Data`` or ``HeteroData``) for GPU sampling: features
    (unless ``pinned``: the loader's :class:`HostFeatures` gathers them) and labels on
    the GPU, and an empty GPU ``edge_index`` per edge type so PyG builds each batch's
    edges there (the sampler holds the graph itself)."""
    view = HeteroData() if isinstance(data, HeteroData) else Data()
    stores = zip(data.node_types, data.node_stores) if isinstance(data, HeteroData) else \
        [(None, data)]
    for node_type, store in stores:
        out = view[node_type] if node_type is not None else view
        out.num_nodes = store.num_nodes
        keys = ("y",) if feature_placement == "pinned" else ("x", "y")
        for key in keys:
            if key in store:
                out[key] = store[key].to(device)
    empty = torch.empty(2, 0, dtype=torch.long, device=device)
    if isinstance(data, HeteroData):
        for edge_type in data.edge_types:
            view[edge_type].edge_index = empty
    else:
        view.edge_index = empty
    return view


class HostFeatures:
    """A loader transform: a batch's ``x`` (of each node type, on a heterogeneous
    graph), gathered on the GPU from features in pinned host memory by
    :func:`autotune.sampling._kernels.gather_rows` (zero copy: only the rows of the batch's
    ``n_id`` cross the bus). Pins one copy of the features when built."""

    def __init__(self, data, device: torch.device) -> None:
        def pinned(x: Tensor) -> Tensor:
            return x.contiguous().pin_memory() if device.type == "cuda" else x.contiguous()

        self.x = {t: pinned(data[t].x) for t in data.node_types if "x" in data[t]} \
            if isinstance(data, HeteroData) else {None: pinned(data.x)}

    def __call__(self, batch):
        for node_type, x in self.x.items():
            store = batch[node_type] if node_type is not None else batch
            store.x = gather_rows(x, store.n_id)
        return batch


def device_sync(device: torch.device) -> Callable[[], None]:
    """What waits for the device's queued work before a clock read (nothing on CPU)."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None
