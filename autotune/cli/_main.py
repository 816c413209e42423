"""The ``autotune`` command: each subcommand's flags (:mod:`autotune.cli._flags`) parsed,
the library called in a short function, the result rendered (:mod:`autotune.cli._render`).
torch and PyG are imported only inside commands, so ``autotune --help`` stays fast."""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from autotune.cli._dashboard import dashboard_storage, serve
from autotune.cli._flags import EXIT_BAD_INPUT, STORAGE_ENV, STUDIES_ENV, build_parser  # noqa: F401
from autotune.cli._render import (
    drift_lines,
    emit,
    front_table,
    infeasible,
    profile_text,
    result_text,
    search_blob,
    search_header,
    search_summary,
    short,
    train_summary,
    trial_row,
    trials_table,
)
from autotune.config import one_line, with_model
from autotune.export import Export, read_export
from autotune.env import clock as clock_text, end_quickly, make_writable_dir, parse_bytes, plural
from autotune.errors import AutotuneError, ConfigError, GuardError
from autotune.files import inductor_cache_dir
from autotune.logging import enable_default_handler
from autotune.specs import STUDIES_DIR, MeasureSpec, TrialLimits, check_limits
from autotune.study import SEARCH_OPTIONS, _records as rec, drifts
from autotune.taskinfo import DEFAULT_TASK, task_info
from autotune.trial import ProfileSpec, check_profile_folder

EXIT_TRIAL_FAILED = 1


def _measure_and_limits(args: argparse.Namespace):
    limit, gpu = args.memory_limit, args.gpu_memory_limit
    limits = TrialLimits(timeout_s=args.trial_timeout, memory_limit_bytes=None if limit is None
                         else parse_bytes(limit, option="--memory-limit"),
                         gpu_memory_limit_bytes=None if gpu is None
                         else parse_bytes(gpu, option="--gpu-memory-limit"))
    measure = MeasureSpec(warmup_steps=args.warmup, min_warmup_s=args.warmup_time,
                          min_steps=args.steps,
                          max_window_s=args.max_seconds, precision=args.precision or
                          MeasureSpec.precision, **({} if args.max_busy is None else
                                                   {"max_busy": args.max_busy}))
    return measure, limits


