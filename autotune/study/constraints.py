"""Memory budget and accuracy guard as Optuna constraints (feasible when <= 0), set
with ``Trial.set_constraint`` so that ``study.best_trials``, every sampler and
optuna-dashboard's feasible view respect them. Every completed trial carries the
same constraints (the samplers require it): a trial the guard did not train meets
the guard."""
from __future__ import annotations

import optuna

from autotune.study import records as rec

MEMORY, ACCURACY = "memory", "accuracy"


def set_constraints(trial: optuna.Trial, *, memory_mib: float, budget_mib: float | None,
                    guarded: bool, shortfall: float | None) -> None:
    """Records memory over budget and accuracy below the guard on ``trial``."""
    if budget_mib is not None:
        excess = memory_mib - budget_mib
        trial.set_user_attr(rec.MEMORY_EXCESS, excess)
        trial.set_constraint(MEMORY, excess)
    if guarded:
        if shortfall is not None:
            trial.set_user_attr(rec.ACC_SHORTFALL, shortfall)
        trial.set_constraint(ACCURACY, shortfall if shortfall is not None else 0.0)
