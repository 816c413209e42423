"""The search loop: reserve a trial of the study's shared budget, measure its config
in its own process (or reuse an earlier measurement of the same config), tell Optuna;
then confirm the front.

Any number of workers may run it on one study. Two objectives (throughput up, peak
memory down), an optional memory budget and accuracy guard as Optuna constraints,
the baseline as the first trial, controls (the baseline again) as the search goes,
repeats reused rather than measured and counted against nothing (a sampler that
repeats itself explores at random, then stops), the confirmation last, and
resumption: running the same search again continues the same study.
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import optuna
from optuna.trial import FixedTrial, TrialState

from autotune.config import TrialConfig, renamed_knobs
from autotune.env import clock as clock_text, plural
from autotune.errors import GuardError
from autotune.logging import get_logger
from autotune.specs import MeasureSpec, Screen
from autotune.storage import Heartbeat, study_lock
from autotune.study import _confirm as confirmation, _guard as guards, _optuna, \
    _records as rec, _recovery as recovery
from autotune.study._constraints import set_constraints
from autotune.study._guard import Verdict
from autotune.study._options import BUDGET_SHARE, SearchOptions
from autotune.study._optuna_samplers import optuna_sampler
from autotune.study._pareto import Point
from autotune.study._priors import machine_facts, prior_configs
from autotune.study._records import StudyRecord, TrialRecord
from autotune.study._space import (
    eager_params,
    eager_twin,
    params_for,
    random_params,
    suggest_config,
)
from autotune.trial import ForkServer

log = get_logger(__name__)

POLL_S = 2.0  # how often a worker whose budget is taken by running trials looks again
EXPLORE_AFTER = 3  # repeats in a row, after which a config not yet measured is drawn
EXPLORE_DRAWS = 500  # random draws that find no unmeasured config: the space is exhausted
STOP_IDLE = 30  # proposals in a row that measured nothing new (repeats, deferrals): stop


@dataclass
class SearchOutcome:
    """What one worker's run of the loop did."""

    measured: int = 0
    reused: int = 0
    failed: int = 0
    interrupted: list[int] = field(default_factory=list)
    stale: list[int] = field(default_factory=list)
    orphans: list[int] = field(default_factory=list)
    guarded: int = 0
    guard_violations: int = 0
    guard_s: float = 0.0
    elapsed_s: float = 0.0
    controls: int = 0
    explored: int = 0  # configs drawn at random after the sampler repeated itself
    stopped: str = ""  # why the search stopped before its budget, if it did
    confirmed: int = 0  # the confirmation's measurements
    confirm_cut: str = ""  # why the confirmation stopped before its last round


# n done, n budget, the finished trial, seconds so far, ETA seconds
Progress = Callable[[int, int, TrialRecord, float, float], None]


def run_search(opts: SearchOptions, study: optuna.Study, baseline: TrialConfig, *,
               progress: Progress | None = None,
               on_trial_done: Callable[[optuna.Study], None] | None = None,
               on_trial_start: Callable[[int, TrialConfig], None] | None = None,
               on_note: Callable[[str], None] | None = None) -> SearchOutcome:
    """Reserves, measures and tells until the study holds ``max_trials`` counted trials,
    ``timeout`` has passed (no new trial starts) or ``budget`` has (the running
    trial is failed when it would run past it; the confirmation's time is kept
    aside), measuring a control whenever one is due; then confirms the front. Trials
    fork from one :class:`ForkServer` for the whole run. ``on_note``: a line to show
    (the confirmation starting, an early stop)."""
    outcome, clock = SearchOutcome(), _Clock(opts, _counted(study))
    knob = opts.space.knobs.get("compile_mode")
    modes = {baseline.compile_mode, *(knob.choices if knob is not None else ())}

    def finished(record: TrialRecord) -> None:  # stored: counted, published, shown
        clock.measured(record)
        if on_trial_done is not None:
            on_trial_done(study)
        if progress is not None:
            n_total = _counted(study)
            progress(n_total, opts.max_trials, record, clock.elapsed(),
                     clock.eta(n_total, study))

    def note(text: str | None) -> None:
        if text and on_note is not None:
            on_note(text)

    note(_short_budget(opts))
    with ForkServer(folder=opts.study_dir, compiles=modes != {"none"}) as server:
        _trials(opts, study, baseline, server, clock, outcome, finished, note,
                on_trial_start)
        _stopped(study, outcome, clock, note)
        _confirm(opts, study, server, clock, outcome, finished, note)
    outcome.elapsed_s = clock.elapsed()
    return outcome


