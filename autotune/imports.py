"""A user's own code by import path: ``package.module:name``.

A trial runs in a fresh process, so a model factory or a dataset function crosses
the process boundary as the path that imports it there, the way entry points and
``multiprocessing``'s spawn name a callable. A lambda, a local function or a name in
``__main__`` has no such path, and is refused here with the reason.
"""
from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable, TypeVar

from autotune.config import is_import_path
from autotune.errors import AutotuneError, ConfigError, UserCodeError

T = TypeVar("T")


def import_path_of(obj: Any, *, what: str, option: str) -> str:
    """The import path of ``obj``, checked to import back to the same object."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if module is None or not callable(obj):
        raise ConfigError(f"{option} must be a function or an import path "
                          f"'package.module:name' (got {obj!r})")
    why = None
    if "<lambda>" in qualname or "<locals>" in qualname:
        why = "a lambda or a local function cannot be imported by name in a trial process"
    elif module == "__main__":
        why = "a name in __main__ cannot be imported in a trial process"
    if why is None:
        path = f"{module}:{qualname}"
        try:
            if import_object(path, what=what, option=option) is obj:
                return path
        except ConfigError:
            pass
        why = f"'{path}' does not import back to it"
    raise ConfigError(f"{option}: {why}; define the {what} at module level in an importable "
                      f"module and pass it (or 'package.module:name', --model/--dataset on "
                      f"the command line)")


def import_object(path: str, *, what: str, option: str) -> Any:
    """Imports ``package.module:name`` (``name`` may be dotted: ``Class.method``)."""
    if not is_import_path(path):
        raise ConfigError(f"{option} must be an import path 'package.module:name' "
                          f"(got {path!r})")
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{option} {path!r}: cannot import module {module_name!r} ({exc}); "
                          "is it on PYTHONPATH?") from exc
    except Exception as exc:  # the user's module raised while it was imported
        raise UserCodeError(f"{option} {path!r}: importing module {module_name!r} raised "
                            f"{_said(exc)}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{option} {path!r}: module {module_name!r} has no {what} "
                              f"{attr!r}") from None
    if not callable(obj):
        raise ConfigError(f"{option} {path!r} is not callable (got {type(obj).__name__})")
    return obj


def user_code(what: str, path: str, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, a call of the user's own ``path`` (a model factory, a dataset
    function): an error it raises becomes one line naming the function
    (:class:`UserCodeError`, the original chained: ``--debug`` shows its traceback).
    autotune's own errors pass through unchanged."""
    try:
        return call(*args)
    except AutotuneError:
        raise
    except Exception as exc:
        raise UserCodeError(f"{what} {path!r} raised {_said(exc)}") from exc


def _said(exc: Exception) -> str:
    """What a user's code raised, on one line: ``ValueError: its message``."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def lazy_exports(package: str, exports: dict[str, str],
                 subpackages: tuple[str, ...] = (),
                 moved: dict[str, str] | None = None) -> Callable[[str], Any]:
    """A package's ``__getattr__`` that imports a public name from its private module
    on first use (``exports``: name -> module inside ``package``), as optuna's
    ``_LazyImport`` does: so ``autotune --help`` and the commands that only read a
    study never import torch or PyG through a package's ``__init__``. Each of
    ``subpackages`` is imported on first use too (``autotune.study.RunRecorder``
    after a plain ``import autotune``). A name in ``moved`` (name -> the package it
    moved to) is still reachable here, with a FutureWarning that says where it
    lives now."""
    moved = moved or {}

    def __getattr__(name: str) -> Any:
        if name in subpackages:
            return importlib.import_module(f"{package}.{name}")
        if name in moved:
            warnings.warn(f"{package}.{name} moved to {moved[name]}; import it from there",
                          FutureWarning, stacklevel=2)
            return getattr(importlib.import_module(moved[name]), name)
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
