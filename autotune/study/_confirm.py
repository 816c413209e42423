"""What a search measures beside its trials: controls and the confirmation.

The measuring itself is the search's (:meth:`autotune.study._search.Search.measure`);
this module decides when and what (:class:`Schedule`, which the search and its clock
hold). A *control* measures the baseline's config again once the search has run
``control_every`` seconds or ``control_every_trials`` measured trials since the
last reference, so that every trial's speed-up is paired with a baseline measured
close in time (:mod:`autotune.study._paired`). The *confirmation* ends a search: the
front's ``confirm`` fastest configs, the knee and the baseline are measured again.
On a CPU (``--confirm-by pairs``) that is one paired trial (:meth:`Confirmation.paired`,
:mod:`autotune.trial._pairs`): all of them in one process, in short alternating
windows, each candidate's pairs decided by the comparison engine. Otherwise they are
interleaved in ``confirm_rounds`` rounds (A B C D, A B C D, ...; more, with looser
windows, beside candidates far ahead of the baseline), each measurement a fresh trial
process, then more rounds for the candidates still wider than --confirm-precision
that could get there (:func:`still_open`); each round is a pair of the comparison
engine (:mod:`autotune.study._paired`), and a run stopped by an interrupt goes on
where it stopped the next time. Confirmed figures can move the front: where the knee then
falls on a config the confirmation did not measure, a follow-up confirmation
measures it against the baseline, in as many rounds (at most :data:`FOLLOW_UPS`),
with the faster configs whose time or pairs ran out before their precision.
Both are stored as trials of the study (role ``control`` or ``confirmation``) that count
against no budget and never join the front themselves.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Protocol

import optuna
from optuna.trial import FrozenTrial

from autotune.compare import CONFIDENCE, MIN_PAIRS, Rule, boundary, z_quantile
from autotune.trial import WINDOW_S, Known, PairSpec, TrialResult, WindowStats, \
    rate_half_width
from autotune.specs import MeasureSpec
from autotune.study import _records as rec
from autotune.study._front import FrontRow, front_rows
from autotune.study._options import SearchOptions
from autotune.study._paired import MARGIN, RAN_OUT, Confirmed, baseline_of, confirmed, \
    latest_reference, pair
from autotune.study._records import StudyRecord, TrialRecord
from autotune.study._recovery import gone, this_worker
from autotune.study._window_length import Choice
from autotune.storage import study_lock

FOLLOW_UPS = 1  # confirmations of a knee that moved onto an unconfirmed config
# A round's measurement that stayed disturbed through its trial's own re-measurements
# (MeasureSpec.busy_retries) is measured again in a fresh process this many times; one
# still disturbed is left out of the confirmed figures (_paired.confirmed)
DISTURBED_AGAIN = 1
# A candidate whose speed-up interval is still wider than --confirm-precision after
# the rounds asked is measured in up to this many more rounds, while the budget holds
# them, unless it is known to be slower than another candidate (racing: its interval's
# high end under the other's low end), which drops it. Its interval is a confidence
# sequence (autotune.compare), valid at every round: more rounds narrow it honestly.
EXTRA_ROUNDS = 5
# ... while the rounds' spread so far, carried to the last of them, leaves its interval
# within this many times --confirm-precision (more rounds may agree better than the
# first did; a spread far wider would not narrow enough however many ran)
REACH = 1.5
# Every candidate at least FAR_AHEAD times the baseline: the confirmation measures the
# baseline to LOOSE_PRECISION only, the candidates to LOOSE_CANDIDATE, in FAR_ROUNDS
# rounds at least. A 3x ratio is plain at +-20%, and a slow baseline's precise window
# would take most of a GPU search's confirmation; what decides whether the speed-up is
# known to --confirm-precision is then the drift between rounds, which only rounds
# average out (docs/benchmarks.md, "The confirmation's loose windows").
FAR_AHEAD = 3.0
LOOSE_PRECISION = 0.20
LOOSE_CANDIDATE = 0.10
FAR_ROUNDS = 5
Z95 = z_quantile(CONFIDENCE)  # a 95% half-width over a standard deviation
# split_precision: rounds that vary less than this (a log variance: 1.4% sd between
# processes) leave the search's precision as it is; and no window is asked to be
# looser than this
MIN_BETWEEN_VARIANCE = 0.014 ** 2
MAX_SPLIT_PRECISION = 0.25
# A paired confirmation (--confirm-by pairs): its pairs run this long at most (the
# warm-ups aside), each candidate up to MAX_PAIRS; one that --budget leaves less than
# MIN_PAIRED_S for is not started. Where a pair's log ratio spreads by 0.2 (a noisy
# machine's: docs/measurement.md), ±10% takes about 46 pairs; a quiet one decides
# in 10 to 20, and stops there
PAIRED_MAX_S = 90.0
MAX_PAIRS = 60
MIN_PAIRED_S = 10.0
PAIR_S = 2.5  # a pair's seconds, for the plan's estimate: two windows of about 0.5 s,
# their untimed steps and the drain, at the quick start's pace
EXPECTED_PAIRS = 10  # ... and the pairs a candidate takes, for that estimate
Left = Callable[[], "float | None"]  # the seconds left of --budget (None: no budget)


def pairs_rule(precision: float, rounds: int = MIN_PAIRS) -> Rule:
    """The engine's rule for a paired confirmation's candidates at ``precision``
    (``--confirm-precision``), ``rounds`` (``--confirm-rounds``) its least pairs. A
    candidate's pairs stop once it is decided, or once its interval is within the
    precision and places it against the reference with the precision as the margin
    (:meth:`autotune.compare.Comparison.placed`, as the front places two configs)."""
    return Rule(margin=MARGIN, min_pairs=max(rounds, MIN_PAIRS), max_pairs=MAX_PAIRS,
                precision=precision)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When and what a search measures beside its trials, read from its ``study``
    under its options: whether a control is due, the configs a confirmation would
    take now, and the seconds it and a plan of it take; and how it measures them,
    which its options alone decide (a control's spec, the precisions and rounds a
    confirmation asks, the rounds a budget holds: these read the records they are
    given, not the study). ``between``: how far the ratio of two windows varies on
    this machine beyond their own intervals, as a standard deviation of its log (the
    search's :meth:`Search.between_windows`; 0 where unknown), which widens what the
    search could not tell apart (:func:`contenders`)."""

    opts: SearchOptions
    study: optuna.Study
    between: Callable[[], float] = lambda: 0.0

    def control_due(self) -> FrozenTrial | None:
        """Under the study's lock: the baseline trial when a control is due (and then
        claims it, so no other worker measures one too), else None. Due once the
        search has run ``control_every`` or measured ``control_every_trials`` trials
        since the latest reference (or claim)."""
        opts, study = self.opts, self.study
        baseline_no = StudyRecord.from_study(study).baseline
        trials = rec.records(study)
        if baseline_no is None or not trials[baseline_no].complete:
            return None
        refs = [t for t in trials if t.reference and t.complete and t.measured_at]
        since = max([t.measured_at[1] for t in refs] +
                    [StudyRecord.from_study(study).control_claimed_at])
        measured = sum(1 for t in trials if t.counts and t.measured_at and
                       t.measured_at[1] > since)
        if time.time() - since < opts.control_every and measured < opts.control_every_trials:
            return None
        rec.store_study(study, control_claimed_at=time.time())
        return study.get_trials(deepcopy=False)[baseline_no]

    def candidates(self, records: list[TrialRecord] | None = None) -> list[int]:
        """The trials to confirm: the search front's ``confirm`` fastest besides the
        baseline, its knee and its default pick, up to ``confirm`` more that the search
        could not tell from its fastest (:func:`contenders`), and the baseline first.
        Empty when there is nothing to compare. ``records``: the study's, where the
        caller has read them."""
        opts, study = self.opts, self.study
        s = StudyRecord.from_study(study)
        trials, rows = _search_front(study, rec.records(study) if records is None else records)
        picked = [r.trial for r in rows[:opts.confirm]] + \
            [r.trial for r in rows if "knee" in r.marks or r.default] + \
            contenders(trials, rows, s.budget_mib, self.between())[:opts.confirm]
        picked = [n for n in dict.fromkeys(picked) if n != s.baseline]
        if s.baseline is None or not picked or not any(t.number == s.baseline and t.complete
                                                       for t in trials):
            return []
        return [s.baseline, *picked]

    def expected_s(self, extra_s: float = 0.0, overhead_s: float = 0.0) -> float:
        """The seconds the confirmation of the study's front as it stands takes, each
        config measured as long as its own trial took (the baseline at the precision
        :meth:`baseline_precision` asks) and stored in ``overhead_s``; ``extra_s``: a
        candidate more, of that many seconds, where the front has room for one (a trial
        about to run may join it)."""
        opts, study = self.opts, self.study
        if opts.confirm == 0:
            return 0.0
        trials = rec.records(study)
        numbers = self.candidates(trials)
        baseline = StudyRecord.from_study(study).baseline
        if not numbers:
            if not extra_s or baseline is None or not trials[baseline].complete:
                return 0.0
            numbers = [baseline]
        if opts.paired_confirmation:
            more = EXPECTED_PAIRS * PAIR_S if extra_s else 0.0
            return paired_s(trials, numbers, overhead_s) + more
        room = len(numbers) - 1 < opts.confirm + 2  # the fastest N, the knee, the default
        extra = extra_s if room else 0.0
        per_round, base_s = self.seconds(trials, numbers, extra, overhead_s)
        return self.rounds_asked(trials, numbers) * per_round + base_s

    def start_s(self) -> float:
        """The least a confirmation of the front as it stands needs to start: a paired
        one its warm-ups and :data:`MIN_PAIRED_S` of pairs (:meth:`Confirmation.paired`
        starts none in less); rounds are fitted to any time (:meth:`fitted`), 0."""
        trials, baseline = rec.records(self.study), StudyRecord.from_study(self.study).baseline
        numbers = self.candidates(trials) or ([] if baseline is None else [baseline])
        if not (self.opts.confirm and self.opts.paired_confirmation and numbers):
            return 0.0
        return _paired_start_s(trials, numbers)

    def plan_s(self, the_plan: Plan, overhead_s: float = 0.0) -> float:
        """The seconds ``the_plan`` takes, as :meth:`expected_s` counts them."""
        trials, numbers = rec.records(self.study), [t.number for t in the_plan.trials]
        if the_plan.paired:
            return paired_s(trials, numbers, overhead_s, the_plan.window_s)
        per_round, base_s = self.seconds(trials, numbers, overhead_s=overhead_s)
        return the_plan.rounds * per_round + base_s

    def control_spec(self, trials: list[TrialRecord], baseline_no: int) -> MeasureSpec:
        """How a control measures the baseline: as the confirmation does beside the
        fastest config so far (:meth:`baseline_precision`), loosely where that one is
        :data:`FAR_AHEAD` of it. A drift of a few percent in a baseline 20 times slower
        than the front moves no decision, and on a GPU a control at the search's
        precision ran its whole window out (docs/gpu.md)."""
        fastest = rec.fastest_fitting(trials)
        numbers = [baseline_no] + ([fastest.number] if fastest is not None else [])
        return dataclasses.replace(self.opts.measure,
                                   precision=self.baseline_precision(trials, numbers))

    def baseline_precision(self, trials: list[TrialRecord], numbers: list[int]) -> float:
        """The precision the confirmation asks of the baseline (``numbers[0]``) beside the
        candidates (``numbers[1:]``): the search's, or :data:`LOOSE_PRECISION` where they
        are :func:`far_ahead` of it."""
        if far_ahead(trials, numbers):
            return max(self.opts.measure.precision, LOOSE_PRECISION)
        return self.opts.measure.precision

    def candidate_precision(self, trials: list[TrialRecord], numbers: list[int]
                            ) -> float | None:
        """The precision the confirmation asks of each candidate: :data:`LOOSE_CANDIDATE`
        where they are :func:`far_ahead` of the baseline, else None (the search's, each
        measured as long as its own trial took)."""
        if far_ahead(trials, numbers):
            return max(self.opts.measure.precision, LOOSE_CANDIDATE)
        return None

    def rounds_asked(self, trials: list[TrialRecord], numbers: list[int]) -> int:
        """The confirmation's rounds: ``--confirm-rounds``, and :data:`FAR_ROUNDS` at least
        where the candidates are :func:`far_ahead` of the baseline. On a GPU such configs
        and a CPU-sampling baseline drift between rounds (docs/gpu.md), and a t-interval
        on three rounds is twice as wide as one on five (4.3 / √3 against 2.8 / √5): the
        loose windows pay for the two more."""
        if far_ahead(trials, numbers):
            return max(self.opts.confirm_rounds, FAR_ROUNDS)
        return self.opts.confirm_rounds

    def seconds(self, trials: list[TrialRecord], numbers: list[int], extra_s: float = 0.0,
                overhead_s: float = 0.0) -> tuple[float, float]:
        """(a round, the baseline's measurement) of a confirmation of ``numbers`` (the
        baseline first), with ``extra_s`` for one candidate more; ``overhead_s``: what
        storing a measurement takes beside it, each."""
        startup, each = _startup_s(trials), self.candidate_precision(trials, numbers)
        base_s = self.again_s(trials[numbers[0]], self.baseline_precision(trials, numbers),
                              startup, overhead_s)
        return base_s + extra_s + sum(self.again_s(trials[n], each, startup, overhead_s)
                                      for n in numbers[1:]), base_s

    def again_s(self, record: TrialRecord, precision: float | None, startup_s: float | None,
                overhead_s: float) -> float:
        """Measuring ``record``'s config again to ``precision`` (:func:`measurement_s`),
        and storing it."""
        return overhead_s + measurement_s(record, precision, self.opts.measure.min_window_s,
                                          startup_s)

    def fitted(self, trials: list[TrialRecord], numbers: list[int], rest: float | None,
               overhead_s: float = 0.0) -> tuple[list[int], int]:
        """The candidates (``numbers``, the baseline first) and rounds that ``rest``
        seconds of the budget hold, closing baseline included: fewer rounds first (one
        at least; :data:`FAR_ROUNDS` beside candidates :func:`far_ahead` of the
        baseline, whose interval only rounds narrow), then fewer candidates (the last,
        the knee or the slowest, first; the fastest stays)."""
        if rest is None:
            return numbers, self.rounds_asked(trials, numbers)
        while True:
            rounds = self.rounds_asked(trials, numbers)
            least = FAR_ROUNDS if far_ahead(trials, numbers) else 1
            per_round, base_s = self.seconds(trials, numbers, overhead_s=overhead_s)
            fit = int((rest - base_s) // per_round) if per_round > 0 else rounds
            if fit >= least or len(numbers) <= 2:
                return numbers, max(1, min(rounds, fit))
            numbers = numbers[:-1]


def paired_figure(study: optuna.Study, result: TrialResult, started: float) -> dict | None:
    """What a trial stores as its paired speed-up: ``result``'s ratio to the
    reference measured last before ``started`` (None: it failed, or none was)."""
    ref = latest_reference(rec.records(study), started)
    if not result.ok or ref is None:
        return None
    return pair(result.throughput, result.window.precision, ref)


def record_of(result: TrialResult, where: dict, **marks: Any) -> TrialRecord:
    """A control's or confirmation's measurement as a record, with ``marks``."""
    return dataclasses.replace(TrialRecord.from_result(0, result, **where), **marks)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the confirmation will measure: the candidates' trials (the baseline
    first) in each of ``rounds`` rounds, then the baseline once more to close the
    last round."""

    run: int
    trials: tuple[FrozenTrial, ...]
    rounds: int
    asked: int  # the rounds asked (:meth:`Schedule.rounds_asked`), of which ``rounds`` fit
    resumed: bool = False  # a run stopped before its end, going on
    paired: bool = False  # one paired trial (autotune.trial._pairs), not rounds
    window_s: float = WINDOW_S  # a paired trial's windows (Searching.pair_windows)
    back_to: Known | None = None  # where window_s is a try: the known length's figures
    noise: float | None = None  # a pair's spread at window_s, known or guessed (Choice.noise)
    knee: int | None = None  # a follow-up's: the knee that moved onto an unmeasured config
    moved: str = "knee"  # ... or the default pick that did (follow_up)
    follow_up: bool = False  # a run after the first, for what the first did not confirm

    @property
    def measurements(self) -> int:
        return len(self.trials) if self.paired else self.rounds * len(self.trials) + 1

    def schedule(self) -> list[tuple[int, FrozenTrial]]:
        """(round, trial) in measuring order: A B C, A B C, ..., then A."""
        return [(r, t) for r in range(self.rounds) for t in self.trials] + \
            [(self.rounds, self.trials[0])]


def far_ahead(trials: list[TrialRecord], numbers: list[int]) -> bool:
    """Whether each candidate's search figure (``numbers[1:]``) is :data:`FAR_AHEAD`
    times the baseline's (``numbers[0]``) or more."""
    base = trials[numbers[0]].throughput
    ratios = [trials[n].throughput / base for n in numbers[1:]
              if base and trials[n].throughput]
    return bool(ratios) and min(ratios) >= FAR_AHEAD


