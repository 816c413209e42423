"""A training run that tunes itself, above the training it tunes
(:mod:`autotune.pipeline`): ``_spec`` (how: :class:`TuneSpec`, and each window's
length), ``_candidates`` (what it tries: a :class:`Change` of one knob, and the order),
``_checks`` (the numerics check of a precision candidate), ``_log`` (what it did:
:class:`TuneLog`, each :class:`WindowEvent`), ``_run`` (:class:`TunedRun`, a source of
batches that sometimes swaps pipelines), ``_loop`` (:class:`TunedLoop`, the same under
the caller's own loop) and ``_train`` (:func:`train`, whole epochs with a config,
tuned or not: ``autotune train``).
"""
from __future__ import annotations

from autotune.imports import lazy_exports

_EXPORTS = {
    "Change": "_candidates",
    "candidates": "_candidates",
    "loss_check": "_checks",
    "numerics_check": "_checks",
    "precision_notes": "_checks",
    "TuneLog": "_log",
    "Tried": "_log",
    "WindowEvent": "_log",
    "TunedLoop": "_loop",
    "TunedRun": "_run",
    "TuneSpec": "_spec",
    "fit_window": "_spec",
    "train": "_train",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
