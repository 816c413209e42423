"""The one place autotune reaches past Optuna's public API, and why.

- ``storage(study)``: ask/tell has no heartbeat of its own (only ``optimize`` beats),
  so a search beats for its trial through the storage, as ``optimize`` does.
- ``stale_trials`` and ``fail_with_reason``: ``optuna.storages.fail_stale_trials``
  fails a stale trial first and calls back after, when a finished trial takes no
  more attributes, so the reason ("stale: no heartbeat from host H") could not be
  recorded on the failed trial itself. Here the reason is written, then the state.
- ``study_id``: optuna-dashboard addresses a study by its storage id.
- ``trial_id``: the heartbeat is recorded by the trial's storage id.
- ``stale_trials`` calls the storage's ``_get_stale_trial_ids``, retried like the
  public storage calls (:func:`autotune.storage.retried`).
"""
from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.storage import retried
from autotune.study import _records as rec


def storage(study: optuna.Study) -> optuna.storages.BaseStorage:
    return study._storage


def study_id(study: optuna.Study) -> int:
    return study._study_id


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    return trial._trial_id


def beat(study: optuna.Study, trial: optuna.Trial | FrozenTrial) -> None:
    """Records one heartbeat for ``trial`` (a trial with none is never found stale)."""
    store = storage(study)
    if store.get_heartbeat_interval() is not None:
        store.record_heartbeat(trial_id(trial))


def stale_trials(study: optuna.Study) -> list[FrozenTrial]:
    """RUNNING trials whose heartbeat is older than the storage's grace period."""
    store = storage(study)
    if store.get_heartbeat_interval() is None:
        return []
    return [store.get_trial(i)
            for i in retried(store._get_stale_trial_ids, study._study_id)]


def fail_with_reason(study: optuna.Study, trial: FrozenTrial, reason: str) -> bool:
    """Fails a RUNNING trial of any worker with ``reason``; False when it finished
    meanwhile."""
    store = storage(study)
    try:
        rec.store_in(store, trial_id(trial), fail_reason=reason)
        store.set_trial_state_values(trial_id(trial), TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    return True
