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
from typing import Callable, Literal, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    NodeSamplerInput,
    SamplerOutput,
)

from autotune.errors import AutotuneError, BackendUnavailableError, ConfigError

SamplerBackend = Literal["builtin", "pyg", "auto"]
SAMPLER_BACKENDS: tuple[str, ...] = ("builtin", "pyg", "auto")

_CSC_FORMAT = 1  # bump when the cache file layout changes
_UNSET = torch.iinfo(torch.long).max


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
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        torch.save({"format": _CSC_FORMAT, "num_nodes": self.num_nodes, "colptr": self.colptr,
                    "row": self.row, "perm": self.perm}, tmp)
        os.replace(tmp, path)

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
    to shared memory. Either way, loader workers read it without a copy."""
    if "edge_index" not in data:
        raise ConfigError("autotune.NeighborSampler needs a graph with 'edge_index' "
                          f"(got keys {sorted(data.keys())})")
    edge_index, num_nodes = data.edge_index, int(data.num_nodes)
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


def _floyd_offsets(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
    """Exact uniform k-subsets of ``range(deg[i])`` for every row at once (all deg > k).

    Floyd's algorithm: for j = deg-k .. deg-1, draw t uniformly from [0, j]
    *inclusive*; keep t unless already taken, in which case keep j."""
    m = deg.numel()
    out = torch.empty(m, k, dtype=torch.long, device=deg.device)
    rnd = torch.rand(m, k, dtype=torch.float64, device=deg.device, generator=generator)
    base = deg - k
    for p in range(k):
        j = base + p
        t = torch.minimum((rnd[:, p] * (j + 1).to(torch.float64)).long(), j)
        if p > 0:
            taken = (out[:, :p] == t.unsqueeze(1)).any(dim=1)
            t = torch.where(taken, j, t)
        out[:, p] = t
    return out


def _draw_hop(colptr: Tensor, frontier: Tensor, k: int, replace: bool,
              generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Samples in-neighbours of every frontier node. Returns, per sampled edge, the
    index of its frontier node and its CSC position; edges come grouped by frontier
    node, in frontier order."""
    start = colptr[frontier]
    deg = colptr[frontier + 1] - start
    m, device = frontier.numel(), frontier.device
    if k < 0:  # every neighbour
        owner = torch.repeat_interleave(torch.arange(m, device=device), deg)
        first = torch.cumsum(deg, 0) - deg
        offset = torch.arange(owner.numel(), device=device) - first[owner]
        return owner, start[owner] + offset
    if k == 0 or m == 0:
        empty = torch.empty(0, dtype=torch.long, device=device)
        return empty, empty
    positions = torch.arange(k, device=device).expand(m, k)
    if replace:
        rnd = torch.rand(m, k, dtype=torch.float64, device=device, generator=generator)
        offset = torch.minimum((rnd * deg.unsqueeze(1).to(torch.float64)).long(),
                               (deg - 1).clamp(min=0).unsqueeze(1))
        valid = (deg > 0).unsqueeze(1).expand(m, k)
    else:
        offset = positions.clone()
        big = deg > k
        if bool(big.any()):
            offset[big] = _floyd_offsets(deg[big], k, generator)
        valid = positions < deg.unsqueeze(1)
    owner = torch.arange(m, device=device).unsqueeze(1).expand(m, k)[valid]
    return owner, start[owner] + offset[valid]


def _unique_first_seen(ids: Tensor, first_pos: Tensor) -> Tensor:
    """The distinct values of ``ids`` in order of first occurrence, without a sort.

    ``first_pos`` is a per-node scratch vector holding ``_UNSET`` everywhere; it
    is left that way on return."""
    if ids.numel() == 0:
        return ids
    pos = torch.arange(ids.numel(), device=ids.device)
    first_pos.scatter_reduce_(0, ids, pos, reduce="amin")
    new = ids[first_pos[ids] == pos]
    first_pos[new] = _UNSET
    return new


