"""One statistic for every question "is the candidate faster than its reference?".

Each comparison autotune makes is a series of *pairs*: a window of the candidate and
a window of its reference measured beside it, whose figure is their rate ratio (a
disturbance or a drift that hits both windows of a pair cancels in it). A
:class:`Comparison` takes the pairs one at a time; after each, :meth:`Comparison.decision`
gives the speed-up (the geometric mean of the ratios), its 95% interval, the pairs
used and a verdict: ``faster``, ``not faster``, ``tied`` within the margin, or
``undecided`` (more pairs would tell).

The interval is a *confidence sequence*: it holds at every pair at once, so a caller
may look after each pair and stop as soon as the verdict is clear. A t-interval
looked at after every pair does not: stopping at its first "faster" calls a 1.00x
change faster far more often than 5% of the time (``benchmarks/verdicts.py``
measures it). The boundary is the Gaussian-mixture asymptotic confidence sequence
of Waudby-Smith, Arnold, Wu, Wang and Ramdas ("Time-uniform central limit theory and
asymptotic confidence sequences", Annals of Statistics 2024) over the pairs' log
ratios, its standard deviation estimated from the pairs (with the pairs' own
precision, where the caller knows it, pooled in as one pair more) and, with few
pairs, widened by Student's t over the normal quantile, since the estimate of the
spread is itself uncertain there. The verdict reads the interval as criterion.rs reads its own: an interval
wholly within the margin either side of 1 is a tie ("change within noise
threshold"), else one wholly above 1 is faster; one wholly under 1 + margin is not
faster. The library for confidence sequences (confseq) was last released in 2023
and builds C++ extensions; its boundary here is a closed form of a few lines, and the
quantiles come from scipy.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from autotune.errors import ConfigError

Verdict = Literal["faster", "not faster", "tied", "undecided"]
CONFIDENCE = 0.95
# The boundary is tightest at this many pairs (its mixture's width is tuned there):
# comparisons here decide within about 4 to 30 pairs
HORIZON = 10
# No verdict before this many pairs: three pairs that neighbour each other in time
# share their drift, so their spread understates the noise, and a 1.00x change read
# at three is called faster more often than the confidence allows; from four it is
# not (the replays of recorded pairs in benchmarks/verdicts.py)
MIN_PAIRS = 4


@lru_cache(maxsize=512)
def t_quantile(confidence: float, df: int) -> float:
    """The two-sided ``confidence`` quantile of Student's t with ``df`` degrees of
    freedom: scipy's inverse of the t distribution (scipy.special, the functions
    scipy.stats's ``t.ppf`` calls; importing scipy.stats takes over a second on a
    2-core CPU, in every process that decides anything)."""
    from scipy import special

    return float(special.stdtrit(df, 0.5 + confidence / 2))


def load_quantiles() -> None:
    """Imports scipy.special, which the quantiles take, now (over a second on a
    2-core CPU): a run that decides between its steps calls it before it trains, so
    that the import lands in no timed window, and not under Ctrl-C: a tuned run
    interrupted inside it printed its interrupt line, then died of SIGINT (exit -2,
    not 130) as Python ended."""
    t_quantile(CONFIDENCE, 1)


@lru_cache(maxsize=64)
def z_quantile(confidence: float) -> float:
    """The two-sided ``confidence`` quantile of the standard normal (scipy.special)."""
    from scipy import special

    return float(special.ndtri(0.5 + confidence / 2))


@lru_cache(maxsize=1024)
def boundary(n: int, confidence: float = CONFIDENCE, horizon: int = HORIZON) -> float:
    """The confidence sequence's half-width at ``n`` pairs, in standard deviations of
    one pair's log ratio: the Gaussian mixture's (time-uniform at ``confidence``),
    times Student's t over the normal quantile for ``n - 1`` degrees of freedom."""
    if n < 2:
        return math.inf
    alpha = 1 - confidence
    rho2 = (-2 * math.log(alpha) + math.log(-2 * math.log(alpha) + 1)) / horizon
    spread = n * rho2 + 1
    width = math.sqrt(2 * spread / (n * n * rho2) * math.log(math.sqrt(spread) / alpha))
    return width * t_quantile(confidence, n - 1) / z_quantile(confidence)


