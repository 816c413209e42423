"""The test suite's fault injection, loaded by the trial process only where
``AUTOTUNE_TEST_FAULT=KIND[:STEP][@TRIAL]`` is set: a fault at training step STEP
(default 2): raise, segfault, hang, alloc, loader-hang, loader-kill, cuda-oom. With
``@TRIAL``, only the trial whose folder is named TRIAL (a study's trial number) is
hit; several such faults, comma-separated, hit a trial each (one study, a fault a
trial: tests/test_hardening.py)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from autotune.trial._window import loader_worker_pids

FAULT_ALLOC_CHUNK = 64 << 20
FAULT_ALLOC_MAX = 8 << 30


def fault_hook(specs: str, trial_dir: Path):
    """What fires the fault ``specs`` names for this trial at its step, or None where
    each names another trial."""
    for spec in specs.split(","):
        spec, _, only_trial = spec.partition("@")
        if not only_trial or trial_dir.name == only_trial:
            return _fire(spec)
    return None


def _fire(spec: str):
    kind, _, at = spec.partition(":")
    at_step = int(at) if at else 2

    def fire(step: int, pipe) -> None:
        if step != at_step:
            return
        if kind == "raise":
            raise RuntimeError(f"injected fault at step {step}")
        if kind == "segfault":
            import ctypes

            ctypes.string_at(0)
        if kind == "hang":
            time.sleep(3600)
        if kind == "alloc":
            import torch

            hoard = []
            while len(hoard) * FAULT_ALLOC_CHUNK < FAULT_ALLOC_MAX:
                hoard.append(torch.ones(FAULT_ALLOC_CHUNK // 4))
            time.sleep(3600)
        if kind == "cuda-oom":
            import torch

            torch.empty(1 << 50, dtype=torch.uint8, device=pipe.device)  # a petabyte
        if kind in ("loader-hang", "loader-kill"):
            pids = loader_worker_pids(pipe.loader)
            if not pids:
                raise RuntimeError(f"fault {kind} needs loader workers (num_workers > 0)")
            for pid in pids:
                os.kill(pid, signal.SIGSTOP if kind == "loader-hang" else signal.SIGKILL)
            return
        raise RuntimeError(f"unknown AUTOTUNE_TEST_FAULT kind {kind!r}")

    return fire
