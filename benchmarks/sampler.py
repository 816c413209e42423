"""Milliseconds per batch of neighbour sampling, built-in against torch-sparse's native op.

On a CUDA machine the built-in sampler also runs on the GPU, twice: with its Triton
hop kernel (one launch per hop, one host read-back per batch) and with its torch
path. Each contender's sampled edges per second stand beside its milliseconds, to
compare with published samplers (Quiver, cuGraph, DGL's GraphBolt quote edges/s).

Graph: Reddit-shaped synthetic (232,965 nodes, power-law in-degrees, mean degree 101,
about 23.5M edges), fanout [25, 10], batch 1024. The timed call returns what the
loader hands on (a relabelled ``SamplerOutput``). Samplers run interleaved, batch by
batch, in one process, so machine noise hits both alike; figures are medians.

torch-sparse is optional: install it (with torch-scatter) in a throw-away virtual
environment to get the side-by-side figures; the project never depends on it.

    python benchmarks/sampler.py --out benchmarks/results/sampler.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from autotune.datasets import synthetic_reddit
from autotune.env import cpu_model
from autotune.sampler import NeighborSampler, star_forest, uniformity_chi_square
from torch_geometric.sampler import NodeSamplerInput

BATCH = 1024
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


def measure_speed(batches: int, warmup: int, cuda: bool) -> dict:
    data = synthetic_reddit(scale=1.0, seed=0, mean_degree=MEAN_DEGREE, num_features=1)
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
    times: dict[str, list[float]] = {name: [] for name in contenders}
    edges: dict[str, list[int]] = {name: [] for name in contenders}
    for i in range(warmup + batches):
        seeds = train[torch.randperm(train.numel(), generator=gen)[:BATCH]]
        for name, (fn, sync) in contenders.items():
            out = []
            ms = _timed(lambda: out.append(fn(seeds)), sync)
            if i >= warmup:
                times[name].append(ms)
                edges[name].append(_edge_count(out[0]))
    result = {}
    for name, t in times.items():
        result[name] = _summary(t)
        result[name]["edges_per_batch"] = statistics.mean(edges[name])
        result[name]["edges_per_s"] = result[name]["edges_per_batch"] / (
            result[name]["median_ms"] / 1e3)
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
    return int(out.row.numel())


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
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    report = {
        "benchmark": "sampler", "batch_size": BATCH, "fanout": FANOUT,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu": cpu_model(),
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "speed": measure_speed(args.batches, args.warmup, cuda),
        "uniformity_chi2": measure_uniformity(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
