"""Link sampling, heterogeneous sampling, disjoint and weighted sampling, and the
drop-in loaders, all on autotune's sampler (no pyg-lib, no torch-sparse)."""
from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import NegativeSampling

import autotune
from uniformity import star_forest, uniformity_chi_square
from autotune.errors import ConfigError
from autotune.pipeline._build import end_workers
from autotune.sampling import LinkNeighborLoader, NeighborLoader

CHI2_39DOF_P001 = 72.05  # chi-square, 39 degrees of freedom, p = 0.001


def _keys(src, dst, n):
    return src.long() * n + dst.long()


@pytest.fixture(scope="module")
def mag():
    """A small mag-shaped graph: four node types, seven edge types."""
    from autotune.data._synthetic import synthetic_mag

    return synthetic_mag(scale=0.002, seed=3)


def _real_edges(data, edge_type):
    edge_index = data[edge_type].edge_index
    return _keys(edge_index[0], edge_index[1], data[edge_type[-1]].num_nodes)


def test_every_sampled_hetero_edge_exists_and_degrees_are_min_deg_k(mag):
    fanout = {t: [4, 3] for t in mag.edge_types}
    fanout[("paper", "cites", "paper")] = [2, 0]
    s = autotune.NeighborSampler(mag, fanout, seed=0)
    seeds = torch.arange(0, 60)
    out = s._sample({"paper": seeds})
    assert torch.equal(out.node["paper"][:60], seeds)
    for node_type, ids in out.node.items():
        assert ((ids >= 0) & (ids < mag[node_type].num_nodes)).all(), node_type
        assert ids.unique().numel() == ids.numel(), f"{node_type} sampled twice"
    total = 0
    for edge_type in mag.edge_types:
        src, _, dst = edge_type
        row, col, edge = out.row[edge_type], out.col[edge_type], out.edge[edge_type]
        total += row.numel()
        sampled = _keys(out.node[src][row], out.node[dst][col], mag[dst].num_nodes)
        assert torch.isin(sampled, _real_edges(mag, edge_type)).all(), edge_type
        e_id = s.edge_permutation[edge_type]
        e_id = edge if e_id is None else e_id[edge]
        assert torch.equal(mag[edge_type].edge_index[0, e_id], out.node[src][row])
        # per hop, each frontier node of dst draws min(deg, k) distinct edges of this type
        deg = torch.bincount(mag[edge_type].edge_index[1], minlength=mag[dst].num_nodes)
        hops = out.num_sampled_edges[edge_type]
        assert sum(hops) == row.numel()
        start, lo = 0, 0
        for hop, k in enumerate(fanout[edge_type]):
            hi = lo + out.num_sampled_nodes[dst][hop]
            part = slice(start, start + hops[hop])
            start += hops[hop]
            for local in range(lo, hi):
                mine = edge[part][col[part] == local]
                assert mine.numel() == min(int(deg[out.node[dst][local]]), k)
                assert mine.unique().numel() == mine.numel()
            lo = hi
    assert total > 0


def _hetero_star(num_stars=2000, leaves=40):
    star = star_forest(num_stars, leaves)
    data = HeteroData()
    data["center"].num_nodes = num_stars
    data["leaf"].num_nodes = num_stars * leaves
    data["leaf", "to", "center"].edge_index = torch.stack(
        [star.edge_index[0] - num_stars, star.edge_index[1]])
    data["center", "near", "center"].edge_index = torch.randint(0, num_stars, (2, 5000))
    return data


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["torch", "triton"])
def test_uniform_on_one_edge_type_of_a_hetero_star(kernel):
    """Both hop draws: the torch path's and the Triton kernel's (in Triton's
    interpreter on a machine without CUDA), which draws a hetero graph's uniform hops
    on a GPU."""
    if kernel == "triton" and torch.cuda.is_available():
        pytest.skip("the interpreter runs without CUDA; the cuda test covers the kernel")
    data = _hetero_star()
    s = autotune.NeighborSampler(data, [5], seed=1234, kernel=kernel)
    assert s.kernel == kernel and not s.slots
    colptr = s.cscs[("leaf", "to", "center")].colptr

    def positions(centers):
        out = s._sample({"center": centers})
        edge, col = out.edge[("leaf", "to", "center")], out.col[("leaf", "to", "center")]
        return edge - colptr[out.node["center"][col]]

    # 1,000 stars x 10 rounds = 10,000 draws, 250 a leaf: Triton's interpreter is slow
    assert uniformity_chi_square(positions, num_stars=1000) < CHI2_39DOF_P001


