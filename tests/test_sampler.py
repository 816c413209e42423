from __future__ import annotations

import pickle

import pytest
import torch
from torch_geometric.loader import NodeLoader

import autotune
from autotune.pipeline._build import end_workers
from autotune.sampling import _neighbor as sampler_mod
from uniformity import star_forest, uniformity_chi_square
from autotune.sampling import _subgraph as subgraph
from autotune.sampling._subgraph import UNSET
from autotune.errors import BackendUnavailableError, ConfigError

# chi-square critical value for 39 degrees of freedom at p = 0.001: a uniform
# sampler exceeds it once in a thousand seeds; torch-sparse's scores ~534.
CHI2_39DOF_P001 = 72.05


@pytest.fixture(params=["torch", "triton"])
def kernel(request, monkeypatch):
    """Both ways of drawing a hop. The Triton kernel runs in Triton's interpreter on
    CPU tensors (TRITON_INTERPRET=1), so CI checks the kernel itself, not a twin."""
    if request.param == "triton" and torch.cuda.is_available():
        pytest.skip("the interpreter runs on machines without CUDA; cuda tests cover the kernel")
    return request.param


def _in_degree(data):
    return torch.bincount(data.edge_index[1], minlength=data.num_nodes)


def _edge_keys(src, dst, n):
    return src.long() * n + dst.long()


def test_every_sampled_edge_exists(random_graph, kernel):
    s = autotune.NeighborSampler(random_graph, [5, 4, 3], seed=0, kernel=kernel)
    out = s.sample(torch.arange(0, 40))
    n = random_graph.num_nodes
    sampled = _edge_keys(out.node[out.row], out.node[out.col], n)
    real = _edge_keys(*random_graph.edge_index, n)
    assert sampled.numel() > 0
    assert torch.isin(sampled, real).all()
    # e_id (through edge_permutation) points at the very edge in the original edge_index
    e_id = s.edge_permutation[out.edge]
    assert torch.equal(random_graph.edge_index[0, e_id], out.node[out.row])
    assert torch.equal(random_graph.edge_index[1, e_id], out.node[out.col])


@pytest.mark.parametrize("fanout", [[3, 2], [-1, 2], [10, -1], [10, 3]])
def test_each_node_gets_min_deg_k_distinct_neighbours(random_graph, fanout):
    # the kernel draws k >= 1 only; without CUDA it runs in Triton's interpreter
    kernel = "torch" if -1 in fanout or torch.cuda.is_available() else "triton"
    s = autotune.NeighborSampler(random_graph, fanout, seed=1, kernel=kernel)
    out = s.sample(torch.tensor([7, 1, 2, 3, 299]))  # 299 is isolated
    deg = _in_degree(random_graph)
    start = 0
    for hop, k in enumerate(fanout):
        lo = sum(out.num_sampled_nodes[:hop])
        hi = lo + out.num_sampled_nodes[hop]
        edges = slice(start, start + out.num_sampled_edges[hop])
        start += out.num_sampled_edges[hop]
        col, edge = out.col[edges], out.edge[edges]
        assert ((col >= lo) & (col < hi)).all(), "an edge's target is outside its hop"
        for local in range(lo, hi):
            mine = edge[col == local]
            d = int(deg[out.node[local]])
            assert mine.numel() == (d if k < 0 else min(d, k))
            assert mine.unique().numel() == mine.numel(), "a neighbour was drawn twice"


def test_consecutive_batches_share_no_state(random_graph, kernel):
    # the per-process scratch maps must be clean again after each batch
    s = autotune.NeighborSampler(random_graph, [5, 4], seed=0, kernel=kernel)
    n = random_graph.num_nodes
    real = _edge_keys(*random_graph.edge_index, n)
    for seeds in (torch.arange(0, 40), torch.arange(20, 60), torch.arange(0, 40)):
        out = s.sample(seeds)
        assert (out.row >= 0).all() and out.node.unique().numel() == out.node.numel()
        assert torch.isin(_edge_keys(out.node[out.row], out.node[out.col], n), real).all()
    assoc, first_pos = s._scratch()
    assert (assoc == -1).all() and (first_pos == UNSET).all()


