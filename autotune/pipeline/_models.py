"""The built-in models (``--model sage|gcn|gat|gin``), a user's factory by import
path, the heterogeneous form of SAGE that ``to_hetero`` lifts, and the graph-level
form of each (a readout after the layers: :class:`GraphClassifier`). A task
(:mod:`autotune.pipeline._tasks`) decides what a model's output is; the pipeline wraps it in
the knobs (:mod:`autotune.pipeline._build`)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from autotune.config import GAT_HEADS, TrialConfig
from autotune.errors import ConfigError
from autotune.imports import import_object, user_code


def bits_dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Dropout whose mask is cut from raw random words: each int64 ``random_()`` draw
    (63 uniform bits), doubled, is four 16-bit words, each uniform (the first over
    the even numbers only), and an element is kept when its word is at least an even
    threshold ``p`` of the way up: kept with probability ``1 - p`` (``p`` rounded to
    1/32768, exact for 0.5), independently, and scaled by ``1 / (1 - p)``, as
    ``F.dropout``'s masks are. On
    CPU torch's ``bernoulli_`` draws each element on its own; this reads a quarter of
    an int64 draw per element (see ``tests/test_paired.py`` for the law, knobs.py and
    speedup.py for the time)."""
    if not training or p == 0.0:
        return x
    if p >= 1.0:
        return x * 0.0
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device).random_()
    draws = words.mul_(2).view(torch.int16)[:x.numel()].view(x.shape)
    out = x * (draws >= int(round(p * 32768)) * 2 - 32768)
    return out.mul_(1.0 / (1.0 - p))


DROPOUT = {"bernoulli": F.dropout, "bits": bits_dropout}  # by TrialConfig.dropout_masks


def set_masks(model: nn.Module, masks: str) -> None:
    """Sets how the built-in models inside ``model`` draw their dropout masks
    (``masks``: a ``TrialConfig.dropout_masks``), where pipelines of other configs
    share one model (a run that tunes itself); a user's model draws its own."""
    for gnn in mask_holders(model):
        gnn.drop = DROPOUT[masks]


def mask_holders(model: nn.Module) -> list[GNN]:
    """The built-in models inside ``model``, whose dropout masks :func:`set_masks` sets."""
    return [module for module in model.modules() if isinstance(module, GNN)]


