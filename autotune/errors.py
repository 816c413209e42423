"""The small error tree. The CLI prints an ``AutotuneError`` as one line and exits 2
(a ``GuardError`` exits 1: the input was fine, the baseline's training was not).

A message names the option, shows what it got and says how to fix it, in the CLI's
spelling and, where they differ, in the Python API's (``--study-name`` /
``study_name=``)."""
from __future__ import annotations


class AutotuneError(Exception):
    """Base class of every error autotune reports to a user as one line."""


class ConfigError(AutotuneError, ValueError):
    """A knob, a flag or a config file holds a value autotune cannot use."""


class SearchSpaceError(ConfigError):
    """A search space is missing, malformed, or names knobs this machine cannot run."""


class DatasetError(AutotuneError):
    """A dataset is unknown, or missing and cannot be downloaded."""


class StorageError(AutotuneError):
    """A study storage cannot be opened, reached or written, or holds another study."""


class StudyNotFoundError(StorageError, KeyError):
    """No study of that name in the storage."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UserCodeError(AutotuneError):
    """A user's own model factory or dataset function raised while autotune checked
    it, before any trial: one line names the function and its error (the traceback
    under ``--debug``, chained)."""


class GuardError(AutotuneError):
    """The accuracy guard cannot go on: the baseline's guard training failed."""


class DeviceMemoryError(AutotuneError, MemoryError):
    """What a trial would put on the GPU does not fit in its free memory (a trial
    that raises it fails as ``oom``, before it builds anything)."""


class BackendUnavailableError(AutotuneError, ImportError):
    """An optional native library (pyg-lib, torch-sparse, ...) was asked for but is absent."""
