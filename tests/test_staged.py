"""Fast, trustworthy search: trials forked from a fork server, adaptive windows to a
stated precision, racing, the prior table, compile after its eager twin, --budget."""
from __future__ import annotations

import itertools
import platform
import random
import statistics
import time
from types import SimpleNamespace

import optuna
import pytest
from _helpers import cli

from autotune.config import TrialConfig
from autotune.trial._window import _window
from autotune.specs import MeasureSpec, Screen
from autotune.trial import WindowStats, rate_half_width

FAST = ["--dataset", "synthetic", "--scale", "0.004", "--steps", "3", "--warmup", "1",
        "--warmup-time", "0",
        "--max-seconds", "0.5", "--space", "quick", "--confirm", "0"]


class _FakeStepper:
    """Steps that sleep: ``delays()`` gives each step's seconds; every batch has 100
    seeds."""

    def __init__(self, delays, workers: int = 0) -> None:
        self.delays = delays
        import torch

        from autotune.pipeline._tasks import NodeTask

        self.pipe = SimpleNamespace(config=SimpleNamespace(num_workers=workers),
                                    device=torch.device("cpu"), task=NodeTask())
        self.batch = SimpleNamespace(batch_size=100, num_nodes=1000, num_edges=5000,
                                     edge_index=SimpleNamespace(size=lambda dim: 5000))

    def run(self):
        import torch

        time.sleep(self.delays())
        return self.batch, torch.tensor(1.0)


def test_half_width_of_a_rate():
    assert rate_half_width([[100, 1.0]]) is None
    assert rate_half_width([[100, 1.0]] * 5) == 0.0
    # two blocks at rates 90 and 110: rate 100, residuals +-10, so a sample standard
    # deviation of 10 * sqrt(2), a standard error of 10, and t(1 df) = 12.7062 (scipy)
    assert rate_half_width([[90, 1.0], [110, 1.0]]) == pytest.approx(12.7062 * 10 / 100)
    # blocks of unequal length: the ratio estimator weighs by time, not by block
    assert rate_half_width([[100, 1.0], [300, 3.0], [200, 2.0]]) == 0.0


@pytest.mark.exclusive
def test_a_steady_workload_stops_early_at_its_precision():
    spec = MeasureSpec(min_steps=10, min_window_s=0.2, max_window_s=10.0, precision=0.05)
    window = _window(_FakeStepper(lambda: 0.004), spec, [0.004] * 3, lambda: 0.0)
    stats = window.stats
    assert stats.stopped == "precise" and not stats.imprecise
    assert stats.precision <= 0.05 and stats.target == 0.05
    assert len(stats.blocks) >= 4 and len(window.times) >= 10
    assert 0.2 <= stats.wall_s < 3.0, "a steady workload must not run to --max-seconds"


@pytest.mark.exclusive
def test_a_jittery_workload_runs_to_max_seconds_flagged_imprecise():
    rng = random.Random(0)
    spec = MeasureSpec(min_steps=10, min_window_s=0.2, max_window_s=1.0, precision=0.01)
    window = _window(_FakeStepper(lambda: rng.choice([0.001, 0.001, 0.001, 0.04])), spec,
                     [0.01] * 3, lambda: 0.0)
    stats = window.stats
    assert stats.stopped == "max-seconds" and stats.imprecise
    assert stats.precision > 0.01
    assert 1.0 <= stats.wall_s < 1.2
    # the throughput's denominator is the window's wall time, over every step
    assert stats.wall_s >= sum(window.times)


@pytest.mark.parametrize("step_s, warmup_s, steps", [(0.1, 0.55, 6), (0.1, 0.0, 3),
                                                     (0.5, 0.55, 3), (0.001, 2.0, 60)])
def test_the_warm_up_runs_its_seconds_too(step_s, warmup_s, steps):
    """A bfloat16 config of 65 ms steps ran its first 30 steps 5-10% slower than its
    next 170 (oneDNN's kernels for new batch shapes, the heap's growth): 5 steps of
    warm-up put those in the window. The warm-up runs ``min_warmup_s`` too, up to
    ``max_warmup_steps``; steps here take ``step_s`` as the clock reads them."""
    from autotune.trial._window import GraphRecordings, _warm_up

    stepper = SimpleNamespace(pipe=SimpleNamespace(task=SimpleNamespace(seeds=lambda b: 1)),
                              step=lambda: (step_s, None, None))
    spec = MeasureSpec(warmup_steps=3, min_warmup_s=warmup_s, max_warmup_steps=60)
    with GraphRecordings() as graphs:
        times, _, _ = _warm_up(stepper, spec, False, graphs)
    assert len(times) == steps