def test_replace_draws_k_for_every_node_with_neighbours(random_graph, kernel):
    s = autotune.NeighborSampler(random_graph, [50], replace=True, seed=0, kernel=kernel)
    seeds = torch.tensor([7, 1, 299])
    out = s.sample(seeds)
    counts = torch.bincount(out.col, minlength=3)
    assert counts.tolist() == [50, 50, 0]
    assert out.edge[out.col == 1].unique().numel() < 50  # node 1 has far fewer neighbours


def test_seeds_first_and_counts_add_up(random_graph, kernel):
    seeds = torch.tensor([5, 9, 7, 100])
    out = autotune.NeighborSampler(random_graph, [4, 3], seed=0, kernel=kernel).sample(seeds)
    assert torch.equal(out.node[:4], seeds)
    assert sum(out.num_sampled_nodes) == out.node.numel()
    assert sum(out.num_sampled_edges) == out.row.numel() == out.col.numel()
    assert out.num_sampled_nodes[0] == 4
    assert out.node.unique().numel() == out.node.numel(), "output must not repeat nodes"


def _builtin_positions(sampler):
    def positions(centers):
        out = sampler.sample(centers)
        return out.edge - sampler.csc.colptr[out.node[out.col]]
    return positions


@pytest.mark.slow
@pytest.mark.parametrize("replace", [False, True])
def test_chi_square_uniformity_of_a_high_degree_node(kernel, replace):
    # 5 of 40 in-neighbours, 10,000 draws (1,000 stars x 10 rounds: 1,250 a bin), fixed
    # seed (in Triton's interpreter, without a GPU, 2,000 stars took 18-25 s a test)
    s = autotune.NeighborSampler(star_forest(1000, 40), [5], seed=1234,
                                 kernel=kernel, replace=replace)
    chi2 = uniformity_chi_square(_builtin_positions(s), num_stars=1000)
    assert chi2 < CHI2_39DOF_P001, f"chi2={chi2:.1f} on 39 dof"


def test_chi_square_catches_an_exclusive_upper_bound(monkeypatch):
    # The same statistic flags torch-sparse's bug, so the test above can fail.
    def biased(deg, k, generator):
        out = torch.empty(deg.numel(), k, dtype=torch.long)
        for p in range(k):
            j = deg - k + p
            t = (torch.rand(deg.numel(), dtype=torch.float64, generator=generator) * j).long()
            if p:
                t = torch.where((out[:, :p] == t[:, None]).any(1), j, t)
            out[:, p] = t
        return out

    monkeypatch.setattr(subgraph, "floyd_offsets", biased)
    s = autotune.NeighborSampler(star_forest(1000, 40), [5], seed=1234)
    assert uniformity_chi_square(_builtin_positions(s), num_stars=1000) > CHI2_39DOF_P001


def test_reproducible_with_a_seed(random_graph, kernel):
    seeds = torch.arange(30)
    make = lambda seed: autotune.NeighborSampler(random_graph, [5, 5], seed=seed,  # noqa: E731
                                                 kernel=kernel)
    a, b, c = make(7).sample(seeds), make(7).sample(seeds), make(8).sample(seeds)
    assert torch.equal(a.node, b.node) and torch.equal(a.edge, b.edge)
    assert not torch.equal(a.edge, c.edge)


def _check_batch(batch, data):
    n = data.num_nodes
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    assert torch.isin(_edge_keys(src, dst, n), _edge_keys(*data.edge_index, n)).all()
    assert torch.equal(batch.x, data.x[batch.n_id])
    assert torch.equal(batch.n_id[:batch.batch_size], batch.input_id)
    assert sum(batch.num_sampled_nodes) == batch.num_nodes


@pytest.mark.parametrize("cache", [False, True])
def test_node_loader_with_two_workers(random_graph, tmp_path, cache):
    s = autotune.NeighborSampler(random_graph, [4, 3], cache_dir=tmp_path if cache else None)
    loader = NodeLoader(random_graph, node_sampler=s, input_nodes=random_graph.train_mask,
                        batch_size=32, num_workers=2, persistent_workers=True, shuffle=True)
    seen = []
    try:
        for _ in range(2):  # persistent workers serve a second epoch
            for batch in loader:
                _check_batch(batch, random_graph)
                seen.append(batch.input_id)
    finally:
        end_workers(loader)  # left to the collector: 10 s in a later test
    assert torch.cat(seen).numel() == 2 * int(random_graph.train_mask.sum())