def measurement_s(record: TrialRecord, precision: float | None = None,
                  min_window_s: float = 0.0, startup_s: float | None = None) -> float:
    """How long measuring ``record``'s config again takes: as long as its trial did,
    from its start to its result, with ``startup_s`` for its start-up where given (the
    run's first trial starts the fork server). At a ``precision`` looser than the one
    it reached, its window shrinks as the square of their ratio (a half-width falls
    as one over the root of the steps), to ``min_window_s``."""
    if not record.measured_at:
        return 0.0
    took = record.measured_at[1] - record.measured_at[0]
    if startup_s is not None and "startup" in record.phases_s:
        took += startup_s - record.phases_s["startup"]
    reached, window = record.window.precision, min(record.window.wall_s, took)
    if precision is None or not reached or precision <= reached:
        return max(took, 0.0)
    return max(took - window + max(window * (reached / precision) ** 2,
                                   min(min_window_s, window)), 0.0)


def _startup_s(trials: list[TrialRecord]) -> float | None:
    """A trial's typical start-up: the median over measured trials but the first."""
    starts = [t.phases_s["startup"] for t in trials[1:]
              if t.measured_at and "startup" in t.phases_s]
    return statistics.median_high(starts) if starts else None


def paired_s(trials: list[TrialRecord], numbers: list[int], overhead_s: float = 0.0,
             window_s: float = WINDOW_S) -> float:
    """The seconds a paired confirmation of ``numbers`` (the baseline first) takes
    about: :func:`_paired_fixed_s`, and :data:`EXPECTED_PAIRS` pairs of each candidate
    (:data:`PAIRED_MAX_S` at most), each pair two windows of ``window_s``."""
    pair_s = PAIR_S + 2 * (window_s - WINDOW_S)
    pairs = min(EXPECTED_PAIRS * pair_s * (len(numbers) - 1), PAIRED_MAX_S)
    return _paired_fixed_s(trials, numbers) + pairs + overhead_s * len(numbers)


