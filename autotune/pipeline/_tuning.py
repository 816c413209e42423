"""Tuning inside a training run (``autotune train --tune``, ``train(..., tune=...)``).

The run starts on the config it is given and, while it trains, tries other values
of the knobs that leave what is learnt unchanged (:data:`NEUTRAL_KNOBS`; the AMP and
feature dtypes only where allowed, :attr:`TuneSpec.precision`). Batch size and
fanout never change in a run. A compile mode (and, compiled, the shapes) is tried
only where its compile pays back within what is left of the run
(:meth:`TunedRun._pays_back`), and its first window, which compiles, is a warm-up
outside its ratios. Every candidate trains real steps on the same model,
with the same optimizer and its state: it is built around them
(:func:`autotune.pipeline.build` with ``model`` and ``optimizer``).

Each epoch visits every training seed exactly once. The seeds' order is drawn per
epoch from the config's seed, and the loaders take it from one :class:`SeedOrder`:
a window hands its loader the next seeds of the epoch, and the seeds a window did
not train (a candidate dropped or failed mid-window) go to the next window.

A candidate's window of :attr:`TuneSpec.window_steps` steps is paired with a window
of the incumbent's own, measured just before or just after it (the order alternates
pair by pair, as in ABBA, so that a steady drift cancels over two pairs), and the
pair's figure is the ratio of their rates. The verdict comes from the one comparison
engine (:class:`autotune.compare.Comparison`): kept where the speed-up's 95%
confidence sequence lies above 1 (and not wholly within :attr:`TuneSpec.min_gain`
of it), "no faster" where it lies under 1 + min_gain, "slower" where under 1. A
candidate whose pairs spread wide gets more pairs, up to :attr:`TuneSpec.pairs`,
while exploring's share lasts; one under :attr:`TuneSpec.screen` times the incumbent
in each of its first two pairs is dropped then (it could not pay back the pairs a
verdict takes).
The candidates are tried in the order of where the incumbent's step spends its time
(:func:`by_bottleneck`): the loader's knobs first where its windows waited for batches
more than half of their time, counting the computing its loader workers slow by
taking its cores, the model's first otherwise; bfloat16 autocast, where the run may
try it, before either (the largest gain measured on a CPU that computes it); a
compile always last. Windows are as
long as :attr:`TuneSpec.window_steps` where the run holds them, shorter where its
epochs or its share are short, yet not shorter than the batches the incumbent's
loader has in flight and two more where half an epoch holds that (:func:`fit_window`).
A candidate that fails (out of memory, a worker crash, an error) is recorded and
dropped, and training goes on with the incumbent. Exploring ends when no candidate
is left, or once the candidates have trained :attr:`TuneSpec.share` of the run's
planned steps; the rest of the run trains on the winner.
"""
from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterator

import torch
from torch import Tensor
from torch.utils.data import Sampler

from autotune.compare import MIN_PAIRS, Comparison, Decision, Rule
from autotune.config import TrialConfig, short
from autotune.env import native_bf16, plural
from autotune.errors import AutotuneError, ConfigError
from autotune.files import check_interrupt
from autotune.pipeline._build import Pipeline, build, check_config, device_sync
from autotune.sampling import resolve_backend
from autotune.topology import STRATEGIES, Topology, affinity_sets, this_machine

# The knobs a run may change: the same batches of the same seeds through the same
# model and optimizer (a compiled model wraps the same module; padding adds isolated
# zero-feature nodes, which leave the loss and gradients exact). Dropout masks and
# checkpointing change the model itself, which a run keeps: they are not tried.
NEUTRAL_KNOBS = ("num_workers", "affinity", "sampling_backend", "aggregation",
                 "compile_mode", "shapes")
PRECISION_KNOBS = ("amp_dtype", "feature_dtype")  # with TuneSpec.precision only
# The numerics check a precision candidate passes before its pairs: on each of the
# first PROBES batches the incumbent trained, its gradient against the incumbent's
# (same parameters, same dropout masks) points the same way (cosine at least
# GRAD_COSINE) and is as large (norms within GRAD_NORM of each other)
PROBES = 3
GRAD_COSINE = 0.99
GRAD_NORM = 0.05
# ... and then, over its pairs, its training loss stays within the incumbent's paired
# noise (loss_check), which is never taken as under this share of its mean loss
LOSS_FLOOR = 0.05
LOADER_KNOBS = ("num_workers", "affinity", "sampling_backend")  # where batches are made
# tried before either side's knobs, where the run may try it: bfloat16 autocast, the
# largest single-knob gain benchmarks/knobs.py measured on a CPU that computes it
# (and on a GPU), larger than what any other knob gave there
FIRST = (("amp_dtype", "bfloat16"),)
COMPILE_KNOBS = ("compile_mode", "shapes")  # tried last: the dearest