def _trials(opts: SearchOptions, study: optuna.Study, baseline: TrialConfig,
            server: ForkServer, clock: _Clock, outcome: SearchOutcome,
            finished: Callable[[TrialRecord], None], note: Callable[[str | None], None],
            on_trial_start: Callable[[int, TrialConfig], None] | None) -> None:
    """The search proper: a control whenever one is due, else the next trial reserved,
    measured and told, while the clock lets one start; stops early once
    :data:`STOP_IDLE` proposals in a row measured nothing new."""
    worker, repeats, idle = recovery.this_worker(), 0, 0
    while clock.may_start(study):
        if _control(opts, study, baseline, server, clock, outcome, finished):
            continue
        asked_at = time.monotonic()
        trial = _reserve(opts, study, baseline, worker, outcome,
                         explore=repeats >= EXPLORE_AFTER)
        if trial is None:
            break
        if trial is _WAIT:
            time.sleep(POLL_S)
            continue
        rec.store(trial, reserve_s=time.monotonic() - asked_at)  # lock + ask
        config = _config_for(opts, study, trial, baseline)
        if config is None:  # a compile variant, queued again after its eager twin
            idle += 1
            continue
        if on_trial_start is not None:
            on_trial_start(trial.number, config)
        frozen = _measure_or_fail(opts, study, trial, config, outcome, server, clock)
        if frozen is None:
            continue
        record = TrialRecord.from_frozen(frozen)
        finished(record)
        repeats, idle = (repeats + 1, idle + 1) if record.reused_from is not None else (0, 0)
        if record.baseline and record.complete:
            note(clock.budget_note(study))
        if idle >= STOP_IDLE:
            outcome.stopped = (f"stopped early: {idle} proposals in a row measured "
                               "nothing new (repeats of measured configs, deferred "
                               "compile variants)")
            break


def _config_for(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
                baseline: TrialConfig) -> TrialConfig | None:
    """The config a reserved trial measures: the baseline's as it is (it samples
    nothing), else the one its params suggest; None where it is a compile variant
    put back until its eager twin is measured."""
    if rec.is_baseline(trial):
        rec.store_study(study, baseline=trial.number)
        config = baseline
    else:
        config = suggest_config(trial, opts.space, device=opts.device, seed=opts.seed)
        if defer_compiled(opts, study, trial, config):
            return None
    rec.store(trial, config_key=config.key(), config=config.to_dict())
    return config


def _stopped(study: optuna.Study, outcome: SearchOutcome, clock: _Clock,
             note: Callable[[str | None], None]) -> None:
    """Why the search stopped before its budget, if it did: stored and said."""
    outcome.stopped = outcome.stopped or clock.why
    if outcome.stopped:
        rec.store_study(study, stopped=outcome.stopped)
        note(outcome.stopped)


def _short_budget(opts: SearchOptions) -> str | None:
    """Before the first trial: a warning when ``--budget`` is shorter than one
    measurement window may take, so that even the baseline may not finish."""
    if opts.budget is None or opts.budget >= opts.measure.max_window_s:
        return None
    return (f"warning: --budget {clock_text(opts.budget)} is shorter than one measurement "
            f"window may take (--max-seconds {opts.measure.max_window_s:g} s, and the trial's "
            "start-up): the baseline may not finish, and then nothing is compared")


def _control(opts: SearchOptions, study: optuna.Study, baseline: TrialConfig,
             server: ForkServer, clock: _Clock, outcome: SearchOutcome,
             finished: Callable[[TrialRecord], None]) -> bool:
    """Measures a control if one is due while trials remain; whether it did."""
    if _counted(study) >= opts.max_trials:
        return False
    control = confirmation.measure_control(opts, study, baseline, server, clock.budget_left,
                                           clock.reserve(study, ahead=1))
    if control is None:
        return False
    outcome.controls += 1
    finished(control)
    return True


