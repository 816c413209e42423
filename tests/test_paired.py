"""Answers that hold up: speed-ups paired with a control measured close in time, the
confirmation that ends a search, no budget slot spent on a repeat, and the stop
rule. The search runs in this process against a fake machine (``run_trial``
replaced) whose speed drifts as the search goes, so what is asserted is the
arithmetic of pairing, not this machine's noise; one real search checks that the
confirmation measures each candidate in its own process."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
from typing import Callable

import optuna
import pytest
import yaml
from _helpers import cli

from autotune.compare import Comparison
from autotune.config import TrialConfig
from autotune.trial import MIB, MemoryStats, Observed, TrialResult, WindowStats
from autotune.study import _confirm as confirm_module, _search as search_module
from autotune.study._front import front_rows
from autotune.study import StudyRecord, TrialRecord, drifts
from autotune.study._paired import confirmed
from autotune.study._records import records

WORKERS = min(6, len(os.sched_getaffinity(0)))  # the baseline's loader workers here
# batch size -> (true seed nodes/s, peak MiB); 1024 is the baseline's, 896 truly 1.10x.
TRUE = {1024: (1000.0, 1000.0), 896: (1100.0, 700.0), 768: (1090.0, 720.0),
        640: (850.0, 450.0), 512: (800.0, 500.0), 384: (700.0, 400.0),
        256: (500.0, 300.0), 128: (450.0, 200.0)}
PRECISION = 0.015  # what each fake window claims


class FakeMachine:
    """``run_trial``'s stand-in: a config's true rate times a drift that falls by
    ``drift`` over ``span`` measurements; ``boost``: batch sizes whose first
    measurement is that much faster (fast only by drift); ``grow``: batch sizes whose
    peak memory is that many MiB from their second measurement on; ``slowed``: the
    share of its rate a measurement reads while the machine is ``busy``, and ``took``
    the (pid, name) that takes the cores then (pid 0, "steal": the hypervisor)."""

    def __init__(self, drift: float = 0.2, span: int = 40, boost: dict | None = None,
                 grow: dict | None = None, jitter: dict | None = None,
                 busy: Callable[[TrialConfig, int], bool] | None = None,
                 slowed: float = 1.0, took: tuple[int, str] = (4321, "stress")):
        self.k, self.drift, self.span, self.boost = 0, drift, span, dict(boost or {})
        self.grow = dict(grow or {})
        # batch size -> factors of its successive measurements (rounds that disagree)
        self.jitter = {size: list(factors) for size, factors in (jitter or {}).items()}
        # whether the machine is busy (another process took half the cores) while
        # measuring this config as its nth measurement (from 1)
        self.busy, self.slowed, self.took = busy, slowed, took
        self.calls: list[tuple[int, int]] = []  # (batch size, pid stand-in)
        self.specs: list = []  # the MeasureSpec of each call
        self.envs: list = []  # the environment each call adds to the trial's processes

    def factor(self, k: int) -> float:
        return 1.0 - self.drift * min(k, self.span) / self.span

    def __call__(self, config: TrialConfig, **kw) -> TrialResult:
        self.specs.append(kw.get("measure"))
        self.envs.append(kw.get("env"))
        rate, mib = TRUE[config.batch_size]
        if any(size == config.batch_size for size, _ in self.calls):
            mib = self.grow.get(config.batch_size, mib)
        nth = 1 + sum(size == config.batch_size for size, _ in self.calls)
        rate *= self.factor(self.k) * self.boost.pop(config.batch_size, 1.0)
        jitter = self.jitter.get(config.batch_size)
        rate *= jitter.pop(0) if jitter else 1.0
        busy = self.busy is not None and self.busy(config, nth)
        rate *= self.slowed if busy else 1.0
        self.k += 1
        self.calls.append((config.batch_size, self.k))
        steps, seeds = 20, config.batch_size
        wall = steps * seeds / rate
        load = {"cores": 2, "wall_s": wall, "own_s": wall, "others_s": wall if busy else 0.0,
                "share": 0.5 if busy else 0.01, "top": [[*self.took, wall]] if busy else []}
        return TrialResult(
            status="ok", config=config, step_times_s=(wall / steps,) * steps,
            seeds_per_step=(seeds,) * steps, nodes_per_step=(seeds,) * steps,
            edges_per_step=(seeds,) * steps, memory=MemoryStats(
                peak_rss_window_bytes=int(mib * MIB)),
            observed=Observed(main_pid=10_000 + self.k), phases_s={
                "startup": 0.0, "dataset_load": 0.0, "build": 0.0, "warmup": 0.0,
                "window": wall}, window=WindowStats(wall_s=wall, precision=PRECISION,
                                                    stopped="precise", block_steps=5,
                                                    load=load, max_busy=0.1))


def _space(sizes, fanouts=((25, 10),)) -> dict:
    return {"knobs": {"batch_size": {"choices": list(sizes)},
                      "num_neighbors": {"choices": [list(f) for f in fanouts]},
                      "num_workers": {"choices": [WORKERS]}, "compile_mode": "none",
                      "amp_dtype": "float32", "checkpointing": False, "sampling_backend": "builtin"},
            "fixed": {"hidden_channels": 8}}


def _search(tmp_path, monkeypatch, machine, sizes=TRUE, fanouts=((25, 10),), notes=None,
            lines=None, **options):
    """A search on the fake ``machine``; ``notes``: takes the plan's notes, ``lines``:
    the lines the run shows as it goes (confirmations announced)."""
    import autotune

    monkeypatch.setattr(search_module, "run_trial", machine)
    plan = autotune.prepare_search(
        dataset="synthetic", scale=0.004, root=str(tmp_path / "data"),
        studies_dir=str(tmp_path / "studies"), space=_space(sizes, fanouts),
        **{"priors": False, "racing": False, "progress": False, "optuna_sampler": "random",
           "confirm_by": "rounds", **options})
    if lines is not None:
        plan = dataclasses.replace(plan, on_note=lines.append)
    result = plan.run()
    study = optuna.load_study(study_name=result.study_name, storage=result._url)
    if notes is not None:
        notes.extend(plan.notes)
    return result, records(study), StudyRecord.from_study(study)


def _true_ratio(t: TrialRecord) -> float:
    return TRUE[t.config.batch_size][0] / TRUE[1024][0]


def test_paired_speedups_hold_up_under_drift_and_unpaired_ones_do_not(tmp_path, monkeypatch):
    """20% drift over the search: each trial's speed-up paired with the control before
    it lands in its true ratio ± its interval; the ratio to the first baseline misses
    for late trials; the controls record the drift; the confirmation gives the 1.10x
    config 1.10 within its interval."""
    machine = FakeMachine(drift=0.2, span=40)
    result, trials, s = _search(tmp_path, monkeypatch, machine, n_trials=8,
                                control_every_trials=2)
    base = trials[s.baseline]
    searched = [t for t in trials if t.search_point and not t.baseline and t.complete and
                t.reused_from is None]
    assert len(searched) == 7  # all of the space: repeats take no slot
    for t in searched:
        speedup, interval = t.paired_speedup(base)
        assert abs(speedup / _true_ratio(t) - 1) <= interval, (t, speedup, interval)
    late = max(searched, key=lambda t: t.measured_at[0])
    unpaired, interval = late.speedup(base)
    assert abs(unpaired / _true_ratio(late) - 1) > interval, (late, unpaired, interval)
    controls = [t for t in trials if t.control]
    assert len(controls) >= 3 and all(c.paired for c in controls)
    steps = drifts(trials)
    assert steps[0]["trial"] == s.baseline and steps[-1]["drift"] < 0
    assert steps[-1]["throughput"] < 0.9 * steps[0]["throughput"]  # 20% over the search
    figures = confirmed(trials)
    fast = next(t for t in trials if t.config and t.config.batch_size == 896 and
                t.search_point)
    c = figures[fast.number]
    assert c.rounds == 3 and abs(c.speedup / 1.10 - 1) <= c.interval, c
    row = next(r for r in result.front if r.trial == fast.number)
    assert row.speedup == c.speedup and row.throughput == c.throughput
    assert any(m.startswith("confirmed in 3 rounds") for m in row.marks)


def test_confirmation_is_interleaved_and_drops_a_config_fast_only_by_drift(tmp_path,
                                                                          monkeypatch):
    """The 768 config's first measurement is 30% fast (a burst of machine speed): the
    search's front holds it, ahead of the truly faster and leaner 896; the
    confirmation's rounds (interleaved, checked by their timestamps) drop it, and the
    export carries the confirmed figures."""
    machine = FakeMachine(drift=0.0, boost={768: 1.3})
    result, trials, s = _search(tmp_path, monkeypatch, machine, n_trials=8, confirm=3)
    by_size = {t.config.batch_size: t for t in trials if t.search_point and t.config and
               t.reused_from is None}
    search_front = [r.trial for r in front_rows([t for t in trials if t.search_point],
                                                s.baseline, None)]
    assert by_size[768].number in search_front
    assert by_size[768].number not in [r.trial for r in result.front]
    assert by_size[896].number in [r.trial for r in result.front]
    rounds = [t for t in trials if t.confirm is not None]
    assert len({t.confirm["of"] for t in rounds}) >= 3 and s.baseline in \
        {t.confirm["of"] for t in rounds}
    ordered = sorted(rounds, key=lambda t: t.measured_at[0])
    assert [t.confirm["round"] for t in ordered] == sorted(t.confirm["round"] for t in ordered)
    per_round = (len(ordered) - 1) // 3  # and the closing baseline
    assert [t.confirm["of"] for t in ordered[:per_round]] == \
        [t.confirm["of"] for t in ordered[per_round:2 * per_round]]  # A B C, then A B C
    assert len({t.observed.main_pid for t in rounds}) == len(rounds)  # one process each
    out = tmp_path / "best.yaml"
    result.export(out, pick="max-throughput")
    measured = yaml.safe_load(out.read_text())["measured"]
    c = confirmed(trials)[by_size[896].number]
    assert measured["trial"] == by_size[896].number
    assert measured["confirmed"]["speedup"] == c.speedup and measured["confirmed"]["rounds"] == 3
    assert measured["throughput"] == c.throughput
    assert measured["confirmed"]["trials"] == list(c.measurements) and \
        by_size[896].number not in c.measurements


def test_a_disturbed_confirmation_measurement_is_measured_again_not_kept(tmp_path,
                                                                        monkeypatch):
    """The machine is busy while the confirmation measures 896 in its first round: that
    measurement is measured again in a fresh process, and the confirmed figure rests
    on the quiet one; where 640's every confirmation measurement is disturbed, its
    rounds are left out and the front says the machine was busy, naming the process."""
    def busy(config, nth):
        return (config.batch_size == 896 and nth == 2) or \
            (config.batch_size == 640 and nth >= 2)

    result, trials, s = _search(tmp_path, monkeypatch, FakeMachine(drift=0.0, busy=busy),
                                sizes=[640, 896, 1024], n_trials=3, confirm=2)
    by_size = {t.config.batch_size: t.number for t in trials
               if t.search_point and t.reused_from is None}
    fast, lean = by_size[896], by_size[640]
    first = [t for t in trials if t.confirm == {"run": 0, "round": 0, "of": fast}]
    assert [t.disturbed for t in first] == [True, False]  # measured again, quietly
    c = confirmed(trials)[fast]
    assert c.rounds == 3 and first[0].number not in c.measurements
    assert first[1].number in c.measurements and c.busy_rounds == 0
    rows = {r.trial: r for r in result.front}
    assert rows[fast].confirmation.startswith("confirmed in 3 rounds"), rows[fast].marks
    twice = [t for t in trials if t.confirm is not None and t.confirm["of"] == lean]
    assert len(twice) == 2 * 3 and all(t.disturbed for t in twice)  # each round twice
    assert lean not in confirmed(trials)
    assert rows[lean].confirmation.startswith(
        "unconfirmed: the machine was busy in each round (pid 4321 (stress) "), rows[lean].marks
    assert result.default.number == fast


def _busy_search(tmp_path, monkeypatch, busy_calls: range, n_trials: int = 8, **fake):
    """A racing search of ``n_trials`` on a FakeMachine that another process keeps
    busy in ``busy_calls`` (its measurements, from 1), OpenMP's policy left to the
    search (``fake``: the FakeMachine's other arguments): the machine, the notes
    and the result."""
    import dataclasses

    import autotune

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("AUTOTUNE_MAX_BUSY", "1")  # no look at this machine's own load
    machine = FakeMachine(drift=0.0, busy=lambda config, nth: len(machine.calls) + 1 in
                          busy_calls, **fake)
    monkeypatch.setattr(search_module, "run_trial", machine)
    plan = autotune.prepare_search(
        dataset="synthetic", scale=0.004, root=str(tmp_path / "data"),
        studies_dir=str(tmp_path / "studies"), space=_space(TRUE), priors=False,
        racing=True, progress=False, optuna_sampler="random", n_trials=n_trials, confirm=0)
    notes: list[str] = []
    result = dataclasses.replace(plan, on_note=notes.append).run()
    return machine, notes, result


PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}


def test_a_machine_that_stays_busy_is_said_once_and_its_windows_kept(tmp_path, monkeypatch):
    """Another process takes the cores in the second to sixth measurements: the
    first trial that stayed disturbed is measured again with passive OpenMP threads,
    as the trials after it are (said); after two in a row the search says once that
    the machine stays busy, naming the process, and measures on with windows kept as
    measured (neither measured again nor screened); once a trial is quiet it says so,
    measures it again with spinning threads (its passive figure alone reads slower),
    and disturbed windows are measured again."""
    machine, notes, result = _busy_search(tmp_path, monkeypatch, range(2, 7))
    said = [n for n in notes if n.startswith("the machine stays busy")]
    assert len(said) == 1 and "pid 4321 (stress)" in said[0], notes
    quiet = [n for n in notes if n.startswith("the machine is quiet again")]
    assert len(quiet) == 1 and "threads spin again" in quiet[0], notes
    specs = machine.specs
    assert all(s.busy_retries > 0 for s in specs[:4]), specs[:4]  # before it is said
    assert all(s.busy_retries == 0 and s.screen is None for s in specs[4:7]), specs[4:7]
    assert specs[7].busy_retries > 0  # the seventh call was quiet: measured again, spinning
    assert machine.calls[1][0] == machine.calls[2][0]  # the first disturbed, again passive
    assert result.outcome.busy == ""
    assert machine.envs == [{}] * 2 + [PASSIVE] * 5 + [{}] * (len(machine.envs) - 7), \
        machine.envs
    passive = [n for n in notes if "OMP_WAIT_POLICY=PASSIVE" in n]
    assert len(passive) == 1 and "stayed disturbed" in passive[0], notes


def test_a_machine_the_hypervisor_keeps_busy_is_said_once_and_its_threads_spin(
        tmp_path, monkeypatch):
    """The hypervisor's steal takes the cores in the second to sixth measurements (a
    cloud host whose neighbours are busy): no process on the machine is there for the
    trials' threads to spin against, so the first trial that stayed disturbed is kept
    as measured, not measured again with passive threads; after two in a row the
    search says once that the machine stays busy, naming the hypervisor, and keeps
    their windows; every trial's threads spin as the runtime has them."""
    machine, notes, result = _busy_search(tmp_path, monkeypatch, range(2, 7),
                                          took=(0, "steal"))
    said = [n for n in notes if n.startswith("the machine stays busy")]
    assert len(said) == 1 and "the hypervisor (steal)" in said[0], notes
    assert not any("OMP_WAIT_POLICY" in n or "stayed disturbed" in n for n in notes), notes
    assert machine.envs == [{}] * len(machine.envs)
    assert len({size for size, _ in machine.calls[1:3]}) == 2  # not measured again
    assert all(s.busy_retries == 0 and s.screen is None for s in machine.specs[3:6])
    assert any(n.startswith("the machine is quiet again") for n in notes), notes


