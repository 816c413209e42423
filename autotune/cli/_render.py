"""The one renderer: every command that prints results prints them through here, as
a table for people or as JSON/YAML (``-f/--format``) for programs. Reads typed
records only (``TrialRecord``, ``FrontRow``, ``TrialResult``); imports neither torch
nor PyG."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from autotune.config import short
from autotune.env import format_bytes, plural
from autotune.files import dump
from autotune.specs import CARRYOVER, baseline_metric
from autotune.study import drift_lines, metric_short, pm, ratio, seeds_per_s
from autotune.taskinfo import task_info

FORMATS = ("table", "json", "yaml")


def emit(blob: Any, fmt: str, table: Callable[[], str]) -> str:
    """``blob`` as JSON or YAML, or ``table()`` for ``fmt == 'table'``."""
    if fmt in ("json", "yaml"):
        return dump(blob, fmt).rstrip()
    return table()


# The Pareto front's columns, in every form it takes (the table of ``search`` and
# ``show``, the dashboard's note, the HTML report): name and text-table width; the
# metric column shows up only when a row has one, the config and the marks last.
FRONT_COLUMNS = (("trial", 5), ("{unit}", 13), ("±95%", 6), ("peak MiB", 9),
                 ("speed-up", 13), ("memory", 7), ("val {metric}", 12), ("config", 0),
                 ("marks", 0))


def _shown(rows) -> list[int]:
    """The indices of :data:`FRONT_COLUMNS` the front shows: all but the metric's
    unless a row has one."""
    metric = any(r.val_metric is not None for r in rows)
    return [i for i, (name, _) in enumerate(FRONT_COLUMNS)
            if metric or not name.startswith("val ")]


def front_columns(rows, task) -> tuple[list[str], list[list[str]]]:
    """The front's header and cells, formatted; ``task`` names the unit and metric
    (a :class:`autotune.taskinfo.TaskInfo`)."""
    shown = _shown(rows)
    header = [FRONT_COLUMNS[i][0].format(unit=task.unit, metric=task.metric) for i in shown]
    cells = [[str(r.trial), f"{r.throughput:,.0f}", pm(r.precision), f"{r.memory_mib:,.0f}",
              ratio(r.speedup, r.speedup_precision), ratio(r.memory_ratio),
              "-" if r.val_metric is None else f"{r.val_metric:.4f}", short(r.config),
              ", ".join(r.marks)] for r in rows]
    return header, [[row[i] for i in shown] for row in cells]


def infeasible(trials) -> str | None:
    """Why no measured trial of the space is feasible (each is below the accuracy
    guard or over the memory budget), or None when one is, or none was measured."""
    done = [t for t in trials if t.on_front_candidate]
    below = sum(t.below_guard for t in done)
    over = sum(t.over_budget for t in done)
    if not done or sum(t.below_guard or t.over_budget for t in done) < len(done):
        return None
    why = [f"{below} below the accuracy guard"] if below else []
    why += [f"{over} over the memory budget"] if over else []
    return f"none of the space's {len(done)} measured trials is feasible ({', '.join(why)})"


def _empty_front(trials) -> str:
    """Why the front holds nothing: no trial of the space has been measured in full,
    or each that was is below the accuracy guard or over the memory budget."""
    why = infeasible(trials)
    if why is None:
        return "Pareto front: no completed trial of the space yet"
    return (f"Pareto front: {why}: nothing to export; relax the guard or the budget, or "
            "search another space")


def front_table(rows, task, reference=None, trials=()) -> str:
    """The front as a text table, fastest first; ``reference``: the baseline's row
    where the front does not hold it, below the front. ``trials`` (records) say why
    an empty front is empty."""
    if not rows and reference is None:
        return "Pareto front: no completed trial yet"
    everything = [*rows, *([reference] if reference is not None else [])]
    header, cells = front_columns(everything, task)
    widths = [FRONT_COLUMNS[i][1] for i in _shown(everything)]

    def line(row: list[str], marks: str) -> str:
        fixed = " ".join(f"{c:>{w}}" for c, w in zip(row, widths) if w)
        return f"{fixed}  {row[-2]}" + (f"  <- {marks}" if marks else "")
    lines = ["Pareto front (fastest first):" if rows else _empty_front(trials),
             line(header, "")]
    lines += [line(c, c[-1]) for c in cells[:len(rows)]]
    if reference is not None:
        lines += ["reference:", line(cells[-1], cells[-1][-1])]
    return "\n".join(lines)


def trials_table(trials, task) -> str:
    """Every trial, one line each; ``task`` (a TaskInfo) names the unit."""
    lines = [f"All trials ({len(trials)}):",
             f"{'trial':>5} {'state':<8} {task.unit:>13} {'±95%':>6} "
             f"{'peak MiB':>9}  "
             "config / reason"]
    for r in trials:
        tp = f"{r.throughput:,.0f}" if r.throughput is not None else "-"
        mem = f"{r.memory_mib:,.0f}" if r.memory_mib is not None else "-"
        prec = pm(r.precision) if r.complete else "-"  # ±? as in the front: unknown
        what = short(r.config) if r.config else ""
        extra = " (baseline)" if r.baseline else " (control)" if r.control else ""
        if r.confirm is not None:
            extra += f" (confirmation {r.confirm['run']}, round {r.confirm['round'] + 1}, " \
                f"of #{r.confirm['of']})"
        extra += f" (prior {r.prior})" if r.prior else ""
        extra += f" (repeat of #{r.reused_from})" if r.reused_from is not None else ""
        extra += " SCREENED OUT" if r.screened else " IMPRECISE" if r.imprecise else ""
        extra += " DISTURBED" if r.disturbed else ""
        extra += f" [{r.fail_reason[:70]}]" if r.fail_reason else ""
        extra += f" [deferred: {r.deferred}]" if r.deferred else ""
        if r.validation:
            extra += f" (val {metric_short(task)} {r.val_metric:.4f}" + \
                (", below the accuracy guard)" if r.below_guard else ")")
        lines.append(f"{r.number:>5} {r.state:<8} {tp:>13} {prec:>6} {mem:>9}  {what}{extra}")
    return "\n".join(lines)


def trial_row(r) -> dict[str, Any]:
    """A trial for JSON/YAML output."""
    return {"trial": r.number, "state": r.state, "throughput": r.throughput,
            "memory_mib": r.memory_mib, "role": r.role, "baseline": r.baseline,
            "reused_from": r.reused_from,
            "reason": r.fail_reason, "validation": r.validation, "below_guard": r.below_guard,
            "precision": r.precision, "screened": r.screened, "imprecise": r.imprecise,
            "disturbed": r.disturbed, "load": r.window.load,
            "remeasured": r.window.remeasured, "prior": r.prior, "deferred": r.deferred,
            "control": r.control,
            "paired": r.paired, "confirm": r.confirm, "measured_at": r.measured_at,
            "config": r.config.to_dict() if r.config else None}


def result_text(result, trial_dir) -> str:
    """``autotune trial``'s table."""
    cfg = result.config
    lines = [f"trial  {result.status}" + (f": {result.reason}" if result.reason else ""),
             f"config batch {cfg.batch_size}, fanout {list(cfg.num_neighbors)}, "
             f"workers {cfg.num_workers}, compile {cfg.compile_mode}, shapes {cfg.shapes}, "
             f"amp {cfg.amp_dtype}, checkpointing {cfg.checkpointing}, sampling_backend {cfg.sampling_backend}, "
             f"device {cfg.device}, gpu_sampling {cfg.gpu_sampling}"
             + (f" ({cfg.feature_placement} features)" if cfg.gpu_sampling else "")
             + ", aggregation "
             f"{cfg.aggregation}; model {cfg.model} {cfg.num_layers}x{cfg.hidden_channels}"]
    if result.ok:
        lines += _measured_lines(result, format_bytes)
    elif result.stderr_tail:
        lines.append("stderr tail:\n" + result.stderr_tail.rstrip()[-1500:])
    lines.append(f"logs            {trial_dir}")
    return "\n".join(lines)


