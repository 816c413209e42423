"""Milliseconds per batch of neighbour sampling, built-in against torch-sparse's native op.

On a CUDA machine the built-in sampler also runs on the GPU, twice: with its Triton
hop kernel (one launch per hop, one host read-back per batch) and with its torch
path. Each contender's sampled edges per second stand beside its milliseconds, to
compare with published samplers (Quiver, cuGraph, DGL's GraphBolt quote edges/s).

Graph: Reddit-shaped synthetic (232,965 nodes, power-law in-degrees, mean degree 101,
about 23.5M edges), fanout [25, 10], batch 1024. The timed call returns what the
loader hands on (a relabelled ``SamplerOutput``). Samplers run interleaved, batch by
batch, in one process, so machine noise hits both alike; figures are medians.

Two more cases, on CPU and (where there is one) on the GPU:

* link: 512 supervision edges of that graph per batch, one binary negative each
  (drawn on the sampler's device, re-drawn where it is an edge), so up to 2,048 seed
  nodes, fanout [25, 10], through ``sample_from_edges`` as PyG's ``LinkLoader`` calls it;
* hetero: the ogbn-mag-shaped synthetic graph at full size (1.94M nodes of 4 types,
  7 edge types with the reverse ones, about 42M edges), 1024 paper seeds, fanout
  [25, 10] on every edge type, through ``sample_from_nodes``;
* temporal: the Reddit-shaped graph with a random time per node (0..999), 1024 seeds
  at their own times, fanout [25, 10]: disjoint sampling without time (each seed its
  own subgraph, as temporal sampling is), against temporal "uniform" and "last";
* graphs: a graph-level batch is collated, not sampled: PyG's ``DataLoader`` over
  ``synthetic-molecules`` (scale 0.1, 4,000 graphs), ms per batch of 1024 graphs,
  unpadded and padded (pow2).

torch-sparse is optional: install it (with torch-scatter) in a throw-away virtual
environment to get the side-by-side figures; the project never depends on it.

    python benchmarks/sampler.py --out benchmarks/results/sampler.json
    python benchmarks/sampler.py --only temporal --only graphs \
        --out benchmarks/results/sampler-workloads.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from autotune.data._synthetic import synthetic_reddit
from autotune.env import cpu_model
from autotune.sampling import NeighborSampler
from torch_geometric.sampler import NodeSamplerInput

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from uniformity import star_forest, uniformity_chi_square  # noqa: E402  (tests/uniformity.py)

BATCH = 1024
LINK_BATCH = 512  # supervision edges per link batch (plus as many negatives)
FANOUT = [25, 10]
MEAN_DEGREE = 101.0  # 23.5M edges on 232,965 nodes, the graph the issue measured on


def _native_op():
    try:
        import torch_sparse  # noqa: F401
    except ImportError:
        return None
    return torch.ops.torch_sparse.neighbor_sample


def _timed(fn, sync) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - start) * 1e3


def _summary(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"median_ms": statistics.median(ordered),
            "p90_ms": ordered[int(0.9 * (len(ordered) - 1))],
            "min_ms": ordered[0], "n": len(ordered)}


def measure_speed(data, batches: int, warmup: int, cuda: bool) -> dict:
    builtin = NeighborSampler(data, FANOUT, seed=0)
    contenders = {"builtin_cpu": (builtin.sample, lambda: None)}
    native = _native_op()
    if native is not None:
        colptr, row = builtin.csc.colptr, builtin.csc.row
        contenders["torch_sparse_native"] = (
            lambda seeds: native(colptr, row, seeds, FANOUT, False, True), lambda: None)
        from torch_geometric.sampler import NeighborSampler as PyGSampler

        pyg = PyGSampler(data, FANOUT)
        contenders["pyg_neighbor_sampler"] = (
            lambda seeds: pyg.sample_from_nodes(NodeSamplerInput(None, seeds)), lambda: None)
    if cuda:
        for kernel in ("triton", "torch"):
            on_gpu = NeighborSampler(data, FANOUT, seed=0, device="cuda", kernel=kernel)
            contenders[f"builtin_cuda_{kernel}"] = (on_gpu.sample, torch.cuda.synchronize)

    gen = torch.Generator().manual_seed(1)
    train = data.train_mask.nonzero().view(-1)
    result = _interleaved(
        contenders, lambda: train[torch.randperm(train.numel(), generator=gen)[:BATCH]],
        batches, warmup)
    result["graph"] = {"num_nodes": int(data.num_nodes), "num_edges": int(data.edge_index.size(1))}
    base = result["builtin_cpu"]["median_ms"]
    if "torch_sparse_native" in result:
        result["builtin_over_native"] = base / result["torch_sparse_native"]["median_ms"]
    for kernel in ("triton", "torch"):
        if f"builtin_cuda_{kernel}" in result:
            result[f"cpu_over_cuda_{kernel}"] = base / result[f"builtin_cuda_{kernel}"]["median_ms"]
    return result


def _edge_count(out) -> int:
    if isinstance(out, tuple):  # torch-sparse's op: (node, row, col, edge)
        return int(out[1].numel())
    if not hasattr(out, "row"):  # a collated batch of whole graphs
        return int(getattr(out, "num_real_edges", out.edge_index.size(1)))
    if isinstance(out.row, dict):
        return sum(int(r.numel()) for r in out.row.values())
    return int(out.row.numel())


def _interleaved(contenders: dict, inputs, batches: int, warmup: int) -> dict:
    """Each contender's ms per batch and sampled edges/s, batch by batch in turn."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    edges: dict[str, list[int]] = {name: [] for name in contenders}
    for i in range(warmup + batches):
        batch = inputs()
        for name, (fn, sync) in contenders.items():
            out = []
            ms = _timed(lambda: out.append(fn(batch)), sync)
            if i >= warmup:
                times[name].append(ms)
                edges[name].append(_edge_count(out[0]))
    result = {}
    for name, t in times.items():
        result[name] = _summary(t)
        result[name]["edges_per_batch"] = statistics.mean(edges[name])
        result[name]["edges_per_s"] = result[name]["edges_per_batch"] / (
            result[name]["median_ms"] / 1e3)
    return result


