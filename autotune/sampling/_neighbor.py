"""Exact, vectorised, uniform neighbour sampling that plugs into PyG's ``NodeLoader``.

Why not a library: PyG's own ``NeighborSampler`` needs pyg-lib (not on PyPI) or
torch-sparse (a source build of about 14 minutes, plus torch-scatter), and
torch-sparse's sampler is measurably non-uniform (its Floyd step draws from an
exclusive upper bound). This module needs only torch, runs the same code on CPU
and CUDA tensors, and draws exact uniform k-subsets with Floyd's algorithm,
vectorised over all frontier nodes at once (the only Python loops run over hops
and over the k fanout positions).

:func:`make_sampler` chooses between this sampler and PyG's native one.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)

from autotune.config import SAMPLING_BACKENDS
from autotune.errors import AutotuneError, BackendUnavailableError, ConfigError
from autotune.files import atomic_write
from autotune.sampling import _kernels as kernels
from autotune.sampling._kernels import draw_hop_slots
from autotune.sampling._links import EdgeSet, sample_from_edges
from autotune.sampling._subgraph import (
    UNSET,
    KeyMap,
    NodeMap,
    Relation,
    Temporal,
    induced_edges,
    sample_typed,
)
from autotune.sampling._temporal import check_strategy, seed_times, time_attribute, time_ordered

SamplerKernel = Literal["auto", "triton", "torch"]
SAMPLER_KERNELS: tuple[str, ...] = ("auto", "triton", "torch")

_CSC_FORMAT = 1  # bump when the cache file layout changes
MAX_GRAPHS = 4  # CUDA graphs kept per sampler, one per batch size (the last batch differs)
HOMOGENEOUS = "_N"  # the one node type of a homogeneous graph, inside this module
EdgeType = tuple[str, str, str]
_HOMOGENEOUS_EDGE = (HOMOGENEOUS, "_E", HOMOGENEOUS)


@dataclass(frozen=True)
class CSCGraph:
    """A graph in compressed sparse column form: the in-neighbours of node ``i``
    are ``row[colptr[i]:colptr[i + 1]]``. ``perm[p]`` is the id, in the
    original ``edge_index``, of the edge stored at CSC position ``p`` (``None``
    when the original edges were already in CSC order). ``path`` is the cache
    file the tensors are memory-mapped from, if any."""

    colptr: Tensor
    row: Tensor
    perm: Tensor | None
    num_nodes: int
    path: Path | None = None

    @property
    def num_edges(self) -> int:
        return self.row.numel()

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int) -> CSCGraph:
        src, dst = edge_index[0].long(), edge_index[1].long()
        dst_sorted, perm = torch.sort(dst, stable=True)
        counts = torch.bincount(dst_sorted, minlength=num_nodes)
        colptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=dst.device)
        torch.cumsum(counts, 0, out=colptr[1:])
        identity = bool((perm == torch.arange(perm.numel(), device=perm.device)).all())
        return cls(colptr, src[perm], None if identity else perm, num_nodes)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the cache file atomically, so a crash never leaves half a file."""
        blob = {"format": _CSC_FORMAT, "num_nodes": self.num_nodes, "colptr": self.colptr,
                "row": self.row, "perm": self.perm}
        atomic_write(path, lambda tmp: torch.save(blob, tmp))

    @classmethod
    def load(cls, path: str | os.PathLike) -> CSCGraph:
        """Memory-maps a cache file: every process that loads it shares its pages."""
        blob = torch.load(path, mmap=True, weights_only=True)
        if blob.get("format") != _CSC_FORMAT:
            raise AutotuneError(f"CSC cache '{path}' has format {blob.get('format')!r} "
                             f"(expected {_CSC_FORMAT}); delete it to rebuild")
        return cls(blob["colptr"], blob["row"], blob["perm"], int(blob["num_nodes"]), Path(path))

    def to(self, device: torch.device | str) -> CSCGraph:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return CSCGraph(move(self.colptr), move(self.row), move(self.perm), self.num_nodes,
                        self.path if torch.device(device).type == "cpu" else None)

    def share_memory_(self) -> CSCGraph:
        for tensor in (self.colptr, self.row, self.perm):
            if tensor is not None and tensor.device.type == "cpu":
                tensor.share_memory_()
        return self


