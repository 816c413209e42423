"""Where a trial's wall time goes: spawn and load, build, warm-up, timed window.

On the full-size synthetic graph (Reddit's 232,965 nodes and mean degree), the
baseline config (PyG's examples/reddit.py, no compile). Targets: spawn and load
under 2 s; everything outside the window at most 30% of the trial's wall time.

    python benchmarks/trial_overhead.py --out benchmarks/results/trial_overhead.json
"""
from __future__ import annotations

import statistics
import time

from _common import baseline, parser, prepare, write

from autotune.measure import MeasureSpec
from autotune.runner import run_trial

SPAWN_LOAD_TARGET_S = 2.0
OUTSIDE_WINDOW_TARGET = 0.30


def main() -> None:
    args = parser(__doc__, "benchmarks/results/trial_overhead.json").parse_args()
    ref, stats, prepare_s = prepare(args)
    config = baseline()
    rows = []
    for i in range(args.trials):
        start = time.perf_counter()
        result = run_trial(config, dataset=ref, trial_dir=f"{args.workdir}/overhead-{i}",
                           measure=MeasureSpec(warmup_steps=args.warmup,
                                               window_steps=args.steps))
        wall = time.perf_counter() - start
        if not result.ok:
            raise SystemExit(f"trial {i} failed: {result.status}: {result.reason}\n"
                             f"{result.stderr_tail}")
        p = result.phases_s
        rows.append({"wall_s": wall, **p, "outside_window_s": wall - p["window"],
                     "outside_window_fraction": (wall - p["window"]) / wall,
                     "seed_nodes_per_s": result.throughput})
    med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    write(args.out, {
        "benchmark": "trial_overhead", "dataset": stats, "prepare_once_s": prepare_s,
        "config": config.to_dict(), "steps": args.steps, "warmup": args.warmup,
        "trials": rows, "median": med,
        "targets": {"spawn_and_load_s": SPAWN_LOAD_TARGET_S,
                    "outside_window_fraction": OUTSIDE_WINDOW_TARGET},
        "meets": {"spawn_and_load": med["spawn_and_load"] < SPAWN_LOAD_TARGET_S,
                  "outside_window": med["outside_window_fraction"] <= OUTSIDE_WINDOW_TARGET},
    })


if __name__ == "__main__":
    main()
