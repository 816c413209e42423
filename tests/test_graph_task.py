"""Graph-level tasks (``--task graph``): batches of whole graphs, the built-in
graph models, exact padding, synthetic-molecules, TU-format folders, a user's
graphs and factory, and the search and ``train`` end to end."""
from __future__ import annotations

import copy
import json

import pytest
import torch
import yaml

from autotune.config import TrialConfig
from autotune.data import GraphSet, load_dataset
from autotune.data._graphsets import graph_set, read_tu_folder, synthetic_molecules
from autotune.pipeline import build
from autotune.pipeline._build import PadToBucket

from _helpers import cli


@pytest.fixture(scope="module")
def molecules():
    return synthetic_molecules(scale=0.005, seed=1)


def test_synthetic_molecules_are_molecule_shaped_and_deterministic(molecules):
    again = synthetic_molecules(scale=0.005, seed=1)
    assert torch.equal(molecules.x, again.x)
    assert molecules.num_graphs == 200 and molecules.num_features == 9
    sizes = [g.num_nodes for g in molecules.graphs]
    assert 20 < sum(sizes) / len(sizes) < 30 and min(sizes) >= 8  # 8 + Poisson(17)
    degree = molecules.num_edges / molecules.num_nodes
    assert 1.9 < degree < 2.4, degree  # a tree's 2(n-1)/n plus a few ring bonds
    labels = torch.cat([g.y for g in molecules.graphs])
    assert set(labels.tolist()) == {0, 1, 2, 3}
    masks = [molecules[f"{s}_mask"] for s in ("train", "val", "test")]
    assert int(sum(m.long() for m in masks).max()) == 1  # each graph in one split
    assert [int(m.sum()) for m in masks] == [160, 20, 20]


