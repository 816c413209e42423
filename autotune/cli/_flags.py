"""The ``autotune`` command's flags: one parser a subcommand, each flag's default read
from the option records (:mod:`autotune.specs`, :class:`SearchOptions`), each
``--help`` with an example. A parsed command names itself in ``args.command``;
:mod:`autotune.cli._main` runs it. Imports neither torch nor PyG."""
from __future__ import annotations

import argparse
import os
from typing import Any, Callable

from autotune.cli._render import FORMATS
from autotune.config import TEMPORAL_STRATEGIES
from autotune.errors import ConfigError
from autotune.logging import get_logger
from autotune.specs import (
    DURATION,
    DURATION_OR_ZERO,
    FRACTION,
    MAX_BUSY,
    MAX_BUSY_ENV,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    SEARCH_WINDOW_S,
    SHARE,
    STUDIES_DIR,
    SWITCH,
    Check,
    GuardOptions,
    MeasureSpec,
    Option,
    TrialLimits,
)
from autotune.study import SEARCH_OPTIONS
from autotune.taskinfo import TASKS

EXIT_BAD_INPUT = 2
STORAGE_ENV, STUDIES_ENV = "AUTOTUNE_STORAGE", "AUTOTUNE_STUDIES_DIR"


SEARCH_EXAMPLE = """examples:
  autotune search --dataset synthetic --scale 0.02 --space quick --n-trials 8
  autotune search --dataset Reddit --root data --max-memory 8GiB --n-trials 40
  autotune search --dataset Reddit --root data --budget 20m --precision 5%
  autotune search --dataset Reddit --root data --device cuda --budget 5m
  autotune search --dataset Reddit --root data --confirm 5 --confirm-rounds 5
  autotune search --dataset Reddit --space reddit --model gat --layers 3 --n-trials 40
  autotune search --dataset mypkg.data:load --model mypkg.models:factory --n-trials 20
  autotune search --task link --dataset Cora --root data --hidden 128 --n-trials 20
  autotune search --dataset synthetic-hetero --scale 0.05 --space quick --n-trials 8
  autotune search --task link --dataset synthetic-hetero --link-edge-type author__writes__paper
  autotune search --task graph --dataset synthetic-molecules --scale 0.1 --n-trials 8

Running the same command again resumes the study: finished trials are kept, an
interrupted one is marked failed, an interrupted confirmation goes on where it
stopped, and --n-trials counts the study's total (repeats of a measured config,
controls and the confirmation count against nothing)."""

SHOW_EXAMPLE = """example:
  autotune show --study-name synthetic-cpu-myhost
  autotune show --study-name synthetic-cpu-myhost -f yaml"""

EXPORT_EXAMPLE = """examples:
  autotune export --study-name synthetic-cpu-myhost --out best.yaml
  autotune export --study-name synthetic-cpu-myhost --pick knee --out knee.yaml
  autotune export --study-name synthetic-cpu-myhost --pick trial:3 --out t3.json

By default the export is the front's default pick: the fastest confirmed config
whose memory fits what the device has (or --max-memory).

The file holds the full TrialConfig, the measured figures, the environment and the
command that reproduces the measurement; 'autotune trial --config FILE' and
autotune.load_config(FILE) read it back."""

DASHBOARD_EXAMPLE = """examples:
  autotune dashboard --study-name synthetic-cpu-myhost
  autotune dashboard --storage postgresql://tuner@db-host/autotune --port 8081

Serves optuna-dashboard for the study's storage on 127.0.0.1 until Ctrl-C; pass
--host 0.0.0.0 to share it with other machines. A search may be writing the study
meanwhile (SQLite runs in WAL mode, so readers never block it)."""

REPORT_EXAMPLE = """examples:
  autotune report
  autotune report --study-name synthetic-cpu-myhost --out report/

Writes report.html (or report/report.html) with report-pareto.png (throughput against
peak memory, the baseline, the default pick and the knee marked), report-importance.png
(PED-ANOVA importance of each knob for each objective) and report-step_times.png
(step-time distributions of the Pareto trials) beside it; in a folder, pareto.png,
importance.png and step_times.png."""

