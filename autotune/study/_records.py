"""``TrialRecord`` and ``StudyRecord``: a trial and a study as the storage keeps
them, read back typed.

Every attribute key a trial or a study carries is a constant here. A trial's are
written by :meth:`TrialRecord.to_attrs` and read by :meth:`TrialRecord.from_frozen`;
a study's are written when it is created (:mod:`autotune.study._identity`) or as the
search learns them (the baseline's number, the prior rows queued, the guard's
reference) and read by :meth:`StudyRecord.from_study`. The readers (``show``,
export, progress lines, the report, the dashboard note, ``studies``) see only the
records. Imports neither torch nor PyG.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from autotune.config import TrialConfig, renamed_knobs, short
from autotune.specs import CONFIRM_PRECISION
from autotune.study._pareto import Point
from autotune.taskinfo import TaskInfo, task_info
from autotune.trial import (
    MIB,
    PARTS,
    CompileStats,
    MemoryStats,
    Observed,
    TrialResult,
    WindowStats,
    ratio_half_width,
)

DIRECTIONS = ["maximize", "minimize"]  # throughput, peak memory (+ accuracy: maximize)

# Trial attribute keys (Optuna user attrs).
STATUS, CONFIG, CONFIG_KEY = "status", "config", "config_key"
SUMMARY, MEMORY, COMPILE, OBSERVED = "summary", "memory", "compile", "observed"
PHASES, WARNINGS, STEP_TIMES = "phases_s", "warnings", "step_times_s"
FAIL_REASON, STDERR_TAIL, TRIAL_DIR = "fail_reason", "stderr_tail", "trial_dir"
MEASURED_AT, LOCK_WAIT, WRITE_S, RESERVE_S = "measured_at", "lock_wait_s", "attrs_write_s", \
    "reserve_s"
WORKER, ROLE, REUSED_FROM, RETRY_OF = "worker", "role", "reused_from", "retry_of"
VALIDATION, GUARD_RATIO, GUARD_SHORTFALL = "validation", "guard_ratio", "guard_shortfall"
GUARD_S, GUARD_TRAIN_S, GUARD_STEPS = "guard_s", "guard_train_s", "guard_steps"
MEMORY_EXCESS = "memory_excess_mib"
WINDOW, PRIOR, DEFERRED, TWIN = "window", "prior", "deferred", "eager_twin"
OUTSIDE = "outside_space"
TUNING, TUNING_WINDOW = "tuning", "tuning_window"  # a tuned training run's window
PAIRED, CONFIRM, EXPLORED = "paired", "confirm", "explored"
# Study attribute keys.
STUDY_BASELINE, STUDY_DATASET, STUDY_DATASET_REF = "baseline_trial", "dataset", "dataset_ref"
STUDY_ENV, STUDY_SPACE, STUDY_DEVICE = "env", "space", "device"
STUDY_MAX_MEMORY, STUDY_GUARD_OPTS, STUDY_GUARD = "max_memory_bytes", "accuracy_guard", "guard"
STUDY_PRIORS, STUDY_TUNED_RUN = "priors", "tuned_run"
STUDY_CONTROL_CLAIM, STUDY_CONFIRMATIONS, STUDY_STOPPED = "control_claimed_at", \
    "confirmations", "stopped"

# Fail reasons of trials that never finished: they count against no budget.
NOT_MEASURED = ("interrupted", "stale", "orphan", "budget")
# What a reused trial does not copy from the trial it repeats: why it ran, and how it
# came about (a repeat of a retry is no retry itself)
NOT_REUSED = (WORKER, ROLE, CONFIG_KEY, PRIOR, EXPLORED, OUTSIDE, RETRY_OF, TWIN)
# What a trial measures for, stored in ROLE: the baseline (the reference of every
# speed-up), a prior-table row, a config the Optuna sampler proposed, a control (the
# baseline's config again, a later reference), a confirmation round's measurement, or
# a window of a training run that tuned itself (TUNING: such a study holds no other).
# How it came about is told apart from why: a retry (RETRY_OF), a repeat of a config
# measured already (REUSED_FROM) and the eager twin of a compiled config (TWIN) keep
# the role of what they stand in for: a retried baseline is still the baseline.
ROLES = ("baseline", "prior", "searched", "control", "confirmation", TUNING)
# Studies made before the role was stored marked it with these keys.
LEGACY_ROLE_KEYS = ("baseline", "control")
# Keys of studies made before the guard's metric was named for what it holds.
LEGACY_GUARD_KEYS = {"accuracy_ratio": GUARD_RATIO, "accuracy_shortfall": GUARD_SHORTFALL}


def role_of(attrs: dict[str, Any]) -> str:
    """A trial's role from its attributes: stored, or worked out from the markers of
    a study made before it was (:data:`LEGACY_ROLE_KEYS`, a confirmation round, a
    prior row)."""
    if attrs.get(ROLE):
        return attrs[ROLE]
    if attrs.get("baseline"):
        return "baseline"
    if attrs.get("control"):
        return "control"
    return "confirmation" if attrs.get(CONFIRM) else "prior" if attrs.get(PRIOR) else "searched"


def _renamed(attrs: dict[str, Any]) -> dict[str, Any]:
    """A trial's attributes with an older study's keys in today's names: its
    ``val_acc`` (which held ROC-AUC for a link study) as ``validation``, named by the
    task of its config; its role (:func:`role_of`); its config's knobs and its observed
    sampling backend as :data:`autotune.config.RENAMED_KNOBS` names them now."""
    out = {LEGACY_GUARD_KEYS.get(k, k): v for k, v in attrs.items()
           if k != "val_acc" and k not in LEGACY_ROLE_KEYS}
    out[ROLE] = role_of(attrs)
    if attrs.get("val_acc") is not None:
        out[VALIDATION] = {task_info(attrs.get(CONFIG)).metric_key: attrs["val_acc"]}
    if isinstance(out.get(CONFIG), dict):
        out[CONFIG] = renamed_knobs(out[CONFIG])
    if isinstance(out.get(OBSERVED), dict) and "sampler_backend" in out[OBSERVED]:
        observed = dict(out[OBSERVED])
        observed["sampling_backend"] = observed.pop("sampler_backend")
        out[OBSERVED] = observed
    return out


def _renamed_space(space: dict[str, Any]) -> dict[str, Any]:
    """A stored space (:meth:`SearchSpace.to_dict`) with its knobs named as today."""
    if not space:
        return space
    return {**space, "knobs": renamed_knobs(space.get("knobs") or {}),
            "fixed": renamed_knobs(space.get("fixed") or {})}


@dataclass(frozen=True, repr=False)
class TrialRecord:
    """One trial of a study: its state, objectives, config and measured figures."""

    number: int
    state: str = "running"  # complete, fail, running, waiting, pruned
    values: tuple[float, ...] | None = None
    config: TrialConfig | None = None
    status: str | None = None
    role: str = "searched"  # one of ROLES
    reused_from: int | None = None
    retry_of: int | None = None
    fail_reason: str | None = None
    stderr_tail: str | None = None
    summary: dict[str, float] = field(default_factory=dict)
    memory: MemoryStats = field(default_factory=MemoryStats)
    compile: CompileStats = field(default_factory=CompileStats)
    observed: Observed = field(default_factory=Observed)
    window: WindowStats = field(default_factory=WindowStats)
    phases_s: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    step_times_s: tuple[float, ...] = ()
    trial_dir: str | None = None
    measured_at: tuple[float, float] | None = None
    lock_wait_s: float | None = None
    worker: dict[str, Any] = field(default_factory=dict)
    # The task's metric on its validation split, named for what it is:
    # {"accuracy": 0.81} for node and graph tasks, {"roc_auc": 0.93} for link prediction
    validation: dict[str, float] | None = None
    guard_ratio: float | None = None  # its validation metric over the baseline's
    guard_shortfall: float | None = None  # below the guard's ratio (> 0: violated)
    guard_s: float | None = None
    guard_train_s: float | None = None
    guard_steps: int | None = None
    memory_excess_mib: float | None = None
    prior: str | None = None  # the prior-table row that enqueued it
    deferred: str | None = None  # why it was put back in the queue, unmeasured
    paired: dict[str, Any] | None = None  # {control, speedup, interval}: see Paired
    confirm: dict[str, int] | None = None  # {run, round, of}: a confirmation measurement
    explored: bool = False  # drawn at random: the sampler had repeated itself
    # The baseline's knob values that lie outside the space written: it is then a
    # reference only, never on the front nor exported.
    outside_space: dict[str, Any] | None = None
    config_key: str | None = None  # TrialConfig.key() of the config it measured
    eager_twin: int | None = None  # the compiled trial whose eager twin it is
    reserve_s: float | None = None  # taking the study lock and asking Optuna
    attrs_write_s: float | None = None  # storing its attributes

    @classmethod
    def from_frozen(cls, trial) -> TrialRecord:
        """From an ``optuna.trial.FrozenTrial``."""
        attrs = _renamed(trial.user_attrs)
        kwargs: dict[str, Any] = {f.name: attrs[f.name] for f in fields(cls)
                                  if f.name in attrs and f.name not in PARTS}
        for key, part in PARTS.items():
            kwargs[key] = part.from_dict(attrs.get(key))
        for key in (WARNINGS, STEP_TIMES, MEASURED_AT):
            if kwargs.get(key) is not None:
                kwargs[key] = tuple(kwargs[key])
        if kwargs.get(CONFIG) is not None:
            kwargs[CONFIG] = TrialConfig.from_dict(kwargs[CONFIG],
                                                   source=f"trial {trial.number}'s config")
        return cls(number=trial.number, state=trial.state.name.lower(),
                   values=tuple(trial.values) if trial.values else None, **kwargs)

    @classmethod
    def from_result(cls, number: int, result: TrialResult, **where: Any) -> TrialRecord:
        """What a measurement adds to a trial; ``where``: trial_dir, measured_at,
        lock_wait_s."""
        measured: dict[str, Any] = {}
        if result.ok:
            measured = dict(summary=result.summary(), memory=result.memory,
                            compile=result.compile, observed=result.observed,
                            window=result.window,
                            phases_s=result.phases_s, warnings=result.warnings,
                            step_times_s=result.step_times_s)
        else:
            measured = dict(fail_reason=result.reason, stderr_tail=result.stderr_tail or "")
        return cls(number=number, status=result.status, config=result.config,
                   **measured, **where)

    def to_attrs(self) -> dict[str, Any]:
        """The attributes to store: every field that differs from an empty record's
        (number, state and values live in Optuna's own columns; the role is stored
        as the trial is reserved, :func:`store_role`)."""
        empty = TrialRecord(self.number)
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("number", "state", "values") or value == getattr(empty, f.name):
                continue
            if f.name in PARTS or isinstance(value, TrialConfig):
                value = value.to_dict()
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    def __repr__(self) -> str:  # the fields hold step times and stderr: thousands of chars

        figures = f", {self.throughput:,.0f}/s, {self.memory_mib:,.0f} MiB" if self.values \
            else ""
        config = f", {short(self.config)!r}" if self.config else ""
        return f"<TrialRecord #{self.number} {self.state}{figures}{config}>"

    @property
    def throughput(self) -> float | None:
        return self.values[0] if self.values else None

    @property
    def memory_mib(self) -> float | None:
        return self.values[1] if self.values else None

    @property
    def val_metric(self) -> float | None:
        """The task's validation metric (accuracy or ROC-AUC): the third objective,
        else what the guard measured."""
        if self.values and len(self.values) > 2:
            return self.values[2]
        return next(iter(self.validation.values())) if self.validation else None

    @property
    def screened(self) -> bool:
        """Racing measured it to the screening precision only: on the front only where
        the confirmation measured it (:meth:`measured_point`)."""
        return self.window.screened

    @property
    def measured_point(self) -> bool:
        """Completed, a search trial in the space, and not a repeat of an earlier trial
        (whose measurement it shares): screened out or not. A screened one's single
        window may have read low (windows minutes apart differ by more than each
        one's interval), so one whose figure the search could not tell from its
        fastest is confirmed too (:func:`autotune.study._confirm.contenders`), and
        its confirmed figure puts it on the front."""
        return self.complete and self.reused_from is None and self.search_point and \
            self.in_space

    @property
    def on_front_candidate(self) -> bool:
        """A :meth:`measured_point` measured to full precision (not screened out): a
        point the front may hold."""
        return self.measured_point and not self.screened

    @property
    def in_space(self) -> bool:
        """Its config lies inside the space the user wrote (only the baseline may not)."""
        return not self.outside_space

    @property
    def imprecise(self) -> bool:
        """Its window ran out of time before the target precision."""
        return self.window.imprecise

    @property
    def disturbed(self) -> bool:
        """Other processes took more of its cores than it allowed, in each of its
        windows (:attr:`WindowStats.disturbed`)."""
        return self.window.disturbed

    @property
    def precision(self) -> float | None:
        """The relative 95% half-width of its throughput."""
        return self.window.precision

    def speedup(self, base: TrialRecord | None) -> tuple[float | None, float | None]:
        """Its throughput over ``base``'s, and that ratio's relative 95% half-width."""
        if base is None or not self.throughput or not base.throughput:
            return None, None
        return self.throughput / base.throughput, ratio_half_width(self.precision,
                                                                   base.precision)

    def paired_speedup(self, base: TrialRecord | None) -> tuple[float | None, float | None]:
        """Its speed-up over the control measured nearest before it (stored when it
        was measured), else over ``base``; 1 for the baseline itself."""
        if self.baseline:
            return (1.0, 0.0) if self.complete else (None, None)
        if self.paired:
            return self.paired["speedup"], self.paired["interval"]
        return self.speedup(base)

    @property
    def baseline(self) -> bool:
        """It measures the baseline: the reference of the study's speed-ups."""
        return self.role == "baseline"

    @property
    def control(self) -> bool:
        """The baseline's config measured again: a later reference."""
        return self.role == "control"

    @property
    def reference(self) -> bool:
        """A measurement of the baseline's config that later ratios are paired with:
        the baseline trial and every control."""
        return self.baseline or self.control

    @property
    def search_point(self) -> bool:
        """One of the search's own trials: not a control, not a confirmation."""
        return self.role in ("baseline", "prior", "searched")

    @property
    def eager(self) -> bool:
        """Compiled, but torch._dynamo hit its recompile limit and ran eagerly."""
        return self.compile.fell_back_to_eager

    @property
    def below_guard(self) -> bool:
        return (self.guard_shortfall or 0.0) > 0

    @property
    def over_budget(self) -> bool:
        """Its peak memory is over the search's ``--max-memory``."""
        return (self.memory_excess_mib or 0.0) > 0

    @property
    def feasible(self) -> bool:
        return not self.over_budget and not self.below_guard

    @property
    def device_mib(self) -> float | None:
        """What its device had for it (GPU memory within its cap, or RAM), if stored."""
        total = self.memory.device_total_bytes
        return total / MIB if total else None

    def fits(self, budget_mib: float | None = None) -> bool:
        """Feasible, and its memory within ``budget_mib`` (``--max-memory``), else within
        what its device has: memory is counted against that, not against the spread
        between trials (the screen's and the default pick's one rule)."""
        limit = budget_mib if budget_mib is not None else self.device_mib
        return self.feasible and (limit is None or (self.memory_mib or 0.0) <= limit)

    @property
    def not_measured(self) -> bool:
        """Failed because its worker died or was interrupted, not by its config."""
        return self.state == "fail" and (self.fail_reason or "").split(":")[0] in NOT_MEASURED

    @property
    def counts(self) -> bool:
        """Counts against ``n_trials``: finished, bar the never-measured failures, the
        repeats of a measured config, the controls and the confirmation's measurements."""
        return (self.complete or (self.state == "fail" and not self.not_measured)) and \
            self.reused_from is None and self.search_point

    def point(self) -> Point:
        assert self.values, f"trial {self.number} has no objectives"
        return Point(number=self.number, throughput=self.values[0],
                     memory_mib=self.values[1],
                     config=self.config.to_dict() if self.config else {},
                     feasible=self.feasible, val_metric=self.val_metric,
                     metric_objective=len(self.values) > 2, baseline=self.baseline,
                     eager=self.eager)


TRIAL_FIELDS = frozenset(f.name for f in fields(TrialRecord)) - {"number", "state", "values"}
_EMPTY_FIELDS = {name: getattr(TrialRecord(0), name) for name in TRIAL_FIELDS}


def stored(**fields: Any) -> dict[str, Any]:
    """The attributes that store these :class:`TrialRecord` fields (``role="baseline"``,
    ``config_key=...``): what ``enqueue_trial`` and ``create_trial`` take, as
    :meth:`TrialRecord.to_attrs` writes them (a field at its default is left out)."""
    unknown = set(fields) - TRIAL_FIELDS
    if unknown:
        raise KeyError(f"not a TrialRecord field: {', '.join(sorted(unknown))}")
    if fields.get(ROLE, ROLES[0]) not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)} (got {fields[ROLE]!r})")
    out = {}
    for name, value in fields.items():
        if value == _EMPTY_FIELDS[name]:
            continue
        if name in PARTS or isinstance(value, TrialConfig):
            value = value.to_dict()
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def store(trial, **fields: Any) -> None:
    """Writes :class:`TrialRecord` fields onto a running ``optuna.Trial``."""
    for key, value in stored(**fields).items():
        trial.set_user_attr(key, value)


