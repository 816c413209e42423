"""Where studies live: Optuna's RDB storage, opened for many workers on many hosts.

Optuna and SQLAlchemy do the work; this module only sets them up:

- URLs: ``postgresql://`` is routed to psycopg 3 when psycopg2 is absent (the
  ``postgres`` extra installs psycopg); a password never leaves :func:`masked`.
- Connection pools sized for one search process (its main thread, the heartbeat
  thread and the study lock), checked before use (``pool_pre_ping``), and storage
  calls retried with back-off when the connection drops mid-call.
- SQLite in WAL mode with a long busy timeout, so a reader such as optuna-dashboard
  cannot make a writing search fail with "database is locked" (optuna-dashboard#545).
- Optuna's heartbeat: a thread beats for the trial being measured; the study
  module fails a trial whose worker stopped beating.
- Two locks no library offers for both SQLite and PostgreSQL: the study lock, held
  while a worker reserves a trial of the shared budget, and the per-host measurement
  lock, held while a trial runs so that two trials on one host never measure at once.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import sqlite3
import threading
import time
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Any, Callable, Iterator

import optuna

from autotune.env import install_hint, writable_dir
from autotune.errors import StorageError
from autotune.logging import get_logger

log = get_logger(__name__)


RETRIES = 5  # storage calls retried this many times after a dropped connection
RETRY_FIRST_WAIT_S = 0.5  # then doubled each time: 0.5 + 1 + 2 + 4 + 8 = 15.5 s in all
SQLITE_BUSY_TIMEOUT_S = 60
# Two processes opening a brand-new PostgreSQL database at once both create Optuna's
# tables and types; the loser's CREATE fails on a unique index. Its retry finds them made.
SCHEMA_RACE_ERRORS = ("UniqueViolation", "IntegrityError", "DuplicateTable", "DuplicateObject")
SCHEMA_RACE_RETRIES = 3
POOL = {"pool_size": 2, "max_overflow": 2}  # per search process: see README, PostgreSQL
LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"
DEFAULT_LOCK_DIR = Path("/tmp/autotune-locks")
LOCK_NOTICE_S = 15.0  # a process waiting for a lock says who holds it this often
LOCK_POLL_S = 0.05
_DIALECTS = ("sqlite", "postgresql")


def masked(url: str) -> str:
    """A storage URL with its password hidden."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def normalise_url(url: str) -> str:
    """Checks the URL and picks an installed PostgreSQL driver for ``postgresql://``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StorageError(f"--storage (storage=) {url!r} is not a database URL; use e.g. "
                           "sqlite:///studies/x.db or postgresql://user@host/db") from exc
    if parsed.get_backend_name() not in _DIALECTS:
        raise StorageError(f"--storage {masked(url)}: autotune supports sqlite and postgresql "
                           f"(got {parsed.get_backend_name()!r})")
    if parsed.get_backend_name() == "postgresql":
        driver = parsed.get_driver_name() if "+" in parsed.drivername else None
        if driver is None:
            driver = "psycopg2" if _importable("psycopg2") else "psycopg"
            parsed = parsed.set(drivername=f"postgresql+{driver}")
        if not _importable(driver):
            raise StorageError(f"--storage {masked(url)} needs the {driver} driver: "
                               f"{install_hint('postgres')}")
    return parsed.render_as_string(hide_password=False)


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _is_dropped_connection(exc: BaseException) -> bool:
    """True for errors a retry can cure: a lost connection or a busy SQLite file.
    Optuna re-raises SQLAlchemy's errors as StorageInternalError, so look at the cause."""
    from sqlalchemy import exc as sa

    cause = exc.__cause__ if isinstance(exc, optuna.exceptions.StorageInternalError) else exc
    if isinstance(cause, sa.DBAPIError) and cause.connection_invalidated:
        return True
    return isinstance(cause, (sa.OperationalError, sa.InterfaceError))


def _retrying(method: Callable) -> Callable:
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        wait = RETRY_FIRST_WAIT_S
        for attempt in range(1, RETRIES + 2):
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:
                if attempt > RETRIES or not _is_dropped_connection(exc):
                    raise
                cause = exc.__cause__ or exc
                log.warning("storage call %s failed (%s: %s); retry %d/%d in %g s",
                            method.__name__, type(cause).__name__,
                            " ".join(str(cause).split())[:120], attempt, RETRIES, wait)
                time.sleep(wait)
                wait *= 2
    return call


class RetryingRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage whose calls survive a dropped connection or a busy file.

    A retried write whose first attempt did commit before the connection dropped is
    applied twice; for ``create_new_trial`` that leaves one extra RUNNING trial that
    no worker claims. Until the grace period passes it holds a budget slot (a worker
    waits rather than overrun the budget); then any worker fails it as an orphan
    (:func:`autotune.study._recovery.fail_orphans`) and the slot is free again.
    """


# Every public method of the storage API RDBStorage implements (BaseStorage's and the
# heartbeat's, its bases), retried: none is named by hand, so one that a later Optuna
# adds is retried too.
for _api in optuna.storages.RDBStorage.__mro__[1:]:
    for _name, _member in vars(_api).items():
        if not _name.startswith("_") and callable(_member):
            setattr(RetryingRDBStorage, _name,
                    _retrying(getattr(optuna.storages.RDBStorage, _name)))


def retried(call: Callable, *args: Any) -> Any:
    """``call(*args)`` retried like the storage's own methods (for a storage call
    outside its public API, made in :mod:`autotune.study._optuna`)."""
    @functools.wraps(call)  # its retries are reported under its own name
    def method(_self, *a: Any) -> Any:
        return call(*a)

    return _retrying(method)(None, *args)


def open_storage(url: str, *, heartbeat_s: int | None = None,
                 grace_s: int | None = None) -> RetryingRDBStorage:
    """Opens (and, for SQLite, creates) a storage; a bad URL, a missing driver or an
    unreachable server is a one-line StorageError."""
    from sqlalchemy.engine import make_url

    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine_kwargs: dict[str, Any] = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
        if parsed.database:
            _prepare_sqlite(Path(parsed.database))
    else:
        engine_kwargs = {**POOL, "pool_pre_ping": True, "pool_recycle": 1800,
                         "connect_args": {"application_name": "autotune", "connect_timeout": 10}}
    attempt = 0
    while True:
        try:
            import warnings

            with warnings.catch_warnings():  # heartbeat_interval is "experimental" in name
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RetryingRDBStorage(url, engine_kwargs=engine_kwargs,
                                          heartbeat_interval=heartbeat_s, grace_period=grace_s)
        except Exception as exc:  # the driver's own error: unreachable host, bad database
            cause = exc.__cause__ or exc
            if attempt < SCHEMA_RACE_RETRIES and type(cause).__name__ in SCHEMA_RACE_ERRORS:
                attempt += 1
                time.sleep(0.5 * attempt)  # another process is creating the tables
                continue
            raise StorageError(f"cannot open storage {masked(url)}: {type(cause).__name__}: "
                               f"{' '.join(str(cause).split())[:200]}") from exc


def check_storage(url: str) -> None:
    """That ``url`` opens, creating nothing: a SQLite file that does not exist yet only
    needs a writable folder (the study creates it once every other check has passed,
    so a refused search leaves no empty ``.db`` behind); an existing file must be a
    database; a server is connected to."""
    from sqlalchemy.engine import make_url

    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        open_storage(url)
        return
    path = Path(parsed.database)
    if path.exists():
        try:
            read_only = f"{path.resolve().as_uri()}?mode=ro"
            with closing(sqlite3.connect(read_only, uri=True)) as conn:
                conn.execute("PRAGMA schema_version")
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"cannot open storage sqlite:///{path}: {exc}") from exc
    else:
        _check_folder(path)


def _check_folder(path: Path) -> None:
    """That the study database ``path`` can be written into its folder."""
    if not writable_dir(path.parent):
        raise StorageError(f"cannot write the study database in '{path.parent}'; pass a "
                           "writable --studies-dir or another --storage")


def _prepare_sqlite(path: Path) -> None:
    """Creates the folder and switches the file to WAL, in which readers never block
    the writer (the setting is kept in the file, so optuna-dashboard gets it too)."""
    _check_folder(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"cannot open storage sqlite:///{path}: {exc}") from exc


class Heartbeat:
    """Beats for one trial from a thread while the trial is measured, as Optuna's
    ``optimize`` does (ask/tell has no beat of its own)."""

    def __init__(self, storage: optuna.storages.BaseStorage, trial_id: int):
        self._storage, self._trial_id = storage, trial_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="heartbeat")

    def _beat(self) -> None:
        interval = self._storage.get_heartbeat_interval()
        while True:
            try:
                self._storage.record_heartbeat(self._trial_id)
            except Exception as exc:  # retries exhausted: say so; the trial may go stale
                log.warning("heartbeat for trial id %s failed: %s", self._trial_id,
                            type(exc).__name__)
            if self._stop.wait(interval):
                return

    def __enter__(self) -> "Heartbeat":
        if self._storage.get_heartbeat_interval() is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


@contextmanager
def study_lock(url: str, study_name: str) -> Iterator[None]:
    """Serialises the workers of one study while one of them reserves a trial, so
    that a shared ``--n-trials`` is never overrun. PostgreSQL: a session advisory lock
    (released by the server if the worker dies); SQLite: an flock on a file beside
    the database (released by the kernel)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    parsed = make_url(normalise_url(url))
    if parsed.get_backend_name() == "sqlite":
        with file_lock(Path(f"{parsed.database}.lock")):
            yield
        return
    key = int.from_bytes(hashlib.sha256(f"autotune:{study_name}".encode()).digest()[:8],
                         "big", signed=True)
    engine = create_engine(parsed, poolclass=NullPool,
                           connect_args={"application_name": "autotune-lock"})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
    finally:
        engine.dispose()


