"""Link prediction and heterogeneous node classification as pipelines: data, models,
padding, checkpointing, training and the search end to end."""
from __future__ import annotations

import json

import pytest
import torch

from autotune.config import TrialConfig
from autotune.data import DatasetRef, load_dataset, target_type
from autotune.data._splits import link_split, mag_from_ogb
from autotune.data._synthetic import MAG_NODES, synthetic_mag
from autotune.pipeline import PipelineSource, TrainSpec, build, evaluate, fit
from autotune.pipeline._build import PadToBucket, apply_checkpointing
from autotune.pipeline._training import _one_epoch

from _helpers import cli



@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    root = tmp_path_factory.mktemp("mag")
    ref = DatasetRef("synthetic-hetero", root=str(root), scale=0.01)
    return ref, ref.prepare()


def _hetero_pipe(mag, config):
    ref, dataset = mag
    return build(config, dataset.data, num_classes=dataset.num_classes, cache_file=ref.csc_path())


def test_synthetic_mag_is_mag_shaped_and_deterministic():
    a, b = synthetic_mag(scale=0.004, seed=1), synthetic_mag(scale=0.004, seed=1)
    assert set(a.node_types) == set(MAG_NODES)
    assert ("author", "writes", "paper") in a.edge_types
    assert ("paper", "rev_writes", "author") in a.edge_types
    for store_a, store_b in zip(a.stores, b.stores):
        for key, value in store_a.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, store_b[key]), key
    c = synthetic_mag(scale=0.004, seed=2)
    assert not torch.equal(a["paper"].x, c["paper"].x)
    assert target_type(a) == "paper"
    # mean degrees as documented, and class-informative paper features
    per_paper = a["author", "writes", "paper"].edge_index.size(1) / a["paper"].num_nodes
    assert 8 < per_paper < 11.5, per_paper
    y, x = a["paper"].y, a["paper"].x
    centroids = torch.stack([x[y == k].mean(0) if (y == k).any() else torch.zeros(x.size(1))
                             for k in range(int(y.max()) + 1)])
    nearest = torch.cdist(x, centroids).argmin(1)
    assert (nearest == y).float().mean() > 0.5


def test_hetero_dataset_cache_round_trips(tmp_path):
    first = load_dataset("synthetic-hetero", root=tmp_path, scale=0.004)
    again = load_dataset("synthetic-hetero", root=tmp_path, scale=0.004)
    assert again.hetero and again.data.edge_types == first.data.edge_types
    assert torch.equal(again.data["paper"].train_mask, first.data["paper"].train_mask)
    stats = again.stats()
    assert stats["target"] == "paper" and stats["edge_types"] == 7
    assert stats["num_train"] == int(first.data["paper"].train_mask.sum())


def test_ogbn_mag_becomes_a_hetero_graph_with_features_everywhere():
    """ogbn-mag as OGB's PygNodePropPredDataset gives it: a Data of dicts."""
    from torch_geometric.data import Data

    graph = Data()
    graph.num_nodes_dict = {"paper": 4, "author": 3, "institution": 2, "field_of_study": 2}
    graph.x_dict = {"paper": torch.arange(8, dtype=torch.float).view(4, 2)}
    graph.y_dict = {"paper": torch.tensor([[0], [1], [0], [1]])}
    graph.edge_index_dict = {
        ("author", "writes", "paper"): torch.tensor([[0, 0, 1, 2], [0, 1, 2, 3]]),
        ("author", "affiliated_with", "institution"): torch.tensor([[0, 1, 2], [0, 0, 1]]),
        ("paper", "cites", "paper"): torch.tensor([[0, 1], [1, 2]]),
        ("paper", "has_topic", "field_of_study"): torch.tensor([[0, 3], [0, 1]])}
    split = {k: {"paper": torch.tensor([i])} for i, k in enumerate(["train", "valid", "test"])}
    data = mag_from_ogb(graph, split)
    assert torch.equal(data["author"].x[0], graph.x_dict["paper"][:2].mean(0))
    assert torch.equal(data["institution"].x[0], data["author"].x[:2].mean(0))
    assert torch.equal(data["field_of_study"].x[1], graph.x_dict["paper"][3])
    assert ("paper", "rev_writes", "author") in data.edge_types
    assert data["paper"].train_mask.tolist() == [True, False, False, False]
    assert data["paper"].y.tolist() == [0, 1, 0, 1]


