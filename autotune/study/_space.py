"""Search spaces: YAML files in ``search_spaces/`` turned into Optuna suggestions.

:func:`suggest_config` is the only code that calls ``trial.suggest_*``. The schema
is documented in ``search_spaces/README.md``.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from autotune.config import (
    AGGREGATIONS,
    AMP_DTYPES,
    COMPILE_MODES,
    DROPOUT_MASKS,
    FEATURE_DTYPES,
    FEATURE_PLACEMENTS,
    MODELS,
    PAD_LADDERS,
    RENAMED_KNOBS,
    SAMPLING_BACKENDS,
    SHAPES,
    TrialConfig,
    check_field,
    fit_fanout,
)
from autotune.env import parse_fraction
from autotune.errors import ConfigError, SearchSpaceError
from autotune.taskinfo import DEFAULT_TASK, TASKS
from autotune.topology import STRATEGIES, Topology, affinity_sets, this_machine


def _spaces_dir() -> Path:
    """The shipped spaces: the package ``autotune.search_spaces`` (the repository's
    ``search_spaces/`` folder, installed as package data by a wheel too)."""
    import importlib.util

    spec = importlib.util.find_spec("autotune.search_spaces")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(__file__).resolve().parents[2] / "search_spaces"  # a bare checkout


SPACES_DIR = _spaces_dir()
AFFINITY_STRATEGIES = STRATEGIES
KNOBS = ("batch_size", "num_neighbors", "num_workers", "prefetch_factor", "affinity",
         "compile_mode", "shapes", "pad_ladder", "amp_dtype", "checkpointing", "sampling_backend",
         "gpu_sampling", "feature_placement", "feature_dtype", "aggregation", "dropout_masks")
FIXED = ("model", "hidden_channels", "num_layers", "lr", "dropout", "seed", "recompile_limit",
         "task", "time_attr", "temporal_strategy")
# A heterogeneous graph's fanout of one edge type, searched apart from the shared
# num_neighbors: a knob named "num_neighbors.<src>__<rel>__<dst>".
EDGE_FANOUT = "num_neighbors."
TOP_LEVEL = ("description", "knobs", "fixed", "precision")
# What each categorical knob may take (None: any value TrialConfig accepts).
ALLOWED: dict[str, tuple | None] = {
    "batch_size": None, "num_neighbors": None, "affinity": AFFINITY_STRATEGIES,
    "compile_mode": COMPILE_MODES, "shapes": SHAPES, "pad_ladder": PAD_LADDERS,
    "amp_dtype": AMP_DTYPES, "checkpointing": (False, True), "sampling_backend": SAMPLING_BACKENDS,
    "num_workers": None, "prefetch_factor": None, "gpu_sampling": (False, True),
    "aggregation": AGGREGATIONS, "dropout_masks": DROPOUT_MASKS,
    "feature_placement": FEATURE_PLACEMENTS, "feature_dtype": FEATURE_DTYPES,
}
INT_RANGE_KNOBS = ("batch_size", "num_workers", "prefetch_factor")
# The knobs PyG's examples/reddit.py fixes: where its value lies outside the space,
# the baseline is still measured (the reference of every speed-up) but never proposed.
BASELINE_KNOBS = ("batch_size", "num_neighbors", "num_workers", "affinity", "compile_mode",
                  "amp_dtype", "checkpointing")
# Of those, the ones the prior rows take from the space where the baseline's value is
# outside it (compile stays off in every row, and affinity goes with the workers).
FITTED_KNOBS = ("batch_size", "num_neighbors", "num_workers", "amp_dtype", "checkpointing")
# Left out on CPU: CUDA graphs need a GPU; float16 autocast on CPU is slow and partial.
CPU_EXCLUDED = {"compile_mode": ("reduce-overhead", "default"),
                "amp_dtype": ("float16", "bfloat16"),
                "gpu_sampling": (True, False)}


@dataclass(frozen=True)
class Knob:
    """One knob: categorical ``choices``, or an int range ``low..high`` (``step``, ``log``)."""

    name: str
    choices: tuple | None = None
    low: int | None = None
    high: int | None = None
    step: int = 1
    log: bool = False

    @property
    def pinned(self) -> bool:
        if self.choices is not None:
            return len(self.choices) == 1
        return self.low == self.high

    def contains(self, value: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        return isinstance(value, int) and self.low <= value <= self.high

    def widened(self, value: Any) -> Knob:
        """This knob, extended to hold ``value`` (the baseline must be a point of it)."""
        if self.contains(value):
            return self
        if self.choices is not None:
            return Knob(self.name, (*self.choices, value))
        return Knob(self.name, None, min(self.low, value), max(self.high, value), 1, self.log)

    def nearest(self, value: Any) -> Any:
        """The knob's own value nearest to ``value``: a range's bound, the closest
        number (a fanout: the closest per layer, summed), else the first choice."""
        if self.choices is None:
            return min(max(value, self.low), self.high)

        def distance(choice: Any) -> float:
            if isinstance(choice, (int, float)) and not isinstance(choice, bool) and \
                    isinstance(value, (int, float)):
                return abs(choice - value)
            if isinstance(choice, tuple) and isinstance(value, tuple) and \
                    len(choice) == len(value):
                return sum(abs(c - v) for c, v in zip(choice, value))
            return float("inf")
        return min(self.choices, key=distance)  # ties and non-numbers: the first

    def to_dict(self) -> dict:
        if self.choices is not None:
            return {"choices": [list(c) if isinstance(c, tuple) else c for c in self.choices]}
        return {"low": self.low, "high": self.high, "step": self.step, "log": self.log}


@dataclass(frozen=True)
class SearchSpace:
    """A loaded space: its knobs, its fixed pipeline facts and where it came from."""

    name: str
    knobs: dict[str, Knob]
    fixed: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    notes: tuple[str, ...] = ()
    # The baseline's values the file's knobs do not hold, each with the file's
    # nearest value (the prior rows take those of FITTED_KNOBS).
    outside: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    precision: float | None = None  # the precision it states for its trials, if any

    def to_dict(self) -> dict:
        return {"name": self.name, "knobs": {k: v.to_dict() for k, v in self.knobs.items()},
                "fixed": dict(self.fixed)}

    @property
    def pinned(self) -> bool:
        return all(knob.pinned for knob in self.knobs.values())

    def size(self) -> int:
        """How many configs it holds at most: the product of its knobs' sizes (a knob
        that is inactive for some values, such as affinity without loader workers,
        makes the true count smaller)."""
        return math.prod(len(k.choices) if k.choices is not None else
                         (k.high - k.low) // k.step + 1 for k in self.knobs.values())

    def baseline_outside(self) -> dict[str, Any]:
        """The baseline's values the knobs do not hold, as a trial stores them."""
        return {name: _thaw(was) for name, (was, _) in self.outside.items()}

    def widened(self) -> SearchSpace:
        """This space with every knob extended to hold the baseline's value: the space
        of a study made before autotune kept to the space written (such a study goes on
        in it, as Optuna's distributions cannot change within a study)."""
        knobs = {name: knob.widened(self.outside[name][0]) if name in self.outside else knob
                 for name, knob in self.knobs.items()}
        return replace(self, knobs=knobs)

    def baseline(self, base: TrialConfig) -> TrialConfig:
        """``base`` (the reddit example) with this space's fixed facts, and the first
        value of the knobs the example does not define (sampler, prefetch_factor)."""
        layers = self.fixed.get("num_layers", base.num_layers)
        values = {**fitted(base, layers).to_dict(), **self.fixed}
        for name in ("sampling_backend", "prefetch_factor"):
            knob = self.knobs.get(name)
            if knob is not None:
                values[name] = knob.choices[0] if knob.choices is not None else knob.low
        return TrialConfig(**values)