@dataclass(frozen=True)
class Rule:
    """How a comparison decides. ``margin``: a speed-up within this of 1 (either way)
    is a tie, not worth a change, and a candidate known to be under 1 + margin is not
    faster; ``min_pairs``: no verdict before this many pairs; ``max_pairs``: the most
    a caller should measure (then it stops ``undecided``); ``precision``: where
    given, a ``faster`` verdict also waits until the interval's relative half-width
    is within it (a kept or confirmed speed-up is then known to it too; a candidate
    known to be no faster is dropped as soon as that is known); ``confidence``: of the interval, at every pair at once."""

    margin: float = 0.02
    min_pairs: int = MIN_PAIRS
    max_pairs: int = 30
    precision: float | None = None
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if not 0 <= self.margin < 1:
            raise ConfigError(f"a comparison's margin must be in [0, 1) (got {self.margin!r})")
        if not 2 <= self.min_pairs <= self.max_pairs:
            raise ConfigError("a comparison needs 2 <= min_pairs <= max_pairs (got "
                              f"{self.min_pairs!r}, {self.max_pairs!r})")
        if self.precision is not None and not 0 < self.precision < 1:
            raise ConfigError("a comparison's precision must be a fraction in (0, 1) "
                              f"(got {self.precision!r})")
        if not 0.5 <= self.confidence < 1:
            raise ConfigError(f"a comparison's confidence must be in [0.5, 1) "
                              f"(got {self.confidence!r})")


@dataclass(frozen=True)
class Decision:
    """A comparison's state after its pairs: the verdict, the speed-up (geometric
    mean of the ratios; None before a pair), its interval ``low``..``high`` (None
    before two pairs), the pairs it used, and, one-sided, whether it is known to be
    no slower than the margin (``no_slower``: from the rule's least pairs, the
    interval wholly over 1 / (1 + margin), the tie's lower bound, :func:`verdict_of`):
    the question of a change that gives something back, such as precision, and
    needs no gain."""

    verdict: Verdict
    speedup: float | None
    low: float | None
    high: float | None
    pairs: int
    no_slower: bool = False

    @property
    def half_width(self) -> float | None:
        """The interval's relative half-width about the speed-up (the larger side)."""
        if self.speedup is None or self.low is None or self.high is None:
            return None
        return max(self.high / self.speedup - 1, 1 - self.low / self.speedup)

    @property
    def decided(self) -> bool:
        return self.verdict != "undecided"

    def text(self) -> str:
        """The speed-up and its interval, as ``1.07x [1.02, 1.12]``."""
        return speedup_text(self.speedup, self.low, self.high)


def speedup_text(speedup: float | None, low: float | None = None,
                 high: float | None = None) -> str:
    """A speed-up and, where known, its interval, as ``1.07x [1.02, 1.12]``."""
    if speedup is None:
        return "-"
    if low is None or high is None:
        return f"{speedup:.2f}x"
    return f"{speedup:.2f}x [{low:.2f}, {high:.2f}]"


