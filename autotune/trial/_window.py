"""Warm-up, then a timed window, with a memory sampler running beside them.

As in hyperfine and ``torch.utils.benchmark``: warm up first (for compiled modes,
until neither a recompile nor a CUDA graph recording has happened for a few
steps), time a fixed window after it, synchronise the device before every clock
read, keep every raw sample, and say which window each peak-memory figure covers.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import psutil
import torch
from torch import nn

from autotune.pipeline import Pipeline, device_sync, gpu_room, heap_state
from autotune.specs import MeasureSpec
from autotune.trial._load import LoadMeter
from autotune.trial._result import (
    MIB,
    CompileStats,
    MemoryStats,
    Observed,
    WindowStats,
    busy_over,
    rate_half_width,
)

CHILD_REFRESH_S = 0.1  # how often the memory sampler looks for new loader workers
# A first timed step this much slower than the median means the warm-up was too short.
SLOW_FIRST_STEP_RATIO = 2.0


class MemoryTracker:
    """Samples the RSS of this process plus its loader workers every few
    milliseconds in a background thread, keeping one peak per named phase."""

    def __init__(self, worker_pids: Callable[[], list[int]], interval_s: float) -> None:
        self._worker_pids = worker_pids
        self._interval = interval_s
        self._phase = "setup"
        self.peaks: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autotune-memory", daemon=True)

    def __enter__(self) -> MemoryTracker:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def phase(self, name: str) -> None:
        self._sample(self._procs())  # close the previous phase with a fresh sample
        self._phase = name

    def _procs(self) -> list[psutil.Process]:
        procs = [psutil.Process(os.getpid())]
        for pid in self._worker_pids():
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        return procs

    def _sample(self, procs: list[psutil.Process]) -> None:
        rss = 0
        for proc in procs:
            try:
                rss += proc.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        phase = self._phase
        self.peaks[phase] = max(self.peaks.get(phase, 0), rss)
        self.samples += 1

    def _run(self) -> None:
        procs, refreshed = self._procs(), time.monotonic()
        while not self._stop.wait(self._interval):
            if time.monotonic() - refreshed > CHILD_REFRESH_S:
                procs, refreshed = self._procs(), time.monotonic()
            self._sample(procs)


def loader_worker_pids(loader) -> list[int]:
    iterator = getattr(loader, "_iterator", None)
    workers = getattr(iterator, "_workers", None) or []
    return [w.pid for w in workers if w.pid is not None]


def _dynamo_state() -> tuple[int, int, float]:
    """Frames compiled so far, graph breaks so far, seconds spent compiling."""
    from torch._dynamo.utils import compilation_time_metrics, counters

    frames = counters["frames"]["total"]
    breaks = sum(counters["graph_break"].values())
    seconds = sum(compilation_time_metrics.get("_compile.compile_inner", []))
    return frames, breaks, seconds


class GraphRecordings:
    """Counts the CUDA graphs that inductor's cudagraph trees record (compile_mode
    reduce-overhead) while it is entered. A tree records a graph at a compiled
    function's second call for a shape, not at its compile, so a step that compiled
    nothing new can still record; a recording inside the timed window costs a
    synchronised capture there, and that window's rate spreads wide (docs/gpu.md,
    "Figures behind the code"). torch._dynamo runs its compilation start callbacks around each
    recording with the trigger ``CUDAGRAPH_RECORDING``; ``count`` is None on a torch
    without that trigger, where recordings cannot be seen."""

    def __init__(self) -> None:
        from torch._dynamo import callback

        self._handler = callback.callback_handler
        self._trigger = getattr(callback.CallbackTrigger, "CUDAGRAPH_RECORDING", None)
        self._seen = 0

    @property
    def count(self) -> int | None:
        return None if self._trigger is None else self._seen

    def _on_start(self, args) -> None:
        if args.callback_trigger is self._trigger:
            self._seen += 1

    def __enter__(self) -> GraphRecordings:
        if self._trigger is not None:
            self._handler.register_start_callback(self._on_start)
        return self

    def __exit__(self, *exc) -> None:
        if self._trigger is not None:
            self._handler.remove_start_callback(self._on_start)


def _limit_hits() -> int:
    """How often torch._dynamo gave up on a frame at its recompile limit: from then
    on that frame runs eagerly, whatever the compile mode says."""
    from torch._dynamo.utils import counters

    return sum(n for reason, n in counters["unimplemented"].items()
               if reason.startswith("Dynamo recompile limit exceeded"))


def _backends() -> list[str]:
    """The compiler backends that ran in this process, read from torch's own
    compile-time metrics (inductor's entry point is compile_fx_inner)."""
    from torch._dynamo.utils import compilation_time_metrics

    return ["inductor"] if "compile_fx_inner" in compilation_time_metrics else []


@dataclass
class Measurement:
    """Raw samples from one run of :func:`measure` (the worker folds them into a
    ``TrialResult``)."""

    step_times_s: list[float]
    seeds: list[int]
    nodes: list[int]
    edges: list[int]
    warmup_step_times_s: list[float]
    losses: list[float]
    memory: MemoryStats
    compile: CompileStats
    observed: Observed
    warnings: list[str]
    window: WindowStats
    loader_start_s: float  # the first iter(loader): loader workers forked and started


class _Stepper:
    """Runs timed training steps and remembers what each step saw."""

    def __init__(self, pipe: Pipeline, on_step: Callable[[int], None] | None) -> None:
        self.pipe = pipe
        self.sync = device_sync(pipe.device)
        self.loader_starts: list[float] = []  # seconds per iter(loader): workers start
        self.batches = self._batches()
        self.on_step = on_step or (lambda step: None)
        self.count = 0
        self.shapes: set[tuple[int, int]] = set()

    def _batches(self) -> Iterator:
        while True:  # start a new epoch when one runs out
            started = time.perf_counter()
            batches = iter(self.pipe.loader)
            self.loader_starts.append(time.perf_counter() - started)
            yield from batches

    def step(self) -> tuple[float, object, torch.Tensor]:
        """One step between two device syncs (warm-up, probe)."""
        self.sync()
        start = time.perf_counter()
        batch, loss = self.run()
        self.sync()
        return time.perf_counter() - start, batch, loss

    def run(self) -> tuple[object, torch.Tensor]:
        """One step with no device sync: on CUDA its work may still be queued."""
        self.on_step(self.count)
        batch = next(self.batches)
        loss = self.pipe.train_step(batch)
        self.count += 1
        self.shapes.add(batch_shape(batch))
        return batch, loss


def batch_shape(batch) -> tuple[int, ...]:
    """The shapes a compiled model sees: node and edge counts (per type, on a
    heterogeneous batch)."""
    if hasattr(batch, "node_types"):
        return tuple(int(s.num_nodes) for s in batch.node_stores) + \
            tuple(int(s.edge_index.size(1)) for s in batch.edge_stores if "edge_index" in s)
    return int(batch.num_nodes), int(batch.num_edges)


def edges_by_type(batch) -> dict[str, int] | None:
    """A heterogeneous batch's sampled edges per edge type (padding left out), which
    shows each type's fanout (``edge_fanouts``) at work; None for a homogeneous one."""
    if not hasattr(batch, "edge_types"):
        return None
    return {"__".join(t): int(sum(batch[t].num_sampled_edges)) for t in batch.edge_types}


def batch_size_of(batch) -> tuple[int, int]:
    """A batch's sampled nodes and edges, padding left out, all types together."""
    nodes = getattr(batch, "num_real_nodes", None)
    edges = getattr(batch, "num_real_edges", None)
    return (int(batch.num_nodes) if nodes is None else int(nodes),
            int(batch.num_edges) if edges is None else int(edges))


class _StepClock:
    """Per-step times inside the window without a device sync per step. On CUDA each
    step records an event after its work on the default stream; a step's time is the
    gap between its event and the one before, read when a block ends (the one sync
    per block). The sampler's stream and the next step's launches overlap the step
    before, as they do in training. On CPU a step's time is the wall clock's."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.sync = device_sync(device)
        self.marks: list = []

    def start(self) -> float:
        """Starts after a sync; returns the host's clock at the first mark, the
        window's start: on CPU that mark itself, so the steps' times never sum to
        more than the window's wall time."""
        self.sync()
        now = time.perf_counter()
        self.marks = [now if not self.cuda else self._mark()]
        return now

    def _mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def lap(self) -> None:
        self.marks.append(self._mark())

    def flush(self) -> list[float]:
        """Waits for the queued steps; returns their times and keeps the last mark."""
        self.sync()
        marks, self.marks = self.marks, self.marks[-1:]
        if not self.cuda:
            return [b - a for a, b in zip(marks, marks[1:])]
        return [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]


def measure(pipe: Pipeline, spec: MeasureSpec,
            on_step: Callable[[int], None] | None = None,
            quiet: tuple[int, ...] = ()) -> Measurement:
    """Warm up, then time blocks of steps to ``spec.precision`` (see
    :class:`MeasureSpec`). ``quiet``: processes stopped for the window (the next
    trial's spare interpreter, importing)."""
    import torch._dynamo

    compiled = pipe.config.compile_mode != "none"
    stepper = _Stepper(pipe, on_step)
    frames0, breaks0, compile0 = _dynamo_state()
    hits0 = _limit_hits()
    limit = pipe.config.recompile_limit or torch._dynamo.config.recompile_limit
    tracker = MemoryTracker(lambda: loader_worker_pids(pipe.loader), spec.memory_interval_s)
    with torch._dynamo.config.patch(recompile_limit=limit), pipe.activate(), tracker as memory, \
            GraphRecordings() as graphs:
        if pipe.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pipe.device)
        memory.phase("warmup")
        warmup, frames_after_first, warm_rate = _warm_up(stepper, spec, compiled, graphs)
        frames_warm, _, _ = _dynamo_state()
        graphs_warm = graphs.count
        memory.phase("window")
        with stopped(quiet):
            window = _undisturbed_window(stepper, spec, warmup,
                                         lambda: _peak_mib(pipe.device, memory), warm_rate)
        graphs_total = graphs.count
        device_memory = _device_memory(pipe)
        memory.phase("probe")  # the probe's eager step is charged to no objective
        observed = _observe(pipe, stepper)
        memory.phase("done")
    compile_info = _compile_info(compiled, (frames0, breaks0, compile0), frames_after_first,
                                 frames_warm, hits0, limit, graphs_total, graphs_warm)
    mem = {"peak_rss_warmup_bytes": memory.peaks.get("warmup", 0),
           "peak_rss_window_bytes": memory.peaks.get("window", 0),
           "peak_rss_probe_bytes": memory.peaks.get("probe", 0),
           "rss_covers": "trial process + loader workers",
           "samples": memory.samples, "interval_s": spec.memory_interval_s, **device_memory}
    warnings = _warnings(window.times, compile_info)
    losses = window.losses
    loss_values = torch.stack(losses).float().tolist() if losses else []
    return Measurement(window.times, window.seeds, window.nodes, window.edges, warmup,
                       loss_values, MemoryStats(**mem), CompileStats(**compile_info),
                       Observed(**observed), warnings, window.stats, stepper.loader_starts[0])