def resolve_space_path(name_or_path: str) -> Path:
    """A space by file name in ``search_spaces/`` (``quick`` or ``quick.yaml``) or a path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    candidate = SPACES_DIR / (name_or_path if path.suffix else f"{name_or_path}.yaml")
    if candidate.exists():
        return candidate
    import difflib

    shipped = sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))
    near = difflib.get_close_matches(name_or_path, shipped, n=1)
    raise SearchSpaceError(f"search space {name_or_path!r} not found; use a file path or one "
                           f"of {', '.join(shipped)}"
                           + (f" (did you mean {near[0]!r}?)" if near else ""))


def load_space(space: str | dict, *, device: str = "cpu", cores: int | None = None,
               baseline: TrialConfig | None = None, topology: Topology | None = None,
               facts: dict[str, Any] | None = None) -> SearchSpace:
    """Reads and checks a space: a shipped space's name, a YAML path, or a dict of the
    same schema (named ``custom``). On CPU, choices that need a GPU are left out (or
    downgraded) with a note, as are affinity strategies this machine's topology cannot
    build; with ``baseline``, the values it has that the knobs do not are noted
    (``outside``): the space itself stays as written. ``facts`` (model,
    hidden_channels, num_layers from the command line) override the file's ``fixed``;
    a new layer count fits every fanout choice to it, with a note."""
    if isinstance(space, dict):
        path, blob = Path("custom"), space
    else:
        path = resolve_space_path(space)
        blob = _read_yaml(path)
    if not isinstance(blob, dict):
        raise SearchSpaceError(f"search space '{path}' must be a mapping with 'knobs' "
                               f"(got {type(blob).__name__})")
    _unknown(path, "top-level", blob, TOP_LEVEL)
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    knobs = _parse_knobs(path, blob.get("knobs"), cores)
    fixed = blob.get("fixed") or {}
    if not isinstance(fixed, dict):
        raise SearchSpaceError(f"search space '{path}': 'fixed' must be a mapping")
    _unknown(path, "fixed", fixed, FIXED)
    notes: list[str] = []
    if facts:
        fixed = {**fixed, **facts}
        if "num_layers" in facts:
            for name in ["num_neighbors"] + [k for k in knobs if _edge_knob(k)]:
                knobs[name] = _fit_fanouts(path, knobs.get(name), facts["num_layers"], notes,
                                           name)
    if baseline is not None and "num_layers" in fixed:
        baseline = fitted(baseline, fixed["num_layers"])
    knobs = _runnable(path, knobs, fixed, device, topology or this_machine(), notes)
    outside = _outside(knobs, baseline) if baseline is not None else {}
    if outside:
        notes.append(_outside_note(outside))
    space = SearchSpace(path.stem, knobs, fixed, str(blob.get("description", "")), tuple(notes),
                        outside, _stated_precision(path, blob.get("precision")))
    _check_fixed(path, space)
    return space


def _runnable(path: Path, knobs: dict[str, Knob], fixed: dict[str, Any], device: str,
              topology: Topology, notes: list[str]) -> dict[str, Knob]:
    """The knobs less what cannot run here, each cut noted: the sampling knobs of a
    task that batches whole graphs, the GPU-only choices on CPU, the aggregations and
    dropout masks the model refuses, the affinities this machine cannot build."""
    info = TASKS.get(fixed.get("task") or DEFAULT_TASK)  # a wrong name: _check_fixed says
    if info is not None and info.whole_graphs:
        knobs = _whole_graph_knobs(path, knobs, notes)
    if device == "cpu":
        knobs = _cpu_only(path, knobs, notes)
    if "aggregation" in knobs:
        knobs["aggregation"] = _model_aggregations(path, knobs["aggregation"], fixed, notes)
    if "dropout_masks" in knobs:
        knobs["dropout_masks"] = _model_dropout_masks(path, knobs["dropout_masks"], fixed,
                                                      notes)
    if "affinity" in knobs:
        knobs["affinity"] = _buildable(path, knobs["affinity"], topology, notes)
    return knobs


def _outside(knobs: dict[str, Knob], baseline: TrialConfig) -> dict[str, tuple[Any, Any]]:
    """The baseline's values the knobs do not hold, each with the knob's nearest (a
    per-edge-type knob is compared with the baseline's shared fanout)."""
    outside = {}
    for name, knob in knobs.items():
        value = _baseline_value(baseline, name) if name in BASELINE_KNOBS else \
            baseline.num_neighbors if _edge_knob(name) else None
        if value is not None and not knob.contains(value):
            outside[name] = (value, knob.nearest(value))
    return outside


def _model_dropout_masks(path: Path, knob: Knob, fixed: dict[str, Any],
                         notes: list[str]) -> Knob:
    """``bits`` is how the built-in models draw masks: left out, with a note, for a
    user's model, which draws its own."""
    model = fixed.get("model", TrialConfig.model)
    if model in MODELS or "bits" not in knob.choices:
        return knob
    notes.append(f"{path.name}: dropout_masks bits left out: model {model} draws its own "
                 "dropout masks")
    return Knob("dropout_masks", tuple(c for c in knob.choices if c != "bits") or
                ("bernoulli",))


def _stated_precision(path: Path, value: Any) -> float | None:
    """A space's ``precision:`` (3% or 0.03): its trials' target precision, unless the
    search is given one."""
    if value is None:
        return None
    try:
        return parse_fraction(value)
    except (TypeError, ValueError):
        raise SearchSpaceError(f"search space '{path}': precision must be a fraction in "
                               f"(0, 1) such as 5% or 0.05 (got {value!r})") from None


SAMPLING_KNOBS = ("num_neighbors", "sampling_backend", "gpu_sampling")  # act on neighbour sampling
# act on the node features a sampled batch gathers from the whole graph
FEATURE_KNOBS = ("feature_placement", "feature_dtype")


def _whole_graph_knobs(path: Path, knobs: dict[str, Knob], notes: list[str]
                       ) -> dict[str, Knob]:
    """A graph-level study batches whole graphs: its fanout, sampler and feature
    knobs would change nothing, so they are left out, with a note."""
    dropped = [name for name in knobs
               if name in SAMPLING_KNOBS + FEATURE_KNOBS or _edge_knob(name)]
    if dropped:
        notes.append(f"{path.name}: {', '.join(dropped)} left out: task graph batches whole "
                     "graphs, nothing is sampled or gathered")
    return {name: knob for name, knob in knobs.items() if name not in dropped}


def _outside_note(outside: dict[str, tuple[Any, Any]]) -> str:
    values = ", ".join(f"{name} {_thaw(was)}" for name, (was, _) in outside.items())
    fitted = ", ".join(f"{name} {_thaw(near)}" for name, (_, near) in outside.items()
                       if name in FITTED_KNOBS)
    rows = f", and the prior rows take the space's nearest values ({fitted})" if fitted else ""
    return (f"the baseline (PyG's examples/reddit.py) has {values}, outside this space: it "
            f"is measured as the reference for speed-ups but never proposed, exported or "
            f"on the front{rows}")


def _model_aggregations(path: Path, knob: Knob, fixed: dict[str, Any],
                        notes: list[str]) -> Knob:
    """The aggregations the study's model takes: ``sparse`` is left out, with a note,
    for a model that refuses it (gcn, gat); a space that offers nothing else is an
    error."""
    model = fixed.get("model", TrialConfig.model)
    try:
        TrialConfig(model=model, aggregation="sparse")
        return knob
    except ConfigError as exc:
        if "sparse" not in knob.choices:
            return knob
        kept = tuple(c for c in knob.choices if c != "sparse")
        if not kept:
            raise SearchSpaceError(f"search space '{path}', knob 'aggregation': {exc}") from exc
        notes.append(f"{path.name}: aggregation sparse left out: model {model} does not take "
                     "it exactly")
        return Knob("aggregation", kept)


def _read_yaml(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SearchSpaceError(f"search space '{path}' is not valid YAML: "
                               f"{' '.join(str(exc).split())}") from exc


def _parse_knobs(path: Path, raw: Any, cores: int) -> dict[str, Knob]:
    if not isinstance(raw, dict) or not raw:
        raise SearchSpaceError(f"search space '{path}': 'knobs' must be a non-empty mapping")
    _unknown(path, "knob", {k: v for k, v in raw.items() if not _edge_knob(k)}, KNOBS)
    knobs = {name: _parse_knob(path, name, spec, cores) for name, spec in raw.items()}
    workers = knobs.get("num_workers")
    most = None
    if workers is not None:
        most = max(workers.choices) if workers.choices is not None else workers.high
    if most is not None and most > cores:
        raise SearchSpaceError(f"search space '{path}', knob 'num_workers': {most} workers but "
                               f"this machine offers {cores} cores; use at most {cores} (or "
                               "high: cores)")
    return knobs


def _unknown(path: Path, where: str, blob: dict, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(blob) - set(allowed))
    if unknown and RENAMED_KNOBS.get(unknown[0]) in allowed:
        raise SearchSpaceError(f"search space '{path}': {where} key {unknown[0]!r} is now "
                               f"called {RENAMED_KNOBS[unknown[0]]!r}; rename it")
    if unknown:
        raise SearchSpaceError(f"search space '{path}': unknown {where} key {unknown[0]!r}; "
                               f"allowed: {', '.join(allowed)}")


def _parse_knob(path: Path, name: str, spec: Any, cores: int) -> Knob:
    where = f"search space '{path}', knob {name!r}"
    if not isinstance(spec, dict):
        spec = {"value": spec}
    _unknown(path, f"{name!r} field", spec, ("value", "choices", "low", "high", "step", "log"))
    if "value" in spec:
        choices = [spec["value"]]
    elif "choices" in spec:
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise SearchSpaceError(f"{where}: 'choices' must be a non-empty list (got {choices!r})")
    elif "low" in spec or "high" in spec:
        return _parse_range(where, name, spec, cores)
    else:
        raise SearchSpaceError(f"{where}: give 'value', 'choices' or 'low'/'high'")
    choices = [_freeze(c) for c in choices]
    if name == "num_neighbors" or _edge_knob(name):
        least = 0 if _edge_knob(name) else 1  # an edge type may be left unsampled
        bad = [c for c in choices if not (isinstance(c, tuple) and c and all(
            isinstance(k, int) and not isinstance(k, bool) and (k >= least or k == -1)
            for k in c))]
        if bad:
            raise SearchSpaceError(f"{where}: {_thaw(bad[0])!r} is not a fanout; use a list of "
                                   f"ints >= {least} or -1, one per layer, e.g. [25, 10]")
    elif any(isinstance(c, tuple) for c in choices):
        raise SearchSpaceError(f"{where}: choices must be single values (got {_thaw(choices)!r})")
    allowed = None if _edge_knob(name) else ALLOWED[name]
    bad = [c for c in choices if allowed is not None and c not in allowed]
    if bad:
        raise SearchSpaceError(f"{where}: {bad[0]!r} is not allowed; use "
                               f"{', '.join(map(str, allowed))}")
    _check_values(where, name, choices)
    if len(set(choices)) != len(choices):
        raise SearchSpaceError(f"{where}: a choice is listed twice (got {choices})")
    return Knob(name, tuple(choices))


def _check_values(where: str, name: str, values: list) -> None:
    """Every value of the knob through TrialConfig's own checks of its field, before
    anything is created (a trial would otherwise fail on it mid-search)."""
    for value in values:
        try:
            check_field(name, value)
        except ConfigError as exc:
            raise SearchSpaceError(f"{where}: {_thaw(value)!r} is not a valid value: "
                                   f"{exc}") from None


def _edge_knob(name: str) -> bool:
    """Whether ``name`` is a per-edge-type fanout knob (``num_neighbors.a__rel__b``)."""
    return name.startswith(EDGE_FANOUT) and name[len(EDGE_FANOUT):].count("__") == 2


def edge_knobs(space: SearchSpace) -> dict[str, Knob]:
    """The space's per-edge-type fanout knobs, by edge type ``src__rel__dst``."""
    return {name[len(EDGE_FANOUT):]: knob for name, knob in space.knobs.items()
            if _edge_knob(name)}


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


def _thaw(value: Any) -> Any:
    return [_thaw(v) for v in value] if isinstance(value, (list, tuple)) else value


def _parse_range(where: str, name: str, spec: dict, cores: int) -> Knob:
    if name not in INT_RANGE_KNOBS:
        raise SearchSpaceError(f"{where}: a low/high range works only for "
                               f"{', '.join(INT_RANGE_KNOBS)}; use 'choices'")
    low, high = spec.get("low"), spec.get("high")
    if high == "cores":
        high = cores
    step, log = spec.get("step", 1), bool(spec.get("log", False))
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high, step))
    if not ints:
        raise SearchSpaceError(f"{where}: low, high and step must be ints "
                               f"(got low={low!r}, high={high!r}, step={step!r})")
    if low > high:
        raise SearchSpaceError(f"{where}: low {low} > high {high}; low must not exceed high")
    if step < 1 or (log and low < 1):
        raise SearchSpaceError(f"{where}: step must be >= 1 and a log range needs low >= 1")
    _check_values(where, name, [low, high])
    return Knob(name, None, low, high, step, log)