def test_the_warm_up_lasts_until_no_cuda_graph_is_recorded():
    """reduce-overhead's cudagraph trees record a shape's graph at its second call, not
    at its compile: a warm-up that watched recompiles alone let recordings fall into
    the window. The steps here record as torch records (the callback handler with
    the CUDAGRAPH_RECORDING trigger); the real recordings are counted by the cuda
    test in test_pipeline.py."""
    from torch._dynamo.callback import CallbackTrigger, callback_handler

    from autotune.trial._window import GraphRecordings, _warm_up

    def record(trigger=CallbackTrigger.CUDAGRAPH_RECORDING):
        with callback_handler.install_callbacks(trigger, "0/0"):
            pass

    class Stepper:
        count = 0
        pipe = SimpleNamespace(task=SimpleNamespace(seeds=lambda batch: 1))

        def step(self):
            self.count += 1
            if self.count in (1, 3, 6):  # steps whose batch shape records a graph
                record()
            return 0.001, None, None

    spec = MeasureSpec(warmup_steps=3, min_warmup_s=0.0, settle_steps=3,
                       max_warmup_steps=60)
    with GraphRecordings() as graphs:
        times, _, fastest = _warm_up(Stepper(), spec, True, graphs)
        assert fastest == pytest.approx(1 / 0.001)  # a seed a step, a step a millisecond
        assert graphs.count == 3 and len(times) == 9  # 7, 8 and 9 recorded nothing
        record(CallbackTrigger.DYNAMO)  # a compile is not a recording
        assert graphs.count == 3
    record()
    assert graphs.count == 3, "counted after the measurement ended"
    assert graphs._on_start not in callback_handler.start_callbacks


@pytest.mark.exclusive
def test_racing_screens_out_a_config_whose_best_case_is_dominated():
    spec = MeasureSpec(min_steps=10, min_window_s=0.2, max_window_s=10.0, precision=0.01,
                       screen=Screen(precision=0.2, front=((1e9, 1.0),)))
    window = _window(_FakeStepper(lambda: 0.004), spec, [0.004] * 3, lambda: 50.0)
    assert window.stats.stopped == "screened" and window.stats.screened
    assert window.stats.precision <= 0.2 and window.stats.screen_precision == 0.2
    # the same config, with a front it could join, is refined to full precision
    spec = MeasureSpec(min_steps=10, min_window_s=0.2, max_window_s=10.0, precision=0.03,
                       screen=Screen(precision=0.2, front=((1.0, 1.0),)))
    window = _window(_FakeStepper(lambda: 0.004), spec, [0.004] * 3, lambda: 50.0)
    assert window.stats.stopped == "precise" and window.stats.precision <= 0.03


def test_screen_bounds():
    screen = Screen(precision=0.1, front=((1000.0, 100.0),), budget_mib=500.0)
    assert screen.rules_out(900.0, 0.05, 200.0)  # best case 945 < 1000 at more memory
    assert not screen.rules_out(900.0, 0.2, 200.0)  # best case 1080 could join
    assert not screen.rules_out(900.0, 0.05, 50.0)  # leaner than the front
    assert screen.rules_out(5000.0, 0.05, 600.0)  # over the memory budget
    # memory counts against the device, not the spread between trials: far below
    # the best that fits is out, however lean (the H100's CPU-sampling trials)
    screen = Screen(front=((28_000.0, 6348.0),), best=28_000.0)
    assert screen.rules_out(7_000.0, 0.05, 4220.0) and screen.hopeless(9_000.0)
    assert not screen.hopeless(9_500.0) and not screen.rules_out(9_000.0, 0.05, 4220.0)
    assert not Screen(front=((28_000.0, 6348.0),)).hopeless(1.0)  # no best known yet


@pytest.mark.exclusive
def test_a_dominated_config_stops_before_its_screening_precision():
    """Racing drops a loser as soon as it shows: a noisy window (blocks some ±30%
    apart) whose best case could not join the front stops at its fourth block, its
    interval still far wider than the screening precision; the same window with a
    front it could join goes on past it."""
    def window(front):
        draws = random.Random(0)
        spec = MeasureSpec(min_steps=10, min_window_s=0.2, max_window_s=3.0,
                           precision=0.01, screen=Screen(precision=0.05, front=front))
        return _window(_FakeStepper(lambda: draws.choice([0.001, 0.002, 0.009])), spec,
                       [0.004] * 3, lambda: 50.0).stats

    rate = 100 / 0.004  # seeds/s of the fake steps, about
    stats = window(front=((5 * rate, 10.0),))  # five times as fast, a fifth the memory
    assert stats.stopped == "screened" and stats.screened_by == "front", stats
    assert len(stats.blocks) == 4 and stats.precision > 0.05, stats
    stats = window(front=((rate / 5, 10.0),))
    assert stats.screened_by != "front" and len(stats.blocks) > 4, stats