def _paired_start_s(trials: list[TrialRecord], numbers: list[int]) -> float:
    """The least a paired confirmation of ``numbers`` needs to start: its warm-ups
    and :data:`MIN_PAIRED_S` of pairs (:meth:`Confirmation.paired` starts none in less)."""
    return _paired_fixed_s(trials, numbers) + MIN_PAIRED_S


def _too_short(rest: float | None, need: float) -> str:
    """Why a paired confirmation that needs ``need`` seconds to start
    (:func:`_paired_start_s`) cannot with ``rest`` seconds of ``--budget`` left (None:
    no budget); "" where it can."""
    if rest is None or rest >= need:
        return ""
    return (f"--budget left {max(rest, 0.0):.0f} s, less than a paired confirmation needs "
            f"to start (about {need:.0f} s: its warm-ups and {MIN_PAIRED_S:g} s of pairs)")


def _paired_fixed_s(trials: list[TrialRecord], numbers: list[int]) -> float:
    """What a paired trial of ``numbers`` takes besides its pairs: a trial's start-up
    and each config's warm-up as its trial took."""
    warm = sum(trials[n].phases_s.get("warmup", 0.0) for n in numbers)
    return (_startup_s(trials) or 0.0) + warm


def _search_front(study: optuna.Study, records: list[TrialRecord]
                  ) -> tuple[list[TrialRecord], list[FrontRow]]:
    """The search's own trials among the study's ``records`` (their figures, not the
    confirmation's) and the front they make, the baseline left out."""
    s = StudyRecord.from_study(study)
    trials = [t for t in records if t.search_point]
    return trials, [r for r in front_rows(trials, s.baseline, s.budget_mib,
                                           within=s.confirm_within) if r.trial != s.baseline]


