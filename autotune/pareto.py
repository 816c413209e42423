"""The Pareto front of throughput (up) against memory (down), its knee, and picks.

Optuna's ``study.best_trials`` gives the front (and respects constraints); this
module ranks it and names the points a person acts on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.errors import ConfigError

PICKS = ("knee", "max-throughput", "min-memory")


@dataclass(frozen=True)
class Point:
    """One completed trial as the front sees it."""

    number: int
    throughput: float
    memory_mib: float
    config: dict[str, Any] = field(default_factory=dict)
    feasible: bool = True
    baseline: bool = False
    eager: bool = False  # compiled, but torch._dynamo hit its recompile limit and ran eager
    accuracy: float | None = None  # validation accuracy, where the guard trained the trial
    accuracy_objective: bool = False  # accuracy is a third objective (it takes part in
    # dominance); otherwise it is only a constraint, already folded into ``feasible``

    def dominates(self, other: Point) -> bool:
        mine, theirs = [self.throughput, -self.memory_mib], [other.throughput, -other.memory_mib]
        if self.accuracy_objective and self.accuracy is not None and other.accuracy is not None:
            mine.append(self.accuracy)
            theirs.append(other.accuracy)
        return all(a >= b for a, b in zip(mine, theirs)) and mine != theirs


def front(points: list[Point]) -> list[Point]:
    """The feasible points no other feasible point dominates, fastest first."""
    feasible = [p for p in points if p.feasible]
    keep = [p for p in feasible if not any(q.dominates(p) for q in feasible)]
    return sorted(keep, key=lambda p: (-p.throughput, p.memory_mib, p.number))


def knee(points: list[Point]) -> Point | None:
    """The front point farthest from the straight line between its two extremes, in
    coordinates normalised to [0, 1]: where giving up memory stops buying speed. With
    fewer than three points, the one nearest the ideal (max speed, min memory)."""
    pts = front(points)
    if not pts:
        return None
    t_lo, t_hi = min(p.throughput for p in pts), max(p.throughput for p in pts)
    m_lo, m_hi = min(p.memory_mib for p in pts), max(p.memory_mib for p in pts)

    def norm(p: Point) -> tuple[float, float]:
        t = (p.throughput - t_lo) / (t_hi - t_lo) if t_hi > t_lo else 1.0
        m = (p.memory_mib - m_lo) / (m_hi - m_lo) if m_hi > m_lo else 0.0
        return t, m

    if len(pts) < 3:
        return min(pts, key=lambda p: (1 - norm(p)[0]) ** 2 + norm(p)[1] ** 2)
    (t0, m0), (t1, m1) = norm(pts[-1]), norm(pts[0])  # slowest-leanest, fastest-largest

    def distance(p: Point) -> float:
        t, m = norm(p)
        return abs((t1 - t0) * (m0 - m) - (t0 - t) * (m1 - m0))

    return max(pts, key=distance)


def best_under(points: list[Point], budget_mib: float | None) -> Point | None:
    """The fastest feasible point within ``budget_mib`` (all feasible ones without)."""
    ok = [p for p in points if p.feasible and (budget_mib is None or p.memory_mib <= budget_mib)]
    return max(ok, key=lambda p: (p.throughput, -p.memory_mib), default=None)


def pick(points: list[Point], how: str, budget_mib: float | None = None) -> Point:
    """``knee``, ``max-throughput``, ``min-memory`` or ``trial:N``."""
    if how.startswith("trial:"):
        try:
            number = int(how.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"--pick trial:N needs a trial number (got {how!r})") from None
        for p in points:
            if p.number == number:
                return p
        known = sorted(p.number for p in points)
        raise ConfigError(f"--pick {how}: no completed trial {number} in the study "
                          f"(completed: {known or 'none'})")
    if how not in PICKS:
        import difflib

        near = difflib.get_close_matches(how, PICKS, n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ConfigError(f"--pick must be one of {', '.join(PICKS)} or trial:N (got "
                          f"{how!r}){hint}")
    pts = front(points)
    chosen = {"knee": lambda: knee(points),
              "max-throughput": lambda: best_under(points, budget_mib),
              "min-memory": lambda: min(pts, key=lambda p: (p.memory_mib, -p.throughput),
                                        default=None)}[how]()
    if chosen is None:
        raise ConfigError("the study has no completed feasible trial to export yet; run "
                          "'autotune search' first")
    return chosen


def hypervolume(points: list[Point], ref_memory_mib: float) -> float:
    """Area dominated by the front above throughput 0 and below ``ref_memory_mib``."""
    area, best = 0.0, 0.0
    for p in sorted(front(points), key=lambda p: p.memory_mib):
        if p.memory_mib < ref_memory_mib and p.throughput > best:
            area += (p.throughput - best) * (ref_memory_mib - p.memory_mib)
            best = p.throughput
    return area
