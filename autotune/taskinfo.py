"""What each task is called and measured in, without torch: the one table that
labels a study, its front, its export, its report and ``train``'s output.

=====  ===========  =======  =====================================================
task   throughput   metric   the dataset holds
=====  ===========  =======  =====================================================
node   seed nodes/s accuracy ``train_mask`` (seeds), ``val_mask`` (the guard's split)
link   seed edges/s ROC-AUC  its link split: ``train_edge_label_index`` (seeds),
                             ``val_edge_label_index``/``val_edge_label``
graph  graphs/s     accuracy many small graphs (:mod:`autotune.data._graphsets`): a
                             per-graph ``train_mask`` (seeds) and ``val_mask``
=====  ===========  =======  =====================================================

The torch side of a task (its loader, loss, model and evaluation) is
:mod:`autotune.pipeline._tasks`; its objects carry their row of this table as ``info``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.errors import ConfigError

MEMORY_METRIC = "peak memory (MiB)"


@dataclass(frozen=True)
class TaskInfo:
    """One task's names: what its seeds are, its quality metric, its splits."""

    name: str
    seeds: str  # what a step's seeds are: "nodes" or "edges"
    metric: str  # the quality metric of the accuracy guard and ``train``
    seeds_attr: str  # the dataset attribute holding the training seeds
    val_split: str  # the dataset attribute a validation (the guard) needs
    split: bool = False  # trains on a link split of the dataset, cached apart
    whole_graphs: bool = False  # batches of whole graphs: no neighbour sampling
    temporal: bool = False  # takes a time_attr: its seed nodes sampled in time

    @property
    def unit(self) -> str:
        """The throughput's unit: ``seed nodes/s``, ``seed edges/s`` or ``graphs/s``."""
        return f"{self.seeds}/s" if self.whole_graphs else f"seed {self.seeds}/s"

    @property
    def metric_key(self) -> str:
        """The metric's name in stored records and JSON: ``accuracy`` or ``roc_auc``."""
        return self.metric.lower().replace("-", "_")

    @property
    def throughput_key(self) -> str:
        """The key of the throughput in exports and JSON output."""
        return f"{self.seeds}_per_s" if self.whole_graphs else f"seed_{self.seeds}_per_s"

    @property
    def suffix(self) -> str:
        """Added to a default study's name and to the dataset's cache key, so a node
        study and a link study of one dataset never share either."""
        return f"-{self.name}" if self.split else ""

    def metric_names(self, accuracy: bool = False) -> list[str]:
        """The study's objective names, as optuna-dashboard shows them."""
        names = [f"throughput ({self.unit})", MEMORY_METRIC]
        return names + ([f"validation {self.metric}"] if accuracy else [])


DEFAULT_TASK = "node"  # a study, dataset or config that names no task
TASKS: dict[str, TaskInfo] = {info.name: info for info in (
    TaskInfo("node", "nodes", "accuracy", "train_mask", "val_mask", temporal=True),
    TaskInfo("link", "edges", "ROC-AUC", "train_edge_label_index", "val_edge_label_index",
             split=True),
    TaskInfo("graph", "graphs", "accuracy", "train_mask", "val_mask", whole_graphs=True),
)}


def task_info(task: Any = None) -> TaskInfo:
    """The row of a task's name, of a ``TrialConfig`` or a config dict (its ``task``,
    node when absent), or of a study's dataset identity."""
    if isinstance(task, dict):
        task = task.get("task")
    elif task is not None and not isinstance(task, str):
        task = getattr(task, "task", None)
    info = TASKS.get(task or DEFAULT_TASK)
    if info is None:
        raise ConfigError(f"--task (task=) must be one of {', '.join(TASKS)} (got {task!r})")
    return info
