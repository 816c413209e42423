"""Datasets: PyG's own dataset classes, OGB, a ``.pt`` file, a function, Reddit- and
mag-shaped generators, and graph-level sets of many small graphs
(:mod:`autotune.data._graphsets`: ``synthetic-molecules`` or a TU-format folder).

Every dataset is processed once into a cache file of plain tensors under
``<root>/.autotune/``; trials memory-map that file (``torch.load(mmap=True)``), so a
trial starts in well under a second even at Reddit scale and every process shares
the pages.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from autotune.config import is_import_path
from autotune.data._graphsets import (
    GraphSet,
    graph_set,
    read_tu_folder,
    synthetic_molecules,
    tu_prefix,
)
from autotune.data._splits import (
    LINK_ATTR,
    TARGET_ATTR,
    check_hetero,
    edge_type_named,
    hetero_link_split,
    link_edge_type,
    link_split,
    mag_from_ogb,
    masks_from_split,
    target_type,
)
from autotune.data._synthetic import synthetic_mag, synthetic_reddit
from autotune.env import install_hint, writable_dir
from autotune.errors import ConfigError, DatasetError
from autotune.files import atomic_write
from autotune.imports import import_object, user_code
from autotune.logging import get_logger
from autotune.sampling import load_or_build_csc, load_or_build_cscs
from autotune.taskinfo import DEFAULT_TASK, task_info

log = get_logger(__name__)

DEFAULT_ROOT = "data"
CACHE_FORMAT = 1

# The files each PyG dataset class expects under its raw folder (for the error a
# user gets when a dataset is missing and cannot be downloaded).
_GRAPHSAINT_RAW = ["adj_full.npz", "feats.npy", "class_map.json", "role.json"]
_PLANETOID_RAW = "ind.{n}.x ind.{n}.tx ind.{n}.allx ind.{n}.y ind.{n}.ty ind.{n}.ally " \
                 "ind.{n}.graph ind.{n}.test.index"


def root_default() -> str:
    return os.environ.get("AUTOTUNE_DATA_ROOT", DEFAULT_ROOT)


def working_root(root: str | os.PathLike) -> Path:
    """Where a dataset under ``root`` is processed and cached: ``root`` itself, or,
    when it is read-only (a shared data folder), a shadow folder under
    ``$AUTOTUNE_CACHE`` (default ``~/.cache/autotune``) keyed by ``root``'s path."""
    root = Path(root)
    if writable_dir(root):
        return root
    base = Path(os.environ.get("AUTOTUNE_CACHE", Path.home() / ".cache" / "autotune"))
    key = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
    return base / "roots" / key


def _shadow_raw(spec: DatasetSpec, root: Path, work: Path) -> None:
    """Copies a read-only root's raw files where PyG may write beside them."""
    src, dst = spec.raw_dir(root), spec.raw_dir(work)
    if work != root and src.is_dir() and not dst.exists():
        shutil.copytree(src, dst)


@dataclass(frozen=True)
class DatasetSpec:
    """Where a named dataset lives and how PyG builds it."""

    name: str
    raw_dir: Callable[[Path], Path]
    raw_files: Callable[[], list[str]]
    build: Callable[[Path], "object"]
    convert: Callable[["object"], "object"] | None = None  # dataset -> graph, if not dataset[0]


def _planetoid(name: str) -> DatasetSpec:
    def build(root: Path):
        from torch_geometric.datasets import Planetoid

        return Planetoid(str(root), name)

    return DatasetSpec(name, lambda root: root / name / "raw",
                       lambda: _PLANETOID_RAW.format(n=name.lower()).split(), build)


def _pyg_class(name: str, cls_name: str, raw: list[str]) -> DatasetSpec:
    def build(root: Path):
        import torch_geometric.datasets as pyg_datasets

        return getattr(pyg_datasets, cls_name)(str(root / name))

    return DatasetSpec(name, lambda root: root / name / "raw", lambda: raw, build)


