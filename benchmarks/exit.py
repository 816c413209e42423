"""What a command's end costs: the seconds from its last word to its process's exit.

Each run is one ``autotune trial`` (the quick start's graph, scale 0.02, a 1-s window)
in a fresh interpreter, as a user runs any command that trains; the trial itself runs
in a fresh interpreter of its own, as ``autotune trial``'s do. The command's process
stamps the time as ``autotune.cli.main`` returns; this script stamps the time its
process is reaped; the difference is the command's teardown, and the whole run's
wall time holds the trial's too. Two ways alternate (ABBA, ``--runs`` of each), side
by side:

- ``frozen``: as shipped: the command and the trial have the objects left at exit
  frozen out of the interpreter's last garbage collections
  (:func:`autotune.env.end_quickly`);
- ``collected``: ``gc.freeze`` made a no-op in both (a ``sitecustomize`` on
  ``PYTHONPATH``), so the last collections walk every object torch and PyG made, as
  Python does by default.

    python benchmarks/exit.py --runs 8 --out benchmarks/results/exit.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import write

CONFIG = {"batch_size": 1024, "num_neighbors": [10, 5], "num_workers": 0,
          "hidden_channels": 64}
ORDER = ("frozen", "collected", "collected", "frozen")  # ABBA
# The command: stamps the moment main returned on its last stderr line.
CHILD = """import sys, time
from autotune.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
print(f"returned-at {time.time()!r}", file=sys.stderr, flush=True)
sys.exit(code)
"""
COLLECTED = "import gc\ngc.freeze = lambda: None\n"  # the "collected" way's sitecustomize


def run(way: str, config: Path, root: Path, site: Path, timeout_s: float) -> dict:
    """One command in a fresh interpreter; its seconds to exit and its teardown's."""
    argv = ["trial", "--config", str(config), "--dataset", "synthetic", "--scale", "0.02",
            "--root", str(root), "--max-seconds", "1", "-f", "json"]
    env = dict(os.environ)
    if way == "collected":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True,
                          text=True, env=env, timeout=timeout_s)
    ended = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"autotune trial exited {proc.returncode}: {proc.stderr[-2000:]}")
    if json.loads(proc.stdout)["status"] != "ok":
        raise RuntimeError(f"the trial did not measure: {proc.stdout[-500:]}")
    returned = float(proc.stderr.strip().splitlines()[-1].split()[1])
    return {"way": way, "wall_s": round(ended - start, 3),
            "teardown_s": round(ended - returned, 3)}


def summary(runs: list[dict]) -> dict:
    """Each way's medians and ranges, and what freezing saved, pair by pair (each
    frozen run beside the collected one of its ABBA block)."""
    out = {}
    for way in ("frozen", "collected"):
        mine = [r for r in runs if r["way"] == way]
        out[way] = {f"{key}_median": statistics.median(r[key] for r in mine)
                    for key in ("teardown_s", "wall_s")}
        out[way]["teardown_s_range"] = [min(r["teardown_s"] for r in mine),
                                        max(r["teardown_s"] for r in mine)]
    for key in ("teardown_s", "wall_s"):
        saved = [round(c[key] - f[key], 3) for f, c in _pairs(runs)]
        out[f"saved_{key}"] = {"pairs": saved, "median": statistics.median(saved),
                               "range": [min(saved), max(saved)]}
    return out


def _pairs(runs: list[dict]):
    """The runs as (frozen, collected) pairs side by side, in their order."""
    frozen = [r for r in runs if r["way"] == "frozen"]
    collected = [r for r in runs if r["way"] == "collected"]
    return list(zip(frozen, collected))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=8, help="runs of each way")
    p.add_argument("--root", default="data", help="dataset folder")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a run may take")
    p.add_argument("--out", default="benchmarks/results/exit.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({"config": CONFIG}))
        site = Path(tmp) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(COLLECTED)
        run("frozen", config, Path(args.root), site, args.timeout)  # the data made, untimed
        runs = [run(ORDER[i % len(ORDER)], config, Path(args.root), site, args.timeout)
                for i in range(2 * args.runs)]
    write(args.out, {"command": "autotune trial (synthetic, scale 0.02, a 1-s window)",
                     "runs": runs, "summary": summary(runs)})


if __name__ == "__main__":
    main()