def _explore(opts: SearchOptions, study: optuna.Study, outcome: SearchOutcome) -> bool:
    """Queues a config drawn at random that no trial has measured or holds, the
    sampler having repeated itself; False (and why, in ``outcome.stopped``) when
    :data:`EXPLORE_DRAWS` draws found none."""
    import random

    taken = {rec.config_key(t) for t in study.get_trials(deepcopy=False)}
    rng = random.Random(opts.seed + len(taken))
    for _ in range(EXPLORE_DRAWS):
        config = suggest_config(FixedTrial(random_params(opts.space, rng)), opts.space,
                                device=opts.device, seed=opts.seed)
        if config.key() not in taken:
            _queue(opts, study, params_for(config, opts.space), explored=True)
            outcome.explored += 1
            return True
    outcome.stopped = (f"stopped early: the Optuna sampler repeated measured configs {EXPLORE_AFTER} "
                       f"times in a row, and {EXPLORE_DRAWS} random draws found no config "
                       f"left to measure ({len(_measured_configs(study))} measured): the space "
                       "looks exhausted")
    return False


def _measured_configs(study: optuna.Study) -> set[str]:
    """The distinct configs of the space that the search measured (finished trials,
    not repeats; the baseline where it lies inside the space)."""
    return {rec.config_key(t) for t in study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        if _new_point(TrialRecord.from_frozen(t))}


def _new_point(r: TrialRecord) -> bool:
    return r.search_point and r.in_space and r.reused_from is None and not r.not_measured


def _confirm(opts: SearchOptions, study: optuna.Study, server: ForkServer, clock: _Clock,
             outcome: SearchOutcome, finished: Callable[[TrialRecord], None],
             note: Callable[[str | None], None]) -> None:
    """The confirmation stage (see :mod:`autotune.study._confirm`), announced by a note."""
    def done(record: TrialRecord) -> None:
        outcome.confirmed += 1
        finished(record)

    def announce(plan: confirmation.Plan) -> None:
        follow_up = clock.confirmed > 0  # the knee moved onto a config not measured
        clock.confirming = clock.confirmed + plan.measurements
        names = ", ".join(f"#{t.number}" + (" (baseline)" if rec.is_baseline(t) else "")
                          for t in plan.trials)
        what = f"the knee moved to #{plan.trials[-1].number}, which the confirmation " \
            "did not measure: " if follow_up else ""
        what = "resumed where it was stopped: " if plan.resumed else what
        fewer = " (all that --budget holds)" if plan.rounds < plan.asked else ""
        how = "pairs of short windows in one process" if plan.paired else \
            f"{plural(plan.rounds, 'interleaved round')}{fewer}"
        note(f"confirmation: {what}{how} of {names}, about "
             f"{clock_text(confirmation.plan_s(opts, study, plan, clock.overhead()))}")

    first, outcome.confirm_cut = confirmation.confirm(
        opts, study, server, clock.budget_left, done, announce, clock.overhead())
    if outcome.confirm_cut:
        note(f"confirmation cut short: {outcome.confirm_cut}; the front's figures not "
             "measured by it are the search's own, unconfirmed")
    elif first is None and opts.confirm and not confirmation.candidates(opts, study):
        note("confirmation: none, nothing to confirm (no config beside the baseline on "
             "the front)")


