"""A fork server: one interpreter that imports torch and PyG once, then forks a
fresh child for each trial, so a trial is ready to build its pipeline in tens of
milliseconds instead of the seconds ``import torch_geometric`` takes.

Isolation is that of a fresh interpreter. The server itself never builds, trains,
compiles, samples or touches CUDA: it imports, then waits. Each trial is a child
that no other trial ran in; it starts its own session, gets its own memory (copy on
write), initialises its own CUDA context, dynamo and inductor state, and starts its
own threads (``fork`` copies only the forking thread). The server checks that its
imports left CUDA uninitialised; with ``device="cuda"`` a canary child initialises
CUDA and runs a matmul before any trial is trusted to the server. A server that
fails a check is not used: trials start fresh interpreters, and each says why in
its result.

The protocol is one JSON object per line. Server to runner: ``{"ready": ...}`` once,
then per request ``{"pid": N}`` and, when the child ends, ``{"pid": N, "exit": CODE}``
(CODE as ``Popen.returncode``: minus the signal number for a signalled child).
Runner to server: ``{"argv": [...], "stdout": PATH, "stderr": PATH, "env": {...}}``.
The server serves one child at a time and exits at the end of its stdin; it asks
Linux to kill it when the runner dies, and each child asks the same of the server.

    python -m autotune.forkserver [--cuda-canary] [--no-compile]
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

# What a trial imports: everything before its dataset load.
PRELOAD = ("torch", "torch_geometric", "torch_geometric.loader", "torch_geometric.nn",
           "torch._dynamo", "autotune.worker", "autotune.pipeline", "autotune.measure",
           "autotune.sampler", "autotune.datasets", "autotune.training", "autotune.env")
# What a compiled trial imports besides (about a second, on a 2-core EPYC: 0.9 s of
# the server's 3.7 s): preloaded too unless the search compiles nothing
# (``--no-compile``), since importing it neither compiles nor starts a thread.
PRELOAD_COMPILE = ("torch._inductor.compile_fx",)


_PROTOCOL = None  # the runner's pipe; fd 1 itself points at stderr, for stray prints


def _send(blob: dict) -> None:
    _PROTOCOL.write(json.dumps(blob) + "\n")
    _PROTOCOL.flush()


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


def preload(compiles: bool = True) -> dict:
    """Imports :data:`PRELOAD` (and :data:`PRELOAD_COMPILE` for a search that may
    compile); what a runner must know before it trusts the server."""
    import importlib

    started = time.time()
    for name in PRELOAD + (PRELOAD_COMPILE if compiles else ()):
        importlib.import_module(name)
    import torch

    return {"import_started_at": started, "import_done_at": time.time(),
            "imports_s": time.time() - started, "pid": os.getpid(), "threads": _threads(),
            "cuda_initialized": bool(torch.cuda.is_initialized())}


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
            print(f"autotune.forkserver: CUDA canary failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"a forked child could not use CUDA (exit {code}); " \
        "see the fork server's stderr"


def _child(request: dict) -> None:
    """In the forked child: a session of its own, the trial's logs as stdout and
    stderr, the trial's environment, then the worker's main. Never returns."""
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
        from autotune import worker

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


def serve(cuda_canary: bool, compiles: bool = True) -> int:
    global _PROTOCOL
    _PROTOCOL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # an import that prints must not corrupt the protocol
    from autotune.worker import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner ends it, by closing stdin
    ready = preload(compiles)
    unusable = None
    if ready["cuda_initialized"]:
        unusable = "importing torch and PyG initialised CUDA in the fork server"
    elif cuda_canary:
        unusable = _canary()
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


if __name__ == "__main__":
    sys.exit(serve("--cuda-canary" in sys.argv[1:], "--no-compile" not in sys.argv[1:]))
