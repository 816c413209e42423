"""The option records of a measurement, a trial's limits and the accuracy guard:
frozen, validated on construction, and the one place each default is written.
:class:`autotune.study._options.SearchOptions` holds them for a search, and the CLI
takes its flags' defaults from them. Imports neither torch, PyG nor Optuna, so
``autotune --help`` stays fast.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from autotune.env import parse_bytes, parse_duration, parse_fraction
from autotune.errors import ConfigError

STUDIES_DIR = "studies"  # where studies live unless told otherwise
SCREEN_PRECISION = 0.10  # racing: a new config is measured to this precision first
# A config is confirmed when its paired speed-up's 95% half-width after the
# confirmation's rounds is within this (--confirm-precision)
CONFIRM_PRECISION = 0.10
# A search's window runs this long at most (its --max-seconds; a lone trial's is
# MeasureSpec's): the same config measured again in another process differs by more
# than a longer window's precision buys, and the front's configs are decided by the
# confirmation's pairs (docs/measurement.md, "Comparisons that hold up across drift")
SEARCH_WINDOW_S = 20.0
DEFAULT_TIMEOUT_S = 900.0  # a trial is killed after this long
HEARTBEAT_S = 10  # Optuna's heartbeat interval for a running trial
GRACE_S = 60  # a trial whose heartbeat is older than this is failed as stale


# A window in which other processes took more than this share of the trial's cores is
# measured again, at most BUSY_RETRIES times (trial/_load.py). $AUTOTUNE_MAX_BUSY sets
# the default (the test suite's parallel workers share the cores on purpose: 1 there).
MAX_BUSY = 0.10
BUSY_RETRIES = 2
MAX_BUSY_ENV = "AUTOTUNE_MAX_BUSY"


def max_busy_default() -> float:
    """``MAX_BUSY``, or ``$AUTOTUNE_MAX_BUSY`` where set."""
    value = os.environ.get(MAX_BUSY_ENV)
    if not value:
        return MAX_BUSY
    try:
        return parse_fraction(value, upto_one=True)
    except ValueError:
        raise ConfigError(f"${MAX_BUSY_ENV} must be a share in (0, 1], such as 10% or 0.1 "
                          f"(got {value!r})") from None


# autotune train's throughput over its trial's: outside this range, a word on why
CARRYOVER = (0.85, 1.15)
FAR_BELOW = 1 / 3  # a trial whose best case is under this share of the best is cut at once


def dominates(mine: Sequence[float], theirs: Sequence[float]) -> bool:
    """Pareto dominance, the one definition: objective vector ``mine`` is as good as
    ``theirs`` in every objective and is not the same point. Every objective is
    maximised, so memory enters negated."""
    return all(a >= b for a, b in zip(mine, theirs)) and tuple(mine) != tuple(theirs)


def dominated(throughput: float, memory_mib: float,
              front: tuple[tuple[float, float], ...]) -> bool:
    """Whether a (seed nodes/s, MiB) point is dominated by one of ``front``'s."""
    return any(dominates((t, -m), (throughput, -memory_mib)) for t, m in front)


@dataclass(frozen=True)
class Screen:
    """Racing: a new config is measured to ``precision`` first, and goes on to the
    full precision only if its optimistic bound (throughput times one plus the
    half-width, memory as measured so far) could join ``front``, the (seed nodes/s,
    MiB) points of the study's current feasible front, within ``budget_mib``; a
    window stops as soon as that bound shows it could not, before either precision.

    Memory counts against what the device has (or ``budget_mib``), not against the
    spread between trials: ``best`` is the fastest throughput measured within it, and
    a config whose best case stays under ``far_below`` of it is cut as soon as that
    shows, whatever memory it saves: at the end of the warm-up (its fastest step),
    or at any block of the window."""

    precision: float = SCREEN_PRECISION
    front: tuple[tuple[float, float], ...] = ()
    budget_mib: float | None = None
    best: float | None = None
    far_below: float = FAR_BELOW

    def over_budget(self, memory_mib: float) -> bool:
        return self.budget_mib is not None and memory_mib > self.budget_mib

    def hopeless(self, best_case: float) -> bool:
        """Whether a throughput that is at best ``best_case`` is far below the best."""
        return self.best is not None and best_case < self.far_below * self.best

    def rules_out(self, rate: float, half_width: float, memory_mib: float) -> bool:
        best_case = rate * (1 + half_width)
        return self.over_budget(memory_mib) or self.hopeless(best_case) or \
            dominated(best_case, memory_mib, self.front)