def precision(window) -> str:
    """'±1.8% (95%), reached 3% target in 12 blocks of 4 steps', or why not."""
    if window.precision is None:
        return "unknown (fewer than two blocks)"
    reached = f"±{100 * window.precision:.1f}% (95% CI of the throughput)"
    blocks = f"{len(window.blocks)} blocks of {window.block_steps} steps"
    if window.screened and window.screened_by in ("warm-up", "window"):
        return f"{reached}: SCREENED OUT in its {window.screened_by}, its best case under " \
               f"a third of the fastest config that fits ({blocks})"
    if window.screened:
        return f"{reached}: SCREENED at {100 * window.screen_precision:.0f}%, its best case " \
               f"cannot join the front ({blocks})"
    if window.imprecise:
        return f"{reached}: IMPRECISE, --max-seconds ran out before the " \
               f"{100 * window.target:g}% target ({blocks})"
    return f"{reached}, target {100 * window.target:g}% ({blocks})"


def profile_text(profile: dict) -> str:
    """``autotune trial --profile``'s part: where the trace is, and the top ops."""
    if "error" in profile:
        return f"profile failed: {profile['error']}"
    table = Path(profile["top_ops"]).read_text().rstrip()
    return (f"profile: {profile['steps']} steps after the window (not measured), sorted by "
            f"{profile['sorted_by']}\ntrace   {profile['trace']} (open in ui.perfetto.dev or "
            f"chrome://tracing)\n{table}")