def test_disjoint_gives_each_seed_its_own_exact_subgraph(random_graph):
    s = autotune.NeighborSampler(random_graph, [4, 3], disjoint=True, seed=0)
    seeds = torch.tensor([7, 7, 1, 2, 299])  # a repeated seed still gets its own subgraph
    out = s.sample(seeds)
    n = random_graph.num_nodes
    assert torch.equal(out.node[:5], seeds) and torch.equal(out.batch[:5], torch.arange(5))
    assert torch.equal(out.batch[out.row], out.batch[out.col]), "an edge crosses subgraphs"
    pairs = out.batch * n + out.node
    assert pairs.unique().numel() == pairs.numel(), "a node twice in one subgraph"
    assert torch.isin(_keys(out.node[out.row], out.node[out.col], n),
                      _keys(*random_graph.edge_index, n)).all()
    deg = torch.bincount(random_graph.edge_index[1], minlength=n)
    hop1 = slice(0, out.num_sampled_edges[0])
    for local in range(5):
        mine = out.edge[hop1][out.col[hop1] == local]
        assert mine.numel() == min(int(deg[seeds[local]]), 4)
        assert mine.unique().numel() == mine.numel()
    # both copies of seed 7 drew from the same neighbours, independently
    assert (out.batch == 0).sum() > 1 and (out.batch == 1).sum() > 1


def test_disjoint_is_uniform():
    s = autotune.NeighborSampler(star_forest(2000, 40), [5], disjoint=True,
                                 seed=99)

    def positions(centers):
        out = s.sample(centers)
        return out.edge - s.csc.colptr[out.node[out.col]]

    assert uniformity_chi_square(positions) < CHI2_39DOF_P001


def _weighted_star(num_stars=2000, leaves=40):
    data = star_forest(num_stars, leaves)
    weight = torch.arange(1, leaves + 1, dtype=torch.float).repeat(num_stars)
    weight[::leaves] = 0.0  # each star's first leaf weighs nothing: never drawn
    data.w = weight
    return data, weight[:leaves].double()


@pytest.mark.parametrize("replace", [False, True])
def test_weighted_draws_follow_the_weights(replace):
    data, w = _weighted_star()
    s = autotune.NeighborSampler(data, [1], weight_attr="w", replace=replace, seed=5)
    counts = torch.zeros(40, dtype=torch.float64)
    for _ in range(10):
        out = s.sample(torch.arange(2000))
        pos = out.edge - s.csc.colptr[out.node[out.col]]
        counts += torch.bincount(pos, minlength=40).double()
    assert counts[0] == 0
    expected = counts.sum() * w / w.sum()
    chi2 = float(((counts[1:] - expected[1:]) ** 2 / expected[1:]).sum())
    assert chi2 < 70.70, chi2  # 38 degrees of freedom, p = 0.001
    # and the test can fail: uniform draws are far from these weights
    uniform = torch.full((39,), counts.sum() / 39)
    assert float(((uniform - expected[1:]) ** 2 / expected[1:]).sum()) > 1000


def test_weighted_without_replacement_takes_min_deg_k_distinct(random_graph):
    data = random_graph.clone()
    data.w = torch.rand(data.edge_index.size(1)) + 0.1
    s = autotune.NeighborSampler(data, [5, 3], weight_attr="w", seed=2)
    out = s.sample(torch.arange(30))
    n = data.num_nodes
    deg = torch.bincount(data.edge_index[1], minlength=n)
    hop1 = slice(0, out.num_sampled_edges[0])
    for local in range(30):
        mine = out.edge[hop1][out.col[hop1] == local]
        assert mine.numel() == min(int(deg[local]), 5)
        assert mine.unique().numel() == mine.numel()
    assert torch.isin(_keys(out.node[out.row], out.node[out.col], n),
                      _keys(*data.edge_index, n)).all()