@dataclass(frozen=True)
class GuardRun:
    """The accuracy guard's training, in the trial's own process after its window
    (a fresh process would load the dataset and import torch again: half a search's
    time went to that): a freshly built pipeline trains for ``epochs`` (the baseline,
    which sets the budget); any other trial's model trains for ``budget_s`` seconds
    in all, an eager config's warm-up and window counted
    (:class:`autotune.trial._worker.GuardMark`), and is evaluated on the validation split.
    A trial trains only where it could join the feasible ``front`` ((throughput,
    MiB) points) within ``budget_mib``, unless ``always`` (accuracy is an
    objective) or it is the baseline."""

    epochs: int | None = None
    budget_s: float | None = None
    front: tuple[tuple[float, float], ...] = ()
    budget_mib: float | None = None
    always: bool = False

    def wanted(self, throughput: float, memory_mib: float) -> bool:
        """Whether a trial measured at these figures trains for the guard."""
        if self.always or self.epochs is not None:
            return True
        if self.budget_mib is not None and memory_mib > self.budget_mib:
            return False
        return not dominated(throughput, memory_mib, self.front)


@dataclass(frozen=True)
class MeasureSpec:
    """How long to warm up and measure. The warm-up runs ``warmup_steps`` steps and
    ``min_warmup_s`` seconds at least (up to ``max_warmup_steps``): a step's one-off
    costs, oneDNN's kernels for each new batch shape and the heap's growth, fade over
    the first few dozen steps, which a config of short steps runs in that time. The
    timed window runs in blocks of steps until the throughput's relative 95%
    confidence half-width is at most ``precision`` (and at least ``min_steps``
    steps, ``min_window_s`` seconds and 4 blocks have run), or until
    ``max_window_s``, which wins over the minimums. A window in which other processes
    took more than ``max_busy`` of the trial's cores is measured again, up to
    ``busy_retries`` times, then kept and flagged disturbed (1 turns this off)."""

    warmup_steps: int = 5
    min_warmup_s: float = 2.0
    min_steps: int = 10
    min_window_s: float = 1.0
    max_window_s: float = 60.0
    precision: float = 0.03
    settle_steps: int = 3
    max_warmup_steps: int = 60
    memory_interval_s: float = 0.005
    screen: Screen | None = None
    guard: GuardRun | None = None  # the accuracy guard's training after the window
    max_busy: float = dataclasses.field(default_factory=lambda: max_busy_default())
    busy_retries: int = BUSY_RETRIES

    @classmethod
    def for_search(cls, **fields: Any) -> "MeasureSpec":
        """A search's defaults: windows of :data:`SEARCH_WINDOW_S` at most."""
        return cls(**{"max_window_s": SEARCH_WINDOW_S, **fields})

    def __post_init__(self) -> None:
        for name in ("warmup_steps", "min_steps", "settle_steps", "max_warmup_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (0 if name == "warmup_steps" else 1):
                raise ConfigError(f"{name.replace('_', '-')} must be a positive int "
                                  f"(got {value!r})")
        if not self.max_window_s > 0:
            raise ConfigError(f"max-seconds must be positive (got {self.max_window_s!r})")
        if not self.min_warmup_s >= 0:
            raise ConfigError(f"--warmup-time must be >= 0 (got {self.min_warmup_s!r})")
        if not self.min_window_s >= 0:
            raise ConfigError(f"min_window_s must be >= 0 (got {self.min_window_s!r})")
        for value in (self.precision, self.screen.precision if self.screen else 0.5):
            if not 0 < value < 1:
                raise ConfigError("--precision (precision=) must be a fraction in (0, 1), "
                                  f"such as 3% or 0.03 (got {value!r})")
        if not 0 < self.max_busy <= 1:
            raise ConfigError("--max-busy must be a share in (0, 1], such as 10% or 0.1 "
                              f"(got {self.max_busy!r})")
        if not isinstance(self.busy_retries, int) or self.busy_retries < 0:
            raise ConfigError(f"busy_retries must be an int >= 0 (got {self.busy_retries!r})")
        if not 0 < self.memory_interval_s <= 0.01:
            raise ConfigError("the memory sampling interval must be in (0, 10 ms] "
                              f"(got {self.memory_interval_s!r})")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> MeasureSpec:
        screen, guard = values.get("screen"), values.get("guard")
        if screen is not None:
            screen = Screen(**{**screen, "front": tuple(map(tuple, screen["front"]))})
        if guard is not None:
            guard = GuardRun(**{**guard, "front": tuple(map(tuple, guard["front"]))})
        return cls(**{**values, "screen": screen, "guard": guard})


@dataclass(frozen=True)
class TrialLimits:
    """What the watchdog enforces."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_limit_bytes: int | None = None
    # the trial's CUDA caching allocator is capped to this (a smaller GPU, or a share
    # of one); gpu_sampling's fit check counts it
    gpu_memory_limit_bytes: int | None = None


def check_limits(limits: TrialLimits | None, device: str) -> None:
    """A GPU memory cap is for CUDA trials: asking it of CPU trials is a mistake."""
    if limits is not None and limits.gpu_memory_limit_bytes is not None and device != "cuda":
        raise ConfigError(f"--gpu-memory-limit caps what a CUDA trial allocates on the GPU; "
                          f"these trials run on {device}")


@dataclass(frozen=True)
class GuardOptions:
    """``ratio``: --accuracy-guard (None: no constraint); ``objective``: accuracy is
    the third objective; ``epochs``: the baseline's epochs that set the budget."""

    ratio: float | None = None
    epochs: int = 3
    objective: bool = False

    def __post_init__(self) -> None:
        if self.ratio is not None and not 0 < self.ratio <= 1:
            raise ConfigError(f"--accuracy-guard must be in (0, 1], e.g. 0.99 "
                              f"(got {self.ratio!r})")
        if not (isinstance(self.epochs, int) and self.epochs > 0):
            raise ConfigError(f"--guard-epochs must be a positive int (got {self.epochs!r})")

    @property
    def active(self) -> bool:
        return self.ratio is not None or self.objective


def baseline_metric(ref: dict) -> float:
    """The baseline's validation metric in a study's guard reference (written by
    :func:`autotune.study._guard.reference_of`: ``baseline_validation``, named by the task's
    metric; ``baseline_val_acc`` in a study made before that)."""
    if "baseline_validation" in ref:
        return next(iter(ref["baseline_validation"].values()))
    return ref["baseline_val_acc"]


@dataclass(frozen=True)
class Check:
    """What an option's value must be: ``convert`` turns a value (a flag's text, or a
    Python value given as a keyword) into the value kept, raising ValueError or
    TypeError on a bad one; ``expected`` says what it takes, for the one-line error."""

    expected: str
    convert: Callable[..., Any]
    labelled: bool = False  # ``convert(value, label)``: it words its own errors
    choices: tuple[str, ...] | None = None  # for a check that takes one of these

    def __call__(self, label: str, value: Any) -> Any:
        try:
            return self.convert(value, label) if self.labelled else self.convert(value)
        except ConfigError:  # worded already (a ValueError too)
            raise
        except (TypeError, ValueError):
            raise ConfigError(f"{label} must be {self.expected} (got {value!r})") from None


def _whole(least: int) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or isinstance(value, float):
            raise TypeError(value)
        number = int(value)  # an int, or a flag's text
        if number < least:
            raise ValueError(value)
        return number
    return convert


def _positive(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(value)
    number = float(value)  # a number, or a flag's text
    if not number > 0:
        raise ValueError(value)
    return number


def _switch(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(value)
    return value


def _duration_or_zero(value: Any) -> float:
    return parse_duration(value, zero=True)


def _size(value: Any, label: str) -> int:
    return parse_bytes(value, option=label)


def one_of(*choices: str) -> Check:
    def convert(value: Any) -> str:
        if value not in choices:
            raise ValueError(value)
        return value
    return Check(f"one of {', '.join(choices)}", convert, choices=choices)


POSITIVE_INT = Check("a positive integer", _whole(1))
COUNT = Check("a whole number >= 0", _whole(0))
POSITIVE_NUMBER = Check("a positive number", _positive)
INTEGER = Check("an integer", _whole(-2 ** 63))
SWITCH = Check("True or False", _switch)
DURATION = Check("a duration such as 90s, 15m or 2h", parse_duration)
DURATION_OR_ZERO = Check("a duration such as 2s, or 0", _duration_or_zero)
FRACTION = Check("a fraction in (0, 1) such as 3% or 0.03", parse_fraction)
SHARE = Check("a share in (0, 1] such as 10% or 0.1",
              lambda value: parse_fraction(value, upto_one=True))
SIZE = Check("a size such as 8GiB, 512MiB or 2GB", _size, labelled=True)  # parse_bytes words it


def at_least(least: int) -> Check:
    return Check(f"a whole number >= {least}", _whole(least))


@dataclass(frozen=True)
class Option:
    """One option, defined once. Its ``name`` is the flag (``--name``, ``_`` as
    ``-``), the flag's destination, :func:`autotune.search`'s keyword and the
    :class:`autotune.study.SearchOptions` field; ``default`` is each one's default
    (None: not set), ``check`` the one check of a value however it was given, and
    ``unit`` what a number counts (seconds, bytes)."""

    name: str
    default: Any
    check: Check
    help: str
    unit: str = ""
    metavar: str | None = None
    old_flag: str | None = None  # a flag's former name, still read (and said so)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        """How an error names it: ``--n-trials (n_trials=)``."""
        return f"{self.flag} ({self.name}=)"

    def checked(self, value: Any) -> Any:
        """``value`` as the option keeps it; None stays None where the default is."""
        if value is None and self.default is None:
            return None
        return self.check(self.label, value)
