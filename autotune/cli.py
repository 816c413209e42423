"""The ``autotune`` command. Each subcommand parses its flags, calls one library
function and renders the result. torch and PyG are imported only inside commands,
so ``autotune --help`` stays fast."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from autotune.errors import AutotuneError, ConfigError

EXIT_BAD_INPUT = 2
EXIT_TRIAL_FAILED = 1
DEFAULT_STUDIES = "studies"

TRIAL_EXAMPLE = """example:
  autotune trial --dataset synthetic --scale 0.05 --config cfg.yaml --format json
  autotune trial --dataset Cora --root ../shared/data/planetoid --steps 30

Without --config, the trial measures PyG's examples/reddit.py setup: fanout [25, 10],
batch 1024, 2-layer SAGE with 256 hidden units, no compile, float32."""


class _Parser(argparse.ArgumentParser):
    """Reports a bad flag as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"autotune: error: {message} (see '{self.prog} --help')\n")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number (got {text!r})")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number (got {text!r})")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer (got {text!r})")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer (got {text!r})")
    return value


def _add_dataset_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="synthetic",
                   help="Reddit, Reddit2, Flickr, Yelp, Cora, CiteSeer, PubMed, ogbn-products, "
                        "ogbn-arxiv, synthetic, or a path to a .pt Data file "
                        "(default: synthetic)")
    p.add_argument("--root", default=None,
                   help="folder datasets live in (default: $AUTOTUNE_DATA_ROOT or ./data)")
    p.add_argument("--scale", type=_positive_float, default=1.0,
                   help="size of the synthetic graph relative to Reddit (default: 1.0)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic graph")


