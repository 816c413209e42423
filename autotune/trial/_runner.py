"""Runs one trial in a process of its own and reads back its ``TrialResult``.

A trial is either a new interpreter (``python -m autotune.trial._worker``, never a fork of
this process) or, in a search, a child forked from a :class:`ForkServer` that
imported torch and PyG once (see :mod:`autotune.trial._forkserver`). Either way it runs in
its own session, so that the whole process tree, loader workers and compile
workers included, can be killed as one. A watchdog enforces the timeout and, with
``memory_limit``, the RSS of the whole tree. Whatever happens, no process of the
trial survives ``run_trial``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from autotune.config import TrialConfig
from autotune.data import DatasetRef
from autotune.env import format_bytes
from autotune.files import atomic_write, dump
from autotune.logging import get_logger
from autotune.trial._window import MeasureSpec
from autotune.specs import TrialLimits
from autotune.trial._forkserver import FORKED, ForkServer, KILL_WAIT_S, SPARE, _Forked
from autotune.trial._result import TrialResult

log = get_logger(__name__)

POLL_S = 0.02  # how often the runner looks at a trial: has it ended, its memory
TREE_SCAN_S = 0.25  # how often it scans /proc for the trial's new processes (a scan
# every POLL_S slows the trial it watches: docs/benchmarks.md, "The runner's scan")
STACK_DUMP_WAIT_S = 0.5  # after SIGUSR1, for the worker to print its threads' stacks
STDERR_TAIL_CHARS = 8000  # faulthandler lists extension modules after the stack
# torch.cuda.is_available() counts devices through NVML instead of the CUDA runtime,
# which would initialise the driver in the fork server and poison every fork: the
# import of torch._inductor.compile_fx calls it (torch 2.11). PyTorch documents the
# variable; a CUDA trial's processes get it unless the caller set it.
NVML_CHECK = ("PYTORCH_NVML_BASED_CUDA_CHECK", "1")


def run_trial(config: TrialConfig, *, dataset: DatasetRef, trial_dir: str | os.PathLike,
              measure: MeasureSpec = MeasureSpec(), limits: TrialLimits = TrialLimits(),
              inductor_cache: str | os.PathLike | None = None,
              env: dict[str, str] | None = None, train=None,
              server: ForkServer | None = None, profile=None, pairs=None) -> TrialResult:
    """Measures ``config`` in a child process. ``dataset`` must be prepared
    (:meth:`DatasetRef.prepare`). The child's stdout and stderr go to
    ``trial_dir/stdout.log`` and ``trial_dir/stderr.log``. ``inductor_cache`` is a
    folder that compiled kernels persist in, so later trials reuse them. With
    ``train`` (an :class:`autotune.pipeline._training.TrainSpec`), the child trains instead of
    measuring and the result's ``training`` holds the epochs and accuracies. With
    ``server`` (a :class:`ForkServer`), the child is forked from it instead of being
    a fresh interpreter; the result's ``observed.trial_start`` says which it was.
    With ``profile`` (an :class:`autotune.trial._profile.ProfileSpec`), a few steps after the
    window are profiled into its folder; the result's ``profile`` says where. With
    ``pairs`` (an :class:`autotune.trial._pairs.PairSpec`), the child measures each of
    its candidates against ``config`` in paired windows, all in it;
    the result's ``pairs`` holds their comparisons."""
    asked_at = time.time()
    trial_dir = Path(trial_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path = trial_dir / "spec.json", trial_dir / "result.json"
    result_path.unlink(missing_ok=True)
    child_env = trial_env(config.device, env, inductor_cache)
    start = server.start(child_env, config.device) if server is not None else \
        "fresh interpreter"
    spec = {"config": config.to_dict(), "dataset": vars(dataset).copy(),
            "measure": measure.to_dict(), "spawned_at": asked_at, "trial_start": start,
            "train": vars(train).copy() if train is not None else None,
            "profile": profile.to_dict() if profile is not None else None,
            "pairs": pairs.to_dict() if pairs is not None else None,
            "gpu_memory_limit": limits.gpu_memory_limit_bytes,
            # stopped during each measured window: the next trial's spare interpreter
            "quiet_pids": server.quiet_pids() if server is not None else []}
    atomic_write(spec_path, dump(spec, "json"))
    argv = [str(spec_path), str(result_path)]
    out_path, err_path = trial_dir / "stdout.log", trial_dir / "stderr.log"
    if start.startswith((FORKED, SPARE)):
        proc = server.fork(argv, out_path, err_path, child_env)
        try:
            verdict = _watch(proc, limits)
        finally:
            server.resume()  # whatever the trial did, the next spare imports again
    else:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "autotune.trial._worker", *argv],
                                    stdout=out, stderr=err, env=child_env,
                                    start_new_session=True)
            verdict = _watch(proc, limits)
    return _read_back(config, proc.returncode, verdict, result_path, err_path)