def graph_fingerprint(edge_index: Tensor, num_nodes: int) -> str:
    """A content hash of a graph's structure, to name its CSC cache file."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(f"{num_nodes}:{tuple(edge_index.shape)}".encode())
    digest.update(edge_index.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def load_or_build_csc(data: Data, cache_dir: str | os.PathLike | None = None,
                      cache_file: str | os.PathLike | None = None) -> CSCGraph:
    """Builds the CSC of ``data`` once. With ``cache_file`` (or ``cache_dir``, where the
    file is named by the graph's content hash), the CSC is written to that file and
    memory-mapped from it afterwards; with neither, it is built in memory and moved
    to shared memory. Either way, loader workers read it without a copy. A graph
    with no ``edge_index`` (features only) is a graph with no edges, as in PyG."""
    if "edge_index" in data:
        edge_index = data.edge_index
    else:
        edge_index = torch.empty(2, 0, dtype=torch.long)
    return _csc_of(edge_index, int(data.num_nodes), cache_dir, cache_file)


def _csc_of(edge_index: Tensor, num_nodes: int, cache_dir, cache_file) -> CSCGraph:
    if cache_file is not None:
        path = Path(cache_file)
    elif cache_dir is not None:
        path = Path(cache_dir) / f"csc-{graph_fingerprint(edge_index, num_nodes)}.pt"
    else:
        return CSCGraph.from_edge_index(edge_index, num_nodes).share_memory_()
    if not path.exists():
        CSCGraph.from_edge_index(edge_index.cpu(), num_nodes).save(path)
    csc = CSCGraph.load(path)
    if csc.num_nodes != num_nodes or csc.num_edges != edge_index.size(1):
        raise AutotuneError(f"CSC cache '{path}' holds another graph ({csc.num_nodes} nodes, "
                            f"{csc.num_edges} edges; expected {num_nodes} and "
                            f"{edge_index.size(1)}); delete it to rebuild")
    return csc


def load_or_build_cscs(data: HeteroData, cache_dir: str | os.PathLike | None = None,
                       cache_file: str | os.PathLike | None = None
                       ) -> dict[EdgeType, CSCGraph]:
    """:func:`load_or_build_csc` for each edge type ``(src, rel, dst)`` of a
    heterogeneous graph: a CSC over the ``dst`` nodes whose rows are ``src`` ids.
    ``cache_file`` names the first of one file per edge type
    (``<stem>.<src>__<rel>__<dst>.pt`` beside it)."""
    out = {}
    for edge_type in data.edge_types:
        store = data[edge_type]
        edge_index = store.edge_index if "edge_index" in store else \
            torch.empty(2, 0, dtype=torch.long)
        path = None
        if cache_file is not None:
            base = Path(cache_file)
            path = base.with_name(f"{base.stem}.{'__'.join(edge_type)}{base.suffix}")
        out[edge_type] = _csc_of(edge_index, int(data[edge_type[-1]].num_nodes), cache_dir,
                                 path)
    return out


def _relabel_slots(src: Tensor, assoc: Tensor, first_pos: Tensor,
                   total: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The slot form of :func:`_unique_first_seen` plus relabelling, in fixed shapes
    (no host sync): ``src`` holds a hop's picks, ``-1`` in empty slots; the scratch
    maps have one extra entry (index ``n``) that absorbs the empty slots.

    Returns ``(rows, fresh, total)``: each slot's local source id (``-1`` if empty),
    the global id in the slots of first-seen new nodes (``-1`` elsewhere: the next
    hop's frontier, whose local ids are increasing in slot order) and the new total."""
    n = assoc.numel() - 1
    s = torch.where(src >= 0, src, n)
    unseen = (src >= 0) & (assoc[s] < 0)
    pos = torch.arange(src.numel(), device=src.device)
    first_pos.scatter_reduce_(0, torch.where(unseen, s, n), torch.where(unseen, pos, UNSET),
                              reduce="amin")
    is_new = unseen & (first_pos[s] == pos)
    first_pos.index_fill_(0, s, UNSET)
    rank = torch.cumsum(is_new, 0) + (total - 1)
    assoc.scatter_(0, torch.where(is_new, s, n), torch.where(is_new, rank, -1))
    return assoc[s], torch.where(is_new, s, -1), total + is_new.sum()


def _compact(slots: list[Tensor], keep: list[Tensor], counts: list[Tensor]) -> Tensor:
    """The kept entries of each slot array (along its last dimension; leading
    dimensions move together), in order, at the front of one buffer as long as all
    the slots (the rest ``-1``): offsets come from the device-side ``counts``, so the
    shapes are fixed and nothing is read back."""
    capacity = sum(t.size(-1) for t in slots)
    out = slots[0].new_full((*slots[0].shape[:-1], capacity + 1), -1)  # last: dropped ones
    offset = torch.zeros((), dtype=torch.long, device=out.device)
    for values, kept, count in zip(slots, keep, counts):
        target = torch.where(kept, torch.cumsum(kept, 0) + (offset - 1), capacity)
        out.scatter_(-1, target.expand_as(values), values)
        offset = offset + count
    return out[..., :-1]


class Slots(NamedTuple):
    """A batch drawn in fixed shapes: the first ``sizes`` entries of each buffer are
    the batch (``sizes``: new nodes per hop, then edges per hop, on the device)."""

    node: Tensor
    edges: Tensor  # [3, capacity]: local source, local target, CSC position
    sizes: Tensor

    def clone(self) -> Slots:
        return Slots(self.node.clone(), self.edges.clone(), self.sizes.clone())


class Launched(NamedTuple):
    """A batch whose sampling is queued on the GPU (:meth:`NeighborSampler.launch`)."""

    slots: Slots  # the batch's own copy: the graph's buffers belong to the next batch
    num_seeds: int
    done: object  # a torch.cuda.Event recorded after the batch's work
    host_sizes: Tensor  # pinned; holds ``slots.sizes`` once ``done`` has happened
    pinned: tuple | None  # the (seed staging, sizes) buffers it holds until finished


def draw_slots(csc: CSCGraph, seeds: Tensor, fanouts: list[int], replace: bool,
               hop_seeds: Tensor, assoc: Tensor, first_pos: Tensor) -> Slots:
    """Every hop by the Triton kernel, relabelled and compacted in fixed shapes, and
    the scratch maps reset: no host sync and no shape that depends on the draw, so
    the whole batch can be captured in a CUDA graph."""
    local = torch.arange(seeds.numel(), device=seeds.device)
    assoc.index_copy_(0, seeds, local)
    total = torch.full((), seeds.numel(), dtype=torch.long, device=seeds.device)
    frontier, frontier_local, hops = seeds, local, []
    for hop, k in enumerate(fanouts):
        edge, src = draw_hop_slots(csc.colptr, csc.row, frontier, k, replace,
                                   hop_seeds[hop:hop + 1])
        row, frontier, total = _relabel_slots(src, assoc, first_pos, total)
        col = frontier_local.unsqueeze(1).expand(-1, k).reshape(-1)
        frontier_local = torch.where(frontier >= 0, row, -1)
        hops.append((frontier, row, col, edge))
    new_kept = [fresh >= 0 for fresh, _, _, _ in hops]
    edge_kept = [edge >= 0 for _, _, _, edge in hops]
    counts = [kept.sum() for kept in new_kept + edge_kept]
    node = torch.cat([seeds, _compact([h[0] for h in hops], new_kept, counts[:len(hops)])])
    n = assoc.numel() - 1
    assoc.index_fill_(0, torch.where(node >= 0, node, n), -1)
    edges = _compact([torch.stack(h[1:]) for h in hops], edge_kept, counts[len(hops):])
    return Slots(node, edges, torch.stack(counts))


class NeighborSampler(BaseSampler):
    r"""Neighbour sampling for homogeneous and heterogeneous graphs, a drop-in for
    PyG's :class:`torch_geometric.sampler.NeighborSampler` (no pyg-lib needed):

    * per hop, each frontier node gets ``min(deg, k)`` distinct in-neighbours
      (sources ``j`` of edges ``j -> i``), drawn uniformly without replacement;
      ``k = -1`` takes all of them and ``replace=True`` draws ``k`` with replacement;
      with ``weight_attr``, draws are in proportion to that edge attribute;
    * a :class:`~torch_geometric.data.HeteroData` graph is sampled per edge type
      ``(src, rel, dst)`` from the ``dst`` frontier, with one CSC per edge type;
    * the output is not disjoint (seeds first, then new nodes in hop order) unless
      ``disjoint=True``: then each seed has its own subgraph and ``batch`` says whose;
    * ``row``/``col`` are local ids, ``row`` the source, ``col`` the target;
    * ``subgraph_type="bidirectional"`` adds every sampled edge's reverse (PyG's
      ``to_bidirectional``), ``"induced"`` returns every edge of the graph among the
      sampled nodes; ``num_neighbors=[]`` samples the seeds alone;
    * with ``time_attr`` the sampling is temporal (:mod:`autotune.sampling._temporal`): every
      sampled node or edge is no later than its seed's time;
    * ``sample_from_edges`` serves PyG's ``LinkLoader`` (see :mod:`autotune.sampling._links`).

    Example::

        from torch_geometric.loader import NodeLoader
        import autotune

        sampler = autotune.NeighborSampler(data, num_neighbors=[25, 10])
        loader = NodeLoader(data, node_sampler=sampler, input_nodes=data.train_mask,
                            batch_size=1024, num_workers=2, shuffle=True)

    :class:`autotune.sampling.NeighborLoader` and :class:`autotune.sampling.LinkNeighborLoader`
    build it for you, with PyG's signatures.

    Args:
        data: The graph, a :class:`torch_geometric.data.Data` or ``HeteroData``.
        num_neighbors: Neighbours to draw per node, one entry per hop (-1: all); on a
            heterogeneous graph, one list for every edge type or a dict per edge type
            (or a PyG ``NumNeighbors``).
        replace: Draw with replacement.
        subgraph_type: ``"directional"`` (the sampled edges), ``"bidirectional"`` or
            ``"induced"``, as in PyG.
        disjoint: One subgraph per seed (the output's ``batch`` maps nodes to seeds);
            temporal sampling is always disjoint.
        temporal_strategy: ``"uniform"`` or ``"last"`` (the latest neighbours).
        time_attr: A node or edge attribute of times; makes the sampling temporal.
        weight_attr: An edge attribute of non-negative weights to sample by.
        cache_dir: Folder for the graph's CSC cache file (memory-mapped and shared
            with loader workers), named by a hash of the graph; ``None`` with no
            ``cache_file`` builds the CSC in shared memory instead.
        cache_file: The CSC cache file itself, for callers that already know the
            graph's identity (saves hashing a large ``edge_index``).
        device: Where the CSC lives and sampling runs (``"cuda"`` samples on the GPU).
        seed: Seeds a private generator for reproducible draws. Each loader worker
            derives its own stream from it. ``None`` uses torch's global RNG, which
            PyTorch's DataLoader seeds per worker.
        kernel: How hops are drawn. ``"triton"``: one Triton launch per hop
            (:mod:`autotune.sampling._kernels`), no host sync until one read-back of the batch's
            sizes, on a side CUDA stream; ``"torch"``: vectorised torch ops; ``"auto"``:
            Triton on CUDA when it imports and every fanout is in ``1..256``. Whole
            batches go to the kernel (``slots``) for homogeneous, uniform, non-disjoint
            sampling; otherwise the torch path runs and, with ``"triton"``, the kernel
            draws its uniform hops of 1..256 (weighted hops stay torch ops). The two
            draw the same distribution from different random streams.
    """

    def __init__(self, data: Data | HeteroData, num_neighbors, *, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", time_attr: str | None = None,
                 weight_attr: str | None = None,
                 cache_dir: str | os.PathLike | None = None,
                 cache_file: str | os.PathLike | None = None,
                 device: torch.device | str | None = None, seed: int | None = None,
                 kernel: SamplerKernel = "auto") -> None:
        if not isinstance(data, (Data, HeteroData)):
            raise ConfigError("autotune.NeighborSampler samples Data and HeteroData graphs "
                              f"(got {type(data).__name__}: a custom feature and graph "
                              "store); pass sampling_backend='pyg' to use PyG's NeighborSampler")
        self.is_hetero = isinstance(data, HeteroData)
        self.replace, self.weight_attr = bool(replace), weight_attr
        self.subgraph_type = _subgraph_type(subgraph_type)
        self._set_time(data, time_attr, temporal_strategy)
        self.disjoint = bool(disjoint) or self.temporal
        if self.disjoint and self.subgraph_type == "induced":
            raise ValueError("'disjoint' sampling not supported for neighbor sampling with "
                             "`subgraph_type='induced'`" + (" (temporal sampling is "
                             "disjoint)" if self.temporal else ""))
        if self.temporal and weight_attr is not None:
            raise ConfigError("temporal sampling does not take edge weights, as in PyG (got "
                              f"time_attr {time_attr!r} and weight_attr {weight_attr!r})")
        self.seed = seed
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.false_negatives = 0  # negatives left on an edge after every redraw (links.py)
        if self.is_hetero:
            self.node_types, self.edge_types = data.metadata()
            self.num_nodes = {t: int(data[t].num_nodes) for t in self.node_types}
            self.num_neighbors = fanouts_per_edge_type(num_neighbors, self.edge_types)
            cscs = load_or_build_cscs(data, cache_dir, cache_file)
        else:
            self.num_nodes = int(data.num_nodes)
            self.num_neighbors = _check_num_neighbors(num_neighbors)
            cscs = {_HOMOGENEOUS_EDGE: load_or_build_csc(data, cache_dir, cache_file)}
        # slots: whole batches drawn by the kernel in fixed shapes (launch/finish, CUDA
        # graphs), for homogeneous uniform non-disjoint sampling; otherwise the torch
        # path, whose uniform hops the kernel draws when kernel is triton
        plain = not (self.is_hetero or self.disjoint or weight_attr) and \
            self.subgraph_type != "induced" and bool(self.num_neighbors)
        self.kernel = _resolve_kernel(kernel, self.device,
                                      self.num_neighbors if plain else None)
        self.slots = plain and self.kernel == "triton"
        self.cscs = {t: c.to(self.device) if self.device.type != "cpu" else c
                     for t, c in cscs.items()}
        self.weights = _csc_weights(data, weight_attr, self.cscs, self.device)
        self.times = self._time_order()
        self._reset_process_state()

    def _set_time(self, data, time_attr: str | None, strategy: str) -> None:
        self.time_attr, self.temporal_strategy = time_attr, check_strategy(strategy)
        self.node_time: dict = {}
        self.edge_time: dict = {}
        if time_attr is not None:
            node, edge = time_attribute(data, time_attr)
            self.node_time = {HOMOGENEOUS if t is None else t: v for t, v in node.items()}
            self.edge_time = {_HOMOGENEOUS_EDGE if t is None else t: v
                              for t, v in edge.items()}

    @property
    def temporal(self) -> bool:
        return self.time_attr is not None

    def node_time_of(self, node_type: str | None = None) -> Tensor | None:
        """The node-level times of ``node_type`` (``None``: a homogeneous graph's)."""
        return self.node_time.get(HOMOGENEOUS if node_type is None else node_type)

    def _time_order(self) -> dict:
        """Each timed edge type's ``(time, order, steps)`` (:func:`time_ordered`)."""
        out = {}
        for edge_type, csc in self.cscs.items():
            src_time = self.node_time.get(edge_type[0])
            edge_time = self.edge_time.get(edge_type)
            if src_time is not None or edge_time is not None:
                out[edge_type] = time_ordered(csc.colptr, csc.row, csc.perm,
                                              src_time=src_time, edge_time=edge_time)
        return out

    @property
    def csc(self) -> CSCGraph:
        """The CSC of a homogeneous graph."""
        return self.cscs[_HOMOGENEOUS_EDGE]

    def _reset_process_state(self) -> None:
        self._maps: dict[str, tuple[Tensor, Tensor]] = {}
        self._edge_sets: dict = {}
        self._generator: torch.Generator | None = None
        self._generator_worker: int | None = None
        self._stream = None
        self._graphs: dict[int, tuple] = {}
        self._pinned: list[tuple[Tensor, Tensor]] = []

    # Pickling (spawned loader workers): a file-backed CSC travels as its path and
    # is memory-mapped again on the other side instead of being copied.
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for key in ("_maps", "_edge_sets", "_generator", "_generator_worker", "_stream",
                    "_graphs", "_pinned"):
            state.pop(key, None)
        state["cscs"] = {t: c.path if c.path is not None else c for t, c in self.cscs.items()}
        return state

    def __setstate__(self, state: dict) -> None:
        state["cscs"] = {t: CSCGraph.load(c) if isinstance(c, Path) else c
                         for t, c in state["cscs"].items()}
        self.__dict__.update(state)
        self._reset_process_state()

    @property
    def edge_permutation(self) -> Tensor | None | dict:
        if self.is_hetero:
            return {t: c.perm for t, c in self.cscs.items()}
        return self.csc.perm

    def _rng(self) -> torch.Generator | None:
        if self.seed is None:
            return None
        info = torch.utils.data.get_worker_info()
        worker = -1 if info is None else info.id
        if self._generator is None or self._generator_worker != worker:
            self._generator = torch.Generator(device=self.device)
            self._generator.manual_seed(self.seed * 1_000_003 + worker + 1)
            self._generator_worker = worker
        return self._generator

    def _scratch(self, node_type: str = HOMOGENEOUS) -> tuple[Tensor, Tensor]:
        # A global-to-local id map (-1 where unset) and the dedup scratch of
        # unique_first_seen, per node type: allocated once per process and reset
        # after each batch on the touched entries only. Entry n absorbs empty slots.
        if node_type not in self._maps:
            n = (self.num_nodes[node_type] if self.is_hetero else self.num_nodes) + 1
            self._maps[node_type] = (
                torch.full((n,), -1, dtype=torch.long, device=self.device),
                torch.full((n,), UNSET, dtype=torch.long, device=self.device))
        return self._maps[node_type]

    def edge_set(self, edge_type=None):
        """The graph's edges of ``edge_type`` as a membership test (None: not a type
        of this graph), for negative sampling."""
        key = _HOMOGENEOUS_EDGE if edge_type is None else tuple(edge_type)
        if key not in self.cscs:
            return None
        if key not in self._edge_sets:
            csc = self.cscs[key]
            num_src = self.num_nodes[key[0]] if self.is_hetero else self.num_nodes
            self._edge_sets[key] = EdgeSet(csc.colptr, csc.row, num_src)
        return self._edge_sets[key]

    def sample(self, seeds: Tensor) -> SamplerOutput:
        """Samples the multi-hop neighbourhood of ``seeds`` (global node ids)."""
        if not self.slots:
            return self._sample(seeds)
        return self.finish(self.launch(seeds))

    def launch(self, seeds: Tensor) -> Launched:
        """Queues a batch's sampling on the GPU and returns at once; :meth:`finish`
        waits for it. :class:`autotune.sampling.LookaheadNodeLoader` launches the next
        batch before it finishes this one, so the wait finds the work done.

        The work runs on a side stream of the highest priority: it overlaps the
        training step queued before it and its kernels go ahead of that step's. On
        CPU tensors (the kernel in Triton's interpreter) the batch is drawn at once."""
        if not self.slots:
            raise ConfigError("launch() needs homogeneous, uniform, non-disjoint sampling "
                              f"with the triton kernel (got {self!r})")
        if self.device.type != "cuda":
            slots = self._draw(seeds.to(self.device, torch.long), self._hop_seeds())
            return Launched(slots, seeds.numel(), None, slots.sizes, None)
        if self._stream is None:
            _, highest = torch.cuda.Stream.priority_range()
            self._stream = torch.cuda.Stream(self.device, priority=highest)
        staging, host_sizes = self._pinned_pair()
        with torch.cuda.stream(self._stream):
            slots = self._replay(self._upload(seeds, staging)).clone()
            host_sizes.copy_(slots.sizes, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._stream)
        return Launched(slots, seeds.numel(), done, host_sizes, (staging, host_sizes))

    def finish(self, launched: Launched) -> SamplerOutput:
        """The batch's one host sync: waiting for its sizes (its work alone, not the
        device's); then views of the filled part of its buffers."""
        if launched.done is None:  # drawn at once, on the CPU
            return _output(launched.num_seeds, launched.slots, launched.host_sizes.tolist(),
                           len(self.num_neighbors))
        launched.done.synchronize()
        main = torch.cuda.current_stream(self.device)
        main.wait_event(launched.done)
        out = _output(launched.num_seeds, launched.slots, launched.host_sizes.tolist(),
                      len(self.num_neighbors))
        self._pinned.append(launched.pinned)  # its copies are done: free for a new launch
        for tensor in (out.node, out.row, out.col, out.edge):
            tensor.record_stream(main)  # allocated on the side stream, used on the main one
        return out

    def _pinned_pair(self) -> tuple[Tensor, Tensor]:
        """A pinned seed buffer and a pinned sizes buffer that no launched batch uses:
        :meth:`finish` gives a batch's pair back once its copies are done (a batch
        never finished keeps its pair)."""
        if self._pinned:
            return self._pinned.pop()
        return (torch.empty(0, dtype=torch.long, pin_memory=True),
                torch.empty(2 * len(self.num_neighbors), dtype=torch.long, pin_memory=True))

    def _upload(self, seeds: Tensor, staging: Tensor) -> Tensor:
        """Seeds to the GPU through pinned ``staging``: a pageable copy waits for the
        stream, and asking ``is_pinned()`` each call was itself slow on a GPU's host
        (docs/gpu.md, "Figures behind the code")."""
        if seeds.is_cuda:
            return seeds.long()
        if staging.numel() < seeds.numel():
            staging.set_(torch.empty(seeds.numel(), dtype=torch.long, pin_memory=True))
        part = staging[:seeds.numel()]
        part.copy_(seeds)
        return part.to(self.device, non_blocking=True)

    def _hop_seeds(self, out: Tensor | None = None) -> Tensor:
        """One Philox seed per hop for the kernel, drawn on the device (no sync)."""
        return torch.randint(1 << 62, (len(self.num_neighbors),), device=self.device,
                             generator=self._rng(), out=out)

    def _draw(self, seeds: Tensor, hop_seeds: Tensor) -> Slots:
        assoc, first_pos = self._scratch()
        try:
            return draw_slots(self.csc, seeds, self.num_neighbors, self.replace, hop_seeds,
                              assoc, first_pos)
        except BaseException:
            assoc.fill_(-1)
            first_pos.fill_(UNSET)
            raise

    def _replay(self, seeds: Tensor) -> Slots:
        """:meth:`_draw` as a CUDA graph, captured once per batch size: a batch's many
        small kernels cost milliseconds to launch one by one, one graph launch a few
        microseconds (docs/gpu.md, "Figures behind the code"). Every shape depends on
        the seed count alone, so a graph replays any batch of that size."""
        graphed = self._graphs.get(seeds.numel())
        if graphed is None:
            if len(self._graphs) >= MAX_GRAPHS:
                return self._draw(seeds, self._hop_seeds())
            graphed = self._graphs[seeds.numel()] = self._capture(seeds)
        graph, static_seeds, static_hop_seeds, slots = graphed
        static_seeds.copy_(seeds)
        self._hop_seeds(out=static_hop_seeds)
        graph.replay()
        return slots

    def _capture(self, seeds: Tensor) -> tuple:
        static_seeds, static_hop_seeds = seeds.clone(), self._hop_seeds()
        self._draw(static_seeds, static_hop_seeds)  # warm-up: compiles, allocates workspaces
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self._stream):
            slots = self._draw(static_seeds, static_hop_seeds)
        return graph, static_seeds, static_hop_seeds, slots

    def _sample(self, seeds: Tensor | dict[str, Tensor],
                seed_time: Tensor | dict | None = None) -> SamplerOutput | HeteroSamplerOutput:
        """The torch path: seeds as a tensor (homogeneous) or a dict per node type, with
        their times when temporal (``None``: each seed node's own); its uniform hops go
        to the Triton kernel when the kernel is triton."""
        if self.slots:
            return self.sample(seeds)
        if not isinstance(seeds, dict):
            seeds = {HOMOGENEOUS: seeds}
        seeds = {t: s.to(self.device, torch.long) for t, s in seeds.items()}
        types = self.node_types if self.is_hetero else [HOMOGENEOUS]
        maps = {t: KeyMap(self._num(t), self.device) if self.disjoint else
                NodeMap(*self._scratch(t)) for t in types}
        fanouts = self.num_neighbors if self.is_hetero else \
            {_HOMOGENEOUS_EDGE: self.num_neighbors}
        relations = {t: Relation(c.colptr, c.row, None if self.weights is None
                                 else self.weights[t], *self.times.get(t, (None, None, 0)))
                     for t, c in self.cscs.items()}
        temporal = None
        if self.temporal:
            if isinstance(seed_time, Tensor) and self.is_hetero:
                seed_time = {t: seed_time for t in seeds}
            temporal = Temporal(seed_times(self, seeds, seed_time), self.temporal_strategy)
        typed = sample_typed(relations, fanouts, seeds, maps, replace=self.replace,
                             generator=self._rng(), kernel=self.kernel == "triton",
                             temporal=temporal)
        if self.subgraph_type == "induced":
            typed.row, typed.col, typed.edge = induced_edges(relations, typed.node)
            typed.num_sampled_edges = None
        if self.is_hetero:
            return HeteroSamplerOutput(
                node=typed.node, row=typed.row, col=typed.col, edge=typed.edge,
                batch=typed.batch, num_sampled_nodes=typed.num_sampled_nodes,
                num_sampled_edges=typed.num_sampled_edges)
        edge = _HOMOGENEOUS_EDGE
        return SamplerOutput(
            node=typed.node[HOMOGENEOUS], row=typed.row[edge], col=typed.col[edge],
            edge=typed.edge[edge], batch=None if typed.batch is None
            else typed.batch[HOMOGENEOUS],
            num_sampled_nodes=typed.num_sampled_nodes[HOMOGENEOUS],
            num_sampled_edges=None if typed.num_sampled_edges is None
            else typed.num_sampled_edges[edge])

    def _num(self, node_type: str) -> int:
        return self.num_nodes[node_type] if self.is_hetero else self.num_nodes

    def sample_from_nodes(self, index: NodeSamplerInput,
                          **kwargs) -> SamplerOutput | HeteroSamplerOutput:
        if index.time is not None and not self.temporal:
            raise ConfigError("seed times (input_time) need temporal sampling: pass "
                              "time_attr, the node or edge attribute that holds times")
        if self.is_hetero != (index.input_type is not None):
            raise ConfigError("seed nodes need a node type on a heterogeneous graph and "
                              f"none on a homogeneous one (got input type "
                              f"{index.input_type!r})")
        seeds = index.node if index.input_type is None else {index.input_type: index.node}
        out = self._sample(seeds, index.time)
        out.metadata = (index.input_id, index.time)
        return self._bidirected(out)

    def _bidirected(self, out):
        """``out`` with every sampled edge's reverse added under
        ``subgraph_type="bidirectional"`` (PyG's ``to_bidirectional``)."""
        if self.subgraph_type == "bidirectional":
            return out.to_bidirectional(keep_orig_edges=False)
        return out

    def sample_from_edges(self, index: EdgeSamplerInput,
                          neg_sampling: NegativeSampling | None = None
                          ) -> SamplerOutput | HeteroSamplerOutput:
        """PyG's ``LinkLoader`` semantics: see :mod:`autotune.sampling._links`."""
        return self._bidirected(sample_from_edges(self, index, neg_sampling))

    def __repr__(self) -> str:
        extra = "".join(f", {name}=True" for name in ("disjoint",) if getattr(self, name))
        if self.subgraph_type != "directional":
            extra += f", subgraph_type={self.subgraph_type!r}"
        if self.temporal:
            extra += (f", time_attr={self.time_attr!r}, "
                      f"temporal_strategy={self.temporal_strategy!r}")
        weight = f", weight_attr={self.weight_attr!r}" if self.weight_attr else ""
        return (f"{self.__class__.__name__}(num_neighbors={self.num_neighbors}, "
                f"replace={self.replace}{extra}{weight}, device={self.device}, "
                f"kernel={self.kernel})")


