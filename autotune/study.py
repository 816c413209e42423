"""The Optuna study: ask a config, measure it in its own process, tell the result.

Two objectives (throughput up, peak memory down), an optional memory budget as an
Optuna constraint, the baseline as trial 0, repeats reused rather than measured,
and resumption: running the same search again continues the same study.
"""
from __future__ import annotations

import os
import re
import socket
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
from autotune.measure import MeasureSpec
from autotune.pareto import Point, best_under, front, knee
from autotune.result import TrialResult
from autotune.runner import TrialLimits, run_trial
from autotune.space import SearchSpace, params_for, suggest_config

DIRECTIONS = ["maximize", "minimize"]
METRIC_NAMES = ["throughput (seed nodes/s)", "peak memory (MiB)"]
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


def default_study_name(dataset: str, device: str) -> str:
    stem = Path(dataset).stem if dataset.endswith(".pt") else dataset
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{stem}-{device}-{socket.gethostname()}")


def default_storage(studies_dir: Path, study_name: str) -> str:
    return f"sqlite:///{(studies_dir / f'{study_name}.db').resolve()}"


def masked(url: str) -> str:
    """A storage URL with its password hidden."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """Opens (and, for SQLite, creates) an RDB storage; a bad URL or an unreachable
    server is a one-line ConfigError."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"--storage {url!r} is not a database URL; use e.g. "
                          "sqlite:///studies/x.db or postgresql://user@host/db") from exc
    if parsed.drivername.startswith("sqlite") and parsed.database:
        folder = Path(parsed.database).parent
        from autotune.env import writable_dir

        if not writable_dir(folder):
            raise ConfigError(f"cannot write the study database in '{folder}'; pass a "
                              "writable --studies-dir or another --storage")
        folder.mkdir(parents=True, exist_ok=True)
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except Exception as exc:  # the driver's own error: unreachable host, bad database
        raise ConfigError(f"cannot open storage {masked(url)}: "
                          f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from exc


def make_sampler(name: str, seed: int, constrained: bool) -> optuna.samplers.BaseSampler:
    """Samplers tuned for budgets of tens of trials (few random start-up trials)."""
    constraints = _constraints if constrained else None
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


def _constraints(trial: optuna.trial.FrozenTrial) -> list[float]:
    return [trial.user_attrs.get("memory_excess_mib", 0.0)]


def open_study(opts: SearchOptions, *, dataset_stats: dict, env: dict) -> optuna.Study:
    """Creates the study or loads it to resume; refuses one made for other objectives,
    another search space or another memory budget."""
    name = opts.study_name or default_study_name(opts.dataset.name, opts.device)
    url = opts.storage or default_storage(opts.studies_dir, name)
    storage = open_storage(url)
    try:
        study = optuna.create_study(study_name=name, storage=storage, directions=DIRECTIONS,
                                    load_if_exists=True)
    except ValueError as exc:
        raise ConfigError(f"study {name!r} in {masked(url)} cannot be reused: {exc}; "
                          "pass a new --study-name") from exc
    # A resumed search continues the random stream instead of replaying it, which
    # would re-propose configurations already measured.
    study.sampler = make_sampler(opts.sampler, opts.seed + len(study.trials),
                                 opts.max_memory_bytes is not None)
    if [d.name.lower() for d in study.directions] != DIRECTIONS:
        raise ConfigError(f"study {name!r} has directions "
                          f"{[d.name.lower() for d in study.directions]} (expected {DIRECTIONS}); "
                          "pass a new --study-name")
    attrs = study.user_attrs
    checks = {"space": opts.space.to_dict(), "max_memory_bytes": opts.max_memory_bytes,
              "dataset_ref": vars(opts.dataset), "device": opts.device}
    if "space" in attrs:
        for key, value in checks.items():
            if attrs.get(key) != value:
                raise ConfigError(f"study {name!r} was created with another {key} "
                                  f"({attrs.get(key)!r}, now {value!r}); pass a new "
                                  "--study-name or the original flags")
    else:
        with warnings.catch_warnings():  # stable in practice; experimental in name
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(METRIC_NAMES)
        for key, value in {**checks, "dataset": dataset_stats, "env": env}.items():
            study.set_user_attr(key, value)
    return study


def fail_interrupted(study: optuna.Study) -> list[int]:
    """Marks trials this host left RUNNING, from a search process that no longer
    exists, as failed ("interrupted")."""
    host, failed = socket.gethostname(), []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.user_attrs.get("worker", {})
        if worker.get("host") == host and not _alive(worker.get("pid"), worker.get("started")):
            study._storage.set_trial_user_attr(t._trial_id, "fail_reason", "interrupted")
            study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            failed.append(t.number)
    return failed


def _alive(pid: int | None, started: float | None) -> bool:
    import psutil

    try:
        return pid is not None and abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.NoSuchProcess:
        return False


def _point(t: optuna.trial.FrozenTrial) -> Point:
    return Point(number=t.number, throughput=t.values[0], memory_mib=t.values[1],
                 config=t.user_attrs.get("config", {}),
                 feasible=t.user_attrs.get("memory_excess_mib", 0.0) <= 0,
                 baseline=bool(t.user_attrs.get("baseline")))


def points(study: optuna.Study) -> list[Point]:
    return [_point(t) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]


def counted(study: optuna.Study) -> int:
    """Trials that count against --n-trials: finished ones, bar interrupted ones."""
    return sum(1 for t in study.get_trials(deepcopy=False)
               if t.state == TrialState.COMPLETE or
               (t.state == TrialState.FAIL and t.user_attrs.get("fail_reason") != "interrupted"))


@dataclass
class SearchOutcome:
    study: optuna.Study
    url: str
    measured: int = 0
    reused: int = 0
    failed: int = 0
    interrupted: list[int] = field(default_factory=list)


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
        if t.user_attrs.get("config_key") == key and t.user_attrs.get("fail_reason") != \
                "interrupted" and "reused_from" not in t.user_attrs:
            return t
    return None


Progress = Callable[[int, int, TrialConfig, optuna.trial.FrozenTrial, float, float], None]


def run_search(opts: SearchOptions, study: optuna.Study, url: str, baseline: TrialConfig, *,
               progress: Progress, on_trial_done: Callable[[optuna.Study], None]) -> SearchOutcome:
    """Asks, measures and tells until the study holds ``n_trials`` counted trials
    or ``timeout_s`` has passed."""
    outcome = SearchOutcome(study, url, interrupted=fail_interrupted(study))
    if _needs_baseline(study):
        study.enqueue_trial(params_for(baseline, opts.space), user_attrs={"baseline": True})
    start = time.monotonic()
    done_at_start = counted(study)
    worker = _this_worker()
    budget_mib = opts.max_memory_bytes / MIB if opts.max_memory_bytes else None
    while counted(study) < opts.n_trials:
        if opts.timeout_s is not None and time.monotonic() - start > opts.timeout_s:
            break
        trial = study.ask()
        trial.set_user_attr("worker", worker)
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
        on_trial_done(study)
        elapsed = time.monotonic() - start
        n_done = counted(study) - done_at_start
        remaining = opts.n_trials - counted(study)
        eta = elapsed / n_done * remaining if n_done else 0.0
        progress(counted(study), opts.n_trials, config, frozen, elapsed, eta)
    return outcome


def _needs_baseline(study: optuna.Study) -> bool:
    """True until a baseline trial is queued, running, or finished other than by an
    interruption."""
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("baseline") and (
                t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)
                or t.user_attrs.get("fail_reason") != "interrupted"):
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
                      outcome: SearchOutcome) -> optuna.trial.FrozenTrial:
    previous = _previous(study, config.key())
    if previous is not None:
        keep = {k: v for k, v in previous.user_attrs.items()
                if k not in ("worker", "baseline", "config_key")}
        for key, value in {**keep, "reused_from": previous.number}.items():
            trial.set_user_attr(key, value)
        outcome.reused += 1
        if previous.state == TrialState.COMPLETE:
            _set_constraint(study, trial, previous.values[1], budget_mib)
            return study.tell(trial, previous.values)
        outcome.failed += 1
        return study.tell(trial, state=TrialState.FAIL)
    trial_dir = opts.studies_dir / study.study_name / "trials" / str(trial.number)
    result = run_trial(config, dataset=opts.dataset, trial_dir=trial_dir, measure=opts.measure,
                       limits=opts.limits, inductor_cache=opts.studies_dir / ".cache" / "inductor")
    outcome.measured += 1
    for key, value in {**_attrs(result), "trial_dir": str(trial_dir)}.items():
        trial.set_user_attr(key, value)
    if not result.ok:
        outcome.failed += 1
        return study.tell(trial, state=TrialState.FAIL)
    values = objectives(result, opts.device)
    _set_constraint(study, trial, values[1], budget_mib)
    return study.tell(trial, list(values))


def _set_constraint(study: optuna.Study, trial: optuna.Trial, memory_mib: float,
                    budget_mib: float | None) -> None:
    """Records memory over budget as an Optuna constraint (feasible when <= 0), so
    ``best_trials`` and the dashboard's feasible view respect the budget. Written
    here for every sampler, RandomSampler included, which takes no constraints_func."""
    if budget_mib is None:
        return
    excess = memory_mib - budget_mib
    trial.set_user_attr("memory_excess_mib", excess)
    study._storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_KEY, [excess])


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
                                  ("baseline", p.number == base_no)) if hit]
        rows.append({"trial": p.number, "throughput": p.throughput, "memory_mib": p.memory_mib,
                     "speedup": p.throughput / base.throughput if base else None,
                     "memory_ratio": p.memory_mib / base.memory_mib if base else None,
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