def _ogb(name: str) -> DatasetSpec:
    def build(root: Path):
        try:
            from ogb.nodeproppred import PygNodePropPredDataset
        except ImportError as exc:
            raise DatasetError(f"dataset {name!r} needs the ogb package; "
                               f"install it with: {install_hint('ogb')}") from exc
        return PygNodePropPredDataset(name, root=str(root))

    folder = name.replace("-", "_")
    return DatasetSpec(name, lambda root: root / folder / "raw",
                       lambda: ["edge.csv.gz", "node-feat.csv.gz", "node-label.csv.gz"], build)


def _ogbn_mag() -> DatasetSpec:
    spec = _ogb("ogbn-mag")
    return DatasetSpec(spec.name, spec.raw_dir, lambda: [
        "relations/author___writes___paper/edge.csv.gz", "node-feat/paper/node-feat.csv.gz",
        "node-label/paper/node-label.csv.gz"], spec.build,
        lambda dataset: mag_from_ogb(dataset[0], dataset.get_idx_split()))


NAMED: dict[str, DatasetSpec] = {
    spec.name: spec for spec in (
        _pyg_class("Reddit", "Reddit", ["reddit_data.npz", "reddit_graph.npz"]),
        _pyg_class("Reddit2", "Reddit2", _GRAPHSAINT_RAW),
        _pyg_class("Flickr", "Flickr", _GRAPHSAINT_RAW),
        _pyg_class("Yelp", "Yelp", _GRAPHSAINT_RAW),
        _planetoid("Cora"), _planetoid("CiteSeer"), _planetoid("PubMed"),
        _ogb("ogbn-products"), _ogb("ogbn-arxiv"), _ogbn_mag(),
    )
}
# the generated datasets: Reddit-shaped, ogbn-mag-shaped and molecule-shaped
SYNTHETIC = ("synthetic", "synthetic-hetero", "synthetic-molecules")
GRAPH_LEVEL = ("synthetic-molecules",)  # the named datasets of many small graphs
DATASET_NAMES = [*NAMED, *SYNTHETIC]


@dataclass(frozen=True)
class Dataset:
    """A loaded graph and where its memory-mapped cache file lives. ``data`` is a
    ``Data`` (node task), a ``Data`` with a link split (``task`` link: see
    :func:`autotune.data._splits.link_split`) or a ``HeteroData``."""

    name: str
    data: "object"
    cache_path: Path
    num_classes: int
    task: str = DEFAULT_TASK

    @property
    def hetero(self) -> bool:
        from torch_geometric.data import HeteroData

        return isinstance(self.data, HeteroData)

    @property
    def graph_level(self) -> bool:
        return isinstance(self.data, GraphSet)

    @property
    def num_features(self) -> int:
        return int(self.feature_store().x.size(1))

    def target_store(self):
        """Where the task's seeds and splits live: the graph, the target node type's
        store, or a heterogeneous link split's edge type."""
        if not self.hetero:
            return self.data
        if LINK_ATTR in self.data:
            return self.data[link_edge_type(self.data)]
        return self.data[target_type(self.data)]

    def feature_store(self):
        """The node store whose features the model's input width is read from."""
        if self.hetero and LINK_ATTR in self.data:
            return self.data[link_edge_type(self.data)[0]]
        return self.target_store()

    @property
    def num_train(self) -> int:
        """The training seeds of its task: nodes of a mask, or edges of a link split."""
        seeds = self.target_store()[task_info(self.task).seeds_attr]
        return int(seeds.sum()) if seeds.dtype == torch.bool else int(seeds.size(-1))

    def stats(self) -> dict:
        data = self.data
        if self.graph_level:
            edges, tensors = data.num_edges, data.tensors()["tensors"].values()
        else:
            edges = sum(int(s.edge_index.size(1)) for s in data.edge_stores
                        if "edge_index" in s)
            tensors = _tensors(data)
        out = {"name": self.name, "num_nodes": int(data.num_nodes), "num_edges": edges,
               "num_features": self.num_features, "num_classes": self.num_classes,
               "bytes": int(sum(v.numel() * v.element_size() for v in tensors)),
               "num_train": self.num_train, "task": self.task}
        if self.graph_level:
            out["num_graphs"] = data.num_graphs
        if self.hetero:
            target = data[LINK_ATTR] if LINK_ATTR in data else target_type(data)
            out.update(target=target, node_types=len(data.node_types),
                       edge_types=len(data.edge_types))
        return out