def off_front(study: optuna.Study, records: list[TrialRecord], numbers: list[int]
              ) -> tuple[int, ...]:
    """The positions among the candidates (``numbers[1:]``, the baseline first) of
    configs off the search's front (of the study's ``records``): the contenders
    (:func:`contenders`)."""
    on_front = {r.trial for r in _search_front(study, records)[1]}
    return tuple(i for i, n in enumerate(numbers[1:]) if n not in on_front)


def contenders(trials: list[TrialRecord], rows: list[FrontRow],
               budget_mib: float | None, between: float = 0.0) -> list[int]:
    """The configs off the front (``rows``, fastest first) whose search figures
    could not tell them from its fastest, fastest first: their throughput's 95%
    interval reaches the fastest's, the gap between the two widened by ``between``
    (the log spread of two windows' ratio on this machine, beyond their own
    intervals: :class:`Schedule`) in quadrature. A config dominated by a slightly faster, leaner
    one is off the front by a difference inside its noise; the confirmation's pairs
    decide which of them is the faster (left out, the one the pairs measured may read
    slower than the other's search figure, and the default sits below a config
    nothing confirmed). Screened-out configs count too: racing stops a window once
    its best case is dominated by any front config, the slower leaner ones
    included, and one window that read low would drop the fastest config for good
    (docs/measurement.md, "Who is measured").

    Where the fastest was measured on a quiet machine, the DISTURBED windows (other
    processes took the cores, however often they were measured again, or the
    machine was said to stay busy) are compared among themselves, not with it: a
    window read a share of its rate that the load does not tell (a hypervisor's
    steal of a third of the cores read half), so those that reach the fastest of them
    come first, on or off the front."""
    if not rows or rows[0].precision is None:
        return []
    fastest, on_front = rows[0], {r.trial for r in rows}
    eligible = [t for t in trials if t.measured_point and not t.baseline and
                t.fits(budget_mib) and t.precision is not None and t.throughput]

    def reaches(t: TrialRecord, rate: float, precision: float) -> bool:
        gap = math.log(rate / t.throughput)
        own = math.log1p(t.precision) - math.log1p(-min(precision, 0.99))
        return gap <= math.hypot(own, Z95 * between)
    near = [t for t in eligible if t.number not in on_front and
            reaches(t, fastest.throughput, fastest.precision)]
    slowed = [t for t in eligible if t.disturbed]
    if any(t.number == fastest.trial for t in slowed) or not slowed:
        return [t.number for t in sorted(near, key=lambda t: -t.throughput)]
    lead = max(slowed, key=lambda t: t.throughput)
    slowed = [t for t in slowed if reaches(t, lead.throughput, lead.precision)]
    return list(dict.fromkeys(t.number for t in [*sorted(slowed, key=lambda t: -t.throughput),
                                                  *sorted(near, key=lambda t: -t.throughput)]))


