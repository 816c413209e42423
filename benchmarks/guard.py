"""The accuracy guard on real and synthetic graphs: ``autotune search --accuracy-guard
0.99`` over a space that holds damaging configs (fanout [1, 1], batch 16), on Cora and
CiteSeer (../shared/data/planetoid; skipped with a message when absent) and on the
Reddit-shaped synthetic graph. Figures per graph: the guarded default pick's
validation accuracy divided by the baseline's (target >= 0.99) and the guard's share
of the search's wall time (target <= 25%). The Planetoid files are copied to the
workdir first: PyG writes its processed files beside them.

    python benchmarks/guard.py --out benchmarks/results/guard.json
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import yaml

from _common import measure_spec, parser, timed_search, write
from autotune.specs import baseline_metric


PLANETOID = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "planetoid"
RATIO, SHARE = 0.99, 0.25
SPACE = {
    "description": "benchmarks/guard.py: knobs that change learning, damaging ones included",
    "knobs": {"batch_size": {"choices": [16, 64, 256, 1024]},
              "num_neighbors": {"choices": [[1, 1], [5, 5], [10, 5], [25, 10]]},
              "num_workers": 0, "amp_dtype": {"choices": ["float32", "bfloat16"]},
              "checkpointing": {"choices": [False, True]}, "sampling_backend": "builtin"},
    "fixed": {"hidden_channels": 64},
}


def one(name: str, data: dict, epochs: int, args, workdir: Path) -> dict:
    study_name = f"guard-{name}-{time.strftime('%H%M%S')}"
    _, result, wall, stdout = timed_search(
        workdir, study_name, **data, space=workdir / "space.yaml", n_trials=args.n_trials,
        accuracy_guard=RATIO, guard_epochs=epochs, optuna_sampler="random",
        measure=measure_spec(args))
    guard, k = result.guard, result.default  # the pick export writes
    guarded = [t for t in result.trials if t.validation and t.reused_from is None]
    guard_s = sum(t.guard_s for t in guarded)
    baseline = baseline_metric(guard)  # the node tasks' metric: accuracy
    # No pick: every trained candidate of the space fell below the guard, and the
    # search says so; the accuracy target then has nothing to judge (None).
    ratio = k.val_metric / baseline if k is not None else None
    return {
        "dataset": name, "guard_epochs": epochs, "trials": len(result.trials),
        "baseline_val_acc": baseline, "budget_s": guard["budget_s"],
        "pick": "default",
        "knee": None if k is None else {
            "trial": k.number, "val_acc": k.val_metric, "config": k.config,
            "seed_nodes_per_s": k.throughput, "peak_mib": k.memory_mib},
        "knee_accuracy_ratio": ratio,
        "guarded": [{"trial": t.number, "val_acc": t.val_metric, "ratio": t.guard_ratio,
                     "violated": t.below_guard, "fanout": list(t.config.num_neighbors),
                     "batch": t.config.batch_size} for t in guarded],
        "search_wall_s": wall, "guard_s": guard_s, "guard_share": guard_s / wall,
        "meets": {"knee_ratio": None if ratio is None else ratio >= RATIO,
                  "guard_share": guard_s / wall <= SHARE},
        "stdout_tail": stdout[-1500:],
    }


def main() -> None:
    p = parser(__doc__, "benchmarks/results/guard.json")
    p.add_argument("--n-trials", type=int, default=10)
    p.add_argument("--planetoid", default=str(PLANETOID))
    p.add_argument("--planetoid-epochs", type=int, default=50)
    p.add_argument("--synthetic-epochs", type=int, default=2)
    args = p.parse_args()
    workdir = Path(args.workdir) / "guard"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "space.yaml").write_text(yaml.safe_dump(SPACE, sort_keys=False))
    results, skipped = [], []
    planetoid = workdir / "planetoid"
    if Path(args.planetoid).is_dir() and not planetoid.exists():
        shutil.copytree(args.planetoid, planetoid)
    for name in ("Cora", "CiteSeer"):
        if not (Path(args.planetoid) / name / "raw").is_dir():
            message = f"{name}: no {Path(args.planetoid) / name / 'raw'}; skipped"
            print(message, flush=True)
            skipped.append(message)
            continue
        results.append(one(name, {"dataset": name, "root": str(planetoid)},
                           args.planetoid_epochs, args, workdir))
        print(name, results[-1]["knee_accuracy_ratio"], results[-1]["guard_share"], flush=True)
    results.append(one("synthetic", {"dataset": "synthetic", "scale": args.scale,
                                     "root": args.root}, args.synthetic_epochs, args, workdir))
    print("synthetic", results[-1]["knee_accuracy_ratio"], results[-1]["guard_share"])
    write(args.out, {"benchmark": "guard", "ratio": RATIO, "target_share": SHARE,
                     "n_trials": args.n_trials, "results": results, "skipped": skipped,
                     "meets": all(v is not False for r in results for v in r["meets"].values())})


if __name__ == "__main__":
    main()
