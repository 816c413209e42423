"""What a graph-level search buys: ``autotune search --task graph`` on
``synthetic-molecules`` with the shipped default space (its fanout and sampler knobs
leave themselves out), batch size pinned to the baseline's so the model learns the
same thing. The best throughput found (graphs/s) over the baseline's, trial 0 of the
same study, with the ratio's 95% half-width from the two windows' precisions.

    python benchmarks/graph_search.py --scale 0.1 --n-trials 12 \\
        --out benchmarks/results/graph-search.json
"""
from __future__ import annotations

import time
from pathlib import Path

import yaml

from _common import baseline, measure_spec, parser, prepare, timed_search, write, write_space

from autotune.trial._result import ratio_half_width
from autotune.trial._runner import TrialLimits
from autotune.study._space import resolve_space_path
from autotune.study._records import records


def space_file(base, folder: Path) -> Path:
    """search_spaces/default.yaml with batch_size pinned to the baseline's."""
    space = yaml.safe_load(resolve_space_path("default").read_text())
    space["knobs"]["batch_size"] = base.batch_size
    space["description"] = "benchmarks/graph_search.py: the default space, batch size pinned"
    return write_space(space, folder / "graph-search-space.yaml")


def main() -> None:
    p = parser(__doc__, "benchmarks/results/graph-search.json")
    p.add_argument("--n-trials", type=int, default=12)
    p.add_argument("--trial-timeout", type=float, default=600.0)
    args = p.parse_args()
    _, stats, _ = prepare(args, "synthetic-molecules", "graph")
    base = baseline()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    name = f"graph-search-{time.strftime('%Y%m%d-%H%M%S')}"
    space = space_file(base, workdir)
    study, _, wall, stdout = timed_search(
        workdir, name, dataset="synthetic-molecules", task="graph", scale=args.scale,
        root=args.root, space=space, n_trials=args.n_trials, measure=measure_spec(args),
        limits=TrialLimits(timeout_s=args.trial_timeout))
    trials = records(study)
    done = [t for t in trials if t.complete and t.reused_from is None]
    base_trial = next(t for t in done if t.baseline)
    best = max((t for t in done if not t.screened), key=lambda t: t.throughput)
    precision = {t.number: t.precision for t in (base_trial, best)}
    write(args.out, {
        "benchmark": "graph_search", "dataset": stats, "scale": args.scale,
        "device": base_trial.config.device, "space": yaml.safe_load(
            space.read_text()), "n_trials": len(study.trials), "measured_trials": len(done),
        "failed_trials": sum(t.state == "fail" for t in trials),
        "measure": measure_spec(args).to_dict(),
        "baseline": {"trial": base_trial.number, "graphs_per_s": base_trial.values[0],
                     "peak_mib": base_trial.values[1]},
        "best": {"trial": best.number, "graphs_per_s": best.values[0],
                 "peak_mib": best.values[1], "config": best.config.to_dict()},
        "speedup": best.values[0] / base_trial.values[0],
        "precision": {"baseline": precision[base_trial.number],
                      "best": precision[best.number],
                      "speedup": ratio_half_width(precision[base_trial.number],
                                                  precision[best.number])},
        "search_wall_s": wall, "search_stdout_tail": stdout[-3000:],
    })


if __name__ == "__main__":
    main()