class GNN(nn.Module):
    """A stack of conv layers with ReLU and dropout between them, as in PyG's
    examples/reddit.py. Subclasses say which conv each layer is; ``masks`` how
    dropout draws its masks (``TrialConfig.dropout_masks``)."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, masks: str = "bernoulli") -> None:
        super().__init__()
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        last = len(sizes) - 2
        self.convs = nn.ModuleList(self.conv(a, b, i == last)
                                   for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])))
        self.dropout, self.drop = dropout, DROPOUT[masks]

    def conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        raise NotImplementedError

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, _in_dtype_of(edge_index, x))
            if i < len(self.convs) - 1:
                x = self.drop(F.relu(x), p=self.dropout, training=self.training)
        return x


def _in_dtype_of(edges: Tensor, x: Tensor) -> Tensor:
    """A sparse adjacency (``aggregation: sparse``) with ``x``'s dtype: under autocast
    the second layer's input is bfloat16 while the adjacency holds float32 ones, which
    torch.sparse refuses to multiply. ``edge_index`` and a
    :class:`FollowingAdjacency` (which follows by itself) pass through."""
    if edges.layout == torch.strided or edges.dtype == x.dtype or \
            isinstance(edges, FollowingAdjacency):
        return edges
    return edges.to(x.dtype)


class FollowingAdjacency(Tensor):
    """A sparse adjacency that takes the dtype of the dense matrix it is multiplied
    with (``torch.sparse.mm``, which PyG's layers aggregate with, and the matmul
    forms); every other operation sees a plain tensor and returns one. Under bfloat16
    autocast a layer's input is bfloat16 (every layer's after the first) while the
    adjacency holds float32 ones, and torch.sparse refuses to multiply the two: a
    user's PyG layers pass the adjacency on as it is
    (:meth:`autotune.pipeline.Pipeline.edges` gives them this one where the dtypes
    may meet). ``torch.sparse.mm`` with no reduction runs as a sum reduction, the
    same product, where the plain one cannot run: torch's CPU kernel of the plain one
    takes float32 and float64 only, and autocast lowers it to bfloat16, so that
    sum-aggregating layers (GIN's) could not run under bfloat16 autocast; the
    reduction's kernel takes any dtype, and autocast leaves it alone."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():  # plain tensors from here on
            if func in _PRODUCTS:
                args = _in_dense_dtype(args)
                if func is torch.sparse.mm and len(args) == 2 and not kwargs and \
                        not _plain_product_runs(args[1]):
                    args = (*args, "sum")
            return func(*args, **(kwargs or {}))


# the products of a sparse matrix and a dense one, as PyG's layers and users call them
_PRODUCTS = frozenset({torch.sparse.mm, torch.mm, torch.matmul, Tensor.mm, Tensor.matmul,
                       Tensor.__matmul__, Tensor.__rmatmul__})


def _plain_product_runs(dense: Tensor) -> bool:
    """Whether torch's CPU kernel of a sparse matrix's plain product with ``dense``
    runs: in float32 or float64, with no autocast to lower it."""
    return dense.dtype in (torch.float32, torch.float64) and \
        not torch.is_autocast_enabled(dense.device.type)


def _in_dense_dtype(args: tuple) -> tuple:
    """``args`` with their sparse tensors cast to the floating dtype of the first
    dense one among them (as they are where there is none)."""
    dense = next((a for a in args if isinstance(a, Tensor) and a.layout == torch.strided
                  and a.is_floating_point()), None)
    if dense is None:
        return args
    return tuple(a.to(dense.dtype) if isinstance(a, Tensor) and a.layout != torch.strided
                 and a.dtype != dense.dtype else a for a in args)


class SAGE(GNN):
    """GraphSAGE with mean aggregation (PyG's examples/reddit.py, the default)."""

    def conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        from torch_geometric.nn import SAGEConv

        return SAGEConv(in_channels, out_channels)


class GCN(GNN):
    """GCN (Kipf and Welling) with self-loops and symmetric normalisation."""

    def conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        return GCNLayer(in_channels, out_channels)


class GCNLayer(nn.Module):
    """``GCNConv`` that stays in the autocast dtype. GCNConv builds its normalisation
    weights in its input's dtype and adds a float32 bias, so under bfloat16 autocast
    its output came back as float32 although its linear layer ran in bfloat16. Here
    the input is cast to the autocast dtype and the bias is added in it, as autocast
    does for a linear layer's bias."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv = GCNConv(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        device = x.device.type
        if torch.is_autocast_enabled(device):
            x = x.to(torch.get_autocast_dtype(device))
        out = self.conv(x, edge_index)
        return out + self.bias.to(out.dtype)


class GAT(GNN):
    """GAT with ``GAT_HEADS`` concatenated heads per hidden layer (hidden_channels is
    split over them) and one head in the output layer. Under autocast its linear
    layers run in the autocast dtype; its attention and messages stay float32 (the
    attention vectors are float32 parameters), which the trial's probe reports."""

    def conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        from torch_geometric.nn import GATConv

        if last:
            return GATConv(in_channels, out_channels, heads=1)
        return GATConv(in_channels, out_channels // GAT_HEADS, heads=GAT_HEADS)


class GIN(GNN):
    """GIN (Xu et al.): each layer a ``GINConv`` around a two-layer MLP, the most
    expressive of the sum-aggregating convolutions; with sum pooling for graph-level
    tasks, as in the paper."""

    def conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        from torch_geometric.nn import GINConv

        return GINConv(nn.Sequential(nn.Linear(in_channels, out_channels), nn.ReLU(),
                                     nn.Linear(out_channels, out_channels)))


BUILT_IN = {"sage": SAGE, "gcn": GCN, "gat": GAT, "gin": GIN}  # one per config.MODELS name
POOLING = {"gin": "add"}  # a graph-level model's readout: global mean pool but for these


class GraphClassifier(nn.Module):
    """A graph-level model: the built-in GNN into ``hidden_channels``, a global
    pooling of each graph's nodes (sum for GIN, mean otherwise) and a linear layer,
    one row per graph. ``num_graphs`` fixes the output's row count (a padded batch
    passes its real graphs plus one padding graph), so no host sync reads it."""

    def __init__(self, config: TrialConfig, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.gnn = BUILT_IN[config.model](in_channels, config.hidden_channels,
                                          config.hidden_channels, config.num_layers,
                                          config.dropout, config.dropout_masks)
        self.pool = POOLING.get(config.model, "mean")
        self.head = nn.Linear(config.hidden_channels, num_classes)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor,
                num_graphs: int | None = None) -> Tensor:
        from torch_geometric.nn import global_add_pool, global_mean_pool

        h = F.relu(self.gnn(x, edge_index))
        pool = global_add_pool if self.pool == "add" else global_mean_pool
        return self.head(pool(h, batch, size=num_graphs))


def make_model(config: TrialConfig, in_channels: int, out_channels: int) -> nn.Module:
    """The model ``config.model`` names: a built-in (sage, gcn, gat) or a user's
    factory ``(in_channels, out_channels, config) -> nn.Module`` by import path."""
    if config.model in BUILT_IN:
        return BUILT_IN[config.model](in_channels, config.hidden_channels, out_channels,
                                    config.num_layers, config.dropout, config.dropout_masks)

    factory = import_object(config.model, what="model factory", option="--model (model=)")
    model = user_code("model factory", config.model, factory, in_channels, out_channels, config)
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model factory {config.model!r} returned a "
                          f"{type(model).__name__}; it must return a torch.nn.Module")
    return model


class HeteroEncoder(nn.Module):
    """The SAGE model of :class:`SAGE` in a form ``to_hetero`` can
    trace: lazy input sizes (node types differ) and dropout as a module."""

    def __init__(self, hidden_channels: int, out_channels: int, num_layers: int,
                 dropout: float) -> None:
        from torch_geometric.nn import SAGEConv

        super().__init__()
        sizes = [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = nn.ModuleList(SAGEConv((-1, -1), size) for size in sizes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = self.dropout(x.relu())
        return x


def lift_to_hetero(model: nn.Module, data) -> nn.Module:
    """``to_hetero(model, data.metadata(), aggr="sum")``, its lazy sizes set by one
    forward pass over one node of each type."""
    from torch_geometric.nn import to_hetero

    try:
        hetero = to_hetero(model, data.metadata(), aggr="sum")
    except Exception as exc:  # torch.fx could not trace the model
        raise ConfigError(f"to_hetero could not lift the model ({type(exc).__name__}: "
                          f"{str(exc)[:160]}); a heterogeneous dataset needs a model that "
                          "torch.fx can trace") from exc
    x = {t: data[t].x[:1].float() for t in data.node_types}
    edges = {t: torch.empty(2, 0, dtype=torch.long) for t in data.edge_types}
    with torch.no_grad():
        hetero(x, edges)
    return hetero