def trial_env(device: str, env: dict[str, str] | None = None,
              inductor_cache: str | os.PathLike | None = None) -> dict[str, str]:
    """The environment of a trial's processes (the fork server, a spare, the trial):
    this one's, with ``env`` over it, the package importable, the inductor cache (read
    by torch at import, so set before the start) and, for CUDA, :data:`NVML_CHECK`."""
    out = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    out["PYTHONPATH"] = _child_path(out.get("PYTHONPATH"))
    if device == "cuda":
        out.setdefault(*NVML_CHECK)
    if inductor_cache is not None:
        out["TORCHINDUCTOR_CACHE_DIR"] = str(Path(inductor_cache).resolve())
    return out


def _child_path(pythonpath: str | None) -> str:
    """This process's import path for the child, so that a user's model factory or
    dataset function imports there as it did here (a test module's folder, say)."""
    parts = [os.path.abspath(p or os.curdir) for p in sys.path]  # "" is the current folder
    parts = [p for p in parts if os.path.isdir(p)]
    if pythonpath:
        parts.append(pythonpath)
    return os.pathsep.join(dict.fromkeys(parts))


def _watch(proc: subprocess.Popen | _Forked, limits: TrialLimits) -> tuple[str, str] | None:
    """Waits for the child; kills the whole tree on timeout or memory excess and
    returns (status, reason) then. Always leaves no process of the tree alive."""
    start, tree = time.monotonic(), _Tree(proc.pid)
    verdict, scanned = None, 0.0
    try:
        while proc.poll() is None:
            if time.monotonic() - scanned >= TREE_SCAN_S:
                tree.refresh()
                scanned = time.monotonic()
            if time.monotonic() - start > limits.timeout_s:
                verdict = ("timeout", "trial exceeded its "
                           f"{round(limits.timeout_s, 1):g} s timeout")
                _dump_stacks(proc)
                break
            if limits.memory_limit_bytes is not None:
                rss = tree.rss()
                if rss > limits.memory_limit_bytes:
                    verdict = ("oom", f"process tree RSS {format_bytes(rss)} exceeded "
                                      f"--memory-limit {format_bytes(limits.memory_limit_bytes)}")
                    break
            time.sleep(POLL_S)
    finally:
        tree.kill()
        proc.wait()
    return verdict


def _dump_stacks(proc: subprocess.Popen | _Forked) -> None:
    """Asks a hung worker to print every thread's stack to its stderr (faulthandler),
    so the trial's stderr tail shows where it hung."""
    try:
        os.kill(proc.pid, signal.SIGUSR1)
    except ProcessLookupError:
        return
    time.sleep(STACK_DUMP_WAIT_S)


class _Tree:
    """The trial's process tree: its session (process group) plus every descendant
    seen so far, in case one moved to another group."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.root = psutil.Process(pid)
        self.known: dict[int, psutil.Process] = {pid: self.root}

    def refresh(self) -> None:
        try:
            for child in self.root.children(recursive=True):
                self.known.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def rss(self) -> int:
        total = 0
        for proc in list(self.known.values()):
            try:
                total += proc.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def members(self) -> list[psutil.Process]:
        self.refresh()
        members = {p.pid: p for p in self.known.values() if p.is_running()}
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.pid != os.getpid() and os.getpgid(proc.pid) == self.pid:
                    members.setdefault(proc.pid, proc)
            except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
                pass
        return list(members.values())

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        procs = self.members()
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        # the root is the caller's to reap (Popen.wait, or the fork server)
        alive = [p for p in _until_dead(procs, KILL_WAIT_S) if p.pid != self.pid]
        if alive:
            raise RuntimeError(f"trial processes survived SIGKILL: {[p.pid for p in alive]}")


def _until_dead(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Waits until each of ``procs`` is gone or a zombie (it has exited: what is left
    is its exit status); returns those still running after ``timeout_s``. A loader
    worker orphaned by its trial is reaped by PID 1, which in a container may take a
    second: ``psutil.wait_procs`` waited for that, a second or two of every trial."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(POLL_S / 4)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - STDERR_TAIL_CHARS))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _read_back(config: TrialConfig, returncode: int, verdict: tuple[str, str] | None,
               result_path: Path, stderr_path: Path) -> TrialResult:
    tail = _tail(stderr_path)
    if verdict is not None:
        return TrialResult.failed(verdict[0], config, verdict[1], stderr_tail=tail)
    if result_path.exists():
        result = TrialResult.from_dict(json.loads(result_path.read_text()))
        if result.ok or result.stderr_tail:
            return result
        return TrialResult.from_dict({**result.to_dict(), "stderr_tail": tail})
    if returncode < 0:
        name = signal.Signals(-returncode).name
        status = "oom" if name == "SIGKILL" else "crash"
        reason = f"trial process was killed by {name}" + \
            (" (the kernel's OOM killer?)" if status == "oom" else "")
        return TrialResult.failed(status, config, reason, stderr_tail=tail)
    return TrialResult.failed("crash", config,
                              f"trial process exited with code {returncode} and no result",
                              stderr_tail=tail)
