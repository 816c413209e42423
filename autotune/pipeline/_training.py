"""Training with a config: the one epoch loop (:func:`fit`), over whole epochs of
the training seeds with the task's metric on validation and test after each
(:func:`train_from`, which :func:`autotune.train` and ``autotune train`` call), or
for a wall-clock budget and then validation (the accuracy guard of ``autotune
search``).

The loop takes its batches from a source (:mod:`autotune.pipeline._source`): one
pipeline's, or a run that tunes itself (:mod:`autotune.tuning`), which sometimes
swaps pipelines; it never asks which. Every pipeline comes from
:func:`autotune.build`, so what trains is what a trial measured.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from autotune.config import TrialConfig
from autotune.export import load_config
from autotune.errors import ConfigError
from autotune.files import atomic_write, inductor_cache_dir, interrupts_latched
from autotune.pipeline._allocator import heap_state
from autotune.pipeline._build import Pipeline, check_config
from autotune.pipeline._source import BatchSource, PipelineSource
from autotune.pipeline._tasks import check_dataset
from autotune.specs import STUDIES_DIR
from autotune.taskinfo import task_info

if TYPE_CHECKING:
    from autotune.data import Dataset, DatasetRef


@dataclass(frozen=True)
class TrainSpec:
    """How long to train: ``epochs`` whole epochs, or until ``budget_s`` seconds of
    training (then the epoch in progress stops at the next step). Whole epochs are
    evaluated after each, unless ``every_epoch`` is False (the guard reads only the
    last: the baseline's 50 guard epochs on CiteSeer spent 3.1 s evaluating, more
    than their 2.2 s of training)."""

    epochs: int | None = None
    budget_s: float | None = None
    evaluate_test: bool = True
    every_epoch: bool = True

    def __post_init__(self) -> None:
        if (self.epochs is None) == (self.budget_s is None):
            raise ConfigError("training needs either epochs or a time budget, not both")
        if self.epochs is not None and not (isinstance(self.epochs, int) and self.epochs > 0):
            raise ConfigError(f"epochs must be a positive int (got {self.epochs!r})")
        if self.budget_s is not None and not self.budget_s > 0:
            raise ConfigError(f"the training budget must be positive (got {self.budget_s!r})")


@dataclass
class Epoch:
    """One epoch (or the budget's last, partial one): training time excludes the
    evaluation; throughput is seeds (nodes, or edges for link) per second of training
    time; ``loss`` is the mean training loss over its seeds (as PyG's examples
    report it); ``val_metric``/``test_metric`` hold the task's metric (accuracy or
    ROC-AUC)."""

    epoch: int
    steps: int
    seeds: int
    train_s: float
    loss: float
    val_metric: float | None = None
    test_metric: float | None = None
    eval_s: float = 0.0  # its evaluation's seconds, outside train_s

    @property
    def seeds_per_s(self) -> float:
        return self.seeds / self.train_s if self.train_s > 0 else 0.0


@dataclass
class Training:
    epochs: list[Epoch] = field(default_factory=list)
    stopped_by_budget: bool = False

    @property
    def train_s(self) -> float:
        return sum(e.train_s for e in self.epochs)

    @property
    def eval_s(self) -> float:
        return sum(e.eval_s for e in self.epochs)

    @property
    def val_metric(self) -> float | None:
        return self.epochs[-1].val_metric if self.epochs else None

    def steady_seeds_per_s(self) -> float:
        """Median throughput of the epochs after the first (whose first steps warm
        up and compile), or the first epoch's when it is the only one."""
        import statistics

        rates = [e.seeds_per_s for e in self.epochs if e.steps]
        return statistics.median(rates[1:] or rates) if rates else 0.0

    def to_dict(self) -> dict:
        return {"epochs": [{**asdict(e), "seeds_per_s": e.seeds_per_s} for e in self.epochs],
                "stopped_by_budget": self.stopped_by_budget, "train_s": self.train_s,
                "val_metric": self.val_metric, "steady_seeds_per_s": self.steady_seeds_per_s()}


