"""Helpers shared by the test modules."""
from __future__ import annotations

# torch's thread count in a fresh interpreter: conftest records it before it gives a
# parallel run's worker one thread, and an in-process command runs with it again.
FRESH_THREADS: int | None = None


def cli(*args, env=None, timeout=900, cwd=None, background=False, script=False, fresh=False,
        on_line=None):
    """``autotune ARGS`` as a user would run it, returning the finished process (its
    ``returncode``, ``stdout`` and ``stderr``). The command runs in this interpreter,
    through the same ``autotune.cli.main`` that ``python -m autotune`` calls, with
    its own stdout, stderr, environment (``env`` adds to this process's; a value None
    removes the variable), folder and torch threads: a fresh interpreter spends 4-7 s
    of a 2-core machine importing torch and PyG, about a fifth of the suite's CPU time
    when every command paid it. ``fresh``, ``background`` (the running ``Popen``, its
    stdout and stderr piped as text), ``script`` (the installed ``autotune`` script,
    whose import path, unlike ``-m``'s, lacks the current folder) run ``python -m
    autotune ARGS`` in a fresh interpreter instead: what needs a process of its own (a
    signal, a kill, a timeout, an import path as Python builds it at start). A
    ``PYTHONPATH`` in ``env`` goes ahead of an in-process command's import path, as
    Python puts it at start, and reaches the processes the command starts.
    ``on_line``: called with each line of an in-process command's stdout as it is
    printed (to act while the command runs)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not (fresh or background or script):
        return _in_process([str(a) for a in args], env or {}, cwd, on_line)
    assert on_line is None, "a fresh interpreter's lines: read its piped stdout"
    command = [str(Path(sys.executable).with_name("autotune"))] if script else \
        [sys.executable, "-m", "autotune"]
    command += list(args)
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    if background:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=cwd, preexec_fn=_as_from_a_terminal)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=cwd, preexec_fn=_as_from_a_terminal)


def _in_process(argv: list[str], env: dict, cwd, on_line=None):
    """``autotune.cli.main(argv)`` here, as a fresh interpreter would run it: its
    output captured, an exception printed as Python prints one (exit 1), and this
    process's environment, folder, import path, modules from outside the installed
    packages (a user's ``mymodels``) and torch threads as they were afterwards."""
    import contextlib
    import io
    import os
    import subprocess
    import sys
    import sysconfig
    import traceback

    import torch

    from autotune.cli import main

    out, err = _Captured(on_line), io.StringIO()
    saved_env, saved_path, saved_threads = dict(os.environ), list(sys.path), torch.get_num_threads()
    modules = set(sys.modules)
    installed = (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"])
    try:
        if env.get("PYTHONPATH"):
            sys.path[:0] = [os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p]
        os.environ.update({k: v for k, v in env.items() if v is not None})
        for k in [k for k, v in env.items() if v is None]:
            os.environ.pop(k, None)
        torch.set_num_threads(FRESH_THREADS or saved_threads)
        with contextlib.chdir(cwd or os.getcwd()), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors, --help
                code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
            except Exception:  # --debug re-raises: Python prints it and exits 1
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
    finally:
        # The user's modules are those imported from the folders the run put on the
        # path (its current folder among them); a package that only a PYTHONPATH entry
        # holds (sqlalchemy on the GPU machine) stays, or optuna would catch one copy's
        # IntegrityError while the other copy raises.
        users = tuple(os.path.join(os.path.abspath(p or cwd or os.curdir), "")
                      for p in set(sys.path) - set(saved_path) | {str(cwd or os.getcwd())})
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        torch.set_num_threads(saved_threads)
        for name in set(sys.modules) - modules:
            where = getattr(sys.modules[name], "__file__", None) or ""
            if where.startswith(users) and not where.startswith(installed) \
                    and "/autotune/" not in where:
                del sys.modules[name]
    return subprocess.CompletedProcess(["autotune", *argv], code, out.getvalue(),
                                       err.getvalue())


class _Captured:
    """An in-process command's stdout: the text, and each finished line handed to
    ``on_line`` as it is written."""

    def __init__(self, on_line=None) -> None:
        import io

        self._text, self._on_line, self._part = io.StringIO(), on_line, ""

    def write(self, text: str) -> int:
        if self._on_line is not None:
            *lines, self._part = (self._part + text).split("\n")
            for line in lines:
                self._on_line(line + "\n")
        return self._text.write(text)

    def getvalue(self) -> str:
        return self._text.getvalue()

    def __getattr__(self, name):  # flush, isatty, encoding...: the StringIO's
        return getattr(self._text, name)


def _as_from_a_terminal() -> None:
    """In the child before it runs: Ctrl-C's default disposition, unblocked, as a
    command typed at a terminal has it. A child inherits an ignored SIGINT, and
    Python then never raises KeyboardInterrupt: a test run started in the background
    of a non-interactive shell (``bash .ci/run &``) ignores SIGINT in every process,
    and the interrupt test's search then ran on through Ctrl-C."""
    import signal

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def loss_and_grads(model, batch):
    """The seeds' cross-entropy loss of one batch and the parameters' gradients."""
    import torch.nn.functional as F

    model.zero_grad()
    out = model(batch.x, batch.edge_index)[:batch.batch_size]
    loss = F.cross_entropy(out, batch.y[:batch.batch_size])
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def trial_processes(path) -> list:
    """Every live process of the trials under ``path``: those whose command line
    names it (a fresh-interpreter trial), and every member of the session of each
    trial pid recorded in a ``worker.pid`` under it (a forked trial, whose command
    line is the fork server's, and its loader workers, even once orphaned)."""
    import os
    from pathlib import Path

    import psutil

    sessions = set()
    for pid_file in Path(path).rglob("worker.pid"):
        try:
            sessions.add(int(pid_file.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(str(path) in part for part in proc.info["cmdline"] or []) or \
                    os.getsid(proc.pid) in sessions:
                found.append(proc)
        except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
            pass
    return found


def assert_window_kept_its_promise(steps: int, window: dict, min_steps: int,
                                   max_window_s: float) -> None:
    """What a timed window promises (:class:`autotune.MeasureSpec`): it stops
    ``precise`` only after ``min_steps`` steps and 4 blocks, or ``max-seconds`` once
    ``max_window_s`` has passed, which wins over the minimums (the trial is then
    flagged imprecise). ``window`` is the result's ``window`` as a dict."""
    from autotune.trial._window import MIN_BLOCKS

    assert steps >= 1
    if window["stopped"] == "precise":
        assert steps >= min_steps and len(window["blocks"]) >= MIN_BLOCKS, window
    else:
        assert window["stopped"] == "max-seconds", window
        assert window["wall_s"] >= max_window_s, window