def _cpu_only(path: Path, knobs: dict[str, Knob], notes: list[str]) -> dict[str, Knob]:
    out = dict(knobs)
    for name, (excluded, fallback) in CPU_EXCLUDED.items():
        knob = knobs.get(name)
        if knob is None or knob.choices is None or excluded not in knob.choices:
            continue
        rest = tuple(c for c in knob.choices if c != excluded)
        if rest:
            out[name] = Knob(name, rest)
            notes.append(f"{path.name}: on cpu, {name} {excluded} is left out")
        else:
            out[name] = Knob(name, (fallback,))
            notes.append(f"{path.name}: on cpu, {name} {excluded} is downgraded to {fallback}")
    return out


def _fit_fanouts(path: Path, knob: Knob | None, layers: int, notes: list[str],
                 name: str = "num_neighbors") -> Knob:
    choices = knob.choices if knob is not None else (TrialConfig().num_neighbors,)
    fitted = tuple(dict.fromkeys(fit_fanout(c, layers) for c in choices))
    if fitted != choices:
        what = "fanouts" if name == "num_neighbors" else f"{name} fanouts"
        notes.append(f"{path.name}: {what} fitted to {layers} layers: "
                     f"{', '.join(str(list(c)) for c in fitted)}")
    return Knob(name, fitted)