def fanouts_per_edge_type(num_neighbors, edge_types: list[EdgeType]
                          ) -> dict[EdgeType, list[int]]:
    """A heterogeneous graph's fanout per edge type, as PyG's ``NumNeighbors`` reads
    it: one list for all types, or a dict by edge type (tuple or ``"a__rel__b"``),
    with a ``NumNeighbors(values, default=...)`` default for the types it omits."""
    from torch_geometric.sampler.base import NumNeighbors

    default = None
    if isinstance(num_neighbors, NumNeighbors):
        num_neighbors, default = num_neighbors.values, num_neighbors.default
    if not isinstance(num_neighbors, dict):
        shared = _check_num_neighbors(num_neighbors)
        return {t: list(shared) for t in edge_types}
    names = {"__".join(t): t for t in edge_types}
    out: dict[EdgeType, list[int]] = {}
    for key, values in num_neighbors.items():
        name = "__".join(key) if isinstance(key, tuple) else str(key)
        if name not in names:
            raise ConfigError(f"num_neighbors names edge type {key!r}, which the graph "
                              f"lacks; its edge types: {', '.join(map(str, edge_types))}")
        out[names[name]] = _check_num_neighbors(values)
    for edge_type in edge_types:
        if edge_type not in out:
            if default is None:
                raise ConfigError(f"num_neighbors has no entry for edge type {edge_type} "
                                  "and no default; give every edge type a list")
            out[edge_type] = _check_num_neighbors(default)
    hops = {len(v) for v in out.values()}
    if len(hops) > 1:  # PyG's wording, which its users' code may match
        raise ConfigError("Number of hops must be the same across all edge types (got "
                          f"{len(hops)} different number of hops: {sorted(hops)})")
    return {t: out[t] for t in edge_types}


