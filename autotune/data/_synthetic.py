"""The synthetic graphs autotune generates when no dataset can be downloaded (CI, a
first try): Reddit-shaped (``synthetic``) and ogbn-mag-shaped (``synthetic-hetero``).
No library generates graphs with a real dataset's degree distribution, homophily
and class-informative features at a chosen scale, so they are written here.

The Reddit-shaped graph has ``round(232,965 * scale)`` nodes, Pareto (alpha 2.2)
in-degrees rescaled to Reddit's mean degree (492) and capped at 9.3% of the nodes
like Reddit's largest, homophilous sources (a ``homophily`` share of each node's
in-neighbours share its class), 602 class-informative Gaussian features, 41 classes
and Reddit's 66/10/24% train/val/test split at random. Each node has a ``time``
(uniform in 0..999), for temporal sampling (``--time-attr time``); it is drawn last,
so every other tensor is what it was before times were added.

The synthetic heterogeneous graph has ogbn-mag's four node types and four relations
(Wang et al., 2020; sizes as OGB ships them, times ``scale``), each with its reverse
so that every type's messages reach papers:

========================================  ===========  ==================================
edge type                                 mean degree  degree distribution
========================================  ===========  ==================================
author -writes-> paper                    9.7 / paper  power-law authors per paper; an
                                                       author writes in its own class with
                                                       probability ``homophily``
paper -cites-> paper                      7.4 / paper  power-law citations received;
                                                       same-class citing papers with
                                                       probability ``homophily``
paper -has_topic-> field_of_study         10.2 / paper power-law field popularity
author -affiliated_with-> institution     0.92 / author  one institution per author (92%),
                                                       power-law institution size
========================================  ===========  ==================================

Papers are the target type: ``MAG_CLASSES`` venues, class-informative Gaussian
features; the other types get features near their class's centroid (authors) or
plain noise (institutions, fields). Deterministic per ``seed``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

TIME_STEPS = 1000  # a synthetic node's time is uniform in 0 .. TIME_STEPS - 1

from autotune.errors import DatasetError
from autotune.data._splits import TARGET_ATTR, add_reverse, split_masks

# Reddit (Hamilton et al., 2017) as PyG ships it.
REDDIT_NODES = 232_965
REDDIT_FEATURES = 602
REDDIT_CLASSES = 41
REDDIT_MEAN_DEGREE = 114_615_892 / REDDIT_NODES
SPLIT_FRACTIONS = (0.66, 0.10)  # train, val; the rest is test, as in Reddit
MAX_DEGREE_FRACTION = 0.093  # Reddit's largest in-degree is 21,657 of 232,965 nodes
MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740,
             "field_of_study": 59_965}
MAG_FEATURES = 128
MAG_CLASSES = 349


def synthetic_reddit(*, scale: float = 1.0, seed: int = 0,
                     mean_degree: float = REDDIT_MEAN_DEGREE,
                     num_features: int = REDDIT_FEATURES, num_classes: int = REDDIT_CLASSES,
                     homophily: float = 0.8, feature_signal: float = 0.06,
                     power_law_alpha: float = 2.2):
    """A Reddit-shaped graph: ``round(232,965 * scale)`` nodes, power-law in-degrees
    with Reddit's mean degree, homophilous labels (a ``homophily`` share of each
    node's in-neighbours share its class) and class-informative Gaussian features.
    Deterministic per ``seed``."""
    from torch_geometric.data import Data

    if not (scale > 0 and math.isfinite(scale)):
        raise DatasetError(f"--scale must be a positive number (got {scale})")
    num_nodes = max(int(round(REDDIT_NODES * scale)), 4 * num_classes)
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, num_classes, (num_nodes,), generator=gen)
    in_degree = power_law_degrees(num_nodes, mean_degree, power_law_alpha, gen)
    dst = torch.repeat_interleave(torch.arange(num_nodes), in_degree)
    src = homophilous_sources(y[dst], y, homophily, gen)
    edge_index = torch.stack([src, dst])
    centroids = torch.randn(num_classes, num_features, generator=gen) * feature_signal
    x = torch.randn(num_nodes, num_features, generator=gen)
    x += centroids[y]
    data = Data(x=x, y=y, edge_index=edge_index, num_nodes=num_nodes)
    random_masks(data, num_nodes, gen)
    data.time = torch.randint(0, TIME_STEPS, (num_nodes,), generator=gen)
    data.num_classes = num_classes
    return data


def random_masks(store, num: int, gen: torch.Generator) -> None:
    """Train/val/test masks of ``num`` nodes in :data:`SPLIT_FRACTIONS`, at random."""
    order = torch.randperm(num, generator=gen)
    n_train, n_val = int(SPLIT_FRACTIONS[0] * num), int(SPLIT_FRACTIONS[1] * num)
    for name, mask in split_masks(num, order[:n_train], order[n_train:n_train + n_val],
                                  order[n_train + n_val:]).items():
        store[name] = mask


def power_law_degrees(n: int, mean: float, alpha: float, gen: torch.Generator) -> Tensor:
    """Pareto-distributed in-degrees, capped like Reddit's and rescaled to the wanted mean."""
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    raw = (1.0 - u).pow(-1.0 / (alpha - 1.0))  # Pareto(x_min=1, alpha)
    target = min(mean, n - 1)
    cap = max(2.0, MAX_DEGREE_FRACTION * n)
    deg = raw * (target / raw.mean())
    for _ in range(8):  # clipping lowers the mean; rescale the unclipped part
        deg = deg.clamp(1, cap)
        deg = deg * (target / deg.mean())
    return deg.clamp(1, cap).round().long()


