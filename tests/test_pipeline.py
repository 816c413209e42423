from __future__ import annotations

import copy

import pytest
import torch
from _helpers import loss_and_grads as _loss_and_grads

from autotune.config import TrialConfig
from autotune.errors import ConfigError, DeviceMemoryError
from autotune.pipeline._models import BUILT_IN as MODELS, SAGE
from autotune.pipeline import build, check_config
from autotune.pipeline._build import (PadToBucket, apply_checkpointing, bucket, check_gpu_fit,
                                      gpu_resident_bytes, sparse_adjacency, worker_core_sets)


@pytest.mark.parametrize("n, ladder, expected", [
    (1, "pow2", 64), (65, "pow2", 128), (1000, "pow2", 1024),
    (65, "geometric", 80), (81, "geometric", 100), (101, "geometric", 125),
])
def test_bucket_ladders(n, ladder, expected):
    assert bucket(n, ladder) == expected


def _a_batch(data, fanout=(5, 5), batch_size=32):
    from torch_geometric.loader import NodeLoader

    from autotune.sampling import NeighborSampler

    loader = NodeLoader(data, node_sampler=NeighborSampler(data, list(fanout), seed=0),
                        input_nodes=data.train_mask, batch_size=batch_size)
    return next(iter(loader))


@pytest.mark.parametrize("ladder, model", [("pow2", "sage"), ("geometric", "sage"),
                                           ("pow2", "gcn"), ("geometric", "gat")])
def test_padding_leaves_loss_and_gradients_unchanged(tiny_synthetic, ladder, model):
    torch.manual_seed(0)
    model = MODELS[model](tiny_synthetic.num_features, 16, 4, dropout=0.0)
    batch = _a_batch(tiny_synthetic)
    padded = PadToBucket(ladder)(copy.copy(batch))
    assert padded.num_nodes == bucket(batch.num_nodes + 1, ladder)
    assert padded.edge_index.size(1) == bucket(batch.edge_index.size(1), ladder)
    loss, grads = _loss_and_grads(model, batch)
    loss_p, grads_p = _loss_and_grads(model, padded)
    torch.testing.assert_close(loss_p, loss)
    for g, gp in zip(grads, grads_p):
        torch.testing.assert_close(gp, g)


def test_checkpointing_recomputes_and_matches(tiny_synthetic):
    torch.manual_seed(0)
    model = SAGE(tiny_synthetic.num_features, 16, 4, dropout=0.0)
    twin = copy.deepcopy(model)
    assert apply_checkpointing(twin) == 2
    batch = _a_batch(tiny_synthetic)
    calls = []
    for conv in twin.convs:
        conv.conv.register_forward_pre_hook(lambda *a: calls.append(1))
    loss, grads = _loss_and_grads(model, batch)
    loss_c, grads_c = _loss_and_grads(twin, batch)
    assert len(calls) == 4, "each checkpointed conv must run again in backward"
    torch.testing.assert_close(loss_c, loss)
    for g, gc in zip(grads, grads_c):
        torch.testing.assert_close(gc, g)


def _saved_bytes(model, batch) -> int:
    saved = [0]

    def pack(tensor):
        saved[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        _loss_and_grads(model, batch)
    return saved[0]


def test_checkpointing_saves_fewer_bytes_for_backward(tiny_synthetic):
    """Measured with autograd's saved_tensors_hooks: checkpointed convs keep only
    their inputs (the non-reentrant checkpoint packs them itself), so autograd saves
    fewer bytes; the gradients stay equal."""
    torch.manual_seed(0)
    model = SAGE(tiny_synthetic.num_features, 64, 4, dropout=0.0)
    twin = copy.deepcopy(model)
    apply_checkpointing(twin)
    batch = _a_batch(tiny_synthetic, fanout=(10, 10), batch_size=64)
    plain, checkpointed = _saved_bytes(model, batch), _saved_bytes(twin, batch)
    assert checkpointed < 0.5 * plain, (checkpointed, plain)
    for g, gc in zip(_loss_and_grads(model, batch)[1], _loss_and_grads(twin, batch)[1]):
        torch.testing.assert_close(gc, g)


def test_worker_core_sets():
    assert worker_core_sets((4, 5, 6, 7), 2) == [[4, 6], [5, 7]]
    assert worker_core_sets((3,), 2) == [[3], [3]]


def test_check_config_rejects_what_the_machine_lacks():
    with pytest.raises(ConfigError, match=r"compute_cores names cores \[4096\]"):
        check_config(TrialConfig(compute_cores=(4096,)))
    with pytest.raises(ConfigError, match="num_workers 4096 exceeds"):
        check_config(TrialConfig(num_workers=4096))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="sees no CUDA device"):
            check_config(TrialConfig(device="cuda"))


