"""Multi-hop neighbour sampling with torch ops, for any number of node and edge types.

One hop of one edge type ``(src, rel, dst)`` draws in-neighbours (``src`` nodes)
of the ``dst`` frontier from that type's CSC, all frontier nodes at once; the only
Python loops run over hops, edge types and the k fanout positions, never over nodes
or edges. A homogeneous graph is the one-type case. The sampled nodes of each type
are kept in a :class:`NodeMap` (one batch, shared subgraph) or a :class:`KeyMap`
(``disjoint``: one subgraph per seed, a node keyed by ``seed * num_nodes + node``).

:mod:`autotune.sampling._neighbor` builds the CSCs and wraps the result into PyG's
``SamplerOutput`` / ``HeteroSamplerOutput``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from autotune.sampling._kernels import draw_hop_slots

UNSET = torch.iinfo(torch.long).max
MAX_K = 256  # the largest fanout the Triton hop kernel draws (autotune.sampling._kernels.MAX_K)

EdgeType = tuple[str, str, str]


def floyd_offsets(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
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


def csc_columns(colptr: Tensor) -> Tensor:
    """The column (target node) of every CSC position."""
    return torch.repeat_interleave(torch.arange(colptr.numel() - 1, device=colptr.device),
                                   colptr[1:] - colptr[:-1])


def _every_neighbour(start: Tensor, deg: Tensor) -> tuple[Tensor, Tensor]:
    m = deg.numel()
    owner = torch.repeat_interleave(torch.arange(m, device=deg.device), deg)
    first = torch.cumsum(deg, 0) - deg
    offset = torch.arange(owner.numel(), device=deg.device) - first[owner]
    return owner, start[owner] + offset


def draw_hop(colptr: Tensor, row: Tensor | None, frontier: Tensor, k: int, replace: bool,
             generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Samples in-neighbours of every frontier node uniformly. Returns, per sampled
    edge, the index of its frontier node and its CSC position; edges come grouped by
    frontier node, in frontier order. (``row`` is unused: the signature is
    :func:`kernel_hop`'s.)"""
    start = colptr[frontier]
    return draw_range(start, colptr[frontier + 1] - start, k, replace, generator)


