"""The accuracy guard: fanout, batch size and AMP dtype change what a model learns,
so a fast config must not win by learning worse.

The baseline trains for ``epochs`` whole epochs; its training time is the budget and
its validation metric (the task's: accuracy, or ROC-AUC for link
prediction) the reference. A trial that would join the feasible Pareto
front (or, with accuracy as an objective, every trial) trains for the same budget
before its result is told to Optuna, in the trial's own process, where the
measurement's warm-up and window were its first steps (:class:`autotune.specs.GuardRun`,
:class:`autotune.trial._worker.GuardMark`; a process of its own only where the front
changed while the trial ran, or the baseline had not set the budget); a validation
metric below ``ratio`` x the baseline's becomes a violated Optuna constraint, so
it leaves ``study.best_trials`` and the dashboard's feasible view. Trials dominated
by a feasible point when they finish can never reach the front and are not trained.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from autotune.config import TrialConfig
from autotune.errors import ConfigError, GuardError
from autotune.trial import TrialResult, run_trial
from autotune.files import inductor_cache_dir
from autotune.specs import GuardOptions, GuardRun, baseline_metric
from autotune.storage import measurement_lock
from autotune.taskinfo import task_info
from autotune.pipeline import TrainSpec

OBJECTIVES = ("throughput", "memory", "accuracy")
WAIT_S = 2.0


def parse_objectives(text: str) -> bool:
    """``throughput,memory`` or ``throughput,memory,accuracy``; True for the latter."""
    names = [n.strip() for n in text.split(",")]
    if names == list(OBJECTIVES[:2]):
        return False
    if names == list(OBJECTIVES):
        return True
    raise ConfigError(f"--objectives must be throughput,memory or throughput,memory,accuracy "
                      f"(got {text!r})")


@dataclass(frozen=True)
class Verdict:
    """A trained trial's validation metric (the task's: accuracy or ROC-AUC) against
    the baseline's."""

    val_metric: float
    baseline_val_metric: float
    ratio: float | None
    guard_s: float
    train_s: float
    steps: int

    @property
    def shortfall(self) -> float:
        """How far below the guard (> 0: violated; 0 without a guard ratio)."""
        if self.ratio is None:
            return 0.0
        return self.ratio * self.baseline_val_metric - self.val_metric

    @property
    def metric_ratio(self) -> float:
        return self.val_metric / self.baseline_val_metric


def _train(opts, number: int, config: TrialConfig, spec: TrainSpec,
           env: dict[str, str] | None = None) -> tuple[TrialResult, float]:
    """Trains in a child process (``env`` over this one's environment, as the
    search's trials have it) under the host's measurement lock (it would steal cores
    from a trial measured beside it)."""
    trial_dir = opts.study_dir / "guard" / str(number)
    start = time.monotonic()
    with measurement_lock(opts.device, f"guard training of trial {number} of study "
                                       f"{opts.study_name}"):
        result = run_trial(config, dataset=opts.dataset, trial_dir=trial_dir,
                           limits=opts.limits, train=spec, env=env,
                           inductor_cache=inductor_cache_dir(opts.studies_dir))
    if not result.ok:
        raise GuardError(f"{result.status}: {result.reason}")
    return result, time.monotonic() - start


def reference(opts, number: int, config: TrialConfig, guard: GuardOptions,
              env: dict[str, str] | None = None) -> tuple[Verdict, dict]:
    """Trains the baseline for ``guard.epochs`` epochs in a process of its own: its
    verdict, and the reference the study keeps (the budget and its accuracy)."""
    result, took = _train(opts, number, config,
                          TrainSpec(epochs=guard.epochs, evaluate_test=False,
                                    every_epoch=False), env)
    return reference_of(result.training, took, number, config, guard)


def reference_of(training: dict, took: float, number: int, config: TrialConfig,
                 guard: GuardOptions) -> tuple[Verdict, dict]:
    """The baseline's verdict and the study's reference from its guard training
    (``took`` seconds in all): its metric stored under the task's metric's name."""
    metric = task_info(config).metric_key
    ref = {"budget_s": training["train_s"], "baseline_trial": number, "ratio": guard.ratio,
           "epochs": guard.epochs, "baseline_validation": {metric: training["val_metric"]}}
    return _verdict(training, took, training["val_metric"], guard), ref


def run_for(guard: GuardOptions, ref: dict | None, *, baseline: bool,
            front: tuple[tuple[float, float], ...], budget_mib: float | None) -> GuardRun | None:
    """What a trial's own process trains after its window: the baseline for the
    guard's epochs, another trial for the baseline's budget (once ``ref`` holds it),
    where it could join ``front``; None where nothing is to be trained there."""
    if not guard.active:
        return None
    if baseline:
        return GuardRun(epochs=guard.epochs, always=True)
    if not ref:  # the baseline's guard training has not set the budget yet
        return None
    return GuardRun(budget_s=ref["budget_s"], front=front, budget_mib=budget_mib,
                    always=guard.objective)


def trained(training: dict) -> dict:
    """A trial's guard training as its process reported it; GuardError where it failed."""
    if "error" in training:
        raise GuardError(training["error"])
    return training


def budget(read: Callable[[], dict | None], alive: Callable[[], bool]) -> dict:
    """The study's guard reference, ``read()`` from it, waiting while another worker
    trains the baseline; ``alive()`` is False once the baseline can no longer
    deliver one."""
    while True:
        found = read()
        if found:
            return found
        if not alive():
            raise GuardError("no baseline has set the guard's budget (its guard training "
                             "failed, or it is not running)")
        time.sleep(WAIT_S)


def check(opts, number: int, config: TrialConfig, guard: GuardOptions, ref: dict,
          env: dict[str, str] | None = None) -> Verdict:
    """Trains ``config`` for the baseline's budget in a process of its own (where its
    trial's process did not: the front changed while it ran) and compares its
    accuracy."""
    result, took = _train(opts, number, config,
                          TrainSpec(budget_s=ref["budget_s"], evaluate_test=False), env)
    return verdict_of(result.training, took, guard, ref)


def verdict_of(training: dict, took: float, guard: GuardOptions, ref: dict) -> Verdict:
    """A trial's verdict from its guard training against the study's reference."""
    return _verdict(training, took, baseline_metric(ref), guard)


def _verdict(training: dict, took: float, baseline: float, guard: GuardOptions) -> Verdict:
    steps = sum(e["steps"] for e in training["epochs"])
    steps += training.get("from_window", {}).get("steps", 0)  # the measurement's own
    return Verdict(training["val_metric"], baseline, guard.ratio, took,
                   training["train_s"], steps)