def _on_devices(make, cuda: bool) -> dict:
    """``make(device)`` per device: the CPU, and the GPU where there is one."""
    out = {"cpu": (make("cpu"), lambda: None)}
    if cuda:
        out["cuda"] = (make("cuda"), torch.cuda.synchronize)
    return out


def measure_link(data, batches: int, warmup: int, cuda: bool) -> dict:
    """``sample_from_edges`` with binary negatives, as ``LinkLoader`` calls it."""
    from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

    negatives = NegativeSampling("binary", 1.0)
    gen = torch.Generator().manual_seed(2)

    def make(device):
        sampler = NeighborSampler(data, FANOUT, seed=0, device=device)
        return lambda index: sampler.sample_from_edges(index, negatives)

    def inputs():
        ids = torch.randint(0, data.edge_index.size(1), (LINK_BATCH,), generator=gen)
        return EdgeSamplerInput(ids, data.edge_index[0, ids], data.edge_index[1, ids])

    contenders = {f"link_{d}": c for d, c in _on_devices(make, cuda).items()}
    result = _interleaved(contenders, inputs, batches, warmup)
    result["supervision_edges_per_batch"] = LINK_BATCH
    return result


def measure_hetero(batches: int, warmup: int, cuda: bool) -> dict:
    """``sample_from_nodes`` on the ogbn-mag-shaped graph, 1024 paper seeds."""
    from autotune.data._synthetic import synthetic_mag

    started = time.perf_counter()
    data = synthetic_mag(scale=1.0, seed=0, num_features=1)
    built_s = time.perf_counter() - started
    papers = data["paper"].train_mask.nonzero().view(-1)
    gen = torch.Generator().manual_seed(3)

    def make(device):
        sampler = NeighborSampler(data, FANOUT, seed=0, device=device)
        return sampler.sample_from_nodes

    def inputs():
        seeds = papers[torch.randperm(papers.numel(), generator=gen)[:BATCH]]
        return NodeSamplerInput(None, seeds, input_type="paper")

    contenders = {f"hetero_{d}": c for d, c in _on_devices(make, cuda).items()}
    result = _interleaved(contenders, inputs, batches, warmup)
    result["graph"] = {"num_nodes": int(data.num_nodes), "num_edges": int(data.num_edges),
                       "node_types": len(data.node_types), "edge_types": len(data.edge_types),
                       "generated_s": built_s}
    return result