def test_one_trial_that_stayed_disturbed_turns_the_threads_passive_until_one_is_quiet(
        tmp_path, monkeypatch):
    """Only the second measurement's windows stay disturbed: that trial is measured
    again with passive threads, finds the machine quiet, and is measured a third
    time spinning, as the trials after it are; the machine was never said to stay
    busy."""
    machine, notes, result = _busy_search(tmp_path, monkeypatch, range(2, 3), n_trials=5)
    assert machine.envs[:4] == [{}, {}, PASSIVE, {}], machine.envs
    assert all(env == {} for env in machine.envs[3:]), machine.envs
    assert machine.calls[1][0] == machine.calls[2][0] == machine.calls[3][0]  # one config
    assert not any(n.startswith(("the machine stays busy", "the machine is quiet"))
                   for n in notes), notes
    assert any(n.startswith("#1 stayed disturbed however often it was measured again "
                            "(pid 4321 (stress)") and "OMP_WAIT_POLICY=PASSIVE" in n
               for n in notes), notes
    assert any(n.startswith("#1 found the machine quiet, its threads passive: measured "
                            "again, trials' threads spin again") for n in notes), notes
    kept = next(t for t in result.trials if t.number == 1)  # its record still names it
    dropped = kept.window.remeasured
    assert len(dropped) == 2 and dropped[0]["top"][0][:2] == [4321, "stress"], kept.window
    assert not kept.disturbed