def _measured_lines(result, format_bytes) -> list[str]:
    s, m, c, p, o = result.summary(), result.memory, result.compile, result.phases_s, \
        result.observed
    lines = [
        f"throughput      {result.throughput:,.0f} {seeds_per_s(result.config)}  "
        f"({s['sampled_nodes_per_s']:,.0f} sampled nodes/s, "
        f"{s['sampled_edges_per_s']:,.0f} edges/s)",
        f"precision       {precision(result.window)}",
        f"step time       p50 {s['step_p50_ms']:.1f} ms   p90 {s['step_p90_ms']:.1f} ms   "
        f"CV {100 * s['step_cv']:.1f}%   over {s['steps']} steps ({s['window_s']:.2f} s window)",
        f"peak RSS        window {format_bytes(m.peak_rss_window_bytes)}   warm-up "
        f"{format_bytes(m.peak_rss_warmup_bytes)}   probe step "
        f"{format_bytes(m.peak_rss_probe_bytes)} (no objective)   ({m.rss_covers})",
    ]
    if m.cuda_max_allocated_bytes is not None:
        lines.append(f"peak CUDA       allocated {format_bytes(m.cuda_max_allocated_bytes)}"
                     f"   reserved {format_bytes(m.cuda_max_reserved_bytes or 0)}")
    lines += [
        f"warm-up         {len(result.warmup_step_times_s)} steps, {p['warmup']:.2f} s; "
        f"compile {c.compile_time_s:.1f} s ({c.backend or 'not compiled'}), "
        f"{c.recompiles} recompiles, {c.graph_breaks} graph breaks"
        + ("; EAGER: recompile limit hit" if c.fell_back_to_eager else ""),
        f"start-up        {p['startup']:.2f} s ({o.trial_start}; imports {p['imports']:.2f} s), "
        f"dataset {p['dataset_load']:.2f} s, build {p['build']:.2f} s, loader workers "
        f"{p['loader_start']:.3f} s",
        f"observed        model {o.model} ({o.conv_layers} {'/'.join(o.conv_types)} layers), "
        f"sampling {o.sampling_backend}, threads {o.torch_threads}, conv dtype "
        f"{','.join(o.conv_output_dtypes)}, checkpointed layers {o.checkpointed_layers}, "
        f"saved for backward {format_bytes(o.saved_tensor_bytes)}, aggregated by "
        f"{', '.join(o.aggregation_ops) or 'no scatter or sparse op'}, dropout masks by "
        f"{', '.join(o.dropout_ops) or 'no op (no dropout)'}",
        f"malloc          {o.malloc or 'not recorded'}",
    ]
    return lines + [f"warning         {w}" for w in result.warnings]


def search_header(plan) -> str:
    """The lines a search prints before its first trial: the study, the dataset and
    the search's settings, then the notes."""
    from autotune.storage import masked  # imports Optuna: only when a search prints

    opts, stats = plan.options, plan.dataset_stats
    guard = opts.guard
    kind = ""
    if "target" in stats:
        kind = (f" ({stats['node_types']} node types, {stats['edge_types']} edge types; "
                f"target {stats['target']})")
    task = task_info(opts.dataset.task)
    if task.split:
        kind = f" ({task.name} split: {stats['num_train']:,} training {task.seeds})"
    if "num_graphs" in stats:
        kind = f" in {stats['num_graphs']:,} graphs ({stats['num_train']:,} for training)"
    line = (f"dataset {opts.dataset.name}: {stats['num_nodes']:,} nodes, "
            f"{stats['num_edges']:,} edges{kind}, {stats['num_features']} features; space "
            f"{opts.space.name}; optuna sampler {opts.optuna_sampler}; device {opts.device}")
    if opts.max_memory:
        line += f"; budget {format_bytes(opts.max_memory)}"
    if guard.ratio:
        line += f"; accuracy guard {guard.ratio:g} x baseline after {plural(guard.epochs, 'epoch')}"
    if guard.objective:
        line += "; objectives throughput, memory, accuracy"
    lines = [f"study {opts.study_name} in {masked(opts.storage)}", line]
    return "\n".join(lines + [note if note.startswith("warning: ") else f"note: {note}"
                              for note in plan.notes])


