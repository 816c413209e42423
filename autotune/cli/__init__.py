"""The ``autotune`` command: each subcommand's flags parsed (``_flags``), the library
called in a short function (``_main``), the result rendered (``_render``); the
report (``_report``) and the dashboard's server (``_dashboard``).
"""
from __future__ import annotations

from autotune.imports import lazy_exports

_EXPORTS = {
    "main": "_main",
    "save_study_note": "_report",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