def _search_after_looks(tmp_path, monkeypatch, machine, n_trials: int, load_of: Callable,
                        sizes=TRUE, **options) -> tuple[list[str], int]:
    """A search of ``n_trials`` on ``machine`` whose looks at the load (before its
    first trial, and as a paired confirmation starts) read ``load_of(look)`` (look 1,
    2, ...), as LoadMeter reads it: its notes, and how many looks it took.
    ``options`` go to the search (no confirmation unless they ask for one)."""
    import autotune
    from autotune.specs import MeasureSpec

    looks = [0]

    class Meter:
        def start(self):
            pass

        def stop(self):
            looks[0] += 1
            return load_of(looks[0])

    monkeypatch.setattr(search_module, "LoadMeter", Meter)
    monkeypatch.setattr(search_module, "run_trial", machine)
    plan = autotune.prepare_search(
        dataset="synthetic", scale=0.004, root=str(tmp_path / "data"),
        studies_dir=str(tmp_path / "studies"), space=_space(sizes), priors=False,
        progress=False, optuna_sampler="random", n_trials=n_trials,
        measure=MeasureSpec(max_busy=0.1), **{"racing": True, "confirm": 0, **options})
    notes: list[str] = []
    dataclasses.replace(plan, on_note=notes.append).run()
    return notes, looks[0]


@pytest.mark.parametrize("own_policy", [None, "ACTIVE"])
def test_a_machine_busy_before_the_search_starts_is_said_once_and_windows_kept(
        tmp_path, monkeypatch, own_policy):
    """Another training takes half the cores as the search starts: the search says so
    once, naming it, before its first trial, and its first trials keep their windows
    as measured; the first quiet trial says the machine is quiet again. Every trial's
    OpenMP threads wait passively (OMP_WAIT_POLICY=PASSIVE, said in the note) until
    then, unless the user set a policy of their own."""
    from autotune.trial import Load

    if own_policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", own_policy)
    machine = FakeMachine(drift=0.0, busy=lambda config, nth: len(machine.calls) < 2)
    notes, looks = _search_after_looks(tmp_path, monkeypatch, machine, 4, lambda look: Load(
        cores=2, wall_s=0.25, others_s=0.25, share=0.5, top=[[4242, "trainer", 0.25]]))
    said = [n for n in notes if n.startswith("the machine is busy before the search starts")]
    assert len(said) == 1 and "pid 4242 (trainer)" in said[0], notes
    passive = {"OMP_WAIT_POLICY": "PASSIVE"} if own_policy is None else {}
    assert machine.envs == [passive] * 3 + [{}] * (len(machine.envs) - 3), machine.envs
    assert ("OMP_WAIT_POLICY=PASSIVE" in said[0]) == (own_policy is None), said[0]
    assert [s.busy_retries for s in machine.specs[:3]] == [0, 0, 0], machine.specs[:3]
    assert machine.specs[3].busy_retries > 0  # the third call was quiet
    assert sum(n.startswith("the machine is quiet again") for n in notes) == 1, notes
    assert looks == 2  # looked again before calling it busy


def test_a_one_off_before_the_search_is_not_a_busy_machine(tmp_path, monkeypatch):
    """A command that takes the cores for a moment as the search starts (the first
    look busy, the second quiet) is not another training: nothing is said, every
    trial's threads keep their own wait policy, and disturbed windows are measured
    again as on any quiet machine."""
    from autotune.trial import Load

    def blip(look: int) -> Load:  # busy in the first look only
        share = 0.45 if look == 1 else 0.0
        return Load(cores=2, wall_s=0.25, others_s=0.5 * share, share=share,
                    top=[[5606, "python", 0.3]] if share else [])

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    machine = FakeMachine(drift=0.0)
    notes, looks = _search_after_looks(tmp_path, monkeypatch, machine, 2, blip)
    assert looks == 2, looks
    assert not any("busy" in n for n in notes), notes
    assert machine.envs and all(env == {} for env in machine.envs), machine.envs
    assert all(spec.busy_retries > 0 for spec in machine.specs), machine.specs


def test_confirmed_means_the_speedups_interval_holds(tmp_path, monkeypatch):
    """896's confirmation rounds disagree (0.6x, 1.5x and 1x its speed), too much for
    more rounds to confirm it: it is shown unconfirmed with why, the default pick is
    the fastest config that is confirmed, and its export says so; the confirmed
    one's export says it holds."""
    machine = FakeMachine(drift=0.0, jitter={896: [1.0, 0.6, 1.5, 1.0]})
    result, trials, s = _search(tmp_path, monkeypatch, machine, sizes=[640, 896, 1024],
                                n_trials=3, confirm=2, confirm_precision=0.05)
    by_size = {t.config.batch_size: t.number for t in trials
               if t.search_point and t.reused_from is None}
    noisy, steady = by_size[896], by_size[640]
    rows = {r.trial: r for r in result.front}
    assert rows[noisy].confirmation.startswith("unconfirmed: rounds disagree: ±"), rows[noisy]
    assert "> ±5%" in rows[noisy].confirmation
    assert rows[steady].confirmation.startswith("confirmed in 3 rounds")
    assert result.default.number == steady
    assert any(m.startswith("default: the fastest confirmed config") for m in
               rows[steady].marks)
    def rounds_of(number):
        return sorted(t.confirm["round"] for t in trials
                      if t.confirm is not None and t.confirm["of"] == number)
    # rounds that disagree this much would not reach ±5% in the rounds there are
    # (confirm_module.reachable): no more of them
    assert rounds_of(noisy) == [0, 1, 2]
    assert rounds_of(steady) == [0, 1, 2] and rounds_of(s.baseline) == [0, 1, 2, 3]
    out = tmp_path / "noisy.yaml"
    result.export(out, pick=f"trial:{noisy}")
    told = yaml.safe_load(out.read_text())["measured"]["confirmed"]
    assert told["holds"] is False and told["why_not"].startswith("rounds disagree")
    result.export(out)
    told = yaml.safe_load(out.read_text())["measured"]["confirmed"]
    assert told["holds"] is True and told["within"] == 0.05