def test_link_split_holds_out_edges_and_negatives():
    from torch_geometric.utils import coalesce

    from autotune.data import synthetic_reddit

    data = synthetic_reddit(scale=0.002, seed=0)
    data.edge_index = coalesce(data.edge_index)  # a multigraph's twin edges would leak
    split = link_split(data, seed=0)
    n = data.num_nodes
    keys = lambda ei: ei[0] * n + ei[1]  # noqa: E731
    graph = keys(split.edge_index)
    for part in ("val", "test"):
        index, label = split[f"{part}_edge_label_index"], split[f"{part}_edge_label"]
        assert label.sum() == (label == 0).sum(), "as many negatives as positives"
        assert not torch.isin(keys(index[:, label == 1]), graph).any(), "a held-out edge leaks"
        assert not torch.isin(keys(index[:, label == 0]), keys(data.edge_index)).any()
    supervision = keys(split.train_edge_label_index)
    assert not torch.isin(supervision, graph).any(), "supervision edges pass messages"
    again = link_split(data, seed=0)
    assert torch.equal(again.edge_index, split.edge_index)


def test_hetero_padding_pads_each_node_type_and_keeps_the_output(mag):
    _, dataset = mag
    config = TrialConfig(batch_size=32, num_neighbors=(4, 3), hidden_channels=16, dropout=0.0)
    pipe = _hetero_pipe(mag, config)
    batch = next(iter(pipe.loader))
    model = pipe.eager_model.eval()
    with torch.no_grad():
        plain = model(batch.x_dict, batch.edge_index_dict)["paper"][:32]
        real = {t: batch[t].num_nodes for t in batch.node_types}
        padded = PadToBucket("pow2")(batch.clone())
        for t in padded.node_types:
            assert padded[t].num_nodes > real[t]
            assert padded[t].num_nodes & (padded[t].num_nodes - 1) == 0, "not a power of two"
        out = model(padded.x_dict, padded.edge_index_dict)["paper"][:32]
    assert torch.allclose(plain, out, atol=1e-5)


def test_checkpointing_wraps_every_message_passing_module_of_a_hetero_model(mag):
    _, dataset = mag
    config = TrialConfig(batch_size=32, num_neighbors=(4, 3), hidden_channels=16, dropout=0.0)
    pipe = _hetero_pipe(mag, config)
    batch = next(iter(pipe.loader))
    before = pipe.task.loss(pipe, batch)
    assert apply_checkpointing(pipe.eager_model) == 2 * len(dataset.data.edge_types)
    assert torch.allclose(pipe.task.loss(pipe, batch), before)


def test_an_edge_types_own_fanout_acts_and_is_read_back(mag):
    from autotune.trial._window import edges_by_type

    _, dataset = mag
    config = TrialConfig(batch_size=64, num_neighbors=(4, 3), hidden_channels=16,
                         edge_fanouts={"paper__cites__paper": (0, 0)})
    pipe = _hetero_pipe(mag, config)
    counts = edges_by_type(PadToBucket("pow2")(next(iter(pipe.loader))))
    assert counts["paper__cites__paper"] == 0
    assert counts["author__writes__paper"] > 0 and counts["paper__rev_writes__author"] > 0
    assert set(counts) == {"__".join(t) for t in dataset.data.edge_types}


def test_to_hetero_sage_trains_on_the_synthetic_hetero_graph(mag):
    _, dataset = mag
    config = TrialConfig(batch_size=128, num_neighbors=(5, 5), hidden_channels=64,
                         edge_fanouts={"paper__cites__paper": (3, 3)})
    pipe = _hetero_pipe(mag, config)
    training = fit(pipe, dataset.data, TrainSpec(epochs=2))
    first, last = training.epochs[0], training.epochs[-1]
    losses = [float(pipe.train_step(b)) for b, _ in zip(pipe.loader, range(3))]
    assert last.loss < first.loss and max(losses) < 5.0, (first.loss, last.loss, losses)
    assert last.val_metric > 1.5 / dataset.num_classes  # better than chance on 349 classes
    assert last.seeds == int(dataset.data["paper"].train_mask.sum())


