"""The Pareto front of throughput (up) against memory (down), its knee, and picks.

Optuna's ``study.best_trials`` gives the front (and respects constraints); this
module ranks it and names the points a person acts on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.errors import ConfigError
from autotune.specs import dominates

PICKS = ("default", "knee", "max-throughput", "min-memory")


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
    val_metric: float | None = None  # the task's validation metric, where it was trained
    metric_objective: bool = False  # that metric is a third objective (it takes part in
    # dominance); otherwise it is only a constraint, already folded into ``feasible``

    def dominates(self, other: Point) -> bool:
        mine, theirs = [self.throughput, -self.memory_mib], [other.throughput, -other.memory_mib]
        if self.metric_objective and self.val_metric is not None and \
                other.val_metric is not None:
            mine.append(self.val_metric)
            theirs.append(other.val_metric)
        return dominates(mine, theirs)


def front(points: list[Point]) -> list[Point]:
    """The feasible points no other feasible point dominates, fastest first."""
    feasible = [p for p in points if p.feasible]
    keep = [p for p in feasible if not any(q.dominates(p) for q in feasible)]
    return sorted(keep, key=lambda p: (-p.throughput, p.memory_mib, p.number))


def knee(points: list[Point], limit_mib: float | None = None) -> Point | None:
    """Where giving up memory stops buying speed: of the front points above the
    straight line between its two extremes (slowest-leanest, fastest-largest), the
    one farthest from it, throughput normalised to the front's span and memory to
    ``limit_mib`` (what the device has, or the memory budget) where given, else to
    the front's span. A point below the line buys less speed per MiB than the line
    itself, so it is never the knee; with none above it (two points, a straight
    front) the knee is the fastest point within ``limit_mib``."""
    pts = front(points)
    if not pts:
        return None
    t_lo, t_hi = min(p.throughput for p in pts), max(p.throughput for p in pts)
    m_lo, m_hi = min(p.memory_mib for p in pts), max(p.memory_mib for p in pts)
    span = limit_mib if limit_mib else m_hi - m_lo

    def norm(p: Point) -> tuple[float, float]:
        t = (p.throughput - t_lo) / (t_hi - t_lo) if t_hi > t_lo else 1.0
        m = (p.memory_mib - m_lo) / span if span > 0 else 0.0
        return t, m

    (t0, m0), (t1, m1) = norm(pts[-1]), norm(pts[0])

    def above(p: Point) -> float:  # > 0: more throughput than the line at its memory
        t, m = norm(p)
        return (t1 - t0) * (m0 - m) - (t0 - t) * (m1 - m0)

    inner = [p for p in pts[1:-1] if above(p) > 0]
    return max(inner, key=above) if inner else best_under(pts, limit_mib)


def default_pick(points: list[Point], limit_mib: float | None,
                 confirmed: set[int] | frozenset[int] = frozenset()) -> Point | None:
    """The config a user wants by default: memory counts against ``limit_mib`` (what
    the device has, or the memory budget), not against the spread between trials, so
    with memory to spare it is the fastest; the fastest ``confirmed`` one on the front
    where there is one that fits."""
    sure = [p for p in front(points) if p.number in confirmed]
    return best_under(sure, limit_mib) or best_under(points, limit_mib)


def best_under(points: list[Point], budget_mib: float | None) -> Point | None:
    """The fastest feasible point within ``budget_mib`` (all feasible ones without)."""
    ok = [p for p in points if p.feasible and (budget_mib is None or p.memory_mib <= budget_mib)]
    return max(ok, key=lambda p: (p.throughput, -p.memory_mib), default=None)


def pick(points: list[Point], how: str, budget_mib: float | None = None,
         limit_mib: float | None = None, confirmed: frozenset[int] = frozenset()) -> Point:
    """``default``, ``knee``, ``max-throughput``, ``min-memory`` or ``trial:N``.
    ``budget_mib``: ``--max-memory``; ``limit_mib``: what the device has, which the
    default pick and the knee count memory against when no budget is given."""
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
    limit = budget_mib if budget_mib is not None else limit_mib
    chosen = {"default": lambda: default_pick(points, limit, confirmed),
              "knee": lambda: knee(points, limit),
              "max-throughput": lambda: best_under(points, budget_mib),
              "min-memory": lambda: min(pts, key=lambda p: (p.memory_mib, -p.throughput),
                                        default=None)}[how]()
    if chosen is None:
        infeasible = [p.number for p in points if not p.feasible and not p.baseline]
        if infeasible:
            raise ConfigError(f"no completed trial of the space is feasible: {len(infeasible)} "
                              "fell below the accuracy guard or over the memory budget, so "
                              "there is nothing to export; --pick trial:N exports one of "
                              f"them anyway (trials {infeasible})")
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
