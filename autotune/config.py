"""``TrialConfig``: the one record that goes from the search to a trial's worker.

Knobs are what the search varies; pipeline facts (model, sizes, dataset, device,
seed) stay fixed within a study. Every field takes effect in ``pipeline/_build.py``.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal, get_args

from autotune.errors import ConfigError
from autotune.taskinfo import DEFAULT_TASK, TASKS, task_info

CompileMode = Literal["none", "default", "reduce-overhead", "max-autotune",
                      "max-autotune-no-cudagraphs"]
Shapes = Literal["dynamic", "padded"]
AmpDtype = Literal["float32", "bfloat16", "float16"]
SamplingBackend = Literal["builtin", "pyg", "auto"]
PadLadder = Literal["pow2", "geometric"]
Device = Literal["cpu", "cuda"]
ModelName = Literal["sage", "gcn", "gat", "gin"]  # or an import path, see is_import_path
Aggregation = Literal["scatter", "sparse"]
DropoutMasks = Literal["bernoulli", "bits"]
FeaturePlacement = Literal["gpu", "pinned"]
FeatureDtype = Literal["float32", "bfloat16"]
TaskName = Literal["node", "link", "graph"]  # the names of autotune.taskinfo.TASKS
TemporalStrategy = Literal["uniform", "last"]  # PyG's temporal_strategy

COMPILE_MODES: tuple[str, ...] = get_args(CompileMode)
SHAPES: tuple[str, ...] = get_args(Shapes)
AMP_DTYPES: tuple[str, ...] = get_args(AmpDtype)
SAMPLING_BACKENDS: tuple[str, ...] = get_args(SamplingBackend)
PAD_LADDERS: tuple[str, ...] = get_args(PadLadder)
DEVICES: tuple[str, ...] = get_args(Device)
MODELS: tuple[str, ...] = get_args(ModelName)
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
DROPOUT_MASKS: tuple[str, ...] = get_args(DropoutMasks)
FEATURE_PLACEMENTS: tuple[str, ...] = get_args(FeaturePlacement)
FEATURE_DTYPES: tuple[str, ...] = get_args(FeatureDtype)
TEMPORAL_STRATEGIES: tuple[str, ...] = get_args(TemporalStrategy)

GAT_HEADS = 4
# moved to autotune.export, the export file's module (its writer and its reader):
# still reachable here, with a FutureWarning
_MOVED = ("CONFIG_FORMAT", "Export", "read_export", "load_config")


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'autotune.config' has no attribute {name!r}")
    import importlib
    import warnings

    also = " (or from autotune)" if name == "load_config" else ""
    warnings.warn(f"autotune.config.{name} moved to autotune.export; import it from "
                  f"there{also}", FutureWarning, stacklevel=2)
    return getattr(importlib.import_module("autotune.export"), name)


@dataclass(frozen=True)
class TrialConfig:
    """One pipeline configuration. Defaults follow PyG's examples/reddit.py
    (2-layer GraphSAGE, 256 hidden, Adam lr 0.01, fanout [25, 10], batch 1024)."""

    # knobs
    batch_size: int = 1024
    num_neighbors: tuple[int, ...] = (25, 10)
    num_workers: int = 0
    prefetch_factor: int = 2
    loader_cores: tuple[int, ...] | None = None
    compute_cores: tuple[int, ...] | None = None
    compile_mode: CompileMode = "none"
    shapes: Shapes = "dynamic"
    pad_ladder: PadLadder = "pow2"
    amp_dtype: AmpDtype = "float32"
    checkpointing: bool = False
    sampling_backend: SamplingBackend = "auto"
    gpu_sampling: bool = False
    # where gpu_sampling keeps the features: on the GPU, or in pinned host memory,
    # each batch's rows gathered from the GPU (a graph whose features do not fit)
    feature_placement: FeaturePlacement = "gpu"
    # the dtype the loader stores and gathers features in (a batch's x is float32
    # again before the model): bfloat16 halves the gather's bytes, and the features'
    # GPU (or pinned) memory with gpu_sampling
    feature_dtype: FeatureDtype = "float32"
    aggregation: Aggregation = "scatter"
    # how the built-in models draw dropout masks: torch's bernoulli_, or 16-bit draws
    # cut from raw random words (the same masks in law, a fraction of the time on CPU)
    dropout_masks: DropoutMasks = "bernoulli"
    # fanouts of named edge types of a heterogeneous graph ("src__rel__dst": [k, ...]);
    # the others take num_neighbors
    edge_fanouts: dict[str, tuple[int, ...]] | None = None
    recompile_limit: int | None = None  # torch._dynamo's per frame; None: torch's (8)
    # pipeline facts
    task: TaskName = DEFAULT_TASK
    # temporal sampling (node tasks): the node attribute holding times, and how
    # neighbours no later than the seed are drawn; it changes what trains, so a fact
    time_attr: str | None = None
    temporal_strategy: TemporalStrategy = "uniform"
    model: ModelName | str = "sage"
    hidden_channels: int = 256
    num_layers: int = 2
    lr: float = 0.01
    dropout: float = 0.5
    device: Device = "cpu"
    seed: int = 0

    def __post_init__(self) -> None:
        _coerce(self, "num_neighbors", tuple(self.num_neighbors)
                if isinstance(self.num_neighbors, (list, tuple)) else self.num_neighbors)
        for name in ("loader_cores", "compute_cores"):
            value = getattr(self, name)
            if isinstance(value, list):
                _coerce(self, name, tuple(value))
        if isinstance(self.edge_fanouts, dict):
            _coerce(self, "edge_fanouts", {k: tuple(v) if isinstance(v, list) else v
                                           for k, v in self.edge_fanouts.items()})
        self._validate()

    def _validate(self) -> None:
        for name, check in FIELD_CHECKS.items():
            check(name, getattr(self, name))
        if self.recompile_limit is not None:
            _positive_int("recompile_limit", self.recompile_limit)
        fanout = self.num_neighbors
        if len(fanout) != self.num_layers:
            raise ConfigError(f"num_neighbors needs one entry per layer: {self.num_layers} "
                              f"layers (got {len(fanout)} entries {list(fanout)})")
        self._validate_edge_fanouts()
        if self.gpu_sampling and (self.device != "cuda" or self.num_workers
                                  or self.sampling_backend != "builtin"):
            raise ConfigError("gpu_sampling needs device cuda, num_workers 0 and sampling_backend "
                              f"builtin (got device {self.device}, num_workers "
                              f"{self.num_workers}, sampling_backend {self.sampling_backend})")
        if self.feature_placement == "pinned" and not self.gpu_sampling:
            raise ConfigError("feature_placement pinned is where gpu_sampling keeps the "
                              "features; without it every batch is copied from the host "
                              "anyway: use gpu_sampling true or feature_placement gpu")
        if self.model == "gat" and self.hidden_channels % GAT_HEADS:
            raise ConfigError(f"model gat splits hidden_channels over {GAT_HEADS} heads; use a "
                              f"multiple of {GAT_HEADS} (got {self.hidden_channels})")
        self._validate_aggregation()
        if self.dropout_masks == "bits" and self.model not in MODELS:
            raise ConfigError(f"dropout_masks 'bits' is how the built-in models ({', '.join(MODELS)}) "
                              f"draw dropout masks; a user's model draws its own (got model "
                              f"{self.model}); use dropout_masks bernoulli")
        if self.time_attr is not None and not task_info(self.task).temporal:
            raise ConfigError(f"time_attr samples node batches in time (got task {self.task} "
                              "with time_attr); leave it out, or use the temporal loaders "
                              "of autotune.sampling directly")
        if self.shapes == "padded" and self.compile_mode == "none":
            raise ConfigError("shapes 'padded' only helps a compiled model; set compile_mode "
                              "(got compile_mode 'none')")
        if self.loader_cores is not None and self.num_workers == 0:
            raise ConfigError(f"loader_cores needs num_workers > 0 (got loader_cores "
                              f"{list(self.loader_cores)} with num_workers 0)")

    def _validate_edge_fanouts(self) -> None:
        if self.edge_fanouts is None:
            return
        if not isinstance(self.edge_fanouts, dict) or not self.edge_fanouts:
            raise ConfigError("edge_fanouts must map edge types 'src__rel__dst' to fanout "
                              f"lists (got {self.edge_fanouts!r})")
        for edge_type, fanout in self.edge_fanouts.items():
            if not (isinstance(edge_type, str) and edge_type.count("__") == 2):
                raise ConfigError(f"edge_fanouts keys are edge types 'src__rel__dst' (got "
                                  f"{edge_type!r})")
            if not (isinstance(fanout, tuple) and len(fanout) == self.num_layers and all(
                    isinstance(k, int) and (k >= 0 or k == -1) for k in fanout)):
                raise ConfigError(f"edge_fanouts[{edge_type}] needs one int >= 0 or -1 per "
                                  f"layer: {self.num_layers} layers (got {fanout!r})")

    def _validate_aggregation(self) -> None:
        if self.aggregation != "sparse":
            return
        if self.model in ("gcn", "gat"):
            # GCNConv adds self-loops to a torch.sparse adjacency its own way and GATConv
            # attends per edge: neither gives scatter's loss (1e-4 apart on a test graph).
            raise ConfigError(f"aggregation 'sparse' is exact for model sage and gin and for a "
                              f"user's model, not {self.model} (got model {self.model}); use "
                              "aggregation scatter")
        if self.compile_mode != "none":
            raise ConfigError("aggregation 'sparse' runs eagerly: torch.compile breaks the "
                              "graph at each torch.sparse product (3 breaks in a 2-layer SAGE) "
                              f"(got compile_mode {self.compile_mode}); use compile_mode none")

    def replace(self, **changes: Any) -> TrialConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
            if isinstance(value, dict):
                out[f.name] = {k: list(v) for k, v in value.items()}
        return out

    def meaningful(self) -> dict[str, Any]:
        """:meth:`to_dict` without the knobs that do nothing given the others (what an
        export shows): GPU sampling and where it keeps the features off CUDA, the
        feature placement without GPU sampling, the pad ladder without padded shapes,
        the prefetch factor without loader workers, the recompile limit without
        compiling. Read back, each takes its default, which does nothing either."""
        idle = set()
        if self.device != "cuda":
            idle |= {"gpu_sampling", "feature_placement"}
        if not self.gpu_sampling:
            idle.add("feature_placement")
        if self.shapes != "padded":
            idle.add("pad_ladder")
        if self.num_workers == 0:
            idle.add("prefetch_factor")
        if self.compile_mode == "none":
            idle.add("recompile_limit")
        return {k: v for k, v in self.to_dict().items() if k not in idle}

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str = "config") -> TrialConfig:
        """From a mapping of knob names to values; an older export's or study's names
        (:data:`RENAMED_KNOBS`) are read as today's."""
        if not isinstance(values, dict):
            raise ConfigError(f"{source} must be a mapping of knob names to values "
                              f"(got {type(values).__name__})")
        values = renamed_knobs(values)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{source} has unknown keys {', '.join(unknown)}; "
                              f"allowed: {', '.join(sorted(known))}")
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"{source}: {exc}") from exc

    def key(self) -> str:
        """A stable identity of the measured configuration, for de-duplication."""
        return repr(sorted(self.to_dict().items()))


