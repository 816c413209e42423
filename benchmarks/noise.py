"""Run-to-run noise: the baseline measured 3 times (each a forked trial, as in a
search) at the window's default precision, on the synthetic graph. Target: every
repeat within +-5% of their median.

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
    throughputs, precisions, stopped, step_cvs = [], [], [], []
    with ForkServer(folder=Path(args.workdir) / "noise") as server:
        for i in range(args.trials):
            result = run_trial(config, dataset=ref, trial_dir=f"{args.workdir}/noise-{i}",
                               measure=measure_spec(args), server=server)
            if not result.ok:
                raise SystemExit(f"trial {i} failed: {result.status}: {result.reason}")
            throughputs.append(result.throughput)
            precisions.append(result.window.precision)
            stopped.append(result.window.stopped)
            step_cvs.append(result.summary()["step_cv"])
    median = statistics.median(throughputs)
    spread = max(abs(t / median - 1) for t in throughputs)
    write(args.out, {
        "benchmark": "noise", "dataset": stats, "scale": args.scale, "config": config.to_dict(),
        "measure": measure_spec(args).to_dict(),
        "seed_nodes_per_s": throughputs, "median_seed_nodes_per_s": median,
        "precision_reached": precisions, "stopped": stopped,
        "max_deviation_from_median": spread,
        "throughput_cv": statistics.pstdev(throughputs) / statistics.fmean(throughputs),
        "within_trial_step_cv": step_cvs,
        "target_max_deviation": SPREAD_TARGET, "meets": spread <= SPREAD_TARGET,
    })


if __name__ == "__main__":
    main()
