"""A fork server: one interpreter that imports torch and PyG once, then forks a
fresh child for each trial, so a trial is ready to build its pipeline in tens of
milliseconds instead of the seconds ``import torch_geometric`` takes.

Isolation is that of a fresh interpreter. The server itself never builds, trains,
compiles, samples or touches CUDA: it imports, then waits. Each trial is a child
that no other trial ran in; it starts its own session, gets its own memory (copy on
write), initialises its own CUDA context, dynamo and inductor state, and starts its
own threads (``fork`` copies only the forking thread).

Its own imports wait inside :func:`serve` and :func:`bisect` until the protocol's
stdout is set aside, so that a module that prints cannot corrupt it.

CUDA does not survive a fork once the parent has initialised its driver, and an
import can do that without torch knowing (``torch.cuda.is_initialized()`` stays
false). So the server checks three things. Its imports must leave torch's CUDA
uninitialised. While it imports, a tripwire records every call into the torch.cuda
functions that reach the driver, with the line that made it and the import step it
came in (``cuda_queries`` in its ready line, ``forkserver.json`` in a search). And
with ``device="cuda"`` a canary child is forked after each import step of
:func:`steps` and must initialise CUDA and run a matmul: the first step after which
it fails is named. A server that fails a check forks no trial.

Where the canary fails after a later step than torch's own, the runner starts a
second server that stops before that step (``--stop-before STEP``): its children
import that step and the ones after it themselves (PyG's import is a small part of
the server's: docs/gpu.md), after the fork, so CUDA still works in them. Where that
server fails too (or the first step failed), trials start as *spare interpreters*
(``--spare``): a fresh interpreter that
imports everything while the trial before it runs, stopped (SIGSTOP) by that trial
for each of its measured windows so that its imports overlap none, and takes the
next trial's request when it comes. It runs that one trial in its own process,
never forked, so CUDA works in it whatever its imports did.

The protocol is one JSON object per line. Server to runner: ``{"ready": ...}`` once,
then per request ``{"pid": N}`` and, when the child ends, ``{"pid": N, "exit": CODE}``
(CODE as ``Popen.returncode``: minus the signal number for a signalled child).
Runner to server: ``{"argv": [...], "stdout": PATH, "stderr": PATH, "env": {...}}``.
The server serves one child at a time and exits at the end of its stdin; it asks
Linux to kill it when the runner dies, and each child asks the same of the server.
A spare sends its ready line, reads one request and becomes that trial.

    python -m autotune.trial._forkserver [--cuda-canary [--canary MODULE:FUNCTION]]
                                  [--no-compile] [--stop-before STEP] [--spare]

To find the module behind a failed canary, bisect within the step it names (a
binary search over the step's imports, each probe a fresh interpreter; about a
dozen probes for PyG's 1,500 modules; ``--jobs N`` runs N probes a round at once):

    python -m autotune.trial._forkserver --bisect torch_geometric [--jobs 15]
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autotune.files import atomic_write, dump
from autotune.logging import get_logger

log = get_logger(__name__)

# What a trial imports: everything before its dataset load. The heavy imports that
# PyG pulls in come first, each a step of its own, so that the canary's verdict
# names the one after which a forked child could no longer use CUDA.
PRELOAD = ("torch", "triton", "torch._dynamo", "torch_geometric", "torch_geometric.loader",
           "torch_geometric.nn", "autotune.trial._worker", "autotune.pipeline._build", "autotune.trial._window",
           "autotune.sampling._neighbor", "autotune.data._datasets", "autotune.pipeline._training", "autotune.env")
OPTIONAL = ("triton",)  # preloaded when installed
# What a compiled trial imports besides (a quarter of the server's imports on a
# CPU: docs/gpu.md, "Figures behind the code"): preloaded too unless the search
# compiles nothing (``--no-compile``), since importing it neither compiles nor starts
# a thread.
PRELOAD_COMPILE = ("torch._inductor.compile_fx",)
# The torch.cuda functions that can reach the CUDA driver (lazy initialisation, or a
# device count through the runtime); the tripwire wraps them while the server imports.
CUDA_QUERIES = ("is_available", "device_count", "init", "_lazy_init", "current_device",
                "set_device", "get_device_properties", "get_device_capability",
                "get_device_name", "mem_get_info", "synchronize", "is_bf16_supported")
# torch._C's: the first two on CUDA builds; _show_config (torch.__config__.show) asks
# the CUDA runtime for a device count on a CUDA build (at::hasCUDA), which PyG's import
# calls (torch_geometric/typing.py): :class:`DriverFreeConfig` answers it in the server
CUDA_DRIVER_CALLS = ("_cuda_getDeviceCount", "_cuda_init", "_show_config")
CONFIG_TIMEOUT_S = 120.0  # a fresh interpreter's import of torch, for its config text


def steps(compiles: bool = True, stop_before: str | None = None) -> tuple[str, ...]:
    """The server's import steps, in order: :data:`PRELOAD` (without an optional
    module that is not installed), with :data:`PRELOAD_COMPILE` after dynamo for a
    search that may compile; with ``stop_before``, only the steps before that one
    (each trial then imports the rest itself)."""
    out = []
    for name in PRELOAD:
        if name in OPTIONAL and importlib.util.find_spec(name) is None:
            continue
        out.append(name)
        if name == "torch._dynamo" and compiles:
            out.extend(PRELOAD_COMPILE)
    return tuple(out[:out.index(stop_before)] if stop_before in out else out)


_PROTOCOL = None  # the runner's pipe; fd 1 itself points at stderr, for stray prints


def _send(blob: dict) -> None:
    _PROTOCOL.write(json.dumps(blob) + "\n")
    _PROTOCOL.flush()


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


class Tripwire:
    """Records each call into :data:`CUDA_QUERIES` (and torch._C's
    :data:`CUDA_DRIVER_CALLS`, where the build has them) while it is armed: which
    function, the first line outside torch.cuda and the import machinery that called
    it, and the import step (:attr:`step`) it came in. The wrapped functions call
    through; on exit the originals are put back (a module that bound a wrapper by
    name keeps one that only calls through)."""

    def __init__(self) -> None:
        self.step = ""
        self.calls: list[dict] = []
        self.armed = False
        self._seen: set[tuple[str, str]] = set()
        self._originals: list[tuple[object, str, object]] = []

    def __enter__(self) -> Tripwire:
        import torch

        for owner, names, prefix in ((torch.cuda, CUDA_QUERIES, "torch.cuda."),
                                     (torch._C, CUDA_DRIVER_CALLS, "torch._C.")):
            for name in names:
                original = getattr(owner, name, None)
                if name == "_show_config" and torch.version.cuda is None:
                    continue  # on a CPU build it asks no driver
                if callable(original):
                    self._originals.append((owner, name, original))
                    setattr(owner, name, self._wrap(prefix + name, original))
        self.armed = True
        return self

    def __exit__(self, *exc) -> None:
        self.armed = False
        for owner, name, original in self._originals:
            setattr(owner, name, original)

    def _wrap(self, label: str, fn):
        import functools

        @functools.wraps(fn)
        def tripped(*args, **kwargs):
            if self.armed:
                self._record(label)
            return fn(*args, **kwargs)

        return tripped

    def _record(self, label: str) -> None:
        frame = sys._getframe(2)
        skip = (os.sep + os.path.join("torch", "cuda") + os.sep, "<frozen importlib", __file__,
                os.sep + os.path.join("torch", "__config__.py"))
        while frame is not None and any(s in frame.f_code.co_filename for s in skip):
            frame = frame.f_back
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame else "?"
        if (label, where) not in self._seen:
            self._seen.add((label, where))
            self.calls.append({"call": label, "by": where, "step": self.step})


class DriverFreeConfig:
    """While the server imports, ``torch.__config__.show()`` returns the text a fresh
    interpreter printed for it. On a CUDA build torch's own asks the CUDA runtime
    for a device count (at::hasCUDA), which initialises the driver without torch
    knowing, and no child forked after that can use CUDA; PyG's import calls it
    (torch_geometric/typing.py reads USE_MKL from it), which is what broke the
    canary after PyG's step on an H100 (docs/gpu.md). The fresh interpreter starts
    on entry and runs beside the server's imports; on exit the original is back, so
    a trial calls torch's own. Nothing is replaced on a CPU build, or where torch
    is not imported yet."""

    def __init__(self) -> None:
        self.answered = 0
        self._proc: subprocess.Popen | None = None
        self._text: str | None = None

    def __enter__(self) -> DriverFreeConfig:
        torch = sys.modules.get("torch")  # not imported: nothing to answer for
        if torch is None or torch.version.cuda is None:
            return self
        self._torch, self._original = torch, torch._C._show_config
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "import sys, torch; sys.stdout.write(torch.__config__.show())"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        torch._C._show_config = self._answer
        return self

    def _answer(self) -> str:
        if self._text is None:
            out, err = self._proc.communicate(timeout=CONFIG_TIMEOUT_S)
            if self._proc.returncode != 0:
                raise RuntimeError(f"torch.__config__.show() in a fresh interpreter failed "
                                   f"(exit {self._proc.returncode}): {err.strip()[-500:]}")
            self._text = out
        self.answered += 1
        return self._text

    def __exit__(self, *exc) -> None:
        if self._proc is None:
            return
        self._torch._C._show_config = self._original
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.communicate()


def preload(compiles: bool = True, canary=None, stop_before: str | None = None) -> dict:
    """Imports :func:`steps` under a :class:`Tripwire`, with ``canary`` (None, or a
    function that returns None or why a forked child cannot use CUDA, such as
    :func:`_canary`) after each step; what a runner must know before it trusts the
    server (``canary``: None when every canary passed, else why and after which
    step, which ``canary_step`` names; the steps after a failed one are not
    imported)."""
    import importlib

    started = time.time()
    import torch

    verdict, failed_step, timings = None, None, []
    with DriverFreeConfig() as config, Tripwire() as wire:
        for name in steps(compiles, stop_before):
            wire.step = name
            step_started = time.time()
            importlib.import_module(name)
            timings.append({"step": name, "s": time.time() - step_started})
            why = canary() if canary is not None else None
            if why is not None:
                verdict, failed_step = f"{why}, after importing {name} (python -m " \
                    f"autotune.trial._forkserver --bisect {name} names the module)", name
                break
    return {"import_started_at": started, "import_done_at": time.time(),
            "imports_s": time.time() - started, "pid": os.getpid(), "threads": _threads(),
            "cuda_initialized": bool(torch.cuda.is_initialized()), "steps": timings,
            "cuda_queries": wire.calls, "config_answered": config.answered,
            "canary": verdict, "canary_step": failed_step, "stop_before": stop_before}


def describe_queries(queries: list[dict], limit: int = 3) -> str:
    """The tripwire's records as a clause for a message ("" when there are none)."""
    if not queries:
        return ""
    shown = "; ".join(f"{q['call']} by {q['by']} (importing {q['step']})"
                      for q in queries[:limit])
    more = f" and {len(queries) - limit} more" if len(queries) > limit else ""
    return f"; CUDA queried while importing: {shown}{more}"