@pytest.mark.parametrize("model", ["gin", "gcn", "sage"])
def test_padded_and_unpadded_give_equal_losses_and_gradients(molecules, model):
    config = TrialConfig(task="graph", model=model, batch_size=32, hidden_channels=16,
                         dropout=0.0)
    pipe = build(config, molecules)
    batch = next(iter(pipe.loader))
    padded = PadToBucket("geometric")(copy.copy(batch).clone())
    assert padded.num_nodes > batch.num_nodes and padded.num_real_graphs == batch.num_graphs
    assert padded.edge_attr.size(0) == padded.edge_index.size(1)
    results = []
    for b in (batch, padded):
        pipe.model.zero_grad()
        loss = pipe.task.loss(pipe, b)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in pipe.model.parameters()]))
    assert torch.allclose(results[0][0], results[1][0], rtol=0, atol=1e-6)
    for a, b in zip(results[0][1], results[1][1]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert pipe.task.seeds(padded) == pipe.task.seeds(batch) == 32


def test_the_built_in_models_learn_the_classes(molecules):
    from autotune.pipeline import TrainSpec, fit

    config = TrialConfig(task="graph", model="gin", batch_size=32, hidden_channels=32,
                         lr=0.01)
    training = fit(build(config, molecules), molecules, TrainSpec(epochs=8))
    assert training.epochs[-1].loss < training.epochs[0].loss
    assert training.epochs[-1].seeds == 160  # graphs, not nodes
    assert max(e.val_metric for e in training.epochs) > 0.4  # four classes: chance is 0.25


def test_the_guard_evaluates_its_last_epoch_only(molecules):
    """A guard run reads one figure, the last epoch's: evaluating every epoch cost the
    baseline's guard more than its training on CiteSeer."""
    from autotune.pipeline import TrainSpec, fit

    config = TrialConfig(task="graph", model="gin", batch_size=32, hidden_channels=16)
    every = fit(build(config, molecules), molecules, TrainSpec(epochs=3))
    last = fit(build(config, molecules), molecules,
               TrainSpec(epochs=3, evaluate_test=False, every_epoch=False))
    assert all(e.val_metric is not None and e.test_metric is not None for e in every.epochs)
    assert [e.val_metric is not None for e in last.epochs] == [False, False, True]
    assert all(e.test_metric is None for e in last.epochs)
    # seeded: the same first epoch; an evaluation draws from the RNG, so later ones
    # differ, as the guard's candidates (evaluated once, at the end) always did
    assert last.epochs[0].loss == every.epochs[0].loss


def _write_tu(folder, graphs: int = 12):
    """A TU-format folder: graph i is a path of i + 3 nodes, labelled by parity."""
    folder.mkdir(parents=True, exist_ok=True)
    edges, indicator, labels, node_labels, first = [], [], [], [], 1
    for g in range(graphs):
        n = g + 3
        for a in range(n - 1):
            edges += [f"{first + a}, {first + a + 1}", f"{first + a + 1}, {first + a}"]
        indicator += [str(g + 1)] * n
        node_labels += [str(a % 3) for a in range(n)]
        labels.append(str(1 if g % 2 else -1))
        first += n
    for part, lines in (("A", edges), ("graph_indicator", indicator),
                        ("graph_labels", labels), ("node_labels", node_labels)):
        (folder / f"PATHS_{part}.txt").write_text("\n".join(lines) + "\n")
    return folder


def test_a_tu_format_folder_loads(tmp_path):
    graphs = read_tu_folder(_write_tu(tmp_path / "paths"))
    assert graphs.num_graphs == 12 and graphs.num_classes == 2
    assert graphs.num_features == 3  # one-hot node labels, as TUDataset builds them
    first = graphs.graphs[0]
    assert first.num_nodes == 3 and first.edge_index.size(1) == 4 and int(first.y) == 0
    # through the dataset cache too, and the graph task refuses a node dataset
    ds = load_dataset(str(tmp_path / "paths"), root=tmp_path / "data", task="graph")
    assert isinstance(ds.data, GraphSet) and ds.stats()["num_graphs"] == 12
    cached = load_dataset(str(tmp_path / "paths"), root=tmp_path / "data", task="graph")
    assert torch.equal(cached.data.x, ds.data.x)


def test_a_user_factory_gets_edge_attr_when_it_asks(molecules):
    from torch import nn

    seen = {}

    class WithEdges(nn.Module):
        def __init__(self, in_channels, out_channels):
            super().__init__()
            self.lin = nn.Linear(in_channels, out_channels)

        def forward(self, x, edge_index, batch, edge_attr):
            from torch_geometric.nn import global_mean_pool

            seen["edge_attr"] = edge_attr.shape
            return global_mean_pool(self.lin(x), batch)

    pipe = build(TrialConfig(task="graph", batch_size=16), molecules,
                 model=WithEdges(molecules.num_features, molecules.num_classes))
    pipe.train_step(next(iter(pipe.loader)))
    assert seen["edge_attr"][1] == 3


def test_graphs_from_a_list_or_an_in_memory_dataset():
    from torch_geometric.data import Data

    items = [Data(x=torch.randn(4, 2), edge_index=torch.tensor([[0, 1], [1, 2]]),
                  y=torch.tensor([i % 3])) for i in range(30)]
    graphs = graph_set(items, seed=3)
    assert graphs.num_graphs == 30 and graphs.num_classes == 3
    assert int(graphs["train_mask"].sum()) == 24
    with pytest.raises(Exception, match="graph 1 .* is not a Data with x and y"):
        graph_set([items[0], Data(x=torch.randn(2, 2))])


def test_a_dataset_function_of_graphs(tmp_path):
    ds = load_dataset("user_models:molecules_by_function", root=tmp_path, task="graph")
    assert ds.graph_level and ds.data.num_graphs == 80 and ds.num_train == 64
    with pytest.raises(Exception, match="graph-level .* use --task graph"):
        load_dataset("user_models:molecules_by_function", root=tmp_path)


def test_a_graph_space_leaves_the_fanout_out():
    from autotune.study._space import load_space

    space = load_space("quick", facts={"task": "graph"})
    assert "num_neighbors" not in space.knobs and "sampling_backend" not in space.knobs
    assert any("task graph batches whole graphs" in note for note in space.notes)


@pytest.mark.slow
def test_search_and_train_on_synthetic_molecules(tmp_path):
    env_args = ["--dataset", "synthetic-molecules", "--scale", "0.005", "--task", "graph",
                "--root", str(tmp_path / "data")]
    proc = cli("search", *env_args, "--n-trials", "2", "--space", "quick", "--studies-dir",
               str(tmp_path / "studies"), "--steps", "3", "--warmup", "1",
               "--warmup-time", "0", "--max-seconds",
               "1", "--confirm", "0", "-f", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    blob = json.loads(proc.stdout)
    done = [t for t in blob["trials"] if t["state"] == "complete"]
    assert len(done) == 2 and all(t["config"]["task"] == "graph" for t in done)
    best = tmp_path / "best.yaml"
    exported = cli("export", "--studies-dir", str(tmp_path / "studies"), "--pick", "knee",
                   "--out", str(best))
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert yaml.safe_load(best.read_text())["measured"]["unit"] == "graphs/s"
    run = cli("train", "--config", str(best), "--root", str(tmp_path / "data"),
              "--epochs", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "graphs/s" in run.stdout and "val accuracy" in run.stdout
