"""Speed-ups that hold up across machine drift, read from a study's records.

A machine's speed drifts by more than one window's precision over minutes
(benchmarks/results/noise.json), so a ratio to a baseline measured at the start of a
search is partly drift. The search therefore measures the baseline's config again
(a *control*) every so often, and stores each trial's ratio to the control measured
nearest before it (:func:`pair`). Its last stage, the confirmation, measures the
front's candidates and the baseline again, interleaved in rounds, and gives each
candidate the geometric mean over rounds of its ratio to the baseline of the same
round, with the interval of the one comparison engine (:mod:`autotune.compare`;
:func:`confirmed`). The drift between references (the baseline, the controls, the
confirmation's baselines) is read back by :func:`drifts`. Imports neither torch nor
PyG nor Optuna.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from autotune.compare import CONFIDENCE, Comparison, Decision, Rule, Verdict, pair_noise, \
    pairs_to_tell, quotients, ratio_half_width, t_quantile, verdict_of
from autotune.env import plural
from autotune.trial import Load
from autotune.study._records import TrialRecord

MARGIN = 0.02  # a speed-up within this of another's is a tie (autotune.compare.Rule)
# why a paired candidate's pairs ended short of its precision, where no more were taken
RAN_OUT = {"time": "the confirmation's time for pairs ran out",
           "pairs spent": "the pairs it may take were spent"}
REACH_PAIRS = 200  # the most pairs a "would reach" count looks at


def baseline_of(trials: Iterable[TrialRecord]) -> int | None:
    """The baseline trial's number (None: the study has none yet)."""
    return next((t.number for t in trials if t.baseline), None)


def references(trials: Iterable[TrialRecord]) -> list[TrialRecord]:
    """The completed measurements of the baseline's config, in time order: the
    baseline trial, the controls and the confirmation rounds' baselines."""
    trials = list(trials)
    base = baseline_of(trials)
    refs = [t for t in trials if t.complete and t.measured_at and t.reused_from is None and
            (t.reference or (t.confirm is not None and t.confirm["of"] == base))]
    return sorted(refs, key=lambda t: t.measured_at[1])


def latest_reference(trials: Iterable[TrialRecord], before: float) -> TrialRecord | None:
    """The reference whose measurement ended last before ``before`` (time.time())."""
    earlier = [t for t in references(trials) if t.measured_at[1] <= before]
    return earlier[-1] if earlier else None


def pair(throughput: float, precision: float | None, reference: TrialRecord) -> dict[str, Any]:
    """A trial's paired figure: its throughput over ``reference``'s, with the ratio's
    relative 95% half-width."""
    return {"control": reference.number, "speedup": throughput / reference.throughput,
            "interval": ratio_half_width(precision, reference.precision)}


def drifts(trials: Iterable[TrialRecord]) -> list[dict[str, Any]]:
    """Each reference in time order, with its throughput's change from the one
    before: ``drift`` (relative, None for the first) and that change's 95% half-width."""
    out, previous = [], None
    for t in references(trials):
        change = None if previous is None else t.throughput / previous.throughput - 1
        out.append({"trial": t.number, "at": t.measured_at[1], "throughput": t.throughput,
                    "precision": t.precision, "drift": change,
                    "interval": None if previous is None else
                    ratio_half_width(t.precision, previous.precision)})
        previous = t
    return out