def evaluate(pipe: Pipeline, data, split: str) -> float:
    """The task's metric on ``split`` (val or test): accuracy for node tasks, ROC-AUC
    for link prediction (:mod:`autotune.pipeline._tasks`)."""
    return pipe.task.evaluate(pipe, data, split)


def fit(source: BatchSource | Pipeline, data, spec: TrainSpec,
        on_epoch: Callable[[Epoch], None] | None = None) -> Training:
    """Trains from ``source`` (a :class:`BatchSource`, or a pipeline's own batches) as
    ``spec`` says, evaluating its :attr:`~BatchSource.pipe` after every epoch
    (validation, and test when asked), or after the last only (``spec.every_epoch``
    False); with a budget, once the budget is spent. The budget counts training time
    only, not evaluation. The one epoch loop: a tuned run is only another source."""
    source = PipelineSource(source) if isinstance(source, Pipeline) else source
    out = Training()
    while spec.epochs is None or len(out.epochs) < spec.epochs:
        left = None if spec.budget_s is None else spec.budget_s - out.train_s
        epoch = _one_epoch(source, len(out.epochs) + 1, left)
        out.epochs.append(epoch)
        out.stopped_by_budget = spec.budget_s is not None and out.train_s >= spec.budget_s
        last = out.stopped_by_budget or len(out.epochs) == spec.epochs
        if last or spec.epochs is not None and spec.every_epoch:
            _evaluate_epoch(source.pipe, data, epoch, spec.evaluate_test)
        if on_epoch is not None:
            on_epoch(epoch)
        if out.stopped_by_budget:
            break
    return out


def _evaluate_epoch(pipe: Pipeline, data, epoch: Epoch, test: bool) -> None:
    """The task's metric after ``epoch`` on validation, and on test where asked, and
    the seconds they took."""
    start = time.perf_counter()
    with pipe.activate():
        metrics = pipe.task.evaluate_all(pipe, data, ("val", "test") if test else ("val",))
    epoch.val_metric, epoch.test_metric = metrics[0], metrics[1] if test else None
    epoch.eval_s = time.perf_counter() - start


