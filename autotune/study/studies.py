"""Finding, opening and creating studies. Imports neither torch nor PyG, so the
commands that only read a study (show, export, dashboard, report) start fast."""
from __future__ import annotations

from pathlib import Path

import optuna

from autotune.errors import StudyNotFoundError
from autotune.storage import masked, open_storage
from autotune.study.options import STUDIES_DIR, default_storage, default_study_name, \
    study_folder  # noqa: F401


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
