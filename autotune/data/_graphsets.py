"""Graph-level datasets (``--task graph``): many small graphs, such as molecules or
proteins, each with one label, trained in batches of whole graphs.

A :class:`GraphSet` holds the graphs as PyG's ``InMemoryDataset`` does (one collated
``Data`` and its slices, memory-mapped from the cache file) and a random
train/val/test split per graph. Three sources fill one:

* ``synthetic-molecules`` (:func:`synthetic_molecules`), generated;
* a folder in TUDataset's format (``<NAME>_A.txt``, ``<NAME>_graph_indicator.txt``,
  ``<NAME>_graph_labels.txt``, ...), read with PyG's own ``read_tu_data``;
* a function ``--dataset pkg:function`` returning an ``InMemoryDataset`` (or a list)
  of graphs with a graph label ``y``.

Why not PyG's ``InMemoryDataset`` as it is: its subclasses process into their own
``root/processed`` folder, one class per source; here every source lands in
autotune's memory-mapped cache beside the node datasets, and the split travels with it.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path

import torch
from torch import Tensor

from autotune.errors import DatasetError
from autotune.data._splits import split_masks

GRAPH_SPLIT = (0.8, 0.1)  # train and validation shares of the graphs; the rest is test
MOLECULES = 40_000  # graphs of synthetic-molecules at scale 1 (ogbg-molhiv has 41,127)
ATOM_TYPES = 9  # one-hot atom features (ogbg-mol* has 9 atom features)
BOND_TYPES = 3  # one-hot bond features: single, double, aromatic
MOLECULE_CLASSES = 4
MIN_ATOMS, MEAN_EXTRA_ATOMS = 8, 17.0  # atoms per graph: 8 + Poisson(17): mean 25
MAX_VALENCE = 4  # the backbone never gives an atom more than four bonds


class GraphSet:
    """Graphs with a per-graph split: ``train_mask``, ``val_mask`` and ``test_mask``
    select graphs. ``graphs`` is an ``InMemoryDataset`` that PyG's ``DataLoader``
    batches."""

    def __init__(self, data, slices: dict, masks: dict[str, Tensor], num_classes: int) -> None:
        from torch_geometric.data import InMemoryDataset

        self.graphs = InMemoryDataset()
        self.graphs._data, self.graphs.slices = data, slices
        self.masks, self.num_classes = masks, int(num_classes)

    def __contains__(self, key: str) -> bool:
        return key in self.masks

    def __getitem__(self, key: str) -> Tensor:
        return self.masks[key]

    def split(self, name: str):
        """The graphs of split ``name`` (train, val, test)."""
        return self.graphs[self.masks[f"{name}_mask"].nonzero().view(-1)]

    @property
    def num_graphs(self) -> int:
        return len(self.graphs)

    @property
    def num_nodes(self) -> int:
        return int(self.graphs._data.num_nodes)

    @property
    def num_edges(self) -> int:
        return int(self.graphs._data.edge_index.size(1))

    @property
    def num_features(self) -> int:
        return int(self.graphs._data.x.size(1))

    @property
    def x(self) -> Tensor:
        return self.graphs._data.x

    def tensors(self) -> dict:
        """What the cache file keeps."""
        data = self.graphs._data
        return {"tensors": {k: v.contiguous() for k, v in data.items() if isinstance(v, Tensor)},
                "slices": dict(self.graphs.slices), "masks": self.masks}


def graph_set(graphs, seed: int = 0, num_classes: int | None = None) -> GraphSet:
    """A :class:`GraphSet` of ``graphs`` (a list of ``Data`` or an ``InMemoryDataset``),
    each with features ``x``, ``edge_index`` and a label ``y``; split at random
    (:data:`GRAPH_SPLIT`) by ``seed``."""
    from torch_geometric.data import Data, InMemoryDataset

    items = list(graphs)
    if not items:
        raise DatasetError("a graph-level dataset needs graphs (got none)")
    bad = next((i for i, g in enumerate(items) if not isinstance(g, Data)
                or "x" not in g or "y" not in g), None)
    if bad is not None:
        raise DatasetError(f"graph {bad} of the graph-level dataset is not a Data with x and y "
                           f"(got {type(items[bad]).__name__}); each graph needs node features "
                           "x and a graph label y")
    items = [copy.copy(g) for g in items]  # the caller's graphs stay as they were
    for g in items:
        if "edge_index" not in g:
            g.edge_index = torch.empty(2, 0, dtype=torch.long)
        g.y = g.y.view(-1)[:1].long()
    data, slices = InMemoryDataset.collate(items)
    classes = num_classes or int(data.y.max()) + 1
    return GraphSet(data, slices, random_split(len(items), seed), classes)


def random_split(count: int, seed: int) -> dict[str, Tensor]:
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    train_end = int(round(GRAPH_SPLIT[0] * count))
    val_end = train_end + max(1, int(round(GRAPH_SPLIT[1] * count)))
    return split_masks(count, order[:train_end], order[train_end:val_end], order[val_end:])


def read_tu_folder(folder: Path, seed: int = 0) -> GraphSet:
    """A folder in TUDataset's format, read by PyG's ``read_tu_data``: the prefix is
    the name the ``*_graph_indicator.txt`` file carries. Node features are its node
    attributes and one-hot node labels, as ``TUDataset`` builds them (a constant 1
    where it has neither)."""
    from torch_geometric.io import read_tu_data

    prefix = tu_prefix(folder)
    for part in ("A", "graph_labels"):
        if not (folder / f"{prefix}_{part}.txt").exists():
            raise DatasetError(f"TU folder '{folder}' lacks {prefix}_{part}.txt")
    try:
        data, slices, _ = read_tu_data(str(folder), prefix)
    except Exception as exc:  # a malformed file: PyG's parser says which
        raise DatasetError(f"TU folder '{folder}' could not be read ({type(exc).__name__}: "
                           f"{exc})") from exc
    if data.x is None:  # TUDataset's rule: no attributes and no labels, a constant
        counts = torch.tensor(data._num_nodes)
        data.x = torch.ones(int(counts.sum()), 1)
        slices["x"] = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        del data._num_nodes
    data.y = data.y.view(-1).long()
    data.y = data.y - data.y.min()  # TU labels may start at 1 or be -1/1
    count = slices["y"].numel() - 1
    return GraphSet(data, slices, random_split(count, seed), int(data.y.max()) + 1)


def tu_prefix(folder: Path) -> str:
    """The dataset name a TU-format folder's files carry (``<NAME>_A.txt``, ...)."""
    indicators = sorted(folder.glob("*_graph_indicator.txt"))
    if len(indicators) != 1:
        raise DatasetError(f"folder '{folder}' is not in TUDataset's format: it needs one "
                           f"<NAME>_graph_indicator.txt (got {len(indicators)}), with "
                           "<NAME>_A.txt and <NAME>_graph_labels.txt")
    return indicators[0].name[:-len("_graph_indicator.txt")]


