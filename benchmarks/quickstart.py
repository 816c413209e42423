"""The README's quick start, timed as a new user meets it: its search command in a
fresh folder, with an empty dataset root and cache (the synthetic graph is generated
and processed, as on a fresh machine; the install is not timed). Records when the
first result line appears and when the command ends, and its whole output (which
the README and docs/commands.md quote). Targets on a quiet 2-core machine: first
result line <= 30 s, the whole search, confirmation included, <= 120 s, and its
default confirmed (its speed-up known to --confirm-precision, ±10%).

    python benchmarks/quickstart.py --out benchmarks/results/quickstart.json
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import write

COMMAND = ["search", "--dataset", "synthetic", "--scale", "0.02", "--space", "quick",
           "--n-trials", "8"]
TARGET_FIRST_S, TARGET_TOTAL_S = 30.0, 120.0


def default_confirmed(lines: list[str]) -> bool:
    """Whether the front's default row says it is confirmed."""
    return any("<- default:" in line and "confirmed in " in line.split("<- default:")[1]
               for line in lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/quickstart.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="autotune-quickstart-") as folder:
        env = {**os.environ, "AUTOTUNE_CACHE": str(Path(folder) / "cache"),
               "AUTOTUNE_DATA_ROOT": str(Path(folder) / "data")}
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "autotune", *COMMAND], cwd=folder,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        lines, first = [], None
        for line in proc.stdout:
            at = time.perf_counter() - started
            lines.append(line.rstrip("\n"))
            print(f"{at:6.1f}s {line}", end="", flush=True)
            if first is None and line.startswith("[  1/"):
                first = at
        code = proc.wait()
        total = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"the quick start exited {code}")
    write(args.out, {
        "benchmark": "quickstart", "device": "cpu", "command": "autotune " + " ".join(COMMAND),
        "first_result_line_s": first, "total_s": total,
        "target_first_result_line_s": TARGET_FIRST_S, "target_total_s": TARGET_TOTAL_S,
        "default_confirmed": default_confirmed(lines),
        "meets": first is not None and first <= TARGET_FIRST_S and total <= TARGET_TOTAL_S
        and default_confirmed(lines),
        "output": lines,
    })


if __name__ == "__main__":
    main()
