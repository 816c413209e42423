"""What a run that tunes itself did: each candidate tried (:class:`Tried`), the
run's log (:class:`TuneLog`), and each window as its listeners hear it
(:class:`WindowEvent`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.compare import Comparison, Decision, Rule
from autotune.config import TrialConfig, short
from autotune.env import plural
from autotune.tuning._candidates import Change, loader_first


@dataclass
class Tried:
    """One candidate: its :class:`Change`, its pairs' ratios (candidate over
    incumbent) and the comparison's decision after them, what became of it
    (``kept``, ``slower``, ``no faster``, ``dropped`` at its first two pairs,
    ``failed`` and why, ``refused`` by the numerics check and why, ``unused`` where a
    loop of the user's never called the aggregation's hook in its windows,
    ``unfinished`` where the run or exploring's share ended first, or an adoption
    while it stood aside, ``not tried``), and the steps and seconds it trained."""

    change: Change
    ratios: list[float] = field(default_factory=list)
    losses: list[tuple[float, float]] = field(default_factory=list)  # (its, incumbent's), a pair
    verdict: str = ""
    reason: str = ""
    steps: int = 0
    seconds: float = 0.0
    # what its warm-up window (outside its pairs) took beyond the incumbent's pace: its
    # compile, or (eager) its loader's workers starting
    compile_s: float | None = None
    start_s: float | None = None
    decision: Decision | None = None
    # undecided, the most speed-up its pairs allow where the pairs left could not call
    # it faster (:meth:`autotune.compare.Comparison.out_of_reach`), else None
    reach: float | None = None
    aside_at: int | None = None  # its pairs when it stepped aside for the others, if it did

    @property
    def config(self) -> TrialConfig:
        return self.change.config

    @property
    def label(self) -> str:
        """Its name in the run's lines (``num_workers 2 -> 0``)."""
        return self.change.label

    @property
    def knob(self) -> str:
        return self.change.knob

    @property
    def value(self) -> Any:
        return self.change.value

    @property
    def ratio(self) -> float | None:
        """The speed-up: the geometric mean of its pairs' ratios."""
        return self.decision.speedup if self.decision is not None else None

    def compare(self, rule: Rule) -> Decision:
        """Its pairs decided under ``rule`` (kept in :attr:`decision`, and where the
        pairs left are out of its reach, :attr:`reach`)."""
        comparison = Comparison(rule, ratios=list(self.ratios))
        self.decision, self.reach = comparison.decision(), comparison.out_of_reach()
        return self.decision

    def line(self, verdict: str | None = None, reason: str | None = None) -> str:
        """Its line in the run's output: its verdict and why (or ``verdict`` and
        ``reason``: where it stands before one)."""
        decision = self.decision
        figure = "-" if decision is None or decision.speedup is None else \
            f"{decision.text()} over {decision.pairs} pair{'s' if decision.pairs != 1 else ''}"
        verdict, reason = verdict or self.verdict, self.reason if reason is None else reason
        why = f" ({reason})" if reason else ""
        if self.aside_at is not None and verdict != "stepped aside":
            why += f" (stepped aside after {self.aside_at} pairs for the others)"
        if self.compile_s is not None:
            why += f" (compiled in {self.compile_s:.1f} s)"
        elif self.start_s is not None:
            why += f" (its workers started in {self.start_s:.1f} s)"
        return f"tried {self.label:<34} {figure:>30}  {verdict}{why}"


@dataclass
class TuneLog:
    """What a tuned run did: every candidate tried, the step (and epoch) at which it
    settled, the steps each config trained (by ``short(config)``), the seconds its
    candidates took, and the step Ctrl-C stopped it at, if it did."""

    start: TrialConfig
    tried: list[Tried] = field(default_factory=list)
    settled_step: int | None = None
    settled_epoch: int | None = None
    steps_by_config: dict[str, int] = field(default_factory=dict)
    explore_s: float = 0.0
    wait_share: float | None = None  # of the window the queue was ordered by (by_bottleneck)
    cores_taken: float = 0.0  # the share of the cores the incumbent's loader workers took then
    ahead: str | None = None  # a change tried before either side's (fast end, FIRST), where one was
    final: TrialConfig | None = None
    interrupted_step: int | None = None  # where Ctrl-C stopped the run
    notes: list[str] = field(default_factory=list)  # what the run left out, and why

    @property
    def order(self) -> str | None:
        """Which side's knobs the run tried first (None: the queue was not ordered)."""
        if self.wait_share is None:
            return None
        return "the loader's knobs" if loader_first(self.wait_share, self.cores_taken) \
            else "the model's knobs"

    def lines(self) -> list[str]:
        """What the run did, in words: where it started and ended, when it settled,
        what exploring took, and the steps each config trained."""
        settled = f"settled at step {self.settled_step} (epoch {self.settled_epoch})" \
            if self.settled_step is not None else "still exploring at the end"
        tried = [t for t in self.tried if t.verdict != "not tried"]
        kept = [t for t in tried if t.verdict == "kept"]
        out = [f"tuned: {plural(len(tried), 'config')} tried, {len(kept)} kept; {settled}; "
               f"exploring took {self.explore_s:.1f} s",
               f"tuned: started on {short(self.start.to_dict())}, ended on "
               f"{short((self.final or self.start).to_dict())}"]
        if self.wait_share is not None:
            took = f", and its loader workers took {100 * self.cores_taken:.0f}% of the cores" \
                if self.cores_taken else ""
            ahead = f"{self.ahead} first (what paid most where measured on such a machine), then " \
                if self.ahead else ""
            out.append(f"tuned: the incumbent waited for its batches "
                       f"{100 * self.wait_share:.0f}% of its step{took}: {ahead}{self.order} "
                       "tried first")
        out += [f"tuned: {steps:>6} steps on {key}" for key, steps in self.steps_by_config.items()]
        return out + [f"tuned: {note}" for note in self.notes]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict:
        return {"start": self.start.to_dict(), "final": (self.final or self.start).to_dict(),
                "settled_step": self.settled_step, "settled_epoch": self.settled_epoch,
                "interrupted_step": self.interrupted_step,
                "explore_s": self.explore_s, "wait_share": self.wait_share,
                "cores_taken": self.cores_taken, "ahead": self.ahead,
                "steps_by_config": self.steps_by_config, "notes": self.notes,
                "tried": [{"change": t.label, "knob": t.knob, "value": t.value,
                           "config": t.config.to_dict(), "losses": t.losses,
                           "ratios": t.ratios, "verdict": t.verdict, "reason": t.reason,
                           "speedup": t.ratio, "interval": None if t.decision is None
                           or t.decision.low is None else [t.decision.low, t.decision.high],
                           "steps": t.steps, "seconds": t.seconds, "compile_s": t.compile_s,
                           "start_s": t.start_s, "aside_at": t.aside_at}
                          for t in self.tried]}

@dataclass(frozen=True)
class WindowEvent:
    """One window of a tuned run, as :attr:`TunedRun.on_window` hears it (``autotune
    train --tune`` records each as a trial of its study): the config that trained it,
    the candidate's change (None: the incumbent's window), the epoch, the run's steps
    before it, and what it trained: steps, seeds, seconds, seeds per second after its
    first step, its mean loss over its seeds (None where no step gave one), and the
    error that ended it early, if any."""

    config: TrialConfig
    change: str | None
    epoch: int
    step: int
    steps: int
    seeds: int
    seconds: float
    rate: float
    loss: float | None
    error: str | None = None
