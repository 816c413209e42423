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

SEARCH_EXAMPLE = """examples:
  autotune search --dataset synthetic --scale 0.02 --space quick --n-trials 8
  autotune search --dataset Reddit --root data --max-memory 8GiB --n-trials 40
  autotune search --dataset Reddit --space reddit --model gat --layers 3 --n-trials 40

Running the same command again resumes the study: finished trials are kept, an
interrupted one is marked failed, and --n-trials counts the study's total."""

SHOW_EXAMPLE = """example:
  autotune show --study-name synthetic-cpu-myhost
  autotune show --study-name synthetic-cpu-myhost --format yaml"""

EXPORT_EXAMPLE = """examples:
  autotune export --study-name synthetic-cpu-myhost --pick knee --out best.yaml
  autotune export --study-name synthetic-cpu-myhost --pick trial:3 --out t3.json

The file holds the full TrialConfig, the measured figures, the environment and the
command that reproduces the measurement; 'autotune trial --config FILE' and
autotune.load_config(FILE) read it back."""

DASHBOARD_EXAMPLE = """examples:
  autotune dashboard --study-name synthetic-cpu-myhost
  autotune dashboard --storage postgresql://tuner@db-host/autotune --port 8081

Serves optuna-dashboard for the study's storage on 127.0.0.1 until Ctrl-C; pass
--host 0.0.0.0 to share it with other machines. A search may be writing the study
meanwhile (SQLite runs in WAL mode, so readers never block it)."""

REPORT_EXAMPLE = """example:
  autotune report --study-name synthetic-cpu-myhost --out report/

Writes report/report.html with pareto.png (throughput against peak memory, the
baseline and the knee marked), importance.png (PED-ANOVA importance of each knob for
each objective) and step_times.png (step-time distributions of the Pareto trials)."""

TRAIN_EXAMPLE = """examples:
  autotune export --study-name synthetic-cpu-myhost --pick knee --out best.yaml
  autotune train --config best.yaml --dataset synthetic --scale 0.02 --epochs 5

Trains with every knob of the config (the code the trial measured), prints the
loss, training throughput and validation/test accuracy of each epoch, and at the
end the achieved throughput next to the one the exported trial measured."""

