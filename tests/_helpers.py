"""Helpers shared by the test modules."""
from __future__ import annotations


def cli(*args, env=None, timeout=900, cwd=None):
    """``python -m autotune ARGS`` in a fresh interpreter, as a user would run it."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)
