"""Creating a study, or joining one to resume it or to share it with other workers:
a study keeps the identity it was created with (objectives, space, dataset, device,
memory budget, guard) and refuses a search that differs. Imports neither torch nor
PyG."""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import optuna

from autotune.errors import ConfigError, StorageError
from autotune.study import _records as rec
from autotune.study._options import SearchOptions
from autotune.study._tuned import refuse_search
from autotune.storage import masked, open_storage, study_lock

if TYPE_CHECKING:
    from autotune.study._space import SearchSpace


def open_study(opts: SearchOptions, *, dataset_stats: dict, env: dict) -> optuna.Study:
    """Creates the study or loads it to resume or to join it from another worker;
    refuses one made for other objectives, another search space or another budget."""
    storage = open_storage(opts.storage, heartbeat_s=opts.heartbeat, grace_s=opts.grace_period)
    name = opts.study_name
    with study_lock(opts.storage, name):  # two workers starting together write attrs once
        try:
            study = optuna.create_study(study_name=name, storage=storage,
                                        directions=opts.directions, load_if_exists=True)
        except ValueError as exc:
            raise StorageError(f"study {name!r} in {masked(opts.storage)} cannot be reused: "
                               f"{exc}; pass a new --study-name (study_name=)") from exc
        refuse_search(study)
        directions = [d.name.lower() for d in study.directions]
        if directions != opts.directions:
            raise ConfigError(f"study {name!r} has directions {directions} (expected "
                              f"{opts.directions}: check --objectives); pass a new "
                              "--study-name (study_name=)")
        _check_or_set_attrs(study, opts, dataset_stats, env)
    return study


def _check_or_set_attrs(study: optuna.Study, opts: SearchOptions, dataset_stats: dict,
                        env: dict) -> None:
    s = rec.StudyRecord.from_study(study)
    checks: dict[str, Any] = {
        "space": opts.space.to_dict(), "max_memory_bytes": opts.max_memory,
        "dataset_ref": opts.dataset.record(), "device": opts.device,
        "guard_options": ({"ratio": opts.guard.ratio, "epochs": opts.guard.epochs}
                          if opts.guard.active else None)}
    if s.space:
        if s.space == opts.space.widened().to_dict():
            checks["space"] = s.space  # made before: see resumed_space
        was, now = s.space.get("fixed", {}), opts.space.fixed
        if s.space.get("name") == opts.space.name and was != now:
            raise ConfigError(f"study {study.study_name!r} was created with the pipeline facts "
                              f"{was} (now {now}); pass the same --model/--hidden/--layers "
                              "or a new --study-name")
        for name, value in checks.items():
            was = getattr(s, name)
            if name == "dataset_ref":  # the same data, wherever its files lie
                was, value = _dataset_identity(type(opts.dataset), was), opts.dataset.identity()
            if was != value:
                raise ConfigError(f"study {study.study_name!r} was created with another "
                                  f"{_difference(rec.STUDY_KEYS[name], was, value)}; pass a "
                                  "new --study-name or the original flags")
        return
    with warnings.catch_warnings():  # stable in practice; experimental in name
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(opts.metric_names)
    rec.store_study(study, **checks, dataset=dataset_stats, env=env)


def _dataset_identity(ref_type: type, stored: Any) -> Any:
    """What defines the data a study was created with (``DatasetRef.identity``), from
    its stored record; the record itself where it is not one."""
    try:
        return ref_type(**stored).identity()
    except TypeError:
        return stored


def _difference(key: str, was: Any, now: Any) -> str:
    """The field that differs between two stored values, named: ``dataset_ref scale
    (0.02, now 0.05)``, the first of them where more differ; the whole values where
    they are not both mappings."""
    if isinstance(was, dict) and isinstance(now, dict):
        fields = [k for k in dict.fromkeys([*was, *now]) if was.get(k) != now.get(k)]
        more = f" and {len(fields) - 1} more field(s)" if len(fields) > 1 else ""
        return f"{key} {fields[0]} ({was.get(fields[0])!r}, now {now.get(fields[0])!r}){more}"
    return f"{key} ({was!r}, now {now!r})"


def resumed_space(study: optuna.Study, space: SearchSpace) -> tuple[SearchSpace, str | None]:
    """The space the study goes on in, and a note where it is not ``space``: a study
    made before autotune kept to the space written holds the baseline's values in its
    knobs (Optuna's distributions cannot change within a study), and goes on in that
    space. Its trials outside ``space`` stay on its front."""
    stored = rec.StudyRecord.from_study(study).space
    if not space.outside or stored == space.to_dict() or stored != space.widened().to_dict():
        return space, None
    values = ", ".join(f"{name} {value}" for name, value in space.baseline_outside().items())
    return space.widened(), (f"study {study.study_name!r} was made before autotune kept to "
                             f"the space written: its space also holds the baseline's "
                             f"{values}, and it goes on in that space; pass a new "
                             "--study-name to search only the space written")