TRIAL_EXAMPLE = """example:
  autotune trial --dataset synthetic --scale 0.05 --config cfg.yaml --format json
  autotune trial --dataset Cora --root ../shared/data/planetoid --steps 30
  autotune trial --config cfg.yaml --model gcn --layers 3 --recompile-limit 4

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


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    """Pipeline facts: fixed for a study (part of its identity), never searched."""
    p.add_argument("--model", choices=["sage", "gcn", "gat"], default=None,
                   help="the GNN (default: sage, as PyG's examples/reddit.py)")
    p.add_argument("--hidden", type=_positive_int, default=None,
                   help="hidden channels (default: the config's or space's, else 256)")
    p.add_argument("--layers", type=_positive_int, default=None,
                   help="conv layers (default: 2); fanouts are fitted to it by cutting or "
                        "repeating their last entry")


def _model_facts(args: argparse.Namespace) -> dict:
    named = {"model": args.model, "hidden_channels": args.hidden, "num_layers": args.layers}
    return {k: v for k, v in named.items() if v is not None}


def _dataset_ref(args: argparse.Namespace):
    """The dataset the --dataset/--root/--scale/--data-seed flags name."""
    from autotune.datasets import DatasetRef, root_default

    return DatasetRef(args.dataset, root=args.root or root_default(), scale=args.scale,
                      seed=args.data_seed)


def _add_measure_flags(p: argparse.ArgumentParser, timeout_flag: str = "--timeout") -> None:
    """How each trial is measured and bounded; ``search`` names the trial timeout
    ``--trial-timeout``, since its ``--timeout`` bounds the whole study."""
    p.add_argument("--steps", type=_positive_int, default=20,
                   help="timed steps per trial (default: 20)")
    p.add_argument("--warmup", type=_positive_int, default=5,
                   help="warm-up steps at least (compiled modes go on until no recompile "
                        "for 3 steps; default: 5)")
    p.add_argument("--max-seconds", type=_positive_float, default=120.0,
                   help="end the timed window after this many seconds (default: 120)")
    p.add_argument(timeout_flag, dest="trial_timeout", type=_positive_float, default=900.0,
                   help="kill a trial after this many seconds (default: 900)")
    p.add_argument("--memory-limit", default=None,
                   help="kill a trial whose process tree's RSS passes this, e.g. 8GiB")
    p.add_argument("--recompile-limit", type=_positive_int, default=None,
                   help="torch._dynamo's recompile limit per frame (default: torch's, 8); a "
                        "trial that hits it ran partly eager and is flagged so")


def _measure_and_limits(args: argparse.Namespace):
    from autotune.env import parse_bytes
    from autotune.measure import MeasureSpec
    from autotune.runner import TrialLimits

    limit = args.memory_limit
    limits = TrialLimits(timeout_s=args.trial_timeout, memory_limit_bytes=None if limit is None
                         else parse_bytes(limit, option="--memory-limit"))
    measure = MeasureSpec(warmup_steps=args.warmup, window_steps=args.steps,
                          max_window_s=args.max_seconds, recompile_limit=args.recompile_limit)
    return measure, limits


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
    _add_model_flags(trial)
    _add_measure_flags(trial)
    trial.add_argument("--studies-dir", default=DEFAULT_STUDIES,
                       help="the trial's logs go to STUDIES_DIR/trials/ (default: studies)")
    trial.add_argument("--format", choices=["table", "json"], default="table")
    trial.set_defaults(func=cmd_trial)

    _add_search_parser(sub)

    show = sub.add_parser("show", help="print a study's Pareto front and trials",
                          epilog=SHOW_EXAMPLE,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_study_flags(show, required=True)
    show.add_argument("--format", choices=["table", "json", "yaml"], default="table")
    show.set_defaults(func=cmd_show)

    export = sub.add_parser("export", help="write one trial's config for training",
                            epilog=EXPORT_EXAMPLE,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_study_flags(export, required=True)
    export.add_argument("--pick", default="knee",
                        help="knee, max-throughput, min-memory or trial:N (default: knee)")
    export.add_argument("--out", required=True, help="a .yaml, .yml or .json file")
    export.set_defaults(func=cmd_export)

    dash = sub.add_parser("dashboard", help="serve optuna-dashboard for a study",
                          epilog=DASHBOARD_EXAMPLE,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_study_flags(dash)
    dash.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    dash.add_argument("--port", type=_port, default=8080, help="default: 8080")
    dash.set_defaults(func=cmd_dashboard)

    train = sub.add_parser("train", help="train with a config; accuracy every epoch",
                           description="Train with an exported config for whole epochs, "
                           "evaluating validation and test accuracy after each.",
                           epilog=TRAIN_EXAMPLE,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_dataset_flags(train)
    train.add_argument("--config", required=True,
                       help="a file written by 'autotune export' (or a YAML/JSON TrialConfig)")
    train.add_argument("--epochs", type=_positive_int, required=True, help="whole epochs")
    train.add_argument("--device", choices=["cpu", "cuda"], default=None,
                       help="overrides the config's device")
    train.add_argument("--studies-dir", default=DEFAULT_STUDIES,
                       help="inductor's kernel cache lives in STUDIES_DIR/.cache (default: "
                            "studies)")
    train.add_argument("--format", choices=["table", "json"], default="table")
    train.set_defaults(func=cmd_train)

    report = sub.add_parser("report", help="write report.html and PNG plots of a study",
                            epilog=REPORT_EXAMPLE,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_study_flags(report, required=True)
    report.add_argument("--out", required=True, help="folder for report.html and the PNGs")
    report.set_defaults(func=cmd_report)
    return parser


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (got {text!r})")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535 (got {text!r})")
    return value


def _add_search_parser(sub) -> None:
    search = sub.add_parser("search", help="search the Pareto front of throughput and memory",
                            description="Optuna multi-objective search: maximise throughput "
                            "(seed nodes/s), minimise peak memory (MiB).",
                            epilog=SEARCH_EXAMPLE,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_dataset_flags(search)
    search.add_argument("--space", default="default",
                        help="a file in search_spaces/ (default, reddit, quick) or a path")
    search.add_argument("--n-trials", type=_positive_int, default=20,
                        help="the study's total trial budget (default: 20)")
    search.add_argument("--timeout", type=_positive_float, default=None,
                        help="stop starting trials after this many seconds")
    search.add_argument("--sampler", default="gp", choices=["gp", "tpe", "nsga2", "random"],
                        help="Optuna sampler (default: gp, the best in "
                             "benchmarks/search_efficiency.py)")
    search.add_argument("--seed", type=int, default=0, help="sampler and training seed")
    search.add_argument("--max-memory", default=None,
                        help="memory budget, e.g. 8GiB: an Optuna constraint on peak memory")
    search.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda when torch sees a GPU, else cpu")
    _add_model_flags(search)
    search.add_argument("--accuracy-guard", type=_positive_float, default=None, metavar="RATIO",
                        help="e.g. 0.99: a config that would join the Pareto front first "
                             "trains for the baseline's time of --guard-epochs epochs; below "
                             "RATIO x the baseline's validation accuracy it is infeasible")
    search.add_argument("--guard-epochs", type=_positive_int, default=3,
                        help="the baseline's epochs that set the guard's training budget "
                             "(default: 3)")
    search.add_argument("--objectives", default="throughput,memory",
                        help="throughput,memory (default) or throughput,memory,accuracy: "
                             "accuracy as a third objective, every trial trained for the "
                             "guard's budget")
    _add_study_flags(search)
    search.add_argument("--heartbeat", type=_positive_int, default=10,
                        help="seconds between a running trial's heartbeats (default: 10)")
    search.add_argument("--grace-period", type=_positive_int, default=60,
                        help="a trial whose heartbeat is older than this is failed and its "
                             "config re-queued once (default: 60)")
    _add_measure_flags(search, timeout_flag="--trial-timeout")
    search.set_defaults(func=cmd_search)


def _add_study_flags(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("--study-name", required=required, default=None,
                   help="default: DATASET-DEVICE-HOST" if not required else None)
    p.add_argument("--storage", default=None,
                   help="an Optuna RDB URL (default: sqlite:///STUDIES_DIR/STUDY.db)")
    p.add_argument("--studies-dir", default=DEFAULT_STUDIES,
                   help="where SQLite studies, trial logs and pareto.yaml go (default: studies)")


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
    from autotune.env import writable_dir

    if not writable_dir(path):
        raise ConfigError(f"{option} '{path}' is not writable; pass another folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} '{path}' cannot be created: {exc.strerror}") from exc
    return path


def cmd_trial(args: argparse.Namespace) -> int:
    from autotune.config import load_config, with_model
    from autotune.pipeline import check_config
    from autotune.runner import inductor_cache_dir, run_trial

    config = load_config(args.config) if args.config else default_config()
    if args.device:
        config = config.replace(device=args.device)
    config = with_model(config, model=args.model, hidden=args.hidden, layers=args.layers)
    check_config(config)
    measure, limits = _measure_and_limits(args)
    trial_dir = _writable_dir(Path(args.studies_dir) / "trials", "--studies-dir") / \
        time.strftime(f"%Y%m%d-%H%M%S-{os.getpid()}")
    ref = _dataset_ref(args)
    ref.prepare()
    result = run_trial(config, dataset=ref, trial_dir=trial_dir, measure=measure,
                       limits=limits, inductor_cache=inductor_cache_dir(args.studies_dir))
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(render_result(result, trial_dir))
    return 0 if result.ok else EXIT_TRIAL_FAILED


def cmd_train(args: argparse.Namespace) -> int:
    from autotune.runner import inductor_cache_dir

    cache = inductor_cache_dir(args.studies_dir)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache.resolve()))  # before torch
    from autotune.config import load_config, measured_figures
    from autotune.pipeline import build, check_config
    from autotune.train import TrainSpec, train

    config = load_config(args.config)
    if args.device:
        config = config.replace(device=args.device)
    check_config(config)
    ref = _dataset_ref(args)
    dataset = ref.prepare()
    pipe = build(config, dataset.data, num_classes=dataset.num_classes,
                 cache_file=ref.csc_path())
    table = args.format == "table"
    if table:
        print(f"training {short_config(config)} on {ref.name} for {args.epochs} epochs")
        print(f"{'epoch':>5} {'loss':>7} {'train s':>8} {'seed nodes/s':>13} {'val acc':>8} "
              f"{'test acc':>8}")

    def show(e) -> None:
        if table:
            print(f"{e.epoch:>5} {e.loss:>7.4f} {e.train_s:>8.2f} {e.seed_nodes_per_s:>13,.0f} "
                  f"{e.val_acc:>8.4f} {e.test_acc:>8.4f}", flush=True)

    training = train(pipe, dataset.data, TrainSpec(epochs=args.epochs), on_epoch=show)
    achieved = training.steady_seed_nodes_per_s()
    measured = measured_figures(args.config)
    ratio = achieved / measured["seed_nodes_per_s"] if measured else None
    if not table:
        print(json.dumps({"config": config.to_dict(), **training.to_dict(),
                          "measured": measured, "achieved_over_measured": ratio}, indent=2))
        return 0
    which = "median of epochs 2-" + str(args.epochs) if args.epochs > 1 else "epoch 1"
    line = f"throughput: achieved {achieved:,.0f} seed nodes/s ({which})"
    if measured:
        line += (f"; trial #{measured['trial']} measured {measured['seed_nodes_per_s']:,.0f}"
                 f" = {ratio:.2f}x")
    else:
        line += f"; {args.config} holds no measurement to compare with"
    print(line)
    return 0


def short_config(config) -> str:
    from autotune.report import short

    return f"{config.model} {config.num_layers}x{config.hidden_channels}, " + \
        short(config.to_dict())


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
             f"device {cfg['device']}; model {cfg['model']} {cfg['num_layers']}x"
             f"{cfg['hidden_channels']}"]
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
            f"compile {c['compile_time_s']:.1f} s ({c.get('backend') or 'not compiled'}), "
            f"{c['recompiles']} recompiles, {c['graph_breaks']} graph breaks"
            + ("; EAGER: recompile limit hit" if c.get("fell_back_to_eager") else ""),
            f"start-up        spawn and load {p['spawn_and_load']:.2f} s (imports "
            f"{p['imports']:.2f} s, dataset {p['dataset_load']:.2f} s), build {p['build']:.2f} s",
            f"observed        sampler {result.observed['sampler_backend']}, "
            f"threads {result.observed['torch_threads']}, "
            f"conv dtype {','.join(result.observed['conv_output_dtypes'])}, "
            f"checkpointed layers {result.observed['checkpointed_layers']}, saved for "
            f"backward {format_bytes(result.observed['saved_tensor_bytes'])}",
        ]
        lines += [f"warning         {w}" for w in result.warnings]
    elif result.stderr_tail:
        lines.append("stderr tail:\n" + result.stderr_tail.rstrip()[-1500:])
    lines.append(f"logs            {trial_dir}")
    return "\n".join(lines)



def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


def cmd_search(args: argparse.Namespace) -> int:
    import torch

    from autotune.env import fingerprint, format_bytes, parse_bytes
    from autotune.guard import GuardFailed, GuardOptions, parse_objectives
    from autotune.pipeline import check_config
    from autotune.space import load_space
    from autotune import study as st

    _quiet_optuna()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.grace_period <= args.heartbeat:
        raise ConfigError(f"--grace-period must be longer than --heartbeat (got "
                          f"{args.grace_period} <= {args.heartbeat}): a live worker's trial "
                          "would be failed between two beats")
    max_memory = parse_bytes(args.max_memory, option="--max-memory") if args.max_memory else None
    guard = GuardOptions(ratio=args.accuracy_guard, epochs=args.guard_epochs,
                         objective=parse_objectives(args.objectives))
    measure, limits = _measure_and_limits(args)
    base_knobs = default_config(device)
    space = load_space(args.space, device=device, baseline=base_knobs, facts=_model_facts(args))
    baseline = space.baseline(base_knobs.replace(seed=args.seed))
    check_config(baseline)
    studies_dir = _writable_dir(Path(args.studies_dir), "--studies-dir")
    ref = _dataset_ref(args)
    name = args.study_name or st.default_study_name(args.dataset, device)
    url = args.storage or st.default_storage(studies_dir, name)
    st.open_storage(url)  # fails fast on a bad URL or an unreachable server
    dataset = ref.prepare()
    if guard.active and "val_mask" not in dataset.data:
        raise ConfigError(f"--accuracy-guard and --objectives ...,accuracy need a validation "
                          f"split, and dataset {ref.name} has no val_mask")
    opts = st.SearchOptions(dataset=ref, space=space, device=device, n_trials=args.n_trials,
                            timeout_s=args.timeout, sampler=args.sampler, seed=args.seed,
                            max_memory_bytes=max_memory, storage=url, study_name=name,
                            studies_dir=studies_dir, measure=measure, limits=limits,
                            heartbeat_s=args.heartbeat, grace_s=args.grace_period, guard=guard)
    study = st.open_study(opts, dataset_stats=dataset.stats(), env=fingerprint(device))
    budget = max_memory / st.MIB if max_memory else None
    pareto_path = studies_dir / name / "pareto.yaml"
    stats = dataset.stats()
    print(f"study {name} in {st.masked(url)}")
    print(f"dataset {ref.name}: {stats['num_nodes']:,} nodes, {stats['num_edges']:,} edges, "
          f"{stats['num_features']} features; space {space.name}; sampler {args.sampler}; "
          f"device {device}" + (f"; budget {format_bytes(max_memory)}" if max_memory else "")
          + (f"; accuracy guard {guard.ratio:g} x baseline after {guard.epochs} epochs"
             if guard.ratio else "") + ("; objectives throughput, memory, accuracy"
                                        if guard.objective else ""))
    for note in space.notes:
        print(f"note: {note}")

    try:
        outcome = st.run_search(opts, study, url, baseline, progress=print_progress,
                                on_trial_done=lambda s: _publish(s, pareto_path, url, budget))
    except KeyboardInterrupt:
        print(f"autotune: interrupted; run the same command again to resume study {name}",
              file=sys.stderr)
        return 130
    except GuardFailed as exc:
        print(f"autotune: accuracy guard: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_TRIAL_FAILED
    if outcome.interrupted:
        print(f"marked interrupted trials {outcome.interrupted} as failed")
    if outcome.stale:
        print(f"marked stale trials {outcome.stale} (no heartbeat) as failed; configs re-queued")
    print(f"\n{outcome.measured} measured, {outcome.reused} reused, {outcome.failed} failed; "
          f"{len(study.trials)} trials in the study")
    if guard.active:
        reference = study.user_attrs.get("guard") or {}
        share = outcome.guard_s / max(outcome.elapsed_s, 1e-9)
        print(f"accuracy guard: {outcome.guarded} configs trained for "
              f"{reference.get('budget_s', 0):.1f} s each (the baseline's {guard.epochs} "
              f"epochs, validation accuracy {reference.get('baseline_val_acc', 0):.4f}); "
              f"{outcome.guard_violations} below the guard; guard time {outcome.guard_s:.0f} s "
              f"= {100 * share:.0f}% of this search's {outcome.elapsed_s:.0f} s")
    print(render_pareto(st.summary_rows(study, budget)))
    print(f"\npareto.yaml: {pareto_path}\nexport: autotune export --study-name {name} "
          f"--pick knee --out best.yaml" + (f" --storage '{st.masked(url)}'"
                                            if args.storage else ""))
    return 0


def _publish(study, pareto_path: Path, url: str, budget: float | None) -> None:
    """After every trial: pareto.yaml on this host, the study note in the storage."""
    from autotune import study as st
    from autotune.report import save_study_note

    st.write_pareto(study, pareto_path, url, budget)
    with st.study_lock(url, study.study_name):  # workers take turns writing the note
        save_study_note(study)


def print_progress(n: int, total: int, config, frozen, elapsed: float, eta: float) -> None:
    """One line per finished trial: n/N, the config, its figures, status, time and ETA."""
    from autotune.report import short

    attrs = frozen.user_attrs
    if frozen.values:
        figures = f"{frozen.values[0]:>9,.0f} seeds/s {frozen.values[1]:>8,.0f} MiB"
    else:
        figures = f"{'-':>17} {'-':>12}"
    status = attrs.get("status", "?")
    if "reused_from" in attrs:
        status = f"repeat of #{attrs['reused_from']}"
    elif attrs.get("fail_reason"):
        status += f": {attrs['fail_reason'][:60]}"
    elif attrs.get("compile", {}).get("fell_back_to_eager"):
        status += ", eager: recompile limit hit"
    if "val_acc" in attrs:
        status += f", val acc {attrs['val_acc']:.3f} ({attrs['accuracy_ratio']:.3f}x)"
        if attrs.get("accuracy_shortfall", 0) > 0:
            status += " BELOW GUARD"
    print(f"[{n:>3}/{total}] #{frozen.number:<3} {short(config.to_dict()):<52} "
          f"{figures} | {status} | {_clock(elapsed)} ETA {_clock(eta)}", flush=True)


def render_pareto(rows: list[dict]) -> str:
    from autotune.report import short

    if not rows:
        return "Pareto front: no completed trial yet"
    acc = any(r.get("val_acc") is not None for r in rows)
    lines = ["Pareto front (fastest first):",
             f"{'trial':>5} {'seed nodes/s':>13} {'peak MiB':>9} {'speed-up':>8} "
             f"{'memory':>7}" + (f" {'val acc':>7}" if acc else "") + "  config"]
    for r in rows:
        speed = f"{r['speedup']:.2f}x" if r["speedup"] is not None else "-"
        mem = f"{r['memory_ratio']:.2f}x" if r["memory_ratio"] is not None else "-"
        marks = f"  <- {', '.join(r['marks'])}" if r["marks"] else ""
        val = "" if not acc else (f" {r['val_acc']:>7.4f}" if r.get("val_acc") is not None
                                  else f" {'-':>7}")
        lines.append(f"{r['trial']:>5} {r['throughput']:>13,.0f} {r['memory_mib']:>9,.0f} "
                     f"{speed:>8} {mem:>7}{val}  {short(r['config'])}{marks}")
    return "\n".join(lines)


def _quiet_optuna() -> None:
    """autotune prints its own progress; Optuna's INFO lines would repeat it."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _load_study(args: argparse.Namespace):
    import optuna

    _quiet_optuna()
    from autotune import study as st

    url = args.storage or st.default_storage(Path(args.studies_dir), args.study_name)
    if url.startswith("sqlite:///") and not args.storage:
        path = Path(url[len("sqlite:///"):])
        if not path.exists():
            raise ConfigError(f"no study {args.study_name!r}: '{path}' does not exist; "
                              "pass --storage or --studies-dir where the search ran")
    storage = st.open_storage(url)
    try:
        return optuna.load_study(study_name=args.study_name, storage=storage), url
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise ConfigError(f"no study {args.study_name!r} in {st.masked(url)} "
                          f"(studies there: {', '.join(names) or 'none'})") from None


