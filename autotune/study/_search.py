"""One run of the search on a study: :class:`Search` reserves a trial of the study's
shared budget, measures its config in its own process (or reuses an earlier
measurement of the same config), guards it and tells Optuna; then confirms the front.

Any number of workers may run a search on one study. Two objectives (throughput up,
peak memory down), an optional memory budget and accuracy guard as Optuna
constraints, the baseline as the first trial, controls (the baseline again) as the
search goes, repeats reused rather than measured and counted against nothing (a
sampler that repeats itself explores at random, then stops), the confirmation last
(:class:`autotune.study._confirm.Confirmation`), and resumption: running the same
search again continues the same study.
"""
from __future__ import annotations

import dataclasses
import os
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import optuna
from optuna.trial import FixedTrial, FrozenTrial, TrialState

from autotune.compare import load_quantiles
from autotune.config import TrialConfig, renamed_knobs
from autotune.env import clock as clock_text, plural
from autotune.errors import GuardError
from autotune.files import inductor_cache_dir
from autotune.logging import get_logger
from autotune.specs import MeasureSpec, Screen, TrialLimits
from autotune.storage import Heartbeat, measurement_lock, study_lock
from autotune.study import _confirm as confirmation, _guard as guards, _optuna, \
    _records as rec, _recovery as recovery, _window_length as lengths
from autotune.study._clock import Clock
from autotune.study._constraints import constraint_values, set_constraints
from autotune.study._guard import Verdict
from autotune.study._options import SearchOptions
from autotune.study._paired import who_took
from autotune.study._optuna_samplers import optuna_sampler
from autotune.study._pareto import Point
from autotune.study._priors import FAST_END, fast_end, machine_facts, prior_configs
from autotune.study._records import StudyRecord, TrialRecord
from autotune.study._space import (
    eager_params,
    eager_twin,
    in_space,
    params_for,
    random_params,
    suggest_config,
)
from autotune.trial import WINDOW_S, ForkServer, Load, LoadMeter, PairSpec, \
    TrialResult, busy_over, run_trial

log = get_logger(__name__)

POLL_S = 2.0  # how often a worker whose budget is taken by running trials looks again
EXPLORE_AFTER = 3  # repeats in a row, after which a config not yet measured is drawn
EXPLORE_DRAWS = 500  # random draws that find no unmeasured config: the space is exhausted
STOP_IDLE = 30  # proposals in a row that measured nothing new (repeats, deferrals): stop
# Trials in a row whose windows stayed disturbed however often they were measured
# again, after which the machine is taken to stay busy: said once, and its windows are
# kept as measured (neither measured again nor screened) until one is quiet again
BUSY_AFTER = 2
LOOK_S = 0.25  # how long the search looks at the machine's load before its first trial
# ... and looks again, where that look found it busy: a machine busy in both looks is
# busy (another training), one quiet in the second was not (a command that ran for a
# moment: a one-off would otherwise set the whole search's trials waiting passively)
LOOK_AGAIN_S = 1.0
# A trial's OpenMP threads on a machine busy before the search starts: they sleep at a
# barrier rather than spin, so that they do not spin against the other process's
# threads for the same cores (docs/measurement.md, "A busy machine", has the figures).
# A user's own OMP_WAIT_POLICY wins.
BUSY_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


@dataclass
class SearchOutcome:
    """What one worker's run of the search did."""

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
    busy: str = ""  # what kept the machine busy through trials in a row, if anything did
    confirmed: int = 0  # the confirmation's measurements
    confirm_cut: str = ""  # why the confirmation stopped before its last round


# n done, n budget, the finished trial, seconds so far, ETA seconds
Progress = Callable[[int, int, TrialRecord, float, float], None]
_WAIT = object()  # the budget is taken, but by running trials that may yet fail


