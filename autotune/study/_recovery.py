"""Trials that will never finish, failed and re-queued so the budget is not lost.

- interrupted: left RUNNING on this host by a search process that no longer exists;
- stale: RUNNING on any host, its heartbeat older than the grace period;
- orphan: RUNNING with no worker at all, older than the grace period (a trial
  created twice by a storage call retried after a dropped connection, or by a
  worker that died between asking and claiming it).

None of them counts against ``n_trials``; each one's config is queued once more, as is
a trial that ``--budget`` cut while it was measured, by the next run.
"""
from __future__ import annotations

import socket
from datetime import datetime, timedelta
from typing import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study import _optuna, _records as rec


def fail_interrupted(study: optuna.Study) -> list[int]:
    """Fails the trials this host left RUNNING, from a search process that no longer
    exists, as "interrupted" and re-queues their configs once."""
    host, dead = socket.gethostname(), []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = rec.worker_of(t)
        if worker.get("host") == host and not _alive(worker.get("pid"), worker.get("started")):
            dead.append(t)
    return _fail_and_requeue(study, dead, lambda w: f"interrupted: search pid {w.get('pid')} "
                             "is gone")


def fail_stale(study: optuna.Study) -> list[int]:
    """Fails the trials whose worker, on any host, stopped its heartbeat for longer
    than the grace period, and re-queues them once."""
    return _fail_and_requeue(study, _optuna.stale_trials(study), lambda w: (
        f"stale: no heartbeat from {w.get('host')} pid {w.get('pid')} within the grace "
        "period"))


def fail_orphans(study: optuna.Study, grace_s: float) -> list[int]:
    """Fails RUNNING trials that no worker ever claimed, once older than ``grace_s``."""
    cutoff = datetime.now() - timedelta(seconds=grace_s)
    orphans = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
               if not rec.worker_of(t) and t.datetime_start is not None
               and t.datetime_start < cutoff]
    return _fail_and_requeue(study, orphans, lambda w: "orphan: no worker claimed it within "
                             "the grace period")


def requeue_budget_cuts(study: optuna.Study, trials: list[rec.TrialRecord]) -> list[int]:
    """Queues once more the configs of search trials (``trials``: the study's records)
    that an earlier run's ``--budget`` cut while they were measured (the baseline
    excepted: the loop queues it again itself): a stop leaves no trial waiting, the
    next run measures them first. Returns their numbers."""
    retried = {t.retry_of for t in trials if t.retry_of is not None}
    cut = [t.number for t in trials if t.state == "fail" and t.search_point and not t.baseline
           and (t.fail_reason or "").startswith("budget:") and t.number not in retried]
    frozen = study.get_trials(deepcopy=False)
    for number in cut:
        requeue_once(study, frozen[number])
    return cut


def _fail_and_requeue(study: optuna.Study, trials: list[FrozenTrial],
                      reason: Callable[[dict], str]) -> list[int]:
    failed = []
    for t in trials:
        if _optuna.fail_with_reason(study, t, reason(rec.worker_of(t))):
            requeue_once(study, t)
            failed.append(t.number)
    return failed


def requeue_once(study: optuna.Study, t: FrozenTrial) -> None:
    """Queues the config of a trial that never finished, unless it was itself a retry
    (or never had a config: the baseline's is its own, without params). A queued trial
    stopped before it suggested its params still holds them as Optuna's fixed params."""
    params = t.params or t.system_attrs.get("fixed_params") or {}
    if rec.is_retry(t) or not (params or rec.is_baseline(t)):
        return
    r = rec.TrialRecord.from_frozen(t)  # the baseline or a prior row stays one
    rec.enqueue(study, params, retry_of=t.number, role=r.role, prior=r.prior,
                outside_space=r.outside_space, config=r.config)


def this_worker() -> dict:
    """Who runs the trials: host, pid and the pid's start time (pids are reused),
    which :func:`fail_interrupted` checks to tell a dead search from a live one."""
    import os

    import psutil

    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid,
            "started": psutil.Process(pid).create_time()}


def gone(worker: dict, beat: float, grace_s: float) -> bool:
    """Whether the search process ``worker`` is gone: on this host, its pid is not
    the one that started; on another, nothing was heard from it (``beat``,
    time.time()) for ``grace_s``."""
    import time

    if worker.get("host") == socket.gethostname():
        return not _alive(worker.get("pid"), worker.get("started"))
    return time.time() - beat > grace_s


def _alive(pid: int | None, started: float | None) -> bool:
    import psutil

    try:
        return pid is not None and abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.NoSuchProcess:
        return False