def follow_up(study: optuna.Study) -> tuple[tuple[int, str] | None, list[int]]:
    """What a follow-up confirmation measures against the baseline, once confirmed
    figures are in: the front's knee, or else its default pick, where the latest
    confirmation did not measure it; and the configs whose speed-up is above the
    one the default would fall to (that knee or default, else the fastest confirmed
    config) that the confirmation left unconfirmed for want of time or pairs
    (:data:`RAN_OUT`), not for being slower, so that a stretch of busy pairs that
    left them too wide does not hand the default to a slower config. Speed-ups, not
    rates: each is taken against a baseline measured beside it, while the rates of
    pairs the hypervisor's steal slowed read under the search's, and a config no
    confirmation measured could become the default above faster ones (the case,
    measured: docs/measurement.md). The pick that moved is given with its name,
    "knee" or "default pick"; (None, []) where there is neither."""
    s = StudyRecord.from_study(study)
    rows = [r for r in front_rows(rec.records(study), s.baseline, s.budget_mib,
                                  within=s.confirm_within) if r.trial != s.baseline]

    def unmeasured(mark: Callable[[FrontRow], bool]) -> FrontRow | None:
        return next((r for r in rows if mark(r) and r.confirmed is None and
                     any(m.startswith("unconfirmed") for m in r.marks)), None)
    knee = unmeasured(lambda r: "knee" in r.marks)
    pick = knee or unmeasured(lambda r: r.default)
    moved = None if pick is None else (pick.trial, "knee" if pick is knee else "default pick")
    floor = pick or next((r for r in rows if r.default and r.confirmation and
                          r.confirmation.startswith("confirmed")), None)
    if floor is None:
        return None, []
    short = [] if floor.speedup is None else [
        r.trial for r in rows if r.speedup is not None and r.speedup > floor.speedup and
        r.confirmed and r.confirmed.get("stopped") in RAN_OUT and
        r.confirmation.startswith("unconfirmed")]
    return moved, short


def unfinished(study: optuna.Study, grace_s: float | None = None) -> dict | None:
    """The study's confirmation run that was stopped before its end, as stored: by an
    interrupt (Ctrl-C, SIGTERM: ``stopped``) or a crash (still ``running``); None
    where none was. With ``grace_s``, a ``running`` one only where its search process
    is gone (:func:`autotune.study._recovery.gone`: another worker may be running
    it). Runs stored before their state was kept count as finished."""
    runs = StudyRecord.from_study(study).confirmations
    run = runs[-1] if runs and runs[-1].get("state") in ("running", "stopped") else None
    if run is None or grace_s is None or run["state"] == "stopped":
        return run
    return run if gone(run.get("worker", {}), run.get("beat", 0.0), grace_s) else None


def interrupted_note(study: optuna.Study) -> str | None:
    """What an interrupted search was doing, where it was confirming (None: it was
    not): for the command's last line."""
    run = unfinished(study)
    if run is None:
        return None
    measured = len(_done_already(study, run["run"]))
    return (f"the confirmation was stopped after {measured} of its measurements; the "
            "measurement under way is dropped, and the same command goes on from there")


def _resumed(study: optuna.Study, run: dict) -> Plan:
    """The plan of an unfinished confirmation run, to go on where it stopped (a
    follow-up's with the pick that moved, which its announcement names); this worker
    claims it."""
    _update_run(study, run["run"], worker=this_worker(), beat=time.time(), state="running")
    frozen = study.get_trials(deepcopy=False)
    return Plan(run["run"], tuple(frozen[n] for n in run["candidates"]), run["rounds"],
                run["asked"], resumed=True, paired=run.get("paired", False),
                knee=run.get("knee"), moved=run.get("moved", "knee"),
                follow_up="follow_up_of" in run)


def _finish(study: optuna.Study, run: int, cut: str, state: str = "done") -> None:
    """Under the study's lock: marks confirmation ``run`` finished (and why it stopped
    early, if it did), or ``stopped`` by an interrupt, to be resumed."""
    _update_run(study, run, state=state, **({"cut": cut} if cut else {}))


def _update_run(study: optuna.Study, run: int, **fields: Any) -> None:
    """Stores ``fields`` into confirmation ``run``'s record (under the study's lock)."""
    runs = [dict(r) for r in StudyRecord.from_study(study).confirmations]
    runs[run].update(fields)
    rec.store_study(study, confirmations=runs)


def _done_already(study: optuna.Study, run: int) -> set[tuple[int, int]]:
    """(round, config's trial) of the measurements confirmation ``run`` stored."""
    return {(t.confirm["round"], t.confirm["of"]) for t in rec.records(study)
            if t.confirm is not None and t.confirm["run"] == run and t.complete}


def split_precision(trials: list[TrialRecord], run: int, number: int) -> float | None:
    """The window precision at which confirmation ``run`` measures config ``number``
    from its third round on, split between windows and rounds by the variance
    measured at each level on this machine (Kalibera and Jones, "Rigorous
    benchmarking in reasonable time", 2013). A round costs a measurement's fixed
    seconds ``c`` (start-up, warm-up, storing) and its window's ``T``; its ratio's
    variance is the between-process part ``s2`` (the rounds' spread less what their
    windows explain) plus the window's ``k / T`` (``k``: a window's variance times
    its length). Their product is least at ``T = sqrt(c k / s2)``: a longer window
    buys a precision that the next round's process throws away. None before two
    rounds, or where the rounds vary no more than their windows do (then longer
    windows pay, and the search's precision stands)."""
    baseline = baseline_of(trials)
    figures = [c for n, c in confirmed(trials, run).items() if c.rounds >= 2 and
               c.interval is not None and n != baseline]
    mine = [t for t in trials if t.confirm is not None and t.confirm["run"] == run and
            t.complete and t.window.precision and t.measured_at]
    own = [t for t in mine if t.confirm["of"] == number]
    if not figures or not own:
        return None
    base = [t.window.precision for t in mine if t.confirm["of"] == baseline]
    if not base:
        return None
    windows = _WindowVariance({t.number: t.window.precision for t in mine},
                              statistics.median(base))
    between = statistics.fmean(max(_log_variance(c.ratios) - windows(c), 0.0)
                               for c in figures) / 2  # a ratio's: two configs' processes
    if between < MIN_BETWEEN_VARIANCE:
        return None
    fixed = statistics.median(t.measured_at[1] - t.measured_at[0] - t.window.wall_s
                              for t in mine)
    k = statistics.median((t.window.precision / Z95) ** 2 * t.window.wall_s for t in own)
    best_s = math.sqrt(max(fixed, 0.1) * k / between)
    return min(Z95 * math.sqrt(k / best_s), MAX_SPLIT_PRECISION)


def _log_variance(ratios: tuple[float, ...]) -> float:
    return statistics.variance(math.log(r) for r in ratios)


