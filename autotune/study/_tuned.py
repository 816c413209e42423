"""A training run that tunes itself (``autotune train --tune``), kept as an Optuna
study in the storage a search uses. Each window the run trained is a trial: its value
the window's seeds per second, its parameters the knobs a run changes, its user
attributes the config, the candidate's change (none for the incumbent's windows),
epoch, step, steps and seconds. The study's ``tuned_run`` attribute holds what the
run decided (:meth:`autotune.tuning.TuneLog.to_dict`), updated as it goes.

``autotune show`` reads such a study as a tuned run (:func:`run_report`), ``autotune
export`` writes its winner (``study/_front.py``'s ``export_blob``), ``autotune
studies`` lists it, and optuna-dashboard shows its windows. A search refuses it
(:func:`refuse_search`).
"""
from __future__ import annotations

import statistics
import typing
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution

from autotune.compare import speedup_text
from autotune.config import (COMPILE_MODES, SHAPES, AmpDtype, Aggregation, FeatureDtype,
                             SamplingBackend, short)
from autotune.errors import ConfigError
from autotune.files import signals_deferred
from autotune.storage import masked, open_storage
from autotune.study import _records as rec

# The knobs a run changes, as trial parameters (optuna-dashboard plots them); the
# cores' affinity is in each trial's config.
PARAMS = {"num_workers": IntDistribution(0, 4096),
          "sampling_backend": CategoricalDistribution(typing.get_args(SamplingBackend)),
          "aggregation": CategoricalDistribution(typing.get_args(Aggregation)),
          "compile_mode": CategoricalDistribution(COMPILE_MODES),
          "shapes": CategoricalDistribution(SHAPES),
          "amp_dtype": CategoricalDistribution(typing.get_args(AmpDtype)),
          "feature_dtype": CategoricalDistribution(typing.get_args(FeatureDtype))}


def check_run_study(name: str, url: str, storage=None) -> None:
    """A tuned run records into a new study: ``name`` taken in ``url`` (``storage``,
    where open already) is an error. Reads the names alone (the studies' summaries
    count every study's trials)."""
    if name in optuna.get_all_study_names(storage or open_storage(url)):
        raise ConfigError(f"study {name!r} already exists in {masked(url)}: a tuned run "
                          "records into a study of its own; pass another --study-name")


class RunRecorder:
    """Records a tuned run's windows (``on_window`` of :func:`autotune.pipeline.train`)
    and, with :meth:`finish`, what it decided, into a new study ``name`` in ``url``
    holding ``facts`` (:class:`autotune.study.StudyRecord` fields: dataset_ref, env,
    device). The name is checked now; the study is made at the first window, so a
    run that fails before it trains leaves no empty study behind."""

    def __init__(self, name: str, url: str, **facts: Any) -> None:
        self.storage = open_storage(url)
        check_run_study(name, url, self.storage)
        self.name, self.url, self.facts = name, url, facts
        self._study: optuna.Study | None = None

    @property
    def study(self) -> optuna.Study:
        if self._study is None:
            check_run_study(self.name, self.url, self.storage)  # taken meanwhile?
            self._study = optuna.create_study(study_name=self.name, storage=self.storage,
                                              direction="maximize")
            rec.store_study(self._study, **self.facts, tuned_run={})
        return self._study

    def window(self, event, log) -> None:
        """Records one window (a :class:`autotune.pipeline.WindowEvent`) and ``log``;
        Ctrl-C waits for the write (:func:`autotune.files.signals_deferred`)."""
        with signals_deferred():
            self._window(event, log)

    def _window(self, event, log) -> None:
        config = event.config
        rec.add_window(self.study, config.to_dict(),
                       {"change": event.change, "epoch": event.epoch, "step": event.step,
                        "steps": event.steps, "seeds": event.seeds, "seconds": event.seconds,
                        "loss": event.loss}, rate=event.rate, fail_reason=event.error,
                       params={k: getattr(config, k) for k in PARAMS}, distributions=PARAMS)
        self.finish(log)

    @property
    def started(self) -> bool:
        """Whether the study exists: a window was recorded."""
        return self._study is not None

    def finish(self, log, **facts: Any) -> None:
        """What the run decided so far (``log``), and StudyRecord ``facts`` learnt late
        (the dataset's stats)."""
        with signals_deferred():
            rec.store_study(self.study, tuned_run=log.to_dict(), **facts)


def is_run(study: optuna.Study) -> bool:
    """Whether ``study`` records a tuned run, not a search."""
    return rec.StudyRecord.from_study(study).kind == "tuned run"