# Knobs that an older autotune stored under another name: old name -> today's. The one
# map that exports, stored trial configs, stored spaces and queued params are read through.
RENAMED_KNOBS = {"sampler": "sampling_backend"}  # the neighbour-sampling backend


def renamed_knobs(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (knob name -> anything) with older names in today's."""
    if not RENAMED_KNOBS.keys() & values.keys():
        return values
    return {RENAMED_KNOBS.get(k, k): v for k, v in values.items()}


_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def is_import_path(text: object) -> bool:
    """``package.module:name``, the way a user names their own model factory or
    dataset function (as entry points do)."""
    return isinstance(text, str) and _IMPORT_PATH.match(text) is not None


def _coerce(config: TrialConfig, name: str, value: Any) -> None:
    object.__setattr__(config, name, value)


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive int (got {value!r})")


def _non_negative_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} must be an int >= 0 (got {value!r})")


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)} (got {value!r})")


def _one_of(allowed: tuple[str, ...]) -> Callable[[str, Any], None]:
    return lambda name, value: _choice(name, value, allowed)


def _fanout(name: str, value: Any) -> None:
    if not (isinstance(value, tuple) and value and all(
            isinstance(k, int) and not isinstance(k, bool) and (k > 0 or k == -1)
            for k in value)):
        raise ConfigError(f"{name} must be a non-empty list of positive ints or -1 "
                          f"(got {list(value) if isinstance(value, tuple) else value!r})")


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false (got {value!r})")


