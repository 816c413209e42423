"""What pairs at one window length showed (:class:`Known`), and whether one length
reaches a precision later than another (:func:`costlier`): a paired confirmation's
figures by length, which its trial (:mod:`autotune.trial._pairs`) and this machine's
record of them (:mod:`autotune.study._window_length`) both read. Free of torch, so
that a line that quotes them does not import it."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from autotune.compare import pooled

# A try of another window length is costlier than the known one with this confidence
# (one-sided): a try is tried again where its pairs do not show that, so the test
# errs towards trying
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Known:
    """What pairs at one window length showed: their log ratios' pooled spread around
    each candidate's mean, its degrees of freedom, and a pair's seconds (both windows
    and what opens them, a pair measured again included; a window of the reference
    that two candidates' pairs shared, half in each)."""

    window_s: float
    spread: float
    dof: int
    pair_s: float

    @property
    def cost(self) -> float:
        """Seconds to a given precision, up to a constant: pairs needed (as the
        spread squared) times a pair's seconds."""
        return self.spread ** 2 * self.pair_s

    def words(self) -> str:
        return f"{self.window_s:g} s: spread {self.spread:.3f}, {self.pair_s:.1f} s a pair"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Known:
        return cls(float(values["window_s"]), float(values["spread"]), int(values["dof"]),
                   float(values["pair_s"]))


def known_of(pairs: list[list[dict]], window_s: float) -> Known | None:
    """What the pairs at ``window_s`` of each candidate (``pairs``: each candidate's
    pair dicts, as :func:`autotune.trial._pairs._pair` keeps them, each with its
    ``ratio``, ``window_s`` and ``seconds``) showed; None where they have no degrees
    of freedom."""
    mine = [[p for p in each if p["window_s"] == window_s] for each in pairs]
    squares, dof = pooled([[math.log(p["ratio"]) for p in each] for each in mine])
    count = sum(len(each) for each in mine)
    seconds = sum(p["seconds"] for each in mine for p in each)
    if not dof or seconds <= 0:
        return None
    return Known(window_s, math.sqrt(squares / dof), dof, seconds / count)


def costlier(tried: Known, known: Known, confidence: float = CONFIDENCE) -> bool:
    """Whether pairs at ``tried``'s length are known to reach a precision later than at
    ``known``'s: where the ratio of their costs (:attr:`Known.cost`; the paces taken
    as measured, the spreads as estimates) passes the F distribution's ``confidence``
    quantile on their degrees of freedom, which at equal costs it would pass only
    ``1 - confidence`` of the time."""
    if tried.dof < 1 or known.dof < 1 or known.cost <= 0:
        return False
    from scipy import special

    return tried.cost / known.cost > float(special.fdtri(tried.dof, known.dof, confidence))