@dataclass(frozen=True)
class TuneSpec:
    """How a run tunes itself. ``share``: the most of the run's planned steps its
    candidates may train (0.10); ``window_steps``: the most steps a window (fewer
    where the run's epochs or its share are short, :func:`fit_window`); ``pairs``: the
    most pairs a candidate gets (it stops sooner where its verdict is clear, and no
    verdict comes before ``min_pairs``); ``screen``: a candidate under this times
    the incumbent in each of its first two pairs is dropped; ``min_gain``: the comparison's
    margin: a speed-up known to lie within it of 1 is a tie, not worth a new
    pipeline, and one known to lie under 1 + this is no faster; ``precision``: the AMP and feature dtypes may be
    tried too (they change the arithmetic, not the batches); ``compile``: compile
    modes and shapes may be tried (None: on a GPU only, where a compile pays back
    sooner; benchmarks/knobs.py measures it on a CPU), each only where ``compile_s``
    (the compile time planned for until this run has measured one) pays back within
    what is left of the run at a gain of ``compile_gain``."""

    share: float = 0.10
    window_steps: int = 8
    pairs: int = 32
    screen: float = 0.8
    min_gain: float = 0.02
    precision: bool = False
    compile: bool | None = None
    compile_s: float = 20.0
    compile_gain: float = 1.25
    min_pairs: int = MIN_PAIRS

    def __post_init__(self) -> None:
        if not 0 < self.share <= 1:
            raise ConfigError(f"the tuning share must be in (0, 1] (got {self.share!r})")
        if self.compile_s < 0 or self.compile_gain <= 1:
            raise ConfigError("the tuning compile_s must be >= 0 and compile_gain above 1 "
                              f"(got {self.compile_s!r}, {self.compile_gain!r})")
        if not 0 <= self.min_gain < 1:
            raise ConfigError(f"the tuning min_gain must be in [0, 1) (got {self.min_gain!r})")
        if self.window_steps < 2 or self.pairs < 1 or self.min_pairs < 2:
            raise ConfigError("a tuning window needs 2 steps or more, a candidate a pair at "
                              f"least and min_pairs 2 or more (got {self.window_steps!r} "
                              f"steps, {self.pairs!r} pairs, min_pairs {self.min_pairs!r})")

    @property
    def rule(self) -> Rule:
        """How a candidate's pairs are decided (:class:`autotune.compare.Rule`): no
        verdict before ``min_pairs`` (or ``pairs``, where fewer; 2 at least, the
        fewest an interval takes), none after ``pairs``."""
        most = max(self.pairs, 2)
        return Rule(margin=self.min_gain, min_pairs=min(self.min_pairs, most), max_pairs=most)


MIN_WINDOW = 3  # a window's first step is trained untimed: three steps time two
SCREEN_PAIRS = 2  # a candidate under TuneSpec.screen in each of its first pairs is dropped


