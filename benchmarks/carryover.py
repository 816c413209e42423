"""Does the measured throughput carry over to training? A short search, the knee
exported, then ``autotune train`` with it: the training throughput (median of the
epochs after the first) divided by the throughput its trial measured. Target: 0.85
to 1.15.

    python benchmarks/carryover.py --out benchmarks/results/carryover.json
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from _common import measure_spec, parser, timed_search, write


LOW, HIGH = 0.85, 1.15


def autotune(*args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                         text=True)
    if run.returncode != 0:
        raise SystemExit(f"autotune {args[0]} failed ({run.returncode}): {run.stderr[-2000:]}")
    return run.stdout


def main() -> None:
    p = parser(__doc__, "benchmarks/results/carryover.json")
    p.add_argument("--n-trials", type=int, default=6)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--space", default="quick")
    args = p.parse_args()
    workdir = Path(args.workdir) / "carryover"
    data = ["--dataset", "synthetic", "--scale", str(args.scale), "--root", args.root]
    _, result, _, _ = timed_search(
        workdir, "carryover", dataset="synthetic", scale=args.scale, root=args.root,
        space=args.space, n_trials=args.n_trials,
        measure=measure_spec(args))
    runs = []
    for pick in ("knee", "max-throughput", "min-memory"):
        out = result.export(workdir / f"{pick}.yaml", pick=pick)
        blob = json.loads(autotune("train", "--config", str(out), *data, "--epochs",
                                   str(args.epochs), "--studies-dir", str(workdir),
                                   "--format", "json"))
        runs.append({"pick": pick, "trial": blob["measured"]["trial"],
                     "measured_seed_nodes_per_s": blob["measured"]["throughput"],
                     "trained_seed_nodes_per_s": blob["steady_seeds_per_s"],
                     "ratio": blob["achieved_over_measured"],
                     "epochs": [{k: e[k] for k in ("epoch", "seeds_per_s", "val_acc")}
                                for e in blob["epochs"]], "config": blob["config"]})
        print(pick, runs[-1]["ratio"], flush=True)
    ratios = [r["ratio"] for r in runs]
    write(args.out, {"benchmark": "carryover", "scale": args.scale, "epochs": args.epochs,
                     "n_trials": args.n_trials, "space": args.space, "runs": runs,
                     "median_ratio": statistics.median(ratios), "target": [LOW, HIGH],
                     "meets": all(LOW <= r <= HIGH for r in ratios)})


if __name__ == "__main__":
    main()