def _tensors(data) -> list[Tensor]:
    return [value for store in data.stores for _, value in store.items()
            if isinstance(value, Tensor)]


def load_dataset(name: str, *, root: str | os.PathLike | None = None, scale: float = 1.0,
                 seed: int = 0, task: str = DEFAULT_TASK, edge_type: str | None = None) -> Dataset:
    """Loads ``name`` (a PyG/OGB name, ``synthetic``, ``synthetic-hetero`` or a path to
    a ``.pt`` file), processing it into the memory-mapped cache on first use. ``task``
    link: the graph's link split (:func:`autotune.data._splits.link_split`; of ``edge_type``
    on a heterogeneous graph, :func:`autotune.data._splits.hetero_link_split`), cached too."""
    root = Path(root if root is not None else root_default())
    key = _cache_key(name, scale, seed, task, edge_type)
    cache = working_root(root) / ".autotune" / f"{key}.pt"
    if not cache.exists():
        if task_info(task).split:
            base = load_dataset(name, root=root, scale=scale, seed=seed)
            if base.hetero:
                data = hetero_link_split(base.data, seed, edge_type_named(base.data,
                                                                          edge_type))
            elif edge_type is not None:
                raise DatasetError(f"--link-edge-type names an edge type of a "
                                   f"heterogeneous graph (got {edge_type!r}); {name} is "
                                   "homogeneous: leave it out")
            else:
                data = link_split(base.data, seed)
        else:
            data = _materialise(name, root, scale, seed)
        _write_cache(data, cache)
    return _fits_task(_read_cache(name, cache, task))


def _fits_task(dataset: Dataset) -> Dataset:
    """A graph-level dataset for task graph, one graph for the others."""
    info = task_info(dataset.task)
    if dataset.graph_level and not info.whole_graphs:
        raise DatasetError(f"dataset {dataset.name} is graph-level ({dataset.data.num_graphs:,} "
                           f"small graphs, one label each); use --task graph (got --task "
                           f"{info.name})")
    if info.whole_graphs and not dataset.graph_level:
        raise DatasetError(f"--task graph needs many small graphs with a label each (got "
                           f"dataset {dataset.name}, one graph): use synthetic-molecules, a "
                           "TU-format folder or a function returning an InMemoryDataset")
    return dataset


def _cache_key(name: str, scale: float, seed: int, task: str = DEFAULT_TASK,
               edge_type: str | None = None) -> str:
    try:
        info = task_info(task)
    except ConfigError as exc:
        raise DatasetError(str(exc)) from None
    if edge_type is not None and not info.split:
        raise DatasetError(f"--link-edge-type picks the edge type of --task link (got task "
                           f"{task!r}); leave it out or use --task link")
    if name in GRAPH_LEVEL and not info.whole_graphs:
        raise DatasetError(f"dataset {name} is graph-level (many small graphs, one label "
                           f"each); use --task graph (got --task {info.name})")
    if info.split:
        typed = "" if edge_type is None else "-" + edge_type.replace("/", "_")
        return _cache_key(name, scale, seed) + info.suffix + typed
    if name == "synthetic":  # "-timed": its caches from before node times were added
        return f"{name}-scale{scale:g}-seed{seed}-timed"  # are not read again
    if name in SYNTHETIC:
        return f"{name}-scale{scale:g}-seed{seed}"
    if name in NAMED:
        return name
    if is_import_path(name):  # the seed draws a graph-level dataset's split
        seeded = f"-seed{seed}" if info.whole_graphs else ""
        return f"func-{name.replace(':', '-')}-{_source_tag(name)}{seeded}"
    path = Path(name)
    if path.is_dir():  # a TU-format folder: its split is drawn by the seed

        stat = (path / f"{tu_prefix(path)}_graph_indicator.txt").stat()
        return f"tu-{path.resolve().name}-{stat.st_size}-{int(stat.st_mtime)}-seed{seed}"
    if path.suffix == ".pt":
        stat = path.stat() if path.exists() else None
        tag = f"{stat.st_size}-{int(stat.st_mtime)}" if stat else "missing"
        return f"file-{path.stem}-{tag}" + (f"-seed{seed}" if info.whole_graphs else "")
    raise DatasetError(_unknown_dataset(name))