def draw_range(start: Tensor, deg: Tensor, k: int, replace: bool,
               generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """:func:`draw_hop` over any window of positions: row ``i`` draws from
    ``start[i] .. start[i] + deg[i] - 1`` (a temporal hop's window of neighbours no
    later than the seed)."""
    m, device = start.numel(), start.device
    if k < 0:
        return _every_neighbour(start, deg)
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
            offset[big] = floyd_offsets(deg[big], k, generator)
        valid = positions < deg.unsqueeze(1)
    owner = torch.arange(m, device=device).unsqueeze(1).expand(m, k)[valid]
    return owner, start[owner] + offset[valid]


def kernel_hop(colptr: Tensor, row: Tensor, frontier: Tensor, k: int, replace: bool,
               generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """:func:`draw_hop` by the Triton hop kernel (:mod:`autotune.sampling._kernels`): the same
    distribution in one launch instead of ~k small kernels per position."""
    seed = torch.randint(1 << 62, (1,), device=frontier.device, generator=generator)
    edge, _ = draw_hop_slots(colptr, row, frontier, k, replace, seed)
    owner = torch.arange(frontier.numel(), device=frontier.device).repeat_interleave(k)
    keep = edge >= 0
    return owner[keep], edge[keep]


def draw_weighted_hop(colptr: Tensor, weight: Tensor, frontier: Tensor, k: int,
                      replace: bool, generator: torch.Generator | None
                      ) -> tuple[Tensor, Tensor]:
    """:func:`draw_hop` with edge weights (in CSC order): with replacement, each of k
    draws picks edge ``e`` with probability ``w_e / sum(w)``; without, an exact
    weighted draw without replacement (Efraimidis-Spirakis: the k largest
    ``log(u) / w``). Edges of weight 0 are never drawn."""
    start = colptr[frontier]
    deg = colptr[frontier + 1] - start
    owner, pos = _every_neighbour(start, deg)
    if k < 0 or owner.numel() == 0:
        return owner, pos
    w = weight[pos].to(torch.float64)
    m, device = frontier.numel(), frontier.device
    if replace:
        cum = torch.cumsum(w, 0)
        end = torch.cumsum(deg, 0)  # one past each node's last candidate
        total = torch.zeros(m, dtype=torch.float64, device=device).index_add_(0, owner, w)
        before = torch.where(end - deg > 0, cum[(end - deg - 1).clamp(min=0)], 0.0)
        u = torch.rand(m, k, dtype=torch.float64, device=device, generator=generator)
        pick = torch.searchsorted(cum, before.unsqueeze(1) + u * total.unsqueeze(1),
                                  right=True)
        pick = torch.minimum(pick, (end - 1).clamp(min=0).unsqueeze(1))
        valid = (total > 0).unsqueeze(1).expand(m, k)
        picks = pick[valid]
        return owner[picks], pos[picks]
    u = torch.rand(w.numel(), dtype=torch.float64, device=device, generator=generator)
    key = torch.where(w > 0, torch.log(u) / w, -torch.inf)
    order = torch.argsort(key, descending=True, stable=True)
    order = order[torch.argsort(owner[order], stable=True)]  # by owner, best key first
    rank = torch.arange(order.numel(), device=device) - (torch.cumsum(deg, 0) - deg)[owner]
    keep = order[(rank < k) & (w[order] > 0)]
    keep = keep.sort().values  # grouped by owner, in CSC order
    return owner[keep], pos[keep]


def unique_first_seen(ids: Tensor, first_pos: Tensor) -> Tensor:
    """The distinct values of ``ids`` in order of first occurrence, without a sort.

    ``first_pos`` is a per-node scratch vector holding ``UNSET`` everywhere; it
    is left that way on return."""
    if ids.numel() == 0:
        return ids
    pos = torch.arange(ids.numel(), device=ids.device)
    first_pos.scatter_reduce_(0, ids, pos, reduce="amin")
    new = ids[first_pos[ids] == pos]
    first_pos[new] = UNSET
    return new


class NodeMap:
    """The sampled nodes of one type in a shared (non-disjoint) batch: a global-to-
    local map over every node of the type, reset on the touched entries after the
    batch (two scratch vectors, allocated once per process)."""

    def __init__(self, assoc: Tensor, first_pos: Tensor) -> None:
        self.assoc, self.first_pos = assoc, first_pos
        self.nodes: list[Tensor] = []
        self.total = 0

    def seed(self, ids: Tensor) -> Tensor:
        """Seeds take local ids ``0 .. len - 1`` as given, duplicates included, so a
        batch's first ``len(seeds)`` nodes are its seeds, in order."""
        self.assoc[ids] = torch.arange(ids.numel(), device=ids.device)
        self.nodes.append(ids)
        self.total = ids.numel()
        return ids

    def add(self, ids: Tensor) -> Tensor:
        """Local ids of ``ids``; new ones are numbered in first-seen order."""
        new = unique_first_seen(ids[self.assoc[ids] < 0], self.first_pos)
        self.assoc[new] = torch.arange(self.total, self.total + new.numel(), device=ids.device)
        self.total += new.numel()
        self.nodes.append(new)
        return self.assoc[ids]

    def node_of(self, ids: Tensor) -> Tensor:
        return ids

    def release(self) -> None:
        if self.nodes:
            self.assoc[torch.cat(self.nodes)] = -1


class KeyMap:
    """The sampled nodes of one type in a disjoint batch: a node of seed ``b``'s
    subgraph is the key ``b * n + node``, looked up in a sorted key vector."""

    def __init__(self, num_nodes: int, device: torch.device) -> None:
        self.n = num_nodes
        self.keys = torch.empty(0, dtype=torch.long, device=device)
        self.local = torch.empty(0, dtype=torch.long, device=device)
        self.nodes: list[Tensor] = []
        self.total = 0

    def seed(self, ids: Tensor, first: int = 0) -> Tensor:
        """Seed ``i`` opens subgraph ``first + i`` (``first``: the seeds of the node
        types before this one, as PyG numbers them)."""
        keys = ids + torch.arange(first, first + ids.numel(), device=ids.device) * self.n
        self.add(keys)
        return keys

    def _lookup(self, keys: Tensor) -> Tensor:
        if self.keys.numel() == 0:
            return torch.full_like(keys, -1)
        at = torch.searchsorted(self.keys, keys).clamp(max=self.keys.numel() - 1)
        return torch.where(self.keys[at] == keys, self.local[at], -1)

    def add(self, keys: Tensor) -> Tensor:
        unseen = keys[self._lookup(keys) < 0]
        distinct, inverse = torch.unique(unseen, return_inverse=True)
        first = torch.full((distinct.numel(),), UNSET, dtype=torch.long, device=keys.device)
        first.scatter_reduce_(0, inverse, torch.arange(unseen.numel(), device=keys.device),
                              reduce="amin")
        new = distinct[torch.argsort(first)]
        ids = torch.arange(self.total, self.total + new.numel(), device=keys.device)
        self.keys, order = torch.sort(torch.cat([self.keys, new]))
        self.local = torch.cat([self.local, ids])[order]
        self.total += new.numel()
        self.nodes.append(new)
        return self._lookup(keys)

    def node_of(self, keys: Tensor) -> Tensor:
        return keys % self.n

    def subgraph_of(self, keys: Tensor) -> Tensor:
        return keys // self.n

    def release(self) -> None:
        pass


@dataclass
class Typed:
    """What one batch sampled, per node type and per edge type (``row``, ``col`` and
    ``edge`` hold a list of per-hop parts until :func:`_finish` joins them)."""

    node: dict[str, Tensor] = field(default_factory=dict)
    batch: dict[str, Tensor] | None = None
    row: dict[EdgeType, Tensor] = field(default_factory=dict)
    col: dict[EdgeType, Tensor] = field(default_factory=dict)
    edge: dict[EdgeType, Tensor] = field(default_factory=dict)
    num_sampled_nodes: dict[str, list[int]] = field(default_factory=dict)
    num_sampled_edges: dict[EdgeType, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Relation:
    """One edge type's CSC arrays (and edge weights in CSC order, if weighted). A
    temporal relation has ``time``, each neighbour's time (its node's or its edge's),
    sorted within every column, and ``order``, the CSC position each sorted entry
    came from (:mod:`autotune.sampling._temporal` builds them); ``steps`` binary-search steps
    cover the largest column."""

    colptr: Tensor
    row: Tensor
    weight: Tensor | None = None
    time: Tensor | None = None
    order: Tensor | None = None
    steps: int = 0


@dataclass(frozen=True)
class Temporal:
    """A temporal draw: each subgraph's seed time (subgraph ``b`` of a disjoint batch
    is ``seed_time[b]``) and PyG's ``temporal_strategy``: ``"uniform"`` draws among
    the neighbours no later than the seed, ``"last"`` takes the latest of them."""

    seed_time: Tensor
    strategy: str = "uniform"


def not_later(time: Tensor, start: Tensor, end: Tensor, limit: Tensor, steps: int) -> Tensor:
    """Per row, the end of the run of ``time[start:end]`` (sorted) that is ``<= limit``:
    a binary search over every row at once, ``steps`` rounds."""
    if time.numel() == 0:
        return start
    lo, hi = start.clone(), end.clone()
    for _ in range(steps):
        active = lo < hi
        mid = torch.div(lo + hi, 2, rounding_mode="floor").clamp(max=time.numel() - 1)
        later = time[mid] > limit
        hi = torch.where(active & later, mid, hi)
        lo = torch.where(active & ~later, mid + 1, lo)
    return lo


def sample_typed(relations: dict[EdgeType, Relation], fanouts: dict[EdgeType, list[int]],
                 seeds: dict[str, Tensor], maps: dict[str, NodeMap | KeyMap], *,
                 replace: bool, generator: torch.Generator | None,
                 kernel: bool = False, temporal: Temporal | None = None) -> Typed:
    """Samples ``len(fanout)`` hops from ``seeds`` (global ids per node type). Each
    hop draws, for every edge type, from the frontier of its target type: the nodes
    that type gained in the hop before. ``maps`` holds one empty map per node type;
    this function releases them. ``kernel``: uniform hops of 1..256 draws go to the
    Triton hop kernel. ``temporal`` (disjoint maps only) keeps every relation that
    has times to the neighbours no later than their subgraph's seed."""
    out = Typed()
    draw = _HopDraw(replace, generator, kernel, temporal)
    try:
        frontier, first = {}, 0
        for t, ids in seeds.items():
            if isinstance(maps[t], KeyMap):
                frontier[t] = (maps[t].seed(ids, first), 0)
                first += ids.numel()
            else:
                frontier[t] = (maps[t].seed(ids), 0)
        for hop in range(len(next(iter(fanouts.values()))) if fanouts else 0):
            starts = {t: (m.total, len(m.nodes)) for t, m in maps.items()}
            for edge_type, rel in relations.items():
                _one_relation(out, edge_type, rel, fanouts[edge_type][hop], frontier, maps,
                              draw)
            frontier = {t: (torch.cat(m.nodes[starts[t][1]:]), starts[t][0])
                        for t, m in maps.items() if m.total > starts[t][0]}
            for t, m in maps.items():
                out.num_sampled_nodes.setdefault(t, []).append(m.total - starts[t][0])
        _finish(out, maps, seeds, relations)
    finally:
        for m in maps.values():
            m.release()
    return out


@dataclass(frozen=True)
class _HopDraw:
    """How every hop of one batch draws."""

    replace: bool
    generator: torch.Generator | None
    kernel: bool
    temporal: Temporal | None

    def __call__(self, rel: Relation, keys: Tensor, dst_map, k: int) -> tuple[Tensor, Tensor]:
        """Per drawn edge, its frontier entry and its CSC position."""
        nodes = dst_map.node_of(keys)
        if rel.time is not None and self.temporal is not None:
            return self._temporal(rel, keys, nodes, dst_map, k)
        if rel.weight is not None:
            return draw_weighted_hop(rel.colptr, rel.weight, nodes, k, self.replace,
                                     self.generator)
        uniform = kernel_hop if self.kernel and 0 < k <= MAX_K else draw_hop
        return uniform(rel.colptr, rel.row, nodes, k, self.replace, self.generator)

    def _temporal(self, rel: Relation, keys: Tensor, nodes: Tensor, dst_map,
                  k: int) -> tuple[Tensor, Tensor]:
        # as pyg-lib: the window is the column's neighbours no later than the seed
        # ("last": its k latest), and the draw is uniform within it
        start, end = rel.colptr[nodes], rel.colptr[nodes + 1]
        limit = self.temporal.seed_time[dst_map.subgraph_of(keys)]
        end = not_later(rel.time, start, end, limit, rel.steps)
        if self.temporal.strategy == "last" and k >= 0:
            start = torch.maximum(start, end - k)
        owner, at = draw_range(start, end - start, k, self.replace, self.generator)
        return owner, rel.order[at]


def _one_relation(out: Typed, edge_type: EdgeType, rel: Relation, k: int,
                  frontier: dict, maps: dict, draw: _HopDraw) -> None:
    src_type, _, dst_type = edge_type
    keys, start = frontier.get(dst_type, (rel.row.new_empty(0), 0))
    if k == 0 or keys.numel() == 0:
        owner = pos = rel.row.new_empty(0)
    else:
        owner, pos = draw(rel, keys, maps[dst_type], k)
    src = rel.row[pos]
    if isinstance(maps[src_type], KeyMap):  # a source joins its target's subgraph
        src = src + maps[dst_type].subgraph_of(keys[owner]) * maps[src_type].n
    local = maps[src_type].add(src)
    out.row.setdefault(edge_type, []).append(local)
    out.col.setdefault(edge_type, []).append(owner + start)
    out.edge.setdefault(edge_type, []).append(pos)
    out.num_sampled_edges.setdefault(edge_type, []).append(pos.numel())


def _finish(out: Typed, maps: dict, seeds: dict, relations: dict) -> None:
    some = next(iter(seeds.values()))
    for node_type, m in maps.items():
        keys = torch.cat(m.nodes) if m.nodes else some.new_empty(0)
        out.node[node_type] = m.node_of(keys)
        if isinstance(m, KeyMap):
            out.batch = {} if out.batch is None else out.batch
            out.batch[node_type] = m.subgraph_of(keys)
        seeded = seeds[node_type].numel() if node_type in seeds else 0
        out.num_sampled_nodes[node_type] = [seeded] + out.num_sampled_nodes.get(node_type, [])
    for edge_type in relations:
        for name in ("row", "col", "edge"):
            parts = getattr(out, name).get(edge_type, [])
            getattr(out, name)[edge_type] = torch.cat(parts) if parts else some.new_empty(0)
        out.num_sampled_edges.setdefault(edge_type, [])


def induced_edges(relations: dict[EdgeType, Relation], node: dict[str, Tensor]
                  ) -> tuple[dict, dict, dict]:
    """``subgraph_type="induced"``: every edge of the graph among the sampled nodes
    (distinct per type: a shared batch), as ``row``, ``col`` (local ids) and ``edge``
    (CSC positions) per edge type."""
    rows, cols, edges = {}, {}, {}
    for edge_type, rel in relations.items():
        src_nodes, dst_nodes = node[edge_type[0]], node[edge_type[-1]]
        start = rel.colptr[dst_nodes]
        col, pos = _every_neighbour(start, rel.colptr[dst_nodes + 1] - start)
        src = rel.row[pos]
        if src_nodes.numel() == 0:
            at, where = torch.zeros_like(src), src_nodes
            keep = torch.zeros_like(src, dtype=torch.bool)
        else:
            sorted_src, where = torch.sort(src_nodes)
            at = torch.searchsorted(sorted_src, src).clamp(max=src_nodes.numel() - 1)
            keep = sorted_src[at] == src
        rows[edge_type] = where[at[keep]]
        cols[edge_type], edges[edge_type] = col[keep], pos[keep]
    return rows, cols, edges