def _compile_info(compiled: bool, before: tuple[int, int, float], frames_after_first: int,
                  frames_warm: int, hits0: int, limit: int, graphs_total: int | None,
                  graphs_warm: int | None) -> dict:
    """What compiling did in the trial (``CompileStats``' fields): frames compiled,
    recompiles (in the window too), graph breaks, CUDA graphs recorded, the limit."""
    frames0, breaks0, compile0 = before
    frames1, breaks1, compile1 = _dynamo_state()
    hits = _limit_hits() - hits0
    return {
        "compiled": compiled, "backend": ",".join(_backends()) if compiled else None,
        "compile_time_s": compile1 - compile0,
        "frames_compiled": frames1 - frames0,
        "recompiles": max(0, frames1 - frames_after_first) if compiled else 0,
        "recompiles_in_window": frames1 - frames_warm,
        "cuda_graphs_recorded": graphs_total,
        "cuda_graphs_recorded_in_window":
            None if graphs_total is None else graphs_total - graphs_warm,
        "graph_breaks": breaks1 - breaks0,
        "recompile_limit": limit, "recompile_limit_hits": hits,
        "fell_back_to_eager": hits > 0,
        **_inductor_cache_counts(),
    }


@contextlib.contextmanager
def stopped(pids: tuple[int, ...]) -> Iterator[None]:
    """Stops ``pids`` (SIGSTOP) for the block, waiting (up to a second) until the
    kernel has stopped them, and lets them go on after it; one already gone is
    skipped (the runner lets them go on after the trial too)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 1.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(pid)
            while proc.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE) \
                    and time.monotonic() < deadline:
                time.sleep(0.001)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


rate_half_width([(1, 1.0), (1, 1.1)])  # its t quantile (scipy) loads here, not in a window
MIN_BLOCKS = 4  # as torch.utils.benchmark's adaptive_autorange
BLOCK_S = 0.05  # a block is at least this long, so that one clock read is noise-free


@dataclass
class _Window:
    times: list[float] = dataclasses.field(default_factory=list)
    seeds: list[int] = dataclasses.field(default_factory=list)
    nodes: list[int] = dataclasses.field(default_factory=list)
    edges: list[int] = dataclasses.field(default_factory=list)
    losses: list[torch.Tensor] = dataclasses.field(default_factory=list)
    stats: WindowStats = dataclasses.field(default_factory=WindowStats)

    def add(self, seeds: int, batch, loss: torch.Tensor) -> int:
        """Records a step's batch and loss; returns its seeds."""
        nodes, edges = batch_size_of(batch)
        self.seeds.append(seeds)
        self.nodes.append(nodes)
        self.edges.append(edges)
        self.losses.append(loss)
        return seeds


