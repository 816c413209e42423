"""The Optuna study: ask a config, measure it in its own process, tell the result.

Two objectives (throughput up, peak memory down), an optional memory budget as an
Optuna constraint, the baseline as trial 0, repeats reused rather than measured,
and resumption: running the same search again continues the same study.
"""
from __future__ import annotations

import functools
import os
import re
import socket
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import TrialState

from autotune.config import TrialConfig
from autotune.datasets import DatasetRef
from autotune.errors import ConfigError
from autotune.guard import GuardFailed, GuardOptions, Verdict
from autotune import guard as guards
from autotune.measure import MeasureSpec
from autotune.pareto import Point, best_under, front, knee
from autotune.result import TrialResult
from autotune.runner import TrialLimits, inductor_cache_dir, run_trial
from autotune.space import SearchSpace, params_for, suggest_config
from autotune.storage import (GRACE_S, HEARTBEAT_S, Heartbeat, file_lock, masked,
                              measurement_lock_path, open_storage, study_lock)

DIRECTIONS = ["maximize", "minimize"]
METRIC_NAMES = ["throughput (seed nodes/s)", "peak memory (MiB)"]
ACCURACY_METRIC = "validation accuracy"
SAMPLERS = ("tpe", "nsga2", "gp", "random")
DEFAULT_SAMPLER = "gp"  # the best in benchmarks/search_efficiency.py
CONSTRAINTS_KEY = "constraints"  # where Optuna keeps constraint values (system attrs)
MIB = 1 << 20


@dataclass(frozen=True)
class SearchOptions:
    """Everything a search needs, checked before the first trial."""

    dataset: DatasetRef
    space: SearchSpace
    device: str = "cpu"
    n_trials: int = 20
    timeout_s: float | None = None
    sampler: str = DEFAULT_SAMPLER
    seed: int = 0
    max_memory_bytes: int | None = None
    storage: str | None = None
    study_name: str | None = None
    studies_dir: Path = Path("studies")
    measure: MeasureSpec = field(default_factory=MeasureSpec)
    limits: TrialLimits = field(default_factory=TrialLimits)
    heartbeat_s: int = HEARTBEAT_S
    grace_s: int = GRACE_S
    guard: GuardOptions = field(default_factory=GuardOptions)

    @property
    def directions(self) -> list[str]:
        return DIRECTIONS + (["maximize"] if self.guard.objective else [])

    @property
    def metric_names(self) -> list[str]:
        return METRIC_NAMES + ([ACCURACY_METRIC] if self.guard.objective else [])


def default_study_name(dataset: str, device: str) -> str:
    stem = Path(dataset).stem if dataset.endswith(".pt") else dataset
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{stem}-{device}-{socket.gethostname()}")


def default_storage(studies_dir: Path, study_name: str) -> str:
    return f"sqlite:///{(studies_dir / f'{study_name}.db').resolve()}"


def make_sampler(name: str, seed: int, memory: bool,
                 accuracy: bool = False) -> optuna.samplers.BaseSampler:
    """Samplers tuned for budgets of tens of trials (few random start-up trials);
    ``memory``/``accuracy``: the memory budget / the accuracy guard are constraints."""
    constraints = functools.partial(_constraints, memory=memory, accuracy=accuracy) \
        if memory or accuracy else None
    with warnings.catch_warnings():
        # Optuna 5 deprecates constraints_func (removal in 7) for Trial.set_constraint,
        # which Optuna 4, also supported here, lacks; one warning per trial would bury
        # the progress lines.
        warnings.filterwarnings("ignore", message=".*constraints_func.*", category=FutureWarning)
        return _make_sampler(name, seed, constraints)


def _make_sampler(name: str, seed: int, constraints) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, multivariate=True,
                                          group=True, constraints_func=constraints,
                                          warn_independent_sampling=False)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=8,
                                             constraints_func=constraints)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=4,
                                         constraints_func=constraints,
                                         warn_independent_sampling=False)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"--sampler must be one of {', '.join(SAMPLERS)} (got {name!r})")


