"""The candidates of a run that tunes itself: the one-knob changes of its incumbent
(:func:`candidates`), each a :class:`Change`, and the order to try them in
(:func:`by_bottleneck`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.config import TrialConfig
from autotune.env import bf16_matmul_gain, native_bf16
from autotune.errors import AutotuneError
from autotune.pipeline import check_config
from autotune.sampling import resolve_backend
from autotune.topology import STRATEGIES, Topology, affinity_sets, this_machine
from autotune.tuning._spec import TuneSpec

# The knobs a run may change: the same batches of the same seeds through the same
# model and optimizer (a compiled model wraps the same module; padding adds isolated
# zero-feature nodes, which leave the loss and gradients exact). Checkpointing changes
# the model itself, which a run keeps: it is not tried.
NEUTRAL_KNOBS = ("num_workers", "affinity", "sampling_backend", "aggregation",
                 "compile_mode", "shapes")
DTYPE_KNOBS = ("amp_dtype", "feature_dtype")  # the arithmetic: the numerics check's
# With TuneSpec.precision only: the dtypes, and how the built-in model's dropout draws
# its masks (the same law, other random draws: a step's numbers change, not its model)
PRECISION_KNOBS = (*DTYPE_KNOBS, "dropout_masks")
LOADER_KNOBS = ("num_workers", "affinity", "sampling_backend")  # where batches are made
# tried before either side's knobs, where the run may try it: bfloat16 autocast, the
# largest single-knob gain benchmarks/knobs.py measured on a CPU that computes it
# (and on a GPU), larger than what any other knob gave there
FIRST = (("amp_dtype", "bfloat16"),)
# and back to float32 autocast before the other knobs where the incumbent has
# bfloat16's (a fast end kept it): its gain varies most by machine, over 1x on some
# CPUs with avx512_bf16 and under on others (docs/benchmarks.md, knobs.py and
# online.py: where the fast end kept it with its other parts, the run trained on it
# while the aggregation's undo, queued first, took its pairs)
UNDONE_FIRST = (("amp_dtype", "float32"),)
COMPILE_KNOBS = ("compile_mode", "shapes")  # tried last: the dearest
# The one-knob changes that paid alone where they were measured on a CPU (the search's
# prior table, docs/benchmarks.md): bfloat16 autocast and bit dropout masks where the
# run may try them, the sparse aggregation, and no loader workers where the
# incumbent's take the cores its step computes on; and bfloat16 features where the run
# may try them: beside bfloat16 autocast about a tie with float32 features
# (docs/benchmarks.md, online.py's grids), taken with it for one numerics check for
# both, where on their own each candidate pays one. The fast-end candidate makes those of
# them the queue holds at once, first (:func:`fast_end`): the corner one verdict a
# knob reaches only after several, each paid for in windows of the slower incumbent.
FAST_END_CHANGES = (("amp_dtype", "bfloat16"), ("feature_dtype", "bfloat16"),
                    ("aggregation", "sparse"), ("dropout_masks", "bits"))
FAST_END = "fast-end"


@dataclass(frozen=True)
class Change:
    """A candidate as data: the knob it changes, the value it gives it (for
    ``affinity``, the strategy), the config it makes, and its name in the run's
    lines (``num_workers 2 -> 0``)."""

    knob: str
    value: Any
    config: TrialConfig
    label: str

    @classmethod
    def of(cls, config: TrialConfig, knob: str, value: Any, **fields: Any) -> Change:
        """``config`` with ``knob`` set to ``value`` (``fields``: the config's fields
        that carry it, where they are not the knob itself: the affinity's cores)."""
        label = f"{knob} -> {value}" if fields else f"{knob} {getattr(config, knob)} -> {value}"
        return cls(knob, value, config.replace(**(fields or {knob: value})), label)

def candidates(config: TrialConfig, spec: TuneSpec, topology: Topology | None = None,
               masks: bool = True) -> list[Change]:
    """The one-knob changes of ``config`` a run tries, in order, each a valid config:
    loader workers (0, 1, 2 and all cores but one), the cores' affinity (each
    strategy the machine can build, with workers), the sampling backend, the
    aggregation (an eager model), with ``spec.precision`` the AMP dtype (bfloat16 on
    a GPU, or on a CPU that computes it natively and faster than float32 where
    measured, :func:`autotune.env.bf16_matmul_gain`), the feature dtype and, with
    ``masks`` (the run trains a built-in model in its own step), an eager model's
    dropout masks, and last, as ``spec.compile`` says, the compile mode
    (reduce-overhead on a GPU only) and, compiled, the shapes."""
    topology = this_machine() if topology is None else topology
    cores = len(topology.cores)
    changes: list[tuple[str, Any, dict]] = []  # knob, value, and its fields where others
    if not config.gpu_sampling:
        changes += [("num_workers", w, {}) for w in dict.fromkeys((0, 1, 2, cores - 1))
                    if 0 <= w]
        changes += [("affinity", s, dict(zip(("loader_cores", "compute_cores"),
                                             _cores(s, config, topology))))
                    for s in STRATEGIES if _cores(s, config, topology) is not None]
    changes += [("sampling_backend", b, {})
                for b in ("builtin", "pyg")  # not one that resolves to the same sampler
                if _resolved(b) != _resolved(config.sampling_backend)]
    if config.compile_mode == "none":
        changes += [("aggregation", a, {}) for a in ("scatter", "sparse")]
    if spec.compile or spec.compile is None and config.device == "cuda":  # last: the dearest
        modes = ("none", "default") + (("reduce-overhead",) if config.device == "cuda" else ())
        changes += [("compile_mode", m, {}) for m in modes]
        if config.compile_mode != "none":
            changes += [("shapes", s, {}) for s in ("dynamic", "padded")]
    if spec.precision:
        bf16 = ("bfloat16",) if config.device == "cuda" or \
            native_bf16() and bf16_matmul_gain() >= 1 else ()
        changes += [("amp_dtype", d, {}) for d in ("float32", *bf16)]
        changes += [("feature_dtype", d, {}) for d in ("float32", "bfloat16")]
        if masks and config.compile_mode == "none":
            changes += [("dropout_masks", m, {}) for m in ("bernoulli", "bits")]
    out, seen = [], {config.key()}
    for knob, value, fields in changes:
        try:
            change = Change.of(config, knob, value, **fields)
            check_config(change.config)
        except AutotuneError:  # not a config here (a backend this machine lacks, ...)
            continue
        if change.config.key() not in seen:
            seen.add(change.config.key())
            out.append(change)
    return out


def by_bottleneck(changes: list[Change], wait_share: float,
                  cores_taken: float = 0.0) -> list[Change]:
    """``changes`` in the order to try
    them, given the share of the incumbent's step time spent waiting for its batch
    and the share of the machine's cores its loader workers take: a loader change
    can gain at most what the step waits, and what it computes slowed by the workers
    beside it; a model change at most what it computes; so the larger side's knobs go
    first (:func:`loader_first`), after bfloat16 autocast where it is a candidate
    (:data:`FIRST`), or float32's where the incumbent has bfloat16's
    (:data:`UNDONE_FIRST`); compile modes and shapes stay last (a compile costs seconds
    before its first timed step). Stable within a side."""
    first = loader_first(wait_share, cores_taken)

    def rank(change: Change) -> tuple[bool, bool, bool]:
        return change.knob in COMPILE_KNOBS, \
            (change.knob, change.value) not in FIRST + UNDONE_FIRST, \
            (change.knob in LOADER_KNOBS) != first

    return sorted(changes, key=rank)


def loader_first(wait_share: float, cores_taken: float = 0.0) -> bool:
    """Whether a step that waits ``wait_share`` of its time for its batch, its loader
    workers taking ``cores_taken`` of the cores its computing has, tries the loader's
    knobs before the model's: where the loader's side is the larger, the wait plus
    the computing that shares its cores with the workers (on 2 cores, 2 workers
    take them all: fewer workers may give the step its cores back)."""
    return wait_share + (1 - wait_share) * cores_taken > 0.5


def beyond_a_loser(lost: Change, incumbent: TrialConfig, queue: list[Change],
                   wait_share: float | None, cores_taken: float = 0.0) -> list[Change]:
    """The changes of ``queue`` that a candidate ``lost`` (not kept) rules out: where
    it added loader workers to ``incumbent``'s and the incumbent's step is the
    model's (:func:`loader_first` false at its ``wait_share``), the changes to still
    more workers. Workers can gain at most the step's wait, which is small there, and
    each more takes more of the cores the step computes on; each tried costs its
    workers' start and their pages copied on write in the training process while they
    live. None before the queue is ordered (``wait_share`` None)."""
    if lost.knob != "num_workers" or lost.value <= incumbent.num_workers or \
            wait_share is None or loader_first(wait_share, cores_taken):
        return []
    return [c for c in queue if c.knob == "num_workers" and c.value > lost.value]


def workers_gain(wait_share: float, topology: Topology | None = None,
                 handover: float = 0.0) -> float:
    """The most loader workers could gain over a step with none that waits
    ``wait_share`` of its time for its batch: it samples in-process, on one core, for
    that share, while its computing spreads over the machine's ``n`` cores; with the
    sampling beside the computing, the step's work spreads over them all, and with it
    the work a worker adds, its hand-over of each batch (``handover``, as a share of
    the step: :func:`autotune.pipeline.handover_seconds`), so the step takes
    ``1 - w + (w + h) / n`` of its time at best (the training process's first touch
    of the handed-over pages, and its own pages copied on write, only add to that)."""
    cores = max(len((this_machine() if topology is None else topology).cores), 1)
    return 1 / (1 - wait_share + (wait_share + handover) / cores)


def cores_taken(config: TrialConfig, topology: Topology | None = None) -> float:
    """The share of the machine's cores ``config``'s loader workers take (a worker a
    core, at most all of them; those pinned to their own cores take those)."""
    cores = len((this_machine() if topology is None else topology).cores)
    workers = len(config.loader_cores) if config.loader_cores else config.num_workers
    return min(workers / cores, 1.0) if cores else 0.0


def _resolved(backend: str) -> str | None:
    """The sampler ``backend`` runs here (auto: PyG's or the built-in), None where none."""
    try:
        return resolve_backend(backend)
    except AutotuneError:
        return None


def _cores(strategy: str, config: TrialConfig, topology: Topology):
    """``(loader_cores, compute_cores)`` of an affinity strategy for ``config``'s
    workers, or None where the machine cannot build it."""
    if config.num_workers == 0 or topology.why_not(strategy):
        return None
    return affinity_sets(strategy, config.num_workers, topology)


def fast_end(config: TrialConfig, queue: list[Change], cores_taken: float = 0.0
             ) -> Change | None:
    """One candidate that makes together the changes of ``queue`` that paid alone where
    they were measured (:data:`FAST_END_CHANGES` on a CPU, with no loader workers
    where ``config``'s take all the cores), or None where fewer than two of them are
    in the queue (on a GPU: none; the sparse aggregation loses there). Its knob is
    ``fast-end``, its value the knobs it sets; a config this machine cannot run is
    None too."""
    wanted = set(FAST_END_CHANGES) | ({("num_workers", 0)} if cores_taken >= 1 else set())
    chosen = [c for c in queue if c.knob != FAST_END and (c.knob, c.value) in wanted] \
        if config.device == "cpu" else []  # (a fast end queued again: its value a dict)
    if len(chosen) < 2:
        return None
    values = {c.knob: c.value for c in chosen}
    try:
        made = config.replace(**values)
        check_config(made)
    except AutotuneError:
        return None
    return Change(FAST_END, values, made, "fast end: " + ", ".join(c.label for c in chosen))