class _Clock:
    """The search's time: ``timeout`` stops new trials, ``budget`` also bounds the
    running one, less the time kept for the confirmation; the ETA is the smaller of
    the trials' pace (the confirmation's measurements included) and the budget's
    rest."""

    def __init__(self, opts: SearchOptions, done_at_start: int) -> None:
        self.opts, self.done_at_start, self.start = opts, done_at_start, time.monotonic()
        self.durations: list[float] = []  # each measurement's wall time, this run
        self.overheads: list[float] = []  # what storing each took after its result
        self.confirmed = 0  # the confirmation's measurements so far
        self.confirming = 0  # the confirmation's measurements in all, once it started
        self.why = ""  # why may_start said no

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def budget_left(self) -> float | None:
        return None if self.opts.budget is None else self.opts.budget - self.elapsed()

    def measured(self, record: TrialRecord) -> None:
        """Counts a stored trial: a measurement's time runs from its start until it
        is stored (forking, measuring and storing)."""
        if record.measured_at and record.reused_from is None:
            self.durations.append(time.time() - record.measured_at[0])
            self.overheads.append(time.time() - record.measured_at[1])
        self.confirmed += record.confirm is not None

    def per_measurement(self) -> float:
        """A measurement's typical wall time in this run (the median)."""
        return _median(self.durations)

    def overhead(self) -> float:
        """What storing a measurement typically takes in this run, after its result."""
        return _median(self.overheads)

    def reserve(self, study: optuna.Study, ahead: int = 0) -> float:
        """The seconds kept for the confirmation of ``study``'s front, each config
        measured as long as its own trial took (:func:`confirmation.expected_s`);
        ``ahead=1``: with one more candidate as long as this run's typical
        measurement (the next trial may join the front). At most
        :data:`BUDGET_SHARE` of ``budget``."""
        seconds = confirmation.expected_s(self.opts, study,
                                          self.per_measurement() if ahead else 0.0,
                                          self.overhead())
        if self.opts.budget is not None:
            seconds = min(seconds, BUDGET_SHARE * self.opts.budget)
        return seconds

    def may_start(self, study: optuna.Study) -> bool:
        """Whether a trial may start; if not, ``why`` says why."""
        timeout, left = self.opts.timeout, self.budget_left()
        if timeout is not None and self.elapsed() > timeout:
            self.why = f"stopped: --timeout {clock_text(timeout)} has passed"
            return False
        if left is None:
            return True
        reserve = self.reserve(study, ahead=1)
        if left - reserve > 0:
            return True
        if left <= 0:
            self.why = f"stopped: --budget {clock_text(self.opts.budget)} has run out"
            return False
        self.why = (f"stopped: --budget {clock_text(self.opts.budget)} has "
                    f"{clock_text(max(left, 0.0))} left, kept for the confirmation (about "
                    f"{clock_text(reserve)}, at most {BUDGET_SHARE:.0%} of the "
                    "budget)")
        return False

    def budget_note(self, study: optuna.Study) -> str | None:
        """After the baseline: how the budget will be spent, or a warning that what is
        left is all kept for the confirmation, so that no other trial starts."""
        left, budget = self.budget_left(), self.opts.budget
        if left is None or budget is None:
            return None
        trial, reserve = self.per_measurement(), self.reserve(study, ahead=1)
        if left > reserve:
            return (f"budget: {clock_text(left)} of --budget {clock_text(budget)} left after "
                    f"the baseline; trials run while more than the confirmation's reserve is "
                    f"left (about {clock_text(reserve)} now, at most "
                    f"{BUDGET_SHARE:.0%} of the budget)")
        return (f"warning: --budget {clock_text(budget)} has {clock_text(max(left, 0.0))} "
                f"left after the baseline, which took {clock_text(trial)}: all of it is kept "
                f"for the confirmation (about {clock_text(reserve)}), and no other config will "
                f"be measured. Give --budget at least {clock_text(budget - left + trial + reserve)}"
                ", or measure faster (--precision, --max-seconds)")

    def eta(self, n_total: int, study: optuna.Study) -> float:
        n_done = n_total - self.done_at_start
        left_trials = max(self.opts.max_trials - n_total, 0)
        confirmation = self.reserve(study) if not self.confirming else \
            max(self.confirming - self.confirmed, 0) * self.per_measurement()  # extra rounds
        eta = (self.elapsed() / n_done * left_trials if n_done > 0 else 0.0) + confirmation
        left = self.budget_left()
        return eta if left is None else max(0.0, min(eta, left))


def _measure_or_fail(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
                     config: TrialConfig, outcome: SearchOutcome, server: ForkServer,
                     clock: _Clock):
    try:
        return _measure_and_tell(opts, study, trial, config, outcome, server, clock)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (the CLI raises it for both)
        rec.store(trial, fail_reason="interrupted")
        study.tell(trial, state=TrialState.FAIL)
        recovery.requeue_once(study, study.get_trials(deepcopy=False)[trial.number])  # resumed
        raise


