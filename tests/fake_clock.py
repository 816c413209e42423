"""A clock for searches on fake machines: a fake measurement that took ``s`` seconds
on the machine it stands for calls ``clock.sleep(s)``, which moves the search's clock
on at once instead of sleeping. The search's own work (planning, storing each
measurement in the study) still takes real time, read from the same clock, so a
budget is spent on both as on the real machine, and a test's wall time is only the
search's own work: it holds on a slow or busy CI machine as on a quiet one."""
from __future__ import annotations

import importlib
import pkgutil
import time as _time

import pytest


class FakeClock:
    """``time``'s readings and ``sleep``, as the search's modules call them: the
    real clock plus every second slept so far (``ahead``)."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")  # as time.sleep says
        self.ahead += seconds

    def time(self) -> float:
        return _time.time() + self.ahead

    def monotonic(self) -> float:
        return _time.monotonic() + self.ahead

    def perf_counter(self) -> float:
        return _time.perf_counter() + self.ahead

    def __getattr__(self, name: str):  # strftime and the rest: the real module's
        return getattr(_time, name)


@pytest.fixture
def fake_clock(monkeypatch) -> FakeClock:
    """A :class:`FakeClock` in place of the module-level ``time`` of every module of
    the search (``autotune.study``, each imported now: one imported later would keep
    the real clock). The trial runner, the storage's locks and everything else keep
    the real clock (so does a heartbeat's staleness, ``_recovery``'s local import: a
    beat on the fake clock, ahead of the real one, reads as fresh)."""
    import autotune.study

    clock = FakeClock()
    for found in pkgutil.iter_modules(autotune.study.__path__, "autotune.study."):
        module = importlib.import_module(found.name)
        if getattr(module, "time", None) is _time:
            monkeypatch.setattr(module, "time", clock)
    return clock