@dataclass(frozen=True)
class Confirmed:
    """A candidate's figures from the confirmation: ``speedup`` is the geometric mean
    over rounds of its throughput over the baseline's in the same round, ``low`` and
    ``high`` its 95% interval from the one comparison engine (a confidence sequence,
    valid however many rounds were looked at; :mod:`autotune.compare`), ``interval``
    that interval's relative half-width; ``throughput`` and ``memory_mib`` are the
    medians over rounds, and ``throughput_interval`` the throughput's relative
    half-width over rounds (drift included: absolute figures minutes apart). They
    are worked out from the study's records whenever read, so an older study's
    confirmation reads with today's statistic too (the exports and ``pareto.yaml``
    it wrote then keep the median and t-interval of their day)."""

    trial: int
    rounds: int
    speedup: float
    interval: float | None
    throughput: float
    throughput_interval: float | None
    memory_mib: float
    ratios: tuple[float, ...]
    measurements: tuple[int, ...]  # the trials that measured it, round by round
    # rounds left out because a measurement in them (its own or its round's
    # baseline's) was disturbed however often it was measured again, and by what
    busy_rounds: int = 0
    busy: str = ""
    low: float | None = None
    high: float | None = None
    unit: str = "round"  # what ``rounds`` counts: rounds of trials, or a paired trial's pairs
    slower_than: int | None = None  # racing dropped it: known slower than this one
    at: tuple[int, ...] = ()  # the round (or pair) of each of ``ratios``
    stopped: str = ""  # a paired candidate's: why its pairs ended ("time", "pairs spent", ...)

    def by_round(self) -> dict[int, tuple[float, float | None]]:
        """Its ratios by round (``at``), each half-width unknown here."""
        return {k: (r, None) for k, r in zip(self.at, self.ratios)}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def why_not(self, within: float) -> str:
        """Why it is not confirmed to ``within`` (a relative half-width of its
        speed-up), in words; "" where it is: two rounds at least, and a speed-up
        interval no wider than ``within``."""
        busy = (f"; the machine was busy in {self.busy_rounds} round"
                f"{'s' if self.busy_rounds != 1 else ''} ({self.busy})"
                if self.busy_rounds else "")
        if self.interval is None:
            return f"{self.count()} only, no interval{busy}"
        if self.interval > within and self.slower_than is not None:
            return (f"slower than #{self.slower_than}, measured no further after "
                    f"{self.count()} (±{100 * self.interval:.1f}%){busy}")
        if self.interval > within and self.stopped in RAN_OUT:
            return (f"±{100 * self.interval:.1f}% > ±{100 * within:g}% after "
                    f"{self.count()}, when {RAN_OUT[self.stopped]}{self.reach(within)}{busy}")
        if self.interval > within:
            return (f"{self.unit}s disagree: ±{100 * self.interval:.1f}% > "
                    f"±{100 * within:g}%{busy}")
        return ""

    def reach(self, within: float) -> str:
        """``; about N pairs would reach ±W% at their spread``, the engine's count at
        its ratios' spread (:func:`autotune.compare.pairs_to_tell`); "" where none
        would within :data:`REACH_PAIRS`, or the spread is unknown."""
        noise = pair_noise([list(self.ratios)])
        least = min(max(self.rounds, 2), REACH_PAIRS)
        n = pairs_to_tell(1 + within, noise, Rule(min_pairs=least, max_pairs=REACH_PAIRS)) \
            if noise else None
        return "" if n is None else \
            f"; about {n} {self.unit}s would reach ±{100 * within:g}% at their spread"

    def count(self) -> str:
        """Its rounds (or pairs) in words: ``3 rounds``, ``11 pairs``."""
        return plural(self.rounds, self.unit)

    def bounds(self) -> tuple[float, float]:
        if self.low is not None and self.high is not None:
            return self.low, self.high
        h = self.interval or 0.0
        return self.speedup * (1 - h), self.speedup * (1 + h)


def confirmation_runs(trials: Iterable[TrialRecord]) -> list[int]:
    return sorted({t.confirm["run"] for t in trials if t.confirm is not None})


def confirmed(trials: Iterable[TrialRecord], run: int | None = None) -> dict[int, Confirmed]:
    """Each candidate's confirmed figures from confirmation ``run`` (default: from the
    latest run that measured it, the baseline's from the latest run), keyed by the
    candidate's trial number. A round's ratio divides the
    candidate's throughput by the baseline's interpolated to the candidate's time,
    between the baseline measured at the start of its round and the one at the start
    of the next (or the closing one): a drift that is linear over a round cancels. A
    round counts only where the candidate and its round's baseline completed."""
    trials = list(trials)
    runs = confirmation_runs(trials)
    if not runs:
        return {}
    if run is None:  # a follow-up measures the knee again, not every candidate
        merged: dict[int, Confirmed] = {}
        for each in runs:
            merged.update(confirmed(trials, each))
        return merged
    base = baseline_of(trials)
    mine = [t for t in trials if t.confirm is not None and t.confirm["run"] == run and
            t.complete]
    if any("pairs" in t.confirm for t in mine):
        return _from_pairs(mine, base)
    rounds: dict[int, dict[int, TrialRecord]] = {}
    busy: dict[int, dict[int, TrialRecord]] = {}  # disturbed, with no quiet measurement
    for t in trials:
        if t.confirm is not None and t.confirm["run"] == run and t.complete:
            kept = busy if t.disturbed else rounds
            kept.setdefault(t.confirm["of"], {})[t.confirm["round"]] = t
    for number, measured in busy.items():
        for r in rounds.get(number, {}):
            measured.pop(r, None)  # measured again, quietly
    base_rounds, base_busy = rounds.pop(base, {}), busy.pop(base, {})
    out = {number: _candidate(number, measured, base_rounds, {
               **{r: base_busy[r] for r in base_busy if r in measured},
               **busy.get(number, {})})
           for number, measured in rounds.items()
           if any(r in base_rounds for r in measured)}
    if base_rounds:
        rates = [t.throughput for _, t in sorted(base_rounds.items())]
        opened = {r for measured in rounds.values() for r in measured} or set(base_rounds)
        out[base] = Confirmed(base, len(opened & set(base_rounds)), 1.0, 0.0,
                              statistics.median(rates),
                              _spread(rates) if len(rates) > 1 else None,
                              statistics.median(t.memory_mib for t in base_rounds.values()),
                              (1.0,) * len(rates), tuple(t.number for _, t in
                                                         sorted(base_rounds.items())))
    return out