class Search:
    """One worker's run of the search on ``study``: its options, study, baseline,
    clock, fork server and outcome, and its steps (reserve, measure, control,
    guard, tell, confirm) as methods.

    ``progress``: called with each stored measurement; ``on_trial_done``: with the
    study, once a measurement is stored; ``on_trial_start``: with a trial's number
    and config before it is measured; ``on_note``: with a line to show (the
    confirmation starting, an early stop)."""

    def __init__(self, opts: SearchOptions, study: optuna.Study, baseline: TrialConfig, *,
                 progress: Progress | None = None,
                 on_trial_done: Callable[[optuna.Study], None] | None = None,
                 on_trial_start: Callable[[int, TrialConfig], None] | None = None,
                 on_note: Callable[[str], None] | None = None) -> None:
        self.opts, self.study, self.baseline = opts, study, baseline
        self.progress, self.on_trial_done = progress, on_trial_done
        self.on_trial_start, self.on_note = on_trial_start, on_note
        self.outcome = SearchOutcome()
        self.record = lengths.MachineRecord(opts.studies_dir, self.note)  # its paired windows
        self.schedule = confirmation.Schedule(opts, study, self.between_windows)
        self.clock = Clock(self.schedule, self.counted())
        self.server: ForkServer | None = None  # while :meth:`run` runs
        self.disturbed_in_row = 0  # measured trials in a row that stayed disturbed
        self.trial_env: dict[str, str] = {}  # over this one's, in every trial's process
        self.windows = lengths.Choice(WINDOW_S)  # a paired confirmation's, and why

    def run(self) -> SearchOutcome:
        """Reserves, measures and tells until the study holds ``max_trials`` counted
        trials, ``timeout`` has passed (no new trial starts) or ``budget`` has (the
        running trial is failed when it would run past it; the confirmation's time is
        kept aside), measuring a control whenever one is due; then confirms the
        front. Trials fork from one :class:`ForkServer` for the whole run."""
        knob = self.opts.space.knobs.get("compile_mode")
        modes = {self.baseline.compile_mode, *(knob.choices if knob is not None else ())}
        self.note(self.short_budget())
        load_quantiles()  # the comparisons' scipy, before any measurement (compare.py)
        self.look_at_load()
        with ForkServer(folder=self.opts.study_dir, compiles=modes != {"none"}) as server:
            self.server = server
            self.trials()
            self.say_stopped()
            self.confirm()
        self.outcome.elapsed_s = self.clock.elapsed()
        return self.outcome

    # -- what it says and counts --------------------------------------------------

    def finished(self, record: TrialRecord) -> None:
        """A measurement was stored: counted, published, shown."""
        self.clock.measured(record)
        if self.on_trial_done is not None:
            self.on_trial_done(self.study)
        if self.progress is None and not record.baseline:
            return
        n_total = self.counted()
        if self.progress is not None:
            self.progress(n_total, self.opts.max_trials, record, self.clock.elapsed(),
                          self.clock.eta(n_total))
        if record.baseline and record.complete:
            self.note(self.clock.estimate_note(n_total))

    def note(self, text: str | None) -> None:
        if text and self.on_note is not None:
            self.on_note(text)

    def budget_left(self) -> float | None:
        """The seconds left of ``--budget`` (None: no budget)."""
        return self.clock.budget_left()

    def overhead(self) -> float:
        """What storing a measurement typically takes in this run."""
        return self.clock.overhead()

    def counted(self) -> int:
        """The study's trials that count against ``max_trials``."""
        return sum(r.counts for r in rec.records(self.study))

    def short_budget(self) -> str | None:
        """Before the first trial: a warning when ``--budget`` is shorter than one
        measurement window may take, so that even the baseline may not finish."""
        opts = self.opts
        if opts.budget is None or opts.budget >= opts.measure.max_window_s:
            return None
        return (f"warning: --budget {clock_text(opts.budget)} is shorter than one measurement "
                f"window may take (--max-seconds {opts.measure.max_window_s:g} s, and the "
                "trial's start-up): the baseline may not finish, and then nothing is compared")

    def say_stopped(self) -> None:
        """Why the search stopped before its budget, if it did: stored and said."""
        self.outcome.stopped = self.outcome.stopped or self.clock.why
        if self.outcome.stopped:
            rec.store_study(self.study, stopped=self.outcome.stopped)
            self.note(self.outcome.stopped)

    def watch_busy(self, record: TrialRecord) -> None:
        """Counts the measured trials in a row that stayed disturbed (their threads
        passive from the first: :meth:`spinning_on_busy`); at :data:`BUSY_AFTER` the
        machine is taken to stay busy, which is said once (with what took its cores),
        and the next trials keep their windows as measured (:meth:`busy_spec`); a
        quiet trial ends that, which is said too."""
        if record.reused_from is not None or not record.complete:
            return
        self.disturbed_in_row = self.disturbed_in_row + 1 if record.disturbed else 0
        if not record.disturbed:
            if self.outcome.busy:
                self.quiet_again()
            return
        if self.disturbed_in_row >= BUSY_AFTER and not self.outcome.busy:
            self.outcome.busy = who_took([record.window.load])
            self.note(f"the machine stays busy ({self.outcome.busy} took its cores in "
                      f"{plural(self.disturbed_in_row, 'trial')} in a row): windows are kept "
                      "as measured from now on, marked DISTURBED, neither measured again nor "
                      "screened; the confirmation's pairs, disturbed alike on both sides, "
                      "decide the speed-ups" +
                      self.threads_for(Load.from_dict(record.window.load)))

    def threads_for(self, busy: Load | None) -> str:
        """The trials' OpenMP threads from now on: waiting passively at a barrier
        (:data:`BUSY_ENV`) while another process keeps the machine busy (``busy``, the
        load that does; None where it is quiet), spinning as the runtime has them
        while it is quiet, or busy only by the hypervisor's steal (:attr:`Load.stolen`:
        no process here for them to spin against, and passive threads alone read
        slower, benchmarks/omp_wait.py); a user's own ``OMP_WAIT_POLICY`` wins. The
        runtime reads the policy as it loads, so a change takes a fork server of its
        own (:class:`ForkServer`; the one before is kept for a change back). What to
        say of it: "" where nothing changed."""
        passive = busy is not None and not busy.stolen
        want = dict(BUSY_ENV) if passive and "OMP_WAIT_POLICY" not in os.environ else {}
        if want == self.trial_env:
            return ""
        self.trial_env = want
        return ("; trials' threads wait passively (OMP_WAIT_POLICY=PASSIVE) from now on, "
                "not spinning against its threads" if want else
                "; trials' threads spin again at a barrier, as the runtime has them")

    def spinning_on_busy(self, number: int, result: TrialResult) -> bool:
        """Whether trial ``number``, its threads spinning, stayed disturbed however
        often it was measured again: spinning threads beside another process's read a
        fraction of their rate (benchmarks/omp_wait.py), so the trials' threads wait
        passively from now on (:meth:`threads_for`), this one's measured again first,
        as said, rather than kept at that fraction. Not where the hypervisor's steal
        took the cores (:attr:`Load.stolen`): no process here is there to spin
        against, and measuring it again so would only double its time (a Xeon's
        baseline took 110 s, measured 6 times, before its first result line)."""
        if not result.ok or not result.window.disturbed or self.trial_env:
            return False
        windows = [*result.window.remeasured, result.window.load]
        # "" where the user's own policy holds, or the hypervisor took the cores
        passive = self.threads_for(Load.summed(Load.from_dict(w) for w in windows))
        if passive:
            self.note(f"#{number} stayed disturbed however often it was measured again "
                      f"({who_took(windows)}){passive}; it is measured again")
        return bool(passive)

    def passive_on_quiet(self, number: int, result: TrialResult) -> bool:
        """Whether trial ``number``, its threads passive (the machine was busy), found
        the machine quiet: passive threads alone read slower (benchmarks/omp_wait.py),
        so the machine is quiet again, as :meth:`watch_busy` has it, said once, and
        the trials' threads spin from now on, this one's measured again first."""
        if not self.trial_env or not result.ok or result.window.disturbed:
            return False
        if self.outcome.busy:
            self.quiet_again(f"; #{number}, measured with passive threads, is measured again")
        else:
            self.note(f"#{number} found the machine quiet, its threads passive: measured "
                      f"again{self.threads_for(None).replace(';', ',', 1)}")
        self.disturbed_in_row = 0
        return True

    def quiet_again(self, then: str = "") -> None:
        """The machine said to stay busy is quiet again: said once (with what kept it
        busy, and ``then``), its disturbed windows measured again from now on, its
        threads spinning."""
        self.note(f"the machine is quiet again (it was busy: {self.outcome.busy}): "
                  f"disturbed windows are measured again{self.threads_for(None)}{then}")
        self.outcome.busy = ""

    def look_at_load(self) -> None:
        """Before the first trial: where other processes already take more of the
        cores than ``--max-busy`` over :data:`LOOK_S` and again over
        :data:`LOOK_AGAIN_S` (a one-off is not a busy machine), the machine is busy
        from the start, which is said once, and windows are kept as measured from the
        first trial on, as :meth:`watch_busy` keeps them (its first quiet trial ends it).
        Measuring each window three times beside another training would only triple
        the search's time."""
        load = self.busy_now()
        if load is None:
            return
        self.outcome.busy = load.named()
        self.note(f"the machine is busy before the search starts ({self.outcome.busy}; "
                  f"{100 * load.share:.0f}% of its {load.cores} cores): windows are kept "
                  "as measured, marked DISTURBED, neither measured again nor screened; "
                  "the confirmation's pairs, disturbed alike on both sides, decide the "
                  "speed-ups" + self.threads_for(load))

    def busy_now(self) -> Load | None:
        """Other processes' load on the cores where they take more than ``--max-busy``
        of them over :data:`LOOK_S` and again over :data:`LOOK_AGAIN_S`; None where
        either look finds the machine quiet, or under ``--max-busy 1``."""
        max_busy = self.opts.measure.max_busy
        if max_busy >= 1:  # --max-busy 1: never busy
            return None
        for look_s in (LOOK_S, LOOK_AGAIN_S):
            meter = LoadMeter()
            meter.start()
            time.sleep(look_s)
            load = meter.stop()
            if not busy_over(load.share, load.others_s, max_busy):
                return None
        return load

    def pair_windows(self) -> lengths.Choice:
        """A paired confirmation's windows, from a look at the load as it starts
        (:meth:`busy_now`): where another process takes the cores, a busy machine's
        (:data:`BUSY_WINDOW_S` at first), its threads passive (:meth:`threads_for`: a
        burner that outlasts the trials would otherwise meet spinning threads in every
        pair); else a quiet one's (:data:`WINDOW_S` at first), its threads spinning,
        whatever the trials' were. Either follows this machine's record of its earlier
        confirmations in that state (:mod:`autotune.study._window_length`). Kept, with
        why in words, in :attr:`windows`, and returned."""
        load = self.busy_now()
        busy = load is not None
        self.threads_for(load)
        choice = self.record.choice(busy)
        passive = ", threads passive" if self.trial_env else ""
        words = f"{choice.window_s:g} s each{passive}: the machine is busy" if busy else ""
        if choice.why:
            words = f"{words or f'{choice.window_s:g} s each'}; {choice.why}"
        self.windows = dataclasses.replace(choice, why=words)
        return self.windows

    def between_windows(self) -> float:
        """How far the ratio of two of this machine's windows varies, beyond what each
        window's own interval holds: the least spread of its record's pairs in the
        state the search is in (busy where it was said to be), a guess where it holds
        none (:meth:`autotune.study._window_length.MachineRecord.spread`). A search's
        trials are single windows minutes apart, and their own intervals leave that
        out (docs/measurement.md, "Who is measured")."""
        return self.record.spread(bool(self.outcome.busy))

    def pairs_measured(self, result: TrialResult) -> None:
        """A paired confirmation's trial ended: its pairs go into this machine's
        record, for the next in the same state to choose its windows by."""
        self.record.add(result, self.windows)

    def busy_spec(self, spec: MeasureSpec) -> MeasureSpec:
        """``spec`` as the search measures while the machine stays busy
        (:meth:`watch_busy`): its windows kept as measured, none screened; else
        ``spec``."""
        if not self.outcome.busy:
            return spec
        return dataclasses.replace(spec, busy_retries=0, screen=None)

    # -- the trials -----------------------------------------------------------------

    def trials(self) -> None:
        """The search proper: a control whenever one is due, else the next trial
        reserved, measured and told, while the clock lets one start; stops early once
        :data:`STOP_IDLE` proposals in a row measured nothing new."""
        worker, repeats, idle = recovery.this_worker(), 0, 0
        while self.clock.may_start():
            if self.control():
                continue
            asked_at = time.monotonic()
            trial = self.reserve(worker, explore=repeats >= EXPLORE_AFTER)
            if trial is None:
                break
            if trial is _WAIT:
                time.sleep(POLL_S)
                continue
            rec.store(trial, reserve_s=time.monotonic() - asked_at)  # lock + ask
            config = self.config_for(trial)
            if config is None:  # a compile variant, queued again after its eager twin
                idle += 1
                continue
            record = self.trial(trial, config)
            if record is None:
                continue
            self.finished(record)
            self.watch_busy(record)
            repeats, idle = (repeats + 1, idle + 1) if record.reused_from is not None \
                else (0, 0)
            if record.baseline and record.complete:
                self.note(self.clock.budget_note())
            if idle >= STOP_IDLE:
                self.outcome.stopped = (
                    f"stopped early: {idle} proposals in a row measured nothing new "
                    "(repeats of measured configs, deferred compile variants)")
                break

    def trial(self, trial: optuna.Trial, config: TrialConfig) -> TrialRecord | None:
        """Measures (or reuses) a reserved trial's ``config`` and tells it; its record,
        or None where another worker failed the trial as stale meanwhile. Interrupted,
        it is failed and queued again, for the next run to measure."""
        if self.on_trial_start is not None:
            self.on_trial_start(trial.number, config)
        try:
            frozen = self.measure_and_tell(trial, config)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (the CLI raises it for both)
            rec.store(trial, fail_reason="interrupted")
            self.study.tell(trial, state=TrialState.FAIL)
            recovery.requeue_once(self.study, self.study.get_trials(
                deepcopy=False)[trial.number])  # resumed
            raise
        return None if frozen is None else TrialRecord.from_frozen(frozen)

    def config_for(self, trial: optuna.Trial) -> TrialConfig | None:
        """The config a reserved trial measures: the baseline's as it is (it samples
        nothing), else the one its params suggest; None where it is a compile variant
        put back until its eager twin is measured."""
        opts = self.opts
        if rec.is_baseline(trial):
            rec.store_study(self.study, baseline=trial.number)
            config = self.baseline
        else:
            config = suggest_config(trial, opts.space, device=opts.device, seed=opts.seed)
            if self.defer_compiled(trial, config):
                return None
        rec.store(trial, config_key=config.key(), config=config.to_dict())
        return config

    def defer_compiled(self, trial: optuna.Trial, config: TrialConfig) -> bool:
        """A compile variant is measured only after its eager twin: if the twin has not
        been measured, this trial is put back unmeasured (pruned, ``deferred``,
        counting against no budget) and the twin and then the variant are queued."""
        opts, study = self.opts, self.study
        knob = opts.space.knobs.get("compile_mode")
        if config.compile_mode == "none" or knob is None or not knob.contains("none"):
            return False
        twin_key = eager_twin(config).key()
        with study_lock(opts.storage, study.study_name):
            if any(rec.config_key(t) == twin_key for t in study.get_trials(
                    deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))):
                return False
            self.queue(eager_params(trial.params, opts.space, opts.device),
                       eager_twin=trial.number)
            self.queue(trial.params)
        rec.store(trial, deferred="compile variant: queued again after its eager twin")
        study.tell(trial, state=TrialState.PRUNED)
        return True

    def reserve(self, worker: dict[str, Any], explore: bool = False
                ) -> optuna.Trial | object | None:
        """Under the study lock: fails dead workers' trials, queues the baseline, and
        asks a trial if the budget has room (``explore``: a random one, the sampler
        having repeated itself). Returns the trial, ``_WAIT`` or None (done)."""
        opts, study, outcome = self.opts, self.study, self.outcome
        with study_lock(opts.storage, study.study_name):
            outcome.interrupted += recovery.fail_interrupted(study)
            outcome.stale += recovery.fail_stale(study)
            outcome.orphans += recovery.fail_orphans(study, opts.grace_period)
            trials = rec.records(study)
            if recovery.requeue_budget_cuts(study, trials):
                trials = rec.records(study)
            if not any(t.baseline and not t.not_measured for t in trials):
                self.enqueue_baseline()
            room = self.room(trials)
            if room is not True:
                return room
            if any(t.baseline and t.counts for t in trials):
                self.enqueue_priors()
            queued = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if explore and not queued and not self.explore():
                return None
            # Seeded by the study's size, so one worker replays exactly and two workers
            # never draw the same start-up configs.
            study.sampler = optuna_sampler(opts.optuna_sampler, opts.seed + len(
                study.get_trials(deepcopy=False)))
            with warnings.catch_warnings():  # we beat ourselves, see Heartbeat
                warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
                trial = study.ask()
            rec.store(trial, worker=worker)
            rec.store_role(trial)
            _optuna.beat(study, trial)  # a first beat at once: a trial with none is never stale
            return trial

    def room(self, trials: list[TrialRecord]) -> bool | object | None:
        """Whether the trial budget has room for one more: True, ``_WAIT`` (taken by
        running trials) or None (spent, or the space exhausted)."""
        done = sum(t.counts for t in trials)
        running = sum(t.state == "running" and t.search_point for t in trials)
        if done >= self.opts.max_trials:
            return None
        size = self.opts.space.size()
        if len(measured_configs(self.study)) >= size and not running:
            self.outcome.stopped = (f"stopped early: the space is exhausted: all {size} of "
                                    "its configs are measured")
            return None
        return _WAIT if done + running >= self.opts.max_trials else True

    def explore(self) -> bool:
        """Queues a config drawn at random that no trial has measured or holds, the
        sampler having repeated itself; False (and why, in ``outcome.stopped``) when
        :data:`EXPLORE_DRAWS` draws found none."""
        opts = self.opts
        taken = {rec.config_key(t) for t in self.study.get_trials(deepcopy=False)}
        rng = random.Random(opts.seed + len(taken))
        for _ in range(EXPLORE_DRAWS):
            config = suggest_config(FixedTrial(random_params(opts.space, rng)), opts.space,
                                    device=opts.device, seed=opts.seed)
            if config.key() not in taken:
                self.queue(params_for(config, opts.space), explored=True)
                self.outcome.explored += 1
                return True
        self.outcome.stopped = (
            f"stopped early: the Optuna sampler repeated measured configs {EXPLORE_AFTER} "
            f"times in a row, and {EXPLORE_DRAWS} random draws found no config left to "
            f"measure ({len(measured_configs(self.study))} measured): the space looks "
            "exhausted")
        return False

    def queue(self, params: dict[str, Any], **fields: Any) -> None:
        """Queues Optuna ``params`` with these :class:`TrialRecord` fields and the config
        they make, which ``show`` lists while the trial waits."""
        config = suggest_config(FixedTrial(renamed_knobs(params)), self.opts.space,
                                device=self.opts.device, seed=self.opts.seed)
        rec.enqueue(self.study, params, config=config.to_dict(), **fields)

    def enqueue_baseline(self) -> None:
        """Queues the baseline, which samples nothing: its config may lie outside the
        space, so it goes without params (Optuna's distributions stay the space's, and
        the samplers never see it: :class:`autotune.study._optuna_samplers.SpaceOnly`),
        with the values it has outside the space the user wrote."""
        rec.enqueue(self.study, {}, role="baseline", config=self.baseline.to_dict(),
                    outside_space=self.opts.space.baseline_outside() or None)

    def enqueue_priors(self) -> None:
        """Once the baseline is measured, queues the prior table's next row whenever
        the queue is empty, so that the rows run first, in order, and none is left
        queued when the trial budget ends first. While a GPU-resident config is the
        fastest that fits, the rows that sample on the CPU wait (they run if that
        changes). After the rows, the fastest config's fast end
        (:func:`~autotune.study._priors.fast_end`) whenever no trial holds it yet."""
        opts, study = self.opts, self.study
        done = list(StudyRecord.from_study(study).priors)
        if not opts.priors or study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        records = rec.records(study)
        best = rec.fastest_fitting(records, opts.budget_mib)
        gpu_wins = best is not None and best.config is not None and best.config.gpu_sampling
        machine = machine_facts(opts.device)
        for name, config in prior_configs(self.baseline, opts.space, machine):
            if name not in done and not (gpu_wins and not config.gpu_sampling):
                self.queue(params_for(config, opts.space), role="prior", prior=name)
                rec.store_study(study, priors=[*done, name])
                return
        if best is not None and best.config is not None:
            config = fast_end(best.config, opts.space, machine)
            # every trial's config, those queued or just reserved included (their key
            # is stored when measured): two workers never queue the same fast end
            taken = {r.config.key() for r in records if r.config is not None}
            if config.key() not in taken and in_space(config, opts.space):
                self.queue(params_for(config, opts.space), role="prior", prior=FAST_END)

    # -- measuring ------------------------------------------------------------------

    def measure(self, config: TrialConfig, trial_dir, who: str, reserve_s: float = 0.0,
                spec: MeasureSpec | None = None, pairs: PairSpec | None = None
                ) -> tuple[TrialResult, dict, bool]:
        """Measures ``config`` in its own process under the host's measurement lock (to
        ``spec``, default the search's), its timeout cut to what is left of the budget
        (less ``reserve_s``); with ``pairs``, a paired trial of ``config`` and its
        candidates (:mod:`autotune.trial._pairs`). Returns the result, where and when
        it was measured (``TrialRecord`` fields), and whether the budget bounded the
        timeout. Every measurement the search takes, trials, controls and the
        confirmation's, is taken here."""
        opts = self.opts
        with measurement_lock(opts.device, who) as waited:
            limits, budget_bound = self.limits(reserve_s)
            if spec is not None and spec.guard is not None and not budget_bound:
                # the guard's training after the window gets a timeout of its own
                limits = dataclasses.replace(limits, timeout_s=2 * limits.timeout_s)
            measured_from = time.time()
            result = run_trial(config, dataset=opts.dataset, trial_dir=trial_dir,
                               measure=spec or opts.measure, limits=limits, server=self.server,
                               inductor_cache=inductor_cache_dir(opts.studies_dir), pairs=pairs,
                               env=self.trial_env)
        where = dict(trial_dir=str(trial_dir), measured_at=(measured_from, time.time()),
                     lock_wait_s=waited)
        return result, where, budget_bound

    def limits(self, reserve_s: float = 0.0) -> tuple[TrialLimits, bool]:
        """The trial's limits, its timeout cut to what is left of ``budget`` (less
        ``reserve_s``); and whether the budget is what bounds it."""
        rest, limits = self.budget_left(), self.opts.limits
        if rest is None or rest - reserve_s >= limits.timeout_s:
            return limits, False
        return dataclasses.replace(limits, timeout_s=max(rest - reserve_s, 1.0)), True

    def measure_and_tell(self, trial: optuna.Trial, config: TrialConfig) -> FrozenTrial | None:
        """Reuses an earlier measurement of the same config, or measures it with a
        heartbeat (screened first when racing), then guards and tells it; None when
        another worker failed the trial as stale meanwhile."""
        opts, study = self.opts, self.study
        previous = _previous(study, config.key())
        if previous is not None:
            return self.reuse(trial, previous)
        trial_dir = opts.study_dir / "trials" / str(trial.number)
        # the confirmation's time is kept from a trial's only where there is something
        # to confirm without it: else cutting it would keep time for a confirmation of
        # nothing
        reserve = self.clock.reserve(ahead=1) if self.schedule.candidates() else 0.0
        with Heartbeat(_optuna.storage(study), _optuna.trial_id(trial)):
            dropped: list[dict] = []  # the loads of the windows measured before
            for _ in range(3):  # spinning and disturbed, passive and quiet, spinning
                result, where, budget_bound = self.measure(
                    config, trial_dir, f"trial {trial.number} of study {study.study_name}",
                    reserve, self.measure_spec(trial))
                result = _with_dropped(result, dropped)
                if not (self.spinning_on_busy(trial.number, result) or
                        self.passive_on_quiet(trial.number, result)):
                    break
                dropped = [*result.window.remeasured, *filter(None, [result.window.load])]
        self.outcome.measured += 1
        record = self.trial_record(trial, result, where, budget_bound)
        try:
            written_at = time.monotonic()
            rec.write(trial, record)
            rec.store(trial, attrs_write_s=time.monotonic() - written_at)
            if not result.ok:
                self.outcome.failed += 1
                # cut by the budget: counted against nothing, queued by the next run
                return study.tell(trial, state=TrialState.FAIL)
            return self.tell(trial, config, list(result.objectives()), result.training,
                             result.window.screened)
        except optuna.exceptions.UpdateFinishedTrialError:
            log.warning("trial %d was failed as stale by another worker while it was "
                        "measured here (heartbeats lost?); its result is dropped and its "
                        "config was re-queued", trial.number)
            return None

    def trial_record(self, trial: optuna.Trial, result: TrialResult, where: dict,
                     budget_bound: bool) -> TrialRecord:
        """A measured trial's record: its paired speed-up (the baseline has none), and
        why it failed where the budget cut it."""
        record = TrialRecord.from_result(trial.number, result, **where)
        if not rec.is_baseline(trial):
            record = dataclasses.replace(record, paired=confirmation.paired_figure(
                self.study, result, where["measured_at"][0]))
        if result.status == "timeout" and budget_bound:
            record = dataclasses.replace(record, fail_reason=f"budget: --budget "
                                         f"{self.opts.budget:g} s ran out while it was measured")
        return record

    def measure_spec(self, trial: optuna.Trial) -> MeasureSpec:
        """The search's measure spec; racing, a new config's is screened first against
        the current feasible front and the fastest config that fits (see
        :class:`autotune.specs.Screen`). The baseline is never screened: every speed-up
        is divided by it. With the accuracy guard, it asks for the guard's training
        after the window (:func:`autotune.study._guard.run_for`)."""
        opts, study = self.opts, self.study
        baseline = rec.is_baseline(trial)
        front = tuple((p.throughput, p.memory_mib) for p in rec.points(study) if p.feasible)
        spec = dataclasses.replace(opts.measure, guard=guards.run_for(
            opts.guard, StudyRecord.from_study(study).guard, baseline=baseline, front=front,
            budget_mib=opts.budget_mib))
        if not opts.racing or baseline:
            return self.busy_spec(spec)
        best = rec.fastest_fitting(rec.records(study), opts.budget_mib)
        return self.busy_spec(dataclasses.replace(spec, screen=Screen(
            precision=max(opts.screen_precision, opts.measure.precision), front=front,
            budget_mib=opts.budget_mib, best=best.throughput if best is not None else None)))

    def reuse(self, trial: optuna.Trial, previous: FrozenTrial) -> FrozenTrial:
        """Tells ``trial`` what ``previous`` measured for the same config."""
        rec.copy_measurement(trial, previous)
        self.outcome.reused += 1
        if previous.state != TrialState.COMPLETE:
            self.outcome.failed += 1
            return self.study.tell(trial, state=TrialState.FAIL)
        set_constraints(trial, memory_mib=previous.values[1], budget_mib=self.opts.budget_mib,
                        guarded=self.opts.guard.ratio is not None,
                        shortfall=TrialRecord.from_frozen(previous).guard_shortfall)
        return self.study.tell(trial, previous.values)

    def add_measured(self, of: FrozenTrial, record: TrialRecord, result: TrialResult,
                     values: list[float] | None = None) -> TrialRecord:
        """Stores a measurement of ``of``'s config (a control's, the confirmation's) as
        a finished trial of the study, with ``of``'s params and the constraints ``of``
        was told (its accuracy shortfall: the same config); ``values``: its objectives
        where not the result's. Returns it as stored."""
        opts = self.opts
        if not result.ok:
            return rec.add_finished(self.study, record, of=of, config_key=result.config.key())
        values = list(result.objectives()) if values is None else list(values)
        constraints, extra = constraint_values(
            memory_mib=values[1], budget_mib=opts.budget_mib,
            guarded=opts.guard.ratio is not None,
            shortfall=TrialRecord.from_frozen(of).guard_shortfall)
        if opts.guard.objective:
            values.append(of.values[2])
        return rec.add_finished(self.study, record, of=of, values=values,
                                constraints=constraints, config_key=record.config.key(), **extra)

    def control(self) -> bool:
        """Measures a control when one is due while trials remain
        (:meth:`autotune.study._confirm.Schedule.control_due`), stores it; whether it did."""
        opts, study = self.opts, self.study
        if self.counted() >= opts.max_trials:
            return False
        with study_lock(opts.storage, study.study_name):
            of = self.schedule.control_due()
        if of is None:
            return False
        trial_dir = opts.study_dir / "trials" / f"control-{int(time.time())}"
        result, where, _ = self.measure(
            self.baseline, trial_dir, f"a control of study {study.study_name}",
            self.clock.reserve(ahead=1),
            self.busy_spec(self.schedule.control_spec(rec.records(study), of.number)))
        record = confirmation.record_of(result, where, role="control", paired=(
            confirmation.paired_figure(study, result, where["measured_at"][0])))
        self.outcome.controls += 1
        self.finished(self.add_measured(of, record, result))
        return True

    # -- guarding and telling -------------------------------------------------------

    def tell(self, trial: optuna.Trial, config: TrialConfig, values: list[float],
             training: dict, screened: bool = False) -> FrozenTrial:
        """Judges the trial's guard training (``training``, from its own process) or
        trains it where it must, sets the constraints and tells the objectives."""
        opts, study = self.opts, self.study
        try:
            with Heartbeat(_optuna.storage(study), _optuna.trial_id(trial)):  # guard training is long
                verdict = self.guard(trial, config, values, training, screened)
        except GuardError as exc:
            self.outcome.failed += 1
            rec.store(trial, fail_reason=f"accuracy guard training failed: {exc}")
            frozen = study.tell(trial, state=TrialState.FAIL)
            if rec.is_baseline(trial):  # no budget, no reference: cannot go on
                raise GuardError(f"the baseline (trial {trial.number}) could not be trained "
                                 f"for the accuracy guard: {exc}; see "
                                 f"{opts.study_dir / 'guard'}") from exc
            return frozen
        if verdict is not None and opts.guard.objective:
            values.append(verdict.val_metric)
        set_constraints(trial, memory_mib=values[1], budget_mib=opts.budget_mib,
                        guarded=opts.guard.ratio is not None,
                        shortfall=verdict.shortfall if verdict else None)
        return study.tell(trial, values)

    def guard(self, trial: optuna.Trial, config: TrialConfig, values: list[float],
              training: dict, screened: bool = False) -> Verdict | None:
        """The trial's guard verdict where it must have one: the baseline (trained for
        E epochs: it sets the budget), every trial with accuracy as an objective, and
        otherwise a trial that would join the feasible front (never a screened one: it
        cannot). Its own process trained it after the window (``training``); where it
        did not (the front changed meanwhile, or the budget was not set yet), a
        process of its own trains it now. None: not trained."""
        opts, study, guard = self.opts, self.study, self.opts.guard
        if not guard.active:
            return None
        if rec.is_baseline(trial):
            verdict, ref = guards.reference_of(
                guards.trained(training), training["guard_s"], trial.number, config,
                guard) if training else guards.reference(opts, trial.number, config, guard,
                                                         self.trial_env)
            rec.store_study(study, guard=ref)
        elif training:
            verdict = guards.verdict_of(guards.trained(training), training["guard_s"], guard,
                                        StudyRecord.from_study(study).guard)
        else:
            if not self.guard_due(trial, values, screened):
                return None
            ref = guards.budget(lambda: StudyRecord.from_study(study).guard,
                                lambda: _baseline_pending(study))
            verdict = guards.check(opts, trial.number, config, guard, ref, self.trial_env)
        rec.store_verdict(trial, verdict, config)
        self.outcome.guarded += 1
        self.outcome.guard_violations += verdict.shortfall > 0
        self.outcome.guard_s += verdict.guard_s
        return verdict

    def guard_due(self, trial: optuna.Trial, values: list[float], screened: bool) -> bool:
        """Whether a trial its own process did not train for the guard is trained now:
        always where accuracy is an objective, else where it would join the feasible
        front (never a screened one: it cannot)."""
        if self.opts.guard.objective:
            return True
        if screened:
            return False
        budget = self.opts.budget_mib
        if budget is not None and values[1] > budget:
            return False
        candidate = Point(trial.number, values[0], values[1])
        return not any(p.feasible and p.dominates(candidate) for p in rec.points(self.study))

    # -- confirming -----------------------------------------------------------------

    def confirm(self) -> None:
        """The confirmation stage (:class:`autotune.study._confirm.Confirmation`),
        announced by a note, and why it was cut short if it was."""
        opts, outcome = self.opts, self.outcome
        first, outcome.confirm_cut = confirmation.Confirmation(self).run(self.announce)
        if outcome.confirm_cut:
            self.note(f"confirmation cut short: {outcome.confirm_cut}; the front's figures "
                      "not measured by it are the search's own, unconfirmed")
        elif first is None and opts.confirm and not self.schedule.candidates():
            self.note("confirmation: none, nothing to confirm (no config beside the baseline "
                      "on the front)")

    def confirmed(self, record: TrialRecord) -> None:
        """A confirmation measurement was stored."""
        self.outcome.confirmed += 1
        self.finished(record)

    def announce(self, plan: confirmation.Plan) -> None:
        """The line that starts a confirmation: what it measures, how, and about how
        long it takes."""
        clock = self.clock
        clock.confirming = clock.confirmed + plan.measurements
        names = ", ".join(f"#{t.number}" + (" (baseline)" if rec.is_baseline(t) else "")
                          for t in plan.trials)
        what = self.follow_up_words(plan) if plan.follow_up else ""
        what = f"resumed where it was stopped: {what}" if plan.resumed else what
        fewer = " (all that --budget holds)" if plan.rounds < plan.asked else ""
        windows = f" ({self.windows.why})" if self.windows.why else ""
        how = f"pairs of short windows in one process{windows}" if plan.paired else \
            f"{plural(plan.rounds, 'interleaved round')}{fewer}"
        seconds = self.schedule.plan_s(plan, clock.overhead())
        self.note(f"confirmation: {what}{how} of {names}, about {clock_text(seconds)}")

    @staticmethod
    def follow_up_words(plan: confirmation.Plan) -> str:
        """Why a follow-up confirmation measures what it does
        (:func:`autotune.study._confirm.follow_up`)."""
        short = ", ".join(f"#{t.number}" for t in plan.trials[1:] if t.number != plan.knee)
        why = [f"the {plan.moved} moved to #{plan.knee}, which the confirmation did not "
               "measure"] if plan.knee is not None else []
        why += [f"{short} ran out of time or pairs before their precision, faster than "
                "the default would be"] if short else []
        return "; ".join(why) + ": "


