"""``TrialResult``: what a trial's worker hands back. It keeps the raw per-step
samples; every summary figure is computed from them. Its parts are small frozen
records (memory, compile, observed knob effects) that cross the process boundary
and the study's storage as plain dicts (``to_dict``/``from_dict``)."""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from autotune.compare import CONFIDENCE, ratio_half_width, t_quantile  # noqa: F401 (re-export)
from autotune.config import TrialConfig
from autotune.taskinfo import task_info

Status = Literal["ok", "oom", "timeout", "crash", "error"]
STATUSES: tuple[str, ...] = ("ok", "oom", "timeout", "crash", "error")
MIB = 1 << 20

_R = TypeVar("_R", bound="_Part")


class _Part:
    """A frozen record that reads back what it wrote; keys it does not know (from a
    newer writer) are dropped, missing ones take their defaults."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[_R], values: dict[str, Any] | None) -> _R:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in (values or {}).items() if k in names})


@dataclass(frozen=True)
class MemoryStats(_Part):
    """Peak RSS per phase (the trial process and its loader workers) and, on CUDA,
    torch's peak allocation over warm-up and window. The probe step after the
    window is tracked apart and charged to no objective."""

    peak_rss_warmup_bytes: int = 0
    peak_rss_window_bytes: int = 0
    peak_rss_probe_bytes: int = 0
    rss_covers: str = ""
    samples: int = 0
    interval_s: float = 0.0
    cuda_max_allocated_bytes: int | None = None
    cuda_max_reserved_bytes: int | None = None
    cuda_covers: str | None = None
    # what the device has for this trial: the GPU's memory (within --gpu-memory-limit)
    # or the machine's RAM; the memory objective counts against it
    device_total_bytes: int | None = None
    gpu_fit_bytes: int | None = None  # what gpu_sampling's fit check counted, to compare

    def peak_mib(self, device: str) -> float:
        """The memory objective: ``max_memory_reserved`` on CUDA, else the peak RSS
        over warm-up and window."""
        if device == "cuda":
            return (self.cuda_max_reserved_bytes or 0) / MIB
        return max(self.peak_rss_warmup_bytes, self.peak_rss_window_bytes) / MIB


@dataclass(frozen=True)
class CompileStats(_Part):
    """What ``torch.compile`` did during the trial."""

    compiled: bool = False
    backend: str | None = None
    compile_time_s: float = 0.0
    frames_compiled: int = 0
    recompiles: int = 0
    recompiles_in_window: int = 0
    # Graphs recorded by inductor's cudagraph trees (reduce-overhead); None where they
    # were not counted (a torch that cannot report them, a trial stored before).
    cuda_graphs_recorded: int | None = None
    cuda_graphs_recorded_in_window: int | None = None
    graph_breaks: int = 0
    recompile_limit: int | None = None
    recompile_limit_hits: int = 0
    fell_back_to_eager: bool = False
    inductor_cache_hits: int = 0
    inductor_cache_misses: int = 0


@dataclass(frozen=True)
class Observed(_Part):
    """Each knob's effect read back from the running trial."""

    main_affinity: list[int] = field(default_factory=list)
    worker_affinity: dict[str, list[int] | None] = field(default_factory=dict)
    expected_worker_affinity: list[list[int]] | None = None
    num_workers_alive: int = 0
    torch_threads: int = 0
    malloc: str = ""  # what autotune.pipeline._allocator did to glibc's malloc in the trial
    sampling_backend: str = ""
    batch_shapes: int = 0
    pad_buckets: list | None = None
    conv_output_dtypes: list[str] = field(default_factory=list)
    conv_linear_dtypes: list[str] = field(default_factory=list)
    checkpointed_layers: int = 0
    conv_layers: int = 0
    conv_types: list[str] = field(default_factory=list)
    model: str = ""
    saved_tensor_bytes: int = 0
    aggregation_ops: list[str] = field(default_factory=list)  # aten ops the probe step ran
    dropout_ops: list[str] = field(default_factory=list)  # those that drew dropout masks
    feature_storage: str = ""  # where and in which dtype the loader gathers features
    sampled_edges_by_type: dict[str, int] | None = None  # a heterogeneous probe batch's
    trial_start: str = ""  # "fork server", or "fresh interpreter" and why
    main_pid: int = 0


def t975(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom."""
    return t_quantile(CONFIDENCE, df)


def rate_half_width(blocks) -> float | None:
    """The relative 95% confidence half-width of a rate measured in blocks of
    (count, seconds): the ratio estimator total count / total seconds, with its
    standard error from the blocks' residuals (batch means, so steps that come in
    bursts, as from prefetching loader workers, are averaged within a block). None
    with fewer than two blocks."""
    n = len(blocks)
    if n < 2:
        return None
    total_count, total_s = sum(c for c, _ in blocks), sum(s for _, s in blocks)
    if total_count <= 0 or total_s <= 0:
        return None
    rate = total_count / total_s
    variance = sum((c - rate * s) ** 2 for c, s in blocks) / (n - 1)
    return t975(n - 1) * (variance / n) ** 0.5 / (total_s / n) / rate


# A window's others' share counts only once they took this many CPU seconds in all: a
# daemon's 10 ms in a 50 ms window is 10% of 2 cores, and no disturbance
BUSY_FLOOR_S = 0.05


def busy_over(share: float, others_s: float, max_busy: float) -> bool:
    """Whether other processes took more of a window's cores than ``max_busy``."""
    return share > max_busy and others_s > BUSY_FLOOR_S