def measure_temporal(data, batches: int, warmup: int, cuda: bool) -> dict:
    """Temporal node sampling against disjoint sampling without time."""
    gen = torch.Generator().manual_seed(4)
    timed = data.clone()
    timed.time = torch.randint(0, 1000, (data.num_nodes,), generator=gen)
    contenders = {}
    for device, sync in (("cpu", lambda: None), *((("cuda", torch.cuda.synchronize),)
                                                   if cuda else ())):
        plain = NeighborSampler(data, FANOUT, seed=0, device=device, disjoint=True)
        contenders[f"disjoint_{device}"] = (plain.sample_from_nodes, sync)
        for strategy in ("uniform", "last"):
            started = time.perf_counter()
            sampler = NeighborSampler(timed, FANOUT, seed=0, device=device, time_attr="time",
                                      temporal_strategy=strategy)
            built = time.perf_counter() - started
            contenders[f"temporal_{strategy}_{device}"] = (sampler.sample_from_nodes, sync)

    def inputs():
        return NodeSamplerInput(None, torch.randint(0, data.num_nodes, (BATCH,), generator=gen))

    result = _interleaved(contenders, inputs, batches, warmup)
    result["time_order_built_s"] = built
    return result


def measure_graph_batches(batches: int, warmup: int) -> dict:
    """Collating 1024 whole graphs per batch, unpadded and padded."""
    from autotune.data._graphsets import synthetic_molecules
    from autotune.sampling import GraphLoader
    from autotune.pipeline._build import PadToBucket

    graphs = synthetic_molecules(scale=0.1, seed=0).split("train")
    loaders = {"graphs_cpu": GraphLoader(graphs, batch_size=BATCH, shuffle=True),
               "graphs_padded_cpu": GraphLoader(graphs, batch_size=BATCH, shuffle=True,
                                                transform=PadToBucket("pow2"))}
    iters = {name: iter(loader) for name, loader in loaders.items()}

    def next_batch(name):
        try:
            return next(iters[name])
        except StopIteration:
            iters[name] = iter(loaders[name])
            return next(iters[name])

    contenders = {name: (lambda _, name=name: next_batch(name), lambda: None)
                  for name in loaders}
    result = _interleaved(contenders, lambda: None, batches, warmup)
    for name in loaders:
        result[name]["graphs_per_s"] = BATCH / (result[name]["median_ms"] / 1e3)
    return result


def measure_uniformity() -> dict:
    """Chi-square of drawing 5 of a star's 40 in-neighbours 20,000 times (39 dof)."""
    stars = star_forest(2000, 40)
    builtin = NeighborSampler(stars, [5], seed=1234)

    def builtin_positions(centers):
        out = builtin.sample(centers)
        return out.edge - builtin.csc.colptr[out.node[out.col]]

    result = {"dof": 39, "critical_p001": 72.05,
              "builtin": uniformity_chi_square(builtin_positions)}
    if torch.cuda.is_available():
        on_gpu = NeighborSampler(stars, [5], seed=1234, device="cuda", kernel="triton")

        def kernel_positions(centers):
            out = on_gpu.sample(centers)
            return out.edge - on_gpu.csc.colptr[out.node[out.col]]

        result["builtin_cuda_triton"] = uniformity_chi_square(kernel_positions)
    native = _native_op()
    if native is not None:
        torch.manual_seed(1234)
        colptr, row = builtin.csc.colptr, builtin.csc.row

        def native_positions(centers):
            node, _, col, edge = native(colptr, row, centers, [5], False, True)
            return edge - colptr[node[col]]

        result["torch_sparse_native"] = uniformity_chi_square(native_positions)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/sampler.json")
    parser.add_argument("--only", choices=["nodes", "link", "hetero", "temporal", "graphs"],
                        action="append",
                        help="run these cases only (default: all)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    only = set(args.only or ["nodes", "link", "hetero", "temporal", "graphs"])
    data = None
    if only & {"nodes", "link", "temporal"}:
        data = synthetic_reddit(scale=1.0, seed=0, mean_degree=MEAN_DEGREE, num_features=1)
    report = {
        "benchmark": "sampler", "batch_size": BATCH, "fanout": FANOUT,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu": cpu_model(),
        "gpu": torch.cuda.get_device_name() if cuda else None,
    }
    if "nodes" in only:
        report["speed"] = measure_speed(data, args.batches, args.warmup, cuda)
        report["uniformity_chi2"] = measure_uniformity()
    if "link" in only:
        report["link"] = measure_link(data, args.batches, args.warmup, cuda)
    if "hetero" in only:
        report["hetero"] = measure_hetero(args.batches, args.warmup, cuda)
    if "temporal" in only:
        report["temporal"] = measure_temporal(data, args.batches, args.warmup, cuda)
    if "graphs" in only:
        report["graphs"] = measure_graph_batches(args.batches, args.warmup)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