def defer_compiled(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
                   config: TrialConfig) -> bool:
    """A compile variant is measured only after its eager twin: if the twin has not
    been measured, this trial is put back unmeasured (pruned, ``deferred``, counting
    against no budget) and the twin and then the variant are queued."""
    knob = opts.space.knobs.get("compile_mode")
    if config.compile_mode == "none" or knob is None or not knob.contains("none"):
        return False
    twin_key = eager_twin(config).key()
    with study_lock(opts.storage, study.study_name):
        if any(rec.config_key(t) == twin_key for t in study.get_trials(
                deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))):
            return False
        _queue(opts, study, eager_params(trial.params, opts.space, opts.device),
               eager_twin=trial.number)
        _queue(opts, study, trial.params)
    rec.store(trial, deferred="compile variant: queued again after its eager twin")
    study.tell(trial, state=TrialState.PRUNED)
    return True


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def _counted(study: optuna.Study) -> int:
    return sum(r.counts for r in rec.records(study))


_WAIT = object()  # the budget is taken, but by running trials that may yet fail


def _reserve(opts: SearchOptions, study: optuna.Study, baseline: TrialConfig,
             worker: dict[str, Any], outcome: SearchOutcome,
             explore: bool = False) -> optuna.Trial | object | None:
    """Under the study lock: fails dead workers' trials, queues the baseline, and asks
    a trial if the budget has room (``explore``: a random one, the sampler having
    repeated itself). Returns the trial, ``_WAIT`` or None (done)."""
    with study_lock(opts.storage, study.study_name):
        outcome.interrupted += recovery.fail_interrupted(study)
        outcome.stale += recovery.fail_stale(study)
        outcome.orphans += recovery.fail_orphans(study, opts.grace_period)
        trials = rec.records(study)
        if recovery.requeue_budget_cuts(study, trials):
            trials = rec.records(study)
        if not any(t.baseline and not t.not_measured for t in trials):
            _enqueue_baseline(opts, study, baseline)
        done = sum(t.counts for t in trials)
        running = sum(t.state == "running" and t.search_point for t in trials)
        if done >= opts.max_trials:
            return None
        size = opts.space.size()
        if len(_measured_configs(study)) >= size and not running:
            outcome.stopped = (f"stopped early: the space is exhausted: all {size} of its "
                               "configs are measured")
            return None
        if done + running >= opts.max_trials:
            return _WAIT
        if any(t.baseline and t.counts for t in trials):
            _enqueue_priors(opts, study, baseline)
        # Seeded by the study's size, so one worker replays exactly and two workers
        # never draw the same start-up configs.
        queued = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        if explore and not queued and not _explore(opts, study, outcome):
            return None
        study.sampler = optuna_sampler(opts.optuna_sampler, opts.seed + len(study.get_trials(
            deepcopy=False)))
        with warnings.catch_warnings():  # we beat ourselves, see Heartbeat
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
            trial = study.ask()
        rec.store(trial, worker=worker)
        rec.store_role(trial)
        _optuna.beat(study, trial)  # a first beat at once: a trial with none is never stale
        return trial


def _queue(opts: SearchOptions, study: optuna.Study, params: dict[str, Any],
           **fields: Any) -> None:
    """Queues Optuna ``params`` with these :class:`TrialRecord` fields and the config
    they make, which ``show`` lists while the trial waits."""
    config = suggest_config(FixedTrial(renamed_knobs(params)), opts.space,
                            device=opts.device, seed=opts.seed)
    rec.enqueue(study, params, config=config.to_dict(), **fields)


def _enqueue_baseline(opts: SearchOptions, study: optuna.Study, baseline: TrialConfig) -> None:
    """Queues the baseline, which samples nothing: its config may lie outside the space,
    so it goes without params (Optuna's distributions stay the space's, and the
    samplers never see it: :class:`autotune.study._optuna_samplers.SpaceOnly`), with the values
    it has outside the space the user wrote."""
    rec.enqueue(study, {}, role="baseline", config=baseline.to_dict(),
                outside_space=opts.space.baseline_outside() or None)


