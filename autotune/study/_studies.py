"""Finding, opening and creating studies. Imports neither torch nor PyG, so the
commands that only read a study (show, export, dashboard, report) start fast."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from autotune.errors import StudyNotFoundError
from autotune.storage import masked, open_storage
from autotune.study import _records as rec
from autotune.study._front import study_front
from autotune.study._options import (
    STUDIES_DIR,
    default_storage,
    default_study_name,  # noqa: F401
    study_folder,  # noqa: F401
)
from autotune.study._optuna import storage as storage_of
from autotune.study._tuned import run_report


def load_study(study_name: str, *, storage: str | None = None,
               studies_dir: str | Path = STUDIES_DIR) -> tuple[optuna.Study, str]:
    """An existing study and its storage URL; a missing one is a
    ``StudyNotFoundError`` naming the studies that exist."""
    url = storage or default_storage(studies_dir, study_name)
    if url.startswith("sqlite:///") and storage and not Path(url[len("sqlite:///"):]).exists():
        raise StudyNotFoundError(f"no study {study_name!r}: {url} does not exist (reading a "
                                 "study creates no database); pass the --storage the search "
                                 "used")
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
                studies_dir: str | Path = STUDIES_DIR) -> list[tuple[str, str]]:
    """(study name, storage URL) of every study in ``storage``, or in every SQLite
    file of ``studies_dir``."""
    urls = [storage] if storage else [f"sqlite:///{p.resolve()}"
                                      for p in sorted(Path(studies_dir).glob("*.db"))]
    return [(s.study_name, url) for url in urls
            for s in optuna.get_all_study_summaries(open_storage(url))]


def only_study(*, storage: str | None = None, studies_dir: str | Path = STUDIES_DIR) -> str:
    """The name of the one study there is; an error listing them when there are more
    or none."""
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


def study_rows(*, storage: str | None = None,
               studies_dir: str | Path = STUDIES_DIR) -> list[dict[str, Any]]:
    """One row per study (``autotune studies``): its name, storage, task, trials, the
    front's best throughput (confirmed where the confirmation measured it) and unit,
    its default pick and whether it is confirmed, and when its last trial started."""
    rows = []
    for name, url in study_names(storage=storage, studies_dir=studies_dir):
        study, _ = load_study(name, storage=url)
        trials, record = study.get_trials(deepcopy=False), rec.StudyRecord.from_study(study)
        task, kind = record.task, record.kind
        if kind == "tuned run":  # its winner's rate, no pick
            front, default = [], None
            rate = run_report(study)["final_rate"]
        else:
            front = study_front(study)  # confirmed figures where the confirmation measured them
            default = next((r for r in front if r.default), None)
            rate = max((r.throughput for r in front), default=None)
        starts = [t.datetime_start for t in trials if t.datetime_start is not None]
        rows.append({"study": name, "storage": masked(url), "task": task.name,
                     "trials": len(trials),
                     "best": rate, "kind": kind,
                     "default_trial": default.trial if default else None,
                     "confirmation": default.confirmation if default else None,
                     "unit": task.unit,
                     "last_trial": max(starts).strftime("%Y-%m-%d %H:%M") if starts else None})
    return rows


def delete_study(study: optuna.Study, url: str, studies_dir: str | Path) -> dict[str, Any]:
    """Deletes ``study`` from its storage, its folder, and its own SQLite file once that
    holds no study; returns what it deleted (``what``: in words)."""
    import shutil

    folder = study_folder(studies_dir, study.study_name, url)
    n_trials, what = len(study.trials), deletion(study, url, studies_dir)
    optuna.delete_study(study_name=study.study_name, storage=storage_of(study))
    if folder.exists():
        shutil.rmtree(folder)
    removed = _remove_own_file(studies_dir, study.study_name, url)
    if removed:
        what += f" and its file '{removed}'"
    return {"deleted": study.study_name, "storage": masked(url), "trials": n_trials,
            "folder": str(folder), "file": str(removed) if removed else None, "what": what}


def deletion(study: optuna.Study, url: str, studies_dir: str | Path) -> str:
    """What :func:`delete_study` would delete, in words (for a confirmation)."""
    folder = study_folder(studies_dir, study.study_name, url)
    return f"study {study.study_name!r} ({len(study.trials)} trials) from {masked(url)}" + \
        (f" and its folder '{folder}'" if folder.exists() else "")


def _remove_own_file(studies_dir: str | Path, name: str, url: str) -> Path | None:
    """The study's own SQLite file (``STUDIES_DIR/NAME.db``, the default storage)
    removed with its -wal, -shm and .lock once it holds no study: a file named for
    another study, or one still holding a study, is kept."""
    if url != default_storage(studies_dir, name):
        return None
    if optuna.get_all_study_summaries(open_storage(url)):
        return None
    db = Path(studies_dir) / f"{name}.db"
    for path in (db, *(Path(f"{db}{end}") for end in ("-wal", "-shm", ".lock"))):
        path.unlink(missing_ok=True)
    return db
