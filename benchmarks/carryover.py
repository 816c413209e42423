"""Does the measured throughput carry over to training? A short search, each pick
exported (default, knee, max-throughput, min-memory), then ``autotune train`` with
it: the training throughput (median of the epochs after the first) divided by the
throughput its trial measured. Epochs of at least 100 steps (31-step epochs swung by
+-17% within one run): the default scale of 0.35 gives 53,800 training nodes, 105
steps at the space's largest batch, 512. Target: 0.85 to 1.15 for every pick.

Beside each training, the pick is measured again as a trial (``autotune trial``) just
before it: training over that figure shows what the measurement itself misses, apart
from how far the machine's speed moved since the search.

    python benchmarks/carryover.py --out benchmarks/results/carryover.json
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from _common import measure_spec, parser, timed_search, write, write_space


LOW, HIGH = 0.85, 1.15
MIN_STEPS = 100  # per epoch
PICKS = ("default", "knee", "max-throughput", "min-memory")
SPACE = {
    "description": "benchmarks/carryover.py: the quick space's knobs, batches that give "
                   "epochs of 100 steps or more at scale 0.35",
    "precision": "5%",
    "knobs": {"batch_size": {"choices": [256, 512]},
              "num_neighbors": {"choices": [[10, 5], [15, 10]]},
              "num_workers": {"choices": [0, 1]}, "affinity": {"choices": ["none", "split"]},
              "compile_mode": "none", "amp_dtype": {"choices": ["float32", "bfloat16"]},
              "checkpointing": {"choices": [False, True]}, "sampling_backend": "builtin"},
    "fixed": {"hidden_channels": 64},
}


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
    p.add_argument("--space", default=None, help="a space file (default: SPACE above)")
    p.set_defaults(scale=0.35)
    args = p.parse_args()
    workdir = Path(args.workdir) / "carryover"
    workdir.mkdir(parents=True, exist_ok=True)
    space = args.space or str(write_space(SPACE, workdir / "space.yaml"))
    data = ["--dataset", "synthetic", "--scale", str(args.scale), "--root", args.root]
    _, result, _, _ = timed_search(
        workdir, "carryover", dataset="synthetic", scale=args.scale, root=args.root,
        space=space, n_trials=args.n_trials,
        measure=measure_spec(args))
    runs = []
    for pick in PICKS:
        out = result.export(workdir / f"{pick}.yaml", pick=pick)
        again = json.loads(autotune("trial", "--config", str(out), *data, "--precision",
                                    str(args.precision), "--studies-dir", str(workdir),
                                    "--format", "json"))["summary"]["seed_nodes_per_s"]
        blob = json.loads(autotune("train", "--config", str(out), *data, "--epochs",
                                   str(args.epochs), "--studies-dir", str(workdir),
                                   "--format", "json"))
        runs.append({"pick": pick, "trial": blob["measured"]["trial"],
                     "measured_seed_nodes_per_s": blob["measured"]["throughput"],
                     "trained_seed_nodes_per_s": blob["steady_seeds_per_s"],
                     "ratio": blob["achieved_over_measured"],
                     "remeasured_seed_nodes_per_s": again,
                     "ratio_to_remeasured": blob["steady_seeds_per_s"] / again,
                     "epochs": [{k: e[k] for k in ("epoch", "steps", "seeds_per_s", "val_metric")}
                                for e in blob["epochs"]], "config": blob["config"]})
        print(pick, runs[-1]["ratio"], runs[-1]["ratio_to_remeasured"], flush=True)
    ratios = [r["ratio"] for r in runs]
    steps = min(e["steps"] for r in runs for e in r["epochs"])
    write(args.out, {"benchmark": "carryover", "scale": args.scale, "epochs": args.epochs,
                     "n_trials": args.n_trials, "space": args.space or SPACE, "runs": runs,
                     "median_ratio": statistics.median(ratios), "target": [LOW, HIGH],
                     "median_ratio_to_remeasured":
                         statistics.median(r["ratio_to_remeasured"] for r in runs),
                     "min_steps_per_epoch": steps,
                     "meets": all(LOW <= r <= HIGH for r in ratios) and steps >= MIN_STEPS})


if __name__ == "__main__":
    main()
