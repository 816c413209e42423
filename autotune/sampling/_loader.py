"""Loaders built on PyG's: drop-in ``NeighborLoader`` and ``LinkNeighborLoader`` that
sample with :class:`autotune.NeighborSampler`, and the GPU pipeline's look-ahead loader.

:class:`NeighborLoader` and :class:`LinkNeighborLoader` subclass PyG's classes and
take their arguments, so a training script changes one import line; code that checks
``isinstance(loader, torch_geometric.loader.NeighborLoader)`` (``GraphSAGE.inference``,
for one) accepts them. They need neither pyg-lib nor torch-sparse.

:class:`LookaheadNodeLoader` is the GPU-resident pipeline's loader (``gpu_sampling``
with the Triton sampler): it draws batch ``i + 1`` on the GPU before it hands out
batch ``i``. Why not PyG's own prefetching: ``NodeLoader`` samples a batch when it is
asked for it, and a GPU batch's node count is only known once its sampling is done,
so the host waited for each batch's sampling behind the training step queued before
it (a fifth of a step: docs/gpu.md, "Figures behind the code"). One batch ahead, the
sampling is done by the time it is needed.
"""
from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable, Iterator

from torch.utils.data import DataLoader
from torch_geometric import loader as pyg_loader
from torch_geometric.loader import NodeLoader
from torch_geometric.loader.mixin import AffinityMixin

from autotune.errors import ConfigError
from autotune.sampling._neighbor import NeighborSampler, fanouts_per_edge_type, resolve_backend

LOADER_BACKENDS = ("builtin", "pyg")


class NeighborLoader(pyg_loader.NeighborLoader):
    """PyG's :class:`~torch_geometric.loader.NeighborLoader`, sampling with
    :class:`autotune.NeighborSampler` (``sampling_backend="builtin"``, the default) or PyG's own
    (``sampling_backend="pyg"``, which needs pyg-lib or torch-sparse). Same arguments as PyG's;
    ``sampler_options`` go to :class:`autotune.NeighborSampler` (``device``, ``seed``,
    ``cache_dir``, ``kernel``). A ``neighbor_sampler`` passed in must sample the
    ``num_neighbors`` given, or the loader refuses it.

    Example::

        from autotune import NeighborLoader  # was: from torch_geometric.loader

        loader = NeighborLoader(data, num_neighbors=[25, 10], batch_size=1024,
                                input_nodes=data.train_mask, shuffle=True)
    """

    def __init__(self, data, num_neighbors, *args, sampling_backend: str = "builtin",
                 sampler_options: dict[str, Any] | None = None, **kwargs) -> None:
        sampling_backend = _renamed_backend(kwargs, sampling_backend)
        bound = _bind(pyg_loader.NeighborLoader, self, data, num_neighbors, *args, **kwargs)
        bound.arguments["neighbor_sampler"] = _neighbor_sampler(bound.arguments,
                                                                sampling_backend,
                                                                sampler_options)
        super().__init__(*bound.args[1:], **bound.kwargs)


class LinkNeighborLoader(pyg_loader.LinkNeighborLoader):
    """PyG's :class:`~torch_geometric.loader.LinkNeighborLoader` on
    :class:`autotune.NeighborSampler`, as :class:`NeighborLoader` is for nodes:
    binary and triplet negatives (drawn on the sampler's device, none on an edge of
    the graph), ``disjoint``, ``weight_attr``, ``subgraph_type`` and temporal sampling
    (``time_attr`` with ``edge_label_time``) work; a custom feature and graph store
    needs ``sampling_backend="pyg"``.

    Example::

        from autotune import LinkNeighborLoader

        loader = LinkNeighborLoader(train_data, num_neighbors=[10, 5], batch_size=512,
                                    edge_label_index=train_data.edge_label_index,
                                    edge_label=train_data.edge_label, shuffle=True,
                                    neg_sampling="binary")
    """

    def __init__(self, data, num_neighbors, *args, sampling_backend: str = "builtin",
                 sampler_options: dict[str, Any] | None = None, **kwargs) -> None:
        sampling_backend = _renamed_backend(kwargs, sampling_backend)
        bound = _bind(pyg_loader.LinkNeighborLoader, self, data, num_neighbors, *args,
                      **kwargs)
        bound.arguments["neighbor_sampler"] = _neighbor_sampler(bound.arguments,
                                                                sampling_backend,
                                                                sampler_options)
        super().__init__(*bound.args[1:], **bound.kwargs)


def _bind(cls: type, *args, **kwargs) -> inspect.BoundArguments:
    """The call's arguments, named by PyG's own signature (a wrong one is PyG's
    TypeError), with defaults filled in."""
    bound = inspect.signature(cls.__init__).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound


def _renamed_backend(kwargs: dict[str, Any], backend: str) -> str:
    """``sampling_backend``, or the value of its old name ``sampler=`` (with a
    FutureWarning), taken out of ``kwargs``."""
    if "sampler" not in kwargs:
        return backend
    warnings.warn("sampler= is deprecated: pass sampling_backend=", FutureWarning,
                  stacklevel=3)
    return kwargs.pop("sampler")