@dataclass
class Comparison:
    """Paired measurements of a candidate against its reference, and their verdict
    under ``rule``. :meth:`add` takes a pair's ratio (candidate over reference) and,
    where known, the pair's own relative 95% half-width (from its windows): their
    mean square counts as one pair more in the spread's estimate (never narrowing
    it), so that a few pairs that agree by luck do not claim a precision their
    windows never had."""

    rule: Rule = field(default_factory=Rule)
    ratios: list[float] = field(default_factory=list)
    floors: list[float] = field(default_factory=list)  # each pair's own sd of its log ratio
    _mean: float = field(default=0.0, init=False, repr=False)  # of the logs (Welford)
    _m2: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        given, self.ratios = list(self.ratios), []
        for ratio in given:
            self.add(ratio)

    def add(self, ratio: float, half_width: float | None = None) -> Decision:
        """Adds a pair (its ratio must be positive); returns the decision after it."""
        if not ratio > 0 or not math.isfinite(ratio):
            raise ValueError(f"a pair's ratio must be positive and finite (got {ratio!r})")
        self.ratios.append(ratio)
        step = math.log(ratio) - self._mean
        self._mean += step / len(self.ratios)
        self._m2 += step * (math.log(ratio) - self._mean)
        if half_width is not None and half_width > 0:
            self.floors.append(math.log1p(half_width) / z_quantile(self.rule.confidence))
        return self.decision()

    @property
    def pairs(self) -> int:
        return len(self.ratios)

    def interval(self) -> tuple[float, float] | None:
        """The speed-up's interval (time-uniform at the rule's confidence), None
        before two pairs."""
        n = len(self.ratios)
        if n < 2:
            return None
        half = self._sd() * boundary(n, self.rule.confidence)
        return math.exp(self._mean - half), math.exp(self._mean + half)

    def _sd(self) -> float:
        """The standard deviation of one pair's log ratio, from two pairs on: the
        pairs' own, and where their windows' precision is known, no less than that
        pooled in as one pair more."""
        n = len(self.ratios)
        sd = math.sqrt(max(self._m2, 0.0) / (n - 1))
        if self.floors:  # the pairs' own noise, pooled as one pair more
            prior = statistics.fmean(f * f for f in self.floors)
            sd = max(sd, math.sqrt((max(self._m2, 0.0) + prior) / n))
        return sd

    def decision(self) -> Decision:
        n = len(self.ratios)
        speedup = math.exp(self._mean) if n else None
        bounds = self.interval()
        low, high = bounds if bounds is not None else (None, None)
        verdict: Verdict = "undecided"
        no_slower = False
        if bounds is not None and n >= self.rule.min_pairs:
            verdict = verdict_of(low, high, self.rule.margin)
            no_slower = low >= tie_floor(self.rule.margin)
            wide = self.rule.precision is not None and \
                max(high / speedup - 1, 1 - low / speedup) > self.rule.precision
            if wide and verdict == "faster":
                verdict = "undecided"
        return Decision(verdict, speedup, low, high, n, no_slower)

    def placed(self) -> Verdict:
        """Where the rule has a precision: the verdict of the interval read with the
        precision as its margin, once it is within that precision of the speed-up
        (and from the rule's least pairs), else ``undecided``. The question a paired
        confirmation asks of a candidate: known to its precision, and placed against
        the reference as the front places two configs (faster, tied within the
        precision, or not faster), more pairs only narrow the margin of a verdict the
        front would not show."""
        d = self.decision()
        if self.rule.precision is None or d.pairs < self.rule.min_pairs or \
                d.half_width is None or d.half_width > self.rule.precision:
            return "undecided"
        return verdict_of(d.low, d.high, self.rule.precision)

    def out_of_reach(self) -> float | None:
        """Where the pairs left to the rule could not call the candidate faster: the
        most speed-up its pairs so far allow (the upper end of a plain 95%
        t-interval at this many pairs), which, measured over ``rule.max_pairs``
        pairs as spread as these, would still leave its interval reaching down to
        1; else None. A comparison at about 1x whose pairs spread wider than the
        margin is neither tied nor faster after all its pairs, and a caller that
        pays for each pair ends it here ("futility", as a sequential trial stops for
        it). Looked at from twice the rule's least pairs on (the spread's estimate
        is too rough before), and never on a decided comparison."""
        n = len(self.ratios)
        if n < 2 * self.rule.min_pairs or n >= self.rule.max_pairs or \
                self.decision().decided:
            return None
        sd = self._sd()
        best = self._mean + t_quantile(self.rule.confidence, n - 1) * sd / math.sqrt(n)
        if best > sd * boundary(self.rule.max_pairs, self.rule.confidence):
            return None
        return math.exp(best)

    def best_case(self, noise: float) -> float | None:
        """The most speed-up its pairs so far make plausible, were a pair's log ratio
        to spread as ``noise`` (known otherwise): the upper end of the mean's
        two-sided interval at the rule's confidence with that standard deviation
        known; None before a pair. One pair that read low by chance still reaches
        up where a few more could show it the fastest."""
        n = len(self.ratios)
        if not n:
            return None
        return math.exp(self._mean + z_quantile(self.rule.confidence) * noise / math.sqrt(n))

    def pairs_to_precision(self, noise: float | None = None,
                           least: int | None = None) -> float | None:
        """How many pairs in all the interval would take to come within the rule's
        precision, were the pairs to come as spread as these (or as ``noise``, a log
        ratio's standard deviation known otherwise): the fewest ``n`` from this many
        on with ``n`` pairs' half-width within it (``math.inf`` where
        ``rule.max_pairs`` would not do); None without a precision, and before twice
        the rule's least pairs (the spread's estimate is too rough there; with
        ``noise``, before the rule's least, or before ``least`` pairs where given:
        a ``noise`` known from many pairs before these needs none of them)."""
        n = len(self.ratios)
        if least is None:
            least = self.rule.min_pairs if noise is not None else 2 * self.rule.min_pairs
        if self.rule.precision is None or n < least:
            return None
        # the pairs that would tell a speed-up of 1 + precision from 1 are those whose
        # half-width comes within the precision (the boundary narrows as pairs grow)
        m = pairs_to_tell(1 + self.rule.precision, self._sd() if noise is None else noise,
                          self.rule)
        return math.inf if m is None else max(m, n)

    @property
    def exhausted(self) -> bool:
        """Whether the rule's pairs are spent."""
        return len(self.ratios) >= self.rule.max_pairs