def _canary() -> str | None:
    """Forks a child that initialises CUDA and runs a matmul: None if it worked,
    else why not (an import that initialised CUDA in the server breaks every child)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import torch

            x = torch.ones(64, 64, device="cuda")
            torch.cuda.synchronize()
            code = 0 if float((x @ x).sum()) == 64 ** 3 else 3
        except BaseException as exc:  # reported to the runner through the exit code
            log.warning("fork server: CUDA canary failed: %s: %s", type(exc).__name__, exc)
            logging.shutdown()  # flushed: os._exit skips it
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"a forked child could not use CUDA (exit {code}); " \
        "see the fork server's stderr"


def _child(request: dict) -> None:
    """In the trial's process (a forked child, or a spare): a session of its own,
    the trial's logs as stdout and stderr, the trial's environment, then the
    worker's main. Never returns."""
    code = 1
    try:
        os.close(_PROTOCOL.fileno())  # the trial must not write into the protocol
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        if request.get("env") is not None:  # the trial's whole environment, as spawned
            os.environ.clear()
            os.environ.update(request["env"])
        import random

        random.seed()  # a fresh interpreter's state, not the server's
        from autotune.trial import _worker as worker
        code = worker.main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def serve(canary=None, compiles: bool = True, stop_before: str | None = None) -> int:
    """The fork server's main: :func:`preload` (``canary`` after each step), its
    ready line, then a forked child per request until the end of stdin."""
    global _PROTOCOL
    _PROTOCOL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # an import that prints must not corrupt the protocol
    from autotune.trial._worker import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner ends it, by closing stdin
    ready = preload(compiles, canary, stop_before)
    unusable = None
    if ready["cuda_initialized"]:
        unusable = "importing torch and PyG initialised CUDA in the fork server"
    elif ready["canary"]:
        unusable = ready["canary"]
    if unusable:
        unusable += describe_queries(ready["cuda_queries"])
    _send({"ready": ready, "unusable": unusable})
    if unusable:
        return 1
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        _send({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _send({"pid": pid, "exit": os.waitstatus_to_exitcode(status)})
    return 0


def spare(compiles: bool = True) -> int:
    """A spare interpreter: imports what a trial imports, says so, waits for one
    request and runs it here, in this process (never forked). Until then it is in
    the runner's process group, ignoring SIGINT like the server; the trial gets a
    session of its own."""
    global _PROTOCOL
    _PROTOCOL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from autotune.trial._worker import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _send({"ready": preload(compiles)})
    line = sys.stdin.readline()
    if not line:  # the runner needed no more trials
        return 0
    _child(json.loads(line))


PROBE_TIMEOUT_S = 600.0  # one fresh interpreter's imports and one canary


class _Completions:
    """A meta path finder that counts the modules whose import completes (their body
    has run) and, at the ``at``-th, asks the canary: which module's own import left
    CUDA unusable in a forked child. The order is deterministic for one interpreter
    and one set of installed packages, so a count names the same module in every
    probe."""

    def __init__(self, at: int | None, canary) -> None:
        self.at, self.canary = at, canary
        self.names: list[str] = []
        self.verdict: str | None = None

    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _CountingLoader(spec.loader, self)
        return spec

    def done(self, name: str) -> None:
        self.names.append(name)
        if len(self.names) == self.at:
            self.verdict = self.canary()


class _CountingLoader:
    def __init__(self, loader, counter: _Completions) -> None:
        self._loader, self._counter = loader, counter

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._counter.done(module.__name__)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def probe(step: str, at: int | None, canary: str | None = None) -> dict:
    """In this fresh interpreter: imports the steps before ``step``, then ``step``,
    counting the modules it imports as they complete; at the ``at``-th, runs the
    canary (``module:function`` returning None or why not; default: a forked CUDA
    child). The modules in completion order, and the verdict."""
    import importlib

    check = _canary if canary is None else _load(canary)
    order = steps()
    before = order[:order.index(step)] if step in order else ()
    if before:
        import torch  # noqa: F401  (as the server, which imports torch before its steps)
    counter = _Completions(at, check)
    with DriverFreeConfig():  # as the server imports
        for name in before:
            importlib.import_module(name)
        sys.meta_path.insert(0, counter)
        try:
            importlib.import_module(step)
        finally:
            sys.meta_path.remove(counter)
    return {"step": step, "modules": counter.names, "at": at, "verdict": counter.verdict}


def _load(path: str):
    import importlib

    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


def bisect(step: str, canary: str | None = None, env: dict | None = None,
           jobs: int = 1) -> dict:
    """Which module imported by ``step`` leaves CUDA unusable in forked children: a
    search over the count of completed imports, each probe a fresh interpreter
    (:func:`probe`). With ``jobs`` > 1 each round probes that many counts at once,
    evenly spread over what is left (a binary search when 1; 15 a round narrow
    PyG's 1,500 counts to one in three rounds). ``culprit`` is None
    when even the whole step passes (the step is not the culprit)."""
    def run(at: int | None) -> dict:
        argv = [sys.executable, "-m", "autotune.trial._forkserver", "--probe", step]
        argv += [] if at is None else ["--at", str(at)]
        argv += [] if canary is None else ["--canary", canary]
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True,
                             timeout=PROBE_TIMEOUT_S)
        return json.loads(out.stdout.splitlines()[-1])

    modules = run(None)["modules"]
    probes: list[dict] = []

    def failing(counts: list[int]) -> list[bool]:
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            verdicts = [r["verdict"] for r in pool.map(run, counts)]
        probes.extend({"at": k, "module": modules[k - 1], "verdict": v}
                      for k, v in zip(counts, verdicts))
        return [v is not None for v in verdicts]

    if not modules or not failing([len(modules)])[0]:
        return {"step": step, "culprit": None, "completions": len(modules), "probes": probes}
    lo, hi = 1, len(modules)  # the first failing count lies in [lo, hi]
    while lo < hi:
        width = hi - lo  # the counts lo .. hi - 1 are open; hi is known to fail
        counts = list(range(lo, hi)) if width <= jobs else \
            [lo + (i + 1) * width // (jobs + 1) for i in range(max(1, jobs))]
        for k, fails in zip(counts, failing(counts)):
            if fails:
                hi = k
                break
            lo = k + 1
    return {"step": step, "culprit": modules[lo - 1], "completions": len(modules),
            "probes": probes}


def _leave(code: int) -> None:
    """Ends a server, or a spare that ran no trial: it holds nothing to write back,
    so it leaves at once instead of through the interpreter's teardown of torch,
    which took a second of every search's end."""
    sys.stdout.flush()
    sys.stderr.flush()
    if _PROTOCOL is not None:
        _PROTOCOL.flush()
    os._exit(code)


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--probe" in args:
        at = _flag(args, "--at")
        print(json.dumps(probe(_flag(args, "--probe"), None if at is None else int(at),
                               _flag(args, "--canary"))))
        sys.exit(0)
    if "--bisect" in args:
        jobs = _flag(args, "--jobs")
        print(json.dumps(bisect(_flag(args, "--bisect"), _flag(args, "--canary"),
                                jobs=int(jobs) if jobs else 1), indent=2))
        sys.exit(0)
    check = None if "--cuda-canary" not in args else \
        _load(_flag(args, "--canary")) if "--canary" in args else _canary
    code = spare("--no-compile" not in args) if "--spare" in args else \
        serve(check, "--no-compile" not in args, _flag(args, "--stop-before"))
    _leave(code)


KILL_WAIT_S = 5.0  # after SIGTERM, before SIGKILL

# A server that a search leaves healthy and idle is kept for this process's next
# search whose trials' environment and flags are the same: that search forks from it
# and skips its imports (4-5 s of a 2-core machine, as long as a small search's
# trials: a notebook's second search, most of the test suite's). One per key; each
# is ended at this process's exit, and dies with it anyway (``die_with_parent``).
# The key leaves out what no import reads, since each trial gets its request's
# whole environment: autotune's own settings (each read where it is used), the
# inductor cache (read at each compile: a child of a server imported under one
# compiles into the other) and the name pytest gives the running test.
READ_AFTER_IMPORT = ("AUTOTUNE_", "TORCHINDUCTOR_CACHE_DIR", "PYTEST_CURRENT_TEST")
_KEPT: dict[tuple, tuple[subprocess.Popen, _Lines, dict, str | None, Path | None]] = {}


# The search's side: the handle on one server (its process, its protocol), forking a
# trial from it or, where it is unusable, starting spare interpreters.
FORKED = "fork server"
SPARE = "spare interpreter"
SERVER_READY_TIMEOUT_S = 300.0


class ForkServer:
    """How the trials of one search start: forked from one :mod:`autotune.trial._forkserver`
    (started on the first trial, inside the measurement lock, so its imports overlap
    no other search's window, then idle while each trial runs, and closed with the
    search), or, once that server is unusable (its imports initialised CUDA, its
    canary failed, it died), each in a *spare interpreter*: a fresh interpreter
    started while the trial before runs, stopped by that trial during its measured
    windows. ``method="spare"`` starts no server and uses spares from the first
    trial. Each trial's ``observed.trial_start`` says which it was and why. Use as
    a context manager: a server left healthy and idle at its end (no exception) is
    kept for the next search of this process that can fork from it (:data:`_KEPT`);
    ``forkserver.json`` then names the folder of the search that started it, where
    its log is. A trial whose environment differs from the server's in what imports
    read (:data:`READ_AFTER_IMPORT` aside) gets a server of that environment; the
    one before is kept the same way, for a trial of its own environment."""

    def __init__(self, folder: Path | None = None, *, compiles: bool = True,
                 method: str = "auto", canary: str | None = None) -> None:
        # FOLDER/forkserver.log: the server's and spares' stderr (None: this process's);
        # FOLDER/forkserver.json: its pid, import steps, CUDA queries and checks.
        # compiles: whether a trial may compile (else inductor is left to the child)
        # canary: MODULE:FUNCTION checked in place of the CUDA canary, on any device
        if method not in ("auto", "spare"):
            raise ValueError(f"method must be auto or spare, not {method!r}")
        self.folder = Path(folder) if folder is not None else None
        self.compiles = compiles
        self.method = method
        self.canary = canary
        self.stop_before: str | None = None  # the step each forked trial imports itself
        self.proc: subprocess.Popen | None = None
        self.ready: dict | None = None
        self.unusable: str | None = None
        self._lines: _Lines | None = None
        self.spare: subprocess.Popen | None = None  # the next trial's interpreter
        self._taken: subprocess.Popen | None = None  # this trial's, until it is handed
        self.spares_failed: str | None = None
        self._key: tuple | None = None  # what a kept server must match to serve here
        self._spare_key: tuple | None = None  # the environment the next spare imported in
        self.started_in: Path | None = None  # the search folder that started the server

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, kind, *exc) -> None:
        self.close(keep=kind is None)

    def start(self, env: dict[str, str], device: str) -> str:
        """Readies the next trial's start; how it starts: :data:`FORKED`, a
        :data:`SPARE` or a fresh interpreter, and why not forked."""
        if self._taken is None:  # not readied already (a spare taken and not used yet)
            if self.proc is not None and self.proc.poll() is not None:
                self._fail(f"it exited with code {self.proc.returncode} between trials")
            key = self._key_of(env, device)
            if self.proc is not None and key != self._key:
                self._park()  # the trials' environment changed: libraries read it at import
            if self.spare is not None and _imported(env) != self._spare_key:
                _end(self.spare)
                self.spare = None
            if self.method == "auto" and self.unusable is None and self.proc is None:
                self._launch(env, device)
            if self.method == "auto" and self.unusable is None:
                return FORKED if self.stop_before is None else \
                    f"{FORKED} (stopped before {self.stop_before}, which the trial imports)"
            if self.spares_failed is None:
                self._taken = self._take_spare(env)
            if self._taken is not None:
                self.spare = self._spawn(env, ["--spare"])  # imports while this trial runs
                self._spare_key = _imported(env)
        why = [] if self.method == "spare" else [f"fork server unusable: {self.unusable}"]
        if self._taken is None:
            return f"fresh interpreter ({'; '.join([*why, self.spares_failed])})"
        return SPARE + "".join(f" ({w})" for w in why)

    def _flags(self, device: str) -> list[str]:
        flags = ["--cuda-canary"] if device == "cuda" or self.canary else []
        return flags + (["--canary", self.canary] if self.canary else [])

    def _key_of(self, env: dict[str, str], device: str) -> tuple:
        """What a server must have been started with to fork a trial of ``env`` on
        ``device``: the interpreter, its flags and the environment its imports read
        (the OpenMP runtime reads ``OMP_WAIT_POLICY`` as it loads, for one)."""
        return (sys.executable, self.compiles, *self._flags(device), *_imported(env))

    def _launch(self, env: dict[str, str], device: str) -> None:
        """Starts the server; where a canary fails after a later step than the
        first, once more with the server stopping before that step."""
        flags = self._flags(device)
        self._key = self._key_of(env, device)
        if self._reuse():
            return
        self.started_in, self.stop_before = self.folder, None
        reply = self._serve(env, flags)
        ready = (reply or {}).get("ready") or {}
        failed, first = ready.get("canary_step"), None
        if failed and ready["steps"][0]["step"] != failed:
            first, self.unusable = self.unusable, None
            reply = self._serve(env, [*flags, "--stop-before", failed])
            if self.unusable is None:
                self.stop_before = failed
                log.warning("fork server: %s; a second server stops before %s, which "
                            "each trial imports itself", first, failed)
        if reply is not None:
            self._describe({**(reply.get("ready") or {}), "unusable": self.unusable,
                            "first_server": first})

    def _describe(self, ready: dict) -> None:
        if self.folder is not None:
            atomic_write(self.folder / "forkserver.json", dump(
                {**ready, "started_in": str(self.started_in) if self.started_in else None},
                "json"))

    def _reuse(self) -> bool:
        """Takes the server an earlier search of this process kept under this key,
        if it is still alive: no imports to wait for."""
        kept = _KEPT.pop(self._key, None)
        if kept is None:
            return False
        proc, lines, ready, self.stop_before, self.started_in = kept
        if proc.poll() is not None:
            _end(proc)
            return False
        self.proc, self._lines, self.ready = proc, lines, ready
        self._describe({**ready, "unusable": None, "reused": True})
        return True

    def _park(self) -> None:
        """Sets the running server aside for the trials' environment changing: kept
        for a later start under its own (:meth:`_keep`, a search whose machine turns
        quiet again forks from it at once), else ended. The next start launches or
        reuses one under the new environment."""
        if not self._keep():
            self._close_server()
        self.ready = None

    def _keep(self) -> bool:
        """Keeps the server for a later search, if it is healthy and idle (no
        protocol line unread: every trial's exit collected); another kept under the
        same key is ended."""
        proc = self.proc
        if proc is None or self.unusable is not None or self._key is None or \
                proc.poll() is not None or self._lines.pending():
            return False
        old = _KEPT.pop(self._key, None)
        if old is not None:
            _end(old[0])
        _KEPT[self._key] = (proc, self._lines, self.ready, self.stop_before, self.started_in)
        self.proc = None
        return True

    def _serve(self, env: dict[str, str], flags: list[str]) -> dict | None:
        """One server's start: its ready line, or None; :attr:`unusable` says why
        it cannot fork trials."""
        self.proc = self._spawn(env, flags)
        self._lines = _Lines(self.proc)
        reply = self._lines.read(SERVER_READY_TIMEOUT_S)
        if reply is None or "ready" not in reply:
            self._fail("it exited or timed out before it was ready")
        elif reply.get("unusable"):
            self._fail(reply["unusable"])
        else:
            self.ready = reply["ready"]
        return reply

    def _spawn(self, env: dict[str, str], flags: list[str]) -> subprocess.Popen:
        argv = [sys.executable, "-m", "autotune.trial._forkserver", *flags]
        if not self.compiles:
            argv.append("--no-compile")
        err = None
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            err = open(self.folder / "forkserver.log", "ab")
        try:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=err, env=env)
        finally:
            if err is not None:
                err.close()

    def _take_spare(self, env: dict[str, str]) -> subprocess.Popen | None:
        """The spare started during the trial before (or one started now), once its
        imports are done; None when it failed, and spares are not tried again."""
        spare, self.spare = self.spare, None
        if spare is None:
            spare = self._spawn(env, ["--spare"])
        reply = _Lines(spare).read(SERVER_READY_TIMEOUT_S)
        if reply is not None and "ready" in reply:
            return spare
        _end(spare)
        self.spares_failed = f"a spare interpreter exited or timed out before it was " \
            f"ready (exit {spare.returncode})"
        return None

    def quiet_pids(self) -> list[int]:
        """What the next trial stops during its windows: the spare that imports."""
        return [self.spare.pid] if self.spare is not None else []

    def resume(self) -> None:
        """Lets the next spare go on (after a trial, which may have died while it
        held it stopped)."""
        if self.spare is not None:
            try:
                os.kill(self.spare.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def _fail(self, why: str) -> None:
        self.unusable = why
        self._close_server()

    def fork(self, argv: list[str], stdout: Path, stderr: Path,
             env: dict[str, str]) -> _Forked | subprocess.Popen:
        """Starts the trial that :meth:`start` readied: forked by the server, or in
        the spare taken for it."""
        request = {"argv": argv, "stdout": str(stdout), "stderr": str(stderr), "env": env}
        if self._taken is not None:
            spare, self._taken = self._taken, None
            try:
                spare.stdin.write((json.dumps(request) + "\n").encode())
                spare.stdin.close()
            except OSError:  # it died since it was ready: its exit code is the trial's
                pass
            spare.stdout.close()
            return spare
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            self._fail("it died between trials")
            raise RuntimeError(f"the fork server failed to fork a trial: {self.unusable}")
        reply = self._lines.read(SERVER_READY_TIMEOUT_S)
        if reply is None or "pid" not in reply:
            self._fail("it died while forking a trial")
            raise RuntimeError(f"the fork server failed to fork a trial: {self.unusable}")
        return _Forked(self, reply["pid"])

    def close(self, keep: bool = False) -> None:
        """Ends the server (or, with ``keep``, keeps it for a later search where it
        can) and any spare."""
        if not (keep and self._keep()):
            self._close_server()
        for spare in (self.spare, self._taken):
            if spare is not None:
                _end(spare)
        self.spare = self._taken = None

    def _close_server(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        _end(proc)


def _imported(env: dict[str, str]) -> tuple:
    """What of ``env`` a process's imports may read (:data:`READ_AFTER_IMPORT` aside)."""
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(READ_AFTER_IMPORT)))