def fit_window(asked: int, epoch_steps: int, share_steps: float | None = None,
               verdicts: int = 0, floor: int = MIN_WINDOW) -> int:
    """A window's steps in a run whose epochs have ``epoch_steps`` steps: ``asked``,
    but at most half an epoch, so that a pair (the incumbent's window and the
    candidate's) fits in one, where a window cut by the epoch's end would time fewer
    steps or none; and, where exploring's share (``share_steps`` of candidates'
    steps) would not hold ``verdicts`` windows of that length (a verdict's least
    pairs for each candidate), as short as that share holds them: a short run tries
    its candidates in short windows rather than few of them in long ones, yet not
    under ``floor`` (the batches the incumbent's loader has in flight, and two
    more), where half an epoch holds that. Never under :data:`MIN_WINDOW` (``asked``
    where less)."""
    steps = asked if share_steps is None or not verdicts else \
        min(asked, int(share_steps // verdicts))
    steps = min(max(steps, min(floor, asked)), epoch_steps // 2)  # a pair fits an epoch
    return max(steps, min(MIN_WINDOW, asked))


@dataclass(frozen=True)
class Change:
    """A candidate as data: the knob it changes, the value it gives it (for
    ``affinity``, the strategy), the config it makes, and its name in the run's
    lines (``num_workers 2 -> 0``)."""

    knob: str
    value: Any
    config: TrialConfig
    label: str

    @classmethod
    def of(cls, config: TrialConfig, knob: str, value: Any, **fields: Any) -> Change:
        """``config`` with ``knob`` set to ``value`` (``fields``: the config's fields
        that carry it, where they are not the knob itself: the affinity's cores)."""
        label = f"{knob} -> {value}" if fields else f"{knob} {getattr(config, knob)} -> {value}"
        return cls(knob, value, config.replace(**(fields or {knob: value})), label)


@dataclass
class Tried:
    """One candidate: the knob it changed, its pairs' ratios (candidate over
    incumbent) and the comparison's decision after them, what became of it
    (``kept``, ``slower``, ``no faster``, ``dropped`` at its first two pairs, ``failed``
    and why, ``refused`` by the numerics check and why, ``unused`` where a loop of the
    user's never called the aggregation's hook in its windows, ``unfinished`` where the run or exploring's share ended first, ``not
    tried``), and the steps and seconds it trained."""

    config: TrialConfig
    change: str
    ratios: list[float] = field(default_factory=list)
    losses: list[tuple[float, float]] = field(default_factory=list)  # (its, incumbent's), a pair
    verdict: str = ""
    reason: str = ""
    steps: int = 0
    seconds: float = 0.0
    compile_s: float | None = None  # what its warm-up window took beyond the incumbent's pace
    decision: Decision | None = None
    knob: str = ""  # the knob it changed and the value it gave it (Change's)
    value: Any = None

    @classmethod
    def of(cls, change: Change, **fields: Any) -> Tried:
        return cls(change.config, change.label, knob=change.knob, value=change.value, **fields)

    def as_change(self) -> Change:
        return Change(self.knob, self.value, self.config, self.change)

    @property
    def ratio(self) -> float | None:
        """The speed-up: the geometric mean of its pairs' ratios."""
        return self.decision.speedup if self.decision is not None else None

    def compare(self, rule: Rule) -> Decision:
        """Its pairs decided under ``rule`` (kept in :attr:`decision`)."""
        self.decision = Comparison(rule, ratios=list(self.ratios)).decision()
        return self.decision

    def line(self) -> str:
        decision = self.decision
        figure = "-" if decision is None or decision.speedup is None else \
            f"{decision.text()} over {decision.pairs} pair{'s' if decision.pairs != 1 else ''}"
        why = f" ({self.reason})" if self.reason else ""
        if self.compile_s is not None:
            why += f" (compiled in {self.compile_s:.1f} s)"
        return f"tried {self.change:<34} {figure:>30}  {self.verdict}{why}"


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
    ahead: str | None = None  # a change tried before either side's (FIRST), where one was
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
            ahead = f"{self.ahead} first (the largest gain measured on such a machine), then " \
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
                "tried": [{"change": t.change, "knob": t.knob, "value": t.value,
                           "config": t.config.to_dict(), "losses": t.losses,
                           "ratios": t.ratios, "verdict": t.verdict, "reason": t.reason,
                           "speedup": t.ratio, "interval": None if t.decision is None
                           or t.decision.low is None else [t.decision.low, t.decision.high],
                           "steps": t.steps, "seconds": t.seconds, "compile_s": t.compile_s}
                          for t in self.tried]}


class SeedOrder(Sampler):
    """The positions of the training seeds a loader takes next: set per window."""

    def __init__(self) -> None:
        self.positions: list[int] = []

    def __iter__(self):
        return iter(self.positions)

    def __len__(self) -> int:
        return len(self.positions)


def candidates(config: TrialConfig, spec: TuneSpec, topology: Topology | None = None
               ) -> list[Change]:
    """The one-knob changes of ``config`` a run tries, in order, each a valid config:
    loader workers (0, 1, 2 and all cores but one), the cores' affinity (each
    strategy the machine can build, with workers), the sampling backend, the
    aggregation (an eager model), with ``spec.precision`` the AMP dtype (bfloat16 on
    a GPU or a CPU that computes it natively) and the feature dtype, and last, as
    ``spec.compile`` says, the compile mode (reduce-overhead on a GPU only) and,
    compiled, the shapes."""
    topology = this_machine() if topology is None else topology
    cores = len(topology.cores)
    changes: list[tuple[str, Any, dict]] = []  # knob, value, and its fields where others
    if not config.gpu_sampling:
        changes += [("num_workers", w, {}) for w in dict.fromkeys((0, 1, 2, cores - 1))
                    if 0 <= w]
        changes += [("affinity", s, dict(zip(("loader_cores", "compute_cores"),
                                             _cores(s, config, topology))))
                    for s in STRATEGIES if _cores(s, config, topology) is not None]
    changes += [("sampling_backend", b, {})
                for b in ("builtin", "pyg")  # not one that resolves to the same sampler
                if _resolved(b) != _resolved(config.sampling_backend)]
    if config.compile_mode == "none":
        changes += [("aggregation", a, {}) for a in ("scatter", "sparse")]
    if spec.compile or spec.compile is None and config.device == "cuda":  # last: the dearest
        modes = ("none", "default") + (("reduce-overhead",) if config.device == "cuda" else ())
        changes += [("compile_mode", m, {}) for m in modes]
        if config.compile_mode != "none":
            changes += [("shapes", s, {}) for s in ("dynamic", "padded")]
    if spec.precision:
        bf16 = ("bfloat16",) if config.device == "cuda" or native_bf16() else ()
        changes += [("amp_dtype", d, {}) for d in ("float32", *bf16)]
        changes += [("feature_dtype", d, {}) for d in ("float32", "bfloat16")]
    out, seen = [], {config.key()}
    for knob, value, fields in changes:
        try:
            change = Change.of(config, knob, value, **fields)
            check_config(change.config)
        except AutotuneError:  # not a config here (a backend this machine lacks, ...)
            continue
        if change.config.key() not in seen:
            seen.add(change.config.key())
            out.append(change)
    return out


# what precision gave where it was measured: benchmarks/results/knobs.json
PRECISION_GAIN = ("bfloat16 autocast measured 1.45x float32 in benchmarks/knobs.py "
                  "(2-core AMD EPYC with avx512_bf16, scale 0.1; docs/benchmarks.md), each "
                  "candidate checked by its gradients first")


def precision_notes(config: TrialConfig, spec: TuneSpec) -> list[str]:
    """What the run says of precision before it trains: bfloat16 left out where this
    CPU emulates it (with consent), or the flag that would try it (without)."""
    native = config.device == "cuda" or native_bf16()
    if spec.precision and not native:
        return ["precision: bfloat16 autocast not tried: this CPU has neither avx512_bf16 "
                "nor AMX, and computes bfloat16 by emulation, slower than float32 "
                "(docs/knobs.md); the feature dtype is tried"]
    if not spec.precision and native and config.amp_dtype == "float32":
        return ["precision: not tried (it changes the numerics: --tune-precision, or "
                f"TuneSpec(precision=True), asks for it); {PRECISION_GAIN}"]
    return []


def changes_precision(incumbent: TrialConfig, candidate: TrialConfig) -> bool:
    """Whether ``candidate`` differs from ``incumbent`` in a knob of precision."""
    return any(getattr(incumbent, k) != getattr(candidate, k) for k in PRECISION_KNOBS)


def numerics_check(incumbent: Pipeline, candidate: Pipeline, probes: list) -> str:
    """Why ``candidate``'s numerics differ from ``incumbent``'s too much to train on
    ("" where they do not): on each probe batch, the two gradients of the same
    parameters (:meth:`Pipeline.gradients`) must point the same way (cosine at least
    :data:`GRAD_COSINE`) and be as large (norms within :data:`GRAD_NORM`). A probe that
    cannot run (a model the task's loss cannot call) fails it: precision is kept only
    where it was checked."""
    if not probes:
        return "no probe batch trained yet"
    for k, batch in enumerate(probes, start=1):
        try:
            ours, theirs = incumbent.gradients(batch, seed=k), candidate.gradients(batch, seed=k)
        except Exception as exc:  # the user's model or loss: the check could not run
            return f"its probe could not run ({type(exc).__name__}: {exc})"[:200]
        if not bool(torch.isfinite(theirs).all()):
            return f"non-finite gradients on probe batch {k}"
        norms = ours.norm(), theirs.norm()
        if float(norms[0]) == 0.0:
            continue
        cosine = float(torch.dot(ours, theirs) / (norms[0] * norms[1]).clamp_min(1e-30))
        ratio = float(norms[1] / norms[0])
        if cosine < GRAD_COSINE:
            return (f"gradient direction off on probe batch {k}: cosine {cosine:.4f} < "
                    f"{GRAD_COSINE}")
        if abs(ratio - 1) > GRAD_NORM:
            return (f"gradient size off on probe batch {k}: {ratio:.3f}x the float32 one, "
                    f"beyond ±{100 * GRAD_NORM:.0f}%")
    return ""


def loss_check(losses: list[tuple[float, float]]) -> str:
    """Why a precision candidate's training loss over its windows lies beyond the
    incumbent's paired noise ("" where it does not, or with under 2 pairs to tell):
    its mean excess over the incumbent's window in the same pair must not exceed the
    median change between the incumbent's own windows of consecutive pairs (what its
    loss moves by anyway, a trend of two windows included), or :data:`LOSS_FLOOR` of
    the incumbent's mean loss where that is larger (a converged loss barely moves). A
    lower loss is no harm."""
    if len(losses) < 2:
        return ""
    excess = statistics.fmean(ours - theirs for ours, theirs in losses)
    noise = max(statistics.median(abs(b[1] - a[1]) for a, b in zip(losses, losses[1:])),
                LOSS_FLOOR * statistics.fmean(theirs for _, theirs in losses))
    if excess <= noise:
        return ""
    return (f"its training loss {excess:+.4g} over the float32 windows beside it, a pair "
            f"on average, beyond their own noise of {noise:.4g}")


class _Refused(Exception):
    """A candidate refused before its pairs (its numerics)."""


def by_bottleneck(changes: list[Change], wait_share: float,
                  cores_taken: float = 0.0) -> list[Change]:
    """``changes`` in the order to try
    them, given the share of the incumbent's step time spent waiting for its batch
    and the share of the machine's cores its loader workers take: a loader change
    can gain at most what the step waits, and what it computes slowed by the workers
    beside it; a model change at most what it computes; so the larger side's knobs go
    first (:func:`loader_first`), after bfloat16 autocast where it is a candidate
    (:data:`FIRST`); compile modes and shapes stay last (a compile costs seconds
    before its first timed step). Stable within a side."""
    first = loader_first(wait_share, cores_taken)

    def rank(change: Change) -> tuple[bool, bool, bool]:
        return change.knob in COMPILE_KNOBS, (change.knob, change.value) not in FIRST, \
            (change.knob in LOADER_KNOBS) != first

    return sorted(changes, key=rank)


def loader_first(wait_share: float, cores_taken: float = 0.0) -> bool:
    """Whether a step that waits ``wait_share`` of its time for its batch, its loader
    workers taking ``cores_taken`` of the cores its computing has, tries the loader's
    knobs before the model's: where the loader's side is the larger, the wait plus
    the computing that shares its cores with the workers (on 2 cores, 2 workers
    take them all: fewer workers may give the step its cores back)."""
    return wait_share + (1 - wait_share) * cores_taken > 0.5


def cores_taken(config: TrialConfig, topology: Topology | None = None) -> float:
    """The share of the machine's cores ``config``'s loader workers take (a worker a
    core, at most all of them; those pinned to their own cores take those)."""
    cores = len((this_machine() if topology is None else topology).cores)
    workers = len(config.loader_cores) if config.loader_cores else config.num_workers
    return min(workers / cores, 1.0) if cores else 0.0


def _resolved(backend: str) -> str | None:
    """The sampler ``backend`` runs here (auto: PyG's or the built-in), None where none."""
    try:
        return resolve_backend(backend)
    except AutotuneError:
        return None


def _cores(strategy: str, config: TrialConfig, topology: Topology):
    """``(loader_cores, compute_cores)`` of an affinity strategy for ``config``'s
    workers, or None where the machine cannot build it."""
    if config.num_workers == 0 or topology.why_not(strategy):
        return None
    return affinity_sets(strategy, config.num_workers, topology)


@dataclass
class _Window:
    steps: int = 0
    seeds: int = 0  # trained: the window's first ``seeds`` positions
    rate: float = 0.0  # seeds per second, after the window's first step
    seconds: float = 0.0
    # each timed step's wait for its batch (on the host: the loader's next and the
    # batch's hand-over) and its whole time, the caller's step with it
    waits: list[tuple[float, float]] = field(default_factory=list)
    loss_sum: float = 0.0  # each loss its caller gave, times its step's seeds
    loss_seeds: int = 0  # the seeds of those steps
    error: BaseException | None = None  # what stopped it early (an Exception)

    def wait_share(self, skip: int) -> float | None:
        """The share of its timed steps' time spent waiting for their batches, past the
        first ``skip`` (the batches its loader had in flight when the window began,
        whose wait is not the loader's pace); None with fewer than 2 such steps."""
        steady = self.waits[skip:]
        total = sum(step for _, step in steady)
        return min(sum(wait for wait, _ in steady) / total, 1.0) \
            if len(steady) >= 2 and total > 0 else None

    @property
    def loss(self) -> float | None:
        """The mean loss over the seeds of the steps that gave one (None: none did)."""
        return self.loss_sum / self.loss_seeds if self.loss_seeds else None

    def add(self, other: _Window) -> None:
        """Counts ``other``'s steps, seeds, seconds and loss in this one."""
        self.steps, self.seeds = self.steps + other.steps, self.seeds + other.seeds
        self.seconds += other.seconds
        self.loss_sum, self.loss_seeds = self.loss_sum + other.loss_sum, \
            self.loss_seeds + other.loss_seeds


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


class _IncumbentFailed(Exception):
    """The incumbent's own window failed: the run fails, as an untuned one would."""


class Step:
    """The step a caller trains on a batch of :meth:`TunedRun.batches`, inside
    :meth:`TunedRun.step`; ``loss`` (optional): the step's loss, of which its window
    and epoch record the mean over their seeds."""

    loss: Tensor | float | None = None


class TunedRun:
    """A training run that tunes itself. :meth:`batches` yields one epoch's batches
    (every training seed once) in windows, trying candidates while exploring, and the
    caller trains each inside :meth:`step`, with :attr:`current`'s model and autocast
    (:meth:`epoch` does so with the pipeline's own step); ``pipe`` is the incumbent's
    pipeline, ``log`` what the run did. ``close()`` ends every loader."""

    def __init__(self, config: TrialConfig, data, spec: TuneSpec, *, epochs: int,
                 num_classes: int | None = None, cache_file=None,
                 on_line: Callable[[str], None] | None = None,
                 queue: list[Change] | None = None,
                 on_window: Callable[[WindowEvent, TuneLog], None] | None = None,
                 model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None,
                 counts_edges: bool = False) -> None:
        self.data, self.spec, self.num_classes, self.cache_file = data, spec, num_classes, \
            cache_file
        self.on_line = on_line or (lambda line: None)
        self.on_window = on_window or (lambda event, log: None)
        self._epoch = 0
        self.order = SeedOrder()
        self.pipe = self._build(config, model, optimizer)
        self.current = self.pipe  # the pipeline whose batch :meth:`batches` yielded last
        self.seeds = len(self.pipe.loader.dataset)
        epoch_steps = -(-self.seeds // config.batch_size)
        self.planned_steps = epochs * epoch_steps
        self.explore_steps_left = spec.share * self.planned_steps
        self.queue = candidates(config, spec) if queue is None else list(queue)
        self._ordered = queue is not None  # a queue given is tried in its order
        windows = self._fit(epochs, epoch_steps)
        self.compile_s = spec.compile_s  # planned, until this run measures one
        self.log = TuneLog(start=config, final=config, notes=precision_notes(config, spec))
        self.too_short = self._too_short(epochs, epoch_steps, windows)
        if self.too_short:
            self.log.notes.append(f"this run is too short to decide a candidate: "
                                  f"{self.too_short}")
        for note in self.log.notes:
            self.on_line(note)
        self._probes: list = []  # the incumbent's first batches: the numerics check's
        # calls of the aggregation's hook in candidates' windows, where the caller
        # counts them (``counts_edges``: TunedLoop's; None: the run's own step, which
        # always calls it)
        self.edges_asked: int | None = 0 if counts_edges else None
        self.steps = 0
        self.totals = _Window()  # the last epoch's steps, seeds, seconds and loss
        self._unfinished: Tried | None = None  # a candidate the last epoch's end cut short
        self._candidate: Pipeline | None = None  # the one being tried: close() ends it too
        self._failure: Exception | None = None  # what a candidate's step raised
        self._loss: Tensor | float | None = None  # the step's, where its caller said

    def _fit(self, epochs: int, epoch_steps: int) -> int:
        """Sizes the run's windows (:func:`fit_window`) and a candidate's most pairs;
        returns how many windows exploring's share holds."""
        spec = self.spec
        # a candidate keeps its batch size (it changes no knob that learns): so do epochs
        self.window_steps = fit_window(spec.window_steps, epoch_steps, self.explore_steps_left,
                                       len(self.queue) * spec.rule.min_pairs,
                                       floor=self._in_flight() + 2)
        # a candidate gets no more pairs than the run can give it (a window of its
        # share each, and as many an epoch as an epoch holds), and no fewer than a
        # verdict needs
        windows = int(self.explore_steps_left // self.window_steps)
        per_epoch = max(epoch_steps // (2 * self.window_steps), 1)
        self.max_pairs = max(min(spec.pairs, epochs * per_epoch, windows), spec.rule.min_pairs)
        return windows

    def _build(self, config: TrialConfig, model: torch.nn.Module | None,
               optimizer: torch.optim.Optimizer | None) -> Pipeline:
        """A pipeline of ``config`` around ``model`` and ``optimizer`` (None: its own,
        seeded); around a training's optimizer, the random state stays where it was."""
        state = torch.get_rng_state()
        pipe = build(config, self.data, model, num_classes=self.num_classes,
                     cache_file=self.cache_file, order=self.order, optimizer=optimizer)
        if optimizer is not None:
            torch.set_rng_state(state)
        return pipe

    def _too_short(self, epochs: int, epoch_steps: int, windows: int) -> str:
        """Before the run trains: why it is too short to decide any candidate, where
        it is ("" otherwise). A verdict needs the rule's least pairs, each a window of
        the candidate's from exploring's share (``windows`` of them)."""
        least = self.spec.rule.min_pairs
        if not self.queue or windows >= least:
            return ""
        return (f"exploring's share ({self.spec.share:.0%} of {plural(epochs, 'epoch')} of "
                f"{plural(epoch_steps, 'step')}) holds {plural(windows, 'window')} of "
                f"{self.window_steps} steps, and a verdict needs {least} pairs, a window "
                f"each; give a larger --tune-share (TuneSpec(share=...)) or more epochs")

    @property
    def exploring(self) -> bool:
        return bool(self.queue) and self.explore_steps_left > 0

    def epoch(self, number: int) -> tuple[int, int, float, float]:
        """One epoch trained with the pipelines' own step: (steps, seeds, training
        seconds, mean loss over its seeds)."""
        for batch in self.batches(number):
            with self.step() as step:
                step.loss = self.current.train_step(batch)
        totals = self.totals
        return totals.steps, totals.seeds, totals.seconds, totals.loss or 0.0

    @contextlib.contextmanager
    def step(self) -> Iterator[Step]:
        """Around the caller's step on the batch :meth:`batches` yielded last. Where a
        candidate's batch it was, what the step raises is that candidate's failure: it
        is recorded and dropped, and the batch's seeds train again on the incumbent.
        The incumbent's step raises as an untuned run's would."""
        step = Step()
        try:
            yield step
        except Exception as exc:
            if self.current is self.pipe:
                raise
            self._failure = exc
        if step.loss is not None:
            self._loss = step.loss  # summed on its device, read at the window's end

    def batches(self, number: int) -> Iterator:
        """Epoch ``number``'s batches, each on its device: every training seed once, in
        an order drawn from the config's seed and the epoch's number. A window's time
        spans its caller's steps; :attr:`totals` holds the epoch's."""
        self._epoch, self.totals = number, _Window()
        generator = torch.Generator().manual_seed(self.log.start.seed * 1_000_003 + number)
        pending = torch.randperm(self.seeds, generator=generator).tolist()
        while pending:
            if self.exploring and len(pending) >= 2 * self.window_steps * self.batch_size:
                window = yield from self._try_next(pending)
            else:
                window = yield from self._window(self.pipe, pending, len(pending))
                if window.error is not None:
                    raise window.error
            pending = pending[window.seeds:]
            self.totals.add(window)
            if self.log.settled_step is None and not self.exploring:
                self._settle(number)

    def _window(self, pipe: Pipeline, pending: list[int], steps: int,
                change: str | None = None) -> Generator[Any, None, _Window]:
        """Yields ``pipe``'s batches (a candidate's, ``change`` says which) of the next
        ``steps`` batches of ``pending``; :attr:`on_window` hears the window."""
        self.current, window = pipe, _Window()
        with pipe.activate():
            yield from self._timed(pipe, pending[:steps * pipe.config.batch_size], window)
        key = short(pipe.config.to_dict())
        self.log.steps_by_config[key] = self.log.steps_by_config.get(key, 0) + window.steps
        error = None if window.error is None else \
            f"{type(window.error).__name__}: {window.error}"[:300]
        step, self.steps = self.steps, self.steps + window.steps  # counted before it is
        # heard: Ctrl-C handled at the end of its recording finds the run's steps whole
        self.on_window(WindowEvent(pipe.config, change, self._epoch, step, window.steps,
                                   window.seeds, window.seconds, window.rate, window.loss,
                                   error), self.log)
        return window

    def _timed(self, pipe: Pipeline, positions: list[int], out: _Window) -> Iterator:
        """Yields ``pipe``'s batches of ``positions`` (in order) until they are spent, or
        a batch or its step fails; fills ``out``. The window's first step is trained but
        not timed: the loader's first batch (its workers starting, or refilling their
        queue)."""
        self.order.positions, self._failure, self._loss = positions, None, None
        sync = device_sync(pipe.device)
        timed_seeds, loss_sum = 0, 0.0  # the loss summed by seeds: no host sync a step
        sync()
        started = t0 = resumed = time.perf_counter()
        try:
            for batch in pipe.loader:
                seeds = pipe.task.seeds(batch)
                if not pipe.config.gpu_sampling:  # GPU-resident batches are built there
                    batch = batch.to(pipe.device, non_blocking=True)
                arrived = time.perf_counter()
                if pipe is self.pipe and len(self._probes) < PROBES:
                    self._probes.append(batch)
                yield batch
                now = time.perf_counter()
                if out.steps:  # the first step is not timed
                    out.waits.append((arrived - resumed, now - resumed))
                resumed = now
                check_interrupt()  # Ctrl-C that Python swallowed (autotune.files)
                if self._failure is not None:
                    raise self._failure
                if self._loss is not None:
                    loss_sum, out.loss_seeds = loss_sum + self._loss * seeds, out.loss_seeds + seeds
                    self._loss = None
                out.steps, out.seeds = out.steps + 1, out.seeds + seeds
                if out.steps == 1:
                    sync()
                    t0 = time.perf_counter()
                    continue
                timed_seeds += seeds
            sync()
        except Exception as exc:  # a candidate's failure: the run goes on without it
            out.error = exc
        now = time.perf_counter()
        out.seconds, out.loss_sum = now - started, float(loss_sum)
        out.rate = timed_seeds / (now - t0) if timed_seeds and now > t0 else 0.0

    def _try_next(self, pending: list[int]) -> Generator[Any, None, _Window]:
        """Yields the batches of the next candidate, each of its windows paired with
        one of the incumbent's just before or after it (the order alternating pair by
        pair), until a verdict (:meth:`_verdict`, or failed) or the end of exploring's
        share; returns what they trained, in all."""
        tried = self._next()
        total, rest = _Window(), pending

        def train(pipe: Pipeline, extra: int = 0) -> Generator[Any, None, _Window]:
            nonlocal rest
            window = yield from self._window(pipe, rest, self.window_steps + extra,
                                             None if pipe is self.pipe else tried.change)
            rest = rest[window.seeds:]
            total.add(window)
            if window.error is not None and pipe is self.pipe:
                raise _IncumbentFailed() from window.error
            if window.error is not None:
                raise window.error
            return window

        started, candidate, asked = time.perf_counter(), None, self.edges_asked
        try:
            # a window to order the queue by runs on past the batches in flight
            reference = yield from train(self.pipe, 0 if self._ordered else self._in_flight())
            tried = self._reorder(tried, reference)
            if self._pays_back(tried, reference.rate):
                candidate = self._candidate = self._build(tried.config, self.pipe.eager_model,
                                                          self.pipe.optimizer)
                self._check_numerics(tried, candidate)
                if tried.config.compile_mode != "none":
                    reference = yield from self._warm_up(tried, train, candidate,
                                                         reference.rate)
                yield from self._pairs(tried, candidate, train, reference, lambda: rest)
        except _IncumbentFailed as failed:
            if candidate is not None:
                candidate.close()
                self._candidate = None
            raise failed.__cause__
        except _Refused:  # its numerics differ: never trained, dropped
            pass
        except Exception as exc:  # out of memory, a dead worker, a compile error
            tried.verdict, tried.reason = "failed", f"{type(exc).__name__}: {exc}"[:300]
        self._check_hook(tried, asked)
        self.log.explore_s += time.perf_counter() - started
        self._conclude(tried, candidate)
        return total

    def _check_numerics(self, tried: Tried, candidate: Pipeline) -> None:
        """Refuses a precision candidate whose gradients differ from the incumbent's
        (:func:`numerics_check`): its verdict says why, and it trains no window."""
        if changes_precision(self.pipe.config, tried.config):
            why = numerics_check(self.pipe, candidate, self._probes)
            if why:
                tried.verdict, tried.reason = "refused", f"numerics check: {why}"
                raise _Refused()

    def _check_hook(self, tried: Tried, asked: int | None) -> None:
        """Marks an aggregation candidate ``unused`` where the user's step never
        called the aggregation's hook in its windows (``asked``: the calls before them;
        None: the run's own step)."""
        if asked is not None and asked == self.edges_asked and tried.steps and \
                tried.config.aggregation != self.pipe.config.aggregation:
            tried.verdict, tried.reason = "unused", (
                "the step never called loop.edges(batch) in its windows, so the aggregation "
                "changed nothing: call the model on loop.edges(batch), not batch.edge_index")

    def _pairs(self, tried: Tried, candidate: Pipeline, train, reference: _Window | None,
               rest: Callable[[], list[int]]) -> Generator[Any, None, None]:
        """``tried``'s pairs, each a window of ``candidate`` and one of the incumbent's
        (``reference``: one trained just before, for the first), the incumbent's first
        in every other pair, until a verdict, the end of exploring's share, or an epoch
        whose ``rest()`` has no room for the next pair (it goes on in the next)."""
        while not tried.verdict and self.explore_steps_left > 0:
            if len(rest()) < (1 if reference is not None else 2) * self.window_steps * \
                    self.batch_size:  # the pair would not fit in the epoch: the next one's
                return
            if reference is None and len(tried.ratios) % 2 == 0:  # the incumbent first
                reference = yield from train(self.pipe)
            own = yield from train(candidate)
            self._count(tried, own)
            if not own.rate:  # a window of one step times nothing
                return
            if reference is None:  # the candidate first: the epoch has room for the pair
                reference = yield from train(self.pipe)
            if reference.rate:
                tried.ratios.append(own.rate / reference.rate)
                if own.loss is not None and reference.loss is not None:
                    tried.losses.append((own.loss, reference.loss))
                tried.verdict, tried.reason = self._verdict(tried)
            reference = None

    def _reorder(self, tried: Tried, window: _Window) -> Tried:
        """At the run's first pair (and after each adoption), the queue in the order
        :func:`by_bottleneck` gives for ``window``, the incumbent's; returns the
        candidate to try now, ``tried`` or the one the new order puts first."""
        share = None if self._ordered else window.wait_share(self._in_flight())
        if share is None:
            return tried
        self._ordered = True
        self.log.wait_share, self.log.cores_taken = share, cores_taken(self.pipe.config)
        queue = by_bottleneck([tried.as_change(), *self.queue], share, self.log.cores_taken)
        self.log.ahead = queue[0].label if (queue[0].knob, queue[0].value) in FIRST else None
        if tried.ratios or queue[0].label == tried.change:  # one with pairs goes on first
            self.queue = [change for change in queue if change.label != tried.change]
            return tried
        self.log.tried.remove(tried)
        self.queue = queue
        return self._next()

    def _in_flight(self) -> int:
        """The batches the incumbent's loader has in flight as a window begins."""
        return self.pipe.config.num_workers * self.pipe.config.prefetch_factor

    def _count(self, tried: Tried, window: _Window) -> None:
        """A candidate's window: its steps and seconds, spent of exploring's share."""
        tried.steps, tried.seconds = tried.steps + window.steps, tried.seconds + window.seconds
        self.explore_steps_left -= window.steps

    def _pays_back(self, tried: Tried, rate: float) -> bool:
        """Whether to try ``tried``: yes, unless it compiles and its compile (as long as
        this run's last, else :attr:`TuneSpec.compile_s`) would not pay back within
        what is left of the run (at the incumbent's ``rate``) at a gain of
        :attr:`TuneSpec.compile_gain`; then it is "not tried", and the log says why."""
        if tried.config.compile_mode == "none" or not rate:
            return True
        left_s = max(self.planned_steps - self.steps, 0) * self.pipe.config.batch_size / rate
        saved_s = left_s * (1 - 1 / self.spec.compile_gain)
        if self.compile_s < saved_s:
            return True
        tried.verdict, tried.reason = "not tried", (
            f"a compile of about {self.compile_s:.0f} s would not pay back: {left_s:.0f} s of "
            f"the run left, {saved_s:.0f} s saved at {self.spec.compile_gain:.2f}x")
        return False

    def _warm_up(self, tried: Tried, train, candidate: Pipeline,
                 before: float) -> Generator[Any, None, _Window]:
        """A compile candidate's first window, which compiles: trained, outside its
        pairs; its compile time is what it took beyond the incumbent's pace (``before``,
        seeds per second). Returns the incumbent's window after it, the reference of
        the first pair."""
        warm = yield from train(candidate)
        self._count(tried, warm)
        if warm.steps:
            pace_s = warm.seeds / before if before else 0.0
            tried.compile_s = self.compile_s = max(warm.seconds - pace_s, 0.0)
        return (yield from train(self.pipe))

    def _conclude(self, tried: Tried, candidate: Pipeline | None) -> None:
        """A kept candidate becomes the incumbent, another is closed; one without a
        verdict (the epoch's seeds ran out first) goes on in the next epoch, its pairs
        kept."""
        self._candidate = None
        if tried.verdict == "kept":
            self._adopt(candidate)
        elif candidate is not None:
            candidate.close()
        if tried.verdict:
            self.on_line(tried.line())
        else:
            self.log.tried.remove(tried)
            self.queue.insert(0, tried.as_change())
            self._unfinished = tried

    def _next(self) -> Tried:
        """The next candidate, as a new entry of the log, or the one the last epoch's
        end cut short, with the pairs it had."""
        change = self.queue.pop(0)
        resumed, self._unfinished = self._unfinished, None
        tried = resumed if resumed is not None and resumed.change == change.label else \
            Tried.of(change)
        self.log.tried.append(tried)
        return tried

    def _verdict(self, tried: Tried) -> tuple[str, str]:
        """The verdict on ``tried``'s pairs and why ("" while it needs more): dropped
        where each of its first :data:`SCREEN_PAIRS` pairs is under ``spec.screen`` (one
        pair alone can be its new pipeline's first, or a disturbed one); else the comparison's
        (:attr:`TuneSpec.rule`, its pairs at most :attr:`max_pairs`): kept where
        faster, slower where known to be under 1, no faster where known to be under
        1 + ``spec.min_gain`` or tied within it, and no faster once :attr:`max_pairs`
        pairs have not decided it."""
        decision = tried.compare(dataclasses.replace(self.spec.rule,
                                                     max_pairs=self.max_pairs))
        if decision.pairs == SCREEN_PAIRS and max(tried.ratios) < self.spec.screen:
            return "dropped", f"under {self.spec.screen:g}x in its first {SCREEN_PAIRS} pairs"
        margin = f"±{100 * self.spec.min_gain:g}%"
        if decision.verdict == "faster":
            why = loss_check(tried.losses) if changes_precision(self.pipe.config, tried.config) \
                else ""
            return ("refused", f"loss check: {why}") if why else ("kept", "")
        if decision.verdict == "not faster":
            return ("slower", "") if decision.high < 1 else \
                ("no faster", f"under the {margin} margin")
        if decision.verdict == "tied":
            return "no faster", f"tied within {margin}"
        if decision.pairs >= self.max_pairs:
            return "no faster", f"undecided after {decision.pairs} pairs"
        return "", ""

    def _adopt(self, candidate: Pipeline) -> None:
        """``candidate`` becomes the incumbent; the queue is remade around it."""
        tried = {t.config.key() for t in self.log.tried} | {self.pipe.config.key()}
        self.pipe.close()
        self.pipe = candidate
        self.log.final = candidate.config
        self.queue = [change for change in candidates(candidate.config, self.spec)
                      if change.config.key() not in tried]
        self._ordered = False  # ordered again at the new incumbent's first window

    def _settle(self, epoch: int) -> None:
        self.log.settled_step, self.log.settled_epoch = self.steps, epoch
        self.log.final = self.pipe.config
        self._log_unfinished("exploring's share of the run was spent before its verdict")
        for change in self.queue:
            self.log.tried.append(Tried.of(change, verdict="not tried",
                                           reason="exploring's share of the run was spent"))
        self.queue.clear()
        self.on_line(f"settled at step {self.steps} (epoch {epoch}): "
                     f"{short(self.pipe.config.to_dict())}")

    @property
    def batch_size(self) -> int:
        """The run's batch size (every candidate keeps it)."""
        return self.pipe.config.batch_size

    def close(self) -> None:
        """Ends every loader; a candidate the run's end cut short before its verdict
        goes into the log as ``unfinished``, with the pairs it had. A candidate being
        tried (Ctrl-C stopped the run in its windows) is closed too. A run too short to
        decide one says so again, where it decided none."""
        self._log_unfinished("the run ended before its verdict")
        decided = [t for t in self.log.tried if t.verdict not in ("unfinished", "not tried")]
        if self.too_short and not decided:
            self.log.notes.append(f"it decided no candidate: {self.too_short}")
        if self._candidate is not None:
            self._candidate.close()
            self._candidate = None
        self.pipe.close()

    def _log_unfinished(self, reason: str) -> None:
        """The candidate an epoch's end cut short, if any, goes into the log as
        ``unfinished`` (with the pairs it had, and ``reason``) and leaves the queue."""
        if self._unfinished is None:
            return
        tried, self._unfinished = self._unfinished, None
        tried.verdict, tried.reason = "unfinished", reason
        self.log.tried.append(tried)
        self.queue = [change for change in self.queue
                      if change.config.key() != tried.config.key()]
        self.on_line(tried.line())