def _buildable(path: Path, knob: Knob, topology: Topology, notes: list[str]) -> Knob:
    """The affinity strategies of ``knob`` that this machine can build; the others
    are left out with a note. A space whose every strategy is out is an error."""
    kept = []
    for strategy in knob.choices:
        reason = topology.why_not(strategy)
        if reason:
            notes.append(f"{path.name}: {reason}; left out")
        else:
            kept.append(strategy)
    if not kept:
        raise SearchSpaceError(f"search space '{path}', knob 'affinity': "
                               f"{topology.why_not(knob.choices[0])}; use none")
    return Knob("affinity", tuple(kept))


def _baseline_value(baseline: TrialConfig, name: str) -> Any:
    if name == "affinity":
        return "none"
    return getattr(baseline, name)


def fitted(config: TrialConfig, layers: int) -> TrialConfig:
    """``config`` with ``layers`` layers and its fanout fitted to them: the one rule
    that turns the 2-layer baseline into a baseline of a space's layer count."""
    return config.replace(num_layers=layers, num_neighbors=fit_fanout(config.num_neighbors,
                                                                        layers))


def _check_fixed(path: Path, space: SearchSpace) -> None:
    try:
        layers = space.fixed.get("num_layers", TrialConfig.num_layers)
        TrialConfig(**space.fixed, num_neighbors=fit_fanout(TrialConfig.num_neighbors, layers))
    except (ConfigError, TypeError) as exc:
        raise SearchSpaceError(f"search space '{path}', fixed: {exc}") from exc
    layers = space.fixed.get("num_layers", 2)
    fanout_knobs = [space.knobs.get("num_neighbors") or Knob("num_neighbors", ((25, 10),))]
    for knob in fanout_knobs + list(edge_knobs(space).values()):
        for fanout in knob.choices or ():
            if not isinstance(fanout, tuple) or len(fanout) != layers:
                raise SearchSpaceError(f"search space '{path}', knob '{knob.name}': {fanout!r} "
                                       f"needs one entry per layer ({layers})")