@pytest.mark.slow
def test_link_prediction_on_real_cora_reaches_auc_085(cora_root):
    """The test AUC at the best validation epoch of 30. Not 100: after epoch 10 the
    model overfits (test AUC 0.88 at epoch 10, 0.83 at 100 on a 2-core EPYC) while
    the validation AUC stays flat within 0.834-0.857, so over 100 epochs the best
    validation epoch is chosen by noise (it fell at epoch 95 there, test 0.832)."""
    ref = DatasetRef("Cora", root=cora_root, task="link")
    dataset = ref.prepare()
    config = TrialConfig(task="link", batch_size=512, num_neighbors=(10, 10), hidden_channels=128,
                         lr=0.005)
    pipe = build(config, dataset.data, cache_file=ref.csc_path())
    checked = []  # (epoch, val AUC, test AUC) every 5 epochs; the test AUC of the best val
    with pipe.activate():
        for number in range(1, 31):
            epoch = _one_epoch(PipelineSource(pipe), number, None)
            assert epoch.seeds == dataset.data.train_edge_label_index.size(1)
            if number % 5 == 0:
                checked.append((number, evaluate(pipe, dataset.data, "val"),
                                evaluate(pipe, dataset.data, "test")))
    best = max(checked, key=lambda row: row[1])
    assert best[2] >= 0.85, checked


def test_hetero_link_split_holds_out_both_directions(tmp_path):
    from autotune.data import LINK_ATTR

    writes, reverse = ("author", "writes", "paper"), ("paper", "rev_writes", "author")
    base = load_dataset("synthetic-hetero", root=tmp_path, scale=0.004).data
    split = load_dataset("synthetic-hetero", root=tmp_path, scale=0.004, task="link",
                         edge_type="writes").data  # a relation name that one type has
    assert split[LINK_ATTR] == "author__writes__paper"
    store = split[writes]
    held = [int((store[f"{name}_edge_label"] == 1).sum()) for name in ("val", "test")]
    supervised = store.train_edge_label_index.size(1)
    assert all(held) and supervised > 0
    # every edge is in exactly one part: message passing, supervision, val or test
    total = base[writes].edge_index.size(1)
    assert store.edge_index.size(1) + supervised + sum(held) == total
    # the reverse type is the message-passing edges reversed: held-out ones left out
    assert torch.equal(split[reverse].edge_index, store.edge_index.flip(0))


