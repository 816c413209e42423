"""glibc's malloc held, from a process's first step, in the state a long training
reaches: every block from the heap, and the heap's free top kept.

By default glibc serves a block over its mmap threshold with a mapping of its own
and unmaps it when freed, and hands the heap's free top back to the kernel once it
passes the trim threshold; the next step faults those pages in again. The
threshold starts at 128 KiB and rises each time a mapped block is freed (up to
32 MiB), so how much of a step goes on page faults changes as the process ages, and a
trial's window would promise less than its training goes on to run (the figures:
docs/benchmarks.md, "The held heap").

A trial measures in this state and ``autotune train`` trains in it
(:meth:`autotune.pipeline._build.Pipeline.activate` applies it); training code of one's
own gets the measured speed with the same two settings, ``MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=2147483647`` in its environment or a call to
:func:`hold_heap`. Where the environment already sets glibc's malloc (those
variables, ``GLIBC_TUNABLES``' ``glibc.malloc``) or preloads another allocator,
it is left as set, and :func:`heap_state` says so.
"""
from __future__ import annotations

import ctypes
import logging
import os

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's malloc.h
KEEP_BYTES = 2**31 - 1  # mallopt takes an int: the largest free top it can keep
_SETTINGS = ((M_MMAP_MAX, 0, "mmap_max=0"),
             (M_TRIM_THRESHOLD, KEEP_BYTES, f"trim_threshold={KEEP_BYTES}"))
_ENV_TUNABLES = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                 "MALLOC_TOP_PAD_")

_state: str | None = None


def _set_by_environment() -> str | None:
    """What in the environment already decides the allocator, if anything."""
    named = [name for name in _ENV_TUNABLES if name in os.environ]
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        named.append("GLIBC_TUNABLES")
    preload = os.environ.get("LD_PRELOAD", "")
    if "malloc" in preload:  # jemalloc, tcmalloc, mimalloc
        named.append(f"LD_PRELOAD={preload}")
    return ", ".join(named) or None


def hold_heap() -> str:
    """Sets glibc's malloc for this process (once; later calls return the first
    call's outcome) and returns what it did, as :func:`state` reads it."""
    global _state
    if _state is not None:
        return _state
    by_env = _set_by_environment()
    libc = ctypes.CDLL(None)
    if by_env is not None:
        _state = f"left as the environment sets it ({by_env})"
    elif not hasattr(libc, "gnu_get_libc_version"):
        _state = "not glibc: left as it is"
    else:
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        version = libc.gnu_get_libc_version().decode()
        refused = [text for option, value, text in _SETTINGS if libc.mallopt(option, value) != 1]
        if refused:
            logger.warning("glibc %s refused mallopt %s: early steps may run slower than "
                           "late ones", version, ", ".join(refused))
        _state = f"glibc {version}: " + ", ".join(
            text + (" (refused)" if text in refused else "") for _, _, text in _SETTINGS)
    return _state


def heap_state() -> str:
    """What :func:`hold_heap` did in this process, or that it has not run."""
    return _state if _state is not None else "as the process found it (hold_heap not called)"