@dataclasses.dataclass(frozen=True)
class _WindowVariance:
    """The variance of a candidate's log ratios that its windows explain: its own
    windows' (``precisions``, by trial) and its rounds' baselines' (``base``), each a
    95% half-width."""

    precisions: dict[int, float]
    base: float

    def __call__(self, figure: Confirmed) -> float:
        return statistics.fmean((self.precisions.get(n, self.base) / Z95) ** 2 +
                                (self.base / Z95) ** 2 for n in figure.measurements)


def still_open(figures: dict[int, Confirmed], numbers: list[int], within: float,
               last: int) -> list[int]:
    """The candidates (``numbers``) whose confirmation goes on: measured, with a
    speed-up interval wider than ``within``, not known to be slower than another
    candidate (their intervals apart: racing drops it), and whose rounds could still
    bring it within ``within`` by round ``last`` (:func:`reachable`)."""
    out = []
    for n in numbers:
        c = figures.get(n)
        if c is None or c.interval is None or c.interval <= within:
            continue
        if any(c.bounds()[1] < other.bounds()[0] for m, other in figures.items()
               if m != n and m in numbers and other.interval is not None):
            continue  # slower than another: it cannot be the fastest, its place is known
        if reachable(c, within, last):
            out.append(n)
    return out


def reachable(figure: Confirmed, within: float, last: int) -> bool:
    """Whether ``figure``'s interval could narrow to ``within`` by round ``last``: its
    rounds' spread so far, carried to that many rounds by the engine's boundary, is
    within :data:`REACH` times ``within``. Rounds that disagree more (a baseline whose
    speed varies a third between processes) would not confirm it however many are
    run: the confirmation stops, and says why."""
    spread = math.log1p(figure.interval) / boundary(figure.rounds)
    return math.expm1(spread * boundary(last)) <= REACH * within


class Searching(Protocol):
    """What a confirmation uses of the search it ends
    (:class:`autotune.study._search.Search`)."""

    opts: SearchOptions
    study: optuna.Study
    schedule: Schedule  # when and what it measures beside its trials, and how

    def budget_left(self) -> float | None:
        """The seconds left of ``--budget`` (None: no budget)."""

    def overhead(self) -> float:
        """What storing a measurement typically takes in this run."""

    def pair_windows(self) -> Choice:
        """A paired confirmation's windows, from a look at the machine's load now (its
        threads set for that load too)."""

    def measure(self, config: Any, trial_dir: Any, who: str, reserve_s: float = 0.0,
                spec: MeasureSpec | None = None, pairs: PairSpec | None = None
                ) -> tuple[TrialResult, dict, bool]:
        """Measures a config in its own process (or a paired trial)."""

    def add_measured(self, of: FrozenTrial, record: TrialRecord, result: TrialResult,
                     values: list[float] | None = None) -> TrialRecord:
        """Stores a measurement of ``of``'s config as a finished trial."""

    def confirmed(self, record: TrialRecord) -> None:
        """A confirmation measurement was stored."""

    def pairs_measured(self, result: TrialResult) -> None:
        """A paired confirmation's trial ended with ``result``."""