def _constraints(trial: optuna.trial.FrozenTrial, *, memory: bool,
                 accuracy: bool) -> list[float]:
    """Constraint values (feasible when <= 0), one per active constraint. A trial the
    guard did not train (dominated when it finished) counts as meeting the guard."""
    return ([trial.user_attrs.get("memory_excess_mib", 0.0)] if memory else []) + \
        ([trial.user_attrs.get("accuracy_shortfall", 0.0)] if accuracy else [])


def open_study(opts: SearchOptions, *, dataset_stats: dict, env: dict) -> optuna.Study:
    """Creates the study or loads it to resume or to join it from another worker;
    refuses one made for other objectives, another search space or another budget."""
    name = opts.study_name or default_study_name(opts.dataset.name, opts.device)
    url = opts.storage or default_storage(opts.studies_dir, name)
    storage = open_storage(url, heartbeat_s=opts.heartbeat_s, grace_s=opts.grace_s)
    with study_lock(url, name):  # two workers starting together write the attrs once
        try:
            study = optuna.create_study(study_name=name, storage=storage,
                                        directions=opts.directions, load_if_exists=True)
        except ValueError as exc:
            raise ConfigError(f"study {name!r} in {masked(url)} cannot be reused: {exc}; "
                              "pass a new --study-name") from exc
        if [d.name.lower() for d in study.directions] != opts.directions:
            raise ConfigError(f"study {name!r} has directions "
                              f"{[d.name.lower() for d in study.directions]} (expected "
                              f"{opts.directions}: check --objectives); pass a new "
                              "--study-name")
        _check_or_set_attrs(study, opts, dataset_stats, env)
    return study


def _check_or_set_attrs(study: optuna.Study, opts: SearchOptions, dataset_stats: dict,
                        env: dict) -> None:
    attrs = study.user_attrs
    checks = {"space": opts.space.to_dict(), "max_memory_bytes": opts.max_memory_bytes,
              "dataset_ref": vars(opts.dataset), "device": opts.device,
              "accuracy_guard": ({"ratio": opts.guard.ratio, "epochs": opts.guard.epochs}
                                 if opts.guard.active else None)}
    if "space" in attrs:
        was, now = attrs["space"].get("fixed", {}), opts.space.fixed
        if attrs["space"].get("name") == opts.space.name and was != now:
            raise ConfigError(f"study {study.study_name!r} was created with the pipeline facts "
                              f"{was} (now {now}); pass the same --model/--hidden/--layers "
                              "or a new --study-name")
        for key, value in checks.items():
            if attrs.get(key) != value:
                raise ConfigError(f"study {study.study_name!r} was created with another {key} "
                                  f"({attrs.get(key)!r}, now {value!r}); pass a new "
                                  "--study-name or the original flags")
        return
    with warnings.catch_warnings():  # stable in practice; experimental in name
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(opts.metric_names)
    for key, value in {**checks, "dataset": dataset_stats, "env": env}.items():
        study.set_user_attr(key, value)


NOT_MEASURED = ("interrupted", "stale")  # fail reasons of trials that never finished


def _not_measured(t: optuna.trial.FrozenTrial) -> bool:
    reason = t.user_attrs.get("fail_reason") or ""
    return t.state == TrialState.FAIL and reason.split(":")[0] in NOT_MEASURED


def fail_interrupted(study: optuna.Study) -> list[int]:
    """Fails the trials this host left RUNNING, from a search process that no longer
    exists, as "interrupted" and re-queues their configs once."""
    host, dead = socket.gethostname(), []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.user_attrs.get("worker", {})
        if worker.get("host") == host and not _alive(worker.get("pid"), worker.get("started")):
            dead.append(t)
    return _fail_and_requeue(study, dead, lambda w: f"interrupted: search pid {w.get('pid')} "
                             "is gone")


