"""Optuna samplers tuned for budgets of tens of trials (few random start-up trials).
Constraints need no ``constraints_func``: samplers read them from each trial
(:mod:`autotune.study._constraints`). The measurements of the baseline's config (the
baseline, its controls, its confirmation rounds) carry no params, since the baseline
may lie outside the space the user wrote: each sampler sees the study without them
(:class:`SpaceOnly`), so its search spaces and its models are the user's."""
from __future__ import annotations

from collections.abc import Container
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ConfigError
from autotune.study._records import is_baseline
from autotune.study._options import DEFAULT_OPTUNA_SAMPLER, OPTUNA_SAMPLERS  # noqa: F401

STARTUP_TRIALS = 4


def optuna_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """The search's sampler ``name`` (tpe, nsga2, gp, random), seeded, seeing only the
    trials that sampled the space."""
    return SpaceOnly(_sampler(name, seed))


def _sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
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
    raise ConfigError(f"--optuna-sampler (optuna_sampler=) must be one of {', '.join(OPTUNA_SAMPLERS)} "
                      f"(got {name!r})")


def measures_baseline(trial: FrozenTrial) -> bool:
    """The baseline's trial, or a finished trial that sampled no params: a control or
    a confirmation round of the baseline."""
    return is_baseline(trial) or (trial.state.is_finished() and
                                                    not trial.params)


class _SearchView:
    """A study as a sampler sees it: every attribute the study's, but its trials
    without those that measure the baseline."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        return [t for t in self._study._get_trials(deepcopy=deepcopy, states=states,
                                                   use_cache=use_cache)
                if not measures_baseline(t)]

    def get_trials(self, deepcopy: bool = True,
                   states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class SpaceOnly(optuna.samplers.BaseSampler):
    """``sampler``, shown the study without the trials that measure the baseline
    (:func:`measures_baseline`): Optuna's samplers infer their search space from the
    trials' params (an intersection, for NSGA-II and GP), which a trial without
    params would empty."""

    def __init__(self, sampler: optuna.samplers.BaseSampler) -> None:
        self.sampling_backend = sampler

    def infer_relative_search_space(self, study, trial):
        return self.sampling_backend.infer_relative_search_space(_SearchView(study), trial)

    def sample_relative(self, study, trial, search_space):
        return self.sampling_backend.sample_relative(_SearchView(study), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.sampling_backend.sample_independent(_SearchView(study), trial, param_name,
                                               param_distribution)

    def before_trial(self, study, trial) -> None:
        self.sampling_backend.before_trial(_SearchView(study), trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.sampling_backend.after_trial(_SearchView(study), trial, state, values)

    def reseed_rng(self) -> None:
        self.sampling_backend.reseed_rng()
