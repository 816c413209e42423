"""What an import in a forked trial costs: optuna's, which every trial made until
``autotune.env.fingerprint`` read its version from the installed metadata.

A trial forked from the fork server shares the server's heap (torch's and PyG's
objects). Importing optuna there (the fingerprint wanted ``optuna.__version__``) ran
full garbage collections in the child over that heap, each object's header written
and its page copied from the server's.
Two servers here, side by side, trials alternating ABBA between them (``--pairs`` of
each, after one trial each that pays the server's imports):

- ``shipped``: as autotune runs its trials;
- ``optuna``: each forked child imports optuna first (``os.register_at_fork`` in a
  ``sitecustomize`` on that server's ``PYTHONPATH``), before its window, as the
  fingerprint did after it: the same import in the same process.

For each trial: its wall time as the search waits for it, the part outside its timed
window, the CPU seconds of the trial's process and its loader workers (the server's
reaped children's time, read before and after), its window's seed nodes a second and
precision. Paired differences (optuna less shipped) with their 95% t-intervals, and
the throughput's ratio with its interval on the log scale.

    python benchmarks/trial_imports.py --scale 0.02 --pairs 8 \
        --out benchmarks/results/trial-imports.json
"""
from __future__ import annotations

import math
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from _common import baseline, measure_spec, parser, prepare, write

from autotune.compare import t_quantile
from autotune.trial import ForkServer, run_trial

WAYS = ("shipped", "optuna")
ORDER = ("shipped", "optuna", "optuna", "shipped")  # ABBA
# the "optuna" way's sitecustomize: in the server, each forked child imports optuna
IMPORTS = ("import os\n"
           "os.register_at_fork(after_in_child=lambda: __import__('optuna'))\n")


def main() -> None:
    p = parser(__doc__, "benchmarks/results/trial-imports.json")
    p.add_argument("--pairs", type=int, default=8, help="trials of each way (after a first)")
    p.set_defaults(scale=0.02, max_seconds=2.0)
    args = p.parse_args()
    ref, data_stats, _ = prepare(args)
    config = baseline()
    site = Path(tempfile.mkdtemp(prefix="trial-imports-site-"))
    (site / "sitecustomize.py").write_text(IMPORTS)
    envs = {"shipped": None, "optuna": {"PYTHONPATH": str(site)}}  # over this one's
    work = Path(args.workdir) / "trial-imports"
    rows: dict[str, list[dict]] = {way: [] for way in WAYS}
    with ForkServer(folder=work / "shipped", compiles=False) as shipped, \
            ForkServer(folder=work / "optuna", compiles=False) as imports:
        servers = {"shipped": shipped, "optuna": imports}
        for way in WAYS:  # each server's imports, not counted
            _trial(args, ref, config, servers[way], envs[way], work / way / "first")
        if str(site) not in psutil.Process(imports.proc.pid).environ().get("PYTHONPATH", ""):
            raise SystemExit("the optuna way's server was not started with its sitecustomize")
        for i in range(args.pairs):
            first = ORDER[i % len(ORDER)]
            for way in (first, WAYS[1 - WAYS.index(first)]):
                rows[way].append(_trial(args, ref, config, servers[way], envs[way],
                                        work / way / f"trial-{len(rows[way])}"))
    report = {"benchmark": "trial_imports", "dataset": data_stats, "scale": args.scale,
              "config": config.to_dict(), "measure": measure_spec(args).to_dict(),
              "pairs": args.pairs, "order": "ABBA", "trials": rows,
              "medians": {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]
                              if k != "trial_start"} for w, rs in rows.items()},
              "optuna_less_shipped": {k: _mean_interval(
                  [o[k] - s[k] for s, o in zip(rows["shipped"], rows["optuna"])])
                  for k in ("wall_s", "outside_window_s", "cpu_s")},
              "throughput_shipped_over_optuna": _ratio_interval(
                  [s["seed_nodes_per_s"] / o["seed_nodes_per_s"]
                   for s, o in zip(rows["shipped"], rows["optuna"])])}
    write(args.out, report)


def _trial(args, ref, config, server, env, folder: Path) -> dict:
    reaped = psutil.Process(server.proc.pid).cpu_times() if server.proc else None
    start = time.perf_counter()
    result = run_trial(config, dataset=ref, trial_dir=folder, measure=measure_spec(args),
                       server=server, env=env)
    wall = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"a trial failed: {result.status}: {result.reason}\n"
                         f"{result.stderr_tail}")
    after = psutil.Process(server.proc.pid).cpu_times()
    cpu = None if reaped is None else (after.children_user + after.children_system
                                       - reaped.children_user - reaped.children_system)
    return {"wall_s": wall, "outside_window_s": wall - result.phases_s["window"],
            "cpu_s": cpu, "window_s": result.phases_s["window"],
            "seed_nodes_per_s": result.throughput, "precision": result.window.precision,
            "trial_start": result.observed.trial_start}


def _mean_interval(diffs: list[float]) -> dict:
    n = len(diffs)
    mean = statistics.fmean(diffs)
    half = t_quantile(0.95, n - 1) * statistics.stdev(diffs) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def _ratio_interval(ratios: list[float]) -> dict:
    logs = _mean_interval([math.log(r) for r in ratios])
    return {"ratio": math.exp(logs["mean"]), "low": math.exp(logs["low"]),
            "high": math.exp(logs["high"]), "n": logs["n"]}


if __name__ == "__main__":
    main()