@atexit.register
def _end_kept() -> None:
    while _KEPT:
        _end(_KEPT.popitem()[1][0])


def _end(proc: subprocess.Popen) -> None:
    """Ends a server or a spare that has no trial: at the end of its stdin, or
    killed after :data:`KILL_WAIT_S`."""
    try:
        os.kill(proc.pid, signal.SIGCONT)  # a stopped spare cannot read its stdin's end
    except ProcessLookupError:
        pass
    try:
        if not proc.stdin.closed:
            proc.stdin.close()
        proc.wait(timeout=KILL_WAIT_S)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    if not proc.stdout.closed:
        proc.stdout.close()


class _Lines:
    """A server's or spare's protocol lines."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self._buffer = b""

    def pending(self) -> bool:
        """Whether a line (or part of one) is there, unread."""
        return bool(self._buffer) or bool(
            select.select([self.proc.stdout.fileno()], [], [], 0)[0])

    def read(self, timeout_s: float | None) -> dict | None:
        """The next line, or None on end of file or after ``timeout_s`` (0: only
        what is there already)."""
        fd = self.proc.stdout.fileno()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)


class _Forked:
    """A trial forked by the server, with the part of ``Popen`` that ``_watch`` uses."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._collect(0.0)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self._collect(None)
        return self.returncode

    def _collect(self, timeout_s: float | None) -> None:
        reply = self.server._lines.read(timeout_s)
        if reply is not None and reply.get("pid") == self.pid and "exit" in reply:
            self.returncode = reply["exit"]
        elif reply is None and (timeout_s is None or self.server.proc is None
                                or self.server.proc.poll() is not None):
            self.server._fail("it died while a trial ran")
            self.returncode = -signal.SIGKILL  # the trial died with it (PDEATHSIG)
