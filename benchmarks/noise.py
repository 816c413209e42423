"""Run-to-run noise, and whether forking trials biases them: the baseline measured 3
times forked from a fork server (as a search runs its trials) and 3 times in fresh
interpreters (as ``autotune trial`` does), interleaved, at the window's default
precision, on the synthetic graph. Targets: every forked repeat within +-5% of their
median; the forked median within the two arms' combined precision of the fresh one.

    python benchmarks/noise.py --scale 0.1 --out benchmarks/results/noise.json
"""
from __future__ import annotations

import statistics
from pathlib import Path

from _common import baseline, measure_spec, parser, prepare, write

from autotune.runner import ForkServer, run_trial

SPREAD_TARGET = 0.05


def main() -> None:
    args = parser(__doc__, "benchmarks/results/noise.json").parse_args()
    ref, stats, _ = prepare(args)
    config = baseline()
    arms: dict[str, list[dict]] = {"forked": [], "fresh": []}
    with ForkServer(folder=Path(args.workdir) / "noise") as server:
        for i in range(args.trials):
            for arm, start in (("forked", server), ("fresh", None)):
                result = run_trial(config, dataset=ref, trial_dir=f"{args.workdir}/noise-{arm}-{i}",
                                   measure=measure_spec(args), server=start)
                if not result.ok:
                    raise SystemExit(f"{arm} trial {i} failed: {result.status}: {result.reason}")
                arms[arm].append({"seed_nodes_per_s": result.throughput,
                                  "precision": result.window.precision,
                                  "stopped": result.window.stopped,
                                  "trial_start": result.observed.trial_start,
                                  "step_cv": result.summary()["step_cv"]})
    figures = {arm: [r["seed_nodes_per_s"] for r in rows] for arm, rows in arms.items()}
    median = {arm: statistics.median(v) for arm, v in figures.items()}
    spread = max(abs(t / median["forked"] - 1) for t in figures["forked"])
    bias = median["forked"] / median["fresh"]
    tolerance = (statistics.median(r["precision"] for r in arms["forked"]) ** 2 +
                 statistics.median(r["precision"] for r in arms["fresh"]) ** 2) ** 0.5
    write(args.out, {
        "benchmark": "noise", "dataset": stats, "scale": args.scale, "config": config.to_dict(),
        "measure": measure_spec(args).to_dict(), "trials": arms,
        "seed_nodes_per_s": figures["forked"], "median_seed_nodes_per_s": median["forked"],
        "precision_reached": [r["precision"] for r in arms["forked"]],
        "max_deviation_from_median": spread,
        "throughput_cv": statistics.pstdev(figures["forked"]) / statistics.fmean(figures["forked"]),
        "fresh_median_seed_nodes_per_s": median["fresh"],
        "forked_over_fresh": bias, "forked_over_fresh_tolerance": tolerance,
        "target_max_deviation": SPREAD_TARGET, "meets": spread <= SPREAD_TARGET,
        "no_fork_bias": abs(bias - 1) <= tolerance,
    })


if __name__ == "__main__":
    main()