def _unknown_dataset(name: str) -> str:
    import difflib

    near = difflib.get_close_matches(name, DATASET_NAMES, n=1, cutoff=0.6) or \
        [n for n in DATASET_NAMES if n.lower() == name.lower()]
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return (f"unknown dataset {name!r}; use one of {', '.join(DATASET_NAMES)}, a path "
            "to a .pt file holding a torch_geometric Data object, or a function "
            f"'package.module:function' returning one (--dataset, dataset=){hint}")


def _source_tag(path: str) -> str:
    """Size and mtime of the file that defines an import path's module, so that an
    edited dataset function is materialised again rather than read from a stale cache."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(path.partition(":")[0])
    except (ImportError, ValueError):
        spec = None
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    if origin is None or not origin.exists():
        return "missing"
    stat = origin.stat()
    return f"{stat.st_size}-{int(stat.st_mtime)}"


def _materialise(name: str, root: Path, scale: float, seed: int):
    if name == "synthetic":
        return synthetic_reddit(scale=scale, seed=seed)
    if name == "synthetic-hetero":
        return synthetic_mag(scale=scale, seed=seed)
    if name == "synthetic-molecules":
        return synthetic_molecules(scale=scale, seed=seed)
    if name in NAMED:  # before a folder: ./Cora, PyG's own download of it, is not one
        return _from_pyg(NAMED[name], root)  # in TUDataset's format (pass ./NAME for that)
    if Path(name).is_dir():
        return read_tu_folder(Path(name), seed)
    if is_import_path(name):
        return _from_function(name, seed)
    return _from_file(Path(name), seed)


def _from_function(path: str, seed: int = 0):
    """A user's dataset function, ``package.module:function`` returning a ``Data``."""
    try:
        function = import_object(path, what="dataset function", option="--dataset (dataset=)")
    except ConfigError as exc:
        raise DatasetError(str(exc)) from None
    return _checked(user_code("dataset function", path, function),
                    f"dataset function '{path}' returned a", seed)