TRAIN_EXAMPLE = """examples:
  autotune export --study-name synthetic-cpu-myhost --out best.yaml
  autotune train --config best.yaml --dataset synthetic --scale 0.02 --epochs 5
  autotune train --config best.yaml --epochs 10 --tune

Trains with every knob of the config (the code the trial measured), prints the
loss, training throughput and validation/test accuracy of each epoch, and at the
end the achieved throughput next to the one the exported trial measured."""

TRIAL_EXAMPLE = """example:
  autotune trial --dataset synthetic --scale 0.05 --config cfg.yaml -f json
  autotune trial --dataset Cora --root ../shared/data/planetoid --steps 30
  autotune trial --task link --dataset Cora --root ../shared/data/planetoid --hidden 128
  autotune trial --dataset synthetic-hetero --scale 0.05 --config cfg.yaml
  autotune trial --config cfg.yaml --model gcn --layers 3 --recompile-limit 4
  autotune trial --model mypkg.models:factory --dataset mypkg.data:load
  autotune trial --config cfg.yaml --profile prof/   # then open prof/trace.json in Perfetto

Without --config, the trial measures PyG's examples/reddit.py setup: fanout [25, 10],
batch 1024, 2-layer SAGE with 256 hidden units, no compile, float32."""


MODEL_HELP = ("sage (default, as PyG's examples/reddit.py), gcn, gat, or your own factory "
              "'package.module:factory' called as factory(in_channels, out_channels, config) "
              "and returning an nn.Module whose forward takes (x, edge_index)")
DATASET_HELP = ("Reddit, Reddit2, Flickr, Yelp, Cora, CiteSeer, PubMed, ogbn-products, "
                "ogbn-arxiv, ogbn-mag, synthetic (Reddit-shaped), synthetic-hetero "
                "(ogbn-mag-shaped), synthetic-molecules (graph-level, --task graph), a "
                "path to a .pt Data or HeteroData file, a TU-format folder (--task graph), "
                "or your own function 'package.module:function' returning one (default: "
                "synthetic)")


STUDIES_EXAMPLE = """examples:
  autotune studies
  autotune studies --storage postgresql://tuner@db-host/autotune -f json"""

DELETE_EXAMPLE = """example:
  autotune delete --study-name synthetic-cpu-myhost --yes

Without --yes nothing is deleted: the command says what it would delete and exits 2."""


def _add_options(p: argparse.ArgumentParser) -> None:
    """A flag for each option of :data:`SEARCH_OPTIONS`: its name, default, help and
    check come from the option's one definition (a switch on by default is
    ``--no-NAME``)."""
    for option in SEARCH_OPTIONS:
        if option.check is SWITCH:
            p.add_argument("--no-" + option.flag[2:], dest=option.name, action="store_false",
                           default=option.default, help=option.help)
            continue
        names = [option.flag] + ([option.old_flag] if option.old_flag else [])
        typed = dict(choices=option.check.choices) if option.check.choices else \
            dict(type=_checked(option), metavar=option.metavar)
        p.add_argument(*names, dest=option.name, default=option.default, **typed,
                       action=_Renamed if option.old_flag else "store",
                       help=(option.help + _shown(option)).replace("%", "%%"))


def _checked(option: Option) -> Callable[[str], Any]:
    """An argparse type: the option's own check of a flag's text."""
    return _flag_type(option.check, option.flag)


def _flag_type(check: Check, flag: str = "") -> Callable[[str], Any]:
    """An argparse type from a :class:`autotune.specs.Check`, the one check of a value
    however it is given: argparse names the flag, the check says what it takes."""
    def convert(text: str) -> Any:
        try:
            return check(flag, text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag} ").strip()) \
                from None
    return convert


_positive_int = _flag_type(POSITIVE_INT)
_positive_float = _flag_type(POSITIVE_NUMBER)


def _shown(option: Option) -> str:
    """`` (default: 10%)``: an option's default as its flag takes it."""
    if option.default is None:
        return ""
    value = option.default
    if option.check is FRACTION:
        value = f"{100 * value:g}%"
    elif option.unit == "s":
        value = f"{value:g}s"
    return f" (default: {value})"


