"""A search's progress as it runs: a line as each trial starts and ends (the CLI's
stdout, the Python API's stderr by default), the baseline's drift, and the small
formats those lines share with the renderer above (ratios, precisions). Imports
neither torch nor PyG."""
from __future__ import annotations

import warnings
from typing import TextIO

from autotune.config import short
from autotune.env import clock, plural
from autotune.taskinfo import task_info
from autotune.trial import Known, busy_note
from autotune.study._paired import paired_decision, who_took


def ratio(value: float | None, precision: float | None = None) -> str:
    """'1.53x', or with the ratio's relative 95% half-width '1.53x ±0.06'."""
    if value is None or value != value:
        return "-"
    if precision is None:
        return f"{value:.2f}x"
    return f"{value:.2f}x ±{value * precision:.2f}"


def pm(precision: float | None) -> str:
    return "±?" if precision is None else f"±{100 * precision:.1f}%"


def seeds_per_s(config) -> str:
    """The throughput's unit for a config's task: seed nodes/s or seed edges/s."""
    return task_info(config).unit


def progress_line(n: int, total: int, record, elapsed: float, eta: float,
                  base=None) -> str:
    """One line per finished trial: n/N, the config, its figures with their precision
    and speed-up over ``base`` (the baseline's record), status, the trial's time split
    (start-up, build, warm-up and compile, window), time and ETA."""
    if record.values:
        figures = (f"{record.values[0]:>9,.0f} {seeds_per_s(record.config)} "
                   f"{pm(record.precision):>6} "
                   f"{_edges(record.summary)}{record.values[1]:>7,.0f} MiB")
        if record.control and record.paired:
            figures += f" drift {_drift(record.paired['speedup'] - 1, record.paired['interval'])}"
        elif not record.baseline and record.confirm is None:
            figures += f" {ratio(*record.paired_speedup(base)):>12}"
    else:
        figures = f"{'-':>29} {'-':>11}"
    where = f"[{n:>3}/{total}]" if total != float("inf") else f"[{n:>3}]"
    if record.search_point and not record.counts:  # a repeat, a trial cut short
        where = f"[{'-':>3}/{total}]" if total != float("inf") else f"[{'-':>3}]"
    if record.control:
        where = "[control]"
    elif record.confirm is not None and "pairs" in record.confirm:
        where = f"[paired] of #{record.confirm['of']}"
        figures += paired_text(record.confirm["pairs"])
    elif record.confirm is not None:
        where = f"[round {record.confirm['round'] + 1}] of #{record.confirm['of']}"
    return (f"{where} #{record.number:<3} {short(record.config) if record.config else '':<52} "
            f"{figures} | {_status(record)}{_split(record)} | {clock(elapsed)} "
            f"ETA {clock(eta)}")


def paired_text(figure: dict) -> str:
    """A paired confirmation's figure for a candidate: its speed-up and interval, its
    pairs and verdict (and pairs the machine's load hit), or the reference's windows
    (and a try of another window length that went back)."""
    ratios = figure.get("ratios")
    if not ratios:
        went = ""
        if figure.get("went_back"):  # a try of another window length went back
            tried, back = (Known.from_dict(k) for k in figure["went_back"])
            went = (f"; {tried.window_s:g} s tried, back to {back.window_s:g} s: its pairs "
                    f"costlier than this machine's record ({tried.words()}, {tried.dof} "
                    f"degrees of freedom; {back.words()}, {back.dof})")
        return f"  reference, {len(figure.get('rates', ()))} windows{went}"
    stopped = figure.get("stopped", "")
    why = {"time": "out of time"}.get(stopped, stopped) if stopped not in ("decided", "") \
        else figure.get("verdict", "")
    busy = figure.get("busy_pairs", 0) + figure.get("redone", 0)
    return (f"  {paired_decision(figure).text()} over {plural(len(ratios), 'pair')}: {why}" +
            (f"; the machine was busy in {plural(busy, 'pair')} "
             f"({who_took(figure.get('taken_by', [])) or 'unnamed'})" if busy else ""))


