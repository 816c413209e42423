"""Training with a config: whole epochs over the training nodes, validation and test
accuracy after each (``autotune train``), or training for a wall-clock budget and
then validation accuracy (the accuracy guard of ``autotune search``).

Both use :func:`autotune.build`, so what trains is what a trial measured.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from autotune.errors import ConfigError
from autotune.measure import device_sync
from autotune.pipeline import Pipeline


@dataclass(frozen=True)
class TrainSpec:
    """How long to train: ``epochs`` whole epochs, or until ``budget_s`` seconds of
    training (then the epoch in progress stops at the next step)."""

    epochs: int | None = None
    budget_s: float | None = None
    evaluate_test: bool = True

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
    evaluation; throughput is seed nodes per second of training time."""

    epoch: int
    steps: int
    seeds: int
    train_s: float
    loss: float
    val_acc: float | None = None
    test_acc: float | None = None

    @property
    def seed_nodes_per_s(self) -> float:
        return self.seeds / self.train_s if self.train_s > 0 else 0.0


@dataclass
class Training:
    epochs: list[Epoch] = field(default_factory=list)
    stopped_by_budget: bool = False

    @property
    def train_s(self) -> float:
        return sum(e.train_s for e in self.epochs)

    @property
    def val_acc(self) -> float | None:
        return self.epochs[-1].val_acc if self.epochs else None

    def steady_seed_nodes_per_s(self) -> float:
        """Median throughput of the epochs after the first (whose first steps warm
        up and compile), or the first epoch's when it is the only one."""
        import statistics

        rates = [e.seed_nodes_per_s for e in self.epochs if e.steps]
        return statistics.median(rates[1:] or rates) if rates else 0.0

    def to_dict(self) -> dict:
        return {"epochs": [{**asdict(e), "seed_nodes_per_s": e.seed_nodes_per_s}
                           for e in self.epochs],
                "stopped_by_budget": self.stopped_by_budget, "train_s": self.train_s,
                "val_acc": self.val_acc,
                "steady_seed_nodes_per_s": self.steady_seed_nodes_per_s()}


def accuracy(pipe: Pipeline, data, split: str) -> float:
    """The task's metric on ``split`` (val or test): accuracy for node tasks, ROC-AUC
    for link prediction (:mod:`autotune.tasks`)."""
    return pipe.task.evaluate(pipe, data, split)


def train(pipe: Pipeline, data, spec: TrainSpec,
          on_epoch: Callable[[Epoch], None] | None = None) -> Training:
    """Trains ``pipe`` as ``spec`` says, evaluating after every epoch (validation,
    and test when asked); with a budget, once the budget is spent. The budget
    counts training time only, not evaluation."""
    out = Training()
    with pipe.activate():
        while spec.epochs is None or len(out.epochs) < spec.epochs:
            left = None if spec.budget_s is None else spec.budget_s - out.train_s
            epoch = _one_epoch(pipe, len(out.epochs) + 1, left)
            out.epochs.append(epoch)
            out.stopped_by_budget = spec.budget_s is not None and out.train_s >= spec.budget_s
            if spec.epochs is not None or out.stopped_by_budget:
                epoch.val_acc = accuracy(pipe, data, "val")
                if spec.evaluate_test:
                    epoch.test_acc = accuracy(pipe, data, "test")
            if on_epoch is not None:
                on_epoch(epoch)
            if out.stopped_by_budget:
                break
    return out


def _one_epoch(pipe: Pipeline, number: int, left_s: float | None) -> Epoch:
    """One pass over the training nodes, or less when ``left_s`` runs out first."""
    steps = seeds = 0
    loss = torch.zeros(())
    sync = device_sync(pipe.device)
    sync()
    t0 = time.perf_counter()
    for batch in pipe.loader:
        loss = pipe.train_step(batch)
        steps += 1
        seeds += pipe.task.seeds(batch)
        if left_s is not None and time.perf_counter() - t0 >= left_s:
            break
    sync()
    return Epoch(epoch=number, steps=steps, seeds=seeds, train_s=time.perf_counter() - t0,
                 loss=float(loss))
