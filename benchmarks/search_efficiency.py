"""How close each Optuna sampler gets to an exhaustive grid in 12 trials.

A reduced space of 48 configurations (batch x fanout x workers x AMP x checkpointing)
on a mid-size synthetic graph. The grid measures every configuration, each in its
own trial process, and its best throughput is the reference. Each sampler then runs
12 trials (3 seeds): a configuration it picks is scored with the grid's measurement
of that configuration, the way ``autotune search`` reuses a repeat. So samplers are
compared on identical numbers, free of run-to-run noise. Reported: best throughput
found / grid best, and hypervolume found / grid hypervolume (reference: 1.1x the
grid's largest memory). Target: the default sampler reaches >= 0.95 of the grid's
best and beats random.

    python benchmarks/search_efficiency.py --out benchmarks/results/search_efficiency.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path

import optuna

from autotune.config import TrialConfig
from autotune.data._datasets import DatasetRef
from autotune.env import fingerprint
from autotune.specs import MeasureSpec
from autotune.study._pareto import Point, hypervolume
from autotune.trial._runner import run_trial
from autotune.study._space import Knob, SearchSpace, suggest_config
from autotune.study._records import DIRECTIONS
from autotune.study._optuna_samplers import DEFAULT_OPTUNA_SAMPLER, OPTUNA_SAMPLERS, optuna_sampler

GRID = {"batch_size": (256, 512, 1024), "num_neighbors": ((10, 5), (25, 10)),
        "num_workers": (0, 1), "amp_dtype": ("float32", "bfloat16"),
        "checkpointing": (False, True)}
FIXED = {"hidden_channels": 128, "sampling_backend": "builtin"}
TARGET_RATIO = 0.95


def space() -> SearchSpace:
    knobs = {name: Knob(name, values) for name, values in GRID.items()}
    knobs["sampler"] = Knob("sampler", ("builtin",))
    return SearchSpace("efficiency", knobs, {"hidden_channels": FIXED["hidden_channels"]})


def grid_configs() -> list[TrialConfig]:
    names = list(GRID)
    return [TrialConfig(**dict(zip(names, values)), **FIXED)
            for values in itertools.product(*GRID.values())]


def measure_grid(ref: DatasetRef, spec: MeasureSpec, workdir: Path, cache: Path) -> dict:
    """Measures every configuration once; results persist in ``cache`` so an
    interrupted run picks up where it stopped."""
    table = json.loads(cache.read_text()) if cache.exists() else {}
    for i, config in enumerate(grid_configs()):
        key = config.key()
        if key in table:
            continue
        result = run_trial(config, dataset=ref, trial_dir=workdir / f"grid-{i}", measure=spec)
        table[key] = {"config": config.to_dict(), "status": result.status,
                      "reason": result.reason,
                      "values": list(result.objectives()) if result.ok else None}
        cache.write_text(json.dumps(table, indent=1))
        print(f"grid {i + 1}/{len(grid_configs())}: {result.status} "
              f"{table[key]['values']}", flush=True)
    return table


def run_sampler(name: str, seed: int, table: dict, n_trials: int) -> list[Point]:
    study = optuna.create_study(directions=DIRECTIONS, sampler=optuna_sampler(name, seed))
    sp, found = space(), []
    for _ in range(n_trials):
        trial = study.ask()
        config = suggest_config(trial, sp, device="cpu", seed=0)
        row = table[config.key()]
        if row["values"] is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        study.tell(trial, row["values"])
        found.append(Point(trial.number, *row["values"]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--root", default="data")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--precision", type=float, default=0.03)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workdir", default="studies/benchmarks/efficiency")
    parser.add_argument("--out", default="benchmarks/results/search_efficiency.json")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ref = DatasetRef("synthetic", root=args.root, scale=args.scale)
    stats = ref.prepare().stats()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    table = measure_grid(ref, MeasureSpec(warmup_steps=args.warmup, min_steps=args.steps,
                                   precision=args.precision, max_window_s=args.max_seconds),
                         workdir, workdir / f"grid-scale{args.scale:g}.json")
    grid_points = [Point(i, *row["values"]) for i, row in enumerate(table.values())
                   if row["values"] is not None]
    best = max(p.throughput for p in grid_points)
    ref_mem = 1.1 * max(p.memory_mib for p in grid_points)
    grid_hv = hypervolume(grid_points, ref_mem)
    samplers = {}
    for name in OPTUNA_SAMPLERS:
        runs = []
        for seed in range(args.seeds):
            found = run_sampler(name, seed, table, args.trials)
            runs.append({"seed": seed, "best_ratio": max(p.throughput for p in found) / best,
                         "hypervolume_ratio": hypervolume(found, ref_mem) / grid_hv})
        samplers[name] = {"runs": runs,
                          "median_best_ratio": statistics.median(r["best_ratio"] for r in runs),
                          "median_hypervolume_ratio":
                              statistics.median(r["hypervolume_ratio"] for r in runs)}
    default, rand = samplers[DEFAULT_OPTUNA_SAMPLER], samplers["random"]
    report = {
        "benchmark": "search_efficiency", "dataset": stats, "grid_size": len(table),
        "grid_failed": sum(1 for r in table.values() if r["values"] is None),
        "grid_best_seed_nodes_per_s": best, "grid_hypervolume": grid_hv,
        "hypervolume_reference_mib": ref_mem, "trials_per_run": args.trials,
        "seeds": args.seeds, "samplers": samplers, "default_sampler": DEFAULT_OPTUNA_SAMPLER,
        "target_best_ratio": TARGET_RATIO,
        "meets": {"default_reaches_target": default["median_best_ratio"] >= TARGET_RATIO,
                  "default_beats_random":
                      default["median_hypervolume_ratio"] > rand["median_hypervolume_ratio"]
                      and default["median_best_ratio"] >= rand["median_best_ratio"]},
        "env": fingerprint("cpu"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "env"}, indent=2))


if __name__ == "__main__":
    main()