def refuse_search(study: optuna.Study) -> None:
    """A search must not add its trials to a tuned run's study."""
    if is_run(study):
        raise ConfigError(f"study {study.study_name!r} records a training run that tuned "
                          "itself (autotune train --tune), not a search; pass another "
                          "--study-name")


def run_report(study: optuna.Study) -> dict[str, Any]:
    """What ``autotune show`` says of a tuned run: where it started and ended, when it
    settled, every candidate tried with its paired ratios, the steps each config
    trained, and every window."""
    s, windows = rec.StudyRecord.from_study(study), rec.windows(study)
    run = dict(s.tuned_run or {})
    final = run.get("final") or {}
    return {"study": study.study_name, "task": s.task.name, "unit": s.task.unit,
            "start": run.get("start"), "final": final,
            "settled_step": run.get("settled_step"), "settled_epoch": run.get("settled_epoch"),
            "interrupted_step": run.get("interrupted_step"),
            "explore_s": run.get("explore_s"), "wait_share": run.get("wait_share"),
            "steps_by_config": run.get("steps_by_config", {}),
            "tried": run.get("tried", []), "final_rate": final_rate(windows, final),
            "notes": run.get("notes", []), "windows": windows}


def final_rate(windows: list[dict[str, Any]], final: dict[str, Any]) -> float | None:
    """The winner's seeds per second over its timed windows: their seeds over their
    seconds, so that an epoch's one-step window weighs its one step (a run recorded
    before windows kept their seconds: the median of their rates); None before any."""
    timed = [w for w in windows
             if w["config"] == final and w["rate"] and w["state"] == "complete"]
    if timed and all(w.get("seconds") for w in timed):
        return sum(w["seeds"] for w in timed) / sum(w["seconds"] for w in timed)
    return statistics.median(w["rate"] for w in timed) if timed else None


def run_lines(report: dict[str, Any]) -> list[str]:
    """``autotune show``'s text for a tuned run."""
    unit = report["unit"]
    settled = (f"settled at step {report['settled_step']} (epoch {report['settled_epoch']})"
               if report["settled_step"] is not None else "still exploring at its last window")
    rate = report["final_rate"]
    lines = [f"tuned run: started on {short(report['start'] or {})}",
             f"  {settled} on {short(report['final'])}" +
             (f", {rate:,.0f} {unit} over its windows" if rate else ""),
             f"  exploring took {report['explore_s'] or 0:.1f} s"]
    if report.get("wait_share") is not None:  # absent from runs recorded before it was kept
        lines.append(f"  its step waited for its batches {100 * report['wait_share']:.0f}% of "
                     "its time (the order of its candidates)")
    if report["interrupted_step"] is not None:
        lines.append(f"  interrupted (Ctrl-C) at step {report['interrupted_step']}")
    lines.append("steps trained by config:")
    lines += [f"  {steps:>7}  {config}" for config, steps in report["steps_by_config"].items()]
    lines.append("tried:")
    for t in report["tried"]:
        why = f" ({t['reason']})" if t.get("reason") else ""
        if t.get("aside_at") is not None:  # absent from runs recorded before it was kept
            why += f" (stepped aside after {t['aside_at']} pairs for the others)"
        verdict = t["verdict"] or "unfinished (the run stopped before its verdict)"
        lines.append(f"  {t['change']:<40} {_figure(t):>30}  {verdict}{why}")
    lines += [f"  {note}" for note in report.get("notes") or []]
    lines += ["", f"{'trial':>5} {'epoch':>5} {'step':>6} {'steps':>5} {unit:>14}  window of"]
    for w in report["windows"]:
        figure = f"{w['rate']:,.0f}" if w["rate"] else \
            "untimed" if w["state"] == "pruned" else w["state"]
        lines.append(f"{w['trial']:>5} {w.get('epoch', '-'):>5} {w.get('step', '-'):>6} "
                     f"{w.get('steps', '-'):>5} {figure:>14}  " +
                     (w["change"] if w.get("change") else "the incumbent") +
                     f": {short(w['config'])}")
    return lines


def _figure(tried: dict[str, Any]) -> str:
    """A candidate's speed-up over its pairs, with the comparison's interval where the
    run recorded one (runs recorded before it kept the mean of their ratios)."""
    ratios = tried["ratios"]
    if not ratios:
        return "-"
    pairs = f" over {len(ratios)} pair" + ("s" if len(ratios) != 1 else "")
    speedup, interval = tried.get("speedup"), tried.get("interval")
    if speedup is None:
        return f"{statistics.fmean(ratios):.2f}x{pairs}"
    return speedup_text(speedup, *(interval or ())) + pairs