def ratio_half_width(a: float | None, b: float | None) -> float | None:
    """The relative half-width of a ratio of two independent measurements."""
    if a is None or b is None:
        return None
    return (a * a + b * b) ** 0.5


def quotients(rule: Rule, fast: dict[int, tuple[float, float | None]],
              slow: dict[int, tuple[float, float | None]]) -> Comparison:
    """``fast`` over ``slow`` under ``rule``, on the quotients of their ratios (each a
    round's ratio and its relative half-width, None where unknown, by round): first
    in the rounds both have, where a drift of the round that moves both ratios alike
    cancels; then the rounds each has alone, matched in their order (the first of
    one's with the first of the other's, and so on), as a focus that pairs one
    candidate a round leaves them: two candidates it alternates between have their
    pairs a round or two apart, and a drift between those rounds is a ratio's own
    noise, which the quotients' spread holds. On independent pairs a quotient
    spreads about 1.4 times one pair's, where two intervals part only once their
    half-widths together are under the gap. The matching reads the rounds, never the
    ratios, and a new pair of either only adds a quotient. Each quotient's
    half-width is its two ratios' together; the rule's ``max_pairs`` is the
    quotients' count (its least at least)."""
    both = [(k, k) for k in fast if k in slow]
    alone = zip(sorted(k for k in fast if k not in slow), sorted(k for k in slow if k not in fast))
    matched = both + list(alone)
    comparison = Comparison(dataclasses.replace(rule, max_pairs=max(len(matched),
                                                                    rule.min_pairs)))
    for mine, theirs in matched:
        (ratio, half), (their_ratio, their_half) = fast[mine], slow[theirs]
        comparison.add(ratio / their_ratio, ratio_half_width(half, their_half))
    return comparison


def tie_floor(margin: float) -> float:
    """The lower bound of a tie with ``margin``: 1 / (1 + margin)."""
    return 1 / (1 + margin)


def verdict_of(low: float, high: float, margin: float) -> Verdict:
    """What an interval ``low``..``high`` of a speed-up says, with ``margin``: tied
    where it lies wholly within 1/(1 + margin)..1 + margin, faster where wholly above
    1, not faster where wholly under 1 + margin, else undecided."""
    if low >= tie_floor(margin) and high <= 1 + margin:
        return "tied"
    if low > 1:
        return "faster"
    if high < 1 + margin:
        return "not faster"
    return "undecided"


def pooled(groups: list[list[float]]) -> tuple[float, int]:
    """The squared deviations of each group's values around its own mean, summed, and
    their degrees of freedom: a spread pooled over comparisons whose means differ
    (a group of fewer than two values adds nothing)."""
    groups = [each for each in groups if len(each) >= 2]
    return (sum(statistics.pvariance(each) * len(each) for each in groups),
            sum(len(each) - 1 for each in groups))


def pair_noise(series: list[list[float]], least_dof: int = 2) -> float | None:
    """The standard deviation of one pair's log ratio, pooled over ``series`` (each the
    ratios of one comparison, about its own mean, :func:`pooled`): None before
    ``least_dof`` degrees of freedom."""
    squares, freedom = pooled([[math.log(r) for r in ratios] for ratios in series])
    return math.sqrt(squares / freedom) if freedom >= max(least_dof, 1) else None


def pairs_to_tell(speedup: float, noise: float, rule: Rule) -> int | None:
    """The fewest pairs whose interval would lie wholly above 1 for a true ``speedup``
    measured in pairs of log-ratio deviation ``noise`` (:func:`pair_noise`), at least
    ``rule.min_pairs``; None where ``rule.max_pairs`` would not: a comparison that
    could not call it faster even at that speed-up."""
    if speedup <= 1:
        return None
    for n in range(rule.min_pairs, rule.max_pairs + 1):
        if noise * boundary(n, rule.confidence) < math.log(speedup):
            return n
    return None