class _Renamed(argparse.Action):
    """A flag with its old name as a second option string: the old name still works
    and says, on stderr, what it is called now."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string != self.option_strings[0]:
            get_logger(__name__).warning(f"{option_string} is deprecated: use "
                                         f"{self.option_strings[0]}")
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    """Reports a bad flag as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"autotune: error: {message}{_did_you_mean(message)} "
                  f"(see '{self.prog} --help')\n")


def _did_you_mean(message: str) -> str:
    """A suggestion for argparse's "invalid choice: 'X' (choose from ...)"."""
    import difflib
    import re

    match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if match is None:
        return ""
    choices = re.findall(r"'([^']*)'", match.group(2)) or \
        [c.strip() for c in match.group(2).split(",")]
    near = difflib.get_close_matches(match.group(1), choices, n=1)
    return f"; did you mean {near[0]!r}?" if near else ""





_duration = _flag_type(DURATION)  # 90, 90s, 1.5h
_fraction = _flag_type(FRACTION)
_share = _flag_type(SHARE)
_warmup_time = _flag_type(DURATION_OR_ZERO)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (got {text!r})") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535 (got {text!r})")
    return value


def _common() -> argparse.ArgumentParser:
    """Flags every subcommand takes: --debug, accepted after the subcommand too."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks")
    return common


def _add_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--format", choices=FORMATS, default="table",
                   help="table for people, json or yaml for programs (default: table)")


def _add_dataset_flags(p: argparse.ArgumentParser, *, from_export: bool = False) -> None:
    """The dataset flags; ``from_export``: unset ones take the export's dataset."""
    where = "the export's, else " if from_export else ""
    p.add_argument("--dataset", default=None, help=DATASET_HELP.replace(
        "(default: synthetic)", f"(default: {where}synthetic)"))
    p.add_argument("--root", default=None, help=f"folder datasets live in (default: {where}"
                   "$AUTOTUNE_DATA_ROOT or ./data)")
    p.add_argument("--scale", type=_positive_float, default=None,
                   help="size of the synthetic graph relative to Reddit (synthetic-hetero: to "
                        f"ogbn-mag) (default: {where}1.0)")
    p.add_argument("--data-seed", type=int, default=None,
                   help=f"seed of the synthetic graph (default: {where}0)")
    config = "the config's, else " if from_export else ""
    p.add_argument("--task", choices=list(TASKS), default=None,
                   help="node: classify nodes (seeds are nodes); link: predict edges on the "
                        "dataset's link split with the model as encoder and a dot-product "
                        "decoder (seeds are edges); graph: classify whole small graphs "
                        "(synthetic-molecules, a TU-format folder; throughput in graphs/s) "
                        f"(default: {config}node)")
    p.add_argument("--time-attr", default=None, metavar="ATTR",
                   help="a node attribute of times: temporal sampling, every sampled node no "
                        "later than its seed's time (default: "
                        f"{config}none)")
    p.add_argument("--temporal-strategy", choices=TEMPORAL_STRATEGIES, default=None,
                   help="with --time-attr: draw among the neighbours in time, or take the "
                        f"latest (default: {config}uniform)")
    p.add_argument("--link-edge-type", default=None, metavar="SRC__REL__DST",
                   help="with --task link on a heterogeneous graph: the edge type to predict, "
                        "as src__rel__dst or a relation name, e.g. author__writes__paper "
                        f"(default: {where}none)")


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    """Pipeline facts: fixed for a study (part of its identity), never searched."""
    p.add_argument("--model", default=None, help=MODEL_HELP)
    p.add_argument("--hidden", type=_positive_int, default=None,
                   help="hidden channels (default: the config's or space's, else 256)")
    p.add_argument("--layers", type=_positive_int, default=None,
                   help="conv layers (default: 2); fanouts are fitted to it by cutting or "
                        "repeating their last entry")
    p.add_argument("--recompile-limit", type=_positive_int, default=None,
                   help="torch._dynamo's recompile limit per frame (default: torch's, 8); a "
                        "trial that hits it ran partly eager and is flagged so")


