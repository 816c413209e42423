"""``SearchOptions``: everything a search needs, checked before its first trial by
:func:`autotune.study._api.prepare_search` and read by the loop.

Each of the search's own options is defined once, in :data:`SEARCH_OPTIONS` (name,
default, unit, help, check: :class:`autotune.specs.Option`): its ``autotune search``
flag, :func:`autotune.search`'s keyword and the :class:`SearchOptions` field all
come from that definition, under its one name. The rest of a search's inputs are
records built from several flags (the dataset, the space, the measurement, the
trial limits, the guard, the study's name and storage)."""
from __future__ import annotations

import math
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError
from autotune.trial import MIB
from autotune.specs import CONFIRM_PRECISION, COUNT, DURATION, FRACTION, GRACE_S, HEARTBEAT_S, \
    INTEGER, POSITIVE_INT, SCREEN_PRECISION, SIZE, STUDIES_DIR, SWITCH, GuardOptions, \
    MeasureSpec, Option, TrialLimits, at_least, one_of
from autotune.study._records import DIRECTIONS
from autotune.taskinfo import task_info

if TYPE_CHECKING:
    from autotune.data import DatasetRef
    from autotune.study._space import SearchSpace

OPTUNA_SAMPLERS = ("gp", "tpe", "nsga2", "random")  # made by autotune.study._optuna_samplers
DEFAULT_N_TRIALS = 20  # without --n-trials or --budget
BUDGET_SHARE = 0.25  # the most of --budget that a search keeps aside for its confirmation
DEFAULT_OPTUNA_SAMPLER = "gp"  # the best in benchmarks/search_efficiency.py

SEARCH_OPTIONS: tuple[Option, ...] = (
    Option("n_trials", None, POSITIVE_INT, "the study's total trial budget (default: as many "
           f"as --budget holds, else {DEFAULT_N_TRIALS})", unit="trials"),
    Option("budget", None, DURATION, "wall-clock limit of this run, e.g. 20m, 1h or 90s, the "
           f"confirmation included (at most {100 * BUDGET_SHARE:.0f}% of it kept for that): "
           "the running trial is finished or, past it, failed (and queued again)", unit="s"),
    Option("timeout", None, DURATION, "stop starting trials after this long: seconds, or 90s, "
           "15m, 2h", unit="s"),
    Option("racing", True, SWITCH, "measure every config to --precision (without it, a new "
           "config is measured to --screen-precision first)"),
    Option("screen_precision", SCREEN_PRECISION, FRACTION, "racing: a new config is measured "
           "to this precision first, and to --precision only if its best case could join "
           "the front (it stops as soon as its best case shows it could not)"),
    Option("priors", True, SWITCH, "do not queue the prior table (device-aware first "
           "configs) after the baseline"),
    Option("confirm", 3, COUNT, "end with a confirmation: the front's N fastest configs "
           "besides the baseline, its knee, its default pick, up to N more that the search "
           "could not tell from its fastest, and the baseline measured again, paired; the "
           "front and the export use those paired figures (0: off)", metavar="N"),
    Option("confirm_rounds", 3, at_least(3), "the confirmation's rounds, at least 3; 5 at "
           "least where every candidate is 3x the baseline or more, whose windows are then "
           "shorter (a paired confirmation: each candidate's pairs, at least)"),
    Option("confirm_by", "auto", one_of("auto", "pairs", "rounds"), "how the confirmation "
           "measures: pairs (the baseline and the candidates in one process, in short "
           "alternating windows, each candidate until its pairs decide it), rounds (each "
           "config in a fresh process, round by round) or auto (pairs on a CPU, rounds on "
           "CUDA)"),
    Option("confirm_precision", CONFIRM_PRECISION, FRACTION, "a config is confirmed when "
           "its paired speed-up's 95%% interval after the rounds is within this; the others "
           "are shown unconfirmed, with why, and the default pick prefers a confirmed one"),
    Option("control_every", 600.0, DURATION, "measure the baseline again (a control) after "
           "this long, so each speed-up is paired with a baseline measured close in time "
           "...", unit="s"),
    Option("control_every_trials", 10, POSITIVE_INT, "... or after this many measured trials",
           unit="trials"),
    Option("optuna_sampler", DEFAULT_OPTUNA_SAMPLER, one_of(*OPTUNA_SAMPLERS),
           "the Optuna sampler that proposes configs (the default is the best in "
           "benchmarks/search_efficiency.py)", old_flag="--sampler"),
    Option("seed", 0, INTEGER, "Optuna sampler and training seed"),
    Option("max_memory", None, SIZE, "memory budget, e.g. 8GiB (KiB/MiB/GiB are powers of "
           "1024, KB/MB/GB of 1000): an Optuna constraint on peak memory", unit="bytes"),
    Option("heartbeat", HEARTBEAT_S, POSITIVE_INT, "seconds between a running trial's "
           "heartbeats", unit="s"),
    Option("grace_period", GRACE_S, POSITIVE_INT, "a trial whose heartbeat is older than this "
           "is failed and its config re-queued once", unit="s"),
)
# search() keywords of an older autotune, read as today's (with a FutureWarning)
RENAMED_KEYWORDS = {"timeout_s": "timeout", "heartbeat_s": "heartbeat",
                    "grace_s": "grace_period", "sampler": "optuna_sampler"}