def main(argv: list[str] | None = None) -> int:
    end_quickly()
    parser = build_parser()
    args = parser.parse_args(argv)
    _current_folder_on_path()
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    import logging
    import warnings

    debug = getattr(args, "debug", False)
    enable_default_handler(logging.DEBUG if debug else logging.INFO)
    try:
        _quiet_optuna()
        with warnings.catch_warnings():
            if not debug:  # a library's warning as one line, not a site-packages path
                warnings.showwarning = _one_line_warning
            return COMMANDS[args.command](args)
    except GuardError as exc:  # the input was fine; the baseline's guard training was not
        if debug:
            raise
        print(f"autotune: accuracy guard: {one_line(exc)}", file=sys.stderr)
        return EXIT_TRIAL_FAILED
    except AutotuneError as exc:
        if debug:
            raise
        print(f"autotune: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        print("autotune: interrupted", file=sys.stderr)
        return _interrupted_exit(exc)
    except BrokenPipeError:  # `autotune show | head`: the reader left, as with any CLI tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a scheduler, ``kill``), handled as Ctrl-C is: the running
    trial is stopped, recorded and queued again; the command exits 143."""


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def _interrupted_exit(exc: KeyboardInterrupt) -> int:
    return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def _current_folder_on_path() -> None:
    """``--model mymodels:factory`` and ``--dataset mydata:load`` import from the folder
    the command runs in, as ``python -m`` would: the ``autotune`` script's own path
    holds only its bin folder. Trial processes inherit the path (runner._child_path)."""
    here = os.getcwd()
    if not any(os.path.abspath(p or os.curdir) == here for p in sys.path):
        sys.path.insert(0, here)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"autotune: warning: {one_line(message)} ({category.__name__})",
          file=sys.stderr)


def _quiet_optuna() -> None:
    """The commands print their own progress: Optuna's INFO lines would repeat it. A
    command may set Optuna's process-wide log level; the library never does."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _writable_dir(path: Path, option: str) -> Path:
    return make_writable_dir(path, option)


def _dataset_of(args: argparse.Namespace, recorded: dict | None, task: str,
                named: bool = False):
    """The dataset the flags name, the export's (``recorded``) where they do not;
    ``named``: one of them must name it (else the default, the full-scale synthetic
    graph, would be generated unasked)."""
    from autotune.data import export_dataset

    if named and args.dataset is None and not (recorded or {}).get("name"):
        raise ConfigError(f"{args.config} names no dataset (a hand-written config, or an "
                          "export of a run of your own loop and data): pass --dataset, e.g. "
                          "--dataset Cora --root data")
    return export_dataset(recorded, task, name=args.dataset, root=args.root, scale=args.scale,
                          seed=args.data_seed, edge_type=args.link_edge_type)


def cmd_trial(args: argparse.Namespace) -> int:
    from autotune.data import same_dataset
    from autotune.pipeline import check_config, check_dataset
    from autotune.study import default_config
    from autotune.trial import run_trial

    export = read_export(args.config) if args.config else Export(default_config())
    config = export.config
    if args.device:
        config = config.replace(device=args.device)
    config = with_model(config, model=args.model, hidden=args.hidden, layers=args.layers)
    if args.recompile_limit is not None:
        config = config.replace(recompile_limit=args.recompile_limit)
    config = _with_task(config, args)
    check_config(config)
    measure, limits = _measure_and_limits(args)
    check_limits(limits, config.device)
    profile = _profile_spec(args)
    trial_dir = _writable_dir(Path(args.studies_dir) / "trials", "--studies-dir") / \
        time.strftime(f"%Y%m%d-%H%M%S-{os.getpid()}")
    recorded = export.dataset_ref
    ref = _dataset_of(args, recorded, config.task)
    if recorded is not None:
        same_dataset(ref, recorded, args.config)
    check_dataset(config, ref.prepare())
    result = run_trial(config, dataset=ref, trial_dir=trial_dir, measure=measure,
                       limits=limits, inductor_cache=inductor_cache_dir(args.studies_dir),
                       profile=profile)
    print(emit(result.to_dict(), args.format, lambda: result_text(result, trial_dir) + (
        "\n" + profile_text(result.profile) if result.profile else "")))
    profiled = profile is None or not result.ok or "error" not in result.profile
    return 0 if result.ok and profiled else EXIT_TRIAL_FAILED


def _with_task(config, args: argparse.Namespace):
    """``config`` with the task flags given (--task, --time-attr, --temporal-strategy)."""
    changes = {"task": args.task, "time_attr": args.time_attr,
               "temporal_strategy": args.temporal_strategy}
    return config.replace(**{k: v for k, v in changes.items() if v is not None})


def _profile_spec(args: argparse.Namespace):
    if args.profile is None:
        return None

    return ProfileSpec(str(check_profile_folder(args.profile).resolve()), steps=args.profile_steps)


def cmd_train(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from autotune.data import same_dataset
    from autotune.pipeline import TrainingInterrupted, check_config
    from autotune.tuning import train

    export = read_export(args.config)
    config, measured_on = export.config, export.config.device
    if args.device:
        config = config.replace(device=args.device)
    config = _with_task(config, args)
    check_config(config)
    tune = _tune_spec(args)
    if args.save:
        _writable_dir(Path(args.save).parent, "--save")
    recorded, measured = export.dataset_ref, export.measured
    ref = _dataset_of(args, recorded, config.task, named=True)
    recorder = _run_recorder(args, config, ref) if tune else None
    if not (same_dataset(ref, recorded, args.config) and config.device == measured_on):
        measured = None
    task, table = task_info(config), args.format == "table"
    if table:
        print(f"training {short_config(config)} on {ref.name} for {plural(args.epochs, 'epoch')}" +
              (f", tuning in at most {tune.share:.0%} of its steps (its windows go to study "
               f"{recorder.name})" if tune else ""))
        print(f"{'epoch':>5} {'loss':>7} {'train s':>8} {'eval s':>7} {task.unit:>13} "
              f"{'val ' + task.metric:>12} {'test ' + task.metric:>12}")
    with tqdm(total=args.epochs, desc="training", unit="epoch", leave=False,
              disable=not sys.stderr.isatty()) as bar:  # a bar on a terminal only
        def row(e) -> None:
            bar.update()
            if table:
                bar.write(f"{e.epoch:>5} {e.loss:>7.4f} {e.train_s:>8.2f} {e.eval_s:>7.2f} "
                          f"{e.seeds_per_s:>13,.0f} {e.val_metric:>12.4f} {e.test_metric:>12.4f}",
                          file=sys.stdout)
        try:
            result = train(config, ref, epochs=args.epochs, save=args.save, on_epoch=row,
                           inductor_cache=inductor_cache_dir(args.studies_dir),
                           tune=tune, on_line=lambda line: bar.write(
                               line, file=sys.stdout if table else sys.stderr),
                           on_window=None if recorder is None else recorder.window)
        except TrainingInterrupted as stop:
            return _train_interrupted(stop, recorder, args.epochs)
    if recorder is not None:
        recorder.finish(result.tuning, dataset=result.dataset)
    blob, lines = train_summary(result, measured, epochs=args.epochs, config_path=args.config,
                                save=args.save)
    print(emit(blob, args.format, lambda: "\n".join(lines)))
    return 0


def _train_interrupted(stop, recorder, epochs: int) -> int:
    """Ctrl-C (or SIGTERM) stopped ``autotune train``: one line of what it saved, the
    tuned run's log stored where a window was; exit 130 (or 143)."""
    recorded = recorder is not None and recorder.started
    if recorded:
        recorder.finish(stop.tuning)
    best = stop.best
    saved = "nothing saved: no epoch had ended" if best is None else \
        f"the best epoch so far ({best.epoch}, val {best.val_metric:.4f})" + \
        (f" saved to {stop.saved}" if stop.saved else " (no --save)")
    where = f"; study {recorder.name} holds its windows" if recorded else ""
    print(f"autotune: interrupted after {stop.epochs} of {plural(epochs, 'epoch')}; {saved}{where}",
          file=sys.stderr)
    return _interrupted_exit(stop.__cause__)


def _run_recorder(args: argparse.Namespace, config, ref):
    """The recorder of a tuned run's windows, in a new study (``--study-name``)."""
    from autotune.env import fingerprint
    from autotune.study import RunRecorder, default_storage
    from autotune.study._options import check_study_name, default_study_name

    name = check_study_name(args.study_name or default_study_name(ref.name, config.device) +
                            time.strftime("-tuned-%Y%m%d-%H%M%S"))
    url = args.storage or default_storage(
        _writable_dir(Path(args.studies_dir), "--studies-dir"), name)
    return RunRecorder(name, url, dataset_ref=ref.record(), env=fingerprint(config.device),
                       device=config.device)


def _tune_spec(args: argparse.Namespace):
    """``--tune``'s spec, or None; its other flags without it are an error."""
    from autotune.tuning import TuneSpec

    if not args.tune:
        if args.tune_share is not None or args.tune_precision or args.tune_compile or \
                args.study_name:
            raise ConfigError("--tune-share, --tune-precision, --tune-compile and --study-name "
                              "need --tune")
        return None
    share = TuneSpec.share if args.tune_share is None else args.tune_share
    return TuneSpec(share=share, precision=args.tune_precision,
                    compile=True if args.tune_compile else None)


def short_config(config) -> str:
    return f"{config.model} {config.num_layers}x{config.hidden_channels}, " + \
        short(config.to_dict())


def _search_options(args: argparse.Namespace) -> dict[str, Any]:
    """The flags of ``autotune search`` as :func:`autotune.search`'s options: each
    option of ``SEARCH_OPTIONS`` under its own name, and the flags that build the
    dataset, the space, the measurement, the limits and the guard."""

    measure, limits = _measure_and_limits(args)
    return dict(dataset=args.dataset or "synthetic", root=args.root, precision=args.precision,
                scale=1.0 if args.scale is None else args.scale,
                data_seed=args.data_seed or 0, task=args.task or DEFAULT_TASK,
                link_edge_type=args.link_edge_type, time_attr=args.time_attr,
                temporal_strategy=args.temporal_strategy or "uniform", model=args.model,
                hidden=args.hidden, layers=args.layers, recompile_limit=args.recompile_limit,
                space=args.space, device=args.device, accuracy_guard=args.accuracy_guard,
                guard_epochs=args.guard_epochs, objectives=args.objectives,
                study_name=args.study_name, storage=args.storage,
                studies_dir=args.studies_dir, measure=measure, limits=limits,
                **{o.name: getattr(args, o.name) for o in SEARCH_OPTIONS})


def cmd_search(args: argparse.Namespace) -> int:
    from autotune.cli._report import save_study_note
    from autotune.study import Ticker, baseline_record, interrupted_note, prepare_search

    plan = prepare_search(**_search_options(args), progress=False,  # the ticker's, below
                          on_trial_done=save_study_note)
    if args.format == "table":
        print(search_header(plan))
        ticker = Ticker(sys.stdout, baseline_record(plan.study))
        plan = dataclasses.replace(plan, progress=ticker.done, on_trial_start=ticker.start,
                                   on_note=ticker.note)
    try:
        result = plan.run()
    except KeyboardInterrupt as exc:
        what = interrupted_note(plan.study) or "the running trial is queued again"
        print(f"autotune: interrupted; {what}: run the same command again to resume "
              f"study {plan.options.study_name}", file=sys.stderr)
        return _interrupted_exit(exc)
    export = _command("autotune", "export", "--study-name", result.study_name,
                      *_study_flags(args), "--out", "best.yaml") if result.default else None
    print(emit(search_blob(result), args.format,
               lambda: search_summary(plan, result, export)))
    return _too_short(plan, result) or _nothing_feasible(plan, result)


def _too_short(plan, result) -> int:
    """Exit 1, with one line, when ``--budget`` ran out before any config but the
    baseline was measured: nothing was compared."""
    budget = plan.options.budget
    base_key = result.baseline.config_key if result.baseline is not None else None
    others = [t for t in result.trials if t.search_point and not t.baseline and t.complete
              and t.reused_from is None and t.config_key != base_key]
    if budget is None or others or plan.options.space.size() < 2:
        return 0
    base = result.baseline
    if base is not None and base.complete and base.measured_at:
        what = (f"measured no config but the baseline (which took "
                f"{clock_text(base.measured_at[1] - base.measured_at[0])})")
    else:
        what = "ran out before the baseline was measured"
    print(f"autotune: --budget {clock_text(budget)} {what}: nothing was compared; run the "
          "same command again with a longer --budget (the study goes on)", file=sys.stderr)
    return EXIT_TRIAL_FAILED


def _nothing_feasible(plan, result) -> int:
    """Exit 1, with one line, when the memory budget or the accuracy guard left no
    measured trial of the space feasible: nothing to export."""
    budget, done = plan.options.budget_mib, [t for t in result.trials if t.complete]
    if result.front or not done:
        return 0
    if budget is not None and all(t.memory_mib > budget for t in done):
        leanest = min(t.memory_mib for t in done)
        print(f"autotune: every completed trial is over --max-memory {budget:,.0f} MiB (the "
              f"leanest took {leanest:,.0f} MiB); raise the budget or search leaner configs",
              file=sys.stderr)
        return EXIT_TRIAL_FAILED
    why = infeasible(result.trials)
    if why is None:
        return 0
    print(f"autotune: {why}: nothing to export; relax the guard or the budget, or search "
          "another space", file=sys.stderr)
    return EXIT_TRIAL_FAILED


class _StorageVariable(str):
    """A storage URL holding a password, in a printed command: never printed, read
    from $AUTOTUNE_STORAGE instead (see :func:`_command`)."""


def _study_flags(args: argparse.Namespace) -> list[str]:
    """The flags that find this study again, for a printed command."""
    from autotune.storage import masked

    if args.storage:
        secret = masked(args.storage) != args.storage
        return ["--storage", _StorageVariable(masked(args.storage)) if secret else args.storage]
    if args.studies_dir != STUDIES_DIR:
        return ["--studies-dir", str(args.studies_dir)]
    return []


def _command(*argv: str) -> str:
    """A command as it pastes into a shell: every argument quoted (``shlex.quote``),
    and a storage URL with a password as ``"$AUTOTUNE_STORAGE"``, with a word saying
    so."""
    words = [f'"${STORAGE_ENV}"' if isinstance(a, _StorageVariable) else shlex.quote(a)
             for a in argv]
    note = f"  (set {STORAGE_ENV} to the storage URL: its password is never printed)" \
        if any(isinstance(a, _StorageVariable) for a in argv) else ""
    return " ".join(words) + note


def _load(args: argparse.Namespace):
    """The study the flags name, or the only one in the storage or studies folder."""
    from autotune.study import load_study, only_study

    name = args.study_name or only_study(storage=args.storage, studies_dir=args.studies_dir)
    return load_study(name, storage=args.storage, studies_dir=args.studies_dir)


def cmd_show(args: argparse.Namespace) -> int:
    from autotune.storage import masked
    from autotune.study import is_run, study_front, study_reference

    study, url = _load(args)
    if is_run(study):
        return _show_run(study, url, args)
    trials, s = rec.records(study), rec.StudyRecord.from_study(study)
    front, reference = study_front(study, trials, s), study_reference(study, trials, s)
    references = drifts(trials)
    blob = {"study": study.study_name, "storage": masked(url), "task": s.task.name,
            "unit": s.task.unit, "baseline_trial": s.baseline,
            "pareto": [r.to_dict() for r in front],
            "reference": reference.to_dict() if reference else None, "controls": references,
            "trials": [trial_row(t) for t in trials]}
    print(emit(blob, args.format, lambda: "\n".join(
        [f"study {study.study_name} in {masked(url)} (task {s.task.name})",
         front_table(front, s.task, reference, trials), *drift_lines(references), "",
         trials_table(trials, s.task)])))
    return 0


def _show_run(study, url: str, args: argparse.Namespace) -> int:
    """``autotune show`` of a training run that tuned itself (``train --tune``)."""
    from autotune.storage import masked
    from autotune.study import run_lines, run_report

    blob = {"storage": masked(url), **run_report(study)}
    print(emit(blob, args.format, lambda: "\n".join(
        [f"study {study.study_name} in {masked(url)} (task {blob['task']}): a training run "
         "that tuned itself", *run_lines(blob)])))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autotune.study import confirmation_words, write_export

    out = Path(args.out)
    if args.out != "-" and out.suffix not in (".yaml", ".yml", ".json"):
        raise ConfigError(f"--out must end in .yaml, .yml or .json, or be - for stdout "
                          f"(got '{out}')")
    study, url = _load(args)
    if args.out == "-":  # the export itself on stdout, YAML unless -f json asks otherwise
        from autotune.files import dump
        from autotune.study import export_blob

        blob, t = export_blob(study, args.pick, url, "-")
        print(dump(blob, "json" if args.format == "json" else "yaml"), end="")
        return 0
    blob, _ = write_export(study, args.pick, url, out)
    m, run = blob["measured"], blob["measured"].get("tuned_run")
    pick = "the tuned run's winner" if run else args.pick
    print(emit({"trial": m["trial"], "pick": pick, "out": str(out), **blob}, args.format,
               lambda: f"exported trial {m['trial']} ({pick}): "
                       f"{m['throughput']:,.0f} {m['unit']}" + (
                           " (over its windows)" if run else
                           f", {m['peak_memory_mib']:,.0f} MiB "
                           f"({confirmation_words(m['confirmed'])})") + f" -> {out}"
                       + (f"\nreproduce: {blob['reproduce']}" if blob["reproduce"] else
                          f"\ntrain it: autotune train --config {out} --dataset NAME (the run "
                          "was your own loop on your own data: no dataset is recorded)")))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from autotune.cli._report import report_of, report_paths, write_report
    from autotune.study import is_run

    out = Path(args.out)
    page = report_paths(out)[0]
    _writable_dir(page.parent, "--out")
    study, url = _load(args)
    if is_run(study):
        raise ConfigError(f"study {study.study_name!r} records a training run that tuned "
                          f"itself: 'autotune show --study-name {study.study_name}' says what "
                          "it did, 'autotune dashboard' draws its windows")
    other = report_of(page)
    if other is not None and other != study.study_name:
        what = f"study {other}'s report" if other else "a file that is no autotune report"
        raise ConfigError(f"--out: {page} holds {what}; pass another --out, or delete it")
    report = write_report(study, out, url=url)
    blob = {"html": str(report.html), "images": {k: str(v) for k, v in report.images.items()},
            "not_drawn": report.not_drawn}
    lines = [f"{name:<11} {path}" for name, path in report.images.items()]
    lines += [f"{name:<11} not drawn: {why}" for name, why in report.not_drawn.items()]
    print(emit(blob, args.format, lambda: "\n".join(lines + [f"report      {report.html}"])))
    return 0


def cmd_studies(args: argparse.Namespace) -> int:
    from autotune.storage import masked
    from autotune.study import study_rows

    rows = study_rows(storage=args.storage, studies_dir=args.studies_dir)
    where = masked(args.storage) if args.storage else f"'{args.studies_dir}'"
    print(emit(rows, args.format, lambda: _studies_table(rows, where)))
    return 0


def _studies_table(rows: list[dict], where: str) -> str:
    lines = [f"{'study':<28} {'task':<4} {'trials':>6} {'best throughput':>28} "
             f"{'default':<16} {'last trial':<16}  storage"]
    for r in rows:
        best = f"{r['best']:,.0f} {r['unit']}" if r["best"] else "-"
        default = "tuned run" if r["kind"] == "tuned run" else "-" \
            if r["default_trial"] is None else f"#{r['default_trial']} " + (
            (r["confirmation"] or "unconfirmed").split(" in ")[0].split(":")[0])
        lines.append(f"{r['study']:<28} {r['task']:<4} {r['trials']:>6} {best:>28} "
                     f"{default:<16} {r['last_trial'] or '-':<16}  {r['storage']}")
    return "\n".join(lines) if rows else (f"no studies in {where} (pass --studies-dir or "
                                          f"--storage, or ${STUDIES_ENV}/${STORAGE_ENV})")


def cmd_delete(args: argparse.Namespace) -> int:
    from autotune.study import delete_study, deletion

    study, url = _load(args)
    if not args.yes:
        raise ConfigError(f"this would delete {deletion(study, url, args.studies_dir)}; "
                          "pass --yes to delete it")
    blob = delete_study(study, url, args.studies_dir)
    what = blob.pop("what")
    print(emit(blob, args.format, lambda: f"deleted {what}"))
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from autotune.storage import masked

    url = dashboard_storage(storage=args.storage, study_name=args.study_name,
                            studies_dir=args.studies_dir)
    serve(url, study_name=args.study_name, host=args.host, port=args.port,
          on_ready=lambda at: print(f"optuna-dashboard for {masked(url)}\n"
                                    f"open {at.url}  (Ctrl-C stops it)", flush=True))
    print("dashboard stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "search": cmd_search, "trial": cmd_trial, "show": cmd_show, "export": cmd_export,
    "train": cmd_train, "report": cmd_report, "studies": cmd_studies, "delete": cmd_delete,
    "dashboard": cmd_dashboard}