def _model(name: str, value: Any) -> None:
    if value not in MODELS and not is_import_path(value):
        raise ConfigError(f"{name} must be one of {', '.join(MODELS)} or an import path "
                          f"'package.module:factory' (got {value!r})")


def _rate(name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
        raise ConfigError(f"{name} must be a positive number (got {value!r})")


def _dropout(name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)
            and 0 <= value < 1):
        raise ConfigError(f"{name} must be in [0, 1) (got {value!r})")


def _cores(name: str, value: Any) -> None:
    if value is None:
        return
    if not (isinstance(value, tuple) and value
            and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value)):
        raise ConfigError(f"{name} must be null or a non-empty list of core ids "
                          f"(got {value!r})")
    if len(set(value)) != len(value):
        raise ConfigError(f"{name} lists a core twice (got {list(value)})")


def _attribute_name(name: str, value: Any) -> None:
    if value is not None and not (isinstance(value, str) and value.isidentifier()):
        raise ConfigError(f"{name} must be null or an attribute name such as 'time' "
                          f"(got {value!r})")


# The checks of each field on its own, in TrialConfig's order; those between fields
# (a fanout per layer, padded shapes need a compiled model, ...) are TrialConfig's.
FIELD_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "batch_size": _positive_int, "num_neighbors": _fanout, "num_workers": _non_negative_int,
    "prefetch_factor": _positive_int, "loader_cores": _cores, "compute_cores": _cores,
    "compile_mode": _one_of(COMPILE_MODES), "shapes": _one_of(SHAPES),
    "pad_ladder": _one_of(PAD_LADDERS), "amp_dtype": _one_of(AMP_DTYPES),
    "checkpointing": _flag, "sampling_backend": _one_of(SAMPLING_BACKENDS), "gpu_sampling": _flag,
    "feature_placement": _one_of(FEATURE_PLACEMENTS),
    "feature_dtype": _one_of(FEATURE_DTYPES), "aggregation": _one_of(AGGREGATIONS), "dropout_masks": _one_of(DROPOUT_MASKS),
    "task": _one_of(TASKS), "model": _model,
    "hidden_channels": _positive_int, "num_layers": _positive_int, "lr": _rate,
    "dropout": _dropout, "device": _one_of(DEVICES), "time_attr": _attribute_name,
    "temporal_strategy": _one_of(TEMPORAL_STRATEGIES),
}


