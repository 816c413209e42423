"""Optuna samplers tuned for budgets of tens of trials (few random start-up trials).
Constraints need no ``constraints_func``: samplers read them from each trial
(:mod:`autotune.study.constraints`)."""
from __future__ import annotations

import optuna

from autotune.errors import ConfigError
from autotune.study.options import DEFAULT_SAMPLER, SAMPLERS  # noqa: F401

STARTUP_TRIALS = 4


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS,
                                          multivariate=True, group=True,
                                          warn_independent_sampling=False)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=2 * STARTUP_TRIALS)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=STARTUP_TRIALS,
                                         warn_independent_sampling=False)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"--sampler (sampler=) must be one of {', '.join(SAMPLERS)} "
                      f"(got {name!r})")
