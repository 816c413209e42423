"""A GPU user's search, end to end through the search loop, on a stand-in: the device
is tests/fake_cuda.py's (torch's own torch.cuda wrappers over stubbed entry points),
and ``run_trial`` is a fake H100 whose figures are the ones measured there (issue 35:
the baseline 5,702 seed nodes/s in a 108 s trial; GPU-resident configs about 28x in a
few seconds, 6.2 GiB of 80 GiB; CPU-sampling configs near 1x, leaner). Its trials
take the H100's seconds on the search's fake clock (tests/fake_clock.py), while the
search's own work (storing each measurement) takes this machine's. What is
asserted is the loop's arithmetic: the budget spent on trials, the confirmation's
reserve sized from the configs it re-measures, the screen cutting the CPU-sampling
configs, the priors that wait, and every stop said."""
from __future__ import annotations

import optuna
import pytest

from autotune.specs import MeasureSpec
from autotune.trial import MIB, MemoryStats, Observed, TrialResult, WindowStats
from autotune.study import _confirm as confirm_module, _search as search_module
from autotune.study import StudyRecord
from autotune.study._records import records
from fake_cuda import GIB

BASELINE_RATE = 5_702.0


class FakeH100:
    """``run_trial``'s stand-in. A trial takes what it took on the H100, on
    ``clock`` (:class:`fake_clock.FakeClock`); its window honours the spec it is
    given: a screen that finds it hopeless stops it at its first block, and the
    precision asked sets the window's length."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.calls: list[tuple[dict, object]] = []

    def figures(self, config) -> tuple[float, float, float, float]:
        """(seed nodes/s, MiB, warm-up seconds, window seconds at 3%)."""
        if config.gpu_sampling:
            rate = 28.0 if config.amp_dtype == "bfloat16" else 18.9
            return rate * BASELINE_RATE, 6348.0, 2.0, 2.0
        if config.num_workers == 2 and config.batch_size == 1024 and config.amp_dtype == \
                "float32" and config.num_neighbors == (25, 10):  # the baseline's config
            return BASELINE_RATE, 4220.0, 9.0, 60.0
        return 1.1 * BASELINE_RATE, 3122.0, 5.0, 40.0

    startups = (38.9, 10.0)  # the first trial's (it starts the fork server), the others'

    def __call__(self, config, *, measure, limits, **_) -> TrialResult:
        startup = self.startups[bool(self.calls)]
        self.calls.append((config.to_dict(), measure))
        rate, mib, warmup, window = self.figures(config)
        screen, stopped, screened_by = measure.screen, "precise", ""
        precision = max(measure.precision, 0.03)
        if screen is not None and screen.hopeless(rate * 1.2):
            window, stopped, screened_by, precision = 0.2, "screened", "warm-up", 0.5
        else:
            window = min(window * (0.03 / precision) ** 2, measure.max_window_s)
        if startup + warmup + window > limits.timeout_s:  # the budget's cut
            self.clock.sleep(limits.timeout_s)
            return TrialResult(status="timeout", config=config, reason="timed out")
        self.clock.sleep(startup + warmup + window)
        steps, wall = 10, window
        seeds = max(1, round(rate * wall / steps))
        return TrialResult(
            status="ok", config=config, step_times_s=(wall / steps,) * steps,
            seeds_per_step=(seeds,) * steps, nodes_per_step=(seeds,) * steps,
            edges_per_step=(seeds,) * steps,
            memory=MemoryStats(cuda_max_reserved_bytes=int(mib * MIB),
                               device_total_bytes=80 * GIB),
            observed=Observed(main_pid=1), phases_s={
                "startup": startup, "dataset_load": 0.0, "build": 0.0,
                "warmup": warmup, "window": wall},
            window=WindowStats(wall_s=wall, precision=precision, stopped=stopped,
                               screened_by=screened_by, block_steps=5))


class DriftingH200(FakeH100):
    """The H200 of 2026-11-27 (``../shared/gpu/check.sh search``, docs/gpu.md): trials
    fork in 0.02 s after the first's 18 s; the baseline (CPU sampling) 7,403 seed
    nodes/s, its window 60 s at +-4.7%; the GPU-resident configs about 38x (bfloat16)
    in 1 s of warm-up and 6.5 s of window at 3%. Each measurement drifts as that
    machine's did, in turn: the baseline's six 7,403, 7,762, 6,496, 7,533, 7,749 and
    7,398, the fastest config's four 282,787, 294,085, 254,374 and 238,010 (each about
    +-10%, the two unrelated)."""

    startups = (18.3, 0.02)
    BASELINE = (7_403, 7_762, 6_496, 7_533, 7_749, 7_398)
    FASTEST = (282_787, 294_085, 254_374, 238_010)

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.drawn = {"baseline": 0, "gpu": 0}

    def figures(self, config) -> tuple[float, float, float, float]:
        kind = "gpu" if config.gpu_sampling else \
            "baseline" if super().figures(config)[0] == BASELINE_RATE else None
        if kind is None:
            return 1.1 * BASELINE_RATE, 3122.0, 2.0, 40.0
        series = self.FASTEST if kind == "gpu" else self.BASELINE
        drift = series[self.drawn[kind] % len(series)] / series[0]
        self.drawn[kind] += 1
        if kind == "baseline":  # 60 s (the most a window takes) reached +-4.7% only
            return BASELINE_RATE * drift, 3976.0, 3.3, 60.0 * (4.7 / 3) ** 2
        rate = 38.2 if config.amp_dtype == "bfloat16" else 14.7
        return rate * BASELINE_RATE * drift, 1920.0, 1.0, 6.5


def _search(tmp_path, monkeypatch, machine, **options):
    import autotune

    monkeypatch.setattr(search_module, "run_trial", machine)
    notes: list[str] = []
    plan = autotune.prepare_search(
        dataset="synthetic", scale=0.004, root=str(tmp_path / "data"), device="cuda",
        studies_dir=str(tmp_path / "studies"), progress=False, optuna_sampler="random",
        measure=MeasureSpec(max_window_s=60.0, min_window_s=1.0),
        **options)
    import dataclasses

    result = dataclasses.replace(plan, on_note=notes.append).run()
    study = optuna.load_study(study_name=result.study_name, storage=result._url)
    return result, records(study), StudyRecord.from_study(study), notes


@pytest.mark.slow
def test_a_budgeted_gpu_search_spends_its_budget_on_what_matters(tmp_path, monkeypatch,
                                                                  fake_cuda, fake_clock):
    """--budget 5m as on the H100 (on the fake clock): trials run until the budget is spent, the
    CPU-sampling priors wait once GPU-resident trials win, the sampler's CPU-sampling
    proposals are cut at their warm-up, the confirmation measures the baseline loosely
    beside 28x candidates and fits the reserve, and each stop says why."""
    budget = 300.0
    machine = FakeH100(fake_clock)
    started = fake_clock.monotonic()
    result, trials, study, notes = _search(tmp_path, monkeypatch, machine, budget=budget)
    took = fake_clock.monotonic() - started
    searched = [t for t in trials if t.search_point and t.reused_from is None
                and t.state in ("complete", "fail")]
    assert searched[0].baseline
    assert [t.prior for t in searched[1:3]] == ["gpu-resident-bf16", "gpu-resident"]
    later = [t for t in searched[3:] if t.prior]
    assert all(t.prior == "fast-end" and t.config.gpu_sampling for t in later), \
        "the CPU-sampling priors wait (the fast end of a GPU-resident config samples there)"
    assert len(searched) > 3, "trials run until the budget is spent, not a fixed count"
    cpu = [t for t in searched[3:] if not t.config.gpu_sampling and t.state == "complete"]
    assert cpu and all(t.screened and t.window.screened_by == "warm-up" for t in cpu)
    assert all(t.fail_reason.startswith("budget: ") for t in searched if t.state == "fail")
    # the confirmation: GPU-resident candidates, the baseline measured to 20%
    confirmed = [t for t in trials if t.confirm is not None]
    assert confirmed and all(trials[t.confirm["of"]].config.gpu_sampling
                             for t in confirmed if not trials[t.confirm["of"]].baseline)
    loose = [c for c, m in machine.calls if m.precision == confirm_module.LOOSE_PRECISION]
    controls = [t for t in trials if t.role == "control"]
    assert len(loose) == sum(trials[t.confirm["of"]].baseline for t in confirmed) + sum(
        t.window.precision >= confirm_module.LOOSE_PRECISION * 0.9 for t in controls)
    assert all(c == trials[0].config.to_dict() for c in loose), "only the baseline is measured loosely"
    # the default pick, and so the export: GPU-resident, confirmed, at 15x or more
    row = next(r for r in result.front if r.default)
    assert row.config["gpu_sampling"] and row.confirmed is not None and row.speedup >= 15
    assert result.default.number == row.trial
    exported = tmp_path / "best.yaml"
    result.export(exported)
    import yaml

    assert yaml.safe_load(exported.read_text())["config"]["gpu_sampling"] is True
    assert any(n.startswith("budget: ") for n in notes), notes
    assert any(n.startswith("confirmation: ") for n in notes), notes
    assert result.outcome.stopped.startswith("stopped: --budget"), result.outcome
    if result.outcome.confirm_cut:  # storing takes real time: a loaded machine may cut
        assert any(n.startswith("confirmation cut short: ") for n in notes), notes
    assert took <= budget + 60 + 5, (took, budget)


@pytest.mark.slow
def test_a_gpu_search_on_a_drifting_machine_confirms_its_default(tmp_path, monkeypatch,
                                                                fake_cuda, fake_clock):
    """The H200's figures and drift: three rounds at t = 4.3 left that machine's
    fastest config unconfirmed at +-50.5% (2026-11-27). Beside candidates far ahead of
    the baseline the confirmation measures both loosely, in five rounds at least, so
    the default it exports is confirmed, at 15x or more. (Eight trials under that
    search's 5-minute budget, on the fake clock; that the reserve of a search run to
    its budget holds the rounds is the test below, on that day's records. It asks
    ±20%: with that day's ±10% drift between rounds the comparison engine's
    interval, valid at every round, reached ±10.8% after ten rounds, so the default
    ±10% leaves it unconfirmed, with why.)"""
    machine = DriftingH200(fake_clock)
    result, trials, study, notes = _search(tmp_path, monkeypatch, machine,
                                           budget=300.0, n_trials=8,
                                           confirm_precision=0.2)
    run = study.confirmations[0]
    assert run["asked"] == run["rounds"] == confirm_module.FAR_ROUNDS, (run, notes)
    measured = sum(t.confirm is not None for t in trials)
    loose = {m.precision for _, m in machine.calls[-measured:]}
    assert loose == {confirm_module.LOOSE_PRECISION, confirm_module.LOOSE_CANDIDATE}, loose
    row = next(r for r in result.front if r.default)
    assert row.config["gpu_sampling"] and row.speedup >= 15, row
    assert row.confirmation.startswith("confirmed in "), (row.marks, notes)


def test_the_reserve_counts_each_config_at_its_own_pace():
    """The H100's figures: a 108 s baseline (60 s window at +-5.3%) beside a 28x config
    measured in 4 s. The baseline is measured to 20% in the confirmation: its window
    shrinks to 60 x (5.3 / 20)^2 s."""
    from types import SimpleNamespace

    from autotune.specs import MeasureSpec
    from autotune.study._confirm import Schedule
    from autotune.study import TrialRecord

    opts = SimpleNamespace(measure=MeasureSpec(precision=0.03), confirm=3, confirm_rounds=3)
    schedule = Schedule(opts, study=None)  # its policies read the options only
    base = TrialRecord(0, "complete", (5_702.0, 4220.0), role="baseline",
                       measured_at=(0.0, 108.0), window=WindowStats(wall_s=60.0,
                                                                    precision=0.053))
    fast = TrialRecord(1, "complete", (28 * 5_702.0, 6348.0), measured_at=(110.0, 114.0),
                       window=WindowStats(wall_s=2.0, precision=0.03))
    near = TrialRecord(2, "complete", (7_000.0, 3122.0), measured_at=(120.0, 150.0),
                       window=WindowStats(wall_s=20.0, precision=0.03))
    trials = [base, fast, near]
    assert schedule.baseline_precision(trials, [0, 1]) == 0.20
    assert schedule.baseline_precision(trials, [0, 1, 2]) == 0.03  # a candidate near 1x
    per_round, base_s = schedule.seconds(trials, [0, 1])
    assert base_s == pytest.approx(48 + 60 * (0.053 / 0.20) ** 2)
    # the candidate's 2 s window at 3% shrinks at 10% to the 1 s least a window takes
    assert per_round == pytest.approx(base_s + 4 - 2 + 1)
    # what 75 s (a quarter of 5 minutes) holds: one round and the closing baseline
    assert schedule.fitted(trials, [0, 1], 75.0) == ([0, 1], 1)
    assert schedule.fitted(trials, [0, 1], None) == ([0, 1], confirm_module.FAR_ROUNDS)
    assert schedule.fitted(trials, [0, 2], None) == ([0, 2], 3)  # near 1x: the rounds asked
    assert schedule.fitted(trials, [0, 1, 2], 80.0)[0] == [0, 1]  # the last one goes first


def test_the_h200s_confirmation_keeps_five_rounds_of_its_fastest_config():
    """The H200's search of 2026-11-27: the baseline took 84 s (18.3 s of it the
    first start-up; a 60 s window at +-4.7%), the fastest config 8 s (6.5 s of window
    at 3%), the leanest 4 s (1.7 s). A quarter of 5 minutes held three rounds of
    both at the search's precision; at the loose windows it holds four, and five of
    the fastest alone, which the confirmation keeps."""
    from types import SimpleNamespace

    from autotune.study._confirm import FAR_ROUNDS, Schedule
    from autotune.study import TrialRecord

    opts = SimpleNamespace(measure=MeasureSpec(precision=0.03), confirm=3, confirm_rounds=3)
    schedule = Schedule(opts, study=None)
    base = TrialRecord(0, "complete", (7_403.0, 3976.0), role="baseline",
                       measured_at=(0.0, 84.0), phases_s={"startup": 18.3},
                       window=WindowStats(wall_s=60.1, precision=0.047))
    fastest = TrialRecord(1, "complete", (282_787.0, 1920.0), measured_at=(90.0, 98.0),
                          phases_s={"startup": 0.01},
                          window=WindowStats(wall_s=6.5, precision=0.03))
    lean = TrialRecord(2, "complete", (197_621.0, 1416.0), measured_at=(100.0, 104.0),
                       phases_s={"startup": 0.01}, window=WindowStats(wall_s=1.7, precision=0.03))
    trials = [base, fastest, lean]
    per_round, base_s = schedule.seconds(trials, [0, 1, 2], overhead_s=0.5)
    assert base_s == pytest.approx(0.5 + 84 - 18.3 + 0.01 - 60.1 + 60.1 * (0.047 / 0.2) ** 2)
    assert per_round == pytest.approx(base_s + (0.5 + 8 - 6.5 + 1) + (0.5 + 4 - 1.7 + 1))
    assert int((75.0 - base_s) // per_round) == 4
    assert schedule.fitted(trials, [0, 1, 2], 75.0, overhead_s=0.5) == ([0, 1], FAR_ROUNDS)
    assert schedule.fitted(trials, [0, 1, 2], 200.0, overhead_s=0.5) == ([0, 1, 2], FAR_ROUNDS)


def test_a_control_beside_a_far_faster_front_measures_the_baseline_loosely():
    """On an H200 a control (the baseline again) spent 60 s of a 5-minute budget on a
    window that never reached the search's 3%, beside configs 20x faster. Where the
    fastest config so far is FAR_AHEAD of the baseline, a control asks for 20%."""
    from types import SimpleNamespace

    from autotune.study._confirm import Schedule
    from autotune.study import TrialRecord

    schedule = Schedule(SimpleNamespace(measure=MeasureSpec(precision=0.03, max_window_s=60.0)),
                        study=None)
    base = TrialRecord(0, "complete", (5_702.0, 4220.0), role="baseline")
    near = TrialRecord(1, "complete", (7_000.0, 3122.0))
    fast = TrialRecord(2, "complete", (28 * 5_702.0, 6348.0))
    failed = TrialRecord(3, "fail")
    assert schedule.control_spec([base], 0).precision == 0.03
    assert schedule.control_spec([base, near, failed], 0).precision == 0.03
    spec = schedule.control_spec([base, near, fast, failed], 0)
    assert spec.precision == confirm_module.LOOSE_PRECISION
    assert spec.max_window_s == 60.0  # the rest of the search's spec kept


def test_a_budget_shorter_than_a_window_is_said_before_the_first_trial(tmp_path,
                                                                      monkeypatch, fake_cuda,
                                                                      fake_clock):
    machine = FakeH100(fake_clock)
    result, trials, study, notes = _search(tmp_path, monkeypatch, machine, budget=1.0,
                                           n_trials=3)
    assert notes[0].startswith("warning: --budget 0:01 is shorter than one measurement "
                               "window may take"), notes
    assert trials[0].baseline and trials[0].fail_reason.startswith("budget: ")
    assert result.outcome.stopped.startswith("stopped: --budget"), result.outcome
    # a budget the baseline leaves no room in beside the confirmation: said at once.
    # (the baseline takes 108 s of it)
    _, _, _, notes = _search(tmp_path, monkeypatch, FakeH100(fake_clock), budget=140.0,
                             study_name="tight")
    assert any(n.startswith("warning: --budget 2:20 has") and "no other config" in n
               for n in notes), notes