# When a knob is suggested at all, given the values picked before it (in KNOB_ORDER)
# and the device: the one statement of the rules between knobs. A knob that is not
# active takes its default and is neither suggested nor enqueued.
ACTIVE_WHEN: dict[str, Callable[[dict[str, Any], str], bool]] = {
    "prefetch_factor": lambda v, device: v["num_workers"] > 0,
    "affinity": lambda v, device: v["num_workers"] > 0,
    "shapes": lambda v, device: v["compile_mode"] != "none",
    "pad_ladder": lambda v, device: v["shapes"] == "padded",
    "gpu_sampling": lambda v, device: device == "cuda" and v["num_workers"] == 0,
    "sampling_backend": lambda v, device: not v["gpu_sampling"],
    "feature_placement": lambda v, device: v["gpu_sampling"],
    # a torch.sparse product breaks torch.compile's graph: sparse is an eager-only choice
    "aggregation": lambda v, device: v["compile_mode"] == "none",
}
KNOB_ORDER = ("batch_size", "num_neighbors", "num_workers", "prefetch_factor", "affinity",
              "compile_mode", "shapes", "pad_ladder", "amp_dtype", "checkpointing",
              "gpu_sampling", "feature_placement", "sampling_backend", "aggregation", "dropout_masks",
              "feature_dtype")