def test_weight_attr_must_exist(random_graph):
    with pytest.raises(ConfigError, match="weight_attr 'w' is not an attribute"):
        autotune.NeighborSampler(random_graph, [5], weight_attr="w")


def _loader_batches(loader, count=3):
    out = []
    for batch in loader:
        out.append(batch)
        if len(out) == count:
            break
    return out


@pytest.mark.parametrize("disjoint", [False, True])
def test_binary_link_batches_match_pyg_semantics(random_graph, disjoint):
    data = random_graph
    n = data.num_nodes
    pairs = data.edge_index[:, :120]
    loader = LinkNeighborLoader(data, [4, 2], edge_label_index=pairs, batch_size=40,
                                neg_sampling=NegativeSampling("binary", 2.0),
                                disjoint=disjoint, sampler_options={"seed": 0})
    real = _keys(*data.edge_index, n)
    seen = []
    for batch in _loader_batches(loader):
        label, index = batch.edge_label, batch.edge_label_index
        assert label.numel() == 40 * 3 and index.shape == (2, 120)
        assert torch.equal(label[:40], torch.ones(40)) and (label[40:] == 0).all()
        src, dst = batch.n_id[index[0]], batch.n_id[index[1]]
        assert torch.equal(torch.stack([src[:40], dst[:40]]), pairs[:, batch.input_id])
        assert not torch.isin(_keys(src[40:], dst[40:], n), real).any(), "a negative is an edge"
        # the subgraph's edges are the graph's, and the endpoints are its seeds
        assert torch.isin(_keys(batch.n_id[batch.edge_index[0]],
                                batch.n_id[batch.edge_index[1]], n), real).all()
        if disjoint:
            assert torch.equal(batch.batch[index[0]], batch.batch[index[1]])
        seen.append(batch.input_id)
    assert torch.cat(seen).unique().numel() == 120
    assert loader.link_sampler.false_negatives == 0


def test_triplet_link_batches_match_pyg_semantics(random_graph):
    data = random_graph
    n = data.num_nodes
    pairs = data.edge_index[:, :64]
    loader = LinkNeighborLoader(data, [3], edge_label_index=pairs, batch_size=32,
                                neg_sampling=NegativeSampling("triplet", 3),
                                sampler_options={"seed": 1})
    real = _keys(*data.edge_index, n)
    for batch in _loader_batches(loader):
        src = batch.n_id[batch.src_index]
        assert torch.equal(src, pairs[0, batch.input_id])
        assert torch.equal(batch.n_id[batch.dst_pos_index], pairs[1, batch.input_id])
        assert batch.dst_neg_index.shape == (32, 3)
        neg = batch.n_id[batch.dst_neg_index]
        assert not torch.isin(_keys(src.unsqueeze(1).expand(-1, 3), neg, n), real).any()


def test_negatives_are_counted_when_the_graph_leaves_none():
    # a complete graph: every pair is an edge, so no negative can be found
    n = 6
    full = torch.cartesian_prod(torch.arange(n), torch.arange(n)).t()
    data = Data(edge_index=full, num_nodes=n)
    loader = LinkNeighborLoader(data, [2], edge_label_index=full[:, :8], batch_size=8,
                                neg_sampling="binary")
    next(iter(loader))
    assert loader.link_sampler.false_negatives == 8