def _one_epoch(source: BatchSource, number: int, left_s: float | None) -> Epoch:
    """One pass over the training seeds, or less where ``left_s`` (seconds of
    training) runs out first: its figures are the source's windows' (:func:`timed`);
    the clock here only stops a budget."""
    start = time.perf_counter()
    with contextlib.closing(source.batches(number)) as batches:
        for batch in batches:
            with source.step() as step:
                step.loss = source.current.train_step(batch)
            if left_s is not None and time.perf_counter() - start >= left_s:
                break
    totals = source.totals
    return Epoch(epoch=number, steps=totals.steps, seeds=totals.seeds, train_s=totals.seconds,
                 loss=totals.loss or 0.0)


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` did: every epoch, the best validation epoch (whose weights
    ``state`` holds, and ``saved`` names where they were written), and the unit and
    metric of the config's task."""

    config: TrialConfig
    training: Training
    best: Epoch
    state: dict[str, Any] = field(repr=False)
    saved: Path | None = None
    tuning: Any = None  # what a run that tuned itself tried (autotune.tuning.TuneLog;
    # config: its winner)
    dataset: dict[str, Any] = field(default_factory=dict)  # the dataset's Dataset.stats()

    @property
    def unit(self) -> str:
        return task_info(self.config).unit

    @property
    def metric(self) -> str:
        return task_info(self.config).metric

    @property
    def throughput(self) -> float:
        """The steady training throughput (:meth:`Training.steady_seeds_per_s`)."""
        return self.training.steady_seeds_per_s()

    def to_dict(self) -> dict[str, Any]:
        """Its figures for JSON; the best epoch's metric named for what it is
        (``best_val_accuracy``, or ``best_val_roc_auc`` for link prediction)."""
        key = task_info(self.config).metric_key
        return {"config": self.config.to_dict(), **self.training.to_dict(), "unit": self.unit,
                "metric": self.metric, "best_epoch": self.best.epoch,
                f"best_val_{key}": self.best.val_metric,
                f"best_test_{key}": self.best.test_metric,
                "saved": None if self.saved is None else str(self.saved),
                "malloc": heap_state(),
                **({} if self.tuning is None else {"tuning": self.tuning.to_dict()})}


def prepare_training(config: TrialConfig | str | os.PathLike, dataset: DatasetRef | Dataset,
                     inductor_cache: str | os.PathLike | None = None
                     ) -> tuple[TrialConfig, Dataset, Path | None]:
    """What a training with ``config`` (a ``TrialConfig``, or a file written by
    ``autotune export``) on ``dataset`` needs, each checked before anything trains:
    the config, the dataset prepared (a :class:`autotune.DatasetRef` is prepared here)
    and its cached CSC adjacency (None where it has none). A compiled config reuses
    the kernels its search compiled: ``inductor_cache`` (default the studies
    folder's, :func:`autotune.files.inductor_cache_dir`), unless
    ``TORCHINDUCTOR_CACHE_DIR`` is set."""
    cache_dir = inductor_cache if inductor_cache is not None else inductor_cache_dir(STUDIES_DIR)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(cache_dir).resolve()))
    config = config if isinstance(config, TrialConfig) else load_config(config)
    check_config(config)
    prepared = dataset.prepare() if hasattr(dataset, "prepare") else dataset
    check_dataset(config, prepared)
    return config, prepared, dataset.csc_path() if hasattr(dataset, "csc_path") else None


def train_from(source: BatchSource, dataset: Dataset, *, epochs: int,
               save: str | os.PathLike | None = None,
               on_epoch: Callable[[Epoch], None] | None = None) -> TrainResult:
    """Trains ``epochs`` whole epochs from ``source`` (:func:`fit`) on ``dataset`` (a
    prepared one), evaluating after each; keeps the best validation epoch's weights
    and, with ``save``, writes them there (``torch.save``), also when Ctrl-C stops
    the training (:class:`TrainingInterrupted`). The source's loaders end here, not
    at a later garbage collection."""
    kept: dict[str, Any] = {}
    model = source.pipe.eager_model  # every pipeline of a tuned run trains this model

    def keep_best(epoch: Epoch) -> None:
        kept["epochs"] = epoch.epoch
        if "best" not in kept or epoch.val_metric > kept["best"].val_metric:
            kept["best"] = epoch
            kept["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if on_epoch is not None:
            on_epoch(epoch)

    try:
        with interrupts_latched(), source:  # Ctrl-C is not lost where Python swallowed it
            training = fit(source, dataset.data, TrainSpec(epochs=epochs), on_epoch=keep_best)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (the CLI raises it for both)
        raise TrainingInterrupted(kept.get("best"), _save(save, kept), kept.get("epochs", 0),
                                  source.log) from exc
    return TrainResult(source.pipe.config, training, kept["best"], kept["state"],
                       _save(save, kept), tuning=source.log, dataset=dataset.stats())


def _save(save: str | os.PathLike | None, kept: dict[str, Any]) -> Path | None:
    """The best epoch's weights written to ``save``, where asked and an epoch ended."""
    if save is None or "state" not in kept:
        return None
    return atomic_write(save, lambda tmp: torch.save(kept["state"], tmp))


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM: its ``__cause__`` says which) during :func:`train`, raised
    once the training saved what a finished one saves: the best validation epoch so
    far (``best``, None before the first ended) with its weights written to ``saved``
    (where ``save`` was given), the ``epochs`` that ended, and a tuned run's log
    (``tuning``) up to the step it reached (``interrupted_step``). Its loader workers
    have ended."""

    def __init__(self, best: Epoch | None, saved: Path | None, epochs: int,
                 tuning: Any) -> None:
        super().__init__("training interrupted")
        self.best, self.saved, self.epochs, self.tuning = best, saved, epochs, tuning
