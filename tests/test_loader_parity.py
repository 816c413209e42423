"""PyG's loader semantics on autotune's sampler: bidirectional and induced subgraphs,
zero hops, PyG's wording, and temporal sampling (node and edge time, "uniform" and
"last", links with edge_label_time), each checked against the graph itself."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data, HeteroData

import autotune
from autotune.errors import ConfigError
from autotune.sampling import LinkNeighborLoader, NeighborLoader


def _pairs(edge_index) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.t().tolist()))


def _global_pairs(batch_edge_index, src_ids, dst_ids) -> set[tuple[int, int]]:
    return _pairs(torch.stack([src_ids[batch_edge_index[0]], dst_ids[batch_edge_index[1]]]))


@pytest.fixture
def timed_graph():
    """A random graph with a time on every node and on every edge."""
    gen = torch.Generator().manual_seed(1)
    n, m = 200, 3000
    edge_index = torch.randint(0, n, (2, m), generator=gen)
    return Data(x=torch.arange(n).view(-1, 1).float(), edge_index=edge_index, num_nodes=n,
                time=torch.randint(0, 100, (n,), generator=gen),
                edge_time=torch.randint(0, 100, (m,), generator=gen))


def test_bidirectional_holds_every_sampled_edge_both_ways(random_graph):
    directional = NeighborLoader(random_graph, [4, 3], batch_size=16, sampler_options={
        "seed": 0})
    both = NeighborLoader(random_graph, [4, 3], batch_size=16, subgraph_type="bidirectional",
                          sampler_options={"seed": 0})
    graph = _pairs(random_graph.edge_index)
    for one, two in zip(directional, both):
        assert torch.equal(one.n_id, two.n_id)  # the same draw
        sampled = _global_pairs(one.edge_index, one.n_id, one.n_id)
        assert sampled <= graph
        edges = _global_pairs(two.edge_index, two.n_id, two.n_id)
        assert edges == sampled | {(d, s) for s, d in sampled}


def test_bidirectional_on_a_heterogeneous_graph():
    from autotune.data._synthetic import synthetic_mag

    mag = synthetic_mag(scale=0.002, seed=3)
    loader = NeighborLoader(mag, [3, 2], input_nodes="paper", batch_size=8,
                            subgraph_type="bidirectional")
    batch = next(iter(loader))
    cites = ("paper", "cites", "paper")
    edges = _pairs(batch[cites].edge_index)
    assert edges and all((d, s) in edges for s, d in edges)


def test_induced_holds_every_graph_edge_among_its_nodes(random_graph):
    loader = NeighborLoader(random_graph, [3, 2], batch_size=20, subgraph_type="induced")
    graph = random_graph.edge_index
    for batch in loader:
        inside = torch.zeros(random_graph.num_nodes, dtype=torch.bool)
        inside[batch.n_id] = True
        among = graph[:, inside[graph[0]] & inside[graph[1]]]
        got = torch.stack([batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]])
        # a multigraph: the same pairs, as many times each
        assert sorted(map(tuple, got.t().tolist())) == sorted(map(tuple, among.t().tolist()))
        assert torch.equal(graph[:, batch.e_id], got)  # edge ids point at those edges


def test_induced_on_a_heterogeneous_graph():
    from autotune.data._synthetic import synthetic_mag

    mag = synthetic_mag(scale=0.002, seed=3)
    batch = next(iter(NeighborLoader(mag, [2, 2], input_nodes="paper", batch_size=8,
                                     subgraph_type="induced")))
    for edge_type in mag.edge_types:
        src, _, dst = edge_type
        edges = mag[edge_type].edge_index
        in_src = torch.zeros(mag[src].num_nodes, dtype=torch.bool)
        in_dst = torch.zeros(mag[dst].num_nodes, dtype=torch.bool)
        in_src[batch[src].n_id], in_dst[batch[dst].n_id] = True, True
        among = edges[:, in_src[edges[0]] & in_dst[edges[1]]]
        got = batch[edge_type].edge_index
        assert got.size(1) == among.size(1)
        assert _global_pairs(got, batch[src].n_id, batch[dst].n_id) == _pairs(among)


def test_induced_refuses_disjoint_as_pyg_does(random_graph):
    with pytest.raises(ValueError, match="'disjoint' sampling not supported"):
        NeighborLoader(random_graph, [2], subgraph_type="induced", disjoint=True)


def test_zero_hops_gives_the_seeds_alone(random_graph):
    batch = next(iter(NeighborLoader(random_graph, [], batch_size=10)))
    assert batch.n_id.tolist() == list(range(10))
    assert batch.edge_index.size(1) == 0 and batch.num_sampled_nodes == [10]
    link = next(iter(LinkNeighborLoader(random_graph, [], batch_size=6,
                                        edge_label_index=random_graph.edge_index[:, :30])))
    assert link.num_nodes == link.edge_label_index.unique().numel()


def test_hop_counts_that_differ_use_pygs_wording():
    from autotune.data._synthetic import synthetic_mag

    mag = synthetic_mag(scale=0.002, seed=3)
    fanout = {t: [2, 2] for t in mag.edge_types}
    fanout[mag.edge_types[0]] = [2]
    with pytest.raises(ValueError, match="hops must be the same across all"):
        NeighborLoader(mag, fanout, input_nodes="paper")


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_node_time_keeps_every_node_no_later_than_its_seed(timed_graph, strategy):
    data = Data(x=timed_graph.x, edge_index=timed_graph.edge_index, time=timed_graph.time)
    loader = NeighborLoader(data, [5, 3], batch_size=16, time_attr="time",
                            temporal_strategy=strategy)
    for batch in loader:
        seed_time = data.time[batch.n_id[:batch.batch_size]]
        assert batch.batch is not None  # temporal sampling is disjoint
        assert bool((batch.time <= seed_time[batch.batch]).all())
        # every sampled edge is a graph edge
        assert _global_pairs(batch.edge_index, batch.n_id, batch.n_id) <= \
            _pairs(data.edge_index)


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_edge_time_keeps_every_edge_no_later_than_its_seed(timed_graph, strategy):
    data = Data(x=timed_graph.x, edge_index=timed_graph.edge_index,
                edge_time=timed_graph.edge_time, num_nodes=timed_graph.num_nodes)
    input_time = torch.randint(0, 100, (data.num_nodes,), generator=torch.Generator()
                               .manual_seed(2))
    loader = NeighborLoader(data, [4, 4], batch_size=16, time_attr="edge_time",
                            input_time=input_time, temporal_strategy=strategy)
    seen = 0
    for batch in loader:
        owner = batch.batch[batch.edge_index[1]]  # each edge joins its target's subgraph
        assert bool((batch.edge_time <= batch.seed_time[owner]).all())
        assert torch.equal(data.edge_time[batch.e_id], batch.edge_time)
        seen += batch.edge_time.numel()
    assert seen > 0


def test_last_takes_the_latest_neighbours():
    """One hop of "last" from each node, against a brute-force sampler: with distinct
    neighbour times the draw is the k latest exactly."""
    gen = torch.Generator().manual_seed(3)
    n = 60
    edge_index = torch.stack([torch.randperm(n * 8, generator=gen) % n,
                              torch.randint(0, n, (n * 8,), generator=gen)])
    edge_index = torch.unique(edge_index, dim=1)
    data = Data(edge_index=edge_index, num_nodes=n, time=torch.randperm(n, generator=gen))
    k = 3
    loader = NeighborLoader(data, [k], batch_size=1, time_attr="time",
                            temporal_strategy="last")
    for seed, batch in enumerate(loader):
        got = set(batch.n_id[batch.edge_index[0]].tolist())
        src = edge_index[0][edge_index[1] == seed]
        src = src[data.time[src] <= data.time[seed]]
        latest = src[torch.argsort(data.time[src], descending=True)][:k]
        assert got == set(latest.tolist()), seed


def test_uniform_draws_among_all_neighbours_in_time():
    """"uniform" is not "last": over many draws every neighbour in time is drawn."""
    n = 30
    src = torch.arange(1, n)
    data = Data(edge_index=torch.stack([src, torch.zeros_like(src)]), num_nodes=n,
                time=torch.arange(n))
    sampler = autotune.NeighborSampler(data, [2], time_attr="time", seed=0)
    from torch_geometric.sampler import NodeSamplerInput

    drawn = set()
    for _ in range(200):
        out = sampler.sample_from_nodes(NodeSamplerInput(
            None, torch.tensor([0]), time=torch.tensor([20])))
        drawn |= set(out.node[1:].tolist())
    assert drawn == set(range(1, 21))


def test_temporal_heterogeneous_sampling():
    from autotune.data._synthetic import synthetic_mag

    mag = synthetic_mag(scale=0.002, seed=3)
    gen = torch.Generator().manual_seed(4)
    for node_type in mag.node_types:
        mag[node_type].time = torch.randint(0, 50, (mag[node_type].num_nodes,), generator=gen)
    loader = NeighborLoader(mag, [4, 3], input_nodes="paper", batch_size=8,
                            time_attr="time", temporal_strategy="uniform")
    for batch in loader:
        seed_time = batch["paper"].time[:8]
        for node_type in mag.node_types:
            store = batch[node_type]
            if store.num_nodes:
                assert bool((store.time <= seed_time[store.batch]).all()), node_type


@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_temporal_links_keep_to_the_label_time(timed_graph, neg):
    data = Data(x=timed_graph.x, edge_index=timed_graph.edge_index, time=timed_graph.time)
    label_index = data.edge_index[:, :200]
    label_time = torch.maximum(data.time[label_index[0]], data.time[label_index[1]]) + 10
    loader = LinkNeighborLoader(data, [4, 2], batch_size=20, edge_label_index=label_index,
                                edge_label_time=label_time, time_attr="time",
                                neg_sampling=None if neg is None else {"mode": neg})
    for batch in loader:
        seed_time = label_time[batch.input_id]
        assert bool((batch.time <= seed_time[batch.batch]).all())


def test_temporal_bad_input(timed_graph):
    with pytest.raises(ValueError, match="'missing' is neither a node-level or edge-level"):
        NeighborLoader(timed_graph, [2], time_attr="missing")
    with pytest.raises(ValueError, match="holds both"):
        hetero = HeteroData()
        hetero["a"].num_nodes, hetero["a"].t = 3, torch.arange(3)
        hetero["a", "r", "a"].edge_index = torch.tensor([[0, 1], [1, 2]])
        hetero["a", "r", "a"].t = torch.arange(2)
        NeighborLoader(hetero, [2], input_nodes="a", time_attr="t")
    with pytest.raises(ConfigError, match="temporal_strategy must be one of"):
        NeighborLoader(timed_graph, [2], time_attr="time", temporal_strategy="newest")
    edge_timed = Data(edge_index=timed_graph.edge_index, edge_time=timed_graph.edge_time,
                      num_nodes=timed_graph.num_nodes)
    with pytest.raises(ConfigError, match="pass input_time"):
        next(iter(NeighborLoader(edge_timed, [2], time_attr="edge_time")))
    from torch_geometric.sampler import NodeSamplerInput

    untimed = autotune.NeighborSampler(timed_graph, [2])
    with pytest.raises(ConfigError, match="need temporal sampling"):
        untimed.sample_from_nodes(NodeSamplerInput(None, torch.arange(3), torch.zeros(3)))


@pytest.mark.slow
def test_a_temporal_search(tmp_path):
    """--time-attr: a search runs with temporal sampling, and every trial's config
    carries the time attribute and the strategy (the pipeline test below checks
    that such a config samples in time)."""
    import json

    from _helpers import cli

    common = ["--dataset", "user_models:timed_graph", "--root", str(tmp_path / "data"),
              "--time-attr", "time", "--temporal-strategy", "last"]
    tests = str(Path(__file__).parent)
    env = {"PYTHONPATH": tests}
    proc = cli("search", *common, "--n-trials", "2", "--space", "quick", "--studies-dir",
               str(tmp_path / "studies"), "--steps", "3", "--warmup", "1",
               "--warmup-time", "0", "--max-seconds",
               "1", "--no-priors", "--confirm", "0", "-f", "json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = [t for t in json.loads(proc.stdout)["trials"] if t["state"] == "complete"]
    assert len(done) == 2
    assert all(t["config"]["time_attr"] == "time" and
               t["config"]["temporal_strategy"] == "last" for t in done)


def test_the_pipeline_samples_in_time(timed_graph):
    from autotune.config import TrialConfig
    from autotune.pipeline import build

    data = Data(x=torch.randn(timed_graph.num_nodes, 8), edge_index=timed_graph.edge_index,
                y=torch.randint(0, 3, (timed_graph.num_nodes,)), time=timed_graph.time,
                train_mask=torch.ones(timed_graph.num_nodes, dtype=torch.bool))
    config = TrialConfig(batch_size=16, num_workers=0, time_attr="time",
                         temporal_strategy="last", hidden_channels=8)
    pipe = build(config, data, num_classes=3)
    for batch, _ in zip(pipe.loader, range(4)):
        seed_time = batch.time[:batch.batch_size]
        assert bool((batch.time <= seed_time[batch.batch]).all())
        pipe.train_step(batch)
    with pytest.raises(ConfigError, match="time_attr samples node batches"):
        TrialConfig(task="link", time_attr="time")


@pytest.mark.cuda
def test_temporal_and_induced_sampling_on_cuda(timed_graph):
    """The torch path on the GPU: the same constraints hold for tensors on CUDA."""
    from torch_geometric.sampler import NodeSamplerInput

    data = Data(edge_index=timed_graph.edge_index, num_nodes=timed_graph.num_nodes,
                time=timed_graph.time)
    sampler = autotune.NeighborSampler(data, [5, 3], time_attr="time", device="cuda", seed=0)
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.arange(32)))
    seed_time = data.time[:32].cuda()
    assert out.node.is_cuda
    assert bool((data.time.cuda()[out.node] <= seed_time[out.batch]).all())
    induced = autotune.NeighborSampler(data, [3, 2], subgraph_type="induced", device="cuda")
    out = induced.sample_from_nodes(NodeSamplerInput(None, torch.arange(16)))
    inside = torch.zeros(data.num_nodes, dtype=torch.bool)
    inside[out.node.cpu()] = True
    graph = data.edge_index
    assert out.row.numel() == int((inside[graph[0]] & inside[graph[1]]).sum())
