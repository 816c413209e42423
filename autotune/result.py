"""``TrialResult``: what a trial's worker hands back. It keeps the raw per-step
samples; every summary figure is computed from them."""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "oom", "timeout", "crash", "error"]
STATUSES: tuple[str, ...] = ("ok", "oom", "timeout", "crash", "error")


@dataclass(frozen=True)
class TrialResult:
    """The outcome of one trial.

    ``step_times_s`` covers the timed window only: each step from the loader's
    ``next()`` to ``optimizer.step()``, the device synchronised before each clock
    read. ``memory`` says, per figure, which window it covers. ``observed`` holds
    knob effects read back while the trial ran."""

    status: Status
    config: dict[str, Any]
    reason: str | None = None
    stderr_tail: str | None = None
    step_times_s: tuple[float, ...] = ()
    seeds_per_step: tuple[int, ...] = ()
    nodes_per_step: tuple[int, ...] = ()
    edges_per_step: tuple[int, ...] = ()
    warmup_step_times_s: tuple[float, ...] = ()
    losses: tuple[float, ...] = ()
    memory: dict[str, Any] = field(default_factory=dict)
    compile: dict[str, Any] = field(default_factory=dict)
    phases_s: dict[str, float] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    dataset: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    training: dict[str, Any] = field(default_factory=dict)  # train mode: autotune.train

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def window_s(self) -> float:
        return sum(self.step_times_s)

    @property
    def throughput(self) -> float:
        """Seed nodes per second over the timed window."""
        return sum(self.seeds_per_step) / self.window_s if self.step_times_s else 0.0

    def summary(self) -> dict[str, float]:
        """Throughput, step-time percentiles and spread, from the raw samples."""
        times = sorted(self.step_times_s)
        if not times:
            return {}
        mean = statistics.fmean(times)
        window = self.window_s
        return {
            "seed_nodes_per_s": self.throughput,
            "sampled_nodes_per_s": sum(self.nodes_per_step) / window,
            "sampled_edges_per_s": sum(self.edges_per_step) / window,
            "step_p50_ms": 1e3 * statistics.median(times),
            "step_p90_ms": 1e3 * _percentile(times, 0.9),
            "step_cv": statistics.pstdev(times) / mean if mean > 0 else 0.0,
            "steps": len(times),
            "window_s": window,
        }

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        out["summary"] = self.summary()
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrialResult:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: tuple(v) if isinstance(v, list) else v
                  for k, v in values.items() if k in names}
        return cls(**kwargs)

    @classmethod
    def failed(cls, status: Status, config: dict, reason: str, **extra: Any) -> TrialResult:
        return cls(status=status, config=config, reason=reason, **extra)


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as numpy's default."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
