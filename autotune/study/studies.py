"""Finding, opening and creating studies. Imports neither torch nor PyG, so the
commands that only read a study (show, export, dashboard, report) start fast."""
from __future__ import annotations

import re
import socket
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from autotune.errors import ConfigError, StorageError, StudyNotFoundError
from autotune.study import records as rec
from autotune.storage import masked, open_storage, study_lock

if TYPE_CHECKING:
    from autotune.study.loop import SearchOptions


def default_study_name(dataset: str, device: str) -> str:
    stem = Path(dataset).stem if dataset.endswith(".pt") else dataset
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{stem}-{device}-{socket.gethostname()}")


def default_storage(studies_dir: str | Path, study_name: str) -> str:
    return f"sqlite:///{(Path(studies_dir) / f'{study_name}.db').resolve()}"


def study_folder(studies_dir: str | Path, study_name: str, storage: str) -> Path:
    """A study's folder under ``studies_dir`` (trial logs, guard runs, pareto.yaml):
    ``NAME`` for the default SQLite file ``NAME.db`` beside it, ``NAME@HASH`` for any
    other storage (a hash of its URL without the password), so two studies of one
    name in two storages never write into each other's folder."""
    import hashlib

    if storage == default_storage(studies_dir, study_name):
        return Path(studies_dir) / study_name
    digest = hashlib.sha1(masked(storage).encode()).hexdigest()[:8]
    return Path(studies_dir) / f"{study_name}@{digest}"


def quiet_optuna() -> None:
    """autotune prints its own progress; Optuna's INFO lines would repeat it."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def load_study(study_name: str, *, storage: str | None = None,
               studies_dir: str | Path = "studies") -> tuple[optuna.Study, str]:
    """An existing study and its storage URL; a missing one is a
    ``StudyNotFoundError`` naming the studies that exist."""
    quiet_optuna()
    url = storage or default_storage(studies_dir, study_name)
    if url.startswith("sqlite:///") and not storage:
        path = Path(url[len("sqlite:///"):])
        if not path.exists():
            names = sorted(p.stem for p in Path(studies_dir).glob("*.db"))
            raise StudyNotFoundError(
                f"no study {study_name!r} in '{studies_dir}' ({_there(study_name, names)}); "
                "pass --study-name (study_name=) with one of them, or --storage/--studies-dir "
                "(storage=, studies_dir=) where the search ran")
    store = open_storage(url)
    try:
        return optuna.load_study(study_name=study_name, storage=store), url
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(store)]
        raise StudyNotFoundError(f"no study {study_name!r} in {masked(url)} "
                                 f"({_there(study_name, names)}); pass --study-name "
                                 "(study_name=) with one of them") from None


def study_names(*, storage: str | None = None,
                studies_dir: str | Path = "studies") -> list[tuple[str, str]]:
    """(study name, storage URL) of every study in ``storage``, or in every SQLite
    file of ``studies_dir``."""
    urls = [storage] if storage else [f"sqlite:///{p.resolve()}"
                                      for p in sorted(Path(studies_dir).glob("*.db"))]
    return [(s.study_name, url) for url in urls
            for s in optuna.get_all_study_summaries(open_storage(url))]


def only_study(*, storage: str | None = None, studies_dir: str | Path = "studies") -> str:
    """The name of the one study there is; an error listing them when there are more
    or none."""
    quiet_optuna()
    names = study_names(storage=storage, studies_dir=studies_dir)
    if len(names) == 1:
        return names[0][0]
    where = masked(storage) if storage else f"'{studies_dir}'"
    raise StudyNotFoundError(f"{len(names)} studies in {where} "
                             f"({', '.join(n for n, _ in names) or 'none'}); pass "
                             "--study-name (study_name=)")


def _there(name: str, names: list[str]) -> str:
    """'studies there: a, b', with a "did you mean" for a near miss."""
    import difflib

    near = difflib.get_close_matches(name, names, n=1)
    return f"studies there: {', '.join(names) or 'none'}" + \
        (f"; did you mean {near[0]!r}?" if near else "")


def open_study(opts: SearchOptions, *, dataset_stats: dict, env: dict) -> optuna.Study:
    """Creates the study or loads it to resume or to join it from another worker;
    refuses one made for other objectives, another search space or another budget."""
    storage = open_storage(opts.storage, heartbeat_s=opts.heartbeat_s, grace_s=opts.grace_s)
    name = opts.study_name
    with study_lock(opts.storage, name):  # two workers starting together write attrs once
        try:
            study = optuna.create_study(study_name=name, storage=storage,
                                        directions=opts.directions, load_if_exists=True)
        except ValueError as exc:
            raise StorageError(f"study {name!r} in {masked(opts.storage)} cannot be reused: "
                               f"{exc}; pass a new --study-name (study_name=)") from exc
        directions = [d.name.lower() for d in study.directions]
        if directions != opts.directions:
            raise ConfigError(f"study {name!r} has directions {directions} (expected "
                              f"{opts.directions}: check --objectives); pass a new "
                              "--study-name (study_name=)")
        _check_or_set_attrs(study, opts, dataset_stats, env)
    return study


def _check_or_set_attrs(study: optuna.Study, opts: SearchOptions, dataset_stats: dict,
                        env: dict) -> None:
    attrs = study.user_attrs
    checks: dict[str, Any] = {
        rec.STUDY_SPACE: opts.space.to_dict(), rec.STUDY_MAX_MEMORY: opts.max_memory_bytes,
        rec.STUDY_DATASET_REF: opts.dataset.identity(), rec.STUDY_DEVICE: opts.device,
        rec.STUDY_GUARD_OPTS: ({"ratio": opts.guard.ratio, "epochs": opts.guard.epochs}
                               if opts.guard.active else None)}
    if rec.STUDY_SPACE in attrs:
        was, now = attrs[rec.STUDY_SPACE].get("fixed", {}), opts.space.fixed
        if attrs[rec.STUDY_SPACE].get("name") == opts.space.name and was != now:
            raise ConfigError(f"study {study.study_name!r} was created with the pipeline facts "
                              f"{was} (now {now}); pass the same --model/--hidden/--layers "
                              "or a new --study-name")
        for key, value in checks.items():
            if attrs.get(key) != value:
                raise ConfigError(f"study {study.study_name!r} was created with another {key} "
                                  f"({attrs.get(key)!r}, now {value!r}); pass a new "
                                  "--study-name or the original flags")
        return
    with warnings.catch_warnings():  # stable in practice; experimental in name
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(opts.metric_names)
    for key, value in {**checks, rec.STUDY_DATASET: dataset_stats, rec.STUDY_ENV: env}.items():
        study.set_user_attr(key, value)