def _enqueue_priors(opts: SearchOptions, study: optuna.Study, baseline: TrialConfig) -> None:
    """Once the baseline is measured, queues the prior table's next row whenever the
    queue is empty, so that the rows run first, in order, and none is left queued
    when the trial budget ends first. While a GPU-resident config is the fastest that
    fits, the rows that sample on the CPU wait (they run if that changes)."""
    done = list(StudyRecord.from_study(study).priors)
    if not opts.priors or study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return
    best = rec.fastest_fitting(rec.records(study), opts.budget_mib)
    gpu_wins = best is not None and best.config is not None and best.config.gpu_sampling
    for name, config in prior_configs(baseline, opts.space, machine_facts(opts.device)):
        if name not in done and not (gpu_wins and not config.gpu_sampling):
            _queue(opts, study, params_for(config, opts.space), role="prior", prior=name)
            rec.store_study(study, priors=[*done, name])
            return


def _previous(study: optuna.Study, key: str) -> optuna.trial.FrozenTrial | None:
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        r = TrialRecord.from_frozen(t)
        if r.config_key == key and not r.not_measured and \
                r.reused_from is None and r.search_point:
            return t
    return None


def _reuse(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
           previous: optuna.trial.FrozenTrial, outcome: SearchOutcome):
    """Tells ``trial`` what ``previous`` measured for the same config."""
    rec.copy_measurement(trial, previous)
    outcome.reused += 1
    if previous.state != TrialState.COMPLETE:
        outcome.failed += 1
        return study.tell(trial, state=TrialState.FAIL)
    set_constraints(trial, memory_mib=previous.values[1], budget_mib=opts.budget_mib,
                    guarded=opts.guard.ratio is not None,
                    shortfall=TrialRecord.from_frozen(previous).guard_shortfall)
    return study.tell(trial, previous.values)


def _measure_and_tell(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
                      config: TrialConfig, outcome: SearchOutcome, server: ForkServer,
                      clock: _Clock):
    """Reuses an earlier measurement of the same config, or measures it under the
    host's measurement lock with a heartbeat (screened first when racing); None when
    another worker failed the trial as stale meanwhile."""
    previous = _previous(study, config.key())
    if previous is not None:
        return _reuse(opts, study, trial, previous, outcome)
    trial_dir = opts.study_dir / "trials" / str(trial.number)
    # the confirmation's time is kept from a trial's only where there is something to
    # confirm without it: else cutting it would keep time for a confirmation of nothing
    reserve = clock.reserve(study, ahead=1) if confirmation.candidates(opts, study) else 0.0
    with Heartbeat(_optuna.storage(study), _optuna.trial_id(trial)):
        result, where, budget_bound = confirmation.measure(
            opts, config, server, trial_dir, f"trial {trial.number} of study "
            f"{study.study_name}", clock.budget_left, reserve,
            _measure_spec(opts, study, trial))
    outcome.measured += 1
    record = TrialRecord.from_result(trial.number, result, **where)
    if not rec.is_baseline(trial):
        record = dataclasses.replace(record, paired=confirmation.paired_figure(
            study, result, where["measured_at"][0]))
    cut_by_budget = result.status == "timeout" and budget_bound
    if cut_by_budget:
        record = dataclasses.replace(record, fail_reason=f"budget: --budget "
                                     f"{opts.budget:g} s ran out while it was measured")
    try:
        written_at = time.monotonic()
        rec.write(trial, record)
        rec.store(trial, attrs_write_s=time.monotonic() - written_at)
        if not result.ok:
            outcome.failed += 1
            frozen = study.tell(trial, state=TrialState.FAIL)
            return frozen  # cut by the budget: counted against nothing, queued by the next run
        return _guard_and_tell(opts, study, trial, config, list(result.objectives()), outcome,
                               result.training, result.window.screened)
    except optuna.exceptions.UpdateFinishedTrialError:
        log.warning("trial %d was failed as stale by another worker while it was measured "
                    "here (heartbeats lost?); its result is dropped and its config was "
                    "re-queued", trial.number)
        return None


