"""Memory budget and accuracy guard as Optuna constraints (feasible when <= 0), set
with ``Trial.set_constraint`` so that ``study.best_trials``, every sampler and
optuna-dashboard's feasible view respect them. Every completed trial carries the
same constraints (the samplers require it): a trial the guard did not train meets
the guard."""
from __future__ import annotations

import optuna

from autotune.study import _records as rec

MEMORY, ACCURACY = "memory", "accuracy"


def constraint_values(*, memory_mib: float, budget_mib: float | None, guarded: bool,
                      shortfall: float | None) -> tuple[dict[str, float], dict[str, float]]:
    """The constraints of a trial (name: value, feasible when <= 0) and the user
    attributes that record them: memory over budget, accuracy below the guard."""
    constraints, attrs = {}, {}
    if budget_mib is not None:
        constraints[MEMORY] = attrs[rec.MEMORY_EXCESS] = memory_mib - budget_mib
    if guarded:
        if shortfall is not None:
            attrs[rec.GUARD_SHORTFALL] = shortfall
        constraints[ACCURACY] = shortfall if shortfall is not None else 0.0
    return constraints, attrs


def set_constraints(trial: optuna.Trial, **figures) -> None:
    """Records memory over budget and accuracy below the guard on ``trial``
    (``figures``: :func:`constraint_values`'s)."""
    constraints, attrs = constraint_values(**figures)
    rec.store(trial, **attrs)
    for key, value in constraints.items():
        trial.set_constraint(key, value)
