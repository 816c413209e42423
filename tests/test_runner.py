from __future__ import annotations

import platform

import pytest

from _helpers import assert_window_kept_its_promise, trial_processes

from autotune.config import TrialConfig
from autotune.pipeline._build import worker_core_sets
from autotune.trial import ForkServer, run_trial
from autotune.topology import NUMA_STRATEGY, affinity_sets, this_machine

SMALL = dict(batch_size=64, num_neighbors=(5, 5), hidden_channels=32, sampling_backend="builtin")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One fork server for the module's trials, as a search has: the trials of the
    tests that take it fork from it (4 s of imports each, saved), the first test's
    starts in a fresh interpreter."""
    with ForkServer(folder=tmp_path_factory.mktemp("server")) as forks:
        yield forks


@pytest.fixture(scope="module")
def inductor(tmp_path_factory):
    """One inductor cache for the module's compiled trials, as a studies folder keeps
    one for its searches: a later trial's compile finds what an earlier one built."""
    return tmp_path_factory.mktemp("inductor")


def _leftovers(trial_dir):
    """The trial's processes still alive (the worker and its forks)."""
    return [p.pid for p in trial_processes(trial_dir)]


def test_a_trial_measures_its_window_in_blocks(prepared, quick_measure, tmp_path):
    result = run_trial(TrialConfig(**SMALL, num_workers=1), dataset=prepared,
                       trial_dir=tmp_path / "t", measure=quick_measure)
    assert result.status == "ok", result.stderr_tail
    window = result.window
    assert_window_kept_its_promise(len(result.step_times_s), window.to_dict(),
                                   quick_measure.min_steps, quick_measure.max_window_s)
    assert len(window.blocks) == len(result.step_times_s) // window.block_steps
    assert sum(b[0] for b in window.blocks) <= sum(result.seeds_per_step)
    # throughput is the window's seeds over its wall time, which covers every step
    assert window.wall_s >= sum(result.step_times_s)
    assert result.throughput == pytest.approx(sum(result.seeds_per_step) / window.wall_s)
    assert result.observed.trial_start == "fresh interpreter"
    if platform.libc_ver()[0] == "glibc":  # held from the warm-up's first step
        assert "mmap_max=0" in result.observed.malloc, result.observed.malloc
    assert len(result.warmup_step_times_s) >= quick_measure.warmup_steps
    assert result.throughput > 0
    assert all(s == 64 for s in result.seeds_per_step)
    assert result.memory.peak_rss_window_bytes > result.dataset["bytes"]
    assert result.observed.num_workers_alive == 1
    assert result.observed.sampling_backend == "autotune.NeighborSampler"
    assert (tmp_path / "t" / "stderr.log").exists()
    assert _leftovers(tmp_path / "t") == []


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["split", "compact", NUMA_STRATEGY])
@pytest.mark.parametrize("workers", [1, 2])
def test_observed_affinity_equals_requested(prepared, quick_measure, tmp_path, server, strategy,
                                            workers):
    """Every loader worker's affinity, the trial process's own and torch's thread
    count, read back from the running trial, equal what the strategy asked for."""
    topology = this_machine()
    if topology.why_not(strategy):
        pytest.skip(topology.why_not(strategy))
    if workers > len(topology.cpus):
        pytest.skip(f"{workers} workers need {workers} cores")
    loader, compute = affinity_sets(strategy, workers, topology)
    config = TrialConfig(**SMALL, num_workers=workers, loader_cores=loader,
                         compute_cores=compute)
    result = run_trial(config, dataset=prepared, trial_dir=tmp_path / "t",
                       measure=quick_measure, server=server)
    assert result.status == "ok", result.stderr_tail
    observed = result.observed
    assert observed.main_affinity == list(compute)
    assert observed.torch_threads == len(compute)
    expected = worker_core_sets(loader, workers)
    assert observed.expected_worker_affinity == expected
    assert sorted(observed.worker_affinity.values()) == sorted(expected)
    assert observed.num_workers_alive == workers


