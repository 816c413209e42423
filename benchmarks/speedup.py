"""What a search buys: ``autotune search`` with fanout and batch size pinned to the
baseline's (so the model learns the same thing), for 30 trials on the Reddit-shaped
synthetic graph. The best throughput found divided by the baseline's (trial 0 of the
same study, measured in the same run). Target on a 2-core CPU: >= 1.8x; on a GPU:
>= 2.5x. Also the search's wall time and its break-even point: search time divided
by the time saved per epoch at full Reddit scale (153,431 training nodes), in epochs.
Target: <= 10 epochs.

    python benchmarks/speedup.py --out benchmarks/results/speedup.json
"""
from __future__ import annotations

import time
from pathlib import Path

from _common import baseline, measure_spec, parser, prepare, timed_search, write, write_space

from autotune.result import ratio_half_width
from autotune.runner import TrialLimits

REDDIT_TRAIN_NODES = 153_431
TARGET_CPU, TARGET_GPU, TARGET_EPOCHS = 1.8, 2.5, 10


def space_file(base, folder: Path) -> Path:
    """The default space with batch size and fanout pinned to the baseline's."""
    space = {
        "description": "benchmarks/speedup.py: every knob but batch size and fanout",
        "knobs": {
            "batch_size": base.batch_size, "num_neighbors": list(base.num_neighbors),
            "num_workers": {"low": 0, "high": "cores"}, "prefetch_factor": {"choices": [2, 4]},
            "affinity": {"choices": ["none", "split", "compact",
                                     "loader-on-numa0/compute-on-numa1"]},
            "compile_mode": {"choices": ["none", "default", "max-autotune-no-cudagraphs"]},
            "shapes": {"choices": ["dynamic", "padded"]},
            "pad_ladder": {"choices": ["pow2", "geometric"]},
            "amp_dtype": {"choices": ["float32", "bfloat16", "float16"]},
            "checkpointing": {"choices": [False, True]},
            "sampler": "builtin", "gpu_sampling": {"choices": [False, True]},
        },
    }
    return write_space(space, folder / "speedup-space.yaml")


def main() -> None:
    p = parser(__doc__, "benchmarks/results/speedup.json")
    p.add_argument("--n-trials", type=int, default=30)
    p.add_argument("--trial-timeout", type=float, default=600.0)
    p.add_argument("--sampler", default="gp")
    args = p.parse_args()
    ref, stats, _ = prepare(args)
    base = baseline()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    name = f"speedup-{time.strftime('%Y%m%d-%H%M%S')}"
    study, _, wall, stdout = timed_search(
        workdir, name, dataset="synthetic", scale=args.scale, root=args.root,
        space=space_file(base, workdir), n_trials=args.n_trials, sampler=args.sampler,
        measure=measure_spec(args),
        limits=TrialLimits(timeout_s=args.trial_timeout))
    done = [t for t in study.trials if t.state.name == "COMPLETE"
            and "reused_from" not in t.user_attrs]
    base_trial = next(t for t in done if t.user_attrs.get("baseline"))
    compiled_ok = [t for t in done if not t.user_attrs["compile"].get("fell_back_to_eager")
                   and t.user_attrs.get("window", {}).get("stopped") != "screened"]
    best = max(compiled_ok, key=lambda t: t.values[0])
    ratio = best.values[0] / base_trial.values[0]
    precision = {t.number: t.user_attrs.get("window", {}).get("precision")
                 for t in (base_trial, best)}
    epoch_base = REDDIT_TRAIN_NODES / base_trial.values[0]
    epoch_best = REDDIT_TRAIN_NODES / best.values[0]
    saved = epoch_base - epoch_best
    device = base_trial.user_attrs["config"]["device"]
    target = TARGET_GPU if device == "cuda" else TARGET_CPU
    write(args.out, {
        "benchmark": "speedup", "dataset": stats, "scale": args.scale, "device": device,
        "n_trials": len(study.trials), "measured_trials": len(done),
        "failed_trials": sum(t.state.name == "FAIL" for t in study.trials),
        "sampler": args.sampler, "measure": measure_spec(args).to_dict(),
        "screened_trials": sum(t.user_attrs.get("window", {}).get("stopped") == "screened"
                               for t in done),
        "baseline": {"trial": base_trial.number, "seed_nodes_per_s": base_trial.values[0],
                     "peak_mib": base_trial.values[1]},
        "best": {"trial": best.number, "seed_nodes_per_s": best.values[0],
                 "peak_mib": best.values[1], "config": best.user_attrs["config"]},
        "speedup": ratio, "target_speedup": target, "meets_speedup": ratio >= target,
        "precision": {"baseline": precision[base_trial.number], "best": precision[best.number],
                      "speedup": ratio_half_width(precision[base_trial.number],
                                                  precision[best.number])},
        "search_wall_s": wall,
        "epoch_s_at_reddit_scale": {"baseline": epoch_base, "best": epoch_best},
        "break_even_epochs": wall / saved if saved > 0 else None,
        "target_break_even_epochs": TARGET_EPOCHS,
        "meets_break_even": saved > 0 and wall / saved <= TARGET_EPOCHS,
        "search_stdout_tail": stdout[-3000:],
    })


if __name__ == "__main__":
    main()