class Confirmation:
    """The confirmation of ``search``'s front, with its options, study, clock and
    measurements: one paired trial on a CPU, else interleaved rounds of fresh trial
    processes; then its follow-ups while the knee moves. Each measurement is stored
    as it is taken and handed to the search."""

    def __init__(self, search: Searching) -> None:
        self.search, self.opts, self.study = search, search.opts, search.study
        self.schedule = search.schedule
        self.left: Left = search.budget_left
        self.overhead_s = search.overhead()

    def run(self, on_plan: Callable[[Plan], None] | None = None) -> tuple[Plan | None, str]:
        """Runs the confirmation, if one is due, then its follow-ups while the knee
        moves onto a config it did not measure. Returns the first plan and why it
        stopped early ("" when it ran all it planned): the budget would run out
        before the next round ends. ``on_plan``: called with each plan as it starts."""
        opts, study = self.opts, self.study
        with study_lock(opts.storage, study.study_name):
            first = self.plan(self.left())
        the_plan, cut, windows = first, "", None  # the load is looked at once, if needed
        for _ in range(FOLLOW_UPS + 1):
            if the_plan is None:
                break
            cut = self.cannot_start(the_plan)  # said as cut short, not announced
            if windows is None and the_plan.paired and not cut:
                windows = self.search.pair_windows()
            if windows is not None:
                the_plan = dataclasses.replace(
                    the_plan, window_s=windows.window_s, back_to=windows.back_to,
                    noise=windows.noise)
            if on_plan is not None and not cut:
                on_plan(the_plan)
            try:
                cut = cut or (self.paired(the_plan) if the_plan.paired else
                              self.rounds(the_plan))
            except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the next run goes on from here
                with study_lock(opts.storage, study.study_name):
                    _finish(study, the_plan.run, "", state="stopped")
                raise
            with study_lock(opts.storage, study.study_name):
                _finish(study, the_plan.run, cut)
            moved, short = (None, []) if cut else follow_up(study)
            if moved is None and not short:
                break
            knee, which = moved or (None, "knee")
            with study_lock(opts.storage, study.study_name):
                the_plan = self.claim([the_plan.trials[0].number,
                                       *([knee] if knee is not None else []), *short],
                                      None if the_plan.paired else self.left(),
                                      follow_up_of=the_plan.run, knee=knee, moved=which,
                                      **({"paired": True} if the_plan.paired else {}))
        return first, cut

    def plan(self, rest: float | None = None) -> Plan | None:
        """Under the study's lock: the confirmation this worker runs now, claimed so
        that no other worker runs it too; None when it is off, nothing is to be
        confirmed, search trials are still running elsewhere, or a confirmation
        started after the last search trial ended. ``rest``: the budget's seconds
        left, which the plan's rounds and candidates are :meth:`Schedule.fitted` to."""
        opts, study = self.opts, self.study
        if opts.confirm == 0:
            return None
        stopped = unfinished(study, opts.grace_period)
        if stopped is not None:  # stopped in its rounds: it goes on where it stopped
            return _resumed(study, stopped)
        search = [t for t in rec.records(study) if t.search_point and t.reused_from is None]
        if any(t.state == "running" for t in search):
            return None
        runs = StudyRecord.from_study(study).confirmations
        last_end = max((t.measured_at[1] for t in search if t.measured_at), default=0.0)
        if runs and runs[-1]["started"] > last_end:
            return None
        numbers = self.schedule.candidates()
        if not numbers:
            return None
        if opts.paired_confirmation:
            return self.claim(numbers, None, paired=True)
        return self.claim(numbers, rest)

    def claim(self, numbers: list[int], rest: float | None = None, **extra: Any) -> Plan:
        """Stores a new confirmation run of ``numbers`` (its rounds :meth:`Schedule.fitted` to
        ``rest``; ``extra``: more of its fields, ``paired=True`` for a paired one) and
        returns its plan."""
        opts, study = self.opts, self.study
        trials = rec.records(study)
        numbers, rounds = self.schedule.fitted(trials, numbers, rest, self.overhead_s)
        asked = self.schedule.rounds_asked(trials, numbers)
        runs = StudyRecord.from_study(study).confirmations
        frozen = study.get_trials(deepcopy=False)
        rec.store_study(study, confirmations=[*runs, {
            "run": len(runs), "started": time.time(), "candidates": numbers,
            "rounds": rounds, "asked": asked, "within": opts.confirm_precision,
            "state": "running", "worker": this_worker(), "beat": time.time(), **extra}])
        return Plan(len(runs), tuple(frozen[n] for n in numbers), rounds, asked,
                    paired=extra.get("paired", False), knee=extra.get("knee"),
                    moved=extra.get("moved", "knee"), follow_up="follow_up_of" in extra)

    def beat(self, run: int) -> None:
        """Confirmation ``run`` is alive: its worker was heard now (another host
        resumes it only after ``--grace-period`` of silence)."""
        with study_lock(self.opts.storage, self.study.study_name):
            _update_run(self.study, run, beat=time.time())

    # -- one paired trial -----------------------------------------------------------

    def cannot_start(self, the_plan: Plan) -> str:
        """Why a paired ``the_plan`` cannot start in the budget left (:func:`_too_short`);
        "" where it can, where its trial stored its figures already (a run resumed), and
        for rounds, which are fitted to any time."""
        if not the_plan.paired or _done_already(self.study, the_plan.run):
            return ""
        numbers = [t.number for t in the_plan.trials]
        return _too_short(self.left(), _paired_start_s(rec.records(self.study), numbers))

    def paired(self, the_plan: Plan) -> str:
        """A paired confirmation: the baseline and the candidates in one trial process,
        each candidate's pairs decided by the engine (:mod:`autotune.trial._pairs`),
        then each config's figures stored as a confirmation measurement; why it was
        cut short ("" when it was not). A run whose trial stored its figures already
        is done."""
        opts, study = self.opts, self.study
        if _done_already(study, the_plan.run):
            return ""
        trials = rec.records(study)
        numbers = [t.number for t in the_plan.trials]
        configs = [trials[n].config for n in numbers]
        rest, fixed = self.left(), _paired_fixed_s(trials, numbers)
        if short := _too_short(rest, _paired_start_s(trials, numbers)):
            return short
        max_s = PAIRED_MAX_S if rest is None else min(PAIRED_MAX_S, rest - fixed)
        rule = pairs_rule(opts.confirm_precision, opts.confirm_rounds)
        trial_dir = opts.study_dir / "trials" / f"confirm-{the_plan.run}-paired"
        result, where, _ = self.search.measure(
            configs[0], trial_dir, f"confirmation of study {study.study_name}",
            pairs=PairSpec(tuple(configs[1:]), rule, max_s, the_plan.window_s,
                           off_front(study, trials, numbers), the_plan.back_to,
                           the_plan.noise))
        self.search.pairs_measured(result)
        for stored in self.store_paired(the_plan, result, where):
            self.search.confirmed(stored)
        if not result.ok:
            return f"its paired trial failed ({result.status}: {(result.reason or '')[:120]})"
        return ""

    def store_paired(self, the_plan: Plan, result: TrialResult, where: dict
                     ) -> list[TrialRecord]:
        """Stores a paired trial's figures, one confirmation measurement a config
        (:func:`paired_record`); a failed trial is stored once, as the baseline's."""
        base = the_plan.trials[0]
        if not result.ok:
            record = record_of(result, where, role="confirmation", confirm={
                "run": the_plan.run, "round": 0, "of": base.number, "pairs": {}})
            return [self.search.add_measured(base, record, result)]
        out = []
        for i, of in enumerate(the_plan.trials):
            figure = paired_record(the_plan, i, result, where)
            if figure is not None:
                record, rate = figure
                out.append(self.search.add_measured(
                    of, record, result, values=[rate, TrialRecord.from_frozen(of).memory_mib]))
        self.beat(the_plan.run)
        return out

    # -- rounds of trial processes --------------------------------------------------

    def rounds(self, the_plan: Plan) -> str:
        """One confirmation's rounds, then :meth:`more_rounds`; why it stopped early
        ("" when it ran them all). The baseline is measured to
        :meth:`Schedule.baseline_precision`, the candidates to
        :meth:`Schedule.candidate_precision`."""
        opts, trials = self.opts, rec.records(self.study)
        numbers = [t.number for t in the_plan.trials]
        schedule = self.schedule
        per_round, base_s = schedule.seconds(trials, numbers, overhead_s=self.overhead_s)
        startup = _startup_s(trials)
        base_spec = dataclasses.replace(opts.measure,
                                        precision=schedule.baseline_precision(trials, numbers))
        each = schedule.candidate_precision(trials, numbers)
        spec = opts.measure if each is None else dataclasses.replace(opts.measure,
                                                                     precision=each)

        def own(of: FrozenTrial) -> float:
            return schedule.again_s(trials[of.number], each, startup, self.overhead_s)

        measured = _done_already(self.study, the_plan.run)  # a resumed run's
        for round_, of in the_plan.schedule():
            if (round_, of.number) in measured:
                continue
            rest = self.left()
            needs = per_round if round_ < the_plan.rounds else base_s
            first = of is the_plan.trials[0]
            if first and rest is not None and rest < needs:
                return (f"--budget left {rest:.0f} s, less than the next round takes "
                        f"(about {needs:.0f} s): {round_} of {the_plan.rounds} rounds "
                        "ran" + (", and not the closing baseline"
                                 if round_ == the_plan.rounds else ""))
            if not first and rest is not None and rest < own(of):  # the estimate was short
                return (f"--budget left {rest:.0f} s, less than measuring #{of.number} "
                        f"takes (about {own(of):.0f} s): round {round_ + 1} of "
                        f"{the_plan.rounds} was cut")
            self.measure_round(the_plan, round_, of, base_spec if first else spec,
                               own(of) + base_s)
        return self.more_rounds(the_plan, (base_spec, spec), own, base_s)

    def more_rounds(self, the_plan: Plan, specs: tuple[MeasureSpec, MeasureSpec],
                    own: Callable[[FrozenTrial], float], base_s: float) -> str:
        """Up to :data:`EXTRA_ROUNDS` more rounds of the candidates still open
        (:func:`still_open`), each round opened by the baseline that closed the one
        before and closed by a new one, while the budget holds them; why it stopped
        for the budget ("" otherwise). ``specs``: the baseline's and the candidates'."""
        base_spec, spec = specs
        for extra in range(EXTRA_ROUNDS):
            figures = confirmed(rec.records(self.study), the_plan.run)
            wide = [t for t in the_plan.trials[1:] if t.number in still_open(
                figures, [t.number for t in the_plan.trials[1:]],
                self.opts.confirm_precision, the_plan.rounds + EXTRA_ROUNDS)]
            if not wide:
                return ""
            rest, needs = self.left(), sum(own(t) for t in wide) + base_s
            if rest is not None and rest < needs:
                names = ", ".join(f"#{t.number}" for t in wide)
                return (f"--budget left {rest:.0f} s, less than another round of {names} "
                        f"takes (about {needs:.0f} s), whose speed-ups are known to more "
                        f"than ±{100 * self.opts.confirm_precision:g}% only")
            round_, measured = the_plan.rounds + extra, _done_already(self.study,
                                                                      the_plan.run)
            for of in wide:
                if (round_, of.number) not in measured:
                    self.measure_round(the_plan, round_, of, spec, own(of) + base_s)
            if (round_ + 1, the_plan.trials[0].number) not in measured:
                self.measure_round(the_plan, round_ + 1, the_plan.trials[0], base_spec,
                                   base_s)
        return ""

    def measure_round(self, the_plan: Plan, round_: int, of: FrozenTrial,
                      spec: MeasureSpec, again_s: float) -> None:
        """Measures ``of``'s config for ``round_`` and stores it, from the third round
        on to the precision :func:`split_precision` finds where it is looser than
        ``spec``'s; a measurement left disturbed is measured again
        (:data:`DISTURBED_AGAIN` times) where the budget still holds ``again_s``."""
        config = TrialRecord.from_frozen(of).config
        if round_ >= 2:  # two rounds measured: windows as long as the rounds' spread pays for
            split = split_precision(rec.records(self.study), the_plan.run, of.number)
            if split is not None and split > spec.precision:
                spec = dataclasses.replace(spec, precision=split)
        for again in range(DISTURBED_AGAIN + 1):
            if again and (rest := self.left()) is not None and rest < again_s:
                return  # no time to measure a disturbed round again: it is left out
            trial_dir = self.opts.study_dir / "trials" / (
                f"confirm-{the_plan.run}-{round_}-{of.number}" + (f"-{again}" if again else ""))
            result, where, _ = self.search.measure(
                config, trial_dir, f"confirmation of study {self.study.study_name}",
                spec=spec)
            record = record_of(result, where, role="confirmation",
                               confirm={"run": the_plan.run, "round": round_, "of": of.number})
            stored = self.search.add_measured(of, record, result)
            self.beat(the_plan.run)
            self.search.confirmed(stored)
            if not stored.disturbed:
                return


