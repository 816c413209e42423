"""What a study's answer looks like: the Pareto front with ratios against the
baseline, ``pareto.yaml``, and the export of a pick (its figures gathered here, the
file written by :mod:`autotune.export`), each rewritten atomically so a crash never
loses the current answer. Imports neither torch nor PyG."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.config import TrialConfig
from autotune.export import export_document, write_export_file
from autotune.errors import ConfigError
from autotune.specs import CONFIRM_PRECISION
from autotune.files import atomic_write, dump
from autotune.storage import masked
from autotune.study import _records as rec
from autotune.study._paired import Confirmed, confirmed, drifts, left_out, places
from autotune.study._pareto import PICKS, Point, best_under, default_pick, front, knee, pick
from autotune.study._records import StudyRecord, TrialRecord
from autotune.study._space import eager_twin as twin_of
from autotune.study._tuned import run_report

DEFAULT = "default"  # the mark of the default pick, which goes on to say why


@dataclass(frozen=True)
class FrontRow:
    """One trial of the front, fastest first, with ratios against the baseline: the
    confirmed figures where the confirmation measured it (``confirmed``), else its
    search figures and its speed-up paired with the control measured before it."""

    trial: int
    throughput: float
    memory_mib: float
    speedup: float | None
    memory_ratio: float | None
    val_metric: float | None  # the task's validation metric (accuracy or ROC-AUC)
    marks: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    precision: float | None = None  # relative 95% half-width of the throughput
    speedup_precision: float | None = None  # of the speed-up, the baseline's included
    payback_epochs: float | None = None  # compiled: compile time / time saved per epoch
    confirmed: dict[str, Any] | None = None  # Confirmed.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def confirmation(self) -> str | None:
        """``confirmed in N rounds...``, ``unconfirmed: why``, or None where no
        confirmation ran."""
        return next((m for m in self.marks if m.startswith(("confirmed", "unconfirmed"))),
                    None)

    @property
    def default(self) -> bool:
        """The default pick: what ``export`` writes unless told otherwise."""
        return any(m.startswith(DEFAULT + ":") for m in self.marks)


def memory_limit(trials: list[TrialRecord], budget: float | None) -> tuple[float | None, str]:
    """What memory counts against, in MiB, and in words: ``--max-memory``, else what
    the device has (the least any search trial's device had: its GPU's memory within
    its cap, or the machine's RAM); None where no trial stored it."""
    if budget is not None:
        return budget, f"within --max-memory {budget:,.0f} MiB"
    sizes = [t.device_mib for t in trials if t.search_point and t.device_mib]
    if not sizes:
        return None, "(no device memory stored)"
    return min(sizes), f"within the device's {min(sizes):,.0f} MiB"


def holding(figures: dict[int, Confirmed], within: float,
            baseline_no: int | None) -> frozenset[int]:
    """The configs whose confirmation holds: a speed-up interval within ``within``
    (the baseline's, 1 by construction, confirms nothing)."""
    return frozenset(n for n, c in figures.items()
                     if n != baseline_no and not c.why_not(within))


def front_rows(trials: list[TrialRecord], baseline_no: int | None,
               budget: float | None, train_nodes: int | None = None,
               within: float = CONFIRM_PRECISION) -> list[FrontRow]:
    """The Pareto front, fastest first, with ratios against the baseline and marks.
    A config the confirmation measured is confirmed where its speed-up's interval is
    within ``within`` (:meth:`Confirmed.why_not`), else marked unconfirmed with why;
    the default pick is the fastest confirmed config, where there is one."""
    by_number = {t.number: t for t in trials}
    figures = confirmed(trials)
    why_none = left_out(trials, figures)
    held = holding(figures, within, baseline_no)
    pts = candidate_points(trials, figures)
    base = by_number.get(baseline_no) if baseline_no is not None else None
    base = base if base is not None and base.complete else None
    limit, room = memory_limit(trials, budget)
    k, best = knee(pts, limit), best_under(pts, budget)
    chosen = default_pick(pts, limit, held)
    sure = "confirmed " if chosen is not None and chosen.number in held else ""
    default = f"{DEFAULT}: the fastest {sure}config {room}" + (
        ", none confirmed" if figures and not held else "")
    placed = places({n: c for n, c in figures.items() if n in held or n == baseline_no},
                    within, baseline_no)
    rows = []
    for p in front(pts):
        marks = [m for m, hit in ((default, chosen and p.number == chosen.number),
                                  ("knee", k and p.number == k.number),
                                  ("best-under-budget", budget is not None and best
                                   and p.number == best.number),
                                  ("baseline", p.number == baseline_no),
                                  ("eager: recompile limit hit", p.eager)) if hit]
        t, c = by_number[p.number], figures.get(p.number)
        speedup, speedup_pm = t.paired_speedup(base)
        precision = t.precision
        if c is not None:
            speedup, speedup_pm, precision = c.speedup, c.interval, c.throughput_interval
        marks += _confirmation_mark(c, within, placed.get(p.number), why_none.get(p.number),
                                    bool(figures))
        payback = payback_epochs(t, trials, train_nodes)
        if t.imprecise and c is None:
            marks.append(f"IMPRECISE: --max-seconds ran out at ±{100 * t.precision:.1f}%"
                         if t.precision is not None else "IMPRECISE")
        if payback is not None:
            marks.append("compile never pays back" if payback == float("inf") else
                         f"compile pays back in {payback:.1f} epochs")
        rows.append(FrontRow(p.number, p.throughput, p.memory_mib, speedup,
                             p.memory_mib / base.memory_mib if base else None,
                             p.val_metric, marks, p.config, precision, speedup_pm, payback,
                             c.to_dict() if c is not None else None))
    return rows


def _confirmation_mark(c: Confirmed | None, within: float,
                       placed: dict[int, str] | None, left: str | None,
                       confirming: bool) -> list[str]:
    """What a front row's mark says of its confirmation (``confirming``: one ran):
    confirmed, with the confirmed configs (and the baseline) it is tied with or not
    told apart from (``placed``, :func:`autotune.study._paired.places`; the rest it
    is decidedly faster or slower than), or unconfirmed and why (``left``: why its
    measurements gave no figures); nothing where no confirmation ran."""
    if c is not None:
        why = c.why_not(within)
        if why:
            return [f"unconfirmed: {why}"]
        placed = placed or {}
        tied = [f"#{n}" for n, v in sorted(placed.items()) if v == "tied"]
        apart = [f"#{n}" for n, v in sorted(placed.items()) if v == "undecided"]
        return [f"confirmed in {c.count()}" +
                (f", tied with {', '.join(tied)}" if tied else "") +
                (f", not told apart from {', '.join(apart)}" if apart else "")]
    if left:
        return [f"unconfirmed: {left}"]
    return ["unconfirmed: the confirmation did not measure it"] if confirming else []


def reference_row(trials: list[TrialRecord], baseline_no: int | None) -> FrontRow | None:
    """The baseline where it is not on the front, as the reference every speed-up is
    taken against, marked with why: outside the space written (with its values
    there), or beaten; its confirmed figures where the confirmation measured it. None
    before it is measured, or where the front holds it."""
    by_number = {t.number: t for t in trials}
    base = by_number.get(baseline_no) if baseline_no is not None else None
    if base is None or not base.complete or not base.values:
        return None
    figures = confirmed(trials)
    if base.in_space and base.number in {p.number for p in front(candidate_points(
            trials, figures))}:
        return None
    if base.outside_space:
        why = "outside the space: " + ", ".join(f"{name} {value}" for name, value in
                                                base.outside_space.items())
    else:
        why = "beaten: off the front"
    c = figures.get(base.number)
    throughput, memory = (c.throughput, c.memory_mib) if c else (base.throughput,
                                                                base.memory_mib)
    return FrontRow(base.number, throughput, memory, 1.0, 1.0, base.val_metric,
                    [f"baseline (reference), {why}"], base.config.to_dict() if base.config else {},
                    c.throughput_interval if c else base.precision, 0.0, None,
                    c.to_dict() if c else None)


def candidate_points(trials: list[TrialRecord], figures: dict[int, Confirmed],
                     explicit: bool = False) -> list[Point]:
    """The points the front is drawn from (``explicit``: every completed trial, for
    ``--pick trial:N``; else those measured to full precision, and those screened
    out that the confirmation measured), each with its confirmed throughput and
    memory where the confirmation measured it."""
    out = []
    for t in trials:
        if not (t.complete if explicit else t.on_front_candidate or
                (t.measured_point and t.number in figures)):
            continue
        c = figures.get(t.number)
        out.append(t.point() if c is None else
                   dataclasses.replace(t.point(), throughput=c.throughput,
                                       memory_mib=c.memory_mib))
    return out


def eager_twin_trial(trial: TrialRecord, trials: list[TrialRecord]) -> TrialRecord | None:
    """The completed trial that measured ``trial``'s config without compile."""
    if not trial.config or trial.config.compile_mode == "none":
        return None
    key = twin_of(trial.config).key()
    return next((t for t in trials if t.complete and t.config and t.throughput and
                 t.config.key() == key), None)


def payback_epochs(trial: TrialRecord, trials: list[TrialRecord],
                   train_nodes: int | None) -> float | None:
    """For a compiled trial: its compile time divided by the time it saves per epoch
    (``train_nodes`` seeds) against its eager twin; inf when it saves nothing, None
    when not compiled or no twin was measured."""
    twin = eager_twin_trial(trial, trials)
    if twin is None or not train_nodes or not trial.throughput:
        return None
    saved = train_nodes / twin.throughput - train_nodes / trial.throughput
    return trial.compile.compile_time_s / saved if saved > 0 else float("inf")


def study_front(study, trials: list[TrialRecord] | None = None,
                s: StudyRecord | None = None) -> list[FrontRow]:
    """The study's front: the one computation ``show``, ``pareto.yaml``, the export's
    knee, the report and the dashboard note all read. ``trials`` and ``s``: the
    study's records, where the caller has read them already."""
    s = StudyRecord.from_study(study) if s is None else s
    trials = rec.records(study) if trials is None else trials
    return front_rows(trials, s.baseline, s.budget_mib, s.num_train, s.confirm_within)


def study_reference(study, trials: list[TrialRecord] | None = None,
                    s: StudyRecord | None = None) -> FrontRow | None:
    """The study's baseline as a reference row, where the front does not hold it
    (``trials`` and ``s`` as :func:`study_front` takes them)."""
    s = StudyRecord.from_study(study) if s is None else s
    return reference_row(rec.records(study) if trials is None else trials, s.baseline)


def write_pareto(study, path: Path, url: str) -> None:
    """Rewrites ``pareto.yaml`` from one read of the study (the search calls it after
    every trial)."""
    s, trials = StudyRecord.from_study(study), rec.records(study)
    reference, front = study_reference(study, trials, s), study_front(study, trials, s)
    blob = {"study": study.study_name, "storage": masked(url), "task": s.task.name,
            "unit": s.task.unit, "baseline_trial": s.baseline,
            "max_memory_mib": s.budget_mib, "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "front": [r.to_dict() for r in front],
            "reference": reference.to_dict() if reference else None,
            "controls": drifts(trials)}
    atomic_write(path, dump(blob, "yaml"))


def export_blob(study, how: str, url: str, out: str | Path) -> tuple[dict, TrialRecord]:
    """The export of the trial ``how`` picks (default, knee, max-throughput,
    min-memory, trial:N): its full config, the measured figures, the environment and the command
    that reproduces the measurement."""
    s = StudyRecord.from_study(study)
    if s.kind == "tuned run":
        if how != "default":
            raise ConfigError(f"study {study.study_name!r} records a training run that tuned "
                              f"itself: it has one winner, and --pick {how} chooses among a "
                              "search's trials; leave --pick out")
        return _run_export(study, s, url, out)
    trials = {t.number: t for t in rec.records(study)}
    explicit = how.startswith("trial:")  # any completed trial, flags and all
    figures = confirmed(trials.values())
    limit = memory_limit(list(trials.values()), s.budget_mib)[0]
    candidates = candidate_points(list(trials.values()), figures, explicit)
    base = trials.get(s.baseline) if s.baseline is not None else None
    if how in PICKS and not candidates and base is not None and base.complete and \
            base.outside_space:  # a bad --pick is said first, by pick()
        raise ConfigError(f"the study's only completed trial is its baseline (#{base.number}), "
                          "which lies outside the space searched; run more trials, or export "
                          f"it with --pick trial:{base.number}")
    chosen = pick(candidates, how, s.budget_mib, limit,
                  holding(figures, s.confirm_within, s.baseline))
    t, c = trials[chosen.number], figures.get(chosen.number)
    config = t.config
    measured = {"trial": t.number, "measured_in_trial": t.reused_from if t.reused_from
                is not None else t.number, s.task.throughput_key: chosen.throughput,
                "throughput": chosen.throughput, "unit": s.task.unit,
                "peak_memory_mib": chosen.memory_mib,
                "confirmed": None if c is None else {
                    "holds": not c.why_not(s.confirm_within),
                    "why_not": c.why_not(s.confirm_within) or None,
                    "within": s.confirm_within,
                    "rounds": c.rounds, "unit": c.unit, "speedup": c.speedup,
                    "interval": c.interval,
                    "throughput": c.throughput, "peak_memory_mib": c.memory_mib,
                    "trials": list(c.measurements)},
                "search": {"throughput": t.throughput, "peak_memory_mib": t.memory_mib,
                           "paired": t.paired}, "summary": t.summary,
                "memory": t.memory.to_dict(), "compile": t.compile.to_dict(),
                "observed": t.observed.to_dict(), "validation": t.validation,
                "guard_ratio": t.guard_ratio, "window": t.window.to_dict(),
                "precision": t.precision, "screened": t.screened, "imprecise": t.imprecise,
                "payback_epochs": payback_epochs(t, list(trials.values()), s.num_train)}
    return _blob(config, measured, study, s, url, out), t


def _blob(config: TrialConfig, measured: dict, study, s: StudyRecord, url: str,
          out: str | Path) -> dict[str, Any]:
    """The export of ``config`` from ``study`` (:func:`autotune.export.export_document`)."""
    return export_document(config, measured, dataset_ref=s.dataset_ref or {},
                           dataset=s.dataset, env=s.env, study=study.study_name,
                           storage=masked(url), out=out)


def _run_export(study, s: StudyRecord, url: str, out: str | Path) -> tuple[dict, None]:
    """The export of a tuned training run's winner (``autotune train --tune``), its
    figures those of the run's windows (no Pareto pick: a run has one winner)."""
    report = run_report(study)
    if not report["final"] or report["final_rate"] is None:
        raise ConfigError(f"study {study.study_name!r}: its tuned run recorded no timed "
                          "window of its winner")
    last = max((w["trial"] for w in report["windows"] if w["config"] == report["final"]),
               default=None)
    measured = {"trial": last, "measured_in_trial": last, "throughput": report["final_rate"],
                s.task.throughput_key: report["final_rate"], "unit": s.task.unit,
                "peak_memory_mib": None, "confirmed": None,
                "tuned_run": {k: report[k] for k in ("start", "settled_step", "settled_epoch",
                                                     "explore_s", "steps_by_config", "tried")}}
    return _blob(TrialConfig.from_dict(report["final"]), measured, study, s, url, out), None


def write_export(study, how: str, url: str, out: Path) -> tuple[dict, TrialRecord]:
    """Writes the export of ``how``'s trial to ``out`` (.yaml, .yml or .json)."""
    blob, t = export_blob(study, how, url, out)
    write_export_file(blob, out)
    return blob, t


def confirmation_words(confirmed: dict[str, Any] | None) -> str:
    """An export's ``measured.confirmed`` in words: ``confirmed in 3 rounds, 1.52x
    ±4.1%``, ``unconfirmed: why`` or ``unconfirmed: no confirmation measured it``."""
    if not confirmed:
        return "unconfirmed: no confirmation measured it"
    if confirmed.get("holds", True) is False:
        return f"unconfirmed: {confirmed['why_not']}"
    interval = confirmed.get("interval")
    return (f"confirmed in {confirmed['rounds']} {confirmed.get('unit', 'round')}s, "
            f"{confirmed['speedup']:.2f}x" +
            (f" ±{100 * interval:.1f}%" if interval is not None else ""))