def test_far_below_the_best_stops_at_the_first_block():
    """A config whose fastest warm-up step is under a third of the best stops at its
    first block, not at a precision; one that shows it only in the window stops at
    the block that shows it; a config near the best is measured as before."""
    def window(best, warm_rate, min_window_s=5.0, max_window_s=30.0):
        spec = MeasureSpec(min_steps=10, min_window_s=min_window_s, max_window_s=max_window_s,
                           precision=0.01, screen=Screen(precision=0.1, best=best))
        return _window(_FakeStepper(lambda: 0.002), spec, [0.002] * 3, lambda: 50.0,
                       warm_rate).stats

    rate = 100 / 0.002  # seeds/s of the fake steps
    stats = window(best=10 * rate, warm_rate=rate)
    assert stats.stopped == "screened" and stats.screened_by == "warm-up"
    assert len(stats.blocks) == 1 and stats.wall_s < 1.0
    stats = window(best=10 * rate, warm_rate=0.0)  # nothing known from the warm-up
    assert stats.screened_by == "window" and len(stats.blocks) == 1
    # near the best: a block under a third of it needs sleeps 2.5x long (at 1.5x the
    # rate, 2x long ones cut it once in a whole suite's run); measured for 2 s at most
    # (sleeps of 2 ms rarely reach the 1% asked: it would run to 30 s)
    stats = window(best=1.2 * rate, warm_rate=rate, min_window_s=0.2, max_window_s=2.0)
    assert stats.stopped != "screened" and len(stats.blocks) >= 4


@pytest.mark.exclusive
def test_a_bursty_config_far_below_the_best_stops_within_seconds():
    """A prefetching loader delivers in bursts, so single blocks run fast while the
    rate does not (the H200's b4096 f[5, 5] w7 trial: 6.6x against a best of 26x,
    cut only by the front rule after a 38.7 s window). The rate's upper bound shows
    it within a few blocks. (Exclusive: beside other tests, the 0.1-ms sleeps of a
    burst wake late and the fastest block falls under a third of the best, so the
    premise fails: 15,393 seeds/s in a 3-worker run on a 2-core Xeon.)"""
    cycle = itertools.cycle([0.0001] * 6 + [0.03])  # a burst of 6, then a wait
    spec = MeasureSpec(min_steps=10, min_window_s=5.0, max_window_s=30.0, precision=0.01,
                       screen=Screen(precision=0.1, best=80_000.0))
    stats = _window(_FakeStepper(lambda: next(cycle), workers=7), spec, [0.004] * 3,
                    lambda: 50.0).stats
    fastest = max(seeds / seconds for seeds, seconds in stats.blocks)
    assert fastest > 80_000.0 / 3  # the fastest block alone never shows it
    assert stats.stopped == "screened" and stats.screened_by == "window"
    assert stats.wall_s < 2.5


def _record(number, throughput, memory, stopped="precise", config=None, **kw):
    from autotune.study import TrialRecord

    return TrialRecord(number, state="complete", values=(throughput, memory),
                       config=config or TrialConfig(batch_size=number + 1),
                       window=WindowStats(stopped=stopped, precision=0.02), **kw)


def test_a_screened_trial_never_reaches_the_front():
    from autotune.study._front import front_rows

    trials = [_record(0, 100.0, 50.0, role="baseline"), _record(1, 300.0, 40.0, "screened"),
              _record(2, 200.0, 60.0), _record(3, 200.0, 60.0, reused_from=2)]
    rows = front_rows(trials, 0, None)
    # the screened trial dominates but must not show; the repeat shares #2's measurement
    assert {r.trial for r in rows} == {0, 2}
    assert rows[0].speedup == pytest.approx(2.0)
    assert rows[0].speedup_precision == pytest.approx((2 * 0.02 ** 2) ** 0.5)


def test_payback_epochs_of_a_compiled_config():
    from autotune.config import TrialConfig
    from autotune.trial import CompileStats
    from autotune.study._front import payback_epochs

    eager = TrialConfig(batch_size=512)
    compiled = eager.replace(compile_mode="default")
    trials = [_record(0, 1000.0, 50.0, config=eager),
              _record(1, 2000.0, 60.0, config=compiled,
                      compile=CompileStats(compiled=True, compile_time_s=10.0))]
    # an epoch of 10,000 seeds: 10 s eager, 5 s compiled, so 10 s of compile = 2 epochs
    assert payback_epochs(trials[1], trials, 10_000) == pytest.approx(2.0)
    assert payback_epochs(trials[0], trials, 10_000) is None
    slower = [trials[0], _record(1, 900.0, 60.0, config=compiled)]
    assert payback_epochs(slower[1], slower, 10_000) == float("inf")