def search_summary(plan, result, export: str) -> str:
    """The lines a search prints at its end: what it did, drift, the guard, the front
    (and the reference row), where its answer is and ``export``, the command that
    exports it."""
    o, guard = result.outcome, plan.options.guard
    lines = []
    if o.interrupted:
        lines.append(f"marked interrupted trials {o.interrupted} as failed")
    if o.stale:
        lines.append(f"marked stale trials {o.stale} (no heartbeat) as failed; configs re-queued")
    if o.orphans:
        lines.append(f"marked orphan trials {o.orphans} (no worker) as failed")
    lines.append(f"\n{o.measured} measured, {o.reused} repeats (counted against nothing), "
                 f"{o.failed} failed, {o.controls} controls, {o.confirmed} confirmation "
                 f"measurements; {len(result.trials)} trials in the study")
    if o.explored:
        lines.append(f"the Optuna sampler repeated itself: {o.explored} proposals were drawn at random")
    lines += drift_lines(result.drift)  # why it stopped was said as it did
    task = task_info(plan.options.dataset.task)
    if guard.active:
        ref = result.guard or {}
        share = o.guard_s / max(o.elapsed_s, 1e-9)
        reference = f"{baseline_metric(ref):.4f}" if ref else "not measured"
        lines.append(f"accuracy guard: {plural(o.guarded, 'config')} trained for "
                     f"{ref.get('budget_s', 0):.1f} s each (the baseline's "
                     f"{plural(guard.epochs, 'epoch')}, validation {task.metric} {reference}); "
                     f"{o.guard_violations} below the guard; guard time {o.guard_s:.0f} s "
                     f"= {100 * share:.0f}% of this search's {o.elapsed_s:.0f} s")
    lines.append(front_table(result.front, task, result.reference, result.trials))
    lines.append(f"\npareto.yaml: {result.pareto_path}\nexport: " + (
        export or "nothing to export yet: run the same command again to go on"))
    return "\n".join(lines)


def search_blob(result) -> dict[str, Any]:
    """A search's result as ``--format json`` prints it."""
    o = result.outcome
    return {"study": result.study_name, "storage": result.storage,
            "baseline_trial": result.baseline.number if result.baseline else None,
            "knee_trial": result.knee.number if result.knee else None,
            "default_trial": result.default.number if result.default else None,
            "measured": o.measured, "reused": o.reused, "failed": o.failed,
            "controls": o.controls, "confirmation_measurements": o.confirmed,
            "confirmation_cut": o.confirm_cut or None, "explored": o.explored,
            "stopped": o.stopped or None, "elapsed_s": o.elapsed_s,
            "pareto": [r.to_dict() for r in result.front],
            "reference": result.reference.to_dict() if result.reference else None,
            "drift": result.drift,
            "trials": [trial_row(t) for t in result.trials]}


def train_summary(result, measured: dict | None, *, epochs: int, config_path: str,
                  save: str | None = None) -> tuple[dict, list[str]]:
    """The JSON blob and the closing lines of ``autotune train``: the best epoch, and
    the throughput achieved against the one its trial measured (``measured``, from
    the export), with a word on why where the ratio lies outside
    :data:`autotune.specs.CARRYOVER`."""
    low, high = CARRYOVER
    best, achieved, unit = result.best, result.throughput, result.unit
    ratio = achieved / measured["throughput"] if measured else None
    which = "median of epochs 2-" + str(epochs) if epochs > 1 else "epoch 1"
    metric = result.metric
    lines = [f"best validation {metric} {best.val_metric:.4f} at epoch {best.epoch} (test "
             f"{metric} {best.test_metric:.4f})" + (f"; its weights saved to {save}"
                                               if save else "")]
    line = f"throughput: achieved {achieved:,.0f} {unit} ({which})"
    if measured:
        line += (f"; trial #{measured['trial']} measured {measured['throughput']:,.0f} = "
                 f"{ratio:.2f}x")
    else:
        line += f"; no measurement of {config_path} on this dataset and device to compare with"
    if ratio is not None and ratio < low:
        lines.append(f"why {ratio:.2f}x (slower): a trial times training steps only, after a "
                     f"warm-up; an epoch here ({best.steps} steps) also holds loader start-up, "
                     "the last partial batch and the epoch's end, and short epochs are noisy")
    elif ratio is not None and ratio > high:
        lines.append(f"why {ratio:.2f}x (faster): the trial was measured under other "
                     "conditions: other processes on the machine then, drift over the "
                     "minutes between, or a screened window; measure both now, side by side, "
                     "to compare (autotune trial --config of each)")
    train_s, eval_s = result.training.train_s, result.training.eval_s
    if train_s + eval_s > 0:
        lines.append(f"time: training {train_s:.1f} s, evaluation {eval_s:.1f} s "
                     f"({100 * eval_s / (train_s + eval_s):.0f}% of the epochs' time)")
    lines.append(line)
    if result.tuning is not None:
        lines += result.tuning.lines()
    blob = {**result.to_dict(), "measured": measured, "achieved_over_measured": ratio}
    return blob, lines