def fail_stale(study: optuna.Study) -> list[int]:
    """Fails the trials whose worker, on any host, stopped its heartbeat for longer
    than the grace period (Optuna's heartbeat records), and re-queues them once. This
    is ``optuna.storages.fail_stale_trials``, but writing the reason before the state:
    a finished trial takes no more attributes."""
    storage = study._storage
    if storage.get_heartbeat_interval() is None:
        return []
    stale = [storage.get_trial(i) for i in storage._get_stale_trial_ids(study._study_id)]
    return _fail_and_requeue(study, stale, lambda w: f"stale: no heartbeat from "
                             f"{w.get('host')} pid {w.get('pid')} within the grace period")


def _fail_and_requeue(study: optuna.Study, trials: list[optuna.trial.FrozenTrial],
                      reason: Callable[[dict], str]) -> list[int]:
    storage, failed = study._storage, []
    for t in trials:
        try:
            storage.set_trial_user_attr(t._trial_id, "fail_reason",
                                        reason(t.user_attrs.get("worker", {})))
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # it finished after all
        _requeue_once(study, t)
        failed.append(t.number)
    return failed


def _requeue_once(study: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
    """Queues the config of a trial that never finished, unless it was itself a retry."""
    if "retry_of" in t.user_attrs:
        return
    attrs: dict[str, Any] = {"retry_of": t.number}
    if t.user_attrs.get("baseline"):
        attrs["baseline"] = True
    study.enqueue_trial(t.params, user_attrs=attrs, skip_if_exists=False)


def _alive(pid: int | None, started: float | None) -> bool:
    import psutil

    try:
        return pid is not None and abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.NoSuchProcess:
        return False


def _point(t: optuna.trial.FrozenTrial) -> Point:
    third = len(t.values) > 2
    return Point(number=t.number, throughput=t.values[0], memory_mib=t.values[1],
                 config=t.user_attrs.get("config", {}),
                 feasible=(t.user_attrs.get("memory_excess_mib", 0.0) <= 0
                           and t.user_attrs.get("accuracy_shortfall", 0.0) <= 0),
                 accuracy=t.values[2] if third else t.user_attrs.get("val_acc"),
                 accuracy_objective=third,
                 baseline=bool(t.user_attrs.get("baseline")),
                 eager=bool(t.user_attrs.get("compile", {}).get("fell_back_to_eager")))


def points(study: optuna.Study) -> list[Point]:
    return [_point(t) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]


def counted(study: optuna.Study) -> int:
    """Trials that count against --n-trials: finished ones, bar those that never
    finished because their worker died or was interrupted."""
    return sum(1 for t in study.get_trials(deepcopy=False)
               if t.state == TrialState.COMPLETE or
               (t.state == TrialState.FAIL and not _not_measured(t)))


@dataclass
class SearchOutcome:
    study: optuna.Study
    url: str
    measured: int = 0
    reused: int = 0
    failed: int = 0
    interrupted: list[int] = field(default_factory=list)
    stale: list[int] = field(default_factory=list)
    guarded: int = 0
    guard_violations: int = 0
    guard_s: float = 0.0
    elapsed_s: float = 0.0


def objectives(result: TrialResult, device: str) -> tuple[float, float]:
    """(seed nodes/s, peak MiB): RSS of the trial's processes over warm-up and window
    on CPU, ``max_memory_reserved`` on CUDA."""
    mem = result.memory
    if device == "cuda":
        peak = mem["cuda_max_reserved_bytes"]
    else:
        peak = max(mem["peak_rss_warmup_bytes"], mem["peak_rss_window_bytes"])
    return result.throughput, peak / MIB


def _attrs(result: TrialResult) -> dict[str, Any]:
    attrs = {"status": result.status, "config": result.config}
    if result.ok:
        attrs.update(summary=result.summary(), memory=result.memory, compile=result.compile,
                     observed=result.observed, phases_s=result.phases_s,
                     warnings=list(result.warnings),
                     step_times_s=list(result.step_times_s))
    else:
        attrs.update(fail_reason=result.reason, stderr_tail=result.stderr_tail or "")
    return attrs


def _previous(study: optuna.Study, key: str) -> optuna.trial.FrozenTrial | None:
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        if t.user_attrs.get("config_key") == key and not _not_measured(t) and \
                "reused_from" not in t.user_attrs:
            return t
    return None


Progress = Callable[[int, int, TrialConfig, optuna.trial.FrozenTrial, float, float], None]


POLL_S = 2.0  # how often a worker whose budget is taken by running trials looks again


def run_search(opts: SearchOptions, study: optuna.Study, url: str, baseline: TrialConfig, *,
               progress: Progress, on_trial_done: Callable[[optuna.Study], None]) -> SearchOutcome:
    """Reserves, measures and tells until the study holds ``n_trials`` counted trials
    or ``timeout_s`` has passed. Any number of workers may run this on one study:
    the budget is the study's, shared between them."""
    outcome = SearchOutcome(study, url)
    start = time.monotonic()
    done_at_start = counted(study)
    worker = _this_worker()
    budget_mib = opts.max_memory_bytes / MIB if opts.max_memory_bytes else None
    while opts.timeout_s is None or time.monotonic() - start <= opts.timeout_s:
        asked_at = time.monotonic()
        trial = _reserve(opts, study, url, baseline, worker, outcome)
        if trial is None:
            break
        if trial is _WAIT:
            time.sleep(POLL_S)
            continue
        trial.set_user_attr("reserve_s", time.monotonic() - asked_at)  # lock + ask
        config = suggest_config(trial, opts.space, device=opts.device, seed=opts.seed)
        if trial.user_attrs.get("baseline"):
            config = baseline
            study.set_user_attr("baseline_trial", trial.number)
        trial.set_user_attr("config_key", config.key())
        try:
            frozen = _measure_and_tell(opts, study, trial, config, budget_mib, outcome)
        except KeyboardInterrupt:
            trial.set_user_attr("fail_reason", "interrupted")
            study.tell(trial, state=TrialState.FAIL)
            raise
        if frozen is None:
            continue
        on_trial_done(study)
        elapsed, n_total = time.monotonic() - start, counted(study)
        n_done = n_total - done_at_start
        eta = elapsed / n_done * max(opts.n_trials - n_total, 0) if n_done > 0 else 0.0
        progress(n_total, opts.n_trials, config, frozen, elapsed, eta)
    outcome.elapsed_s = time.monotonic() - start
    return outcome


_WAIT = object()  # the budget is taken, but by running trials that may yet fail


def _reserve(opts: SearchOptions, study: optuna.Study, url: str, baseline: TrialConfig,
             worker: dict[str, Any], outcome: SearchOutcome) -> optuna.Trial | object | None:
    """Under the study lock: fails dead workers' trials, queues the baseline, and asks
    a trial if the budget has room. Returns the trial, ``_WAIT`` or None (done)."""
    with study_lock(url, study.study_name):
        outcome.interrupted += fail_interrupted(study)
        outcome.stale += fail_stale(study)
        if _needs_baseline(study):
            study.enqueue_trial(params_for(baseline, opts.space), user_attrs={"baseline": True})
        trials = study.get_trials(deepcopy=False)
        done = counted(study)
        running = sum(1 for t in trials if t.state == TrialState.RUNNING)
        if done >= opts.n_trials:
            return None
        if done + running >= opts.n_trials:
            return _WAIT
        # Seeded by the study's size, so one worker replays exactly and two workers
        # never draw the same start-up configs.
        study.sampler = make_sampler(opts.sampler, opts.seed + len(trials),
                                     opts.max_memory_bytes is not None,
                                     opts.guard.ratio is not None)
        with warnings.catch_warnings():  # we beat ourselves, see Heartbeat
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
            trial = study.ask()
        trial.set_user_attr("worker", worker)
        if study._storage.get_heartbeat_interval() is not None:
            # a first beat at once: a trial with none is never found stale
            study._storage.record_heartbeat(trial._trial_id)
        return trial


def _needs_baseline(study: optuna.Study) -> bool:
    """True until a baseline trial is queued, running, or finished other than by an
    interruption or a dead worker."""
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("baseline") and not _not_measured(t):
            return False
    return True


def _this_worker() -> dict[str, Any]:
    """Who runs the trials: host, pid and the pid's start time (pids are reused),
    which :func:`fail_interrupted` checks to tell a dead search from a live one."""
    import psutil

    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": psutil.Process(pid).create_time()}


def _measure_and_tell(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
                      config: TrialConfig, budget_mib: float | None,
                      outcome: SearchOutcome) -> optuna.trial.FrozenTrial | None:
    """Reuses an earlier measurement of the same config, or measures it under the
    host's measurement lock with a heartbeat; None when another worker failed the
    trial as stale meanwhile."""
    previous = _previous(study, config.key())
    if previous is not None:
        keep = {k: v for k, v in previous.user_attrs.items()
                if k not in ("worker", "baseline", "config_key")}
        for key, value in {**keep, "reused_from": previous.number}.items():
            trial.set_user_attr(key, value)
        outcome.reused += 1
        if previous.state == TrialState.COMPLETE:
            _set_constraints(opts, study, trial, previous.values[1], budget_mib,
                             previous.user_attrs.get("accuracy_shortfall"))
            return study.tell(trial, previous.values)
        outcome.failed += 1
        return study.tell(trial, state=TrialState.FAIL)
    trial_dir = opts.studies_dir / study.study_name / "trials" / str(trial.number)
    with Heartbeat(study._storage, trial._trial_id), \
            file_lock(measurement_lock_path(opts.device)) as waited:
        measured_from = time.time()
        result = run_trial(config, dataset=opts.dataset, trial_dir=trial_dir,
                           measure=opts.measure, limits=opts.limits,
                           inductor_cache=inductor_cache_dir(opts.studies_dir))
        measured_to = time.time()
    outcome.measured += 1
    attrs = {**_attrs(result), "trial_dir": str(trial_dir),
             "measured_at": [measured_from, measured_to], "lock_wait_s": waited}
    try:
        written_at = time.monotonic()
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("attrs_write_s", time.monotonic() - written_at)
        if not result.ok:
            outcome.failed += 1
            return study.tell(trial, state=TrialState.FAIL)
        values = list(objectives(result, opts.device))
        with Heartbeat(study._storage, trial._trial_id):  # guard training takes a while
            verdict = _guard(opts, study, trial, config, values, budget_mib, outcome)
        if verdict is not None and opts.guard.objective:
            values.append(verdict.val_acc)
        _set_constraints(opts, study, trial, values[1], budget_mib,
                         verdict.shortfall if verdict else None)
        return study.tell(trial, values)
    except GuardFailed as exc:
        outcome.failed += 1
        trial.set_user_attr("fail_reason", f"accuracy guard training failed: {exc}")
        frozen = study.tell(trial, state=TrialState.FAIL)
        if trial.user_attrs.get("baseline"):  # no budget, no reference: the guard cannot go on
            raise GuardFailed(f"the baseline (trial {trial.number}) could not be trained for "
                              f"the accuracy guard: {exc}; see "
                              f"{opts.studies_dir / study.study_name / 'guard'}") from exc
        return frozen
    except optuna.exceptions.UpdateFinishedTrialError:
        print(f"autotune: trial {trial.number} was failed as stale by another worker while "
              "it was measured here (heartbeats lost?); its result is dropped and its config "
              "was re-queued", file=sys.stderr, flush=True)
        return None


def _guard(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
           config: TrialConfig, values: list[float], budget_mib: float | None,
           outcome: SearchOutcome) -> Verdict | None:
    """Trains the trial for the guard's budget when it must: the baseline (for E
    epochs: it sets the budget), every trial with accuracy as an objective, and
    otherwise a trial that would join the feasible front. None: not trained."""
    guard = opts.guard
    if not guard.active:
        return None
    if trial.user_attrs.get("baseline"):
        verdict = guards.reference(opts, study, trial.number, config, guard)
    else:
        feasible = budget_mib is None or values[1] <= budget_mib
        candidate = Point(trial.number, values[0], values[1])
        if not guard.objective and (not feasible or any(
                p.feasible and p.dominates(candidate) for p in points(study))):
            return None
        ref = guards.budget(study, lambda: _baseline_pending(study))
        verdict = guards.check(opts, study, trial.number, config, guard, ref)
    for key, value in verdict.attrs().items():
        trial.set_user_attr(key, value)
    outcome.guarded += 1
    outcome.guard_violations += verdict.shortfall > 0
    outcome.guard_s += verdict.guard_s
    return verdict


def _baseline_pending(study: optuna.Study) -> bool:
    """Whether a baseline trial is running (in another worker) and may yet set the
    budget. A merely queued one is not waited for: this worker might be the one to
    run it."""
    return any(t.user_attrs.get("baseline") and t.state == TrialState.RUNNING
               for t in study.get_trials(deepcopy=False))


def _set_constraints(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
                     memory_mib: float, budget_mib: float | None,
                     shortfall: float | None) -> None:
    """Records memory over budget and accuracy below the guard as Optuna constraints
    (feasible when <= 0), so ``best_trials`` and the dashboard's feasible view respect
    them. Written here for every sampler, RandomSampler included, which takes no
    constraints_func; the order matches :func:`_constraints`."""
    values = []
    if budget_mib is not None:
        excess = memory_mib - budget_mib
        trial.set_user_attr("memory_excess_mib", excess)
        values.append(excess)
    if opts.guard.ratio is not None:
        values.append(shortfall if shortfall is not None else 0.0)
        if shortfall is not None:
            trial.set_user_attr("accuracy_shortfall", shortfall)
    if values:
        study._storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_KEY, values)