@pytest.mark.parametrize("machine, expected", [
    (("cuda", 16, frozenset()), ["gpu-resident-bf16", "gpu-resident", "in-process-sampling",
                                 "workers-on-free-cores"]),
    (("cpu", 2, frozenset({"avx512_bf16"})), ["in-process-sampling", "bf16",
                                              "sparse-aggregation", "bits-dropout",
                                              "workers-on-free-cores"]),
    (("cpu", 2, frozenset({"avx512_vnni"})), ["in-process-sampling", "sparse-aggregation",
                                              "bits-dropout", "workers-on-free-cores"]),
    # avx512_bf16 where a linear layer ran slower under autocast (a Xeon without AMX)
    (("cpu", 2, frozenset({"avx512_bf16"}), 0.6), ["in-process-sampling",
                                                   "sparse-aggregation", "bits-dropout",
                                                   "workers-on-free-cores"]),
])
def test_priors_follow_the_device(machine, expected):
    from autotune.study._space import load_space
    from autotune.study import default_config
    from autotune.study._priors import Machine, prior_configs

    device = machine[0]
    base = default_config(device).replace(num_workers=machine[1])
    space = load_space("default", device=device, baseline=base, cores=machine[1])
    rows = prior_configs(space.baseline(base), space, Machine(*machine))
    names = [name for name, _ in rows]
    assert names == [n for n in expected if n != "workers-on-free-cores" or
                     machine[1] - 1 != base.num_workers]
    configs = dict(rows)
    if device == "cuda":
        assert configs["gpu-resident-bf16"].gpu_sampling
        assert configs["gpu-resident-bf16"].amp_dtype == "bfloat16"
        assert configs["gpu-resident-bf16"].num_workers == 0
    assert all(c.compile_mode == "none" for c in configs.values())
    if device == "cpu":
        assert configs["sparse-aggregation"].aggregation == "sparse"
        gcn = base.replace(model="gcn")
        gcn_space = load_space("default", device=device, baseline=gcn, facts={"model": "gcn"},
                               cores=machine[1])
        skipped = [n for n, _ in prior_configs(gcn_space.baseline(gcn), gcn_space,
                                                Machine(*machine))]
        assert "sparse-aggregation" not in skipped, "gcn refuses sparse aggregation"


def test_machine_facts_time_bfloat16_only_where_the_cpu_computes_it(monkeypatch):
    """The bf16 row's gain is the probe's, read only on a CPU whose flags compute
    bfloat16 (elsewhere the probe would time emulation, and costs its 0.1 s for
    nothing); on a GPU never."""
    from autotune.study import _priors

    def probe():
        calls.append(1)
        return 0.6

    calls: list = []
    monkeypatch.setattr(_priors, "bf16_matmul_gain", probe)
    monkeypatch.setattr(_priors, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    assert _priors.machine_facts("cpu").bf16_gain == 0.6 and calls == [1]
    assert _priors.machine_facts("cuda").bf16_gain == 1.0 and calls == [1]
    monkeypatch.setattr(_priors, "cpu_flags", lambda: frozenset({"avx2"}))
    assert _priors.machine_facts("cpu").bf16_gain == 1.0 and calls == [1]


@pytest.mark.parametrize("flags, gain, dtype", [
    (frozenset({"avx512_bf16"}), 1.4, "bfloat16"),
    (frozenset({"avx512_bf16"}), 0.6, "float32"),  # a Xeon without AMX computes it slower
    (frozenset({"avx2"}), 1.0, "float32")])
def test_the_fast_end_row_takes_the_least_work_and_the_rows_compute_changes(flags, gain,
                                                                           dtype):
    """The fast-end row: the fastest config with the fanout that samples fewest nodes a
    seed (not the first listed, nor the smallest first hop), no checkpointing, and
    the compute changes of the rows that apply here (bfloat16 only where the CPU has
    it and a linear layer ran faster under it); where sampling runs and the batch
    stay the fastest's; a change the space leaves out, or the model refuses, is not
    made."""
    from autotune.study._priors import Machine, fast_end, sampled_per_seed
    from autotune.study._space import in_space, load_space
    from autotune.config import TrialConfig

    space = load_space({"knobs": {"batch_size": {"choices": [512, 1024]},
                                  "num_neighbors": {"choices": [[15, 10], [4, 20], [5, 5]]},
                                  "num_workers": {"choices": [0, 1]},
                                  "amp_dtype": {"choices": ["float32", "bfloat16"]},
                                  "checkpointing": {"choices": [False, True]},
                                  "aggregation": {"choices": ["scatter", "sparse"]}}},
                       device="cpu", baseline=TrialConfig())
    fastest = TrialConfig(batch_size=512, num_neighbors=(15, 10), num_workers=1,
                          checkpointing=True)
    machine = Machine("cpu", 2, flags, gain)
    end = fast_end(fastest, space, machine)
    assert (end.num_neighbors, end.checkpointing, end.amp_dtype) == ((5, 5), False, dtype)
    assert (end.batch_size, end.num_workers) == (512, 1)
    assert end.aggregation == "sparse" and end.dropout_masks == "bernoulli"  # not in the space
    assert in_space(end, space)
    gcn = fast_end(fastest.replace(model="gcn"), space, machine)
    assert gcn.aggregation == "scatter", "gcn refuses sparse aggregation"
    assert sampled_per_seed((4, 20)) == 84 > sampled_per_seed((5, 5)) == 30
    assert sampled_per_seed((-1, 5)) == float("inf")


def test_a_compile_variant_waits_for_its_eager_twin(tmp_path):
    from autotune.config import TrialConfig
    from autotune.study._space import load_space, suggest_config
    from autotune.study import _records as rec
    from autotune.study._search import Search
    from autotune.study import SearchOptions

    space = load_space({"knobs": {"batch_size": {"choices": [64, 128]},
                                  "compile_mode": {"choices": ["none", "default"]},
                                  "shapes": {"choices": ["dynamic", "padded"]}}},
                       device="cpu", baseline=TrialConfig())
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=storage, directions=rec.DIRECTIONS)
    opts = SearchOptions(dataset=None, space=space, storage=storage, study_name="s",
                         studies_dir=tmp_path)
    study.enqueue_trial({"batch_size": 128, "compile_mode": "default", "shapes": "padded",
                         "pad_ladder": "pow2"})
    trial = study.ask()
    config = suggest_config(trial, space, device="cpu")
    search = Search(opts, study, TrialConfig())
    assert search.defer_compiled(trial, config)
    frozen = study.trials[trial.number]
    assert frozen.state.name == "PRUNED" and frozen.user_attrs[rec.DEFERRED]
    twin_trial = study.ask()  # the queue gives the eager twin first, then the variant
    twin = suggest_config(twin_trial, space, device="cpu")
    assert twin == config.replace(compile_mode="none", shapes="dynamic")
    assert not search.defer_compiled(twin_trial, twin)
    twin_trial.set_user_attr(rec.CONFIG_KEY, twin.key())
    study.tell(twin_trial, [100.0, 10.0])
    again = study.ask()
    assert suggest_config(again, space, device="cpu") == config
    assert not search.defer_compiled(again, config), "its twin is measured now"


