"""Many workers, one PostgreSQL study: trials per minute and storage overhead per trial
for 1, 2 and 4 local worker processes sharing a fixed budget of cheap trials, with the
per-host measurement lock on (so on one host the trials are measured one at a time and
extra workers can only overlap their start-up and storage work).

    python benchmarks/distributed.py --out benchmarks/results/distributed.json

Storage overhead per trial = time to reserve a trial (study lock, stale check, ask)
plus time to write its attributes; ``tell`` itself is not included.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import optuna

from _common import write

from autotune.data._datasets import DatasetRef
from autotune.storage import masked, open_storage
from autotune.study._records import records

# Cheap trials, so that the storage's share shows: a tiny graph, a window of at most a
# second at a loose precision, and no confirmation rounds at the end.
FAST = ["--dataset", "synthetic", "--scale", "0.004", "--steps", "3", "--warmup", "1",
        "--warmup-time", "0", "--space", "quick", "--precision", "10%", "--max-seconds", "1", "--confirm", "0"]


def run(url: str, workers: int, trials: int, root: Path, lock_dir: Path) -> dict:
    name = f"bench-{workers}w-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "AUTOTUNE_LOCK_DIR": str(lock_dir)}
    args = [sys.executable, "-m", "autotune", "search", *FAST, "--root", str(root / "data"),
            "--studies-dir", str(root / "studies"), "--storage", url, "--study-name", name,
            "--n-trials", str(trials)]
    start = time.perf_counter()
    procs = [subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(workers)]
    errors = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - start
    failed = [e[-500:] for p, e in zip(procs, errors) if p.returncode != 0]
    if failed:
        raise SystemExit(f"{workers} workers: a worker failed: {failed[0]}")
    storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    done = records(study)
    overhead = [t.reserve_s + (t.attrs_write_s or 0.0) for t in done if t.reserve_s is not None]
    measured = [t.measured_at[1] - t.measured_at[0] for t in done if t.measured_at]
    optuna.delete_study(study_name=name, storage=storage)
    return {"workers": workers, "trials": len(done),
            "complete": sum(t.complete for t in done),
            "wall_s": wall, "trials_per_min": 60 * len(done) / wall,
            "median_storage_overhead_ms": 1000 * statistics.median(overhead),
            "max_storage_overhead_ms": 1000 * max(overhead),
            "median_trial_s": statistics.median(measured),
            "lock_busy_share": sum(measured) / wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storage", default=os.environ.get(
        "AUTOTUNE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    p.add_argument("--trials", type=int, default=12, help="the study's budget per run")
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--out", default="benchmarks/results/distributed.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        DatasetRef("synthetic", root=str(root / "data"), scale=0.004).prepare()
        runs = [run(args.storage, int(w), args.trials, root, root / "locks")
                for w in args.workers.split(",")]
    write(args.out, {"benchmark": "distributed", "storage": masked(args.storage),
                     "budget_trials": args.trials, "search_args": FAST, "runs": runs})


if __name__ == "__main__":
    main()