def _drift(change: float, interval: float | None) -> str:
    return f"{100 * change:+.1f}%" + ("" if interval is None else f" ±{100 * interval:.1f}%")


def drift_lines(references: list[dict]) -> list[str]:
    """The baseline's measurements in time order and the drift between them (from
    :func:`autotune.study._paired.drifts`): one line, or none with a single one."""
    if len(references) < 2:
        return []
    steps = ", ".join(f"#{r['trial']} {r['throughput']:,.0f}" + (
        "" if r["drift"] is None else f" ({_drift(r['drift'], r['interval'])})")
        for r in references)
    rates = [r["throughput"] for r in references]
    return [f"drift: the baseline measured {len(references)} times: {steps}; spread "
            f"{100 * (max(rates) / min(rates) - 1):.1f}%"]


class Ticker:
    """A search's progress: a line when a trial starts, rewritten in place by its
    result on a terminal; both as plain lines elsewhere (``stream``: the CLI's
    stdout, the Python API's stderr). ``base``: the baseline's record, for the
    speed-ups, when a resumed search has one already."""

    CLEAR = "\r\x1b[2K"

    def __init__(self, stream: TextIO, base=None, confirmation: int | None = None) -> None:
        if confirmation is not None:
            warnings.warn("Ticker(confirmation=) is no longer read: the search prints its "
                          "estimate after the baseline as a note (Ticker.note)", FutureWarning,
                          stacklevel=2)
        self.stream, self.base = stream, base
        self.terminal = stream.isatty()

    def start(self, number: int, config) -> None:
        line = f"  -> #{number:<3} measuring {short(config.to_dict())} ..."
        print(line, end="" if self.terminal else "\n", file=self.stream, flush=True)

    def done(self, n: int, total: int, record, elapsed: float, eta: float) -> None:
        if record.baseline and record.complete:
            self.base = record
        print((self.CLEAR if self.terminal else "") +
              progress_line(n, total, record, elapsed, eta, self.base), file=self.stream,
              flush=True)

    def note(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def _edges(summary: dict) -> str:
    """Sampled edges/s, the unit published samplers quote (Quiver, cuGraph)."""
    rate = summary.get("sampled_edges_per_s")
    return "" if rate is None else f"({rate / 1e6:,.1f}M edges/s) "


def _split(record) -> str:
    p = record.phases_s
    if "startup" not in p or record.reused_from is not None:
        return ""
    timed = f"window {p['window']:.1f}s" if "window" in p else \
        f"pairs {p.get('measure_total', 0.0) - p['warmup']:.1f}s"
    return (f" | start {p['startup']:.2f}s, build {p['dataset_load'] + p['build']:.2f}s, "
            f"warm-up {p['warmup']:.1f}s, {timed}")


def _status(record) -> str:
    status = record.status or "?"
    if record.reused_from is not None:
        status = f"repeat of #{record.reused_from}"
    elif record.fail_reason:
        status += f": {record.fail_reason[:60]}"
    elif record.eager:
        status += ", eager: recompile limit hit"
    if record.screened:
        far = record.window.screened_by in ("warm-up", "window")
        status += ", screened out" + (f" in its {record.window.screened_by}: under a third "
                                      "of the best" if far else "")
    elif record.imprecise:
        status += ", IMPRECISE"
    busy = busy_note(record.window)
    status += f", {busy}" if busy else ""
    if record.prior:
        status += f", prior {record.prior}"
    if record.explored:
        status += ", drawn at random (the Optuna sampler repeated itself)"
    if record.validation:
        status += (f", val {metric_short(task_info(record.config))} {record.val_metric:.3f} "
                   f"({record.guard_ratio:.3f}x)")
        if record.below_guard:
            status += " BELOW GUARD"
    return status


def metric_short(task) -> str:
    """``acc`` for accuracy, else the metric's name (``ROC-AUC``)."""
    return "acc" if task.metric == "accuracy" else task.metric
