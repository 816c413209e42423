"""Writing what autotune keeps: every file goes through :func:`atomic_write` (a
temporary file beside it, then a rename, so a reader or a crash never sees half a
file), every JSON or YAML text through :func:`dump`, and a write that Ctrl-C must not
cut in two inside :func:`signals_deferred`; a training latches Ctrl-C
(:func:`interrupts_latched`) so that none is lost."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from autotune.env import isa_key


def atomic_write(path: str | os.PathLike, content: str | Callable[[Path], None]) -> Path:
    """Writes ``content`` to ``path``: text, or a function that writes the temporary
    file it is given (``lambda tmp: torch.save(blob, tmp)``). The folder is created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(content, str):
            tmp.write_text(content)
        else:
            content(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held until the block ends, then handled as they would have
    been: for a storage write between a training's steps, which Ctrl-C would otherwise
    cut in two inside SQLAlchemy (or be swallowed there by one of its weakref
    callbacks), before the run's log is written after it. Outside the main thread,
    where Python runs no signal handler, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda number, frame: caught.append(number)) for s in held}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        if caught:
            _deliver(caught[0], previous[caught[0]])


_LATCHED: dict[int, Any] = {}  # signal number -> the handler it had, while latched
_PENDING: list[int] = []  # latched signals not yet seen through to the end


@contextlib.contextmanager
def interrupts_latched() -> Iterator[None]:
    """SIGINT and SIGTERM handled at once as before (KeyboardInterrupt), and also
    remembered until the block ends, for :func:`check_interrupt`: Python swallows an
    exception raised in a garbage collector's callback ("Exception ignored in ..."),
    so Ctrl-C that lands in one would be lost, and a training would go on. Outside
    the main thread the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def latch(number: int, frame) -> None:
        _PENDING.append(number)
        _deliver(number, _LATCHED[number])

    for number in (signal.SIGINT, signal.SIGTERM):
        _LATCHED[number] = signal.signal(number, latch)
    try:
        yield
    finally:
        for number, handler in _LATCHED.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        _LATCHED.clear()
        _PENDING.clear()


def check_interrupt() -> None:
    """Between a training's steps: a latched signal whose KeyboardInterrupt Python
    swallowed is handled again here (:func:`interrupts_latched`)."""
    if _PENDING and _LATCHED:
        _deliver(_PENDING[-1], _LATCHED[_PENDING[-1]])


def _deliver(number: int, handler) -> None:
    """What ``handler`` (a signal's previous disposition) does with the signal."""
    if callable(handler):
        handler(number, None)
    elif handler != signal.SIG_IGN:  # the default (or None: set outside Python)
        signal.signal(number, signal.SIG_DFL)
        signal.raise_signal(number)


def dump(blob: Any, fmt: Literal["json", "yaml"]) -> str:
    """``blob`` as JSON (indented) or YAML (keys in their order), ending in a newline;
    values JSON cannot hold (paths, dates) as their ``str``. YAML through libyaml
    where PyYAML was built with it (its wheels are), the same text as PyYAML's own
    emitter at a fraction of the time: a search writes its front after every trial."""
    text = json.dumps(blob, indent=2, default=str)
    if fmt == "json":
        return text + "\n"
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(json.loads(text), Dumper=dumper, sort_keys=False)


def inductor_cache_dir(studies_dir: str | os.PathLike) -> Path:
    """Where compiled kernels persist between trials (and training runs) of a studies
    folder: ``STUDIES_DIR/.cache/inductor/`` and the CPU's :func:`autotune.env.isa_key`.
    Inductor's own cache key names the GPU but not the CPU's vector ISA: a graph it
    generated for AVX2's 8 lanes, loaded on an AVX-512 host (a folder two hosts share),
    is built there with 16-lane stores over 8-lane loops and writes past its buffers
    (a trial died of "double free or corruption", docs/knobs.md)."""
    return Path(studies_dir) / ".cache" / "inductor" / isa_key()