_BASE = TrialConfig()
DEFAULTS: dict[str, Any] = {**{k: getattr(_BASE, k) for k in KNOB_ORDER if k != "affinity"},
                            "affinity": "none", "shapes": "dynamic", "gpu_sampling": False}


def eager_twin(config: TrialConfig) -> TrialConfig:
    """``config`` without compile, as :func:`suggest_config` would give it (the
    shape knobs only apply to compiled configs)."""
    return config.replace(compile_mode="none", shapes=DEFAULTS["shapes"],
                          pad_ladder=DEFAULTS["pad_ladder"])


def eager_params(params: dict[str, Any], space: SearchSpace, device: str) -> dict[str, Any]:
    """A compiled trial's Optuna params turned into its eager twin's: the knobs only
    compiled configs take dropped, and those only eager ones take (the aggregation)
    set to the value the compiled config had, their default, so that the twin is
    exactly ``eager_twin`` of it and no sampler draws them anew."""
    values = {**DEFAULTS, **{k: _decode(v) for k, v in params.items()}, "compile_mode": "none"}
    out = {k: v for k, v in {**params, "compile_mode": "none"}.items()
           if _active(k, values, device)}
    for name in KNOB_ORDER:
        if name in space.knobs and name not in out and _active(name, values, device):
            out[name] = _encode(values[name])
    return out