@pytest.mark.parametrize("amp, dtype, model", [
    ("float32", "float32", "sage"), ("bfloat16", "bfloat16", "sage"),
    ("float16", "float16", "sage"), ("bfloat16", "bfloat16", "gcn"),
    ("bfloat16", "bfloat16", "gat")])
def test_build_trains_and_amp_reaches_the_convs(tiny_synthetic, amp, dtype, model):
    from autotune.trial._window import probe_model

    pipe = build(TrialConfig(batch_size=64, hidden_channels=32, amp_dtype=amp,
                             checkpointing=True, sampling_backend="builtin", model=model),
                 tiny_synthetic, num_classes=4)
    assert type(pipe.eager_model) is MODELS[model]
    with pipe.activate():
        losses = [float(pipe.train_step(b)) for _, b in zip(range(15), pipe.loader)]
        probe = probe_model(pipe, next(iter(pipe.loader)))
    assert losses[-1] < losses[0]
    assert pipe.scaler.is_enabled() == (amp == "float16")
    assert probe["conv_linear_dtypes"] == [dtype]
    # GAT's attention vectors are float32 parameters and autocast leaves elementwise
    # products alone, so its messages and output are float32 (the probe says so).
    assert probe["conv_output_dtypes"] == ["float32" if model == "gat" else dtype]
    assert probe["checkpointed_layers"] == 2


def test_lr_is_a_tensor_changed_in_place(tiny_synthetic):
    pipe = build(TrialConfig(batch_size=64, hidden_channels=8), tiny_synthetic, num_classes=4)
    lr = pipe.optimizer.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor)
    pipe.set_lr(0.5)
    assert pipe.optimizer.param_groups[0]["lr"] is lr and float(lr) == 0.5


def test_three_layers_and_gat_heads():
    from autotune.config import with_model

    config = with_model(TrialConfig(), model="gat", hidden=64, layers=3)
    assert config.num_neighbors == (25, 10, 10) and config.num_layers == 3
    assert with_model(config, layers=1).num_neighbors == (25,)
    with pytest.raises(ConfigError, match="multiple of 4"):
        TrialConfig(model="gat", hidden_channels=30)


