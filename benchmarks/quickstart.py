"""The README's quick start, timed as a new user meets it: its search command in a
fresh folder, with an empty dataset root and cache (the synthetic graph is generated
and processed, as on a fresh machine; the install is not timed). Records when the
first result line appears and when the command ends, and its whole output (which
the README and docs/commands.md quote). Targets on a quiet 2-core machine: first
result line <= 30 s, the whole search, confirmation included, <= 120 s, and its
default confirmed (its speed-up known to --confirm-precision, ±10%).

With ``--runs 3`` it runs three whole quick starts back to back, each in a fresh
folder, and reports whether they agree: the same default, or defaults tied within
their intervals; confirmed speed-ups whose intervals overlap; and the paired spread
of the defaults' speed-ups, as noise.py reads it: the largest deviation from their
median (target <= 5%). Their range (max over min, less 1; once to twice that, and the
figure these files held as ``speedup_spread`` before 2026-12-03) is reported beside it.

With ``--one-folder`` the runs share one folder, each its own study, as one user's
searches do: the first prepares the dataset for the rest, and the later ones choose
their paired windows from the machine's record the earlier ones left (docs/
measurement.md, "This machine's record"); the record is written out too. With
``--beside-training`` another training (busy.py's) runs beside every run: the
searches find the machine busy, and the record's busy lengths are what they choose.

    python benchmarks/quickstart.py --runs 3 --out benchmarks/results/quickstart.json
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import spread_from_median, write
from busy import TRAINING

COMMAND = ["search", "--dataset", "synthetic", "--scale", "0.02", "--space", "quick",
           "--n-trials", "8"]
TARGET_FIRST_S, TARGET_TOTAL_S = 30.0, 120.0
SPREAD_TARGET = 0.05  # the defaults' paired spread (noise.py's PAIRED_TARGET)


def default_confirmed(lines: list[str]) -> bool:
    """Whether the front's default row says it is confirmed."""
    return any("<- default:" in line and "confirmed in " in line.split("<- default:")[1]
               for line in lines)


# a front row's default: "    6   13,257  ±4.8%   467   1.66x ±0.16   0.38x  b1024 ... <- default:"
DEFAULT_ROW = re.compile(r"^\s*(\d+)\s+[\d,]+\s+±[\d.]+%\s+[\d,]+\s+([\d.]+)x ±([\d.]+)\s+"
                         r"[\d.]+x\s+(.+?)\s+<- default:")


def default_of(lines: list[str]) -> dict | None:
    """The front's default row: trial, config, speed-up and its interval."""
    for line in lines:
        match = DEFAULT_ROW.match(line)
        if match:
            trial, speedup, half, config = match.groups()
            return {"trial": int(trial), "config": config, "speedup": float(speedup),
                    "low": float(speedup) - float(half), "high": float(speedup) + float(half),
                    "confirmed": default_confirmed([line])}
    return None


def agreement(runs: list[dict]) -> dict:
    """Whether back-to-back quick starts agree: their defaults' configs, their
    speed-up intervals (each pair overlapping), and the speed-ups' spread."""
    defaults = [r["default"] for r in runs]
    if any(d is None for d in defaults):
        return {"defaults": defaults, "agree": False, "why": "a run printed no default"}
    same = len({d["config"] for d in defaults}) == 1
    overlap = all(a["low"] <= b["high"] and b["low"] <= a["high"]
                  for a in defaults for b in defaults)
    speedups = [d["speedup"] for d in defaults]
    spread = spread_from_median(speedups)
    return {"defaults": defaults, "same_default": same, "intervals_overlap": overlap,
            "paired_spread": spread, "target_paired_spread": SPREAD_TARGET,
            "speedup_range": max(speedups) / min(speedups) - 1,
            "agree": overlap and spread <= SPREAD_TARGET}  # tied where not the same


def quick_start(shared: str | None = None, study: str | None = None) -> dict:
    """One quick start in a fresh folder (or in ``shared``, as study ``study``): its
    output, first line and total seconds."""
    with tempfile.TemporaryDirectory(prefix="autotune-quickstart-") as fresh:
        folder = shared or fresh
        env = {**os.environ, "AUTOTUNE_CACHE": str(Path(folder) / "cache"),
               "AUTOTUNE_DATA_ROOT": str(Path(folder) / "data")}
        named = ["--study-name", study] if study else []
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "autotune", *COMMAND, *named],
                                cwd=folder, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
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
    return {"first_result_line_s": first, "total_s": total,
            "default_confirmed": default_confirmed(lines), "default": default_of(lines),
            "meets": first is not None and first <= TARGET_FIRST_S and
            total <= TARGET_TOTAL_S and default_confirmed(lines), "output": lines}


def machine_record(folder: str) -> dict:
    """The record of paired windows the runs in ``folder`` left: its entries, what
    it knows at each length quiet and busy, and the length each state would take next."""
    from autotune.study import _window_length as lengths

    entries = lengths.read(lengths.history_path(Path(folder) / "studies"))
    out: dict = {"entries": entries}
    for busy, state in ((False, "quiet"), (True, "busy")):
        rule = lengths.LENGTHS[busy]
        known = {f"{w:g}": lengths.known(entries, w, busy) for w in (rule.first, rule.other)}
        choice = lengths.choose(entries, busy)
        out[state] = {"known": {w: k and vars(k) for w, k in known.items()},
                      "next": {"window_s": choice.window_s, "why": choice.why}}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/quickstart.json")
    p.add_argument("--runs", type=int, default=1, help="quick starts back to back")
    p.add_argument("--one-folder", action="store_true",
                   help="the runs share one folder (each its own study), as a user's "
                        "do: the later ones read this machine's record of paired windows")
    p.add_argument("--beside-training", action="store_true",
                   help="another training (busy.py's) runs beside every run")
    args = p.parse_args()
    other = subprocess.Popen([sys.executable, "-c", TRAINING]) if args.beside_training \
        else None
    try:
        with tempfile.TemporaryDirectory(prefix="autotune-quickstart-shared-") as shared:
            runs = [quick_start(shared, f"quickstart-{k}") if args.one_folder else
                    quick_start() for k in range(args.runs)]
            record = machine_record(shared) if args.one_folder else None
    finally:
        if other is not None:
            other.kill()
    first = runs[0]
    write(args.out, {
        "benchmark": "quickstart", "device": "cpu", "command": "autotune " + " ".join(COMMAND),
        "target_first_result_line_s": TARGET_FIRST_S, "target_total_s": TARGET_TOTAL_S,
        **{k: first[k] for k in ("first_result_line_s", "total_s", "default_confirmed", "meets")},
        "runs": [{k: v for k, v in r.items() if k != "output"} for r in runs],
        "all_meet": all(r["meets"] for r in runs),
        "agreement": agreement(runs) if len(runs) > 1 else None,
        "one_folder": args.one_folder, "beside_training": args.beside_training,
        "machine_record": record,
        "confirmation_lines": [[line for line in r["output"] if line.startswith("confirmation:")]
                               for r in runs],
        "output": first["output"],
    })


if __name__ == "__main__":
    main()