def _trial_rows(study) -> list[dict]:
    rows = []
    for t in study.trials:
        rows.append({"trial": t.number, "state": t.state.name.lower(),
                     "throughput": t.values[0] if t.values else None,
                     "memory_mib": t.values[1] if t.values else None,
                     "baseline": bool(t.user_attrs.get("baseline")),
                     "reused_from": t.user_attrs.get("reused_from"),
                     "reason": t.user_attrs.get("fail_reason"),
                     "val_acc": t.user_attrs.get("val_acc"),
                     "below_guard": t.user_attrs.get("accuracy_shortfall", 0.0) > 0,
                     "config": t.user_attrs.get("config")})
    return rows


def cmd_show(args: argparse.Namespace) -> int:
    from autotune import study as st

    study, url = _load_study(args)
    budget = study.user_attrs.get("max_memory_bytes")
    budget = budget / st.MIB if budget else None
    pareto, trials = st.summary_rows(study, budget), _trial_rows(study)
    if args.format != "table":
        blob = {"study": study.study_name, "storage": st.masked(url),
                "baseline_trial": study.user_attrs.get("baseline_trial"),
                "pareto": pareto, "trials": trials}
        if args.format == "json":
            print(json.dumps(blob, indent=2))
        else:
            import yaml

            print(yaml.safe_dump(blob, sort_keys=False), end="")
        return 0
    from autotune.report import short

    print(f"study {study.study_name} in {st.masked(url)}")
    print(render_pareto(pareto))
    print(f"\nAll trials ({len(trials)}):")
    print(f"{'trial':>5} {'state':<8} {'seed nodes/s':>13} {'peak MiB':>9}  config / reason")
    for r in trials:
        tp = f"{r['throughput']:,.0f}" if r["throughput"] is not None else "-"
        mem = f"{r['memory_mib']:,.0f}" if r["memory_mib"] is not None else "-"
        what = short(r["config"]) if r["config"] else ""
        extra = " (baseline)" if r["baseline"] else ""
        extra += f" (repeat of #{r['reused_from']})" if r["reused_from"] is not None else ""
        extra += f" [{r['reason'][:70]}]" if r["reason"] else ""
        if r["val_acc"] is not None:
            extra += f" (val acc {r['val_acc']:.4f}" + \
                (", below the accuracy guard)" if r["below_guard"] else ")")
        print(f"{r['trial']:>5} {r['state']:<8} {tp:>13} {mem:>9}  {what}{extra}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autotune import study as st
    from autotune.config import CONFIG_FORMAT, TrialConfig
    from autotune.pareto import pick

    out = Path(args.out)
    if out.suffix not in (".yaml", ".yml", ".json"):
        raise ConfigError(f"--out must end in .yaml, .yml or .json (got '{out}')")
    study, url = _load_study(args)
    budget = study.user_attrs.get("max_memory_bytes")
    chosen = pick(st.points(study), args.pick, budget / st.MIB if budget else None)
    trial = study.trials[chosen.number]
    config = TrialConfig.from_dict(trial.user_attrs["config"])
    blob = export_blob(study, trial, config, url, out)
    blob["format"] = CONFIG_FORMAT
    _write_export(out, blob)
    print(f"exported trial {trial.number} ({args.pick}): {chosen.throughput:,.0f} seed nodes/s, "
          f"{chosen.memory_mib:,.0f} MiB -> {out}")
    print(f"reproduce: {blob['reproduce']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from autotune.report import write_report

    out = _writable_dir(Path(args.out), "--out")
    study, url = _load_study(args)
    report = write_report(study, out, url=url)
    for name, path in report.images.items():
        print(f"{name:<11} {path}")
    for name, why in report.not_drawn.items():
        print(f"{name:<11} not drawn: {why}")
    print(f"report      {report.html}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    import socketserver
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    import optuna_dashboard

    from autotune import study as st

    url, path = _dashboard_storage(args), "/dashboard"
    storage = st.open_storage(url)
    if args.study_name:
        study, _ = _load_study(args)
        path = f"/dashboard/studies/{study._study_id}"

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args) -> None:  # one line per request would drown the URL
            pass

    try:
        server = make_server(args.host, args.port, optuna_dashboard.wsgi(storage),
                             server_class=Server, handler_class=Quiet)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}; "
                          "pass another --port") from exc
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"optuna-dashboard for {st.masked(url)}\n"
          f"open http://{host}:{server.server_port}{path}  (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("dashboard stopped")
    finally:
        server.server_close()
    return 0


