"""The small error tree. The CLI prints an ``AutotuneError`` as one line and exits 2."""
from __future__ import annotations


class AutotuneError(Exception):
    """Base class of every error autotune reports to a user as one line."""


class ConfigError(AutotuneError, ValueError):
    """A knob, a flag or a config file holds a value autotune cannot use."""


class DatasetError(AutotuneError):
    """A dataset is unknown, or missing and cannot be downloaded."""


class BackendUnavailableError(AutotuneError, ImportError):
    """An optional native library (pyg-lib, torch-sparse, ...) was asked for but is absent."""