def _add_measure_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=_positive_int, default=20,
                   help="timed steps per trial (default: 20)")
    p.add_argument("--warmup", type=_positive_int, default=5,
                   help="warm-up steps at least (compiled modes go on until no recompile "
                        "for 3 steps; default: 5)")
    p.add_argument("--max-seconds", type=_positive_float, default=120.0,
                   help="end the timed window after this many seconds (default: 120)")
    p.add_argument("--timeout", type=_positive_float, default=900.0,
                   help="kill a trial after this many seconds (default: 900)")
    p.add_argument("--memory-limit", default=None,
                   help="kill a trial whose process tree's RSS passes this, e.g. 8GiB")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autotune", description="Pareto autotuner for PyTorch Geometric "
                     "training pipelines.")
    parser.add_argument("--version", action="version",
                        version=f"autotune {__import__('autotune').__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    trial = sub.add_parser("trial", help="measure one configuration in its own process",
                           description="Measure one pipeline configuration: throughput, "
                           "peak memory, compile time and recompiles.", epilog=TRIAL_EXAMPLE,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_dataset_flags(trial)
    trial.add_argument("--config", default=None,
                       help="a YAML/JSON TrialConfig, or a file written by 'autotune export'")
    trial.add_argument("--device", choices=["cpu", "cuda"], default=None,
                       help="overrides the config's device")
    _add_measure_flags(trial)
    trial.add_argument("--studies-dir", default=DEFAULT_STUDIES,
                       help="the trial's logs go to STUDIES_DIR/trials/ (default: studies)")
    trial.add_argument("--format", choices=["table", "json"], default="table")
    trial.set_defaults(func=cmd_trial)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except AutotuneError as exc:
        if args.debug:
            raise
        print(f"autotune: error: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return 130


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _writable_dir(path: Path, option: str) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} '{path}' cannot be created: {exc.strerror}") from exc
    if not os.access(path, os.W_OK):
        raise ConfigError(f"{option} '{path}' is not writable; pass another folder")
    return path


def cmd_trial(args: argparse.Namespace) -> int:
    from autotune.config import TrialConfig, load_config
    from autotune.datasets import DatasetRef, root_default
    from autotune.env import parse_bytes
    from autotune.measure import MeasureSpec
    from autotune.pipeline import check_config
    from autotune.runner import TrialLimits, run_trial

    config = load_config(args.config) if args.config else default_config()
    if args.device:
        config = config.replace(device=args.device)
    check_config(config)
    limits = TrialLimits(timeout_s=args.timeout, memory_limit_bytes=None if args.memory_limit
                         is None else parse_bytes(args.memory_limit, option="--memory-limit"))
    measure = MeasureSpec(warmup_steps=args.warmup, window_steps=args.steps,
                          max_window_s=args.max_seconds)
    trial_dir = _writable_dir(Path(args.studies_dir) / "trials", "--studies-dir") / \
        time.strftime(f"%Y%m%d-%H%M%S-{os.getpid()}")
    ref = DatasetRef(args.dataset, root=args.root or root_default(), scale=args.scale,
                     seed=args.data_seed)
    ref.prepare()
    result = run_trial(config, dataset=ref, trial_dir=trial_dir, measure=measure,
                       limits=limits, inductor_cache=Path(args.studies_dir) / ".cache" / "inductor")
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(render_result(result, trial_dir))
    return 0 if result.ok else EXIT_TRIAL_FAILED


def default_config(device: str | None = None):
    """PyG's examples/reddit.py setup, its 6 loader workers capped to this machine."""
    import torch

    from autotune.config import TrialConfig

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return TrialConfig(num_workers=min(6, len(os.sched_getaffinity(0))), device=device)


def render_result(result, trial_dir: Path) -> str:
    from autotune.env import format_bytes

    cfg = result.config
    lines = [f"trial  {result.status}" + (f": {result.reason}" if result.reason else ""),
             f"config batch {cfg['batch_size']}, fanout {cfg['num_neighbors']}, "
             f"workers {cfg['num_workers']}, compile {cfg['compile_mode']}, "
             f"shapes {cfg['shapes']}, amp {cfg['amp_dtype']}, "
             f"checkpointing {cfg['checkpointing']}, sampler {cfg['sampler']}, "
             f"device {cfg['device']}"]
    if result.ok:
        s, m, c, p = result.summary(), result.memory, result.compile, result.phases_s
        lines += [
            f"throughput      {s['seed_nodes_per_s']:,.0f} seed nodes/s  "
            f"({s['sampled_nodes_per_s']:,.0f} sampled nodes/s, "
            f"{s['sampled_edges_per_s']:,.0f} edges/s)",
            f"step time       p50 {s['step_p50_ms']:.1f} ms   p90 {s['step_p90_ms']:.1f} ms   "
            f"CV {100 * s['step_cv']:.1f}%   over {s['steps']} steps "
            f"({s['window_s']:.2f} s window)",
            f"peak RSS        window {format_bytes(m['peak_rss_window_bytes'])}   warm-up "
            f"{format_bytes(m['peak_rss_warmup_bytes'])}   ({m['rss_covers']})",
        ]
        if "cuda_max_allocated_bytes" in m:
            lines.append(f"peak CUDA       allocated {format_bytes(m['cuda_max_allocated_bytes'])}"
                         f"   reserved {format_bytes(m['cuda_max_reserved_bytes'])}")
        lines += [
            f"warm-up         {len(result.warmup_step_times_s)} steps, {p['warmup']:.2f} s; "
            f"compile {c['compile_time_s']:.1f} s, {c['recompiles']} recompiles, "
            f"{c['graph_breaks']} graph breaks",
            f"start-up        spawn and load {p['spawn_and_load']:.2f} s (imports "
            f"{p['imports']:.2f} s, dataset {p['dataset_load']:.2f} s), build {p['build']:.2f} s",
            f"observed        sampler {result.observed['sampler_backend']}, "
            f"threads {result.observed['torch_threads']}, "
            f"conv dtype {','.join(result.observed['conv_output_dtypes'])}, "
            f"checkpointed layers {result.observed['checkpointed_layers']}",
        ]
        lines += [f"warning         {w}" for w in result.warnings]
    elif result.stderr_tail:
        lines.append("stderr tail:\n" + result.stderr_tail.rstrip()[-1500:])
    lines.append(f"logs            {trial_dir}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