def synthetic_molecules(*, scale: float = 1.0, seed: int = 0,
                        num_classes: int = MOLECULE_CLASSES) -> GraphSet:
    """``round(40,000 * scale)`` molecule-shaped graphs (at least 64):

    * atoms per graph: ``8 + Poisson(17)``, a mean of 25 (ogbg-molhiv's is 25.5);
    * a random tree backbone in which each new atom bonds to an earlier one with fewer
      than four bonds, plus rings: ``class`` extra bonds closing cycles, so the mean
      degree is about 2.1 and the ring count carries the class;
    * atom features: one-hot of nine atom types whose frequencies shift with the
      class (a weak signal), bonds one-hot of three types as ``edge_attr``;
    * edges in both directions, as PyG's molecule datasets store them.
    """
    if not (scale > 0 and math.isfinite(scale)):
        raise DatasetError(f"--scale must be a positive number (got {scale})")
    gen = torch.Generator().manual_seed(seed)
    count = max(64, int(round(MOLECULES * scale)))
    labels = torch.randint(0, num_classes, (count,), generator=gen)
    base = torch.softmax(torch.randn(ATOM_TYPES, generator=gen), 0)
    shift = torch.softmax(torch.randn(num_classes, ATOM_TYPES, generator=gen), 1)
    sizes = MIN_ATOMS + torch.poisson(torch.full((count,), MEAN_EXTRA_ATOMS), generator=gen)
    graphs = [_molecule(int(n), int(c), 0.7 * base + 0.3 * shift[c], gen)
              for n, c in zip(sizes.tolist(), labels.tolist())]
    return graph_set(graphs, seed, num_classes)


def _molecule(n: int, rings: int, atom_p: Tensor, gen: torch.Generator):
    from torch_geometric.data import Data

    src, dst = [], []
    valence = [0] * n
    draws = torch.rand(n, generator=gen).tolist()
    for atom in range(1, n):
        choices = [a for a in range(atom) if valence[a] < MAX_VALENCE] or [atom - 1]
        other = choices[int(draws[atom] * len(choices))]
        src.append(atom)
        dst.append(other)
        valence[atom] += 1
        valence[other] += 1
    for _ in range(rings):  # a ring bond between two atoms not yet bonded
        a, b = torch.randint(n, (2,), generator=gen).tolist()
        if a != b and (a, b) not in zip(src, dst) and (b, a) not in zip(src, dst):
            src.append(a)
            dst.append(b)
    bond = torch.randint(BOND_TYPES, (len(src),), generator=gen)
    edge_index = torch.tensor([src + dst, dst + src], dtype=torch.long)
    atoms = torch.multinomial(atom_p, n, replacement=True, generator=gen)
    x = torch.nn.functional.one_hot(atoms, ATOM_TYPES).float()
    edge_attr = torch.nn.functional.one_hot(bond.repeat(2), BOND_TYPES).float()
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, y=torch.tensor([rings]))
