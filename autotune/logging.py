"""The ``autotune`` logger, as ``optuna.logging`` does it: every module logs under it
(:func:`get_logger`), the library installs no handler, and the CLI installs one
(:func:`enable_default_handler`) that writes ``autotune: MESSAGE`` to stderr. A
script or a service routes, levels or silences the library with the standard
``logging`` module or :func:`set_verbosity`::

    import logging
    import autotune.logging

    autotune.logging.set_verbosity(logging.ERROR)  # storage retries, lock waits: quiet

Without a handler anywhere, Python's last-resort handler still prints warnings on
stderr. The search's progress lines are not log records: they are the ``progress``
callback's (see :func:`autotune.search`).
"""
from __future__ import annotations

import logging
import sys

ROOT = "autotune"
FORMAT = "autotune: %(message)s"
_handler: logging.Handler | None = None


def get_logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (``autotune.storage``), under the root's."""
    return logging.getLogger(name if name.startswith(ROOT) else f"{ROOT}.{name}")


def set_verbosity(level: int) -> None:
    """The least severe level the ``autotune`` loggers pass on (``logging.INFO``...)."""
    logging.getLogger(ROOT).setLevel(level)


def get_verbosity() -> int:
    return logging.getLogger(ROOT).getEffectiveLevel()


def enable_default_handler(level: int = logging.INFO) -> None:
    """Writes the library's records to stderr as ``autotune: MESSAGE`` from ``level``
    on (the CLI's); once, however often it is called."""
    global _handler
    root = logging.getLogger(ROOT)
    if _handler is None:
        _handler = _Stderr()
        _handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(_handler)
    root.setLevel(level)
    root.propagate = False  # an application's root handler would print it twice


def disable_default_handler() -> None:
    global _handler
    root = logging.getLogger(ROOT)
    if _handler is not None:
        root.removeHandler(_handler)
        _handler = None
    root.propagate = True


class _Stderr(logging.StreamHandler):
    """A handler on whatever ``sys.stderr`` is when a record is written (a test's
    capture, a redirected stream), not on the one it was made with."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass
