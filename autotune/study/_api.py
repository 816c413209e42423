"""``autotune.search``: the one entry point the CLI, the benchmarks and users call.

:func:`prepare_search` checks everything before the first trial (space, knobs on
this machine, dataset, model factory, storage, study identity) and returns a
:class:`SearchPlan`; :meth:`SearchPlan.run` runs the loop and returns a
:class:`SearchResult`. :func:`search` does both.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ParamSpec, Sequence, TypeVar

import optuna

from autotune.config import MODELS, TrialConfig
from autotune.data import DatasetRef, root_default
from autotune.env import fingerprint, make_writable_dir, parse_fraction, writable_dir
from autotune.errors import ConfigError
from autotune.files import atomic_write
from autotune.imports import import_object, import_path_of
from autotune.pipeline import check_config, check_dataset
from autotune.specs import GuardOptions, MeasureSpec, TrialLimits, check_limits
from autotune.storage import check_storage, masked, study_lock
from autotune.trial import MIB
from autotune.study import _records as rec
from autotune.study._front import FrontRow, study_front, study_reference, write_export, write_pareto
from autotune.study._guard import parse_objectives
from autotune.study._identity import open_study, resumed_space
from autotune.study._search import Progress, Search, SearchOutcome
from autotune.study._options import (
    RENAMED_KEYWORDS,
    SEARCH_OPTIONS,
    SearchOptions,
    check_study_name,
    checked_options,
    with_options,
)
from autotune.study._optuna_samplers import optuna_sampler
from autotune.study._paired import drifts
from autotune.study._progress import Ticker
from autotune.study._records import TrialRecord
from autotune.study._space import edge_knobs, load_space
from autotune.study._studies import default_storage, default_study_name, load_study
from autotune.taskinfo import DEFAULT_TASK, task_info

DatasetArg = Any  # a name, a .pt path, 'package.module:function', a Data or a function
ModelArg = Any  # None, sage/gcn/gat, 'package.module:factory' or a factory


@dataclass(frozen=True, repr=False)
class SearchResult:
    """A study's state after a search: every trial typed, the front fastest first,
    the baseline and the knee, and what this run did."""

    study_name: str
    storage: str  # the URL with its password masked
    trials: tuple[TrialRecord, ...]
    front: tuple[FrontRow, ...]
    baseline: TrialRecord | None
    knee: TrialRecord | None
    outcome: SearchOutcome
    pareto_path: Path
    guard: dict[str, Any] | None = None
    _url: str = field(default="", repr=False)
    default: TrialRecord | None = None  # the default pick (see FrontRow.default)
    reference: FrontRow | None = None  # the baseline, where the front does not hold it

    @property
    def drift(self) -> list[dict[str, Any]]:
        """The baseline's measurements in time order, each with its change from the
        first (:func:`autotune.study._paired.drifts`)."""
        return drifts(self.trials)

    def __repr__(self) -> str:
        return (f"<SearchResult study {self.study_name!r}: {len(self.trials)} trials, "
                f"{len(self.front)} on the front, default {self.default!r}>")

    def export(self, path: str | os.PathLike, *, pick: str = "default") -> Path:
        """Writes the picked trial (default, knee, max-throughput, min-memory or
        trial:N) as an export file that ``autotune train``, ``autotune trial`` and
        :func:`autotune.load_config` read."""
        out = Path(path)
        if out.suffix not in (".yaml", ".yml", ".json"):
            raise ConfigError(f"--out (path=) must end in .yaml, .yml or .json (got '{out}')")
        study, url = load_study(self.study_name, storage=self._url)
        write_export(study, pick, url, out)
        return out


def result_of(study: optuna.Study, url: str, outcome: SearchOutcome,
              pareto_path: Path) -> SearchResult:
    trials = tuple(rec.records(study))
    by_number = {t.number: t for t in trials}
    front = tuple(study_front(study))
    knee = next((r for r in front if "knee" in r.marks), None)
    default = next((r for r in front if r.default), None)
    s = rec.StudyRecord.from_study(study)
    return SearchResult(study.study_name, masked(url), trials, front, by_number.get(s.baseline),
                        by_number.get(knee.trial) if knee else None, outcome, pareto_path,
                        s.guard, url, by_number.get(default.trial) if default else None,
                        study_reference(study))


@dataclass(frozen=True)
class SearchPlan:
    """A checked search, its study opened: what :meth:`run` will do, and the
    callbacks it calls (see :func:`prepare_search`)."""

    options: SearchOptions
    baseline: TrialConfig
    study: optuna.Study
    dataset_stats: dict[str, Any]
    notes: tuple[str, ...] = ()
    progress: Progress | None = None
    on_trial_start: Callable[[int, TrialConfig], None] | None = None
    on_trial_done: Callable[[optuna.Study], None] | None = None
    on_note: Callable[[str], None] | None = None

    @property
    def pareto_path(self) -> Path:
        return self.options.study_dir / "pareto.yaml"

    def run(self) -> SearchResult:
        """Runs the search loop; ``pareto.yaml`` is rewritten after every trial, then
        ``on_trial_done`` is called under the study's lock (workers take turns)."""
        def publish(study: optuna.Study) -> None:
            write_pareto(study, self.pareto_path, self.options.storage)
            if self.on_trial_done is not None:
                with study_lock(self.options.storage, study.study_name):
                    self.on_trial_done(study)

        outcome = Search(self.options, self.study, self.baseline, progress=self.progress,
                         on_trial_done=publish, on_trial_start=self.on_trial_start,
                         on_note=self.on_note).run()
        return result_of(self.study, self.options.storage, outcome, self.pareto_path)


_O, _G = SearchOptions, GuardOptions  # the defaults below are theirs
P = ParamSpec("P")
R = TypeVar("R")
# The CLI's flags, or a guess at them, that are no keyword of search(): what to pass.
KEYWORD_FOR = {"max_seconds": "measure=MeasureSpec(max_window_s=...)",
               "warmup": "measure=MeasureSpec(warmup_steps=...)",
               "warmup_time": "measure=MeasureSpec(min_warmup_s=...)",
               "steps": "measure=MeasureSpec(min_steps=...)",
               "max_busy": "measure=MeasureSpec(max_busy=...)",
               "trial_timeout": "limits=TrialLimits(timeout_s=...)",
               "memory_limit": "limits=TrialLimits(memory_limit_bytes=...)",
               "hidden_channels": "hidden=", "num_layers": "layers=", "study": "study_name="}


def _check_keywords(options: dict[str, Any]) -> None:
    """Refuses a keyword :class:`SearchRequest` does not have with one line that names
    the one to use (``max_seconds=`` is ``measure=MeasureSpec(max_window_s=...)``),
    rather than Python's bare TypeError."""
    import difflib

    known = [f.name for f in dataclasses.fields(SearchRequest)]
    for key in options:
        if key in known:
            continue
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.7)
        use = KEYWORD_FOR.get(key) or (f"{near[0]}=" if near else None)
        raise ConfigError(f"autotune.search() takes no keyword {key}=" +
                          (f"; use {use}" if use else f"; it takes {', '.join(known)}"))


@dataclass(frozen=True)
@with_options
class SearchRequest:
    """What a search is asked, every field with its default: :func:`prepare_search`
    and :func:`search` take them as keywords, or as one object.

    ``dataset``: a name (Reddit, Cora, synthetic, synthetic-hetero, synthetic-molecules,
    ogbn-mag, ...), a ``.pt`` path, a TU-format folder, an import path, a
    ``Data``/``HeteroData`` or a function returning one. ``task``: node, link (on the
    dataset's link split; ``link_edge_type`` picks the edge type of a ``HeteroData``,
    ``"src__rel__dst"`` or a relation name) or graph (whole small graphs).
    ``time_attr``: a node attribute of times that makes the node task's sampling
    temporal (``temporal_strategy`` uniform or last). ``model``: sage (default), gcn,
    gat, gin, an import path or a factory ``(in_channels, out_channels, config) ->
    nn.Module`` taking ``(x, edge_index)``, lifted by ``to_hetero`` on a HeteroData.
    ``space``: a shipped space's name, a YAML path or a dict of the same schema.
    ``max_memory``: bytes or a size such as ``'8GiB'``.
    ``measure``/``limits``: a :class:`autotune.MeasureSpec` and :class:`autotune.TrialLimits`.
    ``precision`` (0.05 or '5%'): each trial's target precision, over ``measure``'s;
    by default the space's stated one (the quick space states 5%), else ``measure``'s.
    ``budget``: wall clock of this run, seconds or '20m', the confirmation included;
    without ``n_trials``, trials run until it is spent (``n_trials`` alone: 20).
    ``racing``: a new config is screened at ``screen_precision`` first; ``priors``: the
    prior table runs first. ``confirm``: the front's fastest N, its knee and the
    baseline are measured again at the end, interleaved in ``confirm_rounds`` rounds,
    and the front uses those figures (0: off). ``control_every`` (seconds or '10m')
    and ``control_every_trials``: how often the baseline is measured again, so that
    each trial's speed-up is paired with a baseline measured close in time.

    Then a keyword for each option of :data:`autotune.study._options.SEARCH_OPTIONS`,
    named as its flag (``n_trials``, ``budget``, ``timeout``, ``racing``,
    ``screen_precision``, ``priors``, ``confirm``, ``confirm_rounds``,
    ``control_every``, ``control_every_trials``, ``optuna_sampler``, ``seed``,
    ``max_memory``, ``heartbeat``, ``grace_period``), with its default.

    Callbacks: ``on_trial_start(number, config)`` as a trial starts;
    ``progress(n, total, record, elapsed_s, eta_s)`` as it ends: ``n`` trials of the
    ``total`` budget counted, ``record`` the finished trial's
    :class:`autotune.TrialRecord`, the seconds since the search started and the
    estimated seconds left. ``progress=True`` (the default) prints the CLI's lines to
    stderr, ``False`` nothing. ``on_trial_done(study)`` after ``pareto.yaml`` is
    rewritten (the CLI publishes the dashboard's note there:
    :func:`autotune.cli.save_study_note`)."""

    dataset: DatasetArg = "synthetic"
    root: str | None = None
    scale: float = 1.0
    data_seed: int = 0
    task: str = DEFAULT_TASK
    link_edge_type: str | None = None
    time_attr: str | None = None
    temporal_strategy: str = "uniform"
    model: ModelArg = None
    hidden: int | None = None
    layers: int | None = None
    recompile_limit: int | None = None
    space: str | Path | dict = "default"
    device: str | None = None
    accuracy_guard: float | None = None
    guard_epochs: int = _G.epochs
    objectives: str | Sequence[str] = "throughput,memory"
    study_name: str | None = None
    storage: str | None = None
    studies_dir: str | os.PathLike = _O.studies_dir
    precision: float | str | None = None
    measure: MeasureSpec | None = None
    limits: TrialLimits | None = None
    progress: Progress | bool = True
    on_trial_start: Callable[[int, TrialConfig], None] | None = None
    on_trial_done: Callable[[optuna.Study], None] | None = None


def prepare_search(request: SearchRequest | None = None, /, **options: Any) -> SearchPlan:
    """Checks everything a search needs before its first trial and opens its study.
    The options are :class:`SearchRequest`'s fields, as keywords
    (``prepare_search(dataset="Cora", n_trials=8)``), or one request with keywords
    over it (``prepare_search(request, budget="20m")``)."""
    options = _renamed_keywords(options)
    _check_keywords(options)
    return _plan(dataclasses.replace(request or SearchRequest(), **options))


def _renamed_keywords(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with an older autotune's keywords (``timeout_s=``) in today's
    names, each said with a FutureWarning."""
    import warnings

    for old in RENAMED_KEYWORDS.keys() & options.keys():
        new = RENAMED_KEYWORDS[old]
        warnings.warn(f"search({old}=) is deprecated: pass {new}=", FutureWarning, stacklevel=4)
        options = {(new if k == old else k): v for k, v in options.items()}
    return options


prepare_search.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                       annotation=f.type) for f in dataclasses.fields(SearchRequest)],
    return_annotation=SearchPlan)


def _plan(r: SearchRequest) -> SearchPlan:
    """The checks, in order (the cheap ones before the dataset is prepared), then the
    study, created or joined."""
    import torch

    device = r.device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_limits(r.limits, device)
    options = checked_options({o.name: getattr(r, o.name) for o in SEARCH_OPTIONS})
    optuna_sampler(options["optuna_sampler"], 0)  # Optuna's GP sampler needs scipy
    studies = _studies_folder(r.studies_dir)
    space_, baseline = _space_and_baseline(
        r.space, device, _facts(r.model, r.hidden, r.layers, r.recompile_limit, r.task,
                                time_attr=r.time_attr, temporal_strategy=r.temporal_strategy),
        options["seed"])
    ref = _dataset_ref(r.dataset, r.root, r.scale, r.data_seed, studies, r.task,
                       r.link_edge_type)
    name = check_study_name(r.study_name) if r.study_name is not None else \
        default_study_name(_study_stem(ref), device)
    opts = SearchOptions(
        dataset=ref, space=space_, storage=r.storage or default_storage(studies, name),
        study_name=name, device=device, studies_dir=studies,
        measure=_measure(r.measure, r.precision, space_.precision),
        limits=r.limits or TrialLimits(),
        guard=_guard(r.accuracy_guard, r.guard_epochs, r.objectives), **options)
    study, prepared, stats = _open(opts, baseline)
    space_, resumed = resumed_space(study, space_)
    opts = dataclasses.replace(opts, space=space_)
    notes = space_.notes + (resumed,) * bool(resumed) + \
        _meaningless_knobs(space_, baseline, prepared, stats)
    progress, on_trial_start, on_note = _printed(study, opts, r.progress, r.on_trial_start)
    return SearchPlan(opts, baseline, study, stats, notes, progress, on_trial_start,
                      r.on_trial_done, on_note)


def _printed(study: optuna.Study, opts: SearchOptions, progress: Progress | bool | None,
             on_trial_start):
    """The callbacks: ``progress=True`` the CLI's lines on stderr, ``False`` none, a
    function itself (and then no notes)."""
    if progress is not True:
        return progress or None, on_trial_start, None
    import sys

    ticker = Ticker(sys.stderr, baseline_record(study))
    return ticker.done, on_trial_start or ticker.start, ticker.note


def baseline_record(study: optuna.Study) -> TrialRecord | None:
    """The study's measured baseline (resuming a search), else None."""
    number = rec.StudyRecord.from_study(study).baseline
    return next((r for r in rec.records(study) if r.number == number and r.complete), None)


def _studies_folder(studies_dir: str | os.PathLike) -> Path:
    studies = Path(studies_dir)
    if not writable_dir(studies):
        raise ConfigError(f"--studies-dir (studies_dir=) '{studies}' is not writable; pass "
                          "another folder")
    return studies


def _guard(ratio: float | None, epochs: int, objectives: str | Sequence[str]) -> GuardOptions:
    return GuardOptions(ratio=ratio, epochs=epochs, objective=parse_objectives(
        objectives if isinstance(objectives, str) else ",".join(objectives)))


# No trial process holds less than an interpreter with torch imported (220 MiB on the
# machines of docs/benchmarks.md) plus the dataset's tensors
TRIAL_FLOOR_MIB = 200


def _check_memory_budget(budget_mib: float | None, dataset_bytes: int = 0) -> None:
    """Refuses a ``--max-memory`` below what any trial holds (:data:`TRIAL_FLOOR_MIB`
    and the dataset's tensors), before the first trial: every trial would be over it."""
    floor = TRIAL_FLOOR_MIB + dataset_bytes / MIB
    if budget_mib is not None and budget_mib < floor:
        held = f" and the dataset's tensors {dataset_bytes / MIB:,.0f} MiB" \
            if dataset_bytes else ""
        raise ConfigError(f"--max-memory (max_memory=) {budget_mib:,.0f} MiB is below what any "
                          f"trial holds (an interpreter with torch, over "
                          f"{TRIAL_FLOOR_MIB} MiB{held}): every trial would be over it")


def _open(opts: SearchOptions, baseline: TrialConfig):
    """The checks only this machine, the storage and the prepared dataset can make, in
    that order (nothing is created before the cheap ones pass); then the study,
    created or joined. Returns it, the prepared dataset and its stats."""
    _check_machine(baseline)
    _check_memory_budget(opts.budget_mib)
    check_storage(opts.storage)  # a bad URL, an unreachable server: at once, creating nothing
    prepared = opts.dataset.prepare()
    _check_data(baseline, opts.space, prepared, opts.guard)
    stats = prepared.stats()
    _check_memory_budget(opts.budget_mib, stats.get("bytes", 0))
    make_writable_dir(opts.studies_dir, "--studies-dir (studies_dir=)")  # every check passed
    return open_study(opts, dataset_stats=stats, env=fingerprint(opts.device)), prepared, stats


def _and_run(prepare: Callable[P, SearchPlan]) -> Callable[P, SearchResult]:
    """:func:`search`: ``prepare``'s very signature (for ``help()`` and for IDEs,
    through the ParamSpec), running the plan it returns."""
    @functools.wraps(prepare)
    def search(*args: P.args, **kwargs: P.kwargs) -> SearchResult:
        return prepare(*args, **kwargs).run()

    search.__name__ = search.__qualname__ = "search"
    search.__signature__ = inspect.signature(prepare).replace(  # type: ignore[attr-defined]
        return_annotation=SearchResult)
    search.__doc__ = """Searches the Pareto front of throughput and peak memory: checks every
    option before the first trial (:func:`prepare_search`, whose keyword arguments these
    are), runs the search and returns a :class:`SearchResult`. Example::

        import autotune

        result = autotune.search(dataset="synthetic", scale=0.02, space="quick",
                                 n_trials=8, model="mypkg.models:factory")
        print(result.knee.config, result.knee.throughput)
        result.export("best.yaml")
    """
    return search


search = _and_run(prepare_search)


def _study_stem(ref) -> str:
    """A default study's name before its device: the dataset, ``-link`` for link
    prediction (a node study and a link study of one dataset never share)."""
    stem = ref.name.rpartition(":")[2] or ref.name
    return stem + task_info(ref.task).suffix


def _meaningless_knobs(space, baseline: TrialConfig, prepared,
                       stats: dict[str, Any]) -> tuple[str, ...]:
    """Warnings for knobs that cannot change anything on this dataset: every batch
    size holds the whole training set, or every fanout exceeds the largest in-degree
    (so each samples all neighbours, like -1)."""
    import torch

    notes = []
    knob = space.knobs.get("batch_size")
    sizes = (knob.choices if knob.choices is not None else (knob.low,)) if knob \
        else (baseline.batch_size,)
    seeds = f"training {task_info(baseline).seeds}"
    if min(sizes) >= stats["num_train"]:
        notes.append(f"warning: every batch size searched (>= {min(sizes)}) holds all "
                     f"{stats['num_train']:,} {seeds}: batch_size changes nothing here")
    if prepared.graph_level:
        return tuple(notes)  # nothing is sampled
    most = max((int(torch.bincount(s.edge_index[1]).max()) for s in prepared.data.edge_stores
                if "edge_index" in s and s.edge_index.numel()), default=0)
    knob = space.knobs.get("num_neighbors")
    fanouts = knob.choices if knob else (baseline.num_neighbors,)
    if all(k == -1 or k >= most for f in fanouts for k in f):
        notes.append(f"warning: every fanout searched is at least the largest in-degree "
                     f"({most}): each samples all neighbours, so num_neighbors changes "
                     "nothing here")
    return tuple(notes)


def _measure(measure: MeasureSpec | None, precision: float | str | None,
             stated: float | None) -> MeasureSpec:
    """The trials' measure spec: ``precision`` given wins, then ``measure``'s own when
    it is not the default, then the space's stated precision."""
    import dataclasses

    measure = measure or MeasureSpec.for_search()
    if precision is not None:
        try:
            return dataclasses.replace(measure, precision=parse_fraction(precision))
        except (TypeError, ValueError):
            raise ConfigError(f"--precision (precision=) must be a fraction in (0, 1) such "
                              f"as 3% or 0.03 (got {precision!r})") from None
    if stated is not None and measure.precision == MeasureSpec.precision:
        return dataclasses.replace(measure, precision=stated)
    return measure


def _facts(model: ModelArg, hidden: int | None, layers: int | None,
           recompile_limit: int | None, task: str = DEFAULT_TASK, *, time_attr: str | None = None,
           temporal_strategy: str = "uniform") -> dict[str, Any]:
    """The pipeline facts given for this search: fixed for its study."""
    if model is not None and not isinstance(model, str):
        model = import_path_of(model, what="model factory", option="model=")
    named = {"model": model, "hidden_channels": hidden, "num_layers": layers,
             "recompile_limit": recompile_limit,
             "task": None if task_info(task).name == TrialConfig.task else task,
             "time_attr": time_attr, "temporal_strategy": None
             if temporal_strategy == TrialConfig.temporal_strategy else temporal_strategy}
    return {k: v for k, v in named.items() if v is not None}


def default_config(device: str | None = None) -> TrialConfig:
    """PyG's examples/reddit.py setup, its 6 loader workers capped to this machine."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return TrialConfig(num_workers=min(6, len(os.sched_getaffinity(0))), device=device)


def _space_and_baseline(space: str | Path | dict, device: str, facts: dict[str, Any],
                        seed: int):
    """The loaded space (as written; the baseline's values outside it noted) and the
    baseline trial's config."""
    base = default_config(device)
    loaded = load_space(space if isinstance(space, dict) else str(space), device=device,
                        baseline=base, facts=facts)
    return loaded, loaded.baseline(base.replace(seed=seed))


def _check_machine(baseline: TrialConfig) -> None:
    """What only this machine can tell (cores, device, dtype, the sampler backend),
    and that the model factory imports: before anything is created or prepared."""
    check_config(baseline)
    if baseline.model not in MODELS:
        import_object(baseline.model, what="model factory", option="--model (model=)")


def _check_data(baseline: TrialConfig, space, prepared, guard) -> None:
    """That the task fits the dataset (every edge type the space names included),
    that the model factory builds a model for it, and that the dataset has what the
    accuracy guard needs."""
    named = {t: knob.choices[0] for t, knob in edge_knobs(space).items()}
    check_dataset(baseline.replace(edge_fanouts=named or None), prepared)
    split = task_info(baseline).val_split
    store = prepared.target_store()
    if guard.active and split not in store:
        raise ConfigError(f"--accuracy-guard and --objectives ...,accuracy need a validation "
                          f"split, and dataset {prepared.name} has no {split}")


def _dataset_ref(dataset: DatasetArg, root: str | None, scale: float, seed: int,
                 studies: Path, task: str = DEFAULT_TASK, edge_type: str | None = None):
    """A ``DatasetRef`` for any form of ``dataset``: a Data object is saved once under
    ``STUDIES_DIR/.data/`` (named by its content) for the trial processes to load."""
    if _is_graph(dataset):  # first: PyG's Data and HeteroData are callable too
        dataset = str(_saved(dataset, studies / ".data"))
    elif callable(dataset) and not isinstance(dataset, str):
        dataset = import_path_of(dataset, what="dataset function", option="dataset=")
    elif not isinstance(dataset, str):
        raise ConfigError("dataset= must be a name, a path, an import path, a "
                          "torch_geometric.data.Data or HeteroData, or a function (got "
                          f"{type(dataset).__name__})")
    if not isinstance(scale, (int, float)) or not scale > 0:
        raise ConfigError(f"--scale (scale=) must be a positive number (got {scale!r})")
    ref = DatasetRef(dataset, root=root or root_default(), scale=scale, seed=seed, task=task,
                     edge_type=edge_type)
    ref.check()
    return ref


def _is_graph(obj: Any) -> bool:
    from torch_geometric.data import Data, HeteroData

    return isinstance(obj, (Data, HeteroData))


def _saved(data, folder: Path) -> Path:
    from torch import Tensor

    digest = hashlib.sha1()
    for store in data.stores:
        for key, value in sorted(store.items(), key=lambda kv: kv[0]):
            if isinstance(value, Tensor):
                digest.update(f"{store._key}{key}{tuple(value.shape)}"
                              f"{value.double().sum().item()}".encode())
    path = folder / f"data-{digest.hexdigest()[:12]}.pt"
    if not path.exists():
        import torch

        atomic_write(path, lambda tmp: torch.save(data, tmp))
    return path