@dataclass(frozen=True)
class WindowStats(_Part):
    """The timed window: its wall time (the throughput's denominator), its blocks of
    ``block_steps`` steps as [seeds, seconds], the precision it reached (relative 95%
    half-width of the throughput) against its ``target``, and why it stopped:
    ``precise`` (target reached), ``max-seconds`` (time ran out first: imprecise) or
    ``screened`` (racing: measured to ``screen_precision`` only, since even its
    optimistic bound could not join the front)."""

    wall_s: float = 0.0
    block_steps: int = 0
    blocks: list[list[float]] = field(default_factory=list)
    precision: float | None = None
    target: float | None = None
    screen_precision: float | None = None
    stopped: str = ""
    # what screened it out: "front" (its best case cannot join it), or "warm-up" /
    # "window" (far below the best config that fits, seen there)
    screened_by: str = ""
    started_at: float = 0.0  # time.time() at the window's first and last clock read
    ended_at: float = 0.0
    # What other processes took of its cores (trial/_load.py's Load), the share they
    # could take before it was measured again (MeasureSpec.max_busy), and the loads of
    # the windows measured before it and dropped for being disturbed
    load: dict[str, Any] | None = None
    max_busy: float | None = None
    remeasured: list[dict[str, Any]] = field(default_factory=list)

    @property
    def imprecise(self) -> bool:
        return self.stopped == "max-seconds"

    @property
    def disturbed(self) -> bool:
        """Other processes took more of its cores than ``max_busy`` (and more than
        :data:`BUSY_FLOOR_S` in all: a short window's share is noise), however many
        times it was measured again."""
        return self.load is not None and self.max_busy is not None and \
            busy_over(self.load.get("share", 0.0), self.load.get("others_s", 0.0),
                      self.max_busy)

    @property
    def screened(self) -> bool:
        return self.stopped == "screened"


# The parts of a result (and of a stored trial) that are records of their own.
PARTS = {"memory": MemoryStats, "compile": CompileStats, "observed": Observed,
         "window": WindowStats}


@dataclass(frozen=True)
class TrialResult:
    """The outcome of one trial.

    ``step_times_s`` covers the timed window only: each step from the loader's
    ``next()`` to ``optimizer.step()``. On CPU the wall clock times each step; on
    CUDA, events on the default stream do, and the device is synchronised once per
    block, not per step, so sampling overlaps the step before as in training.
    ``memory`` says which window each figure covers. ``observed`` holds knob effects
    read back while the trial ran."""

    status: Status
    config: TrialConfig
    reason: str | None = None
    stderr_tail: str | None = None
    step_times_s: tuple[float, ...] = ()
    seeds_per_step: tuple[int, ...] = ()
    nodes_per_step: tuple[int, ...] = ()
    edges_per_step: tuple[int, ...] = ()
    warmup_step_times_s: tuple[float, ...] = ()
    losses: tuple[float, ...] = ()
    memory: MemoryStats = field(default_factory=MemoryStats)
    compile: CompileStats = field(default_factory=CompileStats)
    phases_s: dict[str, float] = field(default_factory=dict)
    observed: Observed = field(default_factory=Observed)
    window: WindowStats = field(default_factory=WindowStats)
    dataset: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    training: dict[str, Any] = field(default_factory=dict)  # train mode: autotune.pipeline._training
    profile: dict[str, Any] = field(default_factory=dict)  # autotune.trial._profile, when asked
    pairs: dict[str, Any] = field(default_factory=dict)  # a paired trial's: autotune.trial._pairs

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def window_s(self) -> float:
        """The window's wall time (the sum of its steps for results that predate it)."""
        return self.window.wall_s or sum(self.step_times_s)

    @property
    def throughput(self) -> float:
        """Seed nodes per second: the window's seeds over its wall time, so that a
        loader that delivers in bursts is averaged honestly."""
        return sum(self.seeds_per_step) / self.window_s if self.step_times_s else 0.0

    def objectives(self) -> tuple[float, float]:
        """(seed nodes/s, peak MiB), the two objectives of a search."""
        return self.throughput, self.memory.peak_mib(self.config.device)

    def summary(self) -> dict[str, float]:
        """Throughput, step-time percentiles and spread, from the raw samples."""
        times = sorted(self.step_times_s)
        if not times:
            return {}
        mean = statistics.fmean(times)
        window = self.window_s
        return {
            task_info(self.config).throughput_key: self.throughput,
            "sampled_nodes_per_s": sum(self.nodes_per_step) / window,
            "sampled_edges_per_s": sum(self.edges_per_step) / window,
            "step_p50_ms": 1e3 * statistics.median(times),
            "step_p90_ms": 1e3 * _percentile(times, 0.9),
            "step_cv": statistics.pstdev(times) / mean if mean > 0 else 0.0,
            "steps": len(times),
            "window_s": window,
            "precision": self.window.precision,
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (_Part, TrialConfig)):
                value = value.to_dict()
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["summary"] = self.summary()
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrialResult:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: tuple(v) if isinstance(v, list) else v
                  for k, v in values.items() if k in names}
        kwargs["config"] = TrialConfig.from_dict(values["config"])
        for name, part in PARTS.items():
            kwargs[name] = part.from_dict(values.get(name))
        return cls(**kwargs)

    @classmethod
    def failed(cls, status: Status, config: TrialConfig, reason: str,
               **extra: Any) -> TrialResult:
        return cls(status=status, config=config, reason=reason, **extra)


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as numpy's default."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
