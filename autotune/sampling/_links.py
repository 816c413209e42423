"""Link-level sampling for :class:`autotune.NeighborSampler`: PyG's ``LinkLoader``
semantics (``torch_geometric.sampler.neighbor_sampler.edge_sample``), with the
negatives drawn on the sampler's device and checked against the graph.

A batch of supervision edges ``(src, dst)`` becomes seeds, both endpoints, so that
the sampled subgraph holds the neighbourhood of each; with negative sampling,
random pairs are added first: ``binary`` draws ``ceil(amount * P)`` random
``(src, dst)`` pairs labelled 0, ``triplet`` draws ``amount`` random destinations
per positive. PyG draws them blindly (its own TODO: "Do not sample false
negatives"); here a drawn pair that is an edge of the graph is drawn again, up to
:data:`MAX_REDRAWS` times, and those still left are counted in
``sampler.false_negatives`` (only a near-complete graph leaves any).

Temporal link sampling (``edge_label_time``) is PyG's too: each pair's subgraph keeps
to the pair's time, negatives take the time of the positive they were drawn for,
and with node-level time a negative node is drawn again while it is later than
that time (as PyG does, five rounds; what is left takes the earliest node).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

from autotune.errors import ConfigError
from autotune.sampling._subgraph import csc_columns

MAX_REDRAWS = 8
TIME_REDRAWS = 5  # PyG's rounds for a negative later than its positive


class EdgeSet:
    """Membership of ``(src, dst)`` pairs in one edge type's CSC, by a sorted key
    ``dst * num_src + src`` per edge (built once per process, on the CSC's device)."""

    def __init__(self, colptr: Tensor, row: Tensor, num_src: int) -> None:
        dst = csc_columns(colptr)
        self.num_src = num_src
        self.keys = torch.sort(dst * num_src + row).values

    def contains(self, src: Tensor, dst: Tensor) -> Tensor:
        if self.keys.numel() == 0:
            return torch.zeros_like(src, dtype=torch.bool)
        keys = dst * self.num_src + src
        at = torch.searchsorted(self.keys, keys).clamp(max=self.keys.numel() - 1)
        return self.keys[at] == keys


def draw_nodes(count: int, num_nodes: int, weight: Tensor | None, device: torch.device,
               generator: torch.Generator | None) -> Tensor:
    """``count`` node ids, uniform or in proportion to ``weight``, drawn on ``device``."""
    if weight is None:
        return torch.randint(num_nodes, (count,), device=device, generator=generator)
    return torch.multinomial(weight.to(device, torch.float), count, replacement=True,
                             generator=generator)


def sample_from_edges(sampler, index: EdgeSamplerInput,
                      neg_sampling: NegativeSampling | None):
    """``sampler.sample_from_edges``: seeds, negatives, the sampled subgraph, and the
    metadata PyG's ``LinkLoader.filter_fn`` reads."""
    if index.time is not None and not sampler.temporal:
        raise ConfigError("edge_label_time needs temporal sampling: pass time_attr, the "
                          "node or edge attribute that holds times")
    device, edge_type = sampler.device, index.input_type
    src, dst = index.row.to(device, torch.long), index.col.to(device, torch.long)
    num_pos, label = src.numel(), index.label
    triplet = neg_sampling is not None and neg_sampling.is_triplet()
    times = None if index.time is None else _Times(index.time.to(device), num_pos)
    if neg_sampling is not None:
        src, dst, label = _with_negatives(sampler, edge_type, src, dst, label, neg_sampling,
                                          times)
    src_at, dst_at, seeds = _seeds(src, dst, edge_type, sampler.disjoint)
    out = sampler._sample(seeds, None if times is None else
                          times.of_seeds(seeds, src.numel(), dst.numel(), edge_type))
    if sampler.disjoint:  # a pair's two endpoints share one subgraph, as in PyG
        if isinstance(out.batch, dict):
            out.batch = {t: b % num_pos for t, b in out.batch.items()}
        else:
            out.batch = out.batch % num_pos
    src_time = None if times is None else times.repeated(src.numel())
    if not triplet:
        out.metadata = (index.input_id, torch.stack([src_at, dst_at]), label, src_time)
        return out
    neg_at = dst_at[num_pos:]
    neg_at = neg_at.view(-1, num_pos).t() if sampler.disjoint else neg_at.view(num_pos, -1)
    out.metadata = (index.input_id, src_at[:num_pos], dst_at[:num_pos], neg_at.squeeze(-1),
                    src_time)
    return out


class _Times:
    """The supervision edges' times; negatives repeat them (negative ``j`` of a
    disjoint batch belongs to positive ``j % num_pos``, as in PyG)."""

    def __init__(self, time: Tensor, num_pos: int) -> None:
        self.time, self.num_pos = time.view(-1), num_pos

    def repeated(self, count: int) -> Tensor:
        return self.time.repeat(math.ceil(count / max(self.num_pos, 1)))[:count]

    def of_seeds(self, seeds, num_src: int, num_dst: int, edge_type):
        """Times in the layout of ``seeds`` (:func:`_seeds`, disjoint)."""
        src_time, dst_time = self.repeated(num_src), self.repeated(num_dst)
        if edge_type is None:
            return torch.cat([src_time, dst_time])
        if edge_type[0] == edge_type[-1]:
            return {edge_type[0]: torch.cat([src_time, dst_time])}
        return {edge_type[0]: src_time, edge_type[-1]: dst_time}


def _seeds(src: Tensor, dst: Tensor, edge_type, disjoint: bool):
    """The seed nodes (a tensor, or a dict per node type) and where each pair's
    endpoints sit among them: deduplicated unless ``disjoint``."""
    if edge_type is None or edge_type[0] == edge_type[-1]:
        seed = torch.cat([src, dst])
        if disjoint:
            at = torch.arange(seed.numel(), device=seed.device)
        else:
            seed, at = seed.unique(return_inverse=True)
        seeds = seed if edge_type is None else {edge_type[0]: seed}
        return at[:src.numel()], at[src.numel():], seeds
    if disjoint:
        src_at = torch.arange(src.numel(), device=src.device)
        dst_at = torch.arange(dst.numel(), device=dst.device)
    else:
        src, src_at = src.unique(return_inverse=True)
        dst, dst_at = dst.unique(return_inverse=True)
    return src_at, dst_at, {edge_type[0]: src, edge_type[-1]: dst}


def _with_negatives(sampler, edge_type, src: Tensor, dst: Tensor, label: Tensor | None,
                    neg: NegativeSampling, times: _Times | None):
    """``src``, ``dst`` (and ``label`` for binary) with the negatives appended."""
    num_pos = src.numel()
    num_src, num_dst = _endpoint_counts(sampler.num_nodes, edge_type)
    src_type, dst_type = (None, None) if edge_type is None else (edge_type[0], edge_type[-1])
    draw = lambda n, num, weight: draw_nodes(  # noqa: E731
        n, num, weight, sampler.device, sampler._rng())
    if neg.is_triplet():
        amount = math.ceil(neg.amount)
        anchor = src.repeat(amount) if sampler.disjoint else src.repeat_interleave(amount)
        dst_neg = draw(anchor.numel(), num_dst, neg.dst_weight)
        _, dst_neg = _redraw_edges(sampler, edge_type, anchor, dst_neg, None,
                                   lambda n: draw(n, num_dst, neg.dst_weight))
        dst_neg = _in_time(sampler, dst_type, dst_neg, times,
                           lambda n: draw(n, num_dst, neg.dst_weight))
        return src, torch.cat([dst, dst_neg]), label
    num_neg = math.ceil(num_pos * neg.amount)
    src_neg = draw(num_neg, num_src, neg.src_weight)
    dst_neg = draw(num_neg, num_dst, neg.dst_weight)
    src_neg, dst_neg = _redraw_edges(sampler, edge_type, src_neg, dst_neg,
                                     lambda n: draw(n, num_src, neg.src_weight),
                                     lambda n: draw(n, num_dst, neg.dst_weight))
    # time last: a hard rule, where an edge of the graph drawn as a negative is rare
    src_neg = _in_time(sampler, src_type, src_neg, times,
                       lambda n: draw(n, num_src, neg.src_weight))
    dst_neg = _in_time(sampler, dst_type, dst_neg, times,
                       lambda n: draw(n, num_dst, neg.dst_weight))
    if label is None:
        label = torch.ones(num_pos, device=sampler.device)
    label = label.to(sampler.device)
    label = torch.cat([label, label.new_zeros((num_neg, *label.shape[1:]))])
    return torch.cat([src, src_neg]), torch.cat([dst, dst_neg]), label


def _in_time(sampler, node_type, nodes: Tensor, times: _Times | None, redraw) -> Tensor:
    """Negatives no later than their positive's time, with node-level time: PyG's
    greedy rule (redraw the late ones, five rounds, then the earliest node)."""
    node_time = sampler.node_time_of(node_type)
    if times is None or node_time is None:
        return nodes
    node_time = node_time.to(nodes.device)
    limit = times.repeated(times.num_pos + nodes.numel())[times.num_pos:]
    late = node_time[nodes] > limit
    for _ in range(TIME_REDRAWS):
        count = int(late.sum())
        if count == 0:
            return nodes
        nodes = nodes.clone()
        nodes[late] = redraw(count)
        late = node_time[nodes] > limit
    return torch.where(late, node_time.argmin(), nodes)


def _redraw_edges(sampler, edge_type, src: Tensor, dst: Tensor, draw_src, draw_dst):
    """Draws again every ``(src, dst)`` pair that is an edge of the graph (the
    source too when ``draw_src`` is given); counts what is left after
    :data:`MAX_REDRAWS` rounds in ``sampler.false_negatives``."""
    edges = sampler.edge_set(edge_type)
    if edges is None:  # supervision edges of a type the graph does not hold
        return src, dst
    for _ in range(MAX_REDRAWS):
        bad = edges.contains(src, dst)
        count = int(bad.sum())
        if count == 0:
            return src, dst
        if draw_src is not None:
            src = src.clone()
            src[bad] = draw_src(count)
        dst = dst.clone()
        dst[bad] = draw_dst(count)
    sampler.false_negatives += int(edges.contains(src, dst).sum())
    return src, dst


def _endpoint_counts(num_nodes, edge_type) -> tuple[int, int]:
    if isinstance(num_nodes, dict):
        return num_nodes[edge_type[0]], num_nodes[edge_type[-1]]
    return num_nodes, num_nodes