@pytest.mark.exclusive
@pytest.mark.slow
def test_forked_trials_start_in_a_second_isolated_and_never_overlap(tmp_path):
    """After the first trial, a trial is ready to build within 1 s (median); each
    runs in a process no other trial ran in (the factory refuses a process that
    carries another's mark on torch); no process of the search (the fork server's
    imports, the previous trial) runs during a window, judged from timestamps."""
    import json

    import autotune

    result = autotune.search(dataset="synthetic", scale=0.004, space="quick", n_trials=4,
                             model="user_models:leaky", studies_dir=tmp_path / "studies",
                             root=str(tmp_path / "data"), priors=False, confirm=0,
                             measure=MeasureSpec(warmup_steps=1, min_warmup_s=0.0, min_steps=3,
                                                 min_window_s=0.2, max_window_s=0.5))
    measured = [t for t in result.trials if t.reused_from is None and t.state != "pruned"]
    assert all(t.complete for t in measured), [t.fail_reason for t in measured]
    assert all(t.observed.trial_start == "fork server" for t in measured)
    assert all("mmap_max=0" in t.observed.malloc for t in measured
               if platform.libc_ver()[0] == "glibc"), "the heap is held in forked trials too"
    pids = [t.observed.main_pid for t in measured]
    assert len(set(pids)) == len(pids), "a trial process was reused"
    startups = [t.phases_s["startup"] for t in measured[1:]]
    assert statistics.median(startups) <= 1.0, startups
    server = json.loads((tmp_path / "studies" / result.study_name / "forkserver.json")
                        .read_text())
    assert server["pid"] not in pids
    intervals = sorted((t.window.started_at, t.window.ended_at, t) for t in measured)
    assert server["import_done_at"] <= intervals[0][0], "the server imported during a window"
    for (_, _, before), (start, _, after) in zip(intervals, intervals[1:]):
        assert before.measured_at[1] <= start, (before.number, after.number)


@pytest.mark.slow
def test_budget_stops_the_search_within_one_trial(tmp_path):
    """(Not exclusive: a test beside it slows every trial alike, and the bound
    allows the longest trial it measured. On a 2-core EPYC with AVX2 only, two
    CPU-bound tests beside it stretched the first trial, the fork server's start
    with it, to 9 s: a 12-s budget may hold the baseline only there, so the test asks
    for the budget's stop, not for a count of trials.)"""
    common = [*FAST, "--root", str(tmp_path / "data"), "--studies-dir", str(tmp_path / "s")]
    started = time.monotonic()
    proc = cli("search", *common, "--study-name", "b", "--n-trials", "200", "--budget", "12s",
               "--max-seconds", "1")
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "stopped: --budget 0:12 has " in proc.stdout, proc.stdout
    study = optuna.load_study(study_name="b", storage=f"sqlite:///{tmp_path / 's' / 'b.db'}")
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert 1 <= len(done) < 200
    longest = max(t.user_attrs["measured_at"][1] - t.user_attrs["measured_at"][0] for t in done)
    assert wall <= 12 + longest + 15, (wall, longest)  # + the CLI's own start and finish
    # a budget shorter than one trial fails that trial cleanly: counted against nothing,
    # no trial left waiting (the next run queues the baseline again), and said: exit 1
    proc = cli("search", *common, "--study-name", "c", "--n-trials", "3", "--budget", "3s",
               "--steps", "100000", "--max-seconds", "60")
    assert proc.returncode == 1 and "ran out before the baseline was measured" in \
        proc.stderr, proc.stderr
    study = optuna.load_study(study_name="c", storage=f"sqlite:///{tmp_path / 's' / 'c.db'}")
    assert [t.state.name for t in study.trials] == ["FAIL"]
    assert study.trials[0].user_attrs["fail_reason"].startswith("budget:")