class NeighborSampler(BaseSampler):
    r"""Uniform neighbour sampling for homogeneous graphs, a drop-in for PyG's
    :class:`torch_geometric.sampler.NeighborSampler` defaults:

    * per hop, each frontier node gets ``min(deg, k)`` distinct in-neighbours
      (sources ``j`` of edges ``j -> i``), drawn uniformly without replacement;
      ``k = -1`` takes all of them and ``replace=True`` draws ``k`` with replacement;
    * the output is not disjoint: seeds first, then new nodes in hop order;
    * ``row``/``col`` are local ids, ``row`` the source, ``col`` the target.

    Example::

        from torch_geometric.loader import NodeLoader
        import autotune

        sampler = autotune.NeighborSampler(data, num_neighbors=[25, 10])
        loader = NodeLoader(data, node_sampler=sampler, input_nodes=data.train_mask,
                            batch_size=1024, num_workers=2, shuffle=True)

    Args:
        data: The graph, a :class:`torch_geometric.data.Data` with ``edge_index``.
        num_neighbors: Neighbours to draw per node, one entry per hop (-1: all).
        replace: Draw with replacement.
        cache_dir: Folder for the graph's CSC cache file (memory-mapped and shared
            with loader workers), named by a hash of the graph; ``None`` with no
            ``cache_file`` builds the CSC in shared memory instead.
        cache_file: The CSC cache file itself, for callers that already know the
            graph's identity (saves hashing a large ``edge_index``).
        device: Where the CSC lives and sampling runs (``"cuda"`` samples on the GPU).
        seed: Seeds a private generator for reproducible draws. Each loader worker
            derives its own stream from it. ``None`` uses torch's global RNG, which
            PyTorch's DataLoader seeds per worker.
    """

    def __init__(self, data: Data, num_neighbors: Sequence[int], *, replace: bool = False,
                 cache_dir: str | os.PathLike | None = None,
                 cache_file: str | os.PathLike | None = None,
                 device: torch.device | str | None = None, seed: int | None = None) -> None:
        if not isinstance(data, Data):
            raise ConfigError("autotune.NeighborSampler supports homogeneous 'Data' graphs "
                              f"(got {type(data).__name__}); use PyG's NeighborSampler")
        self.num_neighbors = _check_num_neighbors(num_neighbors)
        self.replace = bool(replace)
        self.seed = seed
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        csc = load_or_build_csc(data, cache_dir, cache_file)
        self.csc = csc.to(self.device) if self.device.type != "cpu" else csc
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        self._assoc: Tensor | None = None
        self._first_pos: Tensor | None = None
        self._generator: torch.Generator | None = None
        self._generator_worker: int | None = None

    # Pickling (spawned loader workers): a file-backed CSC travels as its path and
    # is memory-mapped again on the other side instead of being copied.
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for key in ("_assoc", "_first_pos", "_generator", "_generator_worker"):
            state.pop(key, None)
        if self.csc.path is not None:
            state["csc"] = self.csc.path
        return state

    def __setstate__(self, state: dict) -> None:
        if isinstance(state["csc"], Path):
            state["csc"] = CSCGraph.load(state["csc"])
        self.__dict__.update(state)
        self._reset_process_state()

    @property
    def edge_permutation(self) -> Tensor | None:
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

    def _scratch(self) -> tuple[Tensor, Tensor]:
        # A global-to-local id map (-1 where unset) and the dedup scratch of
        # _unique_first_seen: two tensors per process, allocated once and reset
        # after each batch on the touched entries only.
        if self._assoc is None:
            n = self.csc.num_nodes
            self._assoc = torch.full((n,), -1, dtype=torch.long, device=self.device)
            self._first_pos = torch.full((n,), _UNSET, dtype=torch.long, device=self.device)
        return self._assoc, self._first_pos

    def sample(self, seeds: Tensor) -> SamplerOutput:
        """Samples the multi-hop neighbourhood of ``seeds`` (global node ids)."""
        seeds = seeds.to(self.device, torch.long)
        (assoc, first_pos), generator = self._scratch(), self._rng()
        nodes, rows, cols, edges = [seeds], [], [], []
        assoc[seeds] = torch.arange(seeds.numel(), device=self.device)
        try:
            frontier, frontier_start, total = seeds, 0, seeds.numel()
            for k in self.num_neighbors:
                owner, edge = _draw_hop(self.csc.colptr, frontier, k, self.replace, generator)
                src = self.csc.row[edge]
                new = _unique_first_seen(src[assoc[src] < 0], first_pos)
                assoc[new] = torch.arange(total, total + new.numel(), device=self.device)
                rows.append(assoc[src])
                cols.append(owner + frontier_start)
                edges.append(edge)
                nodes.append(new)
                frontier, frontier_start, total = new, total, total + new.numel()
        finally:
            node = torch.cat(nodes)
            assoc[node] = -1
        return SamplerOutput(
            node=node, row=torch.cat(rows), col=torch.cat(cols), edge=torch.cat(edges),
            batch=None, num_sampled_nodes=[n.numel() for n in nodes],
            num_sampled_edges=[e.numel() for e in edges])

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs) -> SamplerOutput:
        if index.time is not None:
            raise ConfigError("autotune.NeighborSampler does not do temporal sampling "
                              "(got seed times); use PyG's NeighborSampler")
        out = self.sample(index.node)
        out.metadata = (index.input_id, index.time)
        return out

    def sample_from_edges(self, index: EdgeSamplerInput, neg_sampling=None) -> SamplerOutput:
        raise ConfigError("autotune.NeighborSampler samples from seed nodes only "
                          "(NodeLoader); use PyG's NeighborSampler for LinkLoader")

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_neighbors={self.num_neighbors}, "
                f"replace={self.replace}, device={self.device})")


