"""What a search buys: ``autotune search`` over the whole default space
(search_spaces/default.yaml, read here so no knob is missed) with fanout and batch
size pinned to the baseline's (so the model learns the same thing), for 30 trials on
the Reddit-shaped synthetic graph, ended by its confirmation. The figure is the
fastest confirmed config's paired speed-up over the baseline (the median over the
confirmation's rounds of its ratio to the baseline of the same round), with its
interval. Target on a 2-core CPU: >= 3x; on a GPU: >= 2.5x. Also the search's wall
time and its break-even point: search time divided by the time saved per epoch at
full Reddit scale (153,431 training nodes), in epochs. Target: <= 10 epochs.

    python benchmarks/speedup.py --out benchmarks/results/speedup.json
"""
from __future__ import annotations

import time
from pathlib import Path

from _common import baseline, measure_spec, parser, prepare, timed_search, write, write_space

from autotune.trial._runner import TrialLimits

REDDIT_TRAIN_NODES = 153_431
TARGET_CPU, TARGET_GPU, TARGET_EPOCHS = 3.0, 2.5, 10


def searched_space(base) -> dict:
    """search_spaces/default.yaml with batch size and fanout pinned to the baseline's."""
    import yaml

    from autotune.study._space import resolve_space_path

    space = yaml.safe_load(resolve_space_path("default").read_text())
    space["description"] = ("benchmarks/speedup.py: search_spaces/default.yaml, batch size "
                            "and fanout pinned to the baseline's")
    space["knobs"].update(batch_size=base.batch_size, num_neighbors=list(base.num_neighbors))
    return space


def space_file(base, folder: Path) -> Path:
    return write_space(searched_space(base), folder / "speedup-space.yaml")


def main() -> None:
    p = parser(__doc__, "benchmarks/results/speedup.json")
    p.add_argument("--n-trials", type=int, default=30)
    p.add_argument("--trial-timeout", type=float, default=600.0)
    p.add_argument("--optuna-sampler", default="gp", help="the Optuna sampler (as search's flag)")
    args = p.parse_args()
    ref, stats, _ = prepare(args)
    base = baseline()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    name = f"speedup-{time.strftime('%Y%m%d-%H%M%S')}"
    _, result, wall, stdout = timed_search(
        workdir, name, dataset="synthetic", scale=args.scale, root=args.root,
        space=space_file(base, workdir), n_trials=args.n_trials, optuna_sampler=args.optuna_sampler,
        measure=measure_spec(args),
        limits=TrialLimits(timeout_s=args.trial_timeout))
    best = max((row for row in result.front if row.confirmed),
               key=lambda row: row.speedup, default=None)
    base_t = result.baseline
    if best is None:
        raise SystemExit("the search confirmed no config: see its progress lines above")
    ratio, interval = best.speedup, best.speedup_precision
    epoch_base = REDDIT_TRAIN_NODES / base_t.throughput
    epoch_best = epoch_base / ratio
    saved = epoch_base - epoch_best
    device = base_t.config.device
    target = TARGET_GPU if device == "cuda" else TARGET_CPU
    write(args.out, {
        "benchmark": "speedup", "dataset": stats, "scale": args.scale, "device": device,
        "space": searched_space(base), "n_trials": args.n_trials,
        "trials_in_study": len(result.trials), "measured_trials": result.outcome.measured,
        "repeats": result.outcome.reused, "controls": result.outcome.controls,
        "confirmation_measurements": result.outcome.confirmed,
        "stopped": result.outcome.stopped,
        "failed_trials": sum(t.state == "fail" for t in result.trials),
        "optuna_sampler": args.optuna_sampler, "measure": measure_spec(args).to_dict(),
        "screened_trials": sum(t.screened for t in result.trials),
        "baseline": {"trial": base_t.number, "seed_nodes_per_s": base_t.throughput,
                     "peak_mib": base_t.memory_mib},
        "best": {"trial": best.trial, "seed_nodes_per_s": best.throughput,
                 "peak_mib": best.memory_mib, "config": best.config,
                 "confirmed": best.confirmed, "marks": best.marks},
        "front": [row.to_dict() for row in result.front],
        "speedup": ratio, "speedup_interval": interval, "paired": True,
        "target_speedup": target, "meets_speedup": ratio >= target,
        "search_wall_s": wall,
        "epoch_s_at_reddit_scale": {"baseline": epoch_base, "best": epoch_best},
        "break_even_epochs": wall / saved if saved > 0 else None,
        "target_break_even_epochs": TARGET_EPOCHS,
        "meets_break_even": saved > 0 and wall / saved <= TARGET_EPOCHS,
        "search_stdout_tail": stdout[-4000:],
    })


if __name__ == "__main__":
    main()