def _from_pairs(measured: list[TrialRecord], base: int | None,
                margin: float = MARGIN) -> dict[int, Confirmed]:
    """The figures of a paired confirmation (:mod:`autotune.trial._pairs`): each
    candidate's stored pairs, each a ratio to the reference's window beside it, read
    by the one comparison engine; the baseline's figures its own windows'."""
    out = {}
    for t in measured:
        number, figure = t.confirm["of"], t.confirm["pairs"]
        rates = tuple(figure.get("rates", ())) or (t.throughput,)
        if number == base:
            out[number] = Confirmed(number, len(rates), 1.0, 0.0, t.throughput,
                                    _spread(list(rates)) if len(rates) > 1 else None,
                                    t.memory_mib, (1.0,) * len(rates), (t.number,),
                                    unit="window")
            continue
        ratios = figure.get("ratios", [])
        if not ratios:
            continue
        d = paired_decision(figure, margin)
        out[number] = Confirmed(
            number, len(ratios), d.speedup, d.half_width, t.throughput,
            _spread(list(rates)) if len(rates) > 1 else None, t.memory_mib, tuple(ratios),
            (t.number,), low=d.low, high=d.high, unit="pair",
            slower_than=figure.get("slower_than"),
            at=tuple(figure.get("pair_rounds") or range(len(ratios))),  # older: by order
            stopped=figure.get("stopped", ""))
    return out


def paired_decision(figure: dict[str, Any], margin: float = MARGIN) -> Decision:
    """The engine's reading of a paired confirmation's stored pairs (``ratios``, each
    with its windows' ``half_widths``)."""
    ratios = figure["ratios"]
    comparison = Comparison(Rule(margin=margin, min_pairs=2, max_pairs=max(len(ratios), 2)))
    for ratio, half in zip(ratios, figure.get("half_widths") or [None] * len(ratios)):
        comparison.add(ratio, half)
    return comparison.decision()


def left_out(trials: Iterable[TrialRecord], figures: dict[int, Confirmed]) -> dict[int, str]:
    """The configs a confirmation measured that have no confirmed figures (not in
    ``figures``), with why: the machine was busy in each round (naming what took it),
    or no round of theirs had the baseline measured in it too."""
    measured: dict[int, list[TrialRecord]] = {}
    for t in trials:
        if t.confirm is not None and t.confirm["of"] not in figures:
            measured.setdefault(t.confirm["of"], []).append(t)
    out = {}
    for number, rounds in measured.items():
        busy = [t for t in rounds if t.complete and t.disturbed]
        out[number] = f"the machine was busy in each round ({_who_took(busy)})" if busy else \
            "no round of it had the baseline measured beside it"
    return out


def _who_took(disturbed: Iterable[TrialRecord]) -> str:
    """The processes that took the cores of these disturbed measurements, each once."""
    return who_took(t.window.load for t in disturbed)


def who_took(loads: Iterable[dict[str, Any]]) -> str:
    """The processes that took the cores in these windows' loads (as stored), each
    once, with the CPU seconds it took over them all (:meth:`Load.summed`); "" for
    no window."""
    loads = [Load.from_dict(load) for load in loads]
    return Load.summed(loads).named() if loads else ""


