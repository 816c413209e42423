"""The machine's CPU topology, and the named affinity strategies built from it.

Logical CPUs come from psutil (the ones this process may run on), SMT siblings
from ``/sys/devices/system/cpu/cpuN/topology/thread_siblings_list`` and NUMA
nodes from ``/sys/devices/system/node/nodeN/cpulist``. A strategy turns the
topology and a worker count into ``(loader_cores, compute_cores)``:

================================  =================================================
strategy                          loader workers / compute (main process)
================================  =================================================
none                              no pinning
split                             the first k physical cores (k = workers, at most
                                  all but one), with their SMT siblings / the rest
compact                           every worker on the last physical core (its SMT
                                  threads shared) / all other physical cores
loader-on-numa0/compute-on-numa1  NUMA node 0's CPUs / node 1's CPUs
================================  =================================================
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from autotune.errors import ConfigError

NUMA_STRATEGY = "loader-on-numa0/compute-on-numa1"
STRATEGIES = ("none", "split", "compact", NUMA_STRATEGY)


@dataclass(frozen=True)
class Topology:
    """Logical CPUs this process may use, grouped into physical cores and NUMA nodes
    (each group lists only the CPUs available to this process)."""

    cpus: tuple[int, ...]
    cores: tuple[tuple[int, ...], ...]
    nodes: tuple[tuple[int, ...], ...]

    def why_not(self, strategy: str) -> str | None:
        """Why ``strategy`` cannot be built on this machine (None: it can)."""
        if strategy in ("split", "compact") and len(self.cores) < 2:
            return (f"affinity '{strategy}' needs at least 2 physical cores; this machine "
                    f"offers {len(self.cores)}")
        if strategy == NUMA_STRATEGY and len(self.nodes) < 2:
            return (f"affinity '{strategy}' needs 2 NUMA nodes with usable CPUs; this "
                    f"machine has {len(self.nodes)}")
        return None


def parse_cpulist(text: str) -> list[int]:
    """Linux's CPU list format: '0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None:
            raise ValueError(f"not a CPU list: {text!r}")
        lo, hi = int(match.group(1)), int(match.group(2) or match.group(1))
        cpus.extend(range(lo, hi + 1))
    return cpus


def read_topology(sysfs: str | Path = "/sys", cpus: list[int] | None = None) -> Topology:
    """Reads the topology of ``cpus`` (default: this process's, from psutil). Where a
    sysfs file is missing, each CPU counts as its own core and all sit on one node."""
    import psutil

    base = Path(sysfs) / "devices" / "system"
    available = sorted(cpus if cpus is not None else psutil.Process().cpu_affinity())
    allowed = set(available)
    cores: dict[tuple[int, ...], None] = {}
    for cpu in available:
        siblings = _read_list(base / "cpu" / f"cpu{cpu}" / "topology" / "thread_siblings_list")
        core = tuple(c for c in (siblings or [cpu]) if c in allowed) or (cpu,)
        cores.setdefault(core, None)
    nodes = []
    for node_dir in sorted((base / "node").glob("node[0-9]*"),
                           key=lambda p: int(p.name[4:])):
        members = tuple(c for c in (_read_list(node_dir / "cpulist") or []) if c in allowed)
        if members:
            nodes.append(members)
    if not nodes:
        nodes = [tuple(available)]
    ordered = sorted(cores, key=lambda core: core[0])
    return Topology(tuple(available), tuple(ordered), tuple(nodes))


def _read_list(path: Path) -> list[int] | None:
    try:
        return parse_cpulist(path.read_text())
    except (OSError, ValueError):
        return None


@lru_cache(maxsize=1)
def this_machine() -> Topology:
    return read_topology()


def affinity_sets(strategy: str, num_workers: int, topology: Topology
                  ) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """``(loader_cores, compute_cores)`` for a named strategy (both None: no pinning)."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"affinity must be one of {', '.join(STRATEGIES)} (got {strategy!r})")
    if strategy == "none" or num_workers == 0:
        return None, None
    reason = topology.why_not(strategy)
    if reason:
        raise ConfigError(reason)
    cores = topology.cores
    if strategy == "split":
        k = min(num_workers, len(cores) - 1)
        return _flat(cores[:k]), _flat(cores[k:])
    if strategy == "compact":
        return cores[-1], _flat(cores[:-1])
    return topology.nodes[0], topology.nodes[1]


def _flat(groups) -> tuple[int, ...]:
    return tuple(sorted(c for group in groups for c in group))
