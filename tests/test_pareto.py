from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.study import Point
from autotune.study._pareto import best_under, default_pick, front, hypervolume, knee, pick

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


def test_an_answer_with_nothing_feasible_says_why():
    """Every trained candidate below the accuracy guard (CiteSeer did it): the export
    and the front say that, not 'no completed trial yet'."""
    from types import SimpleNamespace

    from autotune.config import TrialConfig
    from autotune.cli._render import _empty_front, front_table
    from autotune.study._front import FrontRow
    from autotune.taskinfo import task_info

    below = [Point(1, 300, 1200, feasible=False), Point(2, 320, 900, feasible=False)]
    with pytest.raises(ConfigError, match=r"no completed trial of the space is feasible: 2 "
                                          r"fell below the accuracy guard.*trials \[1, 2\]"):
        pick(below, "default")  # the baseline, outside the space, is no point here

    def record(number, shortfall=None, excess=None):
        return SimpleNamespace(number=number, on_front_candidate=True,
                               below_guard=(shortfall or 0) > 0, over_budget=(excess or 0) > 0)
    trials = [record(1, shortfall=0.02), record(2, shortfall=0.01), record(3, excess=50.0)]
    assert front_table([], task_info("node"), trials=trials) == \
        "Pareto front: no completed trial yet"  # no row at all, not even the reference
    reference = FrontRow(0, 100.0, 1000.0, 1.0, 1.0, 0.68, ["baseline (reference)"],
                         TrialConfig().to_dict())  # the baseline, outside the space
    shown = front_table([], task_info("node"), reference, trials).splitlines()
    assert shown[0] == _empty_front(trials) and shown[-2] == "reference:"
    assert _empty_front(trials).startswith(
        "Pareto front: none of the space's 3 measured trials is feasible (2 below the "
        "accuracy guard, 1 over the memory budget): nothing to export")
    assert _empty_front([]) == "Pareto front: no completed trial of the space yet"


def test_a_search_with_nothing_feasible_exits_1_whatever_ruled_it_out(capsys):
    """`autotune search` exits 1 with one line when the memory budget left nothing
    feasible, and so when the accuracy guard did (it exited 0 there)."""
    from types import SimpleNamespace

    from autotune.cli._main import _nothing_feasible

    def record(number, memory, below=False):
        return SimpleNamespace(number=number, complete=True, on_front_candidate=number > 0,
                               memory_mib=memory, below_guard=below, over_budget=False)
    trials = (record(0, 900.0), record(1, 800.0, below=True), record(2, 700.0, below=True))
    plan = SimpleNamespace(options=SimpleNamespace(budget_mib=None))
    assert _nothing_feasible(plan, SimpleNamespace(front=(), trials=trials)) == 1
    said = capsys.readouterr().err.splitlines()
    assert said == ["autotune: none of the space's 2 measured trials is feasible (2 below "
                    "the accuracy guard): nothing to export; relax the guard or the budget, "
                    "or search another space"]
    feasible = trials[:2] + (record(2, 700.0),)
    assert _nothing_feasible(plan, SimpleNamespace(front=("a row",), trials=feasible)) == 0
    assert _nothing_feasible(plan, SimpleNamespace(front=(), trials=())) == 0
    plan = SimpleNamespace(options=SimpleNamespace(budget_mib=100.0))
    assert _nothing_feasible(plan, SimpleNamespace(front=(), trials=trials)) == 1
    assert "every completed trial is over --max-memory 100 MiB (the leanest took 700 MiB)" \
        in capsys.readouterr().err


def test_hypervolume():
    assert hypervolume([Point(0, 10, 5)], 10) == 50
    assert hypervolume([Point(0, 10, 5), Point(1, 20, 8)], 10) == 50 + 10 * 2


# The H100's front (issue 36): GPU-resident 28.1x at 6,348 MiB beside CPU sampling at
# 1.31x and 4,220 MiB, on a GPU of 80 GiB.
H100 = [Point(0, 5_702.0, 3_122.0, baseline=True), Point(1, 28.1 * 5_702, 6_348.0),
        Point(2, 1.31 * 5_702, 4_220.0)]
GPU_MIB = 80 * 1024


def test_the_default_pick_counts_memory_against_the_device():
    """With memory to spare the default is the fastest config: the 28x one, not a
    CPU-sampling point 1% of the speed range up for a third of the memory range."""
    assert pick(H100, "default", limit_mib=GPU_MIB).number == 1
    assert pick(H100, "knee", limit_mib=GPU_MIB).number == 1  # #2 lies below the line
    # --max-memory below 6,348 MiB: the fastest config that fits it
    assert pick(H100, "default", budget_mib=5_000, limit_mib=GPU_MIB).number == 2
    assert pick(H100, "knee", budget_mib=5_000, limit_mib=GPU_MIB).number == 2


def test_the_default_pick_prefers_confirmed_figures():
    assert default_pick(H100, GPU_MIB, confirmed=frozenset({0, 2})).number == 2
    assert default_pick(H100, GPU_MIB).number == 1


def test_only_a_point_above_the_line_is_a_knee():
    """The knee trades memory for speed better than the line between the extremes;
    the old rule (farthest from the line either side) took a point below it."""
    below = [Point(0, 100, 1000), Point(1, 110, 5000), Point(2, 1000, 6000)]
    assert knee(below).number == 2  # #1 is below the line: the fastest, none above
    above = [Point(0, 100, 1000), Point(1, 900, 2000), Point(2, 1000, 6000)]
    assert knee(above).number == 1