def test_gpu_sampling_needs_cuda_and_no_workers():
    with pytest.raises(ConfigError, match="gpu_sampling needs device cuda"):
        TrialConfig(gpu_sampling=True, sampling_backend="builtin")
    with pytest.raises(ConfigError, match="num_workers 2"):
        TrialConfig(gpu_sampling=True, sampling_backend="builtin", device="cuda", num_workers=2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("gpu_sampling", [True, False])
def test_sampler_placement_on_cuda(tiny_synthetic, gpu_sampling):
    """GPU sampling: graph and features on the GPU, batches built there. CPU
    sampling: batches come from the CPU in pinned memory and are copied non-blocking."""
    config = TrialConfig(batch_size=64, hidden_channels=32, sampling_backend="builtin", device="cuda",
                         gpu_sampling=gpu_sampling)
    pipe = build(config, tiny_synthetic, num_classes=4)
    batch = next(iter(pipe.loader))
    assert batch.x.is_cuda == gpu_sampling
    assert pipe.loader.pin_memory == (not gpu_sampling)
    if not gpu_sampling:
        assert batch.x.is_pinned()
    loss = pipe.train_step(batch)
    assert loss.is_cuda and torch.isfinite(loss)


@pytest.mark.parametrize("padded", [False, True])
def test_sparse_aggregation_gives_scatters_loss_and_gradients(tiny_synthetic, padded):
    torch.manual_seed(0)
    model = SAGE(tiny_synthetic.num_features, 16, 4, dropout=0.0)
    batch = _a_batch(tiny_synthetic)
    if padded:  # padding edges all point at one node: a row with many entries
        batch = PadToBucket("pow2")(batch)
    # the sampler emits edges grouped by target already: shuffled, the CSR must sort them
    batch.edge_index = batch.edge_index[:, torch.randperm(batch.edge_index.size(1))]
    scatter_loss, scatter_grads = _loss_and_grads(model, batch)
    adj = sparse_adjacency(batch.edge_index, batch.num_nodes)
    assert adj.layout == torch.sparse_csr and adj._nnz() == batch.edge_index.size(1)
    sparse_loss, sparse_grads = _loss_and_grads(model, batch.clone().update({"edge_index": adj}))
    assert torch.allclose(scatter_loss, sparse_loss, rtol=1e-6, atol=1e-6)
    for a, b in zip(scatter_grads, sparse_grads):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("aggregation, op", [("scatter", "scatter"), ("sparse", "sparse")])
@pytest.mark.parametrize("amp", ["float32", "bfloat16"])
def test_aggregation_knob_trains_and_the_probe_reads_which_op_ran(tiny_synthetic, aggregation,
                                                                   op, amp):
    from autotune.trial._window import probe_model

    pipe = build(TrialConfig(batch_size=64, hidden_channels=32, sampling_backend="builtin",
                             aggregation=aggregation, amp_dtype=amp), tiny_synthetic,
                 num_classes=4)
    with pipe.activate():
        losses = [float(pipe.train_step(b)) for _, b in zip(range(15), pipe.loader)]
        probe = probe_model(pipe, next(iter(pipe.loader)))
    assert losses[-1] < losses[0]
    ran = probe["aggregation_ops"]
    assert any(op in name for name in ran), ran
    other = "sparse" if op == "scatter" else "scatter"
    assert not any(other in name for name in ran), ran


@pytest.mark.parametrize("masks, op", [("bernoulli", "aten::bernoulli_"),
                                       ("bits", "aten::random_")])
def test_dropout_masks_knob_trains_and_the_probe_reads_which_op_drew_them(tiny_synthetic,
                                                                          masks, op):
    from autotune.trial._window import probe_model

    pipe = build(TrialConfig(batch_size=64, hidden_channels=32, sampling_backend="builtin",
                             dropout_masks=masks), tiny_synthetic, num_classes=4)
    with pipe.activate():
        losses = [float(pipe.train_step(b)) for _, b in zip(range(15), pipe.loader)]
        probe = probe_model(pipe, next(iter(pipe.loader)))
    assert losses[-1] < losses[0]
    assert op in probe["dropout_ops"], probe["dropout_ops"]
    other = "aten::random_" if masks == "bernoulli" else "aten::bernoulli_"
    assert other not in probe["dropout_ops"], probe["dropout_ops"]


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_bits_dropout_keeps_each_element_with_probability_one_minus_p(p):
    """The law of F.dropout's masks: kept with probability 1 - p (within 5 standard
    errors over 2M elements), scaled by 1 / (1 - p), the gradient masked alike, and
    the identity when not training."""
    import torch

    from autotune.pipeline._models import bits_dropout

    torch.manual_seed(0)
    x = torch.ones(2_000_000, requires_grad=True)
    y = bits_dropout(x, p)
    kept = (y != 0).double().mean().item()
    assert abs(kept - (1 - p)) <= 5 * (p * (1 - p) / x.numel()) ** 0.5, kept
    assert torch.allclose(y[y != 0], torch.tensor(1 / (1 - p)))
    y.sum().backward()
    assert torch.equal(x.grad != 0, y != 0)
    by_word = (y != 0).view(-1, 4).double().mean(0)  # each 16-bit word of a draw alike
    assert all(abs(k - (1 - p)) <= 5 * (p * (1 - p) / (x.numel() / 4)) ** 0.5
               for k in by_word.tolist()), by_word
    assert bits_dropout(x, p, training=False) is x


def test_bits_dropout_refused_where_it_cannot_act():
    """A user's model draws its own masks; to_hetero does not trace bits_dropout."""
    from autotune.pipeline._tasks import HeteroNodeTask

    with pytest.raises(ConfigError, match="draws its own"):
        TrialConfig(dropout_masks="bits", model="mypkg.models:factory")
    with pytest.raises(ConfigError, match="not traced by to_hetero"):
        HeteroNodeTask.check(None, TrialConfig(dropout_masks="bits"))


@pytest.mark.parametrize("changes, message", [
    ({"model": "gcn"}, "exact for model sage and gin"), ({"model": "gat"}, "exact for model sage and gin"),
    ({"compile_mode": "default"}, "runs eagerly")])
def test_sparse_aggregation_refuses_what_it_cannot_do_exactly(changes, message):
    with pytest.raises(ConfigError, match=message):
        TrialConfig(aggregation="sparse", **changes)


def test_gpu_fit_check_counts_the_resident_graph_and_names_its_parts(tiny_synthetic):
    need = gpu_resident_bytes(tiny_synthetic)
    n, e = tiny_synthetic.num_nodes, tiny_synthetic.edge_index.size(1)
    assert need["features"] == n * tiny_synthetic.num_features * 4
    assert need["graph (CSC)"] == (n + 1) * 8 + 2 * e * 8
    total = sum(need.values())
    check_gpu_fit(need, free=2 * total, total=4 * total)  # 10% headroom of 4x still fits
    with pytest.raises(DeviceMemoryError, match=r"gpu_sampling needs .*features .* free"):
        check_gpu_fit(need, free=total, total=10 * total)  # the headroom does not fit
    assert issubclass(DeviceMemoryError, MemoryError)  # the worker reports it as oom


@pytest.mark.cuda
def test_gpu_sampling_that_does_not_fit_fails_before_building(tiny_synthetic, monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 20, 80 << 30))
    config = TrialConfig(batch_size=64, hidden_channels=32, sampling_backend="builtin", device="cuda",
                         gpu_sampling=True)
    before = torch.cuda.memory_allocated()
    with pytest.raises(DeviceMemoryError, match="gpu_sampling needs"):
        build(config, tiny_synthetic, num_classes=4)
    assert torch.cuda.memory_allocated() == before, "something was put on the GPU first"