def _add_measure_flags(p: argparse.ArgumentParser, timeout_flag: str = "--timeout",
                       max_seconds: float = MeasureSpec.max_window_s) -> None:
    """How each trial is measured and bounded; ``search`` names the trial timeout
    ``--trial-timeout``, since its ``--timeout`` bounds the whole study."""
    m = MeasureSpec
    p.add_argument("--steps", type=_positive_int, default=m.min_steps,
                   help=f"timed steps per trial at least (default: {m.min_steps})")
    p.add_argument("--precision", type=_fraction, default=None,
                   help="time blocks of steps until the throughput's 95%% confidence "
                        f"half-width is within this, e.g. 3%% or 0.05 (default: "
                        f"{100 * m.precision:g}%%, or what the search space states; at "
                        f"least {m.min_window_s:g} s and 4 blocks)")
    p.add_argument("--warmup", type=_positive_int, default=m.warmup_steps,
                   help="warm-up steps at least (compiled modes go on until no recompile "
                        f"for {m.settle_steps} steps; default: {m.warmup_steps})")
    p.add_argument("--warmup-time", type=_warmup_time, default=m.min_warmup_s,
                   help="warm-up seconds at least, e.g. 2s or 0 (up to "
                        f"{m.max_warmup_steps} steps; default: {m.min_warmup_s:g}s)")
    p.add_argument("--max-seconds", type=_duration, default=max_seconds,
                   help="end the timed window after this long even if --precision is not "
                        "reached (the trial is flagged imprecise), e.g. 90s or 2m "
                        f"(default: {max_seconds:g}s)")
    p.add_argument("--max-busy", type=_share, default=None,
                   help="measure a window again (up to "
                        f"{m.busy_retries} times, then flag it disturbed) when other "
                        "processes took more than this share of the trial's cores, e.g. "
                        f"20%%; 1 never does (default: ${MAX_BUSY_ENV}, else "
                        f"{100 * MAX_BUSY:g}%%)")
    p.add_argument(timeout_flag, dest="trial_timeout", type=_duration,
                   default=TrialLimits.timeout_s, help="kill a trial after this long, e.g. "
                   f"600, 10m (default: {TrialLimits.timeout_s:g}s)")
    p.add_argument("--memory-limit", default=None,
                   help="kill a trial whose process tree's RSS passes this, e.g. 8GiB "
                        "(KiB/MiB/GiB are powers of 1024, KB/MB/GB of 1000)")
    p.add_argument("--gpu-memory-limit", default=None,
                   help="cap what a CUDA trial may allocate on the GPU, e.g. 8GiB (a smaller "
                        "GPU, or a share of one); gpu_sampling's fit check counts it")


def _add_study_flags(p: argparse.ArgumentParser, reading: bool = False) -> None:
    p.add_argument("--study-name", default=None,
                   help="the study to read (default: the only study there is)" if reading
                   else "the study (default: DATASET-DEVICE-HOST)")
    p.add_argument("--storage", default=os.environ.get(STORAGE_ENV),
                   help=f"an Optuna RDB URL (default: ${STORAGE_ENV}, else "
                        "sqlite:///STUDIES_DIR/STUDY.db)")
    p.add_argument("--studies-dir", default=os.environ.get(STUDIES_ENV, STUDIES_DIR),
                   help="where SQLite studies, trial logs and pareto.yaml go, and this "
                        "machine's caches (STUDIES_DIR/.cache: inductor's kernels, the "
                        f"record of its paired windows) (default: ${STUDIES_ENV}, else studies)")