def test_rounds_that_disagree_a_little_are_settled_by_more_rounds(tmp_path, monkeypatch):
    """896's three rounds (0.9x, 1.1x and 1x its speed) leave its interval wider than
    the ±10% asked: more rounds, each opened by the baseline that closed the one
    before, bring it within (the engine's interval holds at every round, so it
    narrows only as the rounds agree: four more here), and it is confirmed in 7."""
    machine = FakeMachine(drift=0.0, jitter={896: [1.0, 0.9, 1.1, 1.0]})
    result, trials, s = _search(tmp_path, monkeypatch, machine, sizes=[896, 1024],
                                n_trials=2, confirm=1, confirm_precision=0.10)
    row = next(r for r in result.front if r.config["batch_size"] == 896)
    assert row.confirmation.startswith("confirmed in 7 rounds"), row.marks
    assert confirmed(trials)[row.trial].interval <= 0.10


def test_repeats_take_no_slot_and_a_space_of_two_configs_stops_early(tmp_path, monkeypatch):
    """On a space of two configs (the baseline's and one more), ``n_trials=6`` cannot
    be met: the search measures both, says the space is exhausted, and stops."""
    machine = FakeMachine(drift=0.0)
    result, trials, s = _search(tmp_path, monkeypatch, machine, sizes=[896, 1024],
                                n_trials=6, confirm=0)
    assert sum(t.counts for t in trials) == 2
    assert "the space is exhausted: all 2 of its configs are measured" in \
        result.outcome.stopped
    assert len(machine.calls) == 2


def test_a_sampler_that_repeats_itself_explores_then_stops(tmp_path, monkeypatch):
    """A sampler that proposes one config again and again: after a few repeats a
    config not yet measured is drawn at random and measured, and the repeats count
    against nothing."""
    from optuna.samplers import BaseSampler

    from autotune.study import _search as loop

    class Stuck(BaseSampler):
        def infer_relative_search_space(self, study, trial):
            return {}

        def sample_relative(self, study, trial, search_space):
            return {}

        def sample_independent(self, study, trial, name, distribution):
            return distribution.choices[-1] if hasattr(distribution, "choices") else \
                distribution.low

    real = loop.optuna_sampler
    monkeypatch.setattr(loop, "optuna_sampler", lambda name, seed: Stuck() if name == "tpe"
                        else real(name, seed))
    machine = FakeMachine(drift=0.0)
    result, trials, s = _search(tmp_path, monkeypatch, machine, sizes=[128, 256, 512, 1024],
                                n_trials=3, confirm=0, optuna_sampler="tpe")
    assert result.outcome.explored >= 1 and any(t.explored for t in trials)
    assert sum(t.counts for t in trials) == 3
    assert sum(t.reused_from is not None for t in trials) >= loop.EXPLORE_AFTER
    assert len({t.config.batch_size for t in trials if t.counts}) == 3


def test_budget_keeps_time_for_the_confirmation(tmp_path, monkeypatch, fake_clock):
    """A budgeted search ends within its budget and one trial, and its confirmation
    ran (a first round at least): the loop stopped early enough to leave it time.
    (Its measurements take 2 s each on the search's fake clock: a test beside it
    slows only the search's own work.)"""
    class Slow(FakeMachine):
        def __call__(self, config, **kw):
            fake_clock.sleep(2.0)
            return super().__call__(config, **kw)

    started = fake_clock.monotonic()
    result, trials, s = _search(tmp_path, monkeypatch, Slow(drift=0.0), n_trials=50,
                                budget=60, confirm=1)
    took = fake_clock.monotonic() - started
    assert result.outcome.measured >= 3, result.outcome
    # without the reserve the loop spends the whole budget and no round runs; under a
    # load that slows later measurements the last rounds may still be cut (and said)
    assert result.outcome.confirmed > 0, result.outcome
    # the budget runs from the search's start (preparing the dataset comes before):
    # budget + a trial, and storing; the whole call may take the preparation besides
    assert result.outcome.elapsed_s <= 60 + 2.0 * 3 + 2, result.outcome
    assert took <= result.outcome.elapsed_s + 30, took


class Timed(FakeMachine):
    """A machine whose measurements take ``seconds[batch size]`` on ``clock`` (the
    search's :class:`fake_clock.FakeClock`), and that a trial's timeout cuts, as the
    real runner's watchdog does."""

    def __init__(self, clock, seconds: dict[int, float], **kw):
        super().__init__(drift=0.0, **kw)
        self.clock, self.seconds = clock, seconds

    def __call__(self, config, *, limits, **kw):
        took = self.seconds[config.batch_size]
        if took > limits.timeout_s:
            self.clock.sleep(limits.timeout_s)
            return TrialResult(status="timeout", config=config, reason="timeout")
        self.clock.sleep(took)
        return super().__call__(config, **kw)


def _search_cli(tmp_path, monkeypatch, capsys, machine, sizes, *flags):
    """``autotune search`` in this process on ``machine``, confirming in rounds of
    trials (the fakes measure no pairs): exit code, stdout, stderr and the study's
    records."""
    import json

    from autotune.cli import main

    monkeypatch.setattr(search_module, "run_trial", machine)
    space = tmp_path / "space.yaml"
    space.write_text(json.dumps(_space(sizes)))
    capsys.readouterr()
    code = main(["search", "--dataset", "synthetic", "--scale", "0.004", "--root",
                 str(tmp_path / "data"), "--studies-dir", str(tmp_path / "studies"),
                 "--space", str(space), "--study-name", "b", "--no-priors",
                 "--optuna-sampler", "random", "--confirm-by", "rounds", *flags])
    out, err = capsys.readouterr()
    study = optuna.load_study(study_name="b",
                              storage=f"sqlite:///{tmp_path / 'studies' / 'b.db'}")
    return code, out, err, records(study)


def test_a_budget_measures_the_spaces_only_trial_rather_than_keep_time_for_nothing(
        tmp_path, monkeypatch, capsys, fake_clock):
    """``--budget 100s``: the baseline takes 10 s, the space's only other config 66 s,
    more than the 90 s left would leave it once a confirmation's reserve (a quarter
    of the budget) were kept. No time is kept from it (there is nothing to confirm
    without it): it is measured, and what the confirmation could not do is said. The
    search's own work has 24 s beside them."""
    code, out, err, trials = _search_cli(tmp_path, monkeypatch, capsys,
                                         Timed(fake_clock, {1024: 10.0, 896: 66.0}),
                                         [896, 1024], "--budget", "100s", "--confirm", "1")
    assert code == 0, err
    other = [t for t in trials if t.search_point and t.config.batch_size == 896]
    assert [t.state for t in other] == ["complete"], [(t.state, t.fail_reason) for t in other]
    assert "896" in out.split("Pareto front")[1]