def test_hetero_link_batches_label_the_right_nodes(mag):
    edge_type = ("author", "writes", "paper")
    pairs = mag[edge_type].edge_index[:, :50]
    loader = LinkNeighborLoader(mag, [3, 2], edge_label_index=(edge_type, pairs),
                                batch_size=25, neg_sampling="binary")
    batch = next(iter(loader))
    store = batch[edge_type]
    index, label = store.edge_label_index, store.edge_label
    authors, papers = batch["author"].n_id[index[0]], batch["paper"].n_id[index[1]]
    assert torch.equal(torch.stack([authors[:25], papers[:25]]), pairs[:, store.input_id])
    assert torch.equal(label, torch.cat([torch.ones(25), torch.zeros(25)]))
    assert not torch.isin(_keys(authors[25:], papers[25:], mag["paper"].num_nodes),
                          _real_edges(mag, edge_type)).any()


def test_drop_in_neighbor_loader_batches(random_graph):
    """PyG's homogeneous NeighborLoader checks, on the built-in sampler: ids map the
    batch back to the graph, seeds come first, hops are counted."""
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader

    data = random_graph.clone()
    data.x = torch.arange(data.num_nodes, dtype=torch.float).view(-1, 1)
    data.edge_attr = torch.arange(data.edge_index.size(1), dtype=torch.float)
    loader = NeighborLoader(data, num_neighbors=[5, 3], batch_size=20, shuffle=True,
                            input_nodes=torch.arange(100))
    assert isinstance(loader, PyGNeighborLoader)
    assert len(loader) == 5
    for batch in loader:
        assert batch.batch_size == 20 and batch.input_id.numel() == 20
        assert torch.equal(batch.x.view(-1).long(), batch.n_id)
        assert torch.equal(batch.n_id[:20], batch.input_id)
        assert torch.equal(batch.edge_attr.long(), batch.e_id)
        assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])
        assert sum(batch.num_sampled_nodes) == batch.num_nodes
        assert sum(batch.num_sampled_edges) == batch.edge_index.size(1)


def test_drop_in_loaders_with_workers_and_hetero_input(mag):
    loader = NeighborLoader(mag, [3, 2], input_nodes=("paper", mag["paper"].train_mask),
                            batch_size=64, num_workers=2, persistent_workers=True)
    try:
        batches = _loader_batches(loader, 4)
    finally:
        end_workers(loader)  # left to the collector: 10 s in a later test
    assert all(b["paper"].batch_size == 64 for b in batches)
    ids = torch.cat([b["paper"].input_id for b in batches])
    assert ids.unique().numel() == ids.numel()


def test_conflicting_num_neighbors_is_an_error(random_graph):
    sampler = autotune.NeighborSampler(random_graph, [5, 3])
    with pytest.raises(ConfigError, match=r"num_neighbors \[10\] conflicts"):
        NeighborLoader(random_graph, [10], neighbor_sampler=sampler)
    loader = NeighborLoader(random_graph, [5, 3], neighbor_sampler=sampler, batch_size=4)
    assert loader.node_sampler is sampler


def test_a_custom_store_needs_pyg(random_graph):
    from torch_geometric.testing import MyFeatureStore, MyGraphStore

    with pytest.raises(ConfigError, match="custom feature and graph store.*sampling_backend='pyg'"):
        NeighborLoader((MyFeatureStore(), MyGraphStore()), [5])


def test_a_graph_without_edges_samples_as_an_empty_graph():
    data = Data(x=torch.randn(12, 3), y=torch.arange(12))
    loader = NeighborLoader(data, [5, 2], batch_size=5)
    batch = next(iter(loader))
    assert batch.num_nodes == 5 and batch.e_id.numel() == 0
    assert batch.num_sampled_nodes == [5, 0, 0]


@pytest.mark.slow
def test_graphsage_inference_equals_a_full_graph_forward(random_graph):
    """PyG's layer-wise inference asserts isinstance(loader, NeighborLoader): the
    drop-in loader passes it and gives the full-graph forward's output."""
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    data = random_graph.clone()
    data.x = torch.randn(data.num_nodes, 8)
    model = GraphSAGE(8, 16, num_layers=2, out_channels=4).eval()
    loader = NeighborLoader(data, [-1], batch_size=64, shuffle=False)
    with torch.no_grad():
        layer_wise = model.inference(loader, progress_bar=False)
        full = model(data.x, data.edge_index)
    assert torch.allclose(layer_wise, full, atol=1e-5)


