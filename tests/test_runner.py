from __future__ import annotations

import os
import re

import psutil
import pytest

from autotune.config import TrialConfig
from autotune.runner import TrialLimits, run_trial

SMALL = dict(batch_size=64, num_neighbors=(5, 5), hidden_channels=32, sampler="builtin")


def _leftovers(trial_dir):
    """Processes whose command line names this trial (the worker and its forks)."""
    spec = str(trial_dir / "spec.json")
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if spec in (proc.info["cmdline"] or []):
                found.append(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def test_a_trial_measures_exactly_the_window(prepared, quick_measure, tmp_path):
    result = run_trial(TrialConfig(**SMALL, num_workers=1), dataset=prepared,
                       trial_dir=tmp_path / "t", measure=quick_measure)
    assert result.status == "ok", result.stderr_tail
    assert len(result.step_times_s) == quick_measure.window_steps
    assert len(result.warmup_step_times_s) >= quick_measure.warmup_steps
    assert result.throughput > 0
    assert all(s == 64 for s in result.seeds_per_step)
    assert result.memory["peak_rss_window_bytes"] > result.dataset["bytes"]
    assert result.observed["num_workers_alive"] == 1
    assert result.observed["sampler_backend"] == "autotune.NeighborSampler"
    assert (tmp_path / "t" / "stderr.log").exists()
    assert _leftovers(tmp_path / "t") == []


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_observed_affinity_equals_requested(prepared, quick_measure, tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    config = TrialConfig(**SMALL, num_workers=1, loader_cores=(cores[1],),
                         compute_cores=(cores[0],))
    result = run_trial(config, dataset=prepared, trial_dir=tmp_path / "t",
                       measure=quick_measure)
    assert result.status == "ok", result.stderr_tail
    assert result.observed["main_affinity"] == [cores[0]]
    assert result.observed["torch_threads"] == 1
    assert list(result.observed["worker_affinity"].values()) == [[cores[1]]]


@pytest.mark.parametrize("fault, status, reason", [
    ("raise", "error", "injected fault"),
    ("segfault", "crash", "SIGSEGV"),
    ("hang", "timeout", "timeout"),
    ("loader-hang", "timeout", "timeout"),
])
def test_faults_become_failed_trials(prepared, quick_measure, tmp_path, fault, status, reason):
    result = run_trial(TrialConfig(**SMALL, num_workers=1), dataset=prepared,
                       trial_dir=tmp_path / "t", measure=quick_measure,
                       limits=TrialLimits(timeout_s=20), env={"AUTOTUNE_TEST_FAULT": fault})
    assert result.status == status
    assert reason in result.reason
    assert _leftovers(tmp_path / "t") == []
    if fault == "raise":
        assert "RuntimeError: injected fault" in result.stderr_tail


def test_memory_limit_kills_the_tree(prepared, quick_measure, tmp_path):
    result = run_trial(TrialConfig(**SMALL), dataset=prepared, trial_dir=tmp_path / "t",
                       measure=quick_measure,
                       limits=TrialLimits(timeout_s=60, memory_limit_bytes=2 << 30),
                       env={"AUTOTUNE_TEST_FAULT": "alloc"})
    assert result.status == "oom"
    assert "exceeded --memory-limit 2.0 GiB" in result.reason
    assert _leftovers(tmp_path / "t") == []


def test_killed_loader_worker_is_an_error(prepared, quick_measure, tmp_path):
    result = run_trial(TrialConfig(**SMALL, num_workers=1), dataset=prepared,
                       trial_dir=tmp_path / "t", measure=quick_measure,
                       limits=TrialLimits(timeout_s=60),
                       env={"AUTOTUNE_TEST_FAULT": "loader-kill"})
    assert result.status == "error"
    # torch reports the dead worker in one of three ways, depending on what it sees first
    assert re.search(r"DataLoader worker \(pid(\(s\))? [\d, ]+\) (is killed|exited unexpectedly)"
                     r"|ConnectionResetError", result.reason), result.reason
    assert _leftovers(tmp_path / "t") == []


@pytest.mark.slow
def test_compiled_padded_trial_reports_compile_and_buckets(prepared, tmp_path):
    from autotune.measure import MeasureSpec

    config = TrialConfig(**SMALL, compile_mode="default", shapes="padded", pad_ladder="pow2")
    result = run_trial(config, dataset=prepared, trial_dir=tmp_path / "t",
                       measure=MeasureSpec(warmup_steps=2, window_steps=4),
                       inductor_cache=tmp_path / "inductor")
    assert result.status == "ok", result.stderr_tail
    assert result.compile["compiled"] and result.compile["compile_time_s"] > 0
    assert result.compile["frames_compiled"] >= 1
    buckets = result.observed["pad_buckets"]
    assert buckets and all(n & (n - 1) == 0 for n, _ in buckets), "node counts must be 2^k"
    assert result.compile["recompiles"] <= len(buckets)
    assert any((tmp_path / "inductor").iterdir()), "the inductor cache was not used"
