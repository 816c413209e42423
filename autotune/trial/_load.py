"""What else ran on a trial's cores while its window was timed.

pyperf and hyperfine warn that other work skews a benchmark; a search acts on it.
Over each timed window, :class:`LoadMeter` reads the busy time of the cores the
trial may run on (``/proc/stat`` through psutil, the hypervisor's steal included)
and the CPU time of the trial's own process tree (itself, its loader workers and any
other descendant, the reaped ones through their parent's children times). What the
cores were busy with beyond the tree's own time is what other processes took: as a
share of the cores' time over the window, it says how disturbed the window was
(:class:`Load`). A snapshot of every process's CPU time at either end names the
ones that took it, by pid and name. A process that lived only inside the window (a
build's compilers, a shell loop's commands) is seen at neither end; its parent is, and
what the parent reaped in the window is counted to it, "and its exited children".
The processes that started the measured one (a search's watcher) say so, and what no
process seen accounts for is said beside the named ones (:meth:`Load.named`).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import psutil

from autotune.trial._result import _Part

TOP = 3  # the processes named for a disturbed window
# ... and beside them, the time no process seen accounts for, where it is this much of
# the disturbance and at least this many CPU seconds
UNSEEN_SHARE, UNSEEN_MIN_S = 0.25, 0.02
STEAL = "steal"  # the name under which the hypervisor's steal time is reported
STOLEN = 0.75  # the share of the others' CPU seconds that makes a load the hypervisor's


def _cpu_s(times) -> float:
    """A process's CPU seconds with those of its reaped children."""
    return times.user + times.system + getattr(times, "children_user", 0.0) + \
        getattr(times, "children_system", 0.0)


def _busy_s(times) -> float:
    """A core's busy seconds: all but idle and I/O wait (guest time is in user)."""
    return sum(getattr(times, name, 0.0) for name in
               ("user", "nice", "system", "irq", "softirq", "steal"))


def _cpu(seconds: float) -> str:
    return f"{seconds:.2f}" if seconds < 0.1 else f"{seconds:.1f}"


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return [root]


@dataclass(frozen=True)
class _Seen:
    """A process at one end of a window: its name, parent, own CPU seconds and those
    of the children it has reaped (their whole lives, and their own reaped ones)."""

    name: str
    ppid: int
    own_s: float
    reaped_s: float


_GONE = _Seen("?", 0, 0.0, 0.0)  # what a process started inside the window had before


def _processes() -> dict[tuple[int, float], _Seen]:
    """Every process's (pid, start time) -> :class:`_Seen` now."""
    out = {}
    for proc in psutil.process_iter(["name", "ppid", "cpu_times", "create_time"]):
        info = proc.info
        times = info.get("cpu_times")
        if times is None or info.get("create_time") is None:
            continue
        out[(proc.pid, info["create_time"])] = _Seen(
            info.get("name") or "?", info.get("ppid") or 0, times.user + times.system,
            getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0))
    return out


def _took(before: dict[tuple[int, float], _Seen], after: dict[tuple[int, float], _Seen],
          mine: set, ancestors: frozenset[int] = frozenset()) -> list[tuple[float, int, str]]:
    """(CPU seconds, pid, name) each process outside ``mine`` took between the two
    snapshots; those in ``ancestors`` (a search's watcher, its fork server) say so. A
    parent's reaped time grew by its children's whole lives: of those seen at the
    start, what they had run by then is not the window's."""
    earlier: dict[int, float] = {}
    for key, seen in before.items():
        if key not in after:
            earlier[seen.ppid] = earlier.get(seen.ppid, 0.0) + seen.own_s + seen.reaped_s
    took = []
    for key, now in after.items():
        if key in mine:
            continue
        then = before.get(key, _GONE)
        reaped = max(now.reaped_s - then.reaped_s - earlier.get(key[0], 0.0), 0.0)
        name = f"{now.name} and its exited children" if reaped > 0.01 else now.name
        if key[0] in ancestors:
            name += ", which started the measured process"
        took.append((now.own_s - then.own_s + reaped, key[0], name))
    return sorted(took, reverse=True)


