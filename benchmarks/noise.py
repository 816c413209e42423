"""Run-to-run noise: the coefficient of variation of throughput over repeated trials
of one config (the baseline, on the full-size synthetic graph). Target: CV <= 5%.

    python benchmarks/noise.py --out benchmarks/results/noise.json
"""
from __future__ import annotations

import statistics

from _common import baseline, parser, prepare, write

from autotune.measure import MeasureSpec
from autotune.runner import run_trial

CV_TARGET = 0.05


def main() -> None:
    args = parser(__doc__, "benchmarks/results/noise.json").parse_args()
    ref, stats, _ = prepare(args)
    config = baseline()
    throughputs, step_cvs = [], []
    for i in range(args.trials):
        result = run_trial(config, dataset=ref, trial_dir=f"{args.workdir}/noise-{i}",
                           measure=MeasureSpec(warmup_steps=args.warmup,
                                               window_steps=args.steps))
        if not result.ok:
            raise SystemExit(f"trial {i} failed: {result.status}: {result.reason}")
        throughputs.append(result.throughput)
        step_cvs.append(result.summary()["step_cv"])
    cv = statistics.pstdev(throughputs) / statistics.fmean(throughputs)
    write(args.out, {
        "benchmark": "noise", "dataset": stats, "config": config.to_dict(),
        "steps": args.steps, "warmup": args.warmup,
        "seed_nodes_per_s": throughputs, "median_seed_nodes_per_s": statistics.median(throughputs),
        "throughput_cv": cv, "within_trial_step_cv": step_cvs,
        "target_cv": CV_TARGET, "meets": cv <= CV_TARGET,
    })


if __name__ == "__main__":
    main()
