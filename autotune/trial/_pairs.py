"""Paired windows in one process: a reference config and its candidates, each built
once and warmed up, then measured in short windows that alternate (reference and
candidate, then candidate and reference: ABBA over two pairs), each pair's figure
their rate ratio, decided by the one comparison engine (:mod:`autotune.compare`).

Measured in one process and seconds apart, a pair's two windows share the machine's
state: a drift, or a neighbour that takes the cores for both, cancels in their
ratio, and the spread between processes (docs/measurement.md, "Paired windows")
does not enter it.
A window starts in steady state: the config that ran before has its loader workers
drained first (their CPU time no longer grows), and the window's own first steps,
those its loader prefetched while it was idle, are run untimed.

Windows are short (``PairSpec.window_s`` at the warm-up's pace, four blocks at least:
:data:`WINDOW_S` on a quiet machine and :data:`BUSY_WINDOW_S` on one another process
keeps busy, until the machine's record of earlier confirmations chooses another,
:mod:`autotune.study._window_length`) and the pairs many: the pairs' own spread,
which the engine reads, is what decides. Where the length is a try of another than
the record knows (``PairSpec.back_to``), the pairs go back to the known one as soon
as their own spread and pace show the try costlier
(:func:`autotune.trial._spread.costlier`): a try costs a few pairs, not the
confirmation.

Two candidates paired in the same round share the reference's window: one runs just
before it and the other just after (``a R b``), each candidate's pairs alternating
which side it takes, as a lone candidate's alternate ABBA. The reference's windows are
the dearest (the baseline's loader workers refill in its untimed steps), and a
candidate's pairs are still one pair a round, seconds apart, the reference adjacent;
the two candidates' quotient in that round is then of their own windows alone.

A pair with one of its windows disturbed by another process (more than
``MeasureSpec.max_busy`` of the cores) is measured again; one disturbed on both sides
is kept (the disturbance cancels) and counted, with the process named.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import psutil
import torch._dynamo

from autotune.compare import Comparison, Rule, pair_noise, quotients, ratio_half_width
from autotune.config import TrialConfig
from autotune.specs import MeasureSpec
from autotune.trial._load import LoadMeter
from autotune.trial._spread import Known, costlier, known_of
from autotune.trial._result import busy_over, rate_half_width
from autotune.trial._window import GraphRecordings, MemoryTracker, _StepClock, _Stepper, \
    _warm_up, loader_worker_pids, stopped

DRAIN_POLL_S = 0.01  # how often an idle config's loader workers are looked at
DRAIN_MAX_S = 1.0  # the longest a window waits for them to go quiet
WINDOW_BLOCKS = 4  # a window's blocks at least, for its own precision (MIN_BLOCKS)
# A window's first length at the warm-up's pace: short, since what a pair decides is
# their ratio, and the machine's speed drifts between windows seconds apart (on most
# machines measured, pairs of longer windows spread as wide or wider:
# docs/measurement.md, "Paired windows")
WINDOW_S = 0.5
# ... and where another process keeps the machine busy: a short window's own noise
# grows (the share of the cores it gets against the other process varies), and on the
# machine that needs it most longer windows reach a precision in fewer seconds
BUSY_WINDOW_S = 1.0
# A try of another window length goes back to the known one once its pairs show it
# costlier (:func:`autotune.trial._spread.costlier`), not before this many degrees of
# freedom of its own: the test is looked at after every round
BACK_MIN_DOF = 6
# the paired process's peak memory is a diagnostic (each config's figure is its own
# trial's), so it is sampled slowly: a sampler every 5 ms takes a share of 2 cores
PEAK_INTERVAL_S = 0.1


@dataclass(frozen=True)
class PairSpec:
    """What a paired measurement decides: each of ``candidates`` (TrialConfigs) against
    the reference under ``rule`` (its precision is the confirmation's), within
    ``max_s`` seconds of pairs (warm-ups not counted), in windows of ``window_s``
    seconds at the warm-up's pace (benchmarks/pair_windows.py measures others).
    ``back_to``: where ``window_s`` is a try, what this machine's pairs at the length
    it knows showed; the pairs go back to that length once theirs are known costlier.
    ``off_front`` holds the positions in ``candidates`` of configs off the search's
    front, paired only to tell them from its fastest (:func:`focus`). ``noise``: the
    spread of a pair's log ratio at ``window_s`` as this machine's record knows or
    guesses it (None: a try, whose pairs show it), which the focus reads from the
    first pair on."""

    candidates: tuple = ()
    rule: Rule = field(default_factory=Rule)
    max_s: float = 60.0
    window_s: float = WINDOW_S
    off_front: tuple[int, ...] = ()
    back_to: Known | None = None
    noise: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"configs": [c.to_dict() for c in self.candidates],
                "rule": dataclasses.asdict(self.rule), "max_s": self.max_s,
                "window_s": self.window_s, "off_front": list(self.off_front),
                "back_to": None if self.back_to is None else self.back_to.to_dict(),
                "noise": self.noise}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PairSpec:
        back_to = values.get("back_to")
        return cls(tuple(TrialConfig.from_dict(c) for c in values["configs"]),
                   Rule(**values["rule"]), float(values["max_s"]),
                   float(values.get("window_s", WINDOW_S)),
                   tuple(int(i) for i in values.get("off_front", ())),
                   None if back_to is None else Known.from_dict(back_to),
                   None if values.get("noise") is None else float(values["noise"]))


@dataclass
class Side:
    """One config in the process: its stepper, its steps per window and the untimed
    steps that open each window (the batches its loader has in flight); its pace at
    the end of its warm-up and its loader's batches an epoch, which set its steps for
    a window length (:meth:`length`)."""

    index: int
    stepper: Any  # autotune.trial._window._Stepper
    steps: int
    settle: int
    worker_pids: Callable[[], list[int]]
    windows: list[dict] = field(default_factory=list)
    step_s: float = 0.0
    epoch: int | None = None

    def length(self, window_s: float) -> None:
        """Its windows from now on: ``window_s`` at its warm-up's pace (:func:`window_steps`)."""
        self.steps = window_steps(window_s, self.step_s,
                                  block_of(self.stepper.pipe.config.num_workers), self.epoch)


def settle_steps(num_workers: int, prefetch_factor: int) -> int:
    """Untimed steps that open a window: those a prefetching loader filled while its
    config was idle, one at least (caches warm again after the other config's)."""
    return max(1, num_workers * prefetch_factor)


def block_of(num_workers: int) -> int:
    """Steps per block: two at least, and one per loader worker (a prefetching loader
    delivers in bursts of about that many)."""
    return max(2, num_workers)


def window_steps(seconds: float, step_s: float, per_block: int,
                 epoch_steps: int | None = None) -> int:
    """Steps for a window of ``seconds`` at ``step_s`` a step, in whole blocks and
    :data:`WINDOW_BLOCKS` at least; in whole epochs where an epoch (``epoch_steps``)
    is that short, so that each window holds as many of the epoch's short last batch
    and loader restarts as the next (on a small graph they make a window's rate hang
    on where in the epoch it began)."""
    steps = per_block * max(WINDOW_BLOCKS, math.ceil(seconds / max(step_s, 1e-6) / per_block))
    if epoch_steps and epoch_steps <= steps:
        steps = epoch_steps * math.ceil(steps / epoch_steps)
    return steps


def epoch_steps(loader) -> int | None:
    """The loader's batches an epoch (None where it has no length)."""
    try:
        return len(loader) or None
    except TypeError:
        return None


def halves(blocks: list) -> tuple[float, float] | None:
    """The rates of a window's first and second halves of its blocks (the middle one
    left out of an odd number); None with fewer than two blocks."""
    half = len(blocks) // 2
    if half < 1:
        return None
    rates = []
    for part in (blocks[:half], blocks[len(blocks) - half:]):
        seconds = sum(s for _, s in part)
        if seconds <= 0:
            return None
        rates.append(sum(c for c, _ in part) / seconds)
    return rates[0], rates[1]


def drain(pids: list[int]) -> float:
    """Waits until these processes' CPU time stops growing (two polls alike), up to
    :data:`DRAIN_MAX_S`; returns the seconds waited."""
    started = time.perf_counter()
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    if not procs:
        return 0.0
    last = None
    while time.perf_counter() - started < DRAIN_MAX_S:
        total = 0.0
        for proc in procs:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
        if last is not None and total == last:
            break
        last = total
        time.sleep(DRAIN_POLL_S)
    return time.perf_counter() - started


def timed_window(side: Side, others: list[Side], spec: MeasureSpec) -> dict[str, Any]:
    """One window of ``side``: the other configs' workers drained, its untimed steps,
    then its timed steps, with the load of the timed part; returns the window's
    figures."""
    started = time.perf_counter()
    waited = drain([pid for other in others for pid in other.worker_pids()])
    meter = LoadMeter()
    with side.stepper.pipe.activate():
        for _ in range(side.settle):
            side.stepper.run()
        clock = _StepClock(side.stepper.pipe.device)
        meter.start()
        start = clock.start()
        seeds, block, blocks = 0, [0, 0.0], []
        per_block = block_of(side.stepper.pipe.config.num_workers)
        for k in range(side.steps):
            batch, _ = side.stepper.run()
            clock.lap()
            got = side.stepper.pipe.task.seeds(batch)
            seeds += got
            block[0] += got
            if (k + 1) % per_block == 0:
                block[1] = sum(clock.flush())
                blocks.append(block)
                block = [0, 0.0]
        if block[0]:
            block[1] = sum(clock.flush())
            blocks.append(block)
        seconds = time.perf_counter() - start
        load = meter.stop()
    out = {"config": side.index, "steps": side.steps, "seeds": seeds, "seconds": seconds,
           "rate": seeds / seconds if seconds > 0 else 0.0,
           "precision": rate_half_width(blocks), "halves": halves(blocks),
           "fixed_s": start - started,
           "drain_s": waited, "at": time.time(), "load": load.to_dict(),
           "busy": busy_over(load.share, load.others_s, spec.max_busy)}
    side.windows.append(out)
    return out


@dataclass
class Candidate:
    """A candidate's comparison with the reference, pair by pair."""

    side: Side
    comparison: Comparison
    off_front: bool = False  # off the search's front: paired to tell it from the fastest
    stopped: str = ""  # why its pairs ended: decided, slower (than another), pairs spent, time
    slower_than: int | None = None  # the config it is known slower than (racing)
    busy_pairs: int = 0  # kept though both windows were disturbed (it cancels)
    redone: int = 0  # pairs measured again: one window only was disturbed
    taken_by: list[dict] = field(default_factory=list)  # the loads of its disturbed windows
    pairs: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = self.comparison.decision()
        verdict = d.verdict if d.decided else self.comparison.placed()
        return {"config": self.side.index, "ratios": list(self.comparison.ratios),
                "half_widths": [p["half_width"] for p in self.pairs],
                "verdict": verdict, "speedup": d.speedup, "low": d.low, "high": d.high,
                "stopped": self.stopped, "slower_than": self.slower_than,
                "busy_pairs": self.busy_pairs,
                "redone": self.redone, "taken_by": self.taken_by, "pairs": self.pairs}


def run_pairs(reference: Side, candidates: list[Candidate], spec: MeasureSpec,
              pairs: PairSpec) -> str:
    """Pairs of each open candidate with the reference, ABBA, two candidates sharing a
    window of the reference where their turns allow (:func:`sharing`), until each is
    decided, or known to the rule's precision and placed at it (:meth:`Comparison.placed`),
    or known slower than another candidate (racing drops it), its pairs are spent,
    or ``pairs.max_s`` has run; returns why the pairs ended. A try of another window
    length goes back to ``pairs.back_to``'s once it is known costlier (:func:`went_back`)."""
    sides = [reference] + [c.side for c in candidates]
    started, round_, window_s = time.perf_counter(), 0, pairs.window_s
    while True:
        open_ = [c for c in candidates if not c.stopped]
        if not open_:
            return "decided"
        spent = time.perf_counter() - started
        noise = pairs.noise if window_s == pairs.window_s else pairs.back_to.spread
        chosen = focus(open_, pairs.max_s - spent, pair_seconds(candidates, window_s), noise)
        for before, after in sharing(chosen):
            if time.perf_counter() - started >= pairs.max_s:
                for each in open_:
                    each.stopped = each.stopped or "time"
                return "max-seconds"
            _pairs_of(reference, before, after, sides, round_, spec, window_s)
            for c in (before, after):
                if c is None:
                    continue
                if c.comparison.decision().decided or c.comparison.placed() != "undecided":
                    c.stopped = "decided"
                elif c.comparison.exhausted:
                    c.stopped = "pairs spent"
        _race(candidates)
        if window_s == pairs.window_s and went_back(candidates, pairs):
            window_s = pairs.back_to.window_s
            for side in sides:
                side.length(window_s)
        round_ += 1


def pair_seconds(candidates: list[Candidate], window_s: float) -> float | None:
    """A pair's seconds so far in windows of ``window_s`` (None before the first)."""
    seconds = [p["seconds"] for c in candidates for p in c.pairs if p["window_s"] == window_s]
    return sum(seconds) / len(seconds) if seconds else None


def went_back(candidates: list[Candidate], pairs: PairSpec) -> bool:
    """Whether the pairs so far at ``pairs.window_s``, a try of another length than
    the one this machine knows (``pairs.back_to``), show it costlier
    (:func:`autotune.trial._spread.costlier`), with :data:`BACK_MIN_DOF` degrees of
    freedom at least."""
    if pairs.back_to is None:
        return False
    tried = known_of([c.pairs for c in candidates], pairs.window_s)
    return tried is not None and tried.dof >= BACK_MIN_DOF and costlier(tried, pairs.back_to)


def focus(open_: list[Candidate], left_s: float, pair_s: float | None,
          noise: float | None = None) -> list[Candidate]:
    """The open candidates to pair this round: all of them while the pairs each still
    needs for its precision (:meth:`Comparison.pairs_to_precision`, at a pair's
    seconds so far; while its own spread is too early to tell, at that of all their
    pairs pooled, :func:`pooled_noise`; while that too is, at ``noise``, this
    machine's spread at this length as its record knows or guesses it, from each
    one's first pair on) fit in the ``left_s`` seconds left; else one: where the time
    cannot confirm them all, it goes to the one the default would be, rather than
    leaving each short of its precision (with many candidates, the rule's least pairs
    each, before their pooled spread is known, can take most of the time). That one
    is the candidate whose pairs so far allow the most speed-up
    (:meth:`Comparison.best_case` at the pooled spread, else at ``noise``) whose own
    need fits (else that one): a config paired once or twice, whose pairs may have
    read low by chance, is paired again while it could still be the fastest, rather
    than left behind one whose many pairs read a little faster. A config off the
    search's front gets it only as the first: it is paired to tell it from the
    fastest, and confirmed slower it would be no default. The others stay open, and
    are paired again once it is decided."""
    if len(open_) < 2 or pair_s is None:
        return open_
    pooled = pooled_noise(open_)
    need = [c.comparison.pairs_to_precision() for c in open_]
    if None in need and pooled is not None:  # too early for their own: all their pairs'
        need = [c.comparison.pairs_to_precision(pooled) if n is None else n
                for c, n in zip(open_, need)]
    if None in need and noise is not None:  # that of this machine's earlier pairs
        need = [c.comparison.pairs_to_precision(noise, least=1) if n is None else n
                for c, n in zip(open_, need)]
    if None in need:  # too early to tell
        return open_
    short = {id(c): n - c.comparison.pairs for c, n in zip(open_, need)}
    if sum(short.values()) * pair_s <= left_s:
        return open_
    # every need known: each has a pair, and the pooled spread or ``noise`` is known
    spread = pooled if pooled is not None else noise
    ranked = sorted(open_, key=lambda c: c.comparison.best_case(spread), reverse=True)
    fits = [c for c in ranked if short[id(c)] * pair_s <= left_s and
            (c is ranked[0] or not c.off_front)]
    return [(fits or ranked)[0]]


def pooled_noise(open_: list[Candidate]) -> float | None:
    """The standard deviation of a pair's log ratio, pooled over the candidates'
    pairs around each one's mean (:func:`autotune.compare.pair_noise`): a
    machine's pairs spread alike whichever config they pair, so with several
    candidates it is known while each one's own is not yet; None before twice the
    rules' least pairs of degrees of freedom."""
    least = max(c.comparison.rule.min_pairs for c in open_)
    return pair_noise([c.comparison.ratios for c in open_], least_dof=2 * least)


def lean(c: Candidate) -> int:
    """How ``c``'s pairs so far lean: those that ran the reference first less those
    that ran it second (its next pair runs it second where this is over 0, first
    where under)."""
    return sum(1 if p["ref_first"] else -1 for p in c.pairs)


def sharing(chosen: list[Candidate]) -> list[tuple[Candidate | None, Candidate | None]]:
    """This round's pairs, as (the candidate just before a reference window, the one
    just after): two candidates share one window of the reference wherever their
    turns allow, each running on the side its pairs so far lean away from
    (:func:`lean`; either where they lean neither way); a candidate left alone runs
    on its side, the reference first where it leans neither way."""
    leans = [(lean(c), c) for c in chosen]
    first = [c for n, c in leans if n > 0]  # runs before the reference
    second = [c for n, c in leans if n < 0]  # after it
    either = [c for n, c in leans if n == 0]
    out: list[tuple[Candidate | None, Candidate | None]] = []
    while first and second:
        out.append((first.pop(0), second.pop(0)))
    while first and either:
        out.append((first.pop(0), either.pop(0)))
    while second and either:
        out.append((either.pop(0), second.pop(0)))
    while len(either) >= 2:
        out.append((either.pop(0), either.pop(0)))
    out += [(c, None) for c in first] + [(None, c) for c in second + either]
    return out


def _pairs_of(reference: Side, before: Candidate | None, after: Candidate | None,
              sides: list[Side], round_: int, spec: MeasureSpec, window_s: float) -> None:
    """This round's pair of ``before`` (its window just before the reference's) and of
    ``after`` (just after it), one window of the reference between them where both
    are given (:func:`sharing`)."""
    if before is None or after is None:
        c = before or after
        _pair(reference, c, sides, round_, spec, window_s, ref_first=after is not None)
        return
    got = _windows([before.side, reference, after.side], sides, spec)
    _pair(reference, before, sides, round_, spec, window_s, ref_first=False, got=got)
    _pair(reference, after, sides, round_, spec, window_s, ref_first=True, got=got)


def _windows(order: list[Side], sides: list[Side], spec: MeasureSpec) -> dict[int, dict]:
    """A window of each of ``order``'s sides, in that order, by side index."""
    return {side.index: timed_window(side, [s for s in sides if s is not side], spec)
            for side in order}


def _pair(reference: Side, c: Candidate, sides: list[Side], round_: int,
          spec: MeasureSpec, window_s: float, ref_first: bool = True,
          got: dict[int, dict] | None = None) -> None:
    """One pair in windows of ``window_s``, the reference first where ``ref_first``;
    ``got``: its two windows measured already (beside another candidate's, sharing the
    reference's). Measured again (up to ``spec.busy_retries`` times) where one window
    only was disturbed. Its seconds hold every window it took, and what opened each,
    a shared window of the reference as half its own (what the pair cost the machine:
    the focus plans with it, and the machine's record keeps it)."""
    order = [reference, c.side] if ref_first else [c.side, reference]
    seconds = 0.0
    for again in range(spec.busy_retries + 1):
        shared = got is not None and not again
        if not shared:
            got = _windows(order, sides, spec)
        seconds += sum((got[side.index]["fixed_s"] + got[side.index]["seconds"]) *
                       (0.5 if shared and side is reference else 1.0) for side in order)
        ref, own = got[reference.index], got[c.side.index]
        one_sided = ref["busy"] != own["busy"]
        if one_sided and again < spec.busy_retries:
            c.redone += 1
            c.taken_by += [w["load"] for w in (ref, own) if w["busy"]]
            continue
        break
    if not ref["rate"] or not own["rate"]:
        return
    half = ratio_half_width(own["precision"], ref["precision"])
    c.busy_pairs += ref["busy"] and own["busy"]
    c.taken_by += [w["load"] for w in (ref, own) if w["busy"]]
    c.pairs.append({"ratio": own["rate"] / ref["rate"], "half_width": half,
                    "reference_rate": ref["rate"], "rate": own["rate"],
                    "inner": inner_ratio(ref, own, ref_first=ref_first),
                    "busy": [ref["busy"], own["busy"]], "window_s": window_s,
                    "seconds": seconds, "round": round_, "ref_first": ref_first})
    c.comparison.add(own["rate"] / ref["rate"], half)


def inner_ratio(ref: dict, own: dict, ref_first: bool) -> float | None:
    """The pair's ratio from its inner halves: the second half of the window that ran
    first and the first half of the other, adjacent as a pair of windows half as long
    would be (the one that ran second opened after the same drain and untimed steps).
    Beside the pair's own ratio, it tells how a pair's spread would move with the
    windows' length if only the steps' noise within a window moved with it
    (benchmarks/pair_windows.py reports that split beside the spreads it measures)."""
    if ref.get("halves") is None or own.get("halves") is None:
        return None
    ref_rate = ref["halves"][1] if ref_first else ref["halves"][0]
    own_rate = own["halves"][0] if ref_first else own["halves"][1]
    return own_rate / ref_rate if ref_rate > 0 else None


def back_from(candidates: list[Candidate], pairs: PairSpec) -> list[dict] | None:
    """Where the pairs went back from a try of ``pairs.window_s`` (:func:`went_back`):
    what the try's pairs showed, and what they were found costlier than
    (``pairs.back_to``), as :meth:`Known.to_dict`; else None."""
    back = pairs.back_to is not None and any(
        p["window_s"] == pairs.back_to.window_s for c in candidates for p in c.pairs)
    tried = known_of([c.pairs for c in candidates], pairs.window_s) if back else None
    return None if tried is None else [tried.to_dict(), pairs.back_to.to_dict()]


def _race(candidates: list[Candidate]) -> None:
    """Drops an open candidate known to be slower than another, which cannot be the
    fastest: where its interval lies wholly under the other's, or where the other is
    known faster by the quotients of their ratios (:func:`known_faster`)."""
    bounds = {id(c): c.comparison.interval() for c in candidates}
    for c in candidates:
        mine = bounds[id(c)]
        if c.stopped or mine is None:
            continue
        for other in candidates:
            theirs = bounds[id(other)]
            if other is not c and (theirs is not None and mine[1] < theirs[0]
                                   or known_faster(other, c)):
                c.stopped, c.slower_than = "slower", other.side.index
                break


def known_faster(fast: Candidate, slow: Candidate) -> bool:
    """Whether ``fast`` is known faster than ``slow`` by the one comparison engine, on
    the quotients of their ratios, seconds apart: in the rounds both were paired in,
    then in the rounds each was paired in alone, in their order
    (:func:`autotune.compare.quotients`): its interval (at ``slow``'s rule's
    confidence, from that rule's least pairs on) lies wholly above 1."""
    rule = dataclasses.replace(slow.comparison.rule, precision=None)
    comparison = quotients(rule, _by_round(fast), _by_round(slow))
    bounds = comparison.interval() if comparison.pairs >= rule.min_pairs else None
    return bounds is not None and bounds[0] > 1


def _by_round(c: Candidate) -> dict[int, tuple[float, float | None]]:
    """``c``'s pairs by round: each one's ratio and relative half-width."""
    return {p["round"]: (p["ratio"], p["half_width"]) for p in c.pairs}


def measure_paired(reference, candidates: list, spec: MeasureSpec, pairs: PairSpec,
                   quiet: tuple[int, ...] = ()) -> dict[str, Any]:
    """Warms up the ``reference`` pipeline and each of ``candidates`` (as
    :func:`autotune.trial._window.measure` does), then runs their pairs
    (:func:`run_pairs`); returns what the trial reports: each candidate's pairs and
    decision; where a try of a window length went back, what its pairs showed and
    what they were found costlier than (:class:`Known`, each); the windows of every
    config, the warm-ups, and the process's peak memory (all configs together: a
    paired trial measures speed, not memory)."""
    pipes = [reference, *candidates]
    sides = []
    for i, pipe in enumerate(pipes):
        sides.append(Side(i, _Stepper(pipe, None), WINDOW_BLOCKS,
                          settle_steps(pipe.config.num_workers, pipe.config.prefetch_factor),
                          lambda p=pipe: loader_worker_pids(p.loader)))
    tracker = MemoryTracker(lambda: [pid for s in sides for pid in s.worker_pids()],
                            PEAK_INTERVAL_S)
    warmups = []
    with tracker as memory, GraphRecordings() as graphs:
        memory.phase("warmup")
        for side in sides:
            pipe = side.stepper.pipe
            limit = pipe.config.recompile_limit or torch._dynamo.config.recompile_limit
            with torch._dynamo.config.patch(recompile_limit=limit), pipe.activate():
                times, _, _ = _warm_up(side.stepper, spec, pipe.config.compile_mode != "none",
                                       graphs)
            warmups.append(times)
            tail = sorted(times[-3:])
            side.step_s, side.epoch = tail[len(tail) // 2], epoch_steps(pipe.loader)
            side.length(pairs.window_s)
        memory.phase("pairs")
        compared = [Candidate(side, Comparison(pairs.rule), off_front=i in pairs.off_front)
                    for i, side in enumerate(sides[1:])]

        with stopped(quiet):
            ended = run_pairs(sides[0], compared, spec, pairs)
        memory.phase("done")
    return {"stopped": ended, "candidates": [c.to_dict() for c in compared],
            "went_back": back_from(compared, pairs),
            "windows": [s.windows for s in sides], "warmup_step_times_s": warmups,
            "window_steps": [s.steps for s in sides],
            "peak_rss_bytes": max(memory.peaks.values(), default=0)}