def paired_record(the_plan: Plan, i: int, result: TrialResult, where: dict
                  ) -> tuple[TrialRecord, float] | None:
    """A paired trial's figures of config ``i`` of ``the_plan`` (0: the baseline) as a
    confirmation measurement, and its rate (seeds over seconds of its windows): their
    spread and, for a candidate, its pairs and the engine's verdict. Its memory is
    its own trial's (the paired process held every config at once). None where none
    of its windows has a rate."""
    paired, of = result.pairs, the_plan.trials[i]
    windows = [w for w in paired["windows"][i] if w["rate"]]
    if not windows:
        return None
    own = TrialRecord.from_frozen(of)
    seeds, seconds = sum(w["seeds"] for w in windows), sum(w["seconds"] for w in windows)
    figure: dict[str, Any] = {"rates": [w["rate"] for w in windows],
                              "window_steps": paired["window_steps"][i],
                              "memory_from": of.number, "stopped": paired["stopped"]}
    if not i and paired.get("went_back"):  # a try of another window length went back
        figure["went_back"] = paired["went_back"]
    if i:
        c = paired["candidates"][i - 1]
        figure.update({k: c[k] for k in ("ratios", "half_widths", "verdict", "stopped",
                                         "busy_pairs", "redone", "taken_by")})
        figure["pair_rounds"] = [p["round"] for p in c["pairs"]]  # shared with whom: place
        if c["slower_than"] is not None:  # racing: known slower than another candidate
            figure["slower_than"] = the_plan.trials[c["slower_than"]].number
            figure["stopped"] = f"slower than #{figure['slower_than']}"
    blocks = [[w["seeds"], w["seconds"]] for w in windows]
    folder = Path(where["trial_dir"]) / f"of-{of.number}"
    folder.mkdir(parents=True, exist_ok=True)
    record = TrialRecord(
        number=0, status="ok", config=own.config, role="confirmation",
        confirm={"run": the_plan.run, "round": 0, "of": of.number, "pairs": figure},
        memory=own.memory, phases_s=dict(result.phases_s),
        window=WindowStats(wall_s=seconds, blocks=blocks, precision=rate_half_width(blocks),
                           stopped="paired", block_steps=paired["window_steps"][i]),
        trial_dir=str(folder), measured_at=where["measured_at"],
        lock_wait_s=where["lock_wait_s"])
    return record, seeds / seconds
