"""Uniformity of neighbour sampling, measured: a forest of stars to sample from and
Pearson's chi-square of how often each in-neighbour is drawn (tests/test_sampler.py,
tests/test_links_hetero.py and benchmarks/sampler.py)."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch_geometric.data import Data


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