def test_file_backed_csc_travels_as_a_path(random_graph, tmp_path):
    s = autotune.NeighborSampler(random_graph, [4, 3], cache_dir=tmp_path)
    blob = pickle.dumps(s)
    assert len(blob) < 2000, "the CSC must not be copied into the pickle"
    clone = pickle.loads(blob)
    assert torch.equal(clone.csc.row, s.csc.row)
    assert list(tmp_path.glob("csc-*.pt")), "no cache file was written"


def test_cache_file_is_reused(random_graph, tmp_path):
    autotune.NeighborSampler(random_graph, [2], cache_dir=tmp_path)
    (path,) = tmp_path.glob("csc-*.pt")
    mtime = path.stat().st_mtime_ns
    autotune.NeighborSampler(random_graph, [2], cache_dir=tmp_path)
    assert path.stat().st_mtime_ns == mtime


def test_loader_with_cpu_affinity_and_transform(random_graph):
    s = autotune.NeighborSampler(random_graph, [3, 3])
    loader = NodeLoader(random_graph, node_sampler=s, input_nodes=random_graph.train_mask,
                        batch_size=64, num_workers=1, transform=lambda b: b.update({"tag": 1}))
    with loader.enable_cpu_affinity(loader_cores=[0]):
        batch = next(iter(loader))
    assert batch.tag == 1
    _check_batch(batch, random_graph)


def _sage_step(loader, data):
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=3)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    batch = next(iter(loader))
    # PyG's torch-sparse path gives no per-hop counts (pyg-lib and ours do)
    hops = "num_sampled_nodes" in batch
    out = model(batch.x, batch.edge_index,
                num_sampled_nodes_per_hop=batch.num_sampled_nodes if hops else None,
                num_sampled_edges_per_hop=batch.num_sampled_edges if hops else None,
                )[:batch.batch_size]
    loss = torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size])
    loss.backward()
    opt.step()
    return out.shape, loss


@pytest.mark.parametrize("backend", ["builtin", "pyg"])
def test_sage_training_step(random_graph, backend):
    if backend == "pyg" and sampler_mod.native_backend() is None:
        pytest.skip("neither pyg-lib nor torch-sparse is installed")
    s = autotune.make_sampler(random_graph, [5, 5], backend=backend)
    loader = NodeLoader(random_graph, node_sampler=s, input_nodes=random_graph.train_mask,
                        batch_size=16)
    shape, loss = _sage_step(loader, random_graph)
    assert shape == (16, 3)
    assert torch.isfinite(loss)


def test_backend_choice():
    if sampler_mod.native_backend() is None:
        assert sampler_mod.resolve_backend("auto") == "builtin"
        with pytest.raises(BackendUnavailableError, match="pyg-lib or torch-sparse"):
            sampler_mod.resolve_backend("pyg")
    else:
        assert sampler_mod.resolve_backend("auto") == "pyg"
    assert sampler_mod.resolve_backend("builtin") == "builtin"
    with pytest.raises(ConfigError, match=r"got 'fast'"):
        sampler_mod.resolve_backend("fast")


@pytest.mark.parametrize("bad", [5, [2, -3], "25,10", [2.5]])
def test_bad_num_neighbors(random_graph, bad):
    with pytest.raises(ConfigError, match="num_neighbors"):
        autotune.NeighborSampler(random_graph, bad)


@pytest.mark.cuda
def test_cuda_matches_the_graph(random_graph):
    s = autotune.NeighborSampler(random_graph, [5, 4], device="cuda", seed=0)
    out = s.sample(torch.arange(0, 40))
    assert out.node.is_cuda
    n = random_graph.num_nodes
    sampled = _edge_keys(out.node[out.row], out.node[out.col], n).cpu()
    assert torch.isin(sampled, _edge_keys(*random_graph.edge_index, n)).all()


@pytest.mark.cuda
def test_cuda_kernel_draws_min_deg_k_distinct_existing_neighbours(random_graph):
    s = autotune.NeighborSampler(random_graph, [10, 3], device="cuda", seed=0, kernel="triton")
    seeds = torch.tensor([7, 1, 2, 3, 299])
    out = s.sample(seeds)
    node, row, col, edge = (t.cpu() for t in (out.node, out.row, out.col, out.edge))
    n, deg = random_graph.num_nodes, _in_degree(random_graph)
    assert torch.isin(_edge_keys(node[row], node[col], n),
                      _edge_keys(*random_graph.edge_index, n)).all()
    assert torch.equal(node[:5], seeds) and node.unique().numel() == node.numel()
    for local in range(out.num_sampled_nodes[0]):
        mine = edge[col == local]
        assert mine.numel() == min(int(deg[node[local]]), 10)
        assert mine.unique().numel() == mine.numel()
    assert (s._scratch()[0] == -1).all()