def _new_folders(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, innermost first."""
    return [p for p in (path, *path.parents) if not p.exists()]


def _remove_empty(folders: list[Path]) -> None:
    """Removes those of ``folders`` that are empty, innermost first: what a failed
    load created and left nothing in."""
    for folder in sorted(set(folders), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):  # not empty, or gone: left as it is
            folder.rmdir()


def _from_pyg(spec: DatasetSpec, root: Path):
    work = working_root(root)
    created = _new_folders(spec.raw_dir(work)) + _new_folders(spec.raw_dir(root))
    _shadow_raw(spec, root, work)
    chatter = io.StringIO()  # PyG's "Downloading ..." lines: shown once it worked
    try:
        with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            dataset = spec.build(work)
    except DatasetError:
        _remove_empty(created)
        raise
    except Exception as exc:  # the download failed or the raw files are unreadable
        _remove_empty(created)
        raw_dir = spec.raw_dir(root)
        missing = [f for f in spec.raw_files() if not (raw_dir / f).exists()]
        if missing:
            raise DatasetError(
                f"dataset {spec.name!r} is not under root '{root}' and could not be "
                f"downloaded ({type(exc).__name__}: {str(exc)[:120]}); place "
                f"{', '.join(spec.raw_files())} in '{raw_dir}' or pass --root DIR") from exc
        raise DatasetError(f"dataset {spec.name!r} under '{raw_dir}' could not be "
                           f"processed: {type(exc).__name__}: {exc}") from exc
    for line in chatter.getvalue().splitlines():  # PyG's download and processing lines
        log.info("%s", line)
    if spec.convert is not None:
        data = spec.convert(dataset)
        data.num_classes = int(dataset.num_classes)
        return data
    data = dataset[0]
    if data.y.dim() > 1 and data.y.size(1) == 1:  # OGB stores labels as [N, 1]
        data.y = data.y.view(-1)
    if "train_mask" not in data and hasattr(dataset, "get_idx_split"):
        masks_from_split(data, dataset.get_idx_split())
    data.num_classes = int(dataset.num_classes)
    return data


def _from_file(path: Path, seed: int = 0):
    if not path.exists():
        raise DatasetError(f"dataset file '{path}' does not exist")
    return _checked(torch.load(path, weights_only=False), f"dataset file '{path}' holds a",
                    seed)


def _checked(obj, what: str, seed: int = 0):
    """``obj`` if it is a Data (or HeteroData) with what a trial needs; ``num_classes``
    set. Many small graphs (an ``InMemoryDataset`` or a list) become a
    :class:`autotune.data._graphsets.GraphSet`, split by ``seed``."""
    from torch_geometric.data import Data, HeteroData, InMemoryDataset

    if isinstance(obj, (InMemoryDataset, list, tuple)):  # many small graphs

        return graph_set(obj, seed)
    if isinstance(obj, HeteroData):
        check_hetero(obj, what)
        if "num_classes" not in obj:
            obj.num_classes = int(obj[target_type(obj)].y.max()) + 1
        return obj
    if not isinstance(obj, Data):
        raise DatasetError(f"{what} {type(obj).__name__} (expected a "
                           "torch_geometric.data.Data or HeteroData)")
    missing = [k for k in ("x", "y", "edge_index", "train_mask") if k not in obj]
    if missing:
        raise DatasetError(f"{what} Data that lacks {', '.join(missing)} "
                           "(a Data object needs x, y, edge_index and train_mask)")
    if "num_classes" not in obj:
        obj.num_classes = int(obj.y.max()) + 1
    return obj


def _write_cache(data, path: Path) -> None:
    from torch_geometric.data import HeteroData

    blob = {"format": CACHE_FORMAT, "num_classes": int(data.num_classes)}
    if isinstance(data, GraphSet):
        blob["graphs"] = data.tensors()
    elif isinstance(data, HeteroData):
        if LINK_ATTR in data:
            blob["link"] = data[LINK_ATTR]
        else:
            blob["target"] = target_type(data)
        blob["hetero"] = {"__".join(s._key) if isinstance(s._key, tuple) else s._key:
                          {k: v.contiguous() for k, v in s.items() if isinstance(v, Tensor)}
                          for s in data.node_stores + data.edge_stores}
        blob["num_nodes"] = {t: int(data[t].num_nodes) for t in data.node_types}
    else:
        blob["num_nodes"] = int(data.num_nodes)
        blob["tensors"] = {k: v.contiguous() for k, v in data.items() if isinstance(v, Tensor)}
    atomic_write(path, lambda tmp: torch.save(blob, tmp))


def _read_cache(name: str, path: Path, task: str = DEFAULT_TASK) -> Dataset:
    from torch_geometric.data import Data, HeteroData

    blob = torch.load(path, mmap=True, weights_only=True)
    if blob.get("format") != CACHE_FORMAT:
        raise DatasetError(f"dataset cache '{path}' has an old format; delete it to rebuild")
    if "graphs" in blob:
        graphs = blob["graphs"]
        data = GraphSet(Data(**graphs["tensors"]), graphs["slices"], graphs["masks"],
                        int(blob["num_classes"]))
    elif "hetero" in blob:
        data = HeteroData()
        for key, tensors in blob["hetero"].items():
            store = data[tuple(key.split("__")) if "__" in key else key]
            for attr, value in tensors.items():
                store[attr] = value
        for node_type, count in blob["num_nodes"].items():
            data[node_type].num_nodes = count
        if "link" in blob:
            data[LINK_ATTR] = blob["link"]
        else:
            data[TARGET_ATTR] = blob["target"]
    else:
        data = Data(**blob["tensors"])
        data.num_nodes = blob["num_nodes"]
    return Dataset(name, data, path, int(blob["num_classes"]), task)


@dataclass(frozen=True)
class DatasetRef:
    """How a trial process finds a prepared dataset: a name plus the options that
    select one cache file."""

    name: str
    root: str = DEFAULT_ROOT
    scale: float = 1.0
    seed: int = 0
    task: str = DEFAULT_TASK
    edge_type: str | None = None  # the supervised edge type of a heterogeneous link task

    def record(self) -> dict:
        """Every field, the root as a resolved path: what a study stores, from which an
        export's reproducing command names the data's folder."""
        return {**vars(self), "root": str(Path(self.root).resolve())}

    def identity(self) -> dict:
        """What defines the data, and nothing else: the name (a ``.pt`` file's resolved
        path), the task, and the scale and seed where they shape it (a generated graph;
        the seed draws a link split too). The root only says where the files lie: a
        study resumed from another folder, or with another ``--root``, is the same."""
        local = self.name not in DATASET_NAMES and (self.name.endswith(".pt") or
                                                    Path(self.name).is_dir())
        name = str(Path(self.name).resolve()) if local else self.name
        out: dict[str, Any] = {"name": name, "task": self.task}
        if self.name in SYNTHETIC:
            out["scale"] = self.scale
        info = task_info(self.task)
        if self.name in SYNTHETIC or info.split or info.whole_graphs:
            out["seed"] = self.seed  # it draws a link split or a split of the graphs
        if self.edge_type is not None:
            out["edge_type"] = self.edge_type
        return out

    def check(self) -> None:
        """Refuses an unknown name or a missing file at once, before anything is
        created (the full check, a download included, is :meth:`prepare`)."""
        _cache_key(self.name, self.scale, self.seed, self.task, self.edge_type)
        if self.name.endswith(".pt") and not Path(self.name).exists():
            raise DatasetError(f"dataset file '{self.name}' does not exist")

    def load(self) -> Dataset:
        return load_dataset(self.name, root=self.root, scale=self.scale, seed=self.seed,
                            task=self.task, edge_type=self.edge_type)

    def csc_path(self) -> Path:
        """The built-in sampler's CSC cache file, beside the dataset's cache (of the
        first edge type's, for a heterogeneous graph: the others lie beside it)."""
        key = _cache_key(self.name, self.scale, self.seed, self.task, self.edge_type)
        return working_root(self.root) / ".autotune" / f"{key}.csc.pt"

    def prepare(self) -> Dataset:
        """Processes the dataset and builds the sampler's CSC once, in this process,
        so that every trial only memory-maps them."""
        from tqdm import tqdm

        with tqdm(total=2, desc=f"preparing {self.name}", unit="step", leave=False,
                  disable=not sys.stderr.isatty()) as bar:  # a bar on a terminal only
            bar.set_postfix_str("graph and features")
            dataset = self.load()
            bar.update()
            bar.set_postfix_str("the sampler's CSC")
            if not dataset.graph_level:  # whole graphs are not sampled
                build = load_or_build_cscs if dataset.hetero else load_or_build_csc
                build(dataset.data, cache_file=self.csc_path())
            bar.update()
        return dataset


def export_dataset(recorded: dict | None, task: str, *, name: str | None = None,
                   root: str | None = None, scale: float | None = None, seed: int | None = None,
                   edge_type: str | None = None) -> DatasetRef:
    """The dataset to run an exported config on: each of ``name``, ``root``, ``scale``,
    ``seed`` and ``edge_type`` given wins, one not given takes the ``recorded`` dataset's
    (the export's), else its default. ``task`` is the config's: a link task trains on
    the dataset's link split."""
    rec = recorded or {}

    def pick(value, key, default):
        return value if value is not None else rec.get(key, default)

    return DatasetRef(pick(name, "name", "synthetic"), root=pick(root, "root", None) or
                      root_default(), scale=pick(scale, "scale", 1.0),
                      seed=pick(seed, "seed", 0), task=task,
                      edge_type=pick(edge_type, "edge_type", None))


def same_dataset(ref: DatasetRef, recorded: dict | None, config_path: str | None) -> bool:
    """Whether ``ref`` is the dataset the export was measured on; logs a warning where
    it is not (throughputs of two datasets do not compare)."""
    if recorded is None:
        return False
    if ref.identity() == DatasetRef(**recorded).identity():
        return True
    log.warning("warning: %s was measured on %s (scale %s, root %s); this run uses %s "
                "(scale %s, root %s): throughputs are not compared", config_path,
                recorded.get("name"), recorded.get("scale"), recorded.get("root"), ref.name,
                ref.scale, ref.root)
    return False
