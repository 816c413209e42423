"""``autotune trial --profile DIR``: a ``torch.profiler`` trace of a few training steps
of the measured configuration, and its top ops, so a user can see why it is slow.

The profiled steps run after the timed window, on a fresh pass over the loader (so
sampling and feature gathering are in the trace), and are no part of any measured
figure: the profiler's own overhead would distort them.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.env import make_writable_dir
from autotune.errors import ConfigError
from autotune.files import atomic_write

TRACE = "trace.json"  # Chrome/Perfetto trace format: chrome://tracing, ui.perfetto.dev
TOP_OPS = "top-ops.txt"
TOP_ROWS = 15


@dataclass(frozen=True)
class ProfileSpec:
    """Where the trace goes and how many steps it covers (after ``warmup`` steps that
    the profiler runs but does not record, so its start-up stays out of the trace)."""

    folder: str
    steps: int = 5
    warmup: int = 2

    def __post_init__(self) -> None:
        for name in ("steps", "warmup"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (1 if name == "steps" else 0):
                raise ConfigError(f"profile {name} must be a positive int (got {value!r})")

    def to_dict(self) -> dict:
        return asdict(self)


def _epochs(loader):
    while True:  # a small graph's epoch may be shorter than the profile
        yield from loader


def check_profile_folder(folder: str | os.PathLike) -> Path:
    """Makes the folder; refuses one that already holds a trace, which the profile
    would overwrite."""
    path = make_writable_dir(Path(folder), "--profile")
    for name in (TRACE, TOP_OPS):
        if (path / name).exists():
            raise ConfigError(f"--profile folder '{path}' already holds {name} from another "
                              "profile; choose an empty folder")
    return path


def profile_steps(pipe, spec: ProfileSpec) -> dict:
    """Runs ``spec.warmup + spec.steps`` training steps under ``torch.profiler`` (CPU,
    and CUDA on a GPU); writes the trace and the top-ops table into ``spec.folder``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    cuda = pipe.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    plan = schedule(wait=0, warmup=spec.warmup, active=spec.steps, repeat=1)
    with pipe.activate(), profile(activities=activities, schedule=plan) as prof:
        batches = _epochs(pipe.loader)
        for _ in range(spec.warmup + spec.steps):
            with record_function("autotune.step"):
                pipe.train_step(next(batches))
            if cuda:
                torch.cuda.synchronize()
            prof.step()
    folder = Path(spec.folder)
    atomic_write(folder / TRACE, lambda tmp: prof.export_chrome_trace(str(tmp)))
    sort_by = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort_by, row_limit=TOP_ROWS)
    atomic_write(folder / TOP_OPS, table)
    return {"folder": str(folder), "trace": str(folder / TRACE),
            "top_ops": str(folder / TOP_OPS), "steps": spec.steps, "sorted_by": sort_by}
