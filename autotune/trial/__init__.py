"""One trial, measured in a process of its own: ``_runner`` starts it (a fresh
interpreter or a fork of ``_forkserver``'s), ``_worker`` is that process, ``_window``
warms up and times the window, ``_load`` says what else ran on the trial's cores
meanwhile, ``_result`` is what comes back (:class:`TrialResult`),
``_profile`` a ``torch.profiler`` trace of its steps, ``_pairs`` a reference and its
candidates measured in paired windows in one process (the confirmation's), ``_spread``
what those pairs showed at a window length.
"""
from __future__ import annotations

from autotune.imports import lazy_exports

_EXPORTS = {
    "ProfileSpec": "_profile",
    "check_profile_folder": "_profile",
    "CompileStats": "_result",
    "MIB": "_result",
    "MemoryStats": "_result",
    "Observed": "_result",
    "PARTS": "_result",
    "TrialResult": "_result",
    "WindowStats": "_result",
    "ratio_half_width": "_result",
    "rate_half_width": "_result",
    "t975": "_result",
    "Load": "_load",
    "LoadMeter": "_load",
    "busy_over": "_result",
    "busy_note": "_load",
    "PairSpec": "_pairs",
    "Known": "_spread",
    "costlier": "_spread",
    "known_of": "_spread",
    "pooled": "_spread",
    "BUSY_WINDOW_S": "_pairs",
    "WINDOW_S": "_pairs",
    "ForkServer": "_forkserver",
    "run_trial": "_runner",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