def _csc_weights(data, weight_attr: str | None, cscs: dict, device: torch.device):
    """Each edge type's weights in CSC order, or ``None`` when unweighted."""
    if weight_attr is None:
        return None
    out = {}
    for edge_type, csc in cscs.items():
        store = data if edge_type == _HOMOGENEOUS_EDGE else data[edge_type]
        if weight_attr not in store:
            raise ConfigError(f"weight_attr {weight_attr!r} is not an attribute of the edges"
                              f"{'' if store is data else ' of ' + str(edge_type)} (got "
                              f"{', '.join(sorted(store.keys())) or 'none'})")
        weight = store[weight_attr].view(-1)
        if weight.numel() != csc.num_edges or bool((weight < 0).any()):
            raise ConfigError(f"weight_attr {weight_attr!r} must hold one non-negative "
                              f"weight per edge (got {weight.numel()} values for "
                              f"{csc.num_edges} edges)")
        out[edge_type] = (weight if csc.perm is None else weight[csc.perm]).to(device)
    return out


def _resolve_kernel(kernel: str, device: torch.device, num_neighbors: list[int] | None) -> str:
    """``num_neighbors`` is ``None`` for heterogeneous, disjoint or weighted sampling:
    the torch path, whose uniform hops of 1..256 the kernel draws where it runs."""
    if kernel not in SAMPLER_KERNELS:
        raise ConfigError(f"kernel must be one of {', '.join(SAMPLER_KERNELS)} (got {kernel!r})")
    fits = all(kernels.usable(device, k) for k in (num_neighbors or [1]))
    if kernel == "auto":
        return "triton" if fits and device.type == "cuda" else "torch"
    if kernel == "triton" and not fits:
        raise BackendUnavailableError(
            f"kernel 'triton' cannot sample {num_neighbors} on {device}: it needs the triton "
            f"package ({'present' if kernels.triton_available() else 'missing'}), a CUDA "
            f"device or TRITON_INTERPRET=1 for CPU tensors, and fanouts in 1..{kernels.MAX_K}; "
            "use kernel 'torch'")
    return kernel