def test_a_budget_that_holds_only_the_baseline_says_so_and_exits_1(tmp_path, monkeypatch,
                                                                   capsys, fake_clock):
    """``--budget 80s`` where the baseline (outside the space: a reference only) takes
    20 s and each config of the space 120 s: the first is cut, numbered as counting for
    nothing, left queued by no one (the next run queues it); the stop is said once;
    the exit is 1 with one line of why; and the closing hint is no export, which
    would fail: nothing is on the front."""
    from autotune.cli import main

    slow = {1024: 20.0, 896: 120.0, 512: 120.0}
    code, out, err, trials = _search_cli(tmp_path, monkeypatch, capsys,
                                         Timed(fake_clock, slow), [896, 512],
                                         "--budget", "80s", "--confirm", "1")
    assert code == 1, (out, err)
    said = [line for line in err.splitlines() if line.startswith("autotune:")]
    assert len(said) == 1 and "measured no config but the baseline" in said[0], err
    assert "run the same command again with a longer --budget" in said[0]
    cut = [t for t in trials if t.search_point and not t.baseline]
    assert [t.state for t in cut] == ["fail"] and cut[0].fail_reason.startswith("budget:")
    assert not [t for t in trials if t.state == "waiting"]  # no trial left waiting
    lines = out.splitlines()
    assert sum(line.startswith("stopped:") for line in lines) == 1, lines  # said once
    assert sum("budget: --budget" in line and "ran out" in line for line in lines) == 1
    assert any(line.startswith("[  1] #0") for line in lines), lines  # the baseline
    cut_line = next(line for line in lines if f"] #{cut[0].number} " in line)
    assert cut_line.startswith("[  -]"), lines  # the cut one counts against nothing
    hint = next(line for line in lines if line.startswith("export: "))
    assert hint == "export: nothing to export yet: run the same command again to go on"
    assert main(["export", "--study-name", "b", "--studies-dir", str(tmp_path / "studies"),
                 "--out", str(tmp_path / "b.yaml")]) == 2  # what the hint used to say
    # the next run measures the cut config first, and then leaves nothing queued
    code, out, err, trials = _search_cli(tmp_path, monkeypatch, capsys,
                                         Timed(fake_clock, {1024: 20.0, 896: 2.0, 512: 2.0}),
                                         [896, 512],
                                         "--n-trials", "3", "--confirm", "0")
    assert code == 0, err
    again = [t for t in trials if t.retry_of == cut[0].number]
    assert [(t.state, t.reused_from) for t in again] == [("complete", None)]
    assert not [t for t in trials if t.state == "waiting"]


def test_paired_figures_from_records():
    """``confirmed``: the geometric mean of per-round ratios, each to the baseline
    interpolated (log-linearly) between its round's and the next round's; a round
    the baseline missed is left out; the interval is the comparison engine's over
    the rounds' ratios."""
    def rec(number, rate, round_, of, at):
        return TrialRecord(number, "complete", (rate, 100.0), TrialConfig(batch_size=1),
                           confirm={"run": 0, "round": round_, "of": of},
                           window=WindowStats(precision=0.01), measured_at=(at, at + 1))

    base = TrialRecord(0, "complete", (100.0, 100.0), role="baseline",
                       window=WindowStats(precision=0.01), measured_at=(0, 1))
    trials = [base, TrialRecord(1, "complete", (150.0, 50.0),
                                window=WindowStats(precision=0.01), measured_at=(1, 2)),
              rec(2, 100, 0, 0, 10), rec(3, 160, 0, 1, 11), rec(4, 90, 1, 0, 12),
              rec(5, 135, 1, 1, 13), rec(6, 110, 2, 0, 14), rec(7, 165, 2, 1, 15),
              rec(8, 170, 3, 1, 16)]  # round 3: no baseline
    c = confirmed(trials)[1]
    assert c.rounds == 3 and c.ratios == pytest.approx(
        (160 / (100 * 90) ** 0.5, 135 / (90 * 110) ** 0.5, 165 / 110))
    assert c.speedup == pytest.approx(math.prod(c.ratios) ** (1 / 3))
    assert c.measurements == (3, 5, 7) and c.interval > 0.05
    assert c.bounds() == Comparison(ratios=list(c.ratios)).interval()
    assert [d["trial"] for d in drifts(trials)] == [0, 2, 4, 6]
    assert drifts(trials)[2]["drift"] == pytest.approx(-0.1)


def test_a_config_whose_rounds_gave_no_figure_says_why():
    """A candidate the confirmation measured only in rounds whose baseline failed has
    no confirmed figure: its row says so, not that it was never measured (a resumed
    search once fell back to the search's figures with no word)."""
    def rec(number, rate, round_, of, state="complete"):
        return TrialRecord(number, state, (rate, 100.0) if state == "complete" else None,
                           TrialConfig(batch_size=1), role="confirmation",
                           confirm={"run": 0, "round": round_, "of": of},
                           window=WindowStats(precision=0.01),
                           measured_at=(10 + number, 11 + number))

    base = TrialRecord(0, "complete", (100.0, 100.0), TrialConfig(batch_size=2),
                       role="baseline", window=WindowStats(precision=0.01), measured_at=(0, 1))
    fast = TrialRecord(1, "complete", (150.0, 50.0), TrialConfig(batch_size=1),
                       window=WindowStats(precision=0.01), measured_at=(1, 2))
    trials = [base, fast, rec(2, 100, 0, 0, "fail"), rec(3, 160, 0, 1),
              rec(4, 90, 1, 0, "fail"), rec(5, 150, 1, 1)]
    row = next(r for r in front_rows(trials, 0, None) if r.trial == 1)
    assert row.confirmation == \
        "unconfirmed: no round of it had the baseline measured beside it", row.marks


@pytest.mark.slow
def test_a_real_confirmation_measures_each_candidate_in_its_own_process(tmp_path):
    """A real search's confirmation: rounds interleaved by their timestamps, each
    measurement its own forked process, and the front's figures the confirmed ones."""
    proc = cli("search", "--dataset", "synthetic", "--scale", "0.004", "--steps", "3",
               "--warmup", "1", "--warmup-time", "0", "--max-seconds", "0.5", "--space", "quick",
               "--n-trials", "4",
               "--root", str(tmp_path / "data"), "--studies-dir", str(tmp_path / "studies"),
               "--study-name", "c", "--confirm", "1", "--no-racing", "--confirm-by", "rounds",
               "--confirm-precision", "50%")
    assert proc.returncode == 0, proc.stderr
    # 3 rounds, or FAR_ROUNDS where the fast end reads FAR_AHEAD of a baseline whose two
    # loader workers other tests slowed (31,144 against 12,262 once, in a full suite)
    rounds = {3, confirm_module.FAR_ROUNDS}
    assert any(f"confirmation: {n} interleaved rounds of #0 (baseline)" in proc.stdout
               for n in rounds), proc.stdout
    study = optuna.load_study(study_name="c",
                              storage=f"sqlite:///{tmp_path / 'studies' / 'c.db'}")
    trials = records(study)
    every = sorted((t for t in trials if t.confirm is not None), key=lambda t: t.measured_at[0])
    # a measurement the machine disturbed is measured again in its round (DISTURBED_AGAIN):
    # the last one stands for it. (In a serial run: the suite's parallel workers set
    # AUTOTUNE_MAX_BUSY=1, under which no window is disturbed.)
    def key(t):
        return t.confirm["run"], t.confirm["round"], t.confirm["of"]

    last = {key(t): t for t in every}
    runs = sorted({t.confirm["run"] for t in every})  # 1, or more where the knee moved
    assert runs == list(range(len(runs))) and len(runs) <= 3
    for run in runs:
        rounds = [t for t in every if t.confirm["run"] == run
                  and last[key(t)] is t]
        per_round = len({t.confirm["of"] for t in rounds})
        numbers = [t.confirm["round"] for t in rounds]
        assert per_round >= 2 and numbers[:3 * per_round + 1] == \
            [r for r in range(3) for _ in range(per_round)] + [3]  # and the closing baseline
        # then up to EXTRA_ROUNDS more rounds of the candidates still too wide, each
        # closed by the baseline (the round after's opening)
        more, closes = rounds[3 * per_round + 1:], 0
        for t in more:
            if t.confirm["of"] == 0:  # closes the extra round before it
                closes += 1
                assert t.confirm["round"] == 3 + closes
            else:
                assert t.confirm["round"] == 3 + closes
        assert closes <= confirm_module.EXTRA_ROUNDS and rounds[-1].confirm["of"] == 0
    assert [t.confirm["run"] for t in every] == sorted(t.confirm["run"] for t in every)
    assert all(a.measured_at[1] <= b.measured_at[0] for a, b in zip(every, every[1:]))
    rounds = every
    pids = [t.observed.main_pid for t in rounds]
    assert len(set(pids)) == len(pids) and os.getpid() not in pids
    pareto = yaml.safe_load((tmp_path / "studies" / "c" / "pareto.yaml").read_text())
    figures = confirmed(trials)
    for row in pareto["front"]:
        if row["trial"] in figures:
            assert row["throughput"] == figures[row["trial"]].throughput
            assert 3 <= row["confirmed"]["rounds"] <= 3 + confirm_module.EXTRA_ROUNDS