def test_roc_auc_is_the_mann_whitney_statistic():
    from autotune.pipeline._tasks import roc_auc

    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 8, (200,), generator=gen).float()  # many ties
    labels = torch.rand(200, generator=gen) < 0.4
    pos, neg = scores[labels], scores[~labels]
    brute = ((pos[:, None] > neg[None, :]).double()
             + 0.5 * (pos[:, None] == neg[None, :]).double()).mean()
    assert math.isclose(roc_auc(scores, labels), float(brute), rel_tol=1e-12)
    assert roc_auc(torch.tensor([0.1, 0.9]), torch.tensor([0, 1])) == 1.0


@pytest.mark.cuda
def test_hetero_and_link_sampling_on_cuda(mag, random_graph):
    s = autotune.NeighborSampler(mag, [4, 3], device="cuda", seed=0)
    out = s._sample({"paper": torch.arange(40)})
    for edge_type in mag.edge_types:
        src, _, dst = edge_type
        row, col = out.row[edge_type], out.col[edge_type]
        assert row.is_cuda
        sampled = _keys(out.node[src][row], out.node[dst][col], mag[dst].num_nodes).cpu()
        assert torch.isin(sampled, _real_edges(mag, edge_type)).all(), edge_type
    from torch_geometric.sampler import EdgeSamplerInput

    n, pairs = random_graph.num_nodes, random_graph.edge_index[:, :40]
    s = autotune.NeighborSampler(random_graph, [4, 2], device="cuda", seed=0)
    out = s.sample_from_edges(EdgeSamplerInput(torch.arange(40), pairs[0], pairs[1]),
                              NegativeSampling("binary"))
    _, index, label, _ = out.metadata
    assert index.is_cuda and label.is_cuda and out.node.is_cuda
    node, index = out.node.cpu(), index.cpu()
    src, dst = node[index[0]], node[index[1]]
    assert torch.equal(torch.stack([src[:40], dst[:40]]), pairs)
    assert not torch.isin(_keys(src[40:], dst[40:], n), _keys(*random_graph.edge_index, n)).any()
    assert label.cpu().tolist() == [1.0] * 40 + [0.0] * 40


def test_full_fanout_batches_give_the_full_graph_output(random_graph):
    """With every neighbour taken for two hops, a 2-layer model's output on the seeds
    equals its full-graph output: edges, edge weights (through e_id) and hops are all
    there. The same on the graph as a one-type HeteroData through to_hetero."""
    from torch_geometric.nn import GraphConv, to_hetero

    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = GraphConv(8, 16), GraphConv(16, 4)

        def forward(self, x, edge_index, edge_weight):
            return self.conv2(self.conv1(x, edge_index, edge_weight).relu(), edge_index,
                              edge_weight)

    torch.manual_seed(0)
    data = random_graph.clone()
    data.x, data.edge_weight = torch.randn(data.num_nodes, 8), torch.rand(data.num_edges)
    seeds = torch.tensor([7, 1, 2, 150])
    model = GNN()
    full = model(data.x, data.edge_index, data.edge_weight)[seeds]
    batch = next(iter(NeighborLoader(data, [-1, -1], input_nodes=seeds, batch_size=4)))
    out = model(batch.x, batch.edge_index, batch.edge_weight)[:4]
    assert torch.allclose(out, full, atol=1e-5)
    hetero = HeteroData()
    hetero["n"].x = data.x
    hetero["n", "to", "n"].edge_index = data.edge_index
    hetero["n", "to", "n"].edge_weight = data.edge_weight
    lifted = to_hetero(model, hetero.metadata())
    batch = next(iter(NeighborLoader(hetero, [-1, -1], input_nodes=("n", seeds),
                                     batch_size=4)))
    out = lifted(batch.x_dict, batch.edge_index_dict, batch.edge_weight_dict)["n"][:4]
    assert torch.allclose(out, full, atol=1e-5)


