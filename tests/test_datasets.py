from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autotune.data import DatasetRef, load_dataset, synthetic_reddit
from autotune.data._synthetic import REDDIT_CLASSES, REDDIT_FEATURES, REDDIT_NODES
from autotune.errors import DatasetError



def test_synthetic_is_reddit_shaped_and_deterministic():
    a = synthetic_reddit(scale=0.01, seed=3)
    b = synthetic_reddit(scale=0.01, seed=3)
    c = synthetic_reddit(scale=0.01, seed=4)
    assert a.num_nodes == round(REDDIT_NODES * 0.01)
    assert a.x.shape[1] == REDDIT_FEATURES and int(a.y.max()) + 1 == REDDIT_CLASSES
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    assert not torch.equal(a.edge_index, c.edge_index)
    masks = a.train_mask.int() + a.val_mask.int() + a.test_mask.int()
    assert bool((masks == 1).all()), "splits must partition the nodes"
    assert 0.6 < a.train_mask.float().mean() < 0.7


def test_synthetic_degrees_are_power_law_and_labels_homophilous():
    d = synthetic_reddit(scale=0.02, seed=0, mean_degree=50)
    deg = torch.bincount(d.edge_index[1], minlength=d.num_nodes).float()
    assert abs(deg.mean().item() - 50) < 2.5
    assert deg.max() > 10 * deg.median(), "a power law has a heavy tail"
    src, dst = d.edge_index
    same = (d.y[src] == d.y[dst]).float().mean().item()
    assert same > 0.7, f"edge homophily {same:.2f}"
    # features carry the class: class means differ more than within-class spread allows
    means = torch.stack([d.x[d.y == c].mean(0) for c in range(3)])
    assert torch.cdist(means, means)[0, 1] > 0.5


def test_first_load_writes_a_cache_that_later_loads_mmap(tmp_path):
    ds = load_dataset("synthetic", root=tmp_path, scale=0.002)
    assert ds.cache_path.exists()
    mtime = ds.cache_path.stat().st_mtime_ns
    again = load_dataset("synthetic", root=tmp_path, scale=0.002)
    assert ds.cache_path.stat().st_mtime_ns == mtime, "the cache must not be rewritten"
    assert str(ds.cache_path) in Path("/proc/self/maps").read_text(), "not memory-mapped"
    assert torch.equal(again.data.x, ds.data.x)


def test_dataset_from_a_pt_file(tmp_path):
    data = synthetic_reddit(scale=0.002, seed=1, num_features=8, num_classes=3)
    del data.num_classes
    path = tmp_path / "graph.pt"
    torch.save(data, path)
    ds = load_dataset(str(path), root=tmp_path / "root")
    assert ds.num_classes == 3 and ds.data.x.shape[1] == 8


def test_unknown_dataset():
    with pytest.raises(DatasetError, match=r"unknown dataset 'Redit'; use one of Reddit"):
        load_dataset("Redit")


def test_missing_dataset_offline_names_root_and_files(tmp_path):
    with pytest.raises(DatasetError, match=r"'Cora' is not under root .*ind\.cora\.x.*"
                                            r"Cora/raw"):
        load_dataset("Cora", root=tmp_path)


def test_a_known_name_is_that_dataset_though_a_folder_of_that_name_is_here(tmp_path,
                                                                          monkeypatch):
    """``Cora`` run where ./Cora exists (PyG's own download of it, say) is PyG's Cora,
    not a folder in TUDataset's format, and a study's identity keeps the name; the
    folder is reached by its path (./Cora)."""
    (tmp_path / "Cora" / "raw").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetError, match=r"'Cora' is not under root .*Cora/raw"):
        load_dataset("Cora", root=tmp_path / "elsewhere")
    assert DatasetRef("Cora", root=str(tmp_path)).identity()["name"] == "Cora"
    with pytest.raises(DatasetError, match="TUDataset's format"):
        load_dataset("./Cora", root=tmp_path / "elsewhere")


def test_real_cora_from_a_read_only_copy_of_the_shared_folder(tmp_path, monkeypatch,
                                                              cora_root):
    """Real Cora from a read-only root: processed in a shadow copy, the root left as
    it was. The root is this test's own read-only copy of ../shared/data, whose
    mode differs between machines (and which no test may write into)."""
    import shutil

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "planetoid"
    shutil.copytree(Path(cora_root) / "Cora" / "raw", root / "Cora" / "raw")
    for path in sorted(root.rglob("*"), reverse=True) + [root]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    ds = DatasetRef("Cora", root=str(root)).prepare()
    assert ds.stats()["num_nodes"] == 2708 and ds.num_classes == 7
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before
    assert str(ds.cache_path).startswith(str(tmp_path / "cache"))


def test_read_only_root_is_processed_in_a_shadow_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o555)
    ds = load_dataset("synthetic", root=root, scale=0.002)
    assert not any(root.iterdir())
    assert ds.cache_path.is_relative_to(tmp_path / "cache")