def _neighbor_sampler(args: dict, backend: str, options: dict[str, Any] | None):
    """The sampler the loader uses: the one passed in (checked against
    ``num_neighbors``), PyG's (``None``: PyG builds it) or a new built-in one."""
    if backend not in LOADER_BACKENDS:
        raise ConfigError(f"sampling_backend must be one of {', '.join(LOADER_BACKENDS)} "
                          f"(got {backend!r})")
    given = args["neighbor_sampler"]
    if given is not None:
        _check_same_fanout(given, args["num_neighbors"])
        return given
    if backend == "pyg":
        resolve_backend("pyg")  # a clear error where neither pyg-lib nor torch-sparse imports
        return None
    subgraph_type = "induced" if args["directed"] is False else args["subgraph_type"]
    return NeighborSampler(args["data"], args["num_neighbors"], replace=args["replace"],
                           subgraph_type=subgraph_type, disjoint=args["disjoint"],
                           temporal_strategy=args["temporal_strategy"],
                           time_attr=args["time_attr"], weight_attr=args["weight_attr"],
                           **(options or {}))


def _check_same_fanout(sampler, num_neighbors) -> None:
    """A loader's ``num_neighbors`` that its ``neighbor_sampler`` would ignore is an
    error: PyG's loaders silently sample with the sampler's own."""
    have = sampler.num_neighbors
    have = getattr(have, "values", have)  # PyG's NumNeighbors
    edge_types = getattr(sampler, "edge_types", None)
    if isinstance(have, dict) or isinstance(num_neighbors, dict):
        if edge_types is None:
            same = have == num_neighbors
        else:
            same = fanouts_per_edge_type(have, edge_types) == \
                fanouts_per_edge_type(num_neighbors, edge_types)
    else:
        same = list(have) == list(num_neighbors)
    if not same:
        raise ConfigError(f"num_neighbors {num_neighbors!r} conflicts with the "
                          f"neighbor_sampler's {have!r}; the loader would sample with the "
                          "sampler's: pass the same num_neighbors, or leave out one of them")


class GraphLoader(AffinityMixin, pyg_loader.DataLoader):
    """PyG's :class:`~torch_geometric.loader.DataLoader` over whole graphs (a
    graph-level task's batches), with a ``transform`` applied to each collated batch
    (in the worker that collates it: the padding of ``shapes: padded``) and PyG's
    ``enable_cpu_affinity`` for its workers, as ``NodeLoader`` has.

    Example::

        loader = GraphLoader(graphs, batch_size=128, shuffle=True, num_workers=1)
    """

    def __init__(self, dataset, *, transform: Callable | None = None, **kwargs) -> None:
        super().__init__(dataset, **kwargs)
        self.data = dataset  # what enable_cpu_affinity inspects (NodeLoader's graph)
        self.transform = transform
        if transform is not None:
            self.collate_fn = _Then(self.collate_fn, transform)


def chain(first: Callable, second: Callable | None) -> Callable:
    """A transform that applies ``first``, then ``second`` (when there is one)."""
    return first if second is None else _Then(first, second)


class _Then:
    """``second(first(items))``: a picklable composition for spawned workers."""

    def __init__(self, first: Callable, second: Callable) -> None:
        self.first, self.second = first, second

    def __call__(self, items):
        return self.second(self.first(items))


class LookaheadNodeLoader(NodeLoader):
    """A :class:`torch_geometric.loader.NodeLoader` over an
    :class:`autotune.NeighborSampler` that samples with its Triton kernel on CUDA,
    one batch ahead. Batches are the ones ``NodeLoader`` gives, in the same order.

    Example::

        sampler = autotune.NeighborSampler(data, [25, 10], device="cuda")
        loader = LookaheadNodeLoader(gpu_data, node_sampler=sampler, batch_size=1024,
                                     input_nodes=data.train_mask, shuffle=True)
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        sampler = self.node_sampler
        if not getattr(sampler, "slots", False):
            raise ConfigError("LookaheadNodeLoader needs an autotune.NeighborSampler with "
                              f"the triton kernel (got {sampler!r})")
        if self.num_workers:
            raise ConfigError("LookaheadNodeLoader samples on the GPU in this process "
                              f"(got num_workers {self.num_workers}); use 0")

    def collate_fn(self, index):
        seeds = self.input_data[index]
        return self.node_sampler.launch(seeds.node), seeds

    def _get_iterator(self) -> Iterator:
        return _Lookahead(DataLoader._get_iterator(self), self._finish)

    def _finish(self, launched):
        batch, seeds = launched
        out = self.node_sampler.finish(batch)
        out.metadata = (seeds.input_id, seeds.time)
        return self.filter_fn(out)


class _Lookahead:
    """Keeps one item of ``items`` pulled ahead of the one it hands out."""

    def __init__(self, items: Iterator, finish: Callable) -> None:
        self.items, self.finish = items, finish
        self.ahead = self._pull()

    def _pull(self):
        try:
            return next(self.items)
        except StopIteration:
            return None

    def __iter__(self) -> _Lookahead:
        return self

    def __len__(self) -> int:
        return len(self.items)

    def __next__(self):
        current = self.ahead
        if current is None:
            raise StopIteration
        self.ahead = self._pull()
        return self.finish(current)
