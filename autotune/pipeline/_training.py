"""Training with a config: whole epochs over the training seeds, the task's metric
on validation and test after each (:func:`train`, which ``autotune train`` calls),
or training for a wall-clock budget and then validation (:func:`fit` with a budget:
the accuracy guard of ``autotune search``).

Both use :func:`autotune.build`, so what trains is what a trial measured.
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
from autotune.files import atomic_write, check_interrupt, inductor_cache_dir, interrupts_latched
from autotune.pipeline._allocator import heap_state
from autotune.pipeline._build import Pipeline, build, check_config, device_sync
from autotune.pipeline._tasks import check_dataset
from autotune.pipeline._tuning import TuneLog, TunedRun, TuneSpec, WindowEvent
from autotune.specs import STUDIES_DIR
from autotune.taskinfo import task_info

if TYPE_CHECKING:
    from autotune.config import TrialConfig
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


def fit(pipe: Pipeline, data, spec: TrainSpec,
        on_epoch: Callable[[Epoch], None] | None = None) -> Training:
    """Trains ``pipe`` as ``spec`` says, evaluating after every epoch (validation,
    and test when asked), or after the last only (``spec.every_epoch`` False); with a
    budget, once the budget is spent. The budget counts training time only, not
    evaluation."""
    out = Training()
    with pipe.activate():
        while spec.epochs is None or len(out.epochs) < spec.epochs:
            left = None if spec.budget_s is None else spec.budget_s - out.train_s
            epoch = _one_epoch(pipe, len(out.epochs) + 1, left)
            out.epochs.append(epoch)
            out.stopped_by_budget = spec.budget_s is not None and out.train_s >= spec.budget_s
            last = out.stopped_by_budget or len(out.epochs) == spec.epochs
            if last or spec.epochs is not None and spec.every_epoch:
                _evaluate_epoch(pipe, data, epoch, spec.evaluate_test)
            if on_epoch is not None:
                on_epoch(epoch)
            if out.stopped_by_budget:
                break
    return out


def fit_tuned(run: TunedRun, data, epochs: int, evaluate_test: bool = True,
              on_epoch: Callable[[Epoch], None] | None = None) -> Training:
    """:func:`fit` for a run that tunes itself (:class:`TunedRun`): whole epochs, each
    evaluated on the incumbent's pipeline."""
    out = Training()
    for number in range(1, epochs + 1):
        steps, seeds, seconds, loss = run.epoch(number)
        epoch = Epoch(epoch=number, steps=steps, seeds=seeds, train_s=seconds, loss=loss)
        with run.pipe.activate():
            _evaluate_epoch(run.pipe, data, epoch, evaluate_test)
        out.epochs.append(epoch)
        if on_epoch is not None:
            on_epoch(epoch)
    return out


def _evaluate_epoch(pipe: Pipeline, data, epoch: Epoch, test: bool) -> None:
    """The task's metric after ``epoch`` on validation, and on test where asked, and
    the seconds they took."""
    start = time.perf_counter()
    epoch.val_metric = evaluate(pipe, data, "val")
    if test:
        epoch.test_metric = evaluate(pipe, data, "test")
    epoch.eval_s = time.perf_counter() - start


def _one_epoch(pipe: Pipeline, number: int, left_s: float | None) -> Epoch:
    """One pass over the training nodes, or less when ``left_s`` runs out first."""
    steps = seeds = 0
    loss_sum = torch.zeros(())  # summed by seeds on the loss's device: no host sync a step
    sync = device_sync(pipe.device)
    sync()
    t0 = time.perf_counter()
    for batch in pipe.loader:
        check_interrupt()
        loss = pipe.train_step(batch)
        steps += 1
        batch_seeds = pipe.task.seeds(batch)
        seeds += batch_seeds
        loss_sum = loss_sum + loss * batch_seeds
        if left_s is not None and time.perf_counter() - t0 >= left_s:
            break
    sync()
    return Epoch(epoch=number, steps=steps, seeds=seeds, train_s=time.perf_counter() - t0,
                 loss=float(loss_sum) / seeds if seeds else 0.0)


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
    tuning: TuneLog | None = None  # what a run that tuned itself tried (config: its winner)
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