def _output(num_seeds: int, slots: Slots, sizes: list[int], hops: int) -> SamplerOutput:
    """The filled part of each slot buffer (``sizes`` read back already)."""
    nodes, edges = num_seeds + sum(sizes[:hops]), sum(sizes[hops:])
    row, col, edge = slots.edges[:, :edges]
    return SamplerOutput(node=slots.node[:nodes], row=row, col=col, edge=edge, batch=None,
                         num_sampled_nodes=[num_seeds] + sizes[:hops],
                         num_sampled_edges=sizes[hops:])


def _check_num_neighbors(num_neighbors: Sequence[int]) -> list[int]:
    """One int per hop, each >= 0 or -1 (all); ``[]`` is zero hops, the seeds alone."""
    values = list(num_neighbors) if not isinstance(num_neighbors, (str, bytes, int)) \
        else None
    if values is None or not all(isinstance(k, int) and (k >= 0 or k == -1)
                                 for k in values):
        raise ConfigError("num_neighbors must be a list of ints >= 0 or -1, one per hop "
                          f"(got {num_neighbors!r})")
    return values


def _subgraph_type(value) -> str:
    """PyG's ``SubgraphType`` (or its name) as a plain string."""
    name = getattr(value, "value", value)
    if name not in ("directional", "bidirectional", "induced"):
        raise ConfigError("subgraph_type must be one of directional, bidirectional, "
                          f"induced (got {value!r})")
    return name


