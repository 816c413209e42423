"""A search: ``autotune.search`` and the study it keeps.

- ``_api``: :func:`search`, :func:`prepare_search`, :class:`SearchResult`;
- ``_options``: :class:`SearchOptions`, the search's options and their defaults;
- ``_space``: search spaces, the only code that calls ``trial.suggest_*``;
- ``_identity``: creating or joining a study, and what it must keep;
- ``_search``: one run of the search (:class:`Search`): reserve, measure, guard,
  tell, confirm; ``_clock``: its time and budget; ``_recovery``: interrupted, stale and orphan trials;
- ``_confirm``: when and what the controls and the confirmation measure; ``_paired``: paired speed-ups;
- ``_constraints``: memory budget and accuracy guard as Optuna constraints;
- ``_guard``: the accuracy guard's training runs;
- ``_optuna_samplers``: the Optuna samplers; ``_priors``: the prior table;
- ``_records``: :class:`TrialRecord`, :class:`StudyRecord`, the attribute keys;
- ``_pareto``: the front's maths; ``_front``: the Pareto rows, ``pareto.yaml`` and exports;
- ``_studies``: naming, finding and loading studies;
- ``_tuned``: a training run that tuned itself (``autotune train --tune``) as a study;
- ``_optuna``: the one adapter to Optuna's private API.

Reading a study (records, front, studies) imports neither torch nor PyG.
"""
from __future__ import annotations

from autotune.imports import lazy_exports

_EXPORTS = {
    "SearchPlan": "_api",
    "SearchRequest": "_api",
    "SearchResult": "_api",
    "baseline_record": "_api",
    "default_config": "_api",
    "prepare_search": "_api",
    "search": "_api",
    "confirmation_words": "_front",
    "export_blob": "_front",
    "study_front": "_front",
    "study_reference": "_front",
    "write_export": "_front",
    "SEARCH_OPTIONS": "_options",
    "SearchOptions": "_options",
    "study_id": "_optuna",
    "Ticker": "_progress",
    "drift_lines": "_progress",
    "metric_short": "_progress",
    "pm": "_progress",
    "progress_line": "_progress",
    "ratio": "_progress",
    "seeds_per_s": "_progress",
    "drifts": "_paired",
    "interrupted_note": "_confirm",
    "Point": "_pareto",
    "StudyRecord": "_records",
    "TrialRecord": "_records",
    "points": "_records",
    "RunRecorder": "_tuned",
    "is_run": "_tuned",
    "run_lines": "_tuned",
    "run_report": "_tuned",
    "default_storage": "_studies",
    "delete_study": "_studies",
    "deletion": "_studies",
    "load_study": "_studies",
    "only_study": "_studies",
    "study_rows": "_studies",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
