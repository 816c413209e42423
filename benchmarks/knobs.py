"""Each knob alone: one trial per knob value changed from the baseline config (PyG's
examples/reddit.py, workers capped to this machine) on the Reddit-shaped synthetic
graph, with the throughput and peak-memory ratios against the baseline measured in
the same run (the baseline is measured first and last; ratios use their median).

    python benchmarks/knobs.py --out benchmarks/results/knobs.json
"""
from __future__ import annotations

import statistics

from _common import baseline, measure_spec, parser, prepare, write

from autotune.runner import TrialLimits, run_trial
from autotune.sampler import resolve_backend
from autotune.errors import AutotuneError, ConfigError
from autotune.topology import STRATEGIES, affinity_sets, this_machine


def variants(base) -> list[tuple[str, str, dict]]:
    """(knob, value, changes) for every knob value that differs from the baseline."""
    out = [("num_workers", str(w), {"num_workers": w})
           for w in range(0, len(this_machine().cpus) + 1) if w != base.num_workers]
    if base.num_workers:
        out.append(("prefetch_factor", "4", {"prefetch_factor": 4}))
        for strategy in STRATEGIES[1:]:
            if this_machine().why_not(strategy) is None:
                loader, compute = affinity_sets(strategy, base.num_workers, this_machine())
                out.append(("affinity", strategy,
                            {"loader_cores": loader, "compute_cores": compute}))
    out += [("compile_mode", "default", {"compile_mode": "default"}),
            ("compile_mode", "max-autotune-no-cudagraphs",
             {"compile_mode": "max-autotune-no-cudagraphs"}),
            ("shapes", "padded pow2 (compile default)",
             {"compile_mode": "default", "shapes": "padded", "pad_ladder": "pow2"}),
            ("shapes", "padded geometric (compile default)",
             {"compile_mode": "default", "shapes": "padded", "pad_ladder": "geometric"}),
            ("amp_dtype", "bfloat16", {"amp_dtype": "bfloat16"}),
            ("checkpointing", "true", {"checkpointing": True})]
    return out


def main() -> None:
    p = parser(__doc__, "benchmarks/results/knobs.json")
    p.add_argument("--trial-timeout", type=float, default=600.0)
    args = p.parse_args()
    ref, stats, _ = prepare(args)
    base = baseline().replace(sampler="builtin")
    spec = measure_spec(args)
    limits = TrialLimits(timeout_s=args.trial_timeout)
    cache = f"{args.workdir}/knobs-inductor"

    def measure(name: str, config) -> dict:
        result = run_trial(config, dataset=ref, trial_dir=f"{args.workdir}/knobs-{name}",
                           measure=spec, limits=limits, inductor_cache=cache)
        row = {"status": result.status, "reason": result.reason}
        if result.ok:
            throughput, memory = result.objectives()
            row.update(seed_nodes_per_s=throughput, peak_mib=memory,
                       compile_time_s=result.compile.compile_time_s,
                       recompiles=result.compile.recompiles,
                       fell_back_to_eager=result.compile.fell_back_to_eager,
                       observed={k: getattr(result.observed, k) for k in (
                           "main_affinity", "worker_affinity", "torch_threads",
                           "conv_output_dtypes", "checkpointed_layers",
                           "saved_tensor_bytes", "batch_shapes")})
        print(name, row.get("seed_nodes_per_s"), row.get("peak_mib"), row["status"], flush=True)
        return row

    first = measure("baseline-first", base)
    rows, skipped = [], []
    for i, (knob, value, changes) in enumerate(variants(base)):
        try:
            config = base.replace(**changes)
        except ConfigError as exc:
            skipped.append({"knob": knob, "value": value, "why": str(exc)})
            continue
        rows.append({"knob": knob, "value": value, **measure(f"{i}", config)})
    try:
        resolve_backend("pyg")
        rows.append({"knob": "sampler", "value": "pyg",
                     **measure("pyg", base.replace(sampler="pyg"))})
    except AutotuneError as exc:  # BackendUnavailableError: neither pyg-lib nor torch-sparse
        skipped.append({"knob": "sampler", "value": "pyg", "why": str(exc)})
    last = measure("baseline-last", base)
    if not (first["status"] == last["status"] == "ok"):
        raise SystemExit(f"the baseline failed: {first} {last}")
    base_tp = statistics.median([first["seed_nodes_per_s"], last["seed_nodes_per_s"]])
    base_mem = statistics.median([first["peak_mib"], last["peak_mib"]])
    for row in rows:
        if row["status"] == "ok":
            row["throughput_ratio"] = row["seed_nodes_per_s"] / base_tp
            row["memory_ratio"] = row["peak_mib"] / base_mem
    write(args.out, {
        "benchmark": "knobs", "dataset": stats, "scale": args.scale,
        "baseline": base.to_dict(), "steps": args.steps, "warmup": args.warmup,
        "baseline_runs": [first, last], "baseline_seed_nodes_per_s": base_tp,
        "baseline_peak_mib": base_mem, "rows": rows, "skipped": skipped,
    })


if __name__ == "__main__":
    main()