@pytest.mark.cuda
def test_gpu_resident_steps_never_sync_the_device(tiny_synthetic):
    """Sampling (Triton kernel, side stream), feature gathering and the training
    step: sync debug mode raises on any op that waits for the GPU."""
    config = TrialConfig(batch_size=64, hidden_channels=32, sampling_backend="builtin", device="cuda",
                         gpu_sampling=True, amp_dtype="bfloat16")
    pipe = build(config, tiny_synthetic, num_classes=4)
    assert pipe.sampling_backend == "autotune.NeighborSampler (triton kernel)"
    batches = iter(pipe.loader)
    pipe.train_step(next(batches))  # compiles the kernel, allocates the scratch maps
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [pipe.train_step(next(batches)) for _ in range(3)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(torch.isfinite(loss) for loss in losses)


@pytest.mark.cuda
def test_reduce_overhead_records_its_cuda_graphs_in_the_warm_up(tiny_synthetic):
    """The warm-up runs until no step records a CUDA graph; one recorded later (a
    padded bucket first seen in the window) is counted and said."""
    from autotune.trial._window import measure
    from autotune.specs import MeasureSpec

    config = TrialConfig(batch_size=64, hidden_channels=32, sampling_backend="builtin", device="cuda",
                         gpu_sampling=True, compile_mode="reduce-overhead", shapes="padded")
    result = measure(build(config, tiny_synthetic, num_classes=4),
                     MeasureSpec(warmup_steps=3, min_warmup_s=0.0, min_steps=10, max_window_s=5.0))
    compiled = result.compile
    assert compiled.cuda_graphs_recorded >= 2  # a forward and a backward graph at least
    assert compiled.cuda_graphs_recorded_in_window <= compiled.cuda_graphs_recorded
    said = any("CUDA graphs were recorded" in w for w in result.warnings)
    assert said == (compiled.cuda_graphs_recorded_in_window > 0)


@pytest.mark.cuda
def test_sparse_adjacency_is_built_on_the_gpu_without_a_sync(tiny_synthetic):
    # (the sparse product's backward does sync, inside torch: see the knob's docs)
    batch = _a_batch(tiny_synthetic)
    edge_index = batch.edge_index.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        adj = sparse_adjacency(edge_index, batch.num_nodes)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert adj.is_cuda and adj.layout == torch.sparse_csr
    # every edge once (a graph may hold an edge twice: to_dense would merge them)
    n, crow, src = batch.num_nodes, adj.crow_indices().cpu(), adj.col_indices().cpu()
    dst = torch.repeat_interleave(torch.arange(n), crow[1:] - crow[:-1])
    assert torch.equal((src * n + dst).sort().values,
                       (batch.edge_index[0] * n + batch.edge_index[1]).sort().values)


def test_host_features_gather_each_batchs_rows_in_the_loader(tiny_synthetic):
    """feature_placement pinned's transform, on CPU in Triton's interpreter: a PyG
    loader over a view without features hands out batches whose x is exactly the
    features of their n_id, also when padded shapes pad the batch after it."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import NodeLoader

    import autotune
    from autotune.sampling import chain
    from autotune.pipeline._build import HostFeatures, PadToBucket

    if torch.cuda.is_available():
        pytest.skip("the interpreter runs on machines without CUDA; a cuda test covers it")
    data = tiny_synthetic
    view = Data(y=data.y, num_nodes=data.num_nodes, edge_index=data.edge_index)
    sampler = autotune.NeighborSampler(data, [5, 3], seed=0)
    gather = HostFeatures(data, torch.device("cpu"))
    for transform in (gather, chain(gather, PadToBucket("pow2"))):
        loader = NodeLoader(view, node_sampler=sampler, batch_size=32, transform=transform,
                            input_nodes=data.train_mask)
        batch = next(iter(loader))
        n = batch.n_id.numel()
        assert torch.equal(batch.x[:n], data.x[batch.n_id])
        assert not batch.x[n:].any()  # padding rows, when padded


@pytest.mark.cuda
def test_pinned_features_train_as_gpu_resident_ones(tiny_synthetic):
    import torch

    from autotune.config import TrialConfig
    from autotune.pipeline import build

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    losses = {}
    for placement in ("gpu", "pinned"):
        config = TrialConfig(device="cuda", gpu_sampling=True, sampling_backend="builtin",
                             feature_placement=placement, batch_size=64, num_neighbors=(5, 3),
                             hidden_channels=16)
        pipe = build(config, tiny_synthetic, num_classes=4)
        batch = next(iter(pipe.loader))
        assert batch.x.device.type == "cuda"
        assert torch.equal(batch.x.cpu(), tiny_synthetic.x[batch.n_id.cpu()])
        losses[placement] = float(pipe.train_step(batch))
    assert losses["gpu"] == pytest.approx(losses["pinned"])


def test_feature_dtype_stores_and_gathers_features_in_bfloat16(tiny_synthetic):
    """feature_dtype bfloat16: the loader gathers from a bfloat16 copy of the
    features (read back as observed.feature_storage), the model still gets float32
    (the same values rounded to bfloat16), and the graph's own features are left
    as they were."""
    import torch

    from autotune.config import TrialConfig
    from autotune.pipeline import build

    data = tiny_synthetic
    before = data.x.clone()
    pipe = build(TrialConfig(batch_size=64, num_neighbors=(5, 3), hidden_channels=16,
                             feature_dtype="bfloat16"), data, num_classes=4)
    assert pipe.feature_storage == "bfloat16 in host memory"
    batch = next(iter(pipe.loader))
    assert batch.x.dtype == torch.float32
    assert torch.equal(batch.x, data.x[batch.n_id].to(torch.bfloat16).float())
    assert torch.isfinite(pipe.train_step(batch))
    assert torch.equal(data.x, before) and data.x.dtype == torch.float32
    plain = build(TrialConfig(batch_size=64, num_neighbors=(5, 3), hidden_channels=16), data,
                  num_classes=4)
    assert plain.feature_storage == "float32 in host memory"
    from autotune.pipeline._tasks import GraphTask

    with pytest.raises(ConfigError, match="whole graphs"):
        GraphTask().check(TrialConfig(task="graph", feature_dtype="bfloat16"))