def _candidate(number: int, measured: dict[int, TrialRecord],
               base_rounds: dict[int, TrialRecord],
               busy: dict[int, TrialRecord], margin: float = MARGIN) -> Confirmed:
    """A candidate's confirmed figures from its rounds and the baseline's: each round
    a pair of the one comparison engine (:class:`autotune.compare.Comparison`), its
    ratio to the baseline at its time and, as the pair's own precision, its two
    windows'; ``busy``: the disturbed measurements of the rounds left out, by round."""
    both = sorted(r for r in measured if r in base_rounds)
    comparison = Comparison(Rule(margin=margin, min_pairs=2, max_pairs=max(len(both), 2)))
    for r in both:
        comparison.add(measured[r].throughput / _baseline_at(base_rounds, r, _mid(measured[r])),
                       ratio_half_width(measured[r].precision, base_rounds[r].precision))
    decision = comparison.decision()
    rates = [measured[r].throughput for r in both]
    rate_floor = statistics.median(measured[r].precision or 0.0 for r in both) / \
        math.sqrt(len(both))
    several = len(both) > 1
    return Confirmed(
        number, len(both), decision.speedup, decision.half_width,
        statistics.median(rates), max(_spread(rates), rate_floor) if several else None,
        statistics.median(measured[r].memory_mib for r in both), tuple(comparison.ratios),
        tuple(measured[r].number for r in both), len(busy), _who_took(busy.values()),
        decision.low, decision.high, at=tuple(both))


def _mid(t: TrialRecord) -> float:
    return (t.measured_at[0] + t.measured_at[1]) / 2


def _baseline_at(base_rounds: dict[int, TrialRecord], round_: int, at: float) -> float:
    """The baseline's throughput at time ``at`` of round ``round_``: log-linear
    between its measurement opening that round and the next one, else the opening."""
    start, end = base_rounds[round_], base_rounds.get(round_ + 1)
    if end is None or _mid(end) <= _mid(start):
        return start.throughput
    w = min(max((at - _mid(start)) / (_mid(end) - _mid(start)), 0.0), 1.0)
    return math.exp((1 - w) * math.log(start.throughput) + w * math.log(end.throughput))


def _spread(values: list[float]) -> float:
    """The relative 95% half-width of positive values' geometric mean (Student's t)."""
    logs = [math.log(v) for v in values]
    return math.expm1(t_quantile(CONFIDENCE, len(logs) - 1) * statistics.stdev(logs) /
                      math.sqrt(len(logs)))


def places(figures: dict[int, Confirmed], within: float, baseline: int | None
           ) -> dict[int, dict[int, Verdict]]:
    """Where each confirmed config stands against each other one (and the baseline),
    by the one comparison engine with ``within`` as its margin (:func:`place`): for
    each config, the others it is ``tied`` with or not told apart from
    (``undecided``); the pairs one is decidedly faster in are left out."""
    out: dict[int, dict[int, Verdict]] = {n: {} for n in figures}
    numbers = sorted(figures)
    for i, a in enumerate(numbers):
        for b in numbers[i + 1:]:
            verdict = place(figures[a], figures[b], within, baseline)
            if verdict in ("tied", "undecided"):
                out[a][b] = out[b][a] = verdict
    return out


def place(a: Confirmed, b: Confirmed, within: float, baseline: int | None) -> Verdict:
    """The engine's verdict on the faster of ``a`` and ``b`` (by their speed-ups) over
    the slower, with ``within`` as its margin: ``faster``, ``tied`` (within it either
    way), else ``undecided`` (not told apart). Against the baseline it reads the
    candidate's own interval; between two candidates, the quotients of their ratios
    in the rounds both have (``at``: in rounds of trials, against the same
    baseline; in a paired trial, the pairs' own rounds, or their order in studies
    from before those were kept), close in time, so a drift of the round cancels in
    the quotient, then those of the rounds each has alone, in their order (as racing
    reads them: :func:`autotune.trial._pairs.known_faster`)."""
    if b.trial == baseline or a.trial == baseline:
        c = b if a.trial == baseline else a
        if c.low is None or c.high is None:
            return "undecided"
        low, high = (c.low, c.high) if c.speedup >= 1 else (1 / c.high, 1 / c.low)
        verdict = verdict_of(low, high, within)
    else:
        fast, slow = (a, b) if a.speedup >= b.speedup else (b, a)
        comparison = quotients(Rule(margin=within, min_pairs=2), fast.by_round(),
                               slow.by_round())
        if comparison.pairs < 2:
            return "undecided"
        verdict = comparison.decision().verdict
    return "undecided" if verdict == "not faster" else verdict