@pytest.mark.slow
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_a_fork_server_whose_children_cannot_use_cuda_gives_way_to_spares(prepared, tmp_path):
    """The CUDA canary: on a machine where a forked child cannot initialise CUDA the
    server says after which import step, and is not used; trials then start in
    spare interpreters, each started while the trial before ran and stopped by it
    during its window, and say why."""
    import json
    import os

    from autotune.config import TrialConfig
    from autotune.trial import run_trial
    from autotune.trial import ForkServer
    from autotune.trial._forkserver import SPARE
    from autotune.trial._runner import trial_env

    config = TrialConfig(batch_size=64, num_neighbors=(5, 5), hidden_channels=16)
    spec = MeasureSpec(warmup_steps=1, min_warmup_s=0.0, min_steps=3, max_window_s=0.3)
    with ForkServer(folder=tmp_path) as server:
        start = server.start(trial_env("cpu"), "cuda")  # the trials' environment
        assert start.startswith(f"{SPARE} (fork server unusable: a forked child could "
                                "not use CUDA"), start
        assert "after importing torch (python -m autotune.trial._forkserver --bisect torch" in start
        assert server.proc is None, "an unusable server must be shut down"
        results = [run_trial(config, dataset=prepared, trial_dir=tmp_path / f"t{i}",
                             server=server, measure=spec) for i in range(2)]
        left = server.spare.pid
    assert all(r.ok for r in results), [r.stderr_tail for r in results]
    assert [r.observed.trial_start for r in results] == [start, start]
    quiet = [json.loads((tmp_path / f"t{i}" / "spec.json").read_text())["quiet_pids"]
             for i in range(2)]
    # each trial stopped, during its window, the interpreter the next one ran in
    assert quiet == [[results[1].observed.main_pid], [left]]
    assert results[0].observed.main_pid != results[1].observed.main_pid
    assert "CUDA canary failed" in (tmp_path / "forkserver.log").read_text()
    with pytest.raises(ProcessLookupError):  # closing the search ended the last spare
        os.kill(left, 0)


def test_a_spare_that_imported_under_another_environment_is_not_used(monkeypatch, tmp_path):
    """Spares import while the trial before runs, in that trial's environment: where
    the next trial's differs in what imports read (the search turned its threads
    passive), the waiting spare is ended unused and one of the new environment runs
    the trial. (Stand-in spares: a Python that says it is ready and reads its
    request; the protocol is ForkServer's own.)"""
    import os
    import subprocess
    import sys

    from autotune.trial import ForkServer
    from autotune.trial._forkserver import SPARE

    spawned: list[tuple[subprocess.Popen, str | None]] = []
    ready = "import json, sys; print(json.dumps({'ready': {}}), flush=True); sys.stdin.read()"

    def spawn(self, env, flags):
        proc = subprocess.Popen([sys.executable, "-c", ready], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env)
        spawned.append((proc, env.get("OMP_WAIT_POLICY")))
        return proc

    monkeypatch.setattr(ForkServer, "_spawn", spawn)
    base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    forked = []
    with ForkServer(method="spare") as server:
        for env in (base, base, {**base, "OMP_WAIT_POLICY": "PASSIVE"}):
            assert server.start(env, "cpu") == SPARE
            proc = server.fork(["spec", "result"], tmp_path / "out", tmp_path / "err", env)
            proc.wait()
            forked.append(next(i for i, (p, _) in enumerate(spawned) if p is proc))
    # 0 runs the first trial, 1 (spawned during it) the second, 2 waits for the third
    # but imported without the policy: ended unused, and 3, spawned then, runs it
    assert forked == [0, 1, 3], (forked, spawned)
    assert spawned[3][1] == "PASSIVE" and spawned[2][0].poll() is not None