def homophilous_sources(dst_class: Tensor, y: Tensor, homophily: float,
                         gen: torch.Generator) -> Tensor:
    num_edges, num_nodes = dst_class.numel(), y.numel()
    by_class = torch.argsort(y, stable=True)
    counts = torch.bincount(y, minlength=int(y.max()) + 1)
    starts = torch.cumsum(counts, 0) - counts
    same = torch.rand(num_edges, generator=gen) < homophily
    pick = (torch.rand(num_edges, generator=gen, dtype=torch.float64)
            * counts[dst_class].double()).long()
    same_class_src = by_class[starts[dst_class] + pick]
    any_src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    return torch.where(same, same_class_src, any_src)


def synthetic_mag(*, scale: float = 1.0, seed: int = 0, homophily: float = 0.8,
                  feature_signal: float = 0.3, num_classes: int = MAG_CLASSES,
                  num_features: int = MAG_FEATURES):
    """A mag-shaped ``HeteroData`` (see the module docstring), ``scale`` times
    ogbn-mag's node counts; papers carry ``y`` and train/val/test masks."""
    from torch_geometric.data import HeteroData

    if not (scale > 0 and math.isfinite(scale)):
        raise DatasetError(f"--scale must be a positive number (got {scale})")
    gen = torch.Generator().manual_seed(seed)
    n = {t: max(int(round(count * scale)), 4 * num_classes if t in ("paper", "author")
                else 8) for t, count in MAG_NODES.items()}
    y = torch.randint(0, num_classes, (n["paper"],), generator=gen)
    author_y = torch.randint(0, num_classes, (n["author"],), generator=gen)
    centroids = torch.randn(num_classes, num_features, generator=gen) * feature_signal
    data = HeteroData()
    data["paper"].x = torch.randn(n["paper"], num_features, generator=gen) + centroids[y]
    data["paper"].y = y
    data["author"].x = torch.randn(n["author"], num_features, generator=gen) + \
        centroids[author_y]
    for t in ("institution", "field_of_study"):
        data[t].x = torch.randn(n[t], num_features, generator=gen)

    def incoming(mean: float, dst_count: int) -> Tensor:
        return torch.repeat_interleave(torch.arange(dst_count),
                                       power_law_degrees(dst_count, mean, 2.2, gen))

    dst = incoming(9.7, n["paper"])
    data["author", "writes", "paper"].edge_index = torch.stack(
        [homophilous_sources(y[dst], author_y, homophily, gen), dst])
    dst = incoming(7.4, n["paper"])
    data["paper", "cites", "paper"].edge_index = torch.stack(
        [homophilous_sources(y[dst], y, homophily, gen), dst])
    data["paper", "has_topic", "field_of_study"].edge_index = _popular_targets(
        n["paper"], 10.2, n["field_of_study"], gen)
    data["author", "affiliated_with", "institution"].edge_index = _popular_targets(
        n["author"], 0.92, n["institution"], gen)
    add_reverse(data)
    random_masks(data["paper"], n["paper"], gen)
    data[TARGET_ATTR] = "paper"
    data.num_classes = num_classes
    return data


def _popular_targets(num_src: int, mean: float, num_dst: int, gen: torch.Generator) -> Tensor:
    """About ``mean`` edges per source, to targets drawn by power-law popularity."""
    count = int(round(mean * num_src))
    src = torch.randint(0, num_src, (count,), generator=gen) if mean < 1 else \
        torch.arange(num_src).repeat_interleave(int(round(mean)))[:count]
    weight = power_law_degrees(num_dst, 10.0, 2.2, gen).double()
    dst = torch.multinomial(weight, src.numel(), replacement=True, generator=gen)
    return torch.stack([src, dst])