def native_backend() -> str | None:
    """The native library PyG's own NeighborSampler would use, or ``None``."""
    import torch_geometric.typing as pyg_typing

    if pyg_typing.WITH_PYG_LIB:
        return "pyg-lib"
    if pyg_typing.WITH_TORCH_SPARSE:
        return "torch-sparse"
    return None


def resolve_backend(backend: str) -> Literal["builtin", "pyg"]:
    """``auto`` prefers PyG's native sampler when pyg-lib or torch-sparse imports."""
    if backend not in SAMPLING_BACKENDS:
        raise ConfigError(f"sampling_backend must be one of {', '.join(SAMPLING_BACKENDS)} "
                          f"(got {backend!r})")
    if backend == "builtin":
        return "builtin"
    if native_backend() is not None:
        return "pyg"
    if backend == "auto":
        return "builtin"
    raise BackendUnavailableError(
        "sampling_backend 'pyg' needs pyg-lib or torch-sparse, and neither imports; install one "
        "(pyg-lib wheels: https://data.pyg.org/whl/, or 'pip install torch-scatter "
        "torch-sparse' to build from source) or use sampling_backend builtin")


def make_sampler(data: Data | HeteroData, num_neighbors, *, backend: str = "auto",
                 replace: bool = False, disjoint: bool = False,
                 weight_attr: str | None = None, cache_dir: str | os.PathLike | None = None,
                 cache_file: str | os.PathLike | None = None,
                 device: torch.device | str | None = None,
                 seed: int | None = None, kernel: SamplerKernel = "auto",
                 time_attr: str | None = None,
                 temporal_strategy: str = "uniform") -> BaseSampler:
    """The neighbour sampler for ``backend``: "builtin", "pyg" or "auto"."""
    if resolve_backend(backend) == "pyg":
        from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler

        fanout = num_neighbors if isinstance(num_neighbors, dict) else list(num_neighbors)
        return PyGNeighborSampler(data, num_neighbors=fanout, replace=replace,
                                  disjoint=disjoint, weight_attr=weight_attr,
                                  time_attr=time_attr, temporal_strategy=temporal_strategy)
    return NeighborSampler(data, num_neighbors, replace=replace, disjoint=disjoint,
                           weight_attr=weight_attr, cache_dir=cache_dir,
                           cache_file=cache_file, device=device, seed=seed, kernel=kernel,
                           time_attr=time_attr, temporal_strategy=temporal_strategy)