def _sub(sub, name: str, help_: str, description: str, example: str, command: str, *,
         reads_a_study: bool = False) -> _Parser:
    """A subcommand; ``reads_a_study``: it takes the study flags and ``-f``."""
    p = sub.add_parser(name, help=help_, description=description, epilog=example,
                       parents=[_common()], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(command=command)
    if reads_a_study:
        _add_study_flags(p, reading=True)
        _add_format(p)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autotune", description="Pareto autotuner for PyTorch Geometric "
                     "training pipelines.", parents=[_common()])
    parser.add_argument("--version", action="version",
                        version=f"autotune {__import__('autotune').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _add_trial_parser(sub)
    _add_search_parser(sub)
    _sub(sub, "show", "print a study's Pareto front and trials",
         "Print a study's Pareto front (with speed-ups against the baseline) and every "
         "trial.", SHOW_EXAMPLE, "show", reads_a_study=True)
    export = _sub(sub, "export", "write one trial's config for training",
                  "Write one trial's full config, measured figures and environment.",
                  EXPORT_EXAMPLE, "export", reads_a_study=True)
    export.add_argument("--pick", default="default",
                        help="default, knee, max-throughput, min-memory or trial:N "
                             "(default: the front's default pick, the fastest confirmed "
                             "config that fits the device's memory or --max-memory)")
    export.add_argument("--out", required=True,
                        help="a .yaml, .yml or .json file, or - for stdout")
    _add_dashboard_parser(sub)
    _add_train_parser(sub)
    _add_manage_parsers(sub)
    report = _sub(sub, "report", "write report.html and PNG plots of a study",
                  "Draw a study: Pareto front, knob importance, step times.", REPORT_EXAMPLE,
                  "report", reads_a_study=True)
    report.add_argument("--out", default="report.html",
                        help="the report: FILE.html (its PNGs beside it, FILE-pareto.png...) or "
                             "a folder for report.html and the PNGs (default: report.html); "
                             "another study's report there is never overwritten")
    return parser


def _add_manage_parsers(sub) -> None:
    studies = _sub(sub, "studies", "list the studies in a storage or studies folder",
                   "List every study: name, storage, trials, best throughput, last change.",
                   STUDIES_EXAMPLE, "studies")
    studies.add_argument("--storage", default=os.environ.get(STORAGE_ENV),
                         help=f"an Optuna RDB URL (default: ${STORAGE_ENV}, else every "
                              "SQLite file in --studies-dir)")
    studies.add_argument("--studies-dir", default=os.environ.get(STUDIES_ENV, STUDIES_DIR),
                         help=f"default: ${STUDIES_ENV}, else studies")
    _add_format(studies)
    delete = _sub(sub, "delete", "delete a study (asks for --yes)",
                  "Delete a study's trials from its storage and its folder of logs.",
                  DELETE_EXAMPLE, "delete", reads_a_study=True)
    delete.add_argument("--yes", action="store_true",
                        help="really delete (without it, say what would be deleted)")


def _add_trial_parser(sub) -> None:
    trial = _sub(sub, "trial", "measure one configuration in its own process",
                 "Measure one pipeline configuration: throughput, peak memory, compile time "
                 "and recompiles.", TRIAL_EXAMPLE, "trial")
    _add_dataset_flags(trial, from_export=True)
    trial.add_argument("--config", default=None,
                       help="a YAML/JSON TrialConfig, or a file written by 'autotune export'")
    trial.add_argument("--device", choices=["cpu", "cuda"], default=None,
                       help="overrides the config's device")
    _add_model_flags(trial)
    _add_measure_flags(trial)
    trial.add_argument("--studies-dir", default=STUDIES_DIR,
                       help="the trial's logs go to STUDIES_DIR/trials/ (default: studies)")
    trial.add_argument("--profile", metavar="DIR", default=None,
                       help="after the window, profile a few steps with torch.profiler: "
                            "DIR/trace.json (Chrome/Perfetto) and DIR/top-ops.txt, printed")
    trial.add_argument("--profile-steps", type=_positive_int, default=5, metavar="N",
                       help="steps the profile records (default: 5, after 2 unrecorded)")
    _add_format(trial)


def _add_dashboard_parser(sub) -> None:
    dash = _sub(sub, "dashboard", "serve optuna-dashboard for a study",
                "Serve optuna-dashboard for a study's storage.", DASHBOARD_EXAMPLE,
                "dashboard")
    _add_study_flags(dash, reading=True)
    dash.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    dash.add_argument("--port", type=_port, default=8080, help="port to bind (default: 8080)")


def _add_train_parser(sub) -> None:
    train = _sub(sub, "train", "train with a config; its metric every epoch",
                 "Train with an exported config for whole epochs, evaluating the task's metric "
                 "(accuracy, or ROC-AUC for link prediction) on validation and test after "
                 "each.", TRAIN_EXAMPLE, "train")
    _add_dataset_flags(train, from_export=True)
    train.add_argument("--config", required=True,
                       help="a file written by 'autotune export' (or a YAML/JSON TrialConfig)")
    train.add_argument("--epochs", type=_positive_int, required=True, help="whole epochs")
    train.add_argument("--save", default=None, metavar="PATH",
                       help="save the state dict of the epoch with the best validation "
                            "metric to PATH (torch.save)")
    train.add_argument("--device", choices=["cpu", "cuda"], default=None,
                       help="overrides the config's device")
    train.add_argument("--tune", action="store_true",
                       help="tune while training: try the knobs that leave what is learnt "
                            "unchanged (workers, affinity, sampling backend, aggregation; "
                            "on a GPU the compile mode and shapes, where a compile pays "
                            "back), each paired with the config it started on, and train "
                            "the rest of the run on the fastest")
    train.add_argument("--tune-share", type=_share, default=None, metavar="FRACTION",
                       help="with --tune: the most of the run's steps its candidates may "
                            "lose against the config it started on, the steps it would have "
                            "trained beyond them in their time (default 10%%)")
    train.add_argument("--tune-precision", action="store_true",
                       help="with --tune: try the AMP and feature dtypes and the built-in "
                            "model's bit dropout masks too (they change the numbers a step "
                            "computes, not the batches or the model)")
    train.add_argument("--tune-compile", action="store_true",
                       help="with --tune: try compile modes on a CPU too (on a GPU they are "
                            "tried anyway), each where its compile pays back in the run")
    train.add_argument("--study-name", default=None,
                       help="with --tune: the new study its windows are recorded in (default: "
                            "DATASET-DEVICE-HOST-tuned-TIME)")
    train.add_argument("--storage", default=os.environ.get(STORAGE_ENV),
                       help=f"with --tune: an Optuna RDB URL (default: ${STORAGE_ENV}, else "
                            "sqlite:///STUDIES_DIR/STUDY.db)")
    train.add_argument("--studies-dir", default=STUDIES_DIR,
                       help="a tuned run's SQLite study and inductor's kernel cache "
                            "(STUDIES_DIR/.cache) live here (default: studies)")
    _add_format(train)


def _add_guard_flags(search) -> None:
    """The accuracy guard's flags, and accuracy as an objective."""
    search.add_argument("--accuracy-guard", type=_positive_float, default=None, metavar="RATIO",
                        help="e.g. 0.99: a config that would join the Pareto front first "
                             "trains for the baseline's time of --guard-epochs epochs; below "
                             "RATIO x the baseline's validation accuracy it is infeasible")
    search.add_argument("--guard-epochs", type=_positive_int, default=GuardOptions.epochs,
                        help="the baseline's epochs that set the guard's training budget "
                             f"(default: {GuardOptions.epochs})")
    search.add_argument("--objectives", default="throughput,memory",
                        help="throughput,memory (default) or throughput,memory,accuracy: "
                             "accuracy as a third objective, every trial trained for the "
                             "guard's budget")


def _add_search_parser(sub) -> None:
    search = _sub(sub, "search", "search the Pareto front of throughput and memory",
                  "Optuna multi-objective search: maximise throughput ("
                  + "; ".join(f"{t.unit} with --task {t.name}" for t in TASKS.values())
                  + "), minimise peak memory (MiB).", SEARCH_EXAMPLE, "search")
    _add_dataset_flags(search)
    search.add_argument("--space", default="default",
                        help="a file in search_spaces/ (default, reddit, quick) or a path")
    _add_options(search)
    search.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda when torch sees a GPU, else cpu")
    _add_model_flags(search)
    _add_guard_flags(search)
    _add_study_flags(search)
    _add_measure_flags(search, timeout_flag="--trial-timeout", max_seconds=SEARCH_WINDOW_S)
    _add_format(search)