def test_controls_and_confirmations_count_against_nothing():
    """(The bad --confirm, --confirm-rounds and --control-every values are in the
    bad-input catalogue, tests/test_bad_input.py.)"""
    done = TrialRecord(1, "complete", (1.0, 1.0))
    assert done.counts and done.search_point
    for other in (dataclasses.replace(done, role="control"),
                  dataclasses.replace(done, role="confirmation",
                                      confirm={"run": 0, "round": 0, "of": 0}),
                  dataclasses.replace(done, reused_from=0)):
        assert not other.counts and not other.on_front_candidate


def test_a_knee_that_moves_onto_an_unmeasured_config_is_confirmed_in_a_follow_up(
        tmp_path, monkeypatch):
    """The confirmation measures the fastest config (896) and the knee (640); 896's
    memory then reads 1,200 MiB instead of 700, which lets 768 (1.09x, 720 MiB) onto
    the front, as its knee. A follow-up confirmation measures 768 against the
    baseline, so the knee the export picks is confirmed; the first run's figures
    stay on the other rows. (768's search figure reads 0.95 of its pace, and this
    machine's pairs spread 1%, so the first run does not race it as a contender of
    896's.)"""
    _pairs_spread(tmp_path, 0.01)
    machine = FakeMachine(drift=0.0, grow={896: 1200.0}, boost={768: 0.95})
    result, trials, s = _search(tmp_path, monkeypatch, machine,
                                sizes=(1024, 896, 768, 640, 256), n_trials=5, confirm=1)
    by_size: dict[int, int] = {}
    for t in trials:
        if t.search_point and t.reused_from is None:
            by_size.setdefault(t.config.batch_size, t.number)
    study = optuna.load_study(study_name=result.study_name, storage=result._url)
    runs = study.user_attrs["confirmations"]
    assert [r["candidates"] for r in runs] == [
        [s.baseline, by_size[896], by_size[640]], [s.baseline, by_size[768]]], runs
    assert runs[1]["follow_up_of"] == 0
    knee = next(r for r in result.front if "knee" in r.marks)
    assert knee.trial == by_size[768] and "confirmed in 3 rounds" in " ".join(knee.marks)
    assert knee.speedup == pytest.approx(1.09)
    figures = confirmed(trials)
    assert figures[by_size[896]].memory_mib == 1200.0  # from the first run
    assert figures[by_size[640]].rounds == 3
    # only the leanest, neither fastest nor knee at any point, was never confirmed
    assert [r.trial for r in result.front if r.confirmation ==
            "unconfirmed: the confirmation did not measure it"] == [by_size[256]]


def test_a_follow_up_stopped_by_sigterm_names_the_pick_that_moved_when_resumed(
        tmp_path, monkeypatch):
    """The knee's follow-up above (768, after 896's memory grew), stopped by SIGTERM in
    its second measurement: run again, the search resumes that run, announced as
    what it is, the knee that moved, not as a bare "resumed", and confirms 768."""
    _pairs_spread(tmp_path, 0.01)
    machine = FakeMachine(drift=0.0, grow={896: 1200.0}, boost={768: 0.95})
    search = functools.partial(_search, tmp_path, monkeypatch, sizes=(1024, 896, 768, 640, 256),
                               n_trials=5, confirm=1, study_name="k")
    before: list[str] = []
    _stopped_by_sigterm(functools.partial(search, lines=before), machine, "confirm-1-", 2)
    after: list[str] = []
    result, trials, s = search(machine, lines=after)
    knee = next(r for r in result.front if "knee" in r.marks)
    announced = [line for line in before + after if line.startswith("confirmation:")]
    assert len(announced) == 3, announced
    moved = f"the knee moved to #{knee.trial}, which the confirmation did not measure: "
    assert announced[1].startswith(f"confirmation: {moved}"), announced
    assert announced[2].startswith(f"confirmation: resumed where it was stopped: {moved}"), \
        announced
    assert [r["state"] for r in s.confirmations] == ["done", "done"]
    assert knee.trial == s.confirmations[1]["knee"] and "confirmed in 3 rounds" in \
        " ".join(knee.marks)


def _stopped_by_sigterm(search: Callable, machine, marker: str, at: int) -> None:
    """``search(run_trial)`` on ``machine`` with SIGTERM sent (the command's handler
    installed: it raises, as for Ctrl-C) during the ``at``-th measurement whose trial
    directory names ``marker``; the search must end by it."""
    import signal

    from autotune.cli._main import Terminated, _terminated

    seen = [0]

    def stops(config, **kw):
        if marker in str(kw.get("trial_dir", "")):
            seen[0] += 1
            if seen[0] == at:
                os.kill(os.getpid(), signal.SIGTERM)
        return machine(config, **kw)

    outer = signal.signal(signal.SIGTERM, _terminated)
    try:
        with pytest.raises(Terminated):
            search(stops)
    finally:
        signal.signal(signal.SIGTERM, outer)


def _pairs_spread(tmp_path, spread: float) -> None:
    """Gives the machine's record in ``tmp_path/studies`` quiet 0.5-s pairs whose ratio
    spreads ``spread`` (a log standard deviation), known to 30 degrees of freedom."""
    import time

    from autotune.study import _window_length as lengths

    lengths.record(lengths.history_path(tmp_path / "studies"), {
        "window_s": 0.5, "busy": False, "at": time.time(), "dof": 30,
        "squares": 30 * spread ** 2, "pair_s": 1.5})


def _a_faster_768_read_low(tmp_path, monkeypatch, reads: float, wrap=None, **fake):
    """A search of batch sizes 1024, 896, 768 and 640 (confirming one config) where 768
    is truly 1.15x (1,150 seed nodes/s at 720 MiB) but its search window reads
    ``reads`` of that; ``wrap``: what the search measures through, given the fake
    machine; ``fake``: the fake machine's other arguments. Its result, trials,
    study record, trials by batch size, and the confirmation's candidates."""
    monkeypatch.setitem(TRUE, 768, (1150.0, 720.0))
    machine = FakeMachine(drift=0.0, boost={768: reads}, **fake)
    result, trials, s = _search(tmp_path, monkeypatch, wrap(machine) if wrap else machine,
                                sizes=(1024, 896, 768, 640), n_trials=4, confirm=1)
    by_size = {t.config.batch_size: t.number for t in trials
               if t.search_point and t.reused_from is None and not t.baseline}
    study = optuna.load_study(study_name=result.study_name, storage=result._url)
    return result, trials, s, by_size, study.user_attrs["confirmations"][0]["candidates"]


def test_a_config_the_search_could_not_tell_from_the_fastest_is_raced_too(
        tmp_path, monkeypatch):
    """768 is truly 1.15x, but its search figure reads 0.95 of that (1,092 at 720 MiB),
    so 896 (1,100 at 700 MiB) dominates it, by less than their intervals. The
    confirmation races it beside the front (a quick start on the EPYC with
    avx512_bf16 once left bfloat16 out so, and defaulted to float32 under it); its
    pairs find it faster, so it is the default, confirmed, and 640 (850), whose
    interval lies below, is not measured again."""
    from autotune.study._confirm import off_front

    result, trials, s, by_size, first = _a_faster_768_read_low(tmp_path, monkeypatch, 0.95)
    study = optuna.load_study(study_name=result.study_name, storage=result._url)
    assert by_size[768] in first and first[:2] == [s.baseline, by_size[896]], first
    # a paired confirmation's time, when short, goes to it only as the fastest
    assert off_front(study, trials, first) == (first.index(by_size[768]) - 1,)
    default = next(r for r in result.front if r.default)
    assert default.trial == by_size[768], result.front
    assert default.speedup == pytest.approx(1.15)
    assert default.confirmation.startswith("confirmed"), default.marks
    assert by_size[640] not in first or any("knee" in r.marks and r.trial == by_size[640]
                                            for r in result.front)  # only as the knee