@dataclass(frozen=True)
class Load(_Part):
    """Over one window: the ``cores`` the trial could run on, the CPU seconds its own
    process tree took, and ``others_s``, what the rest of the machine took on those
    cores (their busy time beyond the tree's own); ``share``: that over the cores'
    time in the window. ``top``: the processes outside the tree that took most, as
    [pid, name, CPU seconds] (pid 0, "steal": the hypervisor). ``unseen_s``: what
    of ``others_s`` no process seen here accounts for (interrupts, a process in
    another container, or one that began and ended inside the window and whose
    parent ended too)."""

    cores: int = 0
    wall_s: float = 0.0
    own_s: float = 0.0
    others_s: float = 0.0
    share: float = 0.0
    top: list[list[Any]] = field(default_factory=list)
    unseen_s: float = 0.0

    @classmethod
    def summed(cls, loads: Iterable[Load]) -> Load:
        """The loads of several windows as one: their seconds added, each process's
        CPU seconds added over the windows it took them in (the :data:`TOP` that took
        most kept), so that a process that took every window is named once, with
        all it took."""
        loads = list(loads)
        took: dict[tuple[int, str], float] = {}
        for load in loads:
            for pid, name, cpu_s in load.top:
                took[pid, name] = took.get((pid, name), 0.0) + cpu_s
        cores = max((load.cores for load in loads), default=0)
        wall_s, others_s = sum(x.wall_s for x in loads), sum(x.others_s for x in loads)
        top = sorted(([pid, name, round(cpu_s, 2)] for (pid, name), cpu_s in took.items()),
                     key=lambda row: -row[2])[:TOP]
        return cls(cores=cores, wall_s=wall_s, own_s=sum(x.own_s for x in loads),
                   others_s=others_s,
                   share=others_s / (cores * wall_s) if cores and wall_s else 0.0, top=top,
                   unseen_s=round(sum(x.unseen_s for x in loads), 2))

    @property
    def stolen(self) -> bool:
        """The hypervisor's steal took most of what others took (:data:`STOLEN`): no
        process on this machine is there for its threads to spin against."""
        steal = sum(cpu_s for pid, name, cpu_s in self.top if pid == 0 and name == STEAL)
        return self.others_s > 0 and steal >= STOLEN * self.others_s

    def named(self) -> str:
        """The processes that took the cores, in words: ``pid 812 (stress) 9.8 CPU-s``
        (under 0.1 CPU-s with two decimals: a 0.5-s window's whole disturbance may be
        that small), and beside them the rest no process seen here accounts for,
        where that is much of it."""
        names = [f"pid {pid} ({name}) {_cpu(cpu_s)} CPU-s" if pid else
                 f"the hypervisor (steal) {_cpu(cpu_s)} CPU-s" for pid, name, cpu_s in self.top]
        if not names:
            return "no process seen at both ends"
        if self.unseen_s > max(UNSEEN_MIN_S, UNSEEN_SHARE * self.others_s):
            names.append(f"{_cpu(self.unseen_s)} CPU-s that no process seen here accounts for")
        return ", ".join(names)

    def describe(self) -> str:
        return (f"other processes took {100 * self.share:.0f}% of its {self.cores} "
                f"core{'s' if self.cores != 1 else ''}: {self.named()}")


class LoadMeter:
    """Measures the :class:`Load` of the window between :meth:`start` and
    :meth:`stop`, for the process tree rooted at this process."""

    def __init__(self) -> None:
        self._root = psutil.Process(os.getpid())
        self._ancestors = _ancestors(self._root)
        self._cores: list[int] = []
        self._at = 0.0
        self._cpu: list = []
        self._own = 0.0
        self._all: dict[tuple[int, float], _Seen] = {}

    def _cores_now(self, tree: list[psutil.Process]) -> list[int]:
        cores: set[int] = set()
        for proc in tree:
            try:
                cores.update(proc.cpu_affinity())
            except (psutil.NoSuchProcess, AttributeError):
                pass
        return sorted(cores) or list(range(psutil.cpu_count() or 1))

    def _own_s(self, tree: list[psutil.Process]) -> float:
        total = 0.0
        for proc in tree:
            try:
                total += _cpu_s(proc.cpu_times())
            except psutil.NoSuchProcess:
                pass
        return total

    def start(self) -> None:
        tree = _tree(self._root)
        self._cores = self._cores_now(tree)
        self._all = _processes()
        self._at = time.perf_counter()
        self._cpu = psutil.cpu_times(percpu=True)
        self._own = self._own_s(tree)

    def stop(self) -> Load:
        cpu = psutil.cpu_times(percpu=True)
        tree = _tree(self._root)
        own = self._own_s(tree) - self._own
        wall = time.perf_counter() - self._at
        cores = [c for c in self._cores if c < min(len(cpu), len(self._cpu))]
        busy = sum(_busy_s(cpu[c]) - _busy_s(self._cpu[c]) for c in cores)
        steal = sum(getattr(cpu[c], STEAL, 0.0) - getattr(self._cpu[c], STEAL, 0.0)
                    for c in cores)
        others = max(busy - own, 0.0)
        took = _took(self._all, _processes(), {(p.pid, _start(p)) for p in tree},
                     self._ancestors)
        top = [[pid, name, round(cpu_s, 2)] for cpu_s, pid, name in took[:TOP]
               if cpu_s >= 0.05 * max(others, 1e-9) and cpu_s > 0.01]
        if steal > 0.05 * max(others, 1e-9) and steal > 0.01:
            top = sorted([*top, [0, STEAL, round(steal, 2)]], key=lambda r: -r[2])[:TOP]
        seen = steal + sum(max(cpu_s, 0.0) for cpu_s, _, _ in took)
        return Load(cores=len(cores), wall_s=wall, own_s=own, others_s=others,
                    share=others / (wall * len(cores)) if wall > 0 and cores else 0.0,
                    top=top, unseen_s=round(max(others - seen, 0.0), 2))


def _ancestors(proc: psutil.Process) -> frozenset[int]:
    """The pids of the processes that started ``proc`` (pid 1 aside)."""
    try:
        return frozenset(p.pid for p in proc.parents() if p.pid != 1)
    except psutil.Error:
        return frozenset()


def _start(proc: psutil.Process) -> float | None:
    try:
        return proc.create_time()
    except psutil.NoSuchProcess:
        return None


def busy_note(window) -> str:
    """What a window's :class:`Load` says in a trial's line (a ``WindowStats``):
    ``DISTURBED: ...`` where it stayed over its ``max_busy`` however many times it was
    measured again, ``measured again Nx ...`` where a later window was quiet, else ""."""
    if window.load is None:
        return ""
    again = len(window.remeasured)
    times = f" (measured {again + 1} times)" if again else ""
    if window.disturbed:
        return f"DISTURBED: {Load.from_dict(window.load).describe()}{times}"
    if again:
        first = Load.from_dict(window.remeasured[0])
        return (f"measured again {again}x, the machine was busy: {first.describe()}")
    return ""