def check_field(name: str, value: Any) -> None:
    """One field's own checks (:data:`FIELD_CHECKS`), as TrialConfig makes them: what
    every value of a search space's knob passes before the first trial. ``value`` as
    TrialConfig holds it (a fanout a tuple)."""
    check = FIELD_CHECKS.get(name)
    if check is not None:
        check(name, value)


def fit_fanout(fanout: tuple[int, ...], layers: int) -> tuple[int, ...]:
    """A fanout fitted to ``layers`` layers: cut, or extended with its last entry
    ([25, 10] for 3 layers is [25, 10, 10])."""
    fanout = tuple(fanout)
    return fanout[:layers] + fanout[-1:] * max(0, layers - len(fanout))


def with_model(config: TrialConfig, *, model: str | None = None, hidden: int | None = None,
               layers: int | None = None) -> TrialConfig:
    """``config`` with the model facts that were given replaced; a new layer count
    fits the fanout to it (see :func:`fit_fanout`)."""
    changes: dict[str, Any] = {}
    if model is not None:
        changes["model"] = model
    if hidden is not None:
        changes["hidden_channels"] = hidden
    if layers is not None:
        changes.update(num_layers=layers, num_neighbors=fit_fanout(config.num_neighbors, layers))
    return config.replace(**changes) if changes else config


def one_line(exc: Exception | str) -> str:
    """An error's text on one line, its whitespace runs as single spaces."""
    return re.sub(r"\s+", " ", str(exc)).strip()


def _cores(cores) -> str:
    """A core set as ranges: ``1``, ``0-3``, ``0,2``."""
    ordered, runs = sorted(cores), []
    for core in ordered:
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def short(config: TrialConfig | dict) -> str:
    """A config (or its dict) in one short line: batch, fanout, workers/affinity, compile/shapes,
    dtype, checkpointing, sampling backend (``pin1``: the loader workers pinned to core 1,
    the model to the others; ``@gpu`` with GPU sampling, ``@gpu+pinned`` with
    its features in pinned host memory), ``+spmm`` for the
    sparse aggregation, ``+bits`` for dropout masks from random bits and ``+xbf16``
    for features stored in bfloat16 (see the README's "Reading a config code"); a named edge
    type's fanout follows the shared one as ``REL[k, ...]``. A graph-level config
    (task graph) has no fanout and no sampling backend: ``graphs`` stands for both."""
    if isinstance(config, TrialConfig):
        config = config.to_dict()
    affinity = f"pin{_cores(config['loader_cores'])}" if config.get("loader_cores") else "-"
    shapes = "pad" if config.get("shapes") == "padded" else "dyn"
    whole = task_info(config).whole_graphs
    backend = ("graphs" if whole else config["sampling_backend"]) + \
        ("@gpu" if config.get("gpu_sampling") else "") + \
        ("+pinned" if config.get("feature_placement") == "pinned" else "") + \
        ("+spmm" if config.get("aggregation") == "sparse" else "") + \
        ("+bits" if config.get("dropout_masks") == "bits" else "") + \
        ("+xbf16" if config.get("feature_dtype") == "bfloat16" else "")
    fanout = "" if whole else f"f{list(config['num_neighbors'])}" + "".join(
        f" {edge_type.split('__')[1]}{list(k)}"  # a named edge type's own fanout
        for edge_type, k in (config.get("edge_fanouts") or {}).items()) + " "
    return (f"b{config['batch_size']} {fanout}"
            f"w{config['num_workers']}/{affinity} {config['compile_mode']}/{shapes} "
            f"{config['amp_dtype'].replace('float', 'f')} "
            f"ck{'+' if config['checkpointing'] else '-'} {backend}")