@contextmanager
def file_lock(path: Path, *, holder: str | None = None,
              on_wait: Callable[[str, float], None] | None = None,
              every_s: float = LOCK_NOTICE_S) -> Iterator[float]:
    """An exclusive flock on ``path``; yields the seconds spent waiting. The kernel
    drops the lock when its holder dies, so a killed worker never leaves it held.

    ``holder``: who takes it (say ``pid 123, study X``), written into the file with
    the time it was taken, so that a process waiting for it can say who holds it:
    ``on_wait(who, waited_s)`` is called when the lock is found taken and every
    ``every_s`` seconds of waiting after that."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        start = time.monotonic()
        if on_wait is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            _wait_for(fd, path, start, on_wait, every_s)
        waited = time.monotonic() - start
        if holder is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{holder}\t{time.time():.3f}\n".encode(), 0)
        yield waited
    finally:
        if holder is not None:
            with suppress(OSError):
                os.ftruncate(fd, 0)  # no stale name for the next waiter to read
        os.close(fd)  # closing the descriptor releases the lock


def _wait_for(fd: int, path: Path, start: float, on_wait: Callable[[str, float], None],
              every_s: float) -> None:
    notice = start
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            now = time.monotonic()
            if now >= notice:
                on_wait(_holder_of(path), now - start)
                notice = now + every_s
            time.sleep(LOCK_POLL_S)


def _holder_of(path: Path) -> str:
    """Who holds a lock, as its holder wrote it: ``pid 123, study X for 41 s``."""
    try:
        who, _, since = path.read_text().strip().rpartition("\t")
        return f"{who} for {max(0.0, time.time() - float(since)):.0f} s"
    except (OSError, ValueError):
        return "an unknown process"


@contextmanager
def measurement_lock(device: str, who: str) -> Iterator[float]:
    """The host's measurement lock of ``device`` (:func:`measurement_lock_path`): one
    timed window at a time. ``who`` (``trial 4 of study X``) is what another process
    waiting for it logs (INFO), with the holder's pid and how long it has held the
    lock; yields the seconds waited."""
    def say(holder: str, waited: float) -> None:
        log.info("%s waits for the %s measurement lock, held by %s (waited %.0f s)", who,
                 device, holder, waited)

    with file_lock(measurement_lock_path(device), holder=f"pid {os.getpid()}, {who}",
                   on_wait=say) as waited:
        yield waited


def measurement_lock_path(device: str) -> Path:
    """Scope of the measurement lock: this host (the lock file lives on a local disk)
    and the device id: ``cpu``, or ``cuda:N`` for the first visible GPU."""
    if device == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
        device = f"cuda:{visible}"
    folder = Path(os.environ.get(LOCK_DIR_ENV, DEFAULT_LOCK_DIR))
    return folder / f"measure-{device.replace(':', '-')}.lock"