def test_a_config_screened_out_on_a_window_that_read_low_is_raced_too(tmp_path, monkeypatch):
    """768 is truly 1.15x, but its one window reads 0.85 of that, ±12% (977 at 720
    MiB): its best case (1,095) is dominated by 896 (1,100 at 700 MiB), so racing
    screened it out there. Its interval still reaches the fastest's, so the
    confirmation measures it (an AMX Xeon's quick start once screened out its
    bfloat16 default so, and confirmed a config 30% slower); its pairs find it
    faster, and it is the default, confirmed, on the front."""
    def screening(machine: FakeMachine) -> Callable[..., TrialResult]:
        def measure(config: TrialConfig, **kw) -> TrialResult:
            result = machine(config, **kw)
            if config.batch_size == 768 and [c[0] for c in machine.calls].count(768) == 1:
                return dataclasses.replace(result, window=dataclasses.replace(
                    result.window, precision=0.12, stopped="screened"))
            return result
        return measure
    result, trials, s, by_size, first = _a_faster_768_read_low(tmp_path, monkeypatch, 0.85,
                                                              screening)
    screened = next(t for t in trials if t.search_point and t.config.batch_size == 768)
    assert screened.screened and screened.number not in {
        r.trial for r in front_rows([t for t in trials if t.search_point], s.baseline,
                                    None)}  # off the search's own front
    assert screened.number in first
    default = next(r for r in result.front if r.default)
    assert default.trial == screened.number, result.front
    assert default.speedup == pytest.approx(1.15)
    assert default.confirmation.startswith("confirmed"), default.marks
    exported = yaml.safe_load(result.export(tmp_path / "best.yaml").read_text())
    assert exported["measured"]["trial"] == screened.number
    assert exported["config"]["batch_size"] == 768


def test_a_config_measured_only_on_a_busy_machine_is_raced_against_the_quiet_front(
        tmp_path, monkeypatch):
    """768 is truly 1.15x, but another process took half the cores through both of
    its search windows (the second with passive threads), which read half its rate
    (575 at 720 MiB, DISTURBED), while every other trial found the machine quiet. A
    window the machine slowed says nothing against quiet ones, however narrow both
    intervals and this machine's pairs (1% here): the disturbed windows are compared
    among themselves, 768 leads them, and the confirmation races it; its quiet
    measurements find it faster, so it is the default, confirmed. (A quick start on a
    Xeon whose hypervisor took a third of its cores in the search's first half
    defaulted to a config 30% slower, never confirming the faster one it had
    measured then.)"""
    _pairs_spread(tmp_path, 0.01)
    result, trials, s, by_size, first = _a_faster_768_read_low(
        tmp_path, monkeypatch, 1.0, busy=lambda config, nth: config.batch_size == 768 and
        nth <= 2, slowed=0.5)
    slowed = next(t for t in trials if t.number == by_size[768])
    assert slowed.disturbed and slowed.throughput == pytest.approx(575.0)
    assert [t.number for t in trials if t.disturbed and t.reused_from is None] == [slowed.number]
    assert by_size[768] in first, first
    default = next(r for r in result.front if r.default)
    assert default.trial == by_size[768], result.front
    assert default.speedup == pytest.approx(1.15)
    assert default.confirmation.startswith("confirmed"), default.marks


@pytest.mark.parametrize("spread", [0.01, 0.1, None])
def test_how_far_this_machines_windows_vary_widens_what_the_search_could_not_tell_apart(
        tmp_path, monkeypatch, spread):
    """768 is truly 1.15x, but its window reads 0.80 of that, ±1.5% (920 at 720 MiB,
    against 896's 1,100 at 700): the two windows' own intervals tell them apart. On
    a machine whose record holds pairs that spread 0.1 (the ratio of two windows side
    by side varies that much), they do not: 768 is raced, found faster, and is the
    default; so too on one with no record yet (its spread is guessed at
    ``UNKNOWN_SPREAD``). On a machine whose pairs spread 0.01 it is left out, and
    896 is the default."""
    if spread is not None:
        _pairs_spread(tmp_path, spread)
    result, _, _, by_size, first = _a_faster_768_read_low(tmp_path, monkeypatch, 0.80)
    default = next(r for r in result.front if r.default)
    raced = spread != 0.01
    assert (by_size[768] in first) == raced
    assert default.trial == by_size[768 if raced else 896], result.front
    assert default.confirmation.startswith("confirmed"), default.marks


SMALL = (896, 768, 640, 512)  # leaves out the baseline's batch size, 1024


@pytest.mark.parametrize("sampler", ["tpe", "nsga2"])
def test_the_search_stays_in_the_space_the_user_wrote(tmp_path, monkeypatch, sampler):
    """A space without the baseline's batch size and fanout: the baseline is measured
    (without params: Optuna's distributions stay the space's) and every ratio is taken
    against it, but no proposed trial, prior row, front row or export lies outside the
    space; the baseline is the front's reference row, marked outside it."""
    notes: list[str] = []
    result, trials, s = _search(tmp_path, monkeypatch, FakeMachine(drift=0.0), sizes=SMALL,
                                fanouts=((10, 5),), n_trials=9, confirm=2, optuna_sampler=sampler,
                                priors=True, control_every_trials=3, notes=notes)
    study = optuna.load_study(study_name=result.study_name, storage=result._url)
    base = trials[s.baseline]
    assert base.complete and base.config.batch_size == 1024
    assert base.outside_space == {"batch_size": 1024, "num_neighbors": [25, 10]}
    assert study.trials[s.baseline].params == {}
    assert any("outside this space" in n and "never proposed" in n for n in notes)
    references = [t for t in trials if t.config and t.config.batch_size == 1024]
    assert all(t.baseline or t.control or (t.confirm or {}).get("of") == s.baseline
               for t in references), "only the baseline's measurements are outside"
    assert len(references) >= 3  # the baseline, controls, its confirmation rounds
    searched = [t for t in trials if t not in references]
    assert len(searched) >= 8
    for t in study.trials:
        if t.number not in {r.number for r in references}:
            assert t.params["batch_size"] in SMALL and t.params["num_neighbors"] == "10,5"
            assert t.distributions["batch_size"].choices == SMALL
    assert result.front and all(r.config["batch_size"] in SMALL and
                                tuple(r.config["num_neighbors"]) == (10, 5)
                                for r in result.front)
    assert result.reference is not None and result.reference.trial == s.baseline
    assert "outside the space: batch_size 1024, num_neighbors [25, 10]" in \
        result.reference.marks[0]
    assert all(r.speedup is not None for r in result.front)  # against the baseline
    for pick in ("default", "knee", "max-throughput", "min-memory"):
        exported = yaml.safe_load(result.export(tmp_path / f"{pick}.yaml", pick=pick)
                                  .read_text())
        assert exported["config"]["batch_size"] in SMALL, pick
    assert result.default.config.batch_size == 896  # truly 1.10x: the space's fastest