def test_gpu_resident_views_of_hetero_and_link_graphs_give_exact_batches(mag, random_graph):
    """What gpu_sampling builds for heterogeneous graphs and link prediction, on CPU:
    the view the loader indexes (labels, features unless pinned, an empty edge_index
    per edge type), the pinned features' gather per node type in Triton's
    interpreter, and the sizes the fit check counts."""
    from torch_geometric.loader import LinkLoader, NodeLoader

    from autotune.pipeline._build import HostFeatures, _gpu_resident, gpu_resident_bytes

    if torch.cuda.is_available():
        pytest.skip("the interpreter runs on machines without CUDA; cuda tests cover it")
    cpu = torch.device("cpu")
    view = _gpu_resident(mag, cpu, "pinned")
    assert set(view.edge_types) == set(mag.edge_types)
    assert all(view[t].edge_index.numel() == 0 for t in view.edge_types)
    assert "x" not in view["paper"] and torch.equal(view["paper"].y, mag["paper"].y)
    assert "x" in _gpu_resident(mag, cpu, "gpu")["author"]
    fanout = {t: [4, 3] for t in mag.edge_types}
    loader = NodeLoader(view, node_sampler=autotune.NeighborSampler(mag, fanout, seed=0),
                        input_nodes=("paper", mag["paper"].train_mask), batch_size=16,
                        transform=HostFeatures(mag, cpu))
    batch = next(iter(loader))
    for node_type in mag.node_types:
        assert torch.equal(batch[node_type].x, mag[node_type].x[batch[node_type].n_id])
    need = gpu_resident_bytes(mag, "gpu")
    assert need["features"] == sum(mag[t].x.numel() * 4 for t in mag.node_types)
    assert need["graph (CSC)"] == sum(
        (mag[d].num_nodes + 1) * 8 + 2 * mag[s, r, d].edge_index.size(1) * 8
        for s, r, d in mag.edge_types)
    assert "features" not in gpu_resident_bytes(mag, "pinned")

    view = _gpu_resident(random_graph, cpu, "pinned")
    loader = LinkLoader(view, link_sampler=autotune.NeighborSampler(random_graph, [4, 2], seed=0),
                        edge_label_index=random_graph.edge_index[:, :64],
                        neg_sampling=NegativeSampling("binary"), batch_size=32,
                        transform=HostFeatures(random_graph, cpu))
    batch = next(iter(loader))
    assert torch.equal(batch.x, random_graph.x[batch.n_id])
    assert batch.edge_label.tolist() == [1.0] * 32 + [0.0] * 32


def test_gpu_sampling_is_refused_only_where_nothing_is_sampled():
    from autotune.config import TrialConfig
    from autotune.pipeline._tasks import GraphTask, HeteroLinkTask, HeteroNodeTask, LinkTask

    config = TrialConfig(device="cuda", gpu_sampling=True, sampling_backend="builtin", num_workers=0)
    for task in (LinkTask(), HeteroNodeTask("paper"),
                 HeteroLinkTask(("paper", "cites", "paper"))):
        task.check(config)
    with pytest.raises(ConfigError, match="whole graphs"):
        GraphTask().check(config.replace(task="graph"))


@pytest.mark.cuda
@pytest.mark.parametrize("placement", ["gpu", "pinned"])
def test_gpu_resident_link_and_hetero_pipelines_train_on_the_gpu(mag, random_graph, placement):
    from autotune.config import TrialConfig
    from autotune.data._splits import link_split
    from autotune.pipeline import build

    config = TrialConfig(device="cuda", gpu_sampling=True, sampling_backend="builtin", num_workers=0,
                         feature_placement=placement, batch_size=32, num_neighbors=(4, 2),
                         hidden_channels=16)
    pipes = [build(config.replace(task="link"), link_split(random_graph, seed=0)),
             build(config, mag, num_classes=int(mag["paper"].y.max()) + 1)]
    for pipe in pipes:
        assert "triton" in pipe.sampling_backend
        batch = next(iter(pipe.loader))
        assert all(s.x.is_cuda for s in batch.node_stores if "x" in s)
        assert torch.isfinite(pipe.train_step(batch))
