"""autotune.pipeline._allocator: a process that trains keeps its heap from its first step, so
a window's early steps fault no more pages than a long training's later ones."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

BLOCK = 64 << 20  # over glibc's largest mmap threshold (32 MiB): mapped afresh by default
PAGES = BLOCK // 4096
REUSED = 20
FAULTS = textwrap.dedent(f"""
    import resource, sys, torch
    import autotune
    torch.set_num_threads(1)  # no worker threads' arenas in the count
    if sys.argv[1] == "hold":
        print(autotune.hold_heap())
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(6):  # the first few blocks grow the heap (or are mapped), not always alike
        torch.ones({BLOCK // 4}).sum()
    before = faults()
    for _ in range({REUSED}):
        torch.ones({BLOCK // 4}).sum()
    print(faults() - before)
""")


def _run(mode: str, **env: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@glibc
def test_a_held_heap_reuses_a_freed_block_without_faulting_it_in_again():
    """By default each block is mapped and faulted in afresh; held, a freed block's
    pages are reused. A small block placed where a big one was can still make the
    heap grow now and then (twice in 10 blocks once, under a parallel test run), so
    the bound is a quarter of the blocks, not none."""
    (default,) = _run("default")
    *said, held = _run("hold")
    assert int(default) >= REUSED * PAGES * 0.9, "by default each block is mapped afresh"
    assert int(held) < REUSED * PAGES / 4, f"a held heap faulted {held} pages"
    assert " ".join(said).startswith("glibc ") and "mmap_max=0" in " ".join(said)


@glibc
def test_an_environment_that_sets_malloc_is_left_as_it_is():
    out = _run("hold", MALLOC_TRIM_THRESHOLD_="131072")
    assert " ".join(out[:-1]) == "left as the environment sets it (MALLOC_TRIM_THRESHOLD_)"
    assert int(out[-1]) >= REUSED * PAGES * 0.9, "the environment's own setting still rules"
