from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.pareto import Point, best_under, front, hypervolume, knee, pick

PTS = [Point(0, 100, 1000, baseline=True), Point(1, 300, 1200), Point(2, 320, 3000),
       Point(3, 90, 500), Point(4, 250, 1500), Point(5, 400, 9000, feasible=False)]


def test_front_is_non_dominated_and_fastest_first():
    f = front(PTS)
    assert [p.number for p in f] == [2, 1, 0, 3]
    assert not any(a.dominates(b) for a in f for b in f)


def test_knee_is_where_memory_stops_buying_speed():
    assert knee(PTS).number == 1


def test_best_under_budget_and_picks():
    assert best_under(PTS, 1100).number == 0
    assert best_under(PTS, None).number == 2  # infeasible #5 never wins
    assert pick(PTS, "min-memory").number == 3
    assert pick(PTS, "trial:4").number == 4
    with pytest.raises(ConfigError, match="no completed trial 42"):
        pick(PTS, "trial:42")
    with pytest.raises(ConfigError, match="no completed feasible trial"):
        pick([], "knee")
    with pytest.raises(ConfigError, match="--pick must be one of"):
        pick(PTS, "fastest")


def test_hypervolume():
    assert hypervolume([Point(0, 10, 5)], 10) == 50
    assert hypervolume([Point(0, 10, 5), Point(1, 20, 8)], 10) == 50 + 10 * 2