def _measure_spec(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial) -> MeasureSpec:
    """The search's measure spec; racing, a new config's is screened first against
    the current feasible front and the fastest config that fits (see
    :class:`autotune.specs.Screen`). The baseline is never screened: every speed-up
    is divided by it. With the accuracy guard, it asks for the guard's training
    after the window (:func:`autotune.study._guard.run_for`)."""
    baseline = rec.is_baseline(trial)
    front = tuple((p.throughput, p.memory_mib) for p in rec.points(study) if p.feasible)
    spec = dataclasses.replace(opts.measure, guard=guards.run_for(
        opts.guard, StudyRecord.from_study(study).guard, baseline=baseline, front=front,
        budget_mib=opts.budget_mib))
    if not opts.racing or baseline:
        return spec
    best = rec.fastest_fitting(rec.records(study), opts.budget_mib)
    return dataclasses.replace(spec, screen=Screen(
        precision=max(opts.screen_precision, opts.measure.precision), front=front,
        budget_mib=opts.budget_mib, best=best.throughput if best is not None else None))


def _guard_and_tell(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
                    config: TrialConfig, values: list[float], outcome: SearchOutcome,
                    training: dict, screened: bool = False):
    """Judges the trial's guard training (``training``, from its own process) or trains
    it where it must, sets the constraints and tells the objectives."""
    try:
        with Heartbeat(_optuna.storage(study), _optuna.trial_id(trial)):  # guard training is long
            verdict = _guard(opts, study, trial, config, values, outcome, training, screened)
    except GuardError as exc:
        outcome.failed += 1
        rec.store(trial, fail_reason=f"accuracy guard training failed: {exc}")
        frozen = study.tell(trial, state=TrialState.FAIL)
        if rec.is_baseline(trial):  # no budget, no reference: cannot go on
            raise GuardError(f"the baseline (trial {trial.number}) could not be trained for "
                             f"the accuracy guard: {exc}; see {opts.study_dir / 'guard'}") \
                from exc
        return frozen
    if verdict is not None and opts.guard.objective:
        values.append(verdict.val_metric)
    set_constraints(trial, memory_mib=values[1], budget_mib=opts.budget_mib,
                    guarded=opts.guard.ratio is not None,
                    shortfall=verdict.shortfall if verdict else None)
    return study.tell(trial, values)


def _guard(opts: SearchOptions, study: optuna.Study, trial: optuna.Trial,
           config: TrialConfig, values: list[float], outcome: SearchOutcome,
           training: dict, screened: bool = False) -> Verdict | None:
    """The trial's guard verdict where it must have one: the baseline (trained for E
    epochs: it sets the budget), every trial with accuracy as an objective, and
    otherwise a trial that would join the feasible front (never a screened one: it
    cannot). Its own process trained it
    after the window (``training``); where it did not (the front changed meanwhile,
    or the budget was not set yet), a process of its own trains it now. None: not
    trained."""
    guard = opts.guard
    if not guard.active:
        return None
    if rec.is_baseline(trial):
        verdict, ref = guards.reference_of(guards.trained(training), training["guard_s"],
                                           trial.number, config, guard) if training else \
            guards.reference(opts, trial.number, config, guard)
        rec.store_study(study, guard=ref)
    elif training:
        verdict = guards.verdict_of(guards.trained(training), training["guard_s"], guard,
                                    StudyRecord.from_study(study).guard)
    else:
        if screened and not guard.objective:
            return None
        feasible = opts.budget_mib is None or values[1] <= opts.budget_mib
        candidate = Point(trial.number, values[0], values[1])
        if not guard.objective and (not feasible or any(
                p.feasible and p.dominates(candidate) for p in rec.points(study))):
            return None
        ref = guards.budget(lambda: StudyRecord.from_study(study).guard,
                            lambda: _baseline_pending(study))
        verdict = guards.check(opts, trial.number, config, guard, ref)
    rec.store_verdict(trial, verdict, config)
    outcome.guarded += 1
    outcome.guard_violations += verdict.shortfall > 0
    outcome.guard_s += verdict.guard_s
    return verdict


def _baseline_pending(study: optuna.Study) -> bool:
    """Whether a baseline trial is running (in another worker) and may yet set the
    budget. A merely queued one is not waited for: this worker might be the one to
    run it."""
    return any(r.baseline and r.state == "running" for r in rec.records(study))