@pytest.mark.cuda
def test_cuda_kernel_chi_square_uniformity():
    s = autotune.NeighborSampler(star_forest(2000, 40), [5], seed=1234,
                                 device="cuda", kernel="triton")
    chi2 = uniformity_chi_square(_builtin_positions(s))
    assert chi2 < CHI2_39DOF_P001, f"chi2={chi2:.1f} on 39 dof"


@pytest.mark.cuda
def test_cuda_kernel_sampling_never_syncs_the_device(random_graph):
    # sync debug mode raises on any synchronising op (item, nonzero, pageable copies);
    # the one read-back of a batch's sizes waits on an event of the sampler's stream.
    s = autotune.NeighborSampler(random_graph, [5, 4], device="cuda", seed=0, kernel="triton")
    seeds = torch.arange(40).pin_memory()
    s.sample(seeds)  # scratch allocation and the kernel's compilation
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = s.sample(seeds)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.node.is_cuda and sum(out.num_sampled_edges) == out.row.numel() > 0


def test_lookahead_loader_gives_node_loaders_batches(random_graph, kernel):
    """One batch launched ahead, the same batches in the same order (the random
    streams are drawn at launch, in batch order), the last, smaller one included."""
    from autotune.sampling import LookaheadNodeLoader

    if kernel == "torch":
        with pytest.raises(ConfigError, match="triton kernel"):
            LookaheadNodeLoader(random_graph, node_sampler=autotune.NeighborSampler(
                random_graph, [4, 3], kernel="torch"), batch_size=16)
        return
    make = lambda: autotune.NeighborSampler(random_graph, [4, 3], seed=3,  # noqa: E731
                                            kernel="triton")
    # 80 seeds in batches of 32: three, the last of 16 (Triton's interpreter is slow)
    seeds = torch.zeros_like(random_graph.train_mask)
    seeds[random_graph.train_mask.nonzero().view(-1)[:80]] = True
    kwargs = dict(input_nodes=seeds, batch_size=32, shuffle=False)
    ahead = list(LookaheadNodeLoader(random_graph, node_sampler=make(), **kwargs))
    plain = list(NodeLoader(random_graph, node_sampler=make(), **kwargs))
    assert len(ahead) == len(plain) == 3 and ahead[-1].batch_size == 16
    for a, b in zip(ahead, plain):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.input_id, b.input_id) and a.batch_size == b.batch_size
        _check_batch(a, random_graph)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_gather_rows_is_exactly_x_of_index(dtype):
    """feature_placement pinned's gather, in Triton's interpreter: exactly x[n_id],
    rows repeated, in any order, a row count and a width that are no multiple of the
    kernel's blocks (602 features, as Reddit's), a negative index a row of zeros."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter runs on machines without CUDA; a cuda test covers it")
    from autotune.sampling import gather_rows

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(300, 602, generator=g) * 100).to(dtype)
    index = torch.randint(0, 300, (77,), generator=g)
    index[5] = index[6] = 299
    out = gather_rows(x, index)
    assert out.dtype == dtype and out.shape == (77, 602)
    assert torch.equal(out, x[index])
    holes = index.clone()
    holes[[0, 40]] = -1
    out = gather_rows(x, holes)
    assert torch.equal(out[holes >= 0], x[holes[holes >= 0]])
    assert not out[[0, 40]].any()
    assert gather_rows(x, index[:0]).shape == (0, 602)
    with pytest.raises(ValueError, match="contiguous rows"):
        gather_rows(x.t(), index)


@pytest.mark.cuda
def test_gather_rows_reads_pinned_host_features_from_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from autotune.sampling import gather_rows

    x = torch.randn(10_000, 602).to(torch.bfloat16).pin_memory()
    index = torch.randint(0, 10_000, (4096,), device="cuda")
    out = gather_rows(x, index)
    assert out.device.type == "cuda"
    assert torch.equal(out, x.cuda()[index])
    with pytest.raises(ValueError, match="pinned"):
        gather_rows(x.clone(), index)  # a pageable copy