def _check_num_neighbors(num_neighbors: Sequence[int]) -> list[int]:
    values = list(num_neighbors) if not isinstance(num_neighbors, (str, bytes)) else None
    if not values or not all(isinstance(k, int) and (k >= 0 or k == -1) for k in values):
        raise ConfigError("num_neighbors must be a non-empty list of ints >= 0 or -1 "
                          f"(got {num_neighbors!r})")
    return values


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
    if backend not in SAMPLER_BACKENDS:
        raise ConfigError(f"sampler must be one of {', '.join(SAMPLER_BACKENDS)} "
                          f"(got {backend!r})")
    if backend == "builtin":
        return "builtin"
    if native_backend() is not None:
        return "pyg"
    if backend == "auto":
        return "builtin"
    raise BackendUnavailableError(
        "sampler 'pyg' needs pyg-lib or torch-sparse, and neither imports; install one "
        "(pyg-lib wheels: https://data.pyg.org/whl/, or 'pip install torch-scatter "
        "torch-sparse' to build from source) or use --sampler builtin")


def make_sampler(data: Data, num_neighbors: Sequence[int], *, backend: str = "auto",
                 replace: bool = False, cache_dir: str | os.PathLike | None = None,
                 cache_file: str | os.PathLike | None = None,
                 device: torch.device | str | None = None,
                 seed: int | None = None) -> BaseSampler:
    """The neighbour sampler for ``backend``: "builtin", "pyg" or "auto"."""
    if resolve_backend(backend) == "pyg":
        from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler

        return PyGNeighborSampler(data, num_neighbors=list(num_neighbors), replace=replace)
    return NeighborSampler(data, num_neighbors, replace=replace, cache_dir=cache_dir,
                           cache_file=cache_file, device=device, seed=seed)


def star_forest(num_stars: int, leaves: int) -> Data:
    """``num_stars`` disjoint stars: node ``i < num_stars`` has ``leaves`` in-neighbours,
    stored in CSC order. A test bed for uniformity."""
    centers = torch.arange(num_stars)
    leaf = num_stars + torch.arange(num_stars * leaves)
    return Data(edge_index=torch.stack([leaf, centers.repeat_interleave(leaves)]),
                num_nodes=num_stars * (leaves + 1))


def uniformity_chi_square(sample_positions: Callable[[Tensor], Tensor], *,
                          num_stars: int = 2000, leaves: int = 40, rounds: int = 10) -> float:
    """Pearson's chi-square (``leaves - 1`` degrees of freedom) of how often each of a
    star's in-neighbours is drawn. ``sample_positions(centers)`` samples one hop from
    the star centres of :func:`star_forest` and returns each drawn edge's position
    within its star (0 .. leaves - 1). 2,000 stars x 10 rounds = 20,000 draws."""
    counts = torch.zeros(leaves, dtype=torch.float64)
    for _ in range(rounds):
        pos = sample_positions(torch.arange(num_stars))
        counts += torch.bincount(pos.cpu(), minlength=leaves).double()
    expected = counts.sum() / leaves
    return float(((counts - expected) ** 2 / expected).sum())
