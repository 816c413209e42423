"""Run-to-run noise, whether forking trials biases it, and what pairing buys.

1. The baseline measured 3 times forked from a fork server (as a search runs its
   trials) and 3 times in fresh interpreters (as ``autotune trial`` does),
   interleaved, at the window's default precision, on the synthetic graph. Reported:
   every forked repeat's deviation from their median (no target: machine drift), and
   whether the forked median is within the two arms' combined precision of the fresh
   one (no fork bias).
2. A whole confirmation (the baseline and two faster configs, 3 interleaved rounds
   and the closing baseline, as a search ends) repeated 3 times, ``--gap`` seconds
   apart. Target: each config's paired speed-up within +-5% of its median over the
   repeats; the absolute throughputs' spread is reported beside it, with no target.

    python benchmarks/noise.py --scale 0.1 --out benchmarks/results/noise.json
"""
from __future__ import annotations

import statistics
from pathlib import Path

import time

from _common import baseline, measure_spec, parser, prepare, rounds, spread_from_median, write

from autotune.trial._runner import ForkServer, run_trial

PAIRED_TARGET = 0.05


def candidates(config):
    """The baseline and two configs a CPU search finds faster (no loader workers;
    bfloat16 with the sparse aggregation, the best of speedup.py; float32)."""
    return {"baseline": config,
            "w0-bf16-sparse": config.replace(num_workers=0, amp_dtype="bfloat16",
                                             aggregation="sparse"),
            "w0-f32": config.replace(num_workers=0)}


def repeated_confirmations(config, ref, args, server) -> dict:
    """The paired part: ``args.repeats`` confirmations, ``args.gap`` s apart."""
    runs = []
    for i in range(args.repeats):
        if i:
            time.sleep(args.gap)
        _, figures = rounds(candidates(config), ref, args, server, 3, f"noise-confirm-{i}",
                            lambda name, r: print(f"confirmation {i}: {name} "
                                                  f"{r.throughput or 0:,.0f}/s", flush=True))
        runs.append({name: c.to_dict() for name, c in figures.items() if c is not None})
    out = {}
    for name in candidates(config):
        speedups = [r[name]["speedup"] for r in runs if name in r]
        rates = [r[name]["throughput"] for r in runs if name in r]
        out[name] = {"paired_speedups": speedups, "throughputs": rates,
                     "paired_spread": spread_from_median(speedups),
                     "throughput_spread": spread_from_median(rates),
                     "intervals": [r[name]["interval"] for r in runs if name in r]}
    worst = max(v["paired_spread"] for k, v in out.items() if k != "baseline")
    return {"repeats": args.repeats, "gap_s": args.gap, "runs": runs, "configs": out,
            "max_paired_spread": worst, "target_paired_spread": PAIRED_TARGET,
            "meets_paired": worst <= PAIRED_TARGET}


def main() -> None:
    p = parser(__doc__, "benchmarks/results/noise.json")
    p.add_argument("--repeats", type=int, default=3, help="whole confirmations")
    p.add_argument("--gap", type=float, default=60.0, help="seconds between confirmations")
    args = p.parse_args()
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
        paired = repeated_confirmations(config, ref, args, server)
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
        "no_fork_bias": abs(bias - 1) <= tolerance, "paired": paired,
        "meets": paired["meets_paired"],
    })


if __name__ == "__main__":
    main()