def store_verdict(trial, verdict, config) -> None:
    """Writes the guard's verdict (:class:`autotune.study._guard.Verdict`) onto a running
    trial, its metric named by the task of ``config``."""
    store(trial, validation={task_info(config).metric_key: verdict.val_metric},
          guard_ratio=verdict.metric_ratio, guard_shortfall=verdict.shortfall,
          guard_s=verdict.guard_s, guard_train_s=verdict.train_s, guard_steps=verdict.steps)


def store_in(storage, trial_id: int, **fields: Any) -> None:
    """Writes :class:`TrialRecord` fields onto any worker's trial, through its storage."""
    for key, value in stored(**fields).items():
        storage.set_trial_user_attr(trial_id, key, value)


def write(trial, record: TrialRecord) -> None:
    """Writes a whole record (:meth:`TrialRecord.to_attrs`) onto a running trial."""
    for key, value in record.to_attrs().items():
        trial.set_user_attr(key, value)


def enqueue(study, params: dict[str, Any], **fields: Any) -> None:
    """Queues ``params`` (Optuna's) with these :class:`TrialRecord` fields."""
    study.enqueue_trial(renamed_knobs(params), user_attrs=stored(**fields),
                        skip_if_exists=False)


def copy_measurement(trial, previous) -> None:
    """Gives a running trial what ``previous`` (same config) measured, as a repeat of
    it: everything but its role (:data:`NOT_REUSED`)."""
    for key, value in previous.user_attrs.items():
        if key not in NOT_REUSED:
            trial.set_user_attr(key, value)
    store(trial, reused_from=previous.number)