def train(config: TrialConfig | str | os.PathLike, dataset: DatasetRef | Dataset, *,
          epochs: int, save: str | os.PathLike | None = None,
          on_epoch: Callable[[Epoch], None] | None = None,
          inductor_cache: str | os.PathLike | None = None, tune: TuneSpec | bool | None = None,
          on_line: Callable[[str], None] | None = None,
          on_window: Callable[[WindowEvent, TuneLog], None] | None = None) -> TrainResult:
    """Trains with every knob of ``config`` (a ``TrialConfig``, or a file written by
    ``autotune export``) for ``epochs`` whole epochs on ``dataset`` (a
    :class:`autotune.DatasetRef`, prepared here, or a prepared dataset), evaluating
    the task's metric on validation and test after each. The best validation epoch's
    weights are kept and, with ``save``, written there (``torch.save``), also when
    Ctrl-C stops the training (:class:`TrainingInterrupted`). A compiled
    config reuses the kernels its search compiled: ``inductor_cache`` (default the
    studies folder's, :func:`autotune.files.inductor_cache_dir`), unless
    ``TORCHINDUCTOR_CACHE_DIR`` is set. With ``tune`` (:class:`TuneSpec`, or True) the
    run tunes itself (:mod:`autotune.pipeline._tuning`; ``on_line`` hears what it
    decides, ``on_window`` each window it trains), its winner the config."""
    tune = TuneSpec() if tune is True else tune or None
    cache_dir = inductor_cache if inductor_cache is not None else inductor_cache_dir(STUDIES_DIR)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(cache_dir).resolve()))
    config = config if isinstance(config, TrialConfig) else load_config(config)
    check_config(config)
    prepared = dataset.prepare() if hasattr(dataset, "prepare") else dataset
    check_dataset(config, prepared)
    cache = dataset.csc_path() if hasattr(dataset, "csc_path") else None
    kept: dict[str, Any] = {}
    run = TunedRun(config, prepared.data, tune, epochs=epochs, num_classes=prepared.num_classes,
                   cache_file=cache, on_line=on_line, on_window=on_window) \
        if tune is not None else None
    pipe = run.pipe if run is not None else \
        build(config, prepared.data, num_classes=prepared.num_classes, cache_file=cache)
    model = pipe.eager_model  # a tuned run's candidates train this model too

    def keep_best(epoch: Epoch) -> None:
        kept["epochs"] = epoch.epoch
        if "best" not in kept or epoch.val_metric > kept["best"].val_metric:
            kept["best"] = epoch
            kept["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if on_epoch is not None:
            on_epoch(epoch)

    try:
        with interrupts_latched():  # Ctrl-C is not lost where Python swallowed it
            training = _epochs(run, pipe, prepared.data, epochs, keep_best)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (the CLI raises it for both)
        raise TrainingInterrupted(kept.get("best"), _save(save, kept), kept.get("epochs", 0),
                                  None if run is None else run.log) from exc
    return TrainResult(config if run is None else run.pipe.config, training, kept["best"],
                       kept["state"], _save(save, kept),
                       tuning=None if run is None else run.log, dataset=prepared.stats())


def _epochs(run: TunedRun | None, pipe: Pipeline, data, epochs: int,
            on_epoch: Callable[[Epoch], None]) -> Training:
    """``epochs`` epochs of a tuned run (whose log notes where Ctrl-C stopped it), or
    else of ``pipe``; every loader's workers end here, not at a later garbage
    collection."""
    if run is not None:
        with contextlib.closing(run):
            try:
                return fit_tuned(run, data, epochs, on_epoch=on_epoch)
            except KeyboardInterrupt:
                run.log.interrupted_step = run.steps
                raise
    with pipe:
        return fit(pipe, data, TrainSpec(epochs=epochs), on_epoch=on_epoch)


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
                 tuning: TuneLog | None) -> None:
        super().__init__("training interrupted")
        self.best, self.saved, self.epochs, self.tuning = best, saved, epochs, tuning