def _with_dropped(result: TrialResult, dropped: list[dict]) -> TrialResult:
    """``result`` with the loads of the windows this trial measured before it, and
    dropped, ahead of its own dropped ones (``WindowStats.remeasured``), so that its
    line and record still name what disturbed them."""
    if not dropped:
        return result
    return dataclasses.replace(result, window=dataclasses.replace(
        result.window, remeasured=[*dropped, *result.window.remeasured]))


def measured_configs(study: optuna.Study) -> set[str]:
    """The distinct configs of the space that the search measured (finished trials,
    not repeats; the baseline where it lies inside the space)."""
    return {rec.config_key(t) for t in study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        if _new_point(TrialRecord.from_frozen(t))}


def _new_point(r: TrialRecord) -> bool:
    return r.search_point and r.in_space and r.reused_from is None and not r.not_measured


def _previous(study: optuna.Study, key: str) -> FrozenTrial | None:
    """The earlier measurement of the config ``key``, where there is one."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        r = TrialRecord.from_frozen(t)
        if r.config_key == key and not r.not_measured and \
                r.reused_from is None and r.search_point:
            return t
    return None


def _baseline_pending(study: optuna.Study) -> bool:
    """Whether a baseline trial is running (in another worker) and may yet set the
    budget. A merely queued one is not waited for: this worker might be the one to
    run it."""
    return any(r.baseline and r.state == "running" for r in rec.records(study))
