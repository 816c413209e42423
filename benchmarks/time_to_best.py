"""Time to a near-best config, scored against an independent reference grid.

The reference: every combination of the knobs that matter on the device, with batch
size and fanout pinned to the baseline's (on CPU: amp_dtype x aggregation x
num_workers in {0, 1, cores-1, cores} x checkpointing x dropout_masks; 48 configs on
2 cores; on CUDA: gpu_sampling x amp_dtype x aggregation x compile_mode none and
default, sparse eager only; 12 configs),
measured in this run, interleaved in rounds with the baseline (as a confirmation
is), to the search's precision. Its best paired speed-up over the baseline is the
best-known figure.

The search: speedup.py's space (search_spaces/default.yaml, batch size and fanout
pinned), run as a user would (``autotune.search`` with its defaults: racing, the
prior table, controls, the confirmation) under ``--budget``. Its running best is
the best speed-up paired with a control so far, over wall time from its start; the
figure is when it first reaches 90% of the grid's best, and counts only if the
search's confirmed best also reaches it. Targets: <= 10 min on a 2-core CPU at
scale 0.1; on a GPU at scale 1.0, <= 5 min and a confirmed speed-up of at least 15x.

    python benchmarks/time_to_best.py --scale 0.1 --out benchmarks/results/time_to_best.json
    python benchmarks/time_to_best.py --scale 1 --budget 20m \\
        --out benchmarks/results/time_to_best-cuda.json   # where CUDA is, it is used
"""
from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

from _common import baseline, measure_spec, parser, prepare, rounds, timed_search, write
from speedup import space_file

from autotune.trial._runner import ForkServer, TrialLimits

TARGET_S, NEAR = {"cpu": 600.0, "cuda": 300.0}, 0.90
TARGET_SPEEDUP = {"cuda": 15.0}  # the search's confirmed best over the baseline


def grid(base) -> dict:
    """The reference grid, the baseline first (it is also one of the grid's points)."""
    if base.device == "cuda":
        return cuda_grid(base)
    cores = len(os.sched_getaffinity(0))
    workers = sorted({0, 1, max(cores - 1, 0), cores})
    configs = {"baseline": base}
    for amp, agg, w, ck, masks in itertools.product(
            ("float32", "bfloat16"), ("scatter", "sparse"), workers, (False, True),
            ("bernoulli", "bits")):
        name = f"{amp}-{agg}-w{w}-ck{int(ck)}-{masks}"
        config = base.replace(amp_dtype=amp, aggregation=agg, num_workers=w, checkpointing=ck,
                              dropout_masks=masks)
        if config.key() != base.key():
            configs[name] = config
    return configs


def cuda_grid(base) -> dict:
    """On CUDA: CPU sampling (the baseline's workers) or GPU-resident sampling, in
    float32 or bfloat16, scatter or sparse aggregation, eager or compiled (a sparse
    product breaks the compiled graph: eager only)."""
    configs = {"baseline": base}
    for gpu, amp, agg, mode in itertools.product(
            (False, True), ("float32", "bfloat16"), ("scatter", "sparse"), ("none", "default")):
        if agg == "sparse" and mode != "none":
            continue
        name = f"{'gpu' if gpu else 'cpu'}-{amp}-{agg}-{mode}"
        resident = {"gpu_sampling": True, "num_workers": 0, "sampling_backend": "builtin",
                    "loader_cores": None, "compute_cores": None} if gpu else {}
        config = base.replace(amp_dtype=amp, aggregation=agg, compile_mode=mode, **resident)
        if config.key() != base.key():
            configs[name] = config
    return configs


def measure_grid(configs: dict, ref, args, workdir: Path) -> dict:
    """The grid measured in rounds with the baseline; its figures, best first."""
    started, at = time.perf_counter(), time.time()
    with ForkServer(folder=workdir / "time-to-best-grid") as server:
        measured, figures = rounds(configs, ref, args, server, args.grid_rounds, "grid",
                                   lambda name, r: print(f"grid {name}: "
                                                         f"{r.throughput or 0:,.0f}/s",
                                                         flush=True))
    ranked = sorted(((n, c) for n, c in figures.items() if c is not None),
                    key=lambda nc: -nc[1].speedup)
    return {"configs": len(configs), "rounds": args.grid_rounds, "measured_at": at,
            "wall_s": time.perf_counter() - started,
            "failed": [r.config.to_dict() for r in measured if r.state != "complete"],
            "best": ranked[0][0], "best_speedup": ranked[0][1].speedup,
            "best_interval": ranked[0][1].interval,
            "figures": {n: c.to_dict() for n, c in ranked},
            "config_of": {n: c.to_dict() for n, c in configs.items()}}


def running_best(trials, started_at: float) -> list[dict]:
    """The search's best paired speed-up as each trial ended (screened trials,
    repeats, controls and the confirmation's measurements add nothing)."""
    rows, best = [], 0.0
    base = next((t for t in trials if t.baseline), None)
    for t in sorted(trials, key=lambda t: t.measured_at[1] if t.measured_at else 0):
        if not t.complete or t.screened or t.reused_from is not None or not t.measured_at \
                or not t.search_point:
            continue
        speedup, interval = t.paired_speedup(base)
        best = max(best, speedup or 0.0)
        rows.append({"trial": t.number, "at_s": t.measured_at[1] - started_at,
                     "seed_nodes_per_s": t.throughput, "precision": t.precision,
                     "paired_speedup": speedup, "interval": interval, "running_best": best,
                     "prior": t.prior, "config": t.config.to_dict()})
    return rows


def main() -> None:
    p = parser(__doc__, "benchmarks/results/time_to_best.json")
    p.add_argument("--n-trials", type=int, default=30)
    p.add_argument("--budget", default="15m", help="the search's --budget")
    p.add_argument("--grid-rounds", type=int, default=2)
    p.add_argument("--grid-from", default=None,
                   help="a time_to_best.json whose grid to score against instead of measuring "
                        "one (its paired speed-ups hold across the time between; said so in "
                        "the output)")
    p.add_argument("--trial-timeout", type=float, default=600.0)
    args = p.parse_args()
    ref, stats, _ = prepare(args)
    base = baseline()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    configs = grid(base)
    reference = measure_grid(configs, ref, args, workdir) if args.grid_from is None else \
        {**json.loads(Path(args.grid_from).read_text())["grid"], "from": args.grid_from}
    best_speedup = reference["best_speedup"]
    name = f"time-to-best-{time.strftime('%Y%m%d-%H%M%S')}"
    started_at = time.time()
    _, result, wall, lines = timed_search(
        workdir, name, dataset="synthetic", scale=args.scale, root=args.root,
        space=space_file(base, workdir), n_trials=args.n_trials, budget=args.budget,
        measure=measure_spec(args), limits=TrialLimits(timeout_s=args.trial_timeout))
    curve = running_best(result.trials, started_at)
    goal = NEAR * best_speedup
    reached = next((r for r in curve if r["running_best"] >= goal), None)
    confirmed_best = max((row for row in result.front if row.confirmed),
                         key=lambda row: row.speedup, default=None)
    confirmed_ok = confirmed_best is not None and confirmed_best.speedup >= goal
    target_s, target_speedup = TARGET_S[base.device], TARGET_SPEEDUP.get(base.device)
    speedup_ok = target_speedup is None or (confirmed_best is not None
                                            and confirmed_best.speedup >= target_speedup)
    write(args.out, {
        "benchmark": "time_to_best", "dataset": stats, "scale": args.scale,
        "device": base.device, "measure": measure_spec(args).to_dict(),
        "grid": reference,
        "n_trials": args.n_trials, "budget": args.budget, "search_started_at": started_at,
        "search_wall_s": wall,
        "trials": len(result.trials), "measured": result.outcome.measured,
        "controls": result.outcome.controls, "confirmation": result.outcome.confirmed,
        "screened": sum(t.screened for t in result.trials),
        "goal_speedup": goal,
        "time_to_90pct_s": reached["at_s"] if reached else None,
        "reached_by_trial": reached["trial"] if reached else None,
        "search_confirmed_best": None if confirmed_best is None else {
            "trial": confirmed_best.trial, "speedup": confirmed_best.speedup,
            "interval": confirmed_best.speedup_precision, "config": confirmed_best.config},
        "confirmed_reaches_goal": confirmed_ok, "target_s": target_s,
        "target_confirmed_speedup": target_speedup,
        "meets": reached is not None and reached["at_s"] <= target_s and confirmed_ok
        and speedup_ok,
        "running_best": curve, "progress_lines": lines.splitlines(),
    })


if __name__ == "__main__":
    main()