def _dashboard_storage(args: argparse.Namespace) -> str:
    """--storage; else the study's SQLite file; else the only one in --studies-dir."""
    from autotune import study as st

    if args.storage or args.study_name:
        return args.storage or st.default_storage(Path(args.studies_dir), args.study_name)
    files = sorted(Path(args.studies_dir).glob("*.db"))
    if len(files) != 1:
        raise ConfigError(f"{len(files)} study databases in '{args.studies_dir}' "
                          f"({', '.join(f.name for f in files) or 'none'}); pass --study-name "
                          "or --storage")
    return f"sqlite:///{files[0].resolve()}"


def export_blob(study, trial, config, url: str, out: Path) -> dict:
    from autotune import study as st

    ref = study.user_attrs.get("dataset_ref", {})
    source = trial.user_attrs.get("reused_from", trial.number)
    reproduce = (f"autotune trial --dataset {ref.get('name')} --root {ref.get('root')} "
                 f"--scale {ref.get('scale')} --data-seed {ref.get('seed')} --config {out}")
    limit = (trial.user_attrs.get("compile") or {}).get("recompile_limit")
    if limit is not None:
        reproduce += f" --recompile-limit {limit}"
    return {"config": config.to_dict(),
            "measured": {"trial": trial.number, "measured_in_trial": source,
                         "seed_nodes_per_s": trial.values[0], "peak_memory_mib": trial.values[1],
                         "summary": trial.user_attrs.get("summary"),
                         "memory": trial.user_attrs.get("memory"),
                         "compile": trial.user_attrs.get("compile"),
                         "observed": trial.user_attrs.get("observed"),
                         "val_acc": trial.user_attrs.get("val_acc"),
                         "accuracy_ratio": trial.user_attrs.get("accuracy_ratio")},
            "env": study.user_attrs.get("env"), "dataset": study.user_attrs.get("dataset"),
            "study": study.study_name, "storage": st.masked(url), "reproduce": reproduce}


def _write_export(out: Path, blob: dict) -> None:
    import yaml

    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(blob, indent=2) if out.suffix == ".json" else \
        yaml.safe_dump(blob, sort_keys=False)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, out)


if __name__ == "__main__":
    sys.exit(main())
