from __future__ import annotations

import collections
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import _helpers
import pytest
import torch
from fake_clock import fake_clock  # noqa: F401  (a fixture: the search's clock, slept on at once)
from fake_cuda import fake_cuda  # noqa: F401  (a fixture: torch.cuda over a stand-in GPU)

# The real Planetoid files, in ../shared/data beside the checkout (read-only; not part
# of the project). Tests that need them skip, naming the folder, where it is absent.
SHARED_PLANETOID = Path(__file__).resolve().parents[2] / "shared" / "data" / "planetoid"


@pytest.fixture
def cora_root() -> str:
    """The root that holds real Cora (``Cora/raw``); skips where it is absent."""
    raw = SHARED_PLANETOID / "Cora" / "raw"
    if not raw.is_dir():
        pytest.skip(f"real Cora is not in {raw} (../shared/data beside the checkout)")
    return str(SHARED_PLANETOID)

# Without a GPU, Triton kernels run in Triton's interpreter on CPU tensors. It must be
# chosen before anything imports triton (triton.language builds its helpers then).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    """Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, as on the CI machines),
    every process the suite starts (fork servers, commands, trials) would compile what
    it imports from source again: autotune's modules, and torch's and PyG's too where
    the environment was installed without bytecode (the README's test command passes
    ``--no-compile``: pip's byte-compiling of all of torch was most of its time). The
    suite writes bytecode, into the environment and the checkout's ``__pycache__``
    (ignored by git): the first process to import a module compiles it, the rest read
    it, and a module nothing imports is never compiled."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the workers and what they start
    sys.dont_write_bytecode = False


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): a worker per core and one more, at most 4.
    Workers wait (a command's start, a trial's timeout, a process beside a test): two
    on 2 cores left 18-29% of the cores' time idle in whole runs, which a third
    worker's tests fill (docs/benchmarks.md#the-test-suites-time). Past 4, workers
    only wait on each other."""
    return max(1, min(4, len(os.sched_getaffinity(0)) + 1))


# In a parallel run each worker keeps to its share of the cores, in its own torch work
# (the tests that train in-process, at one thread), in the commands it runs in-process
# and in every process it starts (OMP_NUM_THREADS: trials, fork servers, commands).
# Two workers on two cores with two OpenMP threads each fight for them: each thread
# spins for the other's core between parallel regions (docs/layout.md#tests: measured).
_helpers.FRESH_THREADS = torch.get_num_threads()  # what an in-process command runs with
if "PYTEST_XDIST_WORKER" in os.environ:
    share = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(share))
    _helpers.FRESH_THREADS = int(os.environ["OMP_NUM_THREADS"])
    torch.set_num_threads(1)

# In a parallel run the other workers' tests take the cores on purpose: a window is not
# measured again for it (the tests of that measure it alone, and set --max-busy)
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("AUTOTUNE_MAX_BUSY", "1")

# Each worker of a parallel run measures under a measurement lock of its own: the
# host's lock would make one test's trials wait for another's (no test but an
# ``exclusive`` one compares timings, and those run alone)
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("AUTOTUNE_LOCK_DIR", tempfile.mkdtemp(
        prefix=f"autotune-locks-{os.environ['PYTEST_XDIST_WORKER']}-"))


def _exclusive(item) -> bool:
    return item is not None and item.get_closest_marker("exclusive") is not None


_KEPT: list[int] = []  # the room and gate an exclusive test kept for the next one


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """In a parallel run (pytest-xdist), tests share the machine, but a test marked
    ``exclusive`` runs alone: its assertions compare timings, or accuracy after equal
    wall-clock training, which a test beside it would skew. A readers-writer lock
    across the workers: each test shares the "room" (LOCK_SH); an exclusive
    one shuts the "gate", so that no new test comes in, and waits for the room to
    empty (LOCK_EX). The lock spans the test's whole protocol, the set-up and
    tear-down of its fixtures of every scope included: another worker's next module
    fixture (a fork server, a training) does not start beside an exclusive test.
    An exclusive test whose worker runs another next keeps the machine for it, so
    that the next does not wait again for another worker's test to end (each such
    wait lasts one of that worker's tests); once a test has ended and the next is
    not exclusive, the machine is given back."""
    with _share(_exclusive(item), keep=_exclusive(item) and _exclusive(nextitem)):
        yield
    if _KEPT and not _exclusive(nextitem):
        _give_back(_KEPT)


def _give_back(held: list[int]) -> None:
    while held:
        os.close(held.pop(0))  # closing the file drops this process's locks on it


@contextmanager
def _share(exclusive: bool, keep: bool = False):
    import fcntl

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # a serial run: every test runs alone anyway
        yield
        return
    if exclusive and _KEPT:  # kept for this test by the exclusive test before it
        held, _KEPT[:] = list(_KEPT), []
    else:
        base = Path(tempfile.gettempdir()) / f"autotune-tests-{run}"
        # POSIX record locks (lockf), not flock: a process forked during a test (a
        # loader worker outliving it) does not inherit them, so it cannot hold the room
        room = os.open(f"{base}.room", os.O_RDWR | os.O_CREAT, 0o600)
        gate = os.open(f"{base}.gate", os.O_RDWR | os.O_CREAT, 0o600)
        held = [room, gate]
        try:
            fcntl.lockf(gate, fcntl.LOCK_EX)
            fcntl.lockf(room, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            if not exclusive:
                fcntl.lockf(gate, fcntl.LOCK_UN)
        except BaseException:
            _give_back(held)
            raise
    try:
        yield
    finally:
        if keep:
            _KEPT[:] = held
        else:
            _give_back(held)


def pytest_collection_modifyitems(config, items):
    _heaviest_modules_first(items, config.getoption("write_module_times"))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


# Each module's seconds in a whole run (its tests' set-up, call and tear-down summed),
# as ``pytest --write-module-times`` last measured them: the order the modules go to
# the workers in. Only the order depends on it: a stale figure, or a module it lacks,
# costs a worker some idle minutes at the end, never a result.
MODULE_TIMES = Path(__file__).with_name("module_times.json")


def _heaviest_modules_first(items, rewriting: bool) -> None:
    """The modules holding ``exclusive`` tests first, the smallest of them first (its
    next module's exclusive tests come sooner), those tests first in them, then the
    others, the longest first by MODULE_TIMES (a module it lacks as long as two
    seconds a test), each module's tests in their own order: a parallel run hands
    whole modules to its workers in this order (with ``--no-loadscope-reorder``,
    pyproject.toml's addopts: pytest-xdist's default hands out the modules with the
    most tests first, whatever this order says). An exclusive test waits for every
    running test to end, and its worker idles meanwhile: at the start, none is
    running (in mid-run those waits cost a minute). The longest first, so that the
    last modules the workers take are short and the workers end together: ranked by
    the count of their ``slow`` tests, a module of many unmarked tests of 3-10 s
    each went last, and its worker ran on while the others idled
    (docs/benchmarks.md#the-test-suites-time)."""
    size = collections.Counter(item.path for item in items)
    seconds = _module_times(rewriting)["seconds"]
    exclusive = {item.path for item in items if "exclusive" in item.keywords}
    first_seen = {path: i for i, path in enumerate(dict.fromkeys(i.path for i in items))}
    items.sort(key=lambda item: (item.path not in exclusive,
                                 size[item.path] if item.path in exclusive
                                 else -seconds.get(item.path.name, 2.0 * size[item.path]),
                                 first_seen[item.path], "exclusive" not in item.keywords))


def _module_times(rewriting: bool) -> dict:
    """MODULE_TIMES as stored; a file that cannot be read stops the run, naming it,
    unless this run writes it again (then it starts from nothing)."""
    import json

    try:
        stored = json.loads(MODULE_TIMES.read_text())
        if not all(isinstance(v, (int, float)) for v in stored["seconds"].values()):
            raise ValueError("a module's seconds is not a number")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        if rewriting:
            return {"seconds": {}}
        raise pytest.UsageError(f"{MODULE_TIMES} unreadable ({exc}): run the suite with "
                                "--write-module-times to write it again") from None
    return stored


def pytest_addoption(parser):
    parser.addoption("--write-module-times", action="store_true",
                     help=f"write each module's seconds in this run into {MODULE_TIMES.name} "
                          "(the order modules go to the workers in)")


_MODULE_SECONDS: collections.Counter = collections.Counter()


def pytest_sessionfinish(session):
    """``--write-module-times``: the seconds of the modules this run ran, on the machine
    named, into MODULE_TIMES, where the other modules keep theirs (in a parallel run,
    by the process that gathers the workers' reports)."""
    import json
    import time

    from autotune.env import available_cores, cpu_features, cpu_model

    if not session.config.getoption("write_module_times") \
            or hasattr(session.config, "workerinput"):
        return
    flags = " ".join(cpu_features()) or "none of SPEED_FLAGS"
    seconds = {**_module_times(rewriting=True)["seconds"],
               **{name: round(s, 1) for name, s in _MODULE_SECONDS.items()}}
    MODULE_TIMES.write_text(json.dumps({
        "measured_on": f"{time.strftime('%Y-%m-%d')}, {cpu_model()} ({flags}), "
                       f"{len(available_cores())} cores",
        "seconds": dict(sorted(seconds.items(), key=lambda kv: -kv[1]))}, indent=1) + "\n")


@pytest.fixture
def random_graph():
    """A small directed multigraph with skewed in-degrees and isolated nodes."""
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(0)
    n = 300
    dst = torch.cat([torch.randint(0, n - 20, (4000,), generator=gen),
                     torch.full((200,), 7)])  # node 7 has a high in-degree
    src = torch.randint(0, n, (dst.numel(),), generator=gen)
    perm = torch.randperm(dst.numel(), generator=gen)  # not in CSC order
    edge_index = torch.stack([src[perm], dst[perm]])
    return Data(x=torch.randn(n, 16, generator=gen), y=torch.randint(0, 3, (n,), generator=gen),
                edge_index=edge_index, num_nodes=n,
                train_mask=torch.rand(n, generator=gen) < 0.7)


@pytest.fixture
def tiny_synthetic():
    from autotune.data import synthetic_reddit

    return synthetic_reddit(scale=0.004, seed=0, mean_degree=12, num_features=32,
                            num_classes=4)


@pytest.fixture(scope="session")
def prepared(tmp_path_factory):
    """A tiny synthetic dataset, processed once for the whole session."""
    from autotune.data import DatasetRef

    ref = DatasetRef("synthetic", root=str(tmp_path_factory.mktemp("data")), scale=0.005)
    ref.prepare()
    return ref


@pytest.fixture
def quick_measure():
    from autotune.specs import MeasureSpec

    return MeasureSpec(warmup_steps=2, min_warmup_s=0.0,
                       min_steps=5, min_window_s=0.0, max_window_s=0.5)


_TALLY = {"fault": [0, 0], "bad_input": [0, 0]}  # [passed, ran]


def pytest_runtest_logreport(report):
    _MODULE_SECONDS[Path(report.nodeid.split("::")[0]).name] += report.duration
    if report.when != "call":
        return
    for marker, counts in _TALLY.items():
        if marker in report.keywords:
            counts[1] += 1
            counts[0] += report.passed


def pytest_terminal_summary(terminalreporter):
    faults, bad = _TALLY["fault"], _TALLY["bad_input"]
    if faults[1] or bad[1]:
        terminalreporter.write_line(f"faults survived: {faults[0]}/{faults[1]}, "
                                    f"bad inputs: {bad[0]}/{bad[1]}")


PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def pg_url():
    """The PostgreSQL the distributed tests use: AUTOTUNE_TEST_POSTGRES_URL, else the
    local server's ``test`` database. Skips without it, but fails under CI=true."""
    import os

    from sqlalchemy import create_engine, text

    from autotune.storage import normalise_url

    url = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL", PG_DEFAULT)
    try:
        engine = create_engine(normalise_url(url), connect_args={"connect_timeout": 5})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        message = f"PostgreSQL at {url} unreachable ({type(exc).__name__}: {exc})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI=true requires it")
        pytest.skip(f"{message}; set AUTOTUNE_TEST_POSTGRES_URL")
    return url


@pytest.fixture
def pg_study(pg_url):
    """A fresh study name in PostgreSQL, deleted afterwards."""
    import uuid

    import optuna

    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    from autotune.storage import open_storage

    try:
        optuna.delete_study(study_name=name, storage=open_storage(pg_url))
    except KeyError:
        pass

