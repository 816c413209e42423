"""Many workers, one study, on a real PostgreSQL (see the pg_url fixture)."""
from __future__ import annotations

import json
import signal
import time

import optuna
import psutil
import pytest

from _helpers import cli

from autotune.study import TrialRecord

FAST = ["--dataset", "synthetic", "--scale", "0.004", "--steps", "3", "--warmup", "1",
        "--warmup-time", "0",
        "--max-seconds", "0.5", "--space", "quick", "--confirm", "0"]


def _worker(tmp_path, url, name, n_trials, *extra, steps="3", lock_dir=None, env=None):
    return cli("search", *FAST, "--root", str(tmp_path / "data"), "--studies-dir",
               str(tmp_path / "studies"), "--storage", url, "--study-name", name, "--n-trials",
               str(n_trials), "--steps", steps, *extra, background=True,
               env={"AUTOTUNE_LOCK_DIR": str(lock_dir or tmp_path / "locks"), **(env or {})})


def _study(url, name):
    from autotune.storage import open_storage

    return optuna.load_study(study_name=name, storage=open_storage(url))


def _prepare_data(tmp_path):
    """Builds the dataset once, so that two workers starting together don't both."""
    from autotune.data import DatasetRef

    DatasetRef("synthetic", root=str(tmp_path / "data"), scale=0.004).prepare()


@pytest.mark.slow
def test_two_workers_share_the_budget_and_never_measure_at_once(tmp_path, pg_url, pg_study):
    _prepare_data(tmp_path)
    workers = [_worker(tmp_path, pg_url, pg_study, 4) for _ in range(2)]
    outs = [w.communicate(timeout=600) for w in workers]
    for w, (out, err) in zip(workers, outs):
        assert w.returncode == 0, err
    study = _study(pg_url, pg_study)
    trials = study.trials
    # a repeat of a config measured already (the sampler proposed it again) is in
    # the study but counts against nothing
    counted = [t for t in trials if TrialRecord.from_frozen(t).counts]
    assert len(counted) == 4, "the study counts more or fewer trials than --n-trials"
    assert all(t.state.name == "COMPLETE" for t in trials)
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    pids = {t.user_attrs["worker"]["pid"] for t in trials}
    assert pids == {w.pid for w in workers}, "one worker did all the trials"
    assert sum(t.user_attrs.get("role") == "baseline" for t in trials) == 1
    windows = sorted(tuple(t.user_attrs["measured_at"]) for t in trials
                     if "reused_from" not in t.user_attrs)
    assert len(windows) >= 2
    for (_, end), (start, _) in zip(windows, windows[1:]):
        assert end <= start, f"two trials measured at once on this host: {windows}"
    assert max(t.user_attrs["lock_wait_s"] for t in trials
               if "lock_wait_s" in t.user_attrs) > 0.5, "the workers never waited for the lock"