def worker_of(trial) -> dict[str, Any]:
    """Who runs (or ran) a trial: host, pid and the pid's start time; {} for none."""
    return trial.user_attrs.get(WORKER) or {}


def is_retry(trial) -> bool:
    return RETRY_OF in trial.user_attrs


def add_finished(study, record: TrialRecord, *, of, values: list[float] | None = None,
                 constraints: dict[str, float] | None = None, **fields: Any) -> TrialRecord:
    """Adds a finished trial holding ``record`` (and these fields) with ``of``'s params
    (the trial whose config it measured again): complete with ``values``, else
    failed. Returns it as stored."""
    import optuna
    from optuna.trial import TrialState

    attrs = {**record.to_attrs(), **stored(**fields)}
    study.add_trial(optuna.trial.create_trial(
        state=TrialState.COMPLETE if values is not None else TrialState.FAIL, values=values,
        params=of.params, distributions=of.distributions, user_attrs=attrs,
        constraints=constraints or None))
    return next(TrialRecord.from_frozen(t) for t in reversed(study.get_trials(deepcopy=False))
                if t.user_attrs.get(TRIAL_DIR) == record.trial_dir)


def add_window(study, config: dict[str, Any], window: dict[str, Any], *,
               rate: float | None, fail_reason: str | None, params: dict[str, Any],
               distributions: dict[str, Any]) -> None:
    """Adds one window of a training run that tunes itself (``autotune train --tune``)
    as a finished trial: failed with ``fail_reason``, else complete with its ``rate``
    (seeds per second), else pruned (a window that timed nothing: runs recorded before
    a window's first step was timed kept an epoch's last step alone so);
    its role is ``tuning``."""
    import optuna
    from optuna.trial import TrialState

    attrs = {ROLE: TUNING, CONFIG: config, TUNING_WINDOW: window,
             **({FAIL_REASON: fail_reason} if fail_reason else {})}
    state = TrialState.FAIL if fail_reason else TrialState.COMPLETE if rate else \
        TrialState.PRUNED
    study.add_trial(optuna.trial.create_trial(
        state=state, value=rate if state == TrialState.COMPLETE else None, params=params,
        distributions=distributions, user_attrs=attrs))