def in_space(config: TrialConfig, space: SearchSpace) -> bool:
    """Whether :func:`suggest_config` can return ``config``'s knob values (affinity
    aside): every active knob's value is one the space offers, and every knob the
    space leaves out keeps its default."""
    values = {name: getattr(config, name) for name in KNOB_ORDER if name != "affinity"}
    values["affinity"] = "none"
    for name in KNOB_ORDER:
        knob = space.knobs.get(name)
        if name == "affinity" or not _active(name, values, config.device):
            continue
        if knob is None and values[name] != DEFAULTS[name]:
            return False
        if knob is not None and not knob.contains(values[name]):
            return False
    mine = config.edge_fanouts or {}
    return all(knob.contains(mine.get(t, config.num_neighbors))
               for t, knob in edge_knobs(space).items()) and set(mine) <= set(edge_knobs(space))


def _active(name: str, values: dict[str, Any], device: str) -> bool:
    rule = ACTIVE_WHEN.get(name)
    return rule is None or rule(values, device)


def suggest_config(trial, space: SearchSpace, *, device: str, seed: int = 0,
                   topology: Topology | None = None) -> TrialConfig:
    """Turns an Optuna trial into a ``TrialConfig``: the one place that suggests.
    Which knobs are suggested follows :data:`ACTIVE_WHEN`; GPU sampling runs on the
    builtin sampler, the only one that samples on the GPU."""
    topology = topology or this_machine()
    values: dict[str, Any] = {}
    for name in KNOB_ORDER:
        knob = space.knobs.get(name)
        if knob is None or not _active(name, values, device):
            values[name] = DEFAULTS[name]
        elif knob.choices is not None:
            values[name] = _decode(trial.suggest_categorical(
                name, [_encode(c) for c in knob.choices]))
        else:
            values[name] = trial.suggest_int(name, knob.low, knob.high, step=knob.step,
                                             log=knob.log)
    if values["gpu_sampling"]:
        values["sampling_backend"] = "builtin"
    values["edge_fanouts"] = _suggest_edge_fanouts(trial, space, values["num_neighbors"])
    strategy = values.pop("affinity")
    values["loader_cores"], values["compute_cores"] = affinity_sets(
        strategy, values["num_workers"], topology)
    return TrialConfig(**values, **{"seed": seed, **space.fixed}, device=device)