@pytest.mark.slow
def test_a_later_search_forks_from_the_server_an_earlier_one_kept(prepared, tmp_path):
    """A server a search leaves healthy serves the next search of the process whose
    trials' environment matches but for what no import reads (its inductor cache and
    an autotune setting, here): no imports to wait for. Another environment gets a
    server of its own, and a search that raised ends the server it had. Within one
    search, a trial whose environment changed (as a busy machine's turns passive)
    forks from a server of that environment (here the one kept before), and a trial
    of the first one again from the server set aside for it."""
    import json

    import psutil

    from autotune.trial import run_trial
    from autotune.trial import ForkServer
    from autotune.trial._forkserver import FORKED

    config = TrialConfig(batch_size=64, num_neighbors=(5, 5), hidden_channels=16)
    spec = MeasureSpec(warmup_steps=1, min_warmup_s=0.0, min_steps=3, max_window_s=0.3)

    def search(name: str, env: dict | None = None, fail: bool = False):
        # its own variable: no server that an earlier test's search kept serves it
        env = {"TEST_KEPT_SERVER": str(tmp_path), **(env or {})}
        with ForkServer(folder=tmp_path / name, compiles=False) as server:
            result = run_trial(config, dataset=prepared, trial_dir=tmp_path / name / "t",
                               server=server, measure=spec, env=env,
                               inductor_cache=tmp_path / name / "inductor")
            if fail:
                raise RuntimeError("the search failed")
        return result, json.loads((tmp_path / name / "forkserver.json").read_text())

    (first, a), (second, b) = search("a"), search("b", env={"AUTOTUNE_UNREAD": "1"})
    assert first.ok and second.ok, (first.stderr_tail, second.stderr_tail)
    assert second.observed.trial_start == FORKED
    assert "reused" not in a and b["reused"] and b["pid"] == a["pid"]
    assert b["started_in"] == a["started_in"] == str(tmp_path / "a")
    assert second.phases_s["startup"] < 1.0 < first.phases_s["startup"], \
        (first.phases_s, second.phases_s)  # the imports, waited for once
    _, c = search("c", env={"MALLOC_ARENA_MAX": "2"})
    assert c["pid"] != a["pid"] and "reused" not in c, "another environment at import"
    pids, envs = [], [{"MALLOC_ARENA_MAX": "2"}, {}, {"MALLOC_ARENA_MAX": "2"}]
    with ForkServer(folder=tmp_path / "e", compiles=False) as server:
        for i, env in enumerate(envs):
            result = run_trial(config, dataset=prepared, trial_dir=tmp_path / "e" / str(i),
                               server=server, measure=spec,
                               env={"TEST_KEPT_SERVER": str(tmp_path), **env})
            assert result.ok and result.observed.trial_start == FORKED, result.stderr_tail
            pids.append(json.loads((tmp_path / "e" / "forkserver.json").read_text())["pid"])
    assert pids == [c["pid"], a["pid"], c["pid"]], (pids, a["pid"], c["pid"])
    with pytest.raises(RuntimeError):
        search("d", fail=True)
    assert json.loads((tmp_path / "d" / "forkserver.json").read_text())["pid"] == a["pid"]
    assert not psutil.pid_exists(a["pid"]), "a failed search's server outlived it"


_CANARY_AFTER_PYG = """import sys


def canary():
    # a forked child 'cannot use CUDA' once PyG is imported (as on the H200 machine)
    return "PyG was imported" if "torch_geometric" in sys.modules else None
"""


@pytest.mark.slow
def test_a_canary_failing_after_pyg_leaves_a_server_that_stops_before_it(prepared, tmp_path):
    """On an H200 machine a forked child could not use CUDA once the server had
    imported torch_geometric, and every trial started in a spare (6.5 to 12 s each).
    A canary that fails after a later step than torch's gets a second server that
    stops before that step; trials fork from it and import the rest themselves."""
    import json
    import os
    import sys

    from autotune.config import TrialConfig
    from autotune.trial import run_trial
    from autotune.trial import ForkServer
    from autotune.trial._forkserver import FORKED

    (tmp_path / "pyg_canary.py").write_text(_CANARY_AFTER_PYG)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    config = TrialConfig(batch_size=64, num_neighbors=(5, 5), hidden_channels=16)
    spec = MeasureSpec(warmup_steps=1, min_warmup_s=0.0, min_steps=3, max_window_s=0.3)
    with ForkServer(folder=tmp_path, compiles=False, canary="pyg_canary:canary") as server:
        start = server.start(env, "cpu")
        assert start == f"{FORKED} (stopped before torch_geometric, which the trial imports)"
        result = run_trial(config, dataset=prepared, trial_dir=tmp_path / "t", server=server,
                           measure=spec, env=env)
    assert result.ok, result.stderr_tail
    assert result.observed.trial_start == start
    info = json.loads((tmp_path / "forkserver.json").read_text())
    imported = [s["step"] for s in info["steps"]]
    assert imported[0] == "torch" and "torch._dynamo" in imported
    assert "torch_geometric" not in imported and info["stop_before"] == "torch_geometric"
    assert info["unusable"] is None and info["canary"] is None
    assert "PyG was imported, after importing torch_geometric" in info["first_server"]


def test_stopped_holds_a_process_for_the_block_only():
    import subprocess
    import sys

    import psutil

    from autotune.trial._window import stopped

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with stopped((proc.pid, 2 ** 22 + 1)):  # one pid that is no process: skipped
            assert psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED
        deadline = time.monotonic() + 5  # SIGCONT lands asynchronously
        while psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        assert psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED
    finally:
        proc.kill()
        proc.wait()