def _running_trial(url, name, pid, deadline_s=180):
    """Waits until worker ``pid`` is measuring a trial: its config chosen (a trial read
    between its ask and its suggest has no params yet) and its trial process alive."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            study = _study(url, name)
        except KeyError:
            time.sleep(0.5)
            continue
        for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
            if t.user_attrs.get("worker", {}).get("pid") == pid and "config_key" in t.user_attrs \
                    and psutil.Process(pid).children():
                return t
        time.sleep(0.5)
    raise AssertionError("the worker never started measuring a trial")


@pytest.mark.slow
@pytest.mark.fault
def test_sigkilled_worker_trial_fails_and_the_other_completes(tmp_path, pg_url, pg_study):
    _prepare_data(tmp_path)
    grace = 20
    flags = ["--heartbeat", "2", "--grace-period", str(grace)]
    # its trials hang at their first measured step until it is killed: a trial of 400
    # steps once ended between the read of the trial below and the kill, and was
    # COMPLETE (on the AVX-512 EPYC); one of 4000 steps took a core from the survivor
    doomed = _worker(tmp_path, pg_url, pg_study, 5, *flags,
                     env={"AUTOTUNE_TEST_FAULT": "hang:1"})
    _running_trial(pg_url, pg_study, doomed.pid)
    survivor = _worker(tmp_path, pg_url, pg_study, 5, *flags)
    time.sleep(3)
    # the trial it measures now, read just before the kill
    victim = _running_trial(pg_url, pg_study, doomed.pid)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    killed_at = time.monotonic()
    deadline, state = killed_at + grace + 30, None
    while time.monotonic() < deadline:
        state = _study(pg_url, pg_study).trials[victim.number].state.name
        if state == "FAIL":
            break
        time.sleep(0.5)
    failed_after = time.monotonic() - killed_at
    assert state == "FAIL" and failed_after <= grace, \
        f"the killed worker's trial is {state} {failed_after:.0f} s after the kill"
    out, err = survivor.communicate(timeout=600)
    assert survivor.returncode == 0, err
    study = _study(pg_url, pg_study)
    dead = study.trials[victim.number]
    assert dead.user_attrs["fail_reason"].split(":")[0] in ("interrupted", "stale")
    retries = [t for t in study.trials if t.user_attrs.get("retry_of") == victim.number]
    assert len(retries) == 1 and retries[0].params == dead.params, "config not re-queued once"
    assert sum(t.state.name == "COMPLETE" for t in study.trials) == 5, "budget not completed"


@pytest.mark.slow
def test_stale_heartbeat_from_another_host_fails_and_requeues_once(pg_url, pg_study):
    """A worker on another host (so no pid to check) that stopped beating."""
    from autotune.storage import Heartbeat, open_storage
    from autotune.study._records import DIRECTIONS
    from autotune.study._recovery import fail_stale

    storage = open_storage(pg_url, heartbeat_s=1, grace_s=2)
    study = optuna.create_study(study_name=pg_study, storage=storage, directions=DIRECTIONS)
    gone, alive = study.ask(), study.ask()
    for t in (gone, alive):
        t.suggest_int("batch_size", 256, 1024)
        t.set_user_attr("worker", {"host": "elsewhere", "pid": 1, "started": 0.0})
    storage.record_heartbeat(gone._trial_id)
    with Heartbeat(study._storage, alive._trial_id):
        time.sleep(3.5)
        assert fail_stale(study) == [gone.number]
        assert fail_stale(study) == []
    frozen = study.trials[gone.number]
    assert frozen.state.name == "FAIL" and frozen.user_attrs["fail_reason"].startswith("stale")
    assert study.trials[alive.number].state.name == "RUNNING"
    study.tell(alive, [1.0, 1.0])  # its worker finishes it
    queued = [t for t in study.trials if t.state.name == "WAITING"]
    assert [t.user_attrs["retry_of"] for t in queued] == [gone.number]
    retry = study.ask()
    assert retry.suggest_int("batch_size", 256, 1024) == frozen.params["batch_size"]
    # the retry dies too: it is not re-queued a second time
    retry.set_user_attr("worker", {"host": "elsewhere", "pid": 1, "started": 0.0})
    storage.record_heartbeat(retry._trial_id)
    time.sleep(3.5)
    assert fail_stale(study) == [retry.number]
    assert not [t for t in study.trials if t.state.name == "WAITING"]


@pytest.mark.slow
def test_dropped_connections_are_retried(tmp_path, pg_url, pg_study):
    """Every autotune connection to the server is killed while a search runs."""
    from sqlalchemy import create_engine, text

    from autotune.storage import normalise_url

    _prepare_data(tmp_path)
    proc = _worker(tmp_path, pg_url, pg_study, 3, steps="60")
    _running_trial(pg_url, pg_study, proc.pid)
    admin = create_engine(normalise_url(pg_url))
    with admin.connect() as conn:
        killed = conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'autotune' AND pid <> pg_backend_pid()")).scalar()
    admin.dispose()
    assert killed >= 1
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert sum(t.state.name == "COMPLETE" for t in _study(pg_url, pg_study).trials) == 3


@pytest.mark.slow
def test_password_appears_in_no_output_log_or_export(tmp_path, pg_url, pg_study):
    from sqlalchemy.engine import make_url

    secret = "s3cret-Pw-91"
    url = make_url(pg_url).set(password=secret).render_as_string(hide_password=False)
    common = ["--storage", url, "--study-name", pg_study, "--studies-dir",
              str(tmp_path / "studies")]
    runs = [cli("search", *FAST, "--root", str(tmp_path / "data"), "--n-trials", "2", *common),
            cli("show", *common),
            cli("export", *common, "--out", str(tmp_path / "best.yaml")),
            cli("report", *common, "--out", str(tmp_path / "report"))]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert secret not in run.stdout + run.stderr
    assert "***" in runs[0].stdout  # the URL is shown, masked
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"password in {path}"
    study = _study(pg_url, pg_study)
    stored = json.dumps([study.user_attrs, study._storage.get_study_system_attrs(study._study_id)] +
                        [[t.user_attrs, t.system_attrs] for t in study.trials], default=str)
    assert secret not in stored


def test_an_orphan_trial_is_failed_and_requeued_and_frees_its_slot(tmp_path):
    """A RUNNING trial that no worker claimed (a create_new_trial applied twice by a
    retried storage call) holds a budget slot only until the grace period passes."""
    from autotune.storage import open_storage
    from autotune.study import TrialRecord
    from autotune.study._records import DIRECTIONS
    from autotune.study._recovery import fail_orphans

    storage = open_storage(f"sqlite:///{tmp_path / 'o.db'}", heartbeat_s=1, grace_s=2)
    study = optuna.create_study(study_name="o", storage=storage, directions=DIRECTIONS)
    orphan, claimed = study.ask(), study.ask()
    orphan.suggest_int("batch_size", 256, 1024)
    claimed.set_user_attr("worker", {"host": "elsewhere", "pid": 1, "started": 0.0})
    assert fail_orphans(study, grace_s=2) == [], "too young to be an orphan"
    time.sleep(2.5)
    assert fail_orphans(study, grace_s=2) == [orphan.number]
    record = TrialRecord.from_frozen(study.trials[orphan.number])
    assert record.state == "fail" and record.fail_reason.startswith("orphan")
    assert record.not_measured and not record.counts, "an orphan counts against no budget"
    assert study.trials[claimed.number].state.name == "RUNNING"
    queued = [t for t in study.trials if t.state.name == "WAITING"]
    assert [t.user_attrs["retry_of"] for t in queued] == [orphan.number]
    assert fail_orphans(study, grace_s=2) == []


def test_a_queued_trial_stopped_before_its_suggest_is_requeued_with_its_params(tmp_path):
    """A worker killed between asking a queued trial and suggesting from it leaves a
    trial without params: its config is still the queue's (Optuna's fixed params)."""
    from autotune.study._records import DIRECTIONS, enqueue
    from autotune.study._recovery import requeue_once

    study = optuna.create_study(study_name="q", storage=f"sqlite:///{tmp_path / 'q.db'}",
                                directions=DIRECTIONS)
    enqueue(study, {"batch_size": 512}, role="prior", prior=1)
    stopped = study.ask()
    assert study.trials[stopped.number].params == {}, "asked, nothing suggested yet"
    study.tell(stopped, state=optuna.trial.TrialState.FAIL)
    requeue_once(study, study.trials[stopped.number])
    queued = [t for t in study.trials if t.state.name == "WAITING"]
    assert [t.user_attrs["retry_of"] for t in queued] == [stopped.number]
    assert queued[0].system_attrs["fixed_params"] == {"batch_size": 512}