# Faults (raise, segfault, hang, loader-hang, loader-kill, alloc over --memory-limit)
# become failed trials with their status, reason and stderr, and leave no process
# behind: tests/test_hardening.py, in real studies, one trial of each.


@pytest.mark.slow
def test_compiled_padded_trial_reports_compile_and_buckets(prepared, tmp_path, server,
                                                           inductor):
    from autotune.specs import MeasureSpec

    before = set(inductor.rglob("*"))
    config = TrialConfig(**SMALL, compile_mode="default", shapes="padded", pad_ladder="pow2")
    result = run_trial(config, dataset=prepared, trial_dir=tmp_path / "t",
                       measure=MeasureSpec(warmup_steps=2, min_warmup_s=0.0,
                                           min_steps=4, max_window_s=1.0),
                       inductor_cache=inductor, server=server)
    assert result.status == "ok", result.stderr_tail
    assert result.compile.compiled and result.compile.compile_time_s > 0
    assert result.compile.backend == "inductor"
    assert result.compile.frames_compiled >= 1
    assert not result.compile.fell_back_to_eager
    buckets = result.observed.pad_buckets
    assert buckets and all(n & (n - 1) == 0 for n, _ in buckets), "node counts must be 2^k"
    assert result.compile.recompiles <= len(buckets)
    # mode default records no CUDA graph; the count crosses the process boundary as a figure
    assert result.compile.cuda_graphs_recorded == result.compile.cuda_graphs_recorded_in_window == 0
    assert set(inductor.rglob("*")) - before, "the inductor cache was not used"


def test_each_kind_of_cpu_keeps_its_own_inductor_cache(monkeypatch, tmp_path):
    """Inductor's cache key omits the CPU's vector ISA: code generated on an AVX2 host
    and built on an AVX-512 one wrote past its buffers (double free). A studies folder
    two such hosts share keeps a cache for each; ATEN_CPU_CAPABILITY, which lowers the
    ISA inductor picks, makes another; flags inductor does not read change nothing."""
    from autotune import env
    from autotune.files import inductor_cache_dir

    def where(flags: set[str], capability: str | None = None):
        monkeypatch.setattr(env, "cpu_flags", lambda: frozenset(flags))
        if capability:
            monkeypatch.setenv("ATEN_CPU_CAPABILITY", capability)
        else:
            monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
        return inductor_cache_dir(tmp_path)

    avx512 = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
    avx2 = where({"avx2"})
    assert avx2.parent == where(avx512).parent == tmp_path / ".cache" / "inductor"
    assert len({avx2, where(avx512), where(avx512, "avx2")}) == 3
    assert where({"avx2", "sse4_2", "fma"}) == avx2


@pytest.mark.slow
def test_a_trial_past_the_recompile_limit_is_flagged_eager(prepared, tmp_path, server, inductor):
    """Static padded shapes recompile once per bucket; with the limit at 1 the
    second bucket makes torch._dynamo give up and run the model eagerly."""
    from autotune.specs import MeasureSpec

    config = TrialConfig(**{**SMALL, "batch_size": 16}, compile_mode="default",
                         shapes="padded", pad_ladder="geometric", recompile_limit=1)
    result = run_trial(config, dataset=prepared, trial_dir=tmp_path / "t",
                       measure=MeasureSpec(warmup_steps=2, min_warmup_s=0.0,
                                           min_steps=6, max_window_s=1.0),
                       inductor_cache=inductor, server=server)
    assert result.status == "ok", result.stderr_tail
    assert len(result.observed.pad_buckets) > 1, "needs two buckets to recompile"
    assert result.compile.recompile_limit == 1
    assert result.compile.recompile_limit_hits >= 1
    assert result.compile.fell_back_to_eager
    assert any("this throughput is eager" in w for w in result.warnings)