def block_steps(warmup_times: list[float], workers: int) -> int:
    """Steps per block: at least 2, at least one per loader worker (a prefetching
    loader delivers in bursts of about that many), and at least :data:`BLOCK_S`
    long at the warm-up's last step time."""
    tail = sorted(warmup_times[-3:])
    step = tail[len(tail) // 2] if tail else BLOCK_S
    return max(2, workers, math.ceil(BLOCK_S / max(step, 1e-6)))


def _window(stepper: _Stepper, spec: MeasureSpec, warmup: list[float],
            memory_mib: Callable[[], float], warm_rate: float = 0.0) -> _Window:
    """Times blocks of steps until the throughput is known to the target precision
    (the screening one first, racing), or until ``spec.max_window_s``. Racing, a
    config far below the best (:meth:`Screen.hopeless`) stops at its first block
    if its fastest warm-up step showed it, else at the block that does; one whose
    best case could not join the front (:meth:`Screen.rules_out`) stops at the
    first block that shows it, from its :data:`MIN_BLOCKS`-th on, whatever its
    precision: a loser needs no precise figure to lose (racing, as F-Race drops
    a candidate as soon as it is known to lose)."""
    out, per_block = _Window(), block_steps(warmup, stepper.pipe.config.num_workers)
    screen = spec.screen
    target = screen.precision if screen is not None else spec.precision
    hopeless = screen is not None and warm_rate > 0 and screen.hopeless(warm_rate)
    clock, started_at = _StepClock(stepper.pipe.device), time.time()
    start = block_start = clock.start()
    blocks: list[list[float]] = []  # [seeds, seconds] of each block
    block_seeds, stopped, precision, screened_by = 0, "", None, ""
    while not stopped:
        batch, loss = stepper.run()
        clock.lap()
        block_seeds += out.add(stepper.pipe.task.seeds(batch), batch, loss)
        at_block = len(out.seeds) % per_block == 0
        out.times += clock.flush() if at_block else []
        now = time.perf_counter()
        if at_block:
            blocks.append([block_seeds, now - block_start])
            block_seeds, block_start = 0, now
            precision = rate_half_width(blocks)
        if at_block and screen is not None and (hopeless or screen.hopeless(
                _best_case(blocks, precision))):
            stopped = "screened"
            screened_by = "warm-up" if hopeless else "window"
        elif now - start >= spec.max_window_s:
            stopped = "max-seconds"
        elif at_block and len(out.seeds) >= spec.min_steps and precision is not None and \
                now - start >= spec.min_window_s and len(blocks) >= MIN_BLOCKS:
            stopped, screened_by, target = _at_block(spec, blocks, precision, target,
                                                     memory_mib)
    out.times += clock.flush()
    out.stats = WindowStats(
        wall_s=time.perf_counter() - start, block_steps=per_block, blocks=blocks,
        precision=precision, target=target,
        screen_precision=screen.precision if screen is not None else None, stopped=stopped,
        screened_by=screened_by, started_at=started_at, ended_at=time.time())
    return out


def _at_block(spec: MeasureSpec, blocks: list[list[float]], precision: float,
              target: float, memory_mib: Callable[[], float]) -> tuple[str, str, float]:
    """At a block of a window long enough to stop: (why it stops, "" where it goes on;
    what screened it; its target precision). Racing, it is screened out where its
    best case could not join the front, whatever its precision; at the screening
    precision, one that could goes on to the full one."""
    screen = spec.screen
    rate = sum(b[0] for b in blocks) / sum(b[1] for b in blocks)
    if screen is not None and screen.rules_out(rate, precision, memory_mib()):
        return "screened", "front", target
    if precision > target:
        return "", "", target
    if screen is not None and target > spec.precision:
        return ("precise" if precision <= spec.precision else ""), "", spec.precision
    return "precise", "", target


def _undisturbed_window(stepper: _Stepper, spec: MeasureSpec, warmup: list[float],
                        memory_mib: Callable[[], float], warm_rate: float) -> _Window:
    """A window in which other processes took at most ``spec.max_busy`` of the trial's
    cores (:class:`LoadMeter`): a disturbed one is measured again, up to
    ``spec.busy_retries`` times, with no screening (on the warm-up's rate or the
    window's: either may have been disturbed too, and a config is never screened out
    on a disturbed window); the last is kept, flagged, where none was quiet. The
    window's stats carry its load and those of the windows dropped."""
    meter, dropped = LoadMeter(), []
    while True:
        meter.start()
        window = _window(stepper, spec, warmup, memory_mib, warm_rate)
        load = meter.stop()
        if not busy_over(load.share, load.others_s, spec.max_busy) or \
                len(dropped) >= spec.busy_retries:
            break
        dropped.append(load.to_dict())
        warm_rate, spec = 0.0, dataclasses.replace(spec, screen=None)
    window.stats = dataclasses.replace(window.stats, load=load.to_dict(),
                                       max_busy=spec.max_busy, remeasured=dropped)
    return window


def _best_case(blocks: list[list[float]], half_width: float | None) -> float:
    """How fast a window's blocks could be at best: the rate's 95% upper bound once
    there is one, and never above the fastest block (a prefetching loader's bursts
    make single blocks fast while the rate is not)."""
    fastest = max(seeds / max(seconds, 1e-9) for seeds, seconds in blocks)
    if half_width is None:
        return fastest
    rate = sum(b[0] for b in blocks) / sum(b[1] for b in blocks)
    return min(fastest, rate * (1 + half_width))


def _peak_mib(device: torch.device, memory: MemoryTracker) -> float:
    """The memory objective so far (see ``MemoryStats.peak_mib``)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_reserved(device) / MIB
    return max(memory.peaks.get("warmup", 0), memory.peaks.get("window", 0)) / MIB


def _warnings(times: list[float], compile_info: dict) -> list[str]:
    """What a reader of the figure must know: a slow first step (too short a warm-up),
    an eager fallback, recompiles inside the window."""
    warnings = []
    hits, limit = compile_info["recompile_limit_hits"], compile_info["recompile_limit"]
    if len(times) >= 3 and times[0] > SLOW_FIRST_STEP_RATIO * sorted(times)[len(times) // 2]:
        warnings.append(f"first timed step took {times[0] * 1e3:.0f} ms, over "
                        f"{SLOW_FIRST_STEP_RATIO:g}x the median: the warm-up may be too short")
    if hits:
        warnings.append(f"torch._dynamo hit its recompile limit ({limit}) {hits} times and "
                        "ran those frames eagerly: this throughput is eager, not compiled")
    if compile_info["recompiles_in_window"]:
        warnings.append(f"{compile_info['recompiles_in_window']} recompiles happened inside "
                        "the timed window")
    if compile_info["cuda_graphs_recorded_in_window"]:
        warnings.append(f"{compile_info['cuda_graphs_recorded_in_window']} CUDA graphs were "
                        "recorded inside the timed window (a batch shape the warm-up had not "
                        "replayed yet)")
    return warnings


def _warm_up(stepper: _Stepper, spec: MeasureSpec, compiled: bool,
             graphs: GraphRecordings) -> tuple[list[float], int, float]:
    """At least ``warmup_steps`` steps and ``min_warmup_s`` seconds; compiled, also
    until ``settle_steps`` steps in a row compiled nothing new and recorded no CUDA
    graph (up to ``max_warmup_steps``).
    Returns the steps' times, the frames compiled after the first, and the fastest
    step's seeds/s after the first (an optimistic rate, for screening)."""
    times: list[float] = []
    fastest = 0.0
    quiet, frames_after_first = 0, _dynamo_state()[0]
    while True:
        before = _dynamo_state()[0], graphs.count
        took, batch, _ = stepper.step()
        times.append(took)
        after = _dynamo_state()[0], graphs.count
        if len(times) == 1:
            frames_after_first = after[0]
        else:
            fastest = max(fastest, stepper.pipe.task.seeds(batch) / max(took, 1e-9))
        quiet = quiet + 1 if after == before else 0
        enough = len(times) >= spec.warmup_steps and sum(times) >= spec.min_warmup_s and \
            (not compiled or quiet >= spec.settle_steps)
        if enough or len(times) >= spec.max_warmup_steps:
            return times, frames_after_first, fastest


def _inductor_cache_counts() -> dict:
    """Hits and misses of inductor's persistent FX-graph cache in this process."""
    from torch._dynamo.utils import counters

    return {"inductor_cache_hits": counters["inductor"]["fxgraph_cache_hit"],
            "inductor_cache_misses": counters["inductor"]["fxgraph_cache_miss"]}


def _device_memory(pipe: Pipeline) -> dict:
    """The device's memory figures: on CUDA torch's peaks, what the fit check counted
    and what the device has for this trial (within its cap); on CPU the machine's RAM."""
    device = pipe.device
    if device.type != "cuda":
        return {"device_total_bytes": psutil.virtual_memory().total}

    return {"cuda_max_allocated_bytes": torch.cuda.max_memory_allocated(device),
            "cuda_max_reserved_bytes": torch.cuda.max_memory_reserved(device),
            "cuda_covers": "warm-up and window (reset after setup)",
            "device_total_bytes": gpu_room(device)[1], "gpu_fit_bytes": pipe.gpu_fit_bytes}


def _observe(pipe: Pipeline, stepper: _Stepper) -> dict:
    """Reads each knob's effect back from the running system."""
    workers = {}
    for pid in loader_worker_pids(pipe.loader):
        try:
            workers[str(pid)] = sorted(psutil.Process(pid).cpu_affinity())
        except psutil.NoSuchProcess:
            workers[str(pid)] = None
    batch = next(stepper.batches)
    probe = probe_model(pipe, batch)
    return {
        "sampled_edges_by_type": edges_by_type(batch),
        "main_affinity": sorted(os.sched_getaffinity(0)), "main_pid": os.getpid(),
        "worker_affinity": workers,
        "expected_worker_affinity": pipe.worker_cores,
        "num_workers_alive": len(workers),
        "torch_threads": torch.get_num_threads(), "malloc": heap_state(),
        "sampling_backend": pipe.sampling_backend,
        "feature_storage": pipe.feature_storage,
        "batch_shapes": len(stepper.shapes),
        "pad_buckets": sorted(stepper.shapes) if pipe.config.shapes == "padded" else None,
        **probe,
    }


def probe_model(pipe: Pipeline, batch) -> dict:
    """One extra eager training step with hooks on the convs, outside the window:
    the dtype the convs computed in, how many convs ran again in the backward pass
    (= checkpointed layers), and the bytes autograd saved for the backward pass
    (checkpointed layers save only their inputs)."""
    from torch_geometric.nn import MessagePassing
    from torch_geometric.nn.dense import Linear

    convs = [m for m in pipe.eager_model.modules() if isinstance(m, MessagePassing)]
    linears = [m for conv in convs for m in conv.modules() if isinstance(m, (Linear, nn.Linear))]
    calls, dtypes, linear_dtypes = [0], set(), set()

    def count(module, args):  # a pre-hook: recomputation may stop before a post-hook
        calls[0] += 1

    def dtype(module, args, output):
        dtypes.add(str(output.dtype).replace("torch.", ""))

    def linear_dtype(module, args, output):
        linear_dtypes.add(str(output.dtype).replace("torch.", ""))

    saved = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved[0] += _stored_bytes(tensor)
        return tensor

    handles = [conv.register_forward_pre_hook(count) for conv in convs]
    handles += [conv.register_forward_hook(dtype) for conv in convs]
    handles += [lin.register_forward_hook(linear_dtype) for lin in linears]
    try:
        model, pipe.model = pipe.model, pipe.eager_model
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), \
                torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            pipe.train_step(batch)
    finally:
        pipe.model = model
        for handle in handles:
            handle.remove()
    return {"conv_output_dtypes": sorted(dtypes), "conv_linear_dtypes": sorted(linear_dtypes),
            "checkpointed_layers": calls[0] - len(convs),
            "conv_layers": len(convs), "conv_types": sorted({type(c).__name__ for c in convs}),
            "model": pipe.config.model, "saved_tensor_bytes": saved[0],
            "aggregation_ops": profiled_ops(prof, AGGREGATION_OPS),
            "dropout_ops": profiled_ops(prof, DROPOUT_OPS)}


def _stored_bytes(tensor: torch.Tensor) -> int:
    """Bytes a tensor holds: a sparse CSR matrix (``aggregation: sparse``) holds its
    values and indices, not ``numel()`` (rows x columns) entries."""
    if tensor.layout == torch.sparse_csr:
        parts = (tensor.values(), tensor.col_indices(), tensor.crow_indices())
        return sum(p.numel() * p.element_size() for p in parts)
    if tensor.layout != torch.strided:
        return 0  # no other sparse layout is built here
    return tensor.numel() * tensor.element_size()


# The aten ops that aggregate messages (scatter_add_, scatter_reduce_, index_add_, a
# sparse matrix product), and those that draw dropout masks (bernoulli_, random_).
AGGREGATION_OPS = re.compile(r"sparse|scatter|index_add|segment", re.IGNORECASE)
DROPOUT_OPS = re.compile(r"bernoulli|random_|dropout")


def profiled_ops(prof, pattern: re.Pattern) -> list[str]:
    """The aten ops of a profiled step that ``pattern`` matches, read from the
    profile: what ran, not what the config asked for."""
    names = {event.key for event in prof.key_averages()}
    return sorted(n for n in names if n.startswith("aten::") and pattern.search(n))