@pytest.mark.slow
def test_hetero_link_prediction_beats_chance(tmp_path):
    ref = DatasetRef("synthetic-hetero", root=str(tmp_path), scale=0.005, task="link",
                     edge_type="author__writes__paper")
    dataset = ref.prepare()
    config = TrialConfig(task="link", batch_size=256, num_neighbors=(10, 5),
                         hidden_channels=64, lr=0.01)
    pipe = build(config, dataset.data, cache_file=ref.csc_path())
    training = fit(pipe, dataset.data, TrainSpec(epochs=2))  # 0.72 here (one run)
    assert training.epochs[-1].seeds == dataset.num_train
    auc = evaluate(pipe, dataset.data, "val")
    assert auc > 0.6, [e.val_metric for e in training.epochs]


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["--task", "link", "--dataset", "Cora", "--root", "CORA_ROOT"],
    ["--dataset", "synthetic-hetero", "--scale", "0.02"],
    ["--task", "link", "--link-edge-type", "author__writes__paper", "--dataset",
     "synthetic-hetero", "--scale", "0.01"],
], ids=["cora-link", "synthetic-hetero", "synthetic-hetero-link"])
def test_search_end_to_end(tmp_path, args, request):
    if "CORA_ROOT" in args:
        args = [request.getfixturevalue("cora_root") if a == "CORA_ROOT" else a for a in args]
    space = tmp_path / "small.yaml"
    space.write_text("knobs:\n  batch_size: {choices: [64, 128]}\n"
                     "  num_neighbors: {choices: [[5, 5], [10, 5]]}\n"
                     "  num_neighbors.paper__cites__paper: {choices: [[0, 0], [5, 5]]}\n"
                     if "synthetic-hetero" in args else
                     "knobs:\n  batch_size: {choices: [256, 512]}\n"
                     "  num_neighbors: {choices: [[5, 5], [10, 5]]}\n")
    proc = cli("search", *args, "--n-trials", "3", "--space", str(space), "--studies-dir",
               str(tmp_path / "studies"), "--steps", "3", "--warmup", "1",
               "--warmup-time", "0", "--max-seconds",
               "0.5", "--no-priors", "--confirm", "0", "-f", "json", env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    blob = json.loads(proc.stdout)
    done = [t for t in blob["trials"] if t["state"] == "complete" and t["reused_from"] is None]
    assert len(done) == 3 and all(t["throughput"] > 0 for t in done), blob["trials"]
    for config in (t["config"] for t in done):
        assert config["task"] == ("link" if "link" in args else "node")
        # a per-edge-type fanout is kept only where it differs from the shared one, and
        # is one of the space's (the baseline's shared [25, 10] is outside it)
        for edge_type, fanout in (config["edge_fanouts"] or {}).items():
            assert edge_type == "paper__cites__paper" and fanout in ([0, 0], [5, 5])
            assert fanout != config["num_neighbors"]


def _env(tmp_path):
    import os

    return {**os.environ, "AUTOTUNE_DATA_ROOT": str(tmp_path / "data"),
            "AUTOTUNE_CACHE": str(tmp_path / "cache")}


def test_every_task_is_a_whole_task():
    """Each task class implements the one Task interface the pipeline asks (no task
    borrows another's methods), and says what it is through its TaskInfo row."""
    from autotune.pipeline._tasks import (GraphTask, HeteroLinkTask, HeteroNodeTask, LinkTask, NodeTask,
                                Task)

    for cls in (NodeTask, HeteroNodeTask, LinkTask, HeteroLinkTask, GraphTask):
        assert issubclass(cls, Task) and not cls.__abstractmethods__, cls
        assert cls.info.name in ("node", "link", "graph")
    assert [c.hetero for c in (NodeTask, HeteroNodeTask, LinkTask, HeteroLinkTask)] == \
        [False, True, False, True]
    assert not GraphTask.samples and GraphTask.info.whole_graphs
    with pytest.raises(TypeError):
        Task()


def test_a_node_task_evaluates_the_whole_graph_where_it_fits_as_a_full_fanout_sample_does(
        tiny_synthetic, monkeypatch):
    """Where the graph fits, a node task's metric comes from the whole graph in one
    call; with every neighbour sampled (fanout -1), the sampled evaluation sees the
    same neighbourhoods and must agree exactly, for a trained model. Too large a
    graph (the threshold lowered) or temporal sampling (a seed sees only its past)
    take the sampled path. Val and test come from one forward over the graph."""
    from autotune.pipeline import _tasks

    config = TrialConfig(batch_size=64, num_neighbors=(-1, -1), num_workers=0,
                         hidden_channels=16, sampling_backend="builtin")
    assert _tasks.whole_graph_fits(config, tiny_synthetic)
    assert not _tasks.whole_graph_fits(config.replace(time_attr="time"), tiny_synthetic)
    pipe = build(config, tiny_synthetic, num_classes=4)
    with pipe:
        fit(pipe, tiny_synthetic, TrainSpec(epochs=2, every_epoch=False))
        whole = {split: evaluate(pipe, tiny_synthetic, split) for split in ("val", "test")}
        forwards = []  # an epoch's val and test come from one forward over the graph
        hook = pipe.eager_model.register_forward_hook(lambda *args: forwards.append(1))
        both = pipe.task.evaluate_all(pipe, tiny_synthetic, ("val", "test"))
        hook.remove()
        assert both == [whole["val"], whole["test"]] and len(forwards) == 1, forwards
        monkeypatch.setattr(_tasks, "WHOLE_GRAPH_BYTES", 0)
        assert not _tasks.whole_graph_fits(config, tiny_synthetic)
        sampled = {split: evaluate(pipe, tiny_synthetic, split) for split in ("val", "test")}
    assert whole["val"] > 0.3, whole  # it learnt (4 classes)
    assert whole == pytest.approx(sampled, abs=1e-9), (whole, sampled)