def _suggest_edge_fanouts(trial, space: SearchSpace, shared: tuple[int, ...]):
    """The per-edge-type fanouts a trial picks; only those that differ from the shared
    fanout are kept (``None`` when none does), so one sampling has one config."""
    picked = {t: _decode(trial.suggest_categorical(EDGE_FANOUT + t, [_encode(c) for c in
                                                                       knob.choices]))
              for t, knob in edge_knobs(space).items()}
    differ = {t: f for t, f in picked.items() if f != shared}
    return differ or None


def random_params(space: SearchSpace, rng) -> dict[str, Any]:
    """One value of every knob drawn at random (``rng``: a ``random.Random``), as
    Optuna params: :func:`suggest_config` of a ``FixedTrial`` of them is a config."""
    return {name: _encode(rng.choice(knob.choices)) if knob.choices is not None else
            knob.low + knob.step * rng.randint(0, (knob.high - knob.low) // knob.step)
            for name, knob in space.knobs.items()}


def params_for(config: TrialConfig, space: SearchSpace) -> dict[str, Any]:
    """The Optuna params that make :func:`suggest_config` return ``config`` (to enqueue
    the baseline or a prior); knobs that would not be suggested are left out."""
    values = {name: getattr(config, name) for name in KNOB_ORDER if name != "affinity"}
    values["affinity"] = "none"
    params = {name: _encode(values[name]) for name in KNOB_ORDER
              if name in space.knobs and _active(name, values, config.device)}
    for edge_type in edge_knobs(space):
        fanout = (config.edge_fanouts or {}).get(edge_type, config.num_neighbors)
        params[EDGE_FANOUT + edge_type] = _encode(fanout)
    return params


def _encode(value: Any) -> Any:
    """Optuna stores categorical choices as None/bool/int/float/str: a fanout goes as
    '25,10'."""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, str) and value and all(p.lstrip("-").isdigit() for p in value.split(",")):
        return tuple(int(p) for p in value.split(","))
    return value

