"""A user's own model and data, as a test defines them: two GraphConv layers plus a
linear head, kept in attributes (not a ``convs`` list), and a dataset function."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class GraphConvNet(nn.Module):
    def __init__(self, in_channels: int, hidden: int, out_channels: int) -> None:
        super().__init__()
        from torch_geometric.nn import GraphConv

        self.first = GraphConv(in_channels, hidden)
        self.block = nn.ModuleDict({"second": GraphConv(hidden, hidden)})
        self.head = nn.Linear(hidden, out_channels)

    def forward(self, x, edge_index):
        x = F.relu(self.first(x, edge_index))
        x = F.relu(self.block["second"](x, edge_index))
        return self.head(x)


def graphconv(in_channels: int, out_channels: int, config) -> nn.Module:
    """The factory autotune calls: (in_channels, out_channels, config) -> nn.Module."""
    return GraphConvNet(in_channels, config.hidden_channels, out_channels)


def not_a_module(in_channels: int, out_channels: int, config):
    return "a string"


def tiny_graph():
    """A dataset function: returns a Data with x, y, edge_index and the masks."""
    from autotune.data import synthetic_reddit

    return synthetic_reddit(scale=0.003, seed=3, mean_degree=10, num_features=24,
                            num_classes=3)


def not_data():
    return torch.zeros(3)


def ring_graph():
    """Every node has in-degree 3 (from its 3 predecessors on a ring): any fanout of
    3 or more samples every neighbour."""
    from torch_geometric.data import Data

    n = 600
    gen = torch.Generator().manual_seed(0)
    dst = torch.arange(n).repeat(3)
    src = (dst - torch.arange(1, 4).repeat_interleave(n)) % n
    return Data(x=torch.randn(n, 8, generator=gen), y=torch.randint(0, 2, (n,), generator=gen),
                edge_index=torch.stack([src, dst]), train_mask=torch.rand(n, generator=gen) < 0.5)


def leaky(in_channels: int, out_channels: int, config) -> nn.Module:
    """A factory that leaves a mark on the torch module and refuses to build where it
    finds one: a trial process that another trial (or the fork server) ran in fails."""
    import os

    if getattr(torch, "_autotune_test_mark", None) not in (None, os.getpid()):
        raise RuntimeError(f"state leaked into this trial from process "
                           f"{torch._autotune_test_mark}")
    torch._autotune_test_mark = os.getpid()
    return graphconv(in_channels, out_channels, config)


def raising(in_channels: int, out_channels: int, config) -> nn.Module:
    """A factory with a bug in it."""
    raise ValueError("hidden size must be even")


def nofeat():
    """A factory with the wrong signature: takes none of (in, out, config)."""
    return nn.Linear(1, 1)


def broken_data():
    """A dataset function with a bug in it."""
    raise FileNotFoundError("/data/mine/edges.csv")


def timed_graph():
    """A dataset function for temporal sampling: tiny_graph with a time per node."""
    data = tiny_graph()
    data.time = torch.randint(0, 50, (data.num_nodes,), generator=torch.Generator()
                              .manual_seed(5))
    return data


def molecules_by_function():
    """A graph-level dataset function: a list of small graphs with a label each."""
    from autotune.data._graphsets import synthetic_molecules

    return [synthetic_molecules(scale=0.002, seed=2).graphs[i] for i in range(80)]