def windows(study) -> list[dict[str, Any]]:
    """A tuned run's windows as :func:`add_window` stored them, in order: trial,
    state, rate, config, fail_reason and the window's own fields."""
    return [{"trial": t.number, "state": t.state.name.lower(), "rate": t.value,
             "config": t.user_attrs.get(CONFIG) or {}, **t.user_attrs.get(TUNING_WINDOW, {}),
             "fail_reason": t.user_attrs.get(FAIL_REASON)}
            for t in study.get_trials(deepcopy=False)]


def store_role(trial) -> str:
    """Stores a reserved trial's role: the one it was queued with, else ``searched``
    (a config the Optuna sampler proposed). Returns it."""
    role = role_of(trial.user_attrs)
    trial.set_user_attr(ROLE, role)
    return role


def is_baseline(trial) -> bool:
    """Whether a trial, running, queued or finished, measures the baseline."""
    return role_of(trial.user_attrs) == "baseline"


def config_key(trial) -> str | None:
    """The key of the config a trial measured (:meth:`TrialConfig.key`)."""
    return trial.user_attrs.get(CONFIG_KEY)


def records(study, states: tuple | None = None) -> list[TrialRecord]:
    """Every trial of ``study`` (or those in ``states``), typed."""
    return [TrialRecord.from_frozen(t) for t in study.get_trials(deepcopy=False, states=states)]