def summary_rows(study: optuna.Study, budget_mib: float | None) -> list[dict[str, Any]]:
    """The Pareto front, fastest first, with ratios against the baseline and marks."""
    pts = points(study)
    base_no = study.user_attrs.get("baseline_trial")
    base = next((p for p in pts if p.number == base_no), None)
    k, best = knee(pts), best_under(pts, budget_mib)
    rows = []
    for p in front(pts):
        marks = [m for m, hit in (("knee", k and p.number == k.number),
                                  ("best-under-budget", budget_mib is not None and best
                                   and p.number == best.number),
                                  ("baseline", p.number == base_no),
                                  ("eager: recompile limit hit", p.eager)) if hit]
        rows.append({"trial": p.number, "throughput": p.throughput, "memory_mib": p.memory_mib,
                     "speedup": p.throughput / base.throughput if base else None,
                     "memory_ratio": p.memory_mib / base.memory_mib if base else None,
                     "val_acc": p.accuracy,
                     "marks": marks, "config": p.config})
    return rows


def write_pareto(study: optuna.Study, path: Path, url: str, budget_mib: float | None) -> None:
    """Rewrites ``pareto.yaml`` atomically, so a crash never loses the current answer."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {"study": study.study_name, "storage": masked(url),
            "baseline_trial": study.user_attrs.get("baseline_trial"),
            "max_memory_mib": budget_mib, "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "front": summary_rows(study, budget_mib)}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(blob, sort_keys=False))
    os.replace(tmp, path)
