"""``SearchOptions``: everything a search needs, checked before its first trial by
:func:`autotune.study._api.prepare_search` and read by the loop. Its defaults are
the search's defaults: the CLI's flags and :func:`autotune.search` take theirs from
here."""
from __future__ import annotations

import math
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.trial import MIB
from autotune.specs import GRACE_S, HEARTBEAT_S, SCREEN_PRECISION, STUDIES_DIR, GuardOptions, \
    MeasureSpec, TrialLimits
from autotune.study._records import DIRECTIONS
from autotune.taskinfo import task_info

if TYPE_CHECKING:
    from autotune.data import DatasetRef
    from autotune.study._space import SearchSpace

OPTUNA_SAMPLERS = ("gp", "tpe", "nsga2", "random")  # made by autotune.study._optuna_samplers
DEFAULT_N_TRIALS = 20  # without --n-trials or --budget
BUDGET_SHARE = 0.25  # the most of --budget that a search keeps aside for its confirmation
DEFAULT_SAMPLER = "gp"  # the best in benchmarks/search_efficiency.py


def default_study_name(dataset: str, device: str) -> str:
    stem = Path(dataset).stem if dataset.endswith(".pt") else dataset
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{stem}-{device}-{socket.gethostname()}")


MAX_NAME_BYTES = 200  # a file name holds 255 bytes: NAME.db-wal and NAME@HASH fit


def check_study_name(name: object) -> str:
    """A study name that can name its SQLite file and its folder: any characters but
    ``/`` and NUL, at most :data:`MAX_NAME_BYTES` bytes in UTF-8."""
    from autotune.errors import ConfigError

    if not isinstance(name, str) or not name.strip() or name in (".", ".."):
        raise ConfigError(f"--study-name (study_name=) must be a non-empty name (got {name!r})")
    if "/" in name or "\0" in name:
        raise ConfigError(f"--study-name (study_name=) {name!r} names a file and a folder: "
                          "leave out '/' and NUL")
    size = len(name.encode())
    if size > MAX_NAME_BYTES:
        raise ConfigError(f"--study-name (study_name=) is {size} bytes long; its file and "
                          f"folder names hold at most {MAX_NAME_BYTES} (got {name[:40]!r}...)")
    return name


def default_storage(studies_dir: str | Path, study_name: str) -> str:
    return f"sqlite:///{(Path(studies_dir) / f'{study_name}.db').resolve()}"


def study_folder(studies_dir: str | Path, study_name: str, storage: str) -> Path:
    """A study's folder under ``studies_dir`` (trial logs, guard runs, pareto.yaml):
    ``NAME`` for the default SQLite file ``NAME.db`` beside it, ``NAME@HASH`` for any
    other storage (a hash of its URL without the password), so two studies of one
    name in two storages never write into each other's folder."""
    import hashlib

    from autotune.storage import masked  # imports Optuna: only when asked

    if storage == default_storage(studies_dir, study_name):
        return Path(studies_dir) / study_name
    digest = hashlib.sha1(masked(storage).encode()).hexdigest()[:8]
    return Path(studies_dir) / f"{study_name}@{digest}"


@dataclass(frozen=True)
class SearchOptions:
    """Everything a search needs, checked before the first trial."""

    dataset: DatasetRef
    space: SearchSpace
    storage: str
    study_name: str
    device: str = "cpu"
    n_trials: int | None = None  # None: DEFAULT_N_TRIALS, or as many as budget_s holds
    timeout_s: float | None = None
    sampler: str = DEFAULT_SAMPLER
    seed: int = 0
    max_memory_bytes: int | None = None
    studies_dir: Path = Path(STUDIES_DIR)
    measure: MeasureSpec = field(default_factory=MeasureSpec)
    limits: TrialLimits = field(default_factory=TrialLimits)
    heartbeat_s: int = HEARTBEAT_S
    grace_s: int = GRACE_S
    guard: GuardOptions = field(default_factory=GuardOptions)
    budget_s: float | None = None  # wall clock: the running trial is finished or failed
    racing: bool = True  # a new config is screened at screen_precision first
    screen_precision: float = SCREEN_PRECISION
    priors: bool = True  # enqueue the prior table right after the baseline
    confirm: int = 3  # the front's fastest N (and the knee, and the baseline) confirmed
    confirm_rounds: int = 3  # interleaved rounds of the confirmation
    control_every_s: float = 600.0  # the baseline is measured again after this long ...
    control_every_trials: int = 10  # ... or after this many measured trials

    @property
    def max_trials(self) -> float:
        """The counted trials the search runs at most: ``n_trials``; if it is not
        given, as many as ``budget_s`` holds, else :data:`DEFAULT_N_TRIALS`."""
        if self.n_trials is not None:
            return self.n_trials
        return math.inf if self.budget_s is not None else DEFAULT_N_TRIALS

    def confirmation_size(self, front: int | None = None) -> int:
        """The confirmation's measurements at most: rounds x (the fastest ``confirm``
        of a front of ``front`` configs, the knee, the baseline), and the closing
        baseline."""
        if self.confirm == 0:
            return 0
        picked = self.confirm if front is None else min(self.confirm, front)
        knee = front is None or front > self.confirm  # else the knee is among them
        return self.confirm_rounds * (picked + knee + 1) + 1

    @property
    def directions(self) -> list[str]:
        return DIRECTIONS + (["maximize"] if self.guard.objective else [])

    @property
    def metric_names(self) -> list[str]:
        return task_info(self.dataset.task).metric_names(accuracy=self.guard.objective)

    @property
    def budget_mib(self) -> float | None:
        return self.max_memory_bytes / MIB if self.max_memory_bytes else None

    @property
    def study_dir(self) -> Path:
        """This study's folder: trial logs, guard runs and ``pareto.yaml``."""
        return study_folder(self.studies_dir, self.study_name, self.storage)