def points(study) -> list[Point]:
    """The completed search trials with their search figures: screened-out ones,
    controls, the confirmation's measurements and a baseline outside the space left
    out."""
    from optuna.trial import TrialState

    return [r.point() for r in records(study, (TrialState.COMPLETE,))
            if not r.screened and r.search_point and r.in_space]


def fastest_fitting(trials: list[TrialRecord], budget_mib: float | None = None
                    ) -> TrialRecord | None:
    """The fastest completed search trial measured to full precision that
    :meth:`TrialRecord.fits`, or None."""
    fitting = [t for t in trials if t.on_front_candidate and t.values and t.fits(budget_mib)]
    return max(fitting, key=lambda t: t.throughput, default=None)


@dataclass(frozen=True)
class StudyRecord:
    """A study's own attributes, typed: what it was created with (its identity:
    space, dataset, device, memory budget, guard options) and what its search has
    written since (the baseline's trial number, the prior rows queued, the guard's
    reference)."""

    name: str
    baseline: int | None = None
    dataset_ref: dict[str, Any] = field(default_factory=dict)  # DatasetRef.record()
    dataset: dict[str, Any] = field(default_factory=dict)  # Dataset.stats()
    env: dict[str, Any] = field(default_factory=dict)
    space: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    max_memory_bytes: int | None = None
    guard_options: dict[str, Any] | None = None  # ratio, epochs
    guard: dict[str, Any] | None = None  # budget_s, baseline_validation, baseline_trial, ...
    priors: tuple[str, ...] = ()
    stopped: str | None = None  # why the last search stopped before its budget
    control_claimed_at: float = 0.0  # when a worker last claimed a control
    # {run, started, candidates, rounds, asked (--confirm-rounds), within, cut}
    confirmations: tuple[dict[str, Any], ...] = ()
    tuned_run: dict[str, Any] | None = None  # a training run that tuned itself: its TuneLog

    @property
    def kind(self) -> str:
        """What the study records: ``"tuned run"`` (a training run that tuned itself)
        or ``"search"``; the one place that tells them apart."""
        return "search" if self.tuned_run is None else "tuned run"

    @classmethod
    def from_study(cls, study) -> StudyRecord:
        """From an ``optuna.Study`` (or anything with ``study_name`` and ``user_attrs``)."""
        a = study.user_attrs
        return cls(name=study.study_name, baseline=a.get(STUDY_BASELINE),
                   dataset_ref=a.get(STUDY_DATASET_REF) or {},
                   dataset=a.get(STUDY_DATASET) or {}, env=a.get(STUDY_ENV) or {},
                   space=_renamed_space(a.get(STUDY_SPACE) or {}),
                   device=a.get(STUDY_DEVICE),
                   max_memory_bytes=a.get(STUDY_MAX_MEMORY),
                   guard_options=a.get(STUDY_GUARD_OPTS), guard=a.get(STUDY_GUARD),
                   priors=tuple(a.get(STUDY_PRIORS) or ()), stopped=a.get(STUDY_STOPPED),
                   control_claimed_at=a.get(STUDY_CONTROL_CLAIM, 0.0),
                   confirmations=tuple(a.get(STUDY_CONFIRMATIONS) or ()),
                   tuned_run=a.get(STUDY_TUNED_RUN))

    @property
    def task(self) -> TaskInfo:
        """The study's task (node for a study from before tasks existed)."""
        return task_info(self.dataset_ref)

    @property
    def budget_mib(self) -> float | None:
        return self.max_memory_bytes / MIB if self.max_memory_bytes else None

    @property
    def confirm_within(self) -> float:
        """The precision its latest confirmation asked of a speed-up
        (``--confirm-precision``)."""
        return next((run["within"] for run in reversed(self.confirmations)
                     if run.get("within")), CONFIRM_PRECISION)

    @property
    def num_train(self) -> int | None:
        """The training seeds of its dataset (nodes, or edges for link)."""
        return self.dataset.get("num_train")


STUDY_KEYS = {"baseline": STUDY_BASELINE, "dataset_ref": STUDY_DATASET_REF,
              "dataset": STUDY_DATASET, "env": STUDY_ENV, "space": STUDY_SPACE,
              "device": STUDY_DEVICE, "max_memory_bytes": STUDY_MAX_MEMORY,
              "guard_options": STUDY_GUARD_OPTS, "guard": STUDY_GUARD, "priors": STUDY_PRIORS,
              "stopped": STUDY_STOPPED, "control_claimed_at": STUDY_CONTROL_CLAIM,
              "confirmations": STUDY_CONFIRMATIONS, "tuned_run": STUDY_TUNED_RUN}


def store_study(study, **fields: Any) -> None:
    """Writes :class:`StudyRecord` fields onto ``study`` (``baseline=3``)."""
    for name, value in fields.items():
        study.set_user_attr(STUDY_KEYS[name], list(value) if isinstance(value, tuple)
                            else value)