def with_options(cls: type) -> type:
    """Gives a class, before ``@dataclass`` makes it one, a field for each option of
    :data:`SEARCH_OPTIONS` (its name, its default), after its own fields."""
    for option in SEARCH_OPTIONS:
        cls.__annotations__[option.name] = "Any"
        setattr(cls, option.name, option.default)
    return cls


def checked_options(values: dict[str, Any]) -> dict[str, Any]:
    """Every option of :data:`SEARCH_OPTIONS` in ``values`` (a keyword's or a flag's
    value), checked and as :class:`SearchOptions` keeps it; then the checks that
    involve two options."""
    out = {o.name: o.checked(values.get(o.name, o.default)) for o in SEARCH_OPTIONS}
    if out["grace_period"] <= out["heartbeat"]:
        raise ConfigError(f"--grace-period must be longer than --heartbeat (got "
                          f"{out['grace_period']} <= {out['heartbeat']}): a live worker's "
                          "trial would be failed between two beats")
    return out


def default_study_name(dataset: str, device: str) -> str:
    stem = Path(dataset).stem if dataset.endswith(".pt") else dataset
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{stem}-{device}-{socket.gethostname()}")


MAX_NAME_BYTES = 200  # a file name holds 255 bytes: NAME.db-wal and NAME@HASH fit


def check_study_name(name: object) -> str:
    """A study name that can name its SQLite file and its folder: any characters but
    ``/`` and NUL, at most :data:`MAX_NAME_BYTES` bytes in UTF-8."""
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
@with_options
class SearchOptions:
    """Everything a search needs, checked before the first trial: the records built
    from several flags here, then a field for each option of :data:`SEARCH_OPTIONS`
    (``n_trials``, ``budget``, ..., ``max_memory`` in bytes, durations in seconds)."""

    dataset: DatasetRef
    space: SearchSpace
    storage: str
    study_name: str
    device: str = "cpu"
    studies_dir: Path = Path(STUDIES_DIR)
    measure: MeasureSpec = field(default_factory=MeasureSpec.for_search)
    limits: TrialLimits = field(default_factory=TrialLimits)
    guard: GuardOptions = field(default_factory=GuardOptions)

    @property
    def max_trials(self) -> float:
        """The counted trials the search runs at most: ``n_trials``; if it is not
        given, as many as ``budget`` holds, else :data:`DEFAULT_N_TRIALS`."""
        if self.n_trials is not None:
            return self.n_trials
        return math.inf if self.budget is not None else DEFAULT_N_TRIALS

    def confirmation_size(self, front: int | None = None) -> int:
        """The confirmation's measurements at most: rounds x (the fastest ``confirm``
        of a front of ``front`` configs, the knee, up to ``confirm`` configs off the
        front that the search could not tell from its fastest, the baseline), and the
        closing baseline."""
        if self.confirm == 0:
            return 0
        picked = self.confirm if front is None else min(self.confirm, front)
        knee = front is None or front > self.confirm  # else the knee is among them
        configs = picked + knee + self.confirm + 1  # the contenders, the baseline
        if self.paired_confirmation:  # one paired trial, a figure per config
            return configs
        return self.confirm_rounds * configs + 1

    @property
    def paired_confirmation(self) -> bool:
        """Whether the confirmation is one paired trial (``--confirm-by pairs``;
        ``auto`` on a CPU) rather than rounds of trials (``rounds``; ``auto`` on CUDA,
        where each config's GPU-resident copy of the graph would share one device)."""
        return self.confirm_by == "pairs" or (self.confirm_by == "auto" and
                                              self.device == "cpu")

    @property
    def directions(self) -> list[str]:
        return DIRECTIONS + (["maximize"] if self.guard.objective else [])

    @property
    def metric_names(self) -> list[str]:
        return task_info(self.dataset.task).metric_names(accuracy=self.guard.objective)

    @property
    def budget_mib(self) -> float | None:
        return self.max_memory / MIB if self.max_memory else None

    @property
    def study_dir(self) -> Path:
        """This study's folder: trial logs, guard runs and ``pareto.yaml``."""
        return study_folder(self.studies_dir, self.study_name, self.storage)
