"""Affinity strategies from a CPU topology: a fake sysfs tree with SMT and two NUMA
nodes (the shape of a two-socket server), and this machine's real one."""
from __future__ import annotations

import os

import psutil
import pytest

from autotune.errors import ConfigError
from autotune.topology import (NUMA_STRATEGY, affinity_sets, parse_cpulist, read_topology,
                               this_machine)


def _sysfs(root, siblings: dict[int, str], nodes: dict[int, str]):
    for cpu, text in siblings.items():
        folder = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(text + "\n")
    for node, text in nodes.items():
        folder = root / "devices" / "system" / "node" / f"node{node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(text + "\n")
    return root


@pytest.fixture
def two_sockets(tmp_path):
    """8 logical CPUs: 4 physical cores with 2 SMT threads each (cpu i and i + 4
    are siblings, as Linux numbers them); cores 0-1 on node 0, cores 2-3 on node 1."""
    siblings = {cpu: f"{cpu % 4},{cpu % 4 + 4}" for cpu in range(8)}
    return read_topology(_sysfs(tmp_path, siblings, {0: "0-1,4-5", 1: "2-3,6-7"}),
                         cpus=list(range(8)))


def test_cpulist_format():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("5") == [5]
    with pytest.raises(ValueError):
        parse_cpulist("0-x")


def test_smt_siblings_and_numa_nodes_are_read(two_sockets):
    assert two_sockets.cores == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert two_sockets.nodes == ((0, 1, 4, 5), (2, 3, 6, 7))


def test_strategies_on_a_two_socket_smt_machine(two_sockets):
    # split: the first k physical cores, with their SMT siblings, go to the workers
    assert affinity_sets("split", 2, two_sockets) == ((0, 1, 4, 5), (2, 3, 6, 7))
    assert affinity_sets("split", 9, two_sockets) == ((0, 1, 2, 4, 5, 6), (3, 7))
    # compact: every worker on the last physical core's threads
    assert affinity_sets("compact", 3, two_sockets) == ((3, 7), (0, 1, 2, 4, 5, 6))
    assert affinity_sets(NUMA_STRATEGY, 2, two_sockets) == ((0, 1, 4, 5), (2, 3, 6, 7))
    assert affinity_sets("none", 2, two_sockets) == (None, None)
    assert affinity_sets("split", 0, two_sockets) == (None, None), "no workers, no pinning"


def test_a_restricted_process_sees_only_its_cpus(tmp_path):
    """Under taskset or a cgroup, only the allowed CPUs count: here CPUs 0-1 and 4
    (core 0 whole, half of core 1), all on node 0."""
    siblings = {cpu: f"{cpu % 4},{cpu % 4 + 4}" for cpu in range(8)}
    topo = read_topology(_sysfs(tmp_path, siblings, {0: "0-1,4-5", 1: "2-3,6-7"}),
                         cpus=[0, 1, 4])
    assert topo.cores == ((0, 4), (1,)) and topo.nodes == ((0, 1, 4),)
    with pytest.raises(ConfigError, match="needs 2 NUMA nodes.*has 1"):
        affinity_sets(NUMA_STRATEGY, 1, topo)
    with pytest.raises(ConfigError, match="affinity must be one of"):
        affinity_sets("scatter", 1, topo)


def test_missing_sysfs_means_one_core_per_cpu_on_one_node(tmp_path):
    topo = read_topology(tmp_path, cpus=[0, 1, 2])
    assert topo.cores == ((0,), (1,), (2,)) and topo.nodes == ((0, 1, 2),)


def test_this_machine_agrees_with_psutil():
    topo = this_machine()
    assert list(topo.cpus) == sorted(os.sched_getaffinity(0))
    if len(topo.cpus) == psutil.cpu_count(logical=True):  # not restricted by a cgroup
        assert len(topo.cores) == psutil.cpu_count(logical=False)
    assert sorted(c for core in topo.cores for c in core) == list(topo.cpus)