def test_a_study_made_with_a_widened_space_resumes_in_it(tmp_path, monkeypatch):
    """A study made before autotune kept to the space written: its space was widened
    to hold the baseline, whose trial has params. Resumed, it goes on in that space
    (Optuna's distributions cannot change), with a note saying so."""
    from autotune.study._space import params_for
    from autotune.study import _api as api, _search as search_module

    real = api._space_and_baseline

    def widened(*args, **kwargs):  # how a study was made before
        space, baseline = real(*args, **kwargs)
        return space.widened(), baseline

    def with_params(search):  # how a study was made before
        search.study.enqueue_trial(params_for(search.baseline, search.opts.space),
                                   user_attrs={"baseline": True})

    with monkeypatch.context() as old:
        old.setattr(api, "_space_and_baseline", widened)
        old.setattr(search_module.Search, "enqueue_baseline", with_params)
        first, trials, s = _search(tmp_path, monkeypatch, FakeMachine(drift=0.0), sizes=SMALL,
                                   n_trials=4, confirm=0, optuna_sampler="tpe")
    assert trials[s.baseline].complete and trials[s.baseline].in_space
    notes: list[str] = []
    result, trials, s = _search(tmp_path, monkeypatch, FakeMachine(drift=0.0), sizes=SMALL,
                                n_trials=8, confirm=0, optuna_sampler="tpe", notes=notes)
    assert result.study_name == first.study_name
    assert any("was made before autotune kept to the space written" in n and
               "batch_size 1024" in n for n in notes), notes
    assert all(t.state == "complete" for t in trials)
    # its space is the written one plus the baseline's batch size: 5 configs, all measured
    assert result.outcome.stopped == ("stopped early: the space is exhausted: all 5 of its "
                                      "configs are measured")
    assert sum(t.counts for t in trials) == 5


def test_exporting_a_study_that_measured_only_the_outside_baseline_says_so(tmp_path,
                                                                            monkeypatch):
    from autotune.errors import ConfigError

    result, trials, s = _search(tmp_path, monkeypatch, FakeMachine(drift=0.0), sizes=SMALL,
                                n_trials=1, confirm=0)
    assert [t.baseline for t in trials] == [True] and not result.front
    with pytest.raises(ConfigError, match=r"only completed trial is its baseline \(#0\), "
                                          r"which lies outside the space searched"):
        result.export(tmp_path / "best.yaml")
    exported = yaml.safe_load(result.export(tmp_path / "base.yaml", pick="trial:0").read_text())
    assert exported["config"]["batch_size"] == 1024


def test_a_search_stopped_by_sigterm_in_its_confirmation_finishes_it_when_run_again(
        tmp_path, monkeypatch):
    """SIGTERM (the command's handler raises, as for Ctrl-C) arrives during the
    confirmation's fifth measurement: the run is left unfinished, the interrupt says
    the confirmation was stopped, not that a trial is queued again; the same search
    run again goes on with the same confirmation run, measuring only what it had not,
    and finishes it: every candidate has its confirmed figures."""
    from autotune.study import interrupted_note
    from autotune.study._confirm import unfinished

    machine = FakeMachine(drift=0.0)
    _stopped_by_sigterm(lambda run_trial: _search(
        tmp_path, monkeypatch, run_trial, sizes=[640, 896, 1024], n_trials=3, confirm=2,
        study_name="s"), machine, "confirm-", 5)
    study = optuna.load_study(study_name="s",
                              storage=f"sqlite:///{tmp_path / 'studies' / 's.db'}")
    stopped = unfinished(study)
    assert stopped is not None and stopped["run"] == 0
    assert interrupted_note(study).startswith(
        "the confirmation was stopped after 4 of its measurements")
    before = [t.number for t in records(study) if t.confirm is not None]
    assert len(before) == 4
    result, trials, s = _search(tmp_path, monkeypatch, machine, sizes=[640, 896, 1024],
                                n_trials=3, confirm=2, study_name="s")
    assert result.outcome.confirmed > 0 and [r["state"] for r in s.confirmations] == ["done"]
    rounds = [(t.confirm["round"], t.confirm["of"]) for t in trials if t.confirm is not None]
    assert len(rounds) == len(set(rounds)), "a measurement taken twice"
    figures = confirmed(trials)
    asked = s.confirmations[0]["candidates"][1:]
    assert asked and all(figures[n].rounds == 3 for n in asked), figures


def test_rounds_that_vary_between_processes_get_shorter_windows_from_the_third_round(
        tmp_path, monkeypatch):
    """896's rounds disagree by ±10% (between processes), far more than its ±1.5%
    windows explain: from the third round on every config is measured to a looser
    precision, as long a window as the rounds' spread pays for (Kalibera and Jones);
    where the rounds agree, the windows stay at the search's precision."""
    def precisions(jitter):
        asked = []
        machine = FakeMachine(drift=0.0, jitter=jitter)

        def run_trial(config, **kw):
            if "confirm-" in str(kw.get("trial_dir", "")):
                asked.append((int(str(kw["trial_dir"]).split("-")[-2]), kw["measure"].precision))
            return machine(config, **kw)

        _search(tmp_path / str(len(jitter)), monkeypatch, run_trial, sizes=[640, 896, 1024],
                n_trials=3, confirm=2, precision=0.03)
        return asked

    varied = precisions({896: [1.0, 0.9, 1.1, 1.0, 0.95, 1.05, 1.0, 1.0, 1.0, 1.0]})
    assert {p for r, p in varied if r < 2} == {0.03}
    assert varied and all(p > 0.05 for r, p in varied if r >= 2), varied
    steady = precisions({})
    assert {p for _, p in steady} == {0.03}, steady


def test_the_confirmation_goes_on_only_for_candidates_that_could_still_be_confirmed():
    """After the rounds asked: a candidate within the precision is done; one whose
    interval lies wholly under another's is dropped (racing: it cannot be the
    fastest); one whose rounds disagree too much to narrow by the last round is
    done too; a wide one that could still get there goes on."""
    from autotune.study._confirm import still_open
    from autotune.study._paired import Confirmed

    def figure(number, speedup, low, high):
        half = max(high / speedup - 1, 1 - low / speedup)
        return Confirmed(number, 3, speedup, half, 100.0, None, 100.0, (speedup,) * 3,
                         (number,), low=low, high=high)

    figures = {1: figure(1, 1.50, 1.45, 1.55),   # precise
               2: figure(2, 1.00, 0.85, 1.18),   # wide, but under #1: dropped
               3: figure(3, 1.45, 1.25, 1.70),   # wide, overlaps #1, could narrow
               4: figure(4, 1.40, 0.60, 3.20)}   # rounds far apart: would not narrow
    assert still_open(figures, [1, 2, 3, 4], within=0.10, last=8) == [3]


def test_a_guard_training_of_its_own_gets_the_trials_environment(tmp_path, monkeypatch):
    """The accuracy guard's trainings in a process of their own (the baseline's
    reference, a config whose trial did not train it) run with the environment the
    search gives its trials (OMP_WAIT_POLICY=PASSIVE on a machine busy before it)."""
    from types import SimpleNamespace

    from autotune.specs import GuardOptions
    from autotune.study import _guard

    envs = []

    class Asked(Exception):
        pass

    def child(config, **kw):
        envs.append(kw.get("env"))
        raise Asked

    monkeypatch.setattr(_guard, "run_trial", child)
    monkeypatch.setattr(_guard, "measurement_lock",
                        lambda device, who: contextlib.nullcontext(0.0))
    opts = SimpleNamespace(study_dir=tmp_path, device="cpu", study_name="s", dataset=None,
                           limits=None, studies_dir=tmp_path)
    passive = {"OMP_WAIT_POLICY": "PASSIVE"}
    config = TrialConfig(batch_size=64)
    with pytest.raises(Asked):
        _guard.reference(opts, 0, config, GuardOptions(), passive)
    with pytest.raises(Asked):
        _guard.check(opts, 1, config, GuardOptions(), {"budget_s": 1.0}, passive)
    assert envs == [passive, passive]
