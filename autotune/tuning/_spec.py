"""How a run tunes itself (:class:`TuneSpec`) and how long its windows are
(:func:`fit_window`)."""
from __future__ import annotations

from dataclasses import dataclass

from autotune.compare import MIN_PAIRS, Rule
from autotune.errors import ConfigError


@dataclass(frozen=True)
class TuneSpec:
    """How a run tunes itself. ``share``: the most of the run's planned steps its
    candidates may lose (0.10): a candidate's window loses the steps the incumbent
    would have trained beyond it in its seconds, nothing where it kept the pace; ``window_steps``: the most steps a window (fewer
    where the run's epochs or its share are short, :func:`fit_window`); ``pairs``: the
    most pairs a candidate gets (it stops sooner where its verdict is clear, and no
    verdict comes before ``min_pairs``); ``screen``: a candidate under this times
    the incumbent in each of its first two pairs is dropped, one over its inverse in
    each kept (:func:`screened`); ``min_gain``: the comparison's margin: a speed-up
    known to lie within it of 1 is a tie, not worth a new pipeline (but a change back
    to float32's numerics known to lie over 1 / (1 + this) is kept: no slower), and
    one known to lie under 1 + this is no faster; ``precision``: the AMP and feature
    dtypes, and a built-in model's bit dropout masks, may be tried too (they change
    the numbers a step computes, not the batches or the model); ``compile``: compile
    modes and shapes may be tried (None: on a GPU only, where a compile pays back
    sooner; benchmarks/knobs.py measures it on a CPU), each only where ``compile_s``
    (the compile time planned for until this run has measured one) pays back within
    what is left of the run at a gain of ``compile_gain``; ``start_s``: a loader's
    worker processes' start planned for until this run has measured one (their first
    window's time beyond the incumbent's pace): where the incumbent has no workers, a
    candidate with some is tried only where that start pays back at the most they
    could gain (:meth:`autotune.tuning.TunedRun._once`)."""

    share: float = 0.10
    window_steps: int = 8
    pairs: int = 32
    screen: float = 0.8
    min_gain: float = 0.02
    precision: bool = False
    compile: bool | None = None
    compile_s: float = 20.0
    compile_gain: float = 1.25
    start_s: float = 2.0
    min_pairs: int = MIN_PAIRS

    def __post_init__(self) -> None:
        if not 0 < self.share <= 1:
            raise ConfigError(f"the tuning share must be in (0, 1] (got {self.share!r})")
        if self.compile_s < 0 or self.compile_gain <= 1 or self.start_s < 0:
            raise ConfigError("the tuning compile_s and start_s must be >= 0 and "
                              f"compile_gain above 1 (got {self.compile_s!r}, "
                              f"{self.start_s!r}, {self.compile_gain!r})")
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


MIN_WINDOW = 3  # a window's first step waits for its loader's start: three steps or more
SCREEN_PAIRS = 2  # a candidate's first pairs, which the screen reads (screened)
# A candidate whose first ASIDE_PAIRS pairs (or a multiple: at 16, 24) read no better
# than the margin steps aside for the others, once, its pairs kept, and goes on once
# they are decided: at 1.00x the comparison takes most of its pairs
# (benchmarks/verdicts.py), at 1.07x about half
ASIDE_PAIRS = 8


def screened(ratios: list[float], screen: float) -> str:
    """The screen's verdict on a candidate's first :data:`SCREEN_PAIRS` pairs' ratios
    (before the comparison's least pairs): ``dropped`` where each is under
    ``screen``, ``kept`` where each is over ``1 / screen`` (a gain no run of noise
    makes twice: benchmarks/verdicts.py replays recorded pairs through it), else ""
    (the comparison decides). One pair alone can be a new pipeline's first, or a
    disturbed one; ``screen`` 0 screens nothing."""
    if len(ratios) != SCREEN_PAIRS or not screen:
        return ""
    if max(ratios) < screen:
        return "dropped"
    return "kept" if min(ratios) > 1 / screen else ""


def fit_window(asked: int, epoch_steps: int, share_steps: float | None = None,
               verdicts: int = 0) -> int:
    """A window's steps in a run whose epochs have ``epoch_steps`` steps: ``asked``,
    but at most half an epoch, so that a pair (the incumbent's window and the
    candidate's) fits in one, where a window cut by the epoch's end would time fewer
    steps or none; and, where exploring's share (``share_steps`` of candidates'
    steps) would not hold ``verdicts`` windows of that length (a verdict's least
    pairs for each candidate), as short as that share holds them: a short run tries
    its candidates in short windows rather than few of them in long ones. Never
    under :data:`MIN_WINDOW` (``asked`` where less): a window is timed whole, its
    loader's start included (:func:`autotune.pipeline.timed`), so a short one reads
    a loader's workers as a long one does (docs/measurement.md, "A window's rate")."""
    steps = asked if share_steps is None or not verdicts else \
        min(asked, int(share_steps // verdicts))
    steps = min(steps, epoch_steps // 2)  # a pair fits an epoch
    return max(steps, min(MIN_WINDOW, asked))