_PRELOAD_UNDER_A_FAKE_CUDA_BUILD = """
import json, sys
import torch
# torch as a CUDA build would show itself to Python: every gate that asks whether
# CUDA is compiled in says yes, and the driver's device count answers 1.
torch.version.cuda = "12.8"
torch.cuda._is_compiled = lambda: True
torch.backends.cuda.is_built = lambda: True
torch._C._cuda_getDeviceCount = lambda: 1
torch._C._cuda_getCurrentRawStream = lambda device: 0
from autotune.trial import _forkserver as forkserver
forkserver.PRELOAD += ("planted_cuda_query",)
print(json.dumps(forkserver.preload()))
"""


@pytest.mark.slow
def test_the_fork_servers_imports_query_no_cuda_and_the_tripwire_names_one_that_does(
        tmp_path):
    """The fork server's rule: none of its import steps calls into the torch.cuda
    functions that reach the CUDA driver, even where torch shows itself as a CUDA
    build. A planted module that does is named by the tripwire, with its line."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "planted_cuda_query.py").write_text(
        "import torch\n\nHAS_GPU = torch.cuda.is_available()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-c", _PRELOAD_UNDER_A_FAKE_CUDA_BUILD],
                         capture_output=True, text=True, env=env, check=True).stdout
    ready = json.loads(out.splitlines()[-1])
    planted = str(tmp_path / "planted_cuda_query.py")
    calls = {(q["call"], q["by"], q["step"]) for q in ready["cuda_queries"]}
    assert ("torch.cuda.is_available", f"{planted}:3", "planted_cuda_query") in calls
    # PyG reads USE_MKL from torch.__config__.show(), which on a CUDA build asks the
    # runtime for a device count: named, and answered without the driver
    config = {(by.rsplit(":", 1)[0], step) for call, by, step in calls
              if call == "torch._C._show_config"}
    assert config and all(by.endswith(os.path.join("torch_geometric", "typing.py")) and
                          step == "torch_geometric" for by, step in config), calls
    assert ready["config_answered"] >= 1
    assert {step for call, _, step in calls if call != "torch._C._show_config"} == \
        {"planted_cuda_query"}, calls
    assert [s["step"] for s in ready["steps"]][:3] == ["torch", "triton", "torch._dynamo"]
    assert not ready["cuda_initialized"] and ready["canary"] is None





def test_the_servers_imports_read_torchs_config_from_a_fresh_interpreter(monkeypatch):
    """On a CUDA build ``torch.__config__.show()`` initialises the CUDA driver (it
    counts devices), which leaves no forked child able to use CUDA. While the
    server imports, the call returns what a fresh interpreter printed: the same
    text; afterwards torch's own is back. On a CPU build nothing is replaced."""
    import torch

    from autotune.trial._forkserver import DriverFreeConfig

    original, real = torch._C._show_config, torch.__config__.show()
    with DriverFreeConfig() as cpu:
        assert torch._C._show_config is original
    assert cpu.answered == 0
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # a CUDA build, as Python sees it
    with DriverFreeConfig() as config:
        assert torch._C._show_config is not original
        assert torch.__config__.show() == real
        assert torch.__config__.show() == real
    assert config.answered == 2
    assert torch._C._show_config is original


_FAKE_CANARY = """import sys


def canary():
    # a forked child 'cannot use CUDA' once the planted module's body has run
    return "planted.culprit ran" if "planted.culprit" in sys.modules else None
"""


def test_bisect_names_the_module_whose_import_broke_the_canary(tmp_path):
    """Bisecting within a step: a binary search over the step's completed imports,
    each probe a fresh interpreter, names the one module after whose body the
    canary fails (here a fake canary: a real one needs a GPU), among modules
    imported before and after it, nested included."""
    import os
    import sys

    from autotune.trial._forkserver import bisect

    pkg = tmp_path / "planted"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from planted import a, sub, culprit, z\n")
    for name in ("a", "z", "sub/one", "sub/two"):
        (pkg / f"{name}.py").write_text("VALUE = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from planted.sub import one, two\n")
    (pkg / "culprit.py").write_text("from planted import sub\nSTATE = 'initialised'\n")
    (tmp_path / "fake_canary.py").write_text(_FAKE_CANARY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    found = bisect("planted", canary="fake_canary:canary", env=env)
    assert found["culprit"] == "planted.culprit", found
    assert found["completions"] == 7  # a, sub.one, sub.two, sub, culprit, z, planted
    assert len(found["probes"]) <= 4  # the whole step, then log2(7) rounded up
    wide = bisect("planted", canary="fake_canary:canary", env=env, jobs=3)
    assert wide["culprit"] == "planted.culprit", wide
    assert len(wide["probes"]) <= 1 + 3 + 3  # the whole step, then two rounds of three
    (pkg / "__init__.py").write_text("from planted import a, z\n")
    assert bisect("planted", canary="fake_canary:canary", env=env)["culprit"] is None
