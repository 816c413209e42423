"""What a person looks at: ``autotune report`` (matplotlib PNGs and one HTML page)
and the study note optuna-dashboard shows (``optuna_dashboard.save_note``)."""
from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import TrialState

from autotune.files import atomic_write
from autotune.study import Point, StudyRecord, _records as rec, drifts, points, study_front, \
    study_reference
from autotune.cli._render import drift_lines, front_columns, short
from autotune.storage import masked

FIGSIZE = (7.0, 4.5)
DPI = 110
MAX_BOXES = 12  # step-time boxes drawn, fastest Pareto trials first


def study_note(study: optuna.Study) -> str:
    """Markdown for the dashboard: the baseline and the Pareto front."""
    s = StudyRecord.from_study(study)
    budget, task = s.budget_mib, s.task
    base = next((t for t in rec.records(study) if t.number == s.baseline and t.values), None)
    lines = [f"## autotune: {study.study_name}", "",
             f"Dataset **{s.dataset_ref.get('name')}** ({s.dataset.get('num_nodes', 0):,} "
             f"nodes, {s.dataset.get('num_edges', 0):,} edges), task {task.name}, device "
             f"{s.device}" + (f", memory budget {budget:,.0f} MiB" if budget else "") + ".", ""]
    if base is not None:
        lines += [f"Baseline: trial {base.number}, {base.throughput:,.0f} {task.unit}, "
                  f"{base.memory_mib:,.0f} MiB peak ({short(base.config)})" +
                  (", outside the space written: a reference, never on the front"
                   if base.outside_space else "") + ".", ""]
    reference = study_reference(study)
    header, cells = front_columns(study_front(study) + ([reference] if reference else []), task)
    lines += ["### Pareto front (fastest first)", "", "| " + " | ".join(header) + " |",
              "|" + "---:|" * (len(header) - 2) + "---|---|"]
    for row in cells:
        lines.append("| " + " | ".join(row[:-2] + [f"`{row[-2]}`", row[-1]]) + " |")
    lines += ["", *drift_lines(drifts(rec.records(study)))]
    n_done = sum(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False))
    lines += ["", f"Updated {time.strftime('%Y-%m-%d %H:%M:%S')} after {n_done} completed "
              "trials. autotune rewrites this note after every trial."]
    return "\n".join(lines)


def save_study_note(study: optuna.Study) -> None:
    from optuna_dashboard import save_note

    save_note(study, study_note(study))


@dataclass
class Report:
    html: Path
    images: dict[str, Path] = field(default_factory=dict)
    not_drawn: dict[str, str] = field(default_factory=dict)  # picture -> why
    notes: dict[str, str] = field(default_factory=dict)  # picture -> what it rests on


STUDY_META = "autotune-study"  # the report's <meta> that names its study


def report_paths(out: Path) -> tuple[Path, Callable[[str], Path]]:
    """Where a report goes: ``out`` itself where it ends in .html, its PNGs beside it
    (``report-pareto.png``); else ``out/report.html`` with ``pareto.png`` beside it."""
    if out.suffix == ".html":
        return out, lambda name: out.with_name(f"{out.stem}-{name}.png")
    return out / "report.html", lambda name: out / f"{name}.png"


def report_of(page: Path) -> str | None:
    """The study an existing report names (None: no such file); ``""`` for a file
    that is no autotune report."""
    if not page.exists():
        return None
    found = re.search(rf'<meta name="{STUDY_META}" content="([^"]*)"',
                      page.read_text(errors="replace")[:4096])
    return html.unescape(found.group(1)) if found else ""


def write_report(study: optuna.Study, out: Path, *, url: str) -> Report:
    """Writes the report and its PNGs where :func:`report_paths` puts them."""
    import matplotlib

    matplotlib.use("Agg")
    page, png = report_paths(out)
    page.parent.mkdir(parents=True, exist_ok=True)
    report = Report(html=page)
    pts = points(study)
    if not pts:
        report.not_drawn["all"] = "the study has no completed trial yet"
    else:
        report.images["pareto"] = _pareto_png(study, pts, png("pareto"))
        try:
            report.images["importance"], report.notes["importance"] = _importance_png(
                study, png("importance"))
        except (ValueError, RuntimeError) as exc:  # too few trials, nothing varied
            report.not_drawn["importance"] = f"{type(exc).__name__}: {exc}"
        report.images["step_times"] = _step_times_png(study, png("step_times"))
    atomic_write(report.html, _html(study, report, url))
    return report


def _pareto_png(study: optuna.Study, pts: list[Point], path: Path) -> Path:
    import matplotlib.pyplot as plt

    s = StudyRecord.from_study(study)
    budget, names = s.budget_mib, s.task.metric_names()
    rows = study_front(study)  # confirmed figures where the confirmation measured them
    front_no = {r.trial for r in rows}
    fig, ax = plt.subplots(figsize=FIGSIZE)
    others = [p for p in pts if p.number not in front_no]
    ax.scatter([p.memory_mib for p in others], [p.throughput for p in others], c="0.7",
               s=18, label="other trials")
    line = sorted(rows, key=lambda r: r.memory_mib)
    ax.plot([r.memory_mib for r in line], [r.throughput for r in line], "o-", c="tab:blue",
            ms=5, label="Pareto front")
    base = next((t for t in rec.records(study) if t.number == s.baseline and t.values), None)
    if base is not None:
        outside = ", outside the space" if base.outside_space else ""
        ax.scatter([base.memory_mib], [base.throughput], marker="*", s=220, c="tab:red",
                   zorder=3, label=f"baseline (trial {base.number}{outside})")
    k = next((r for r in rows if "knee" in r.marks), None)
    if k is not None:
        ax.scatter([k.memory_mib], [k.throughput], marker="D", s=80, facecolors="none",
                   edgecolors="tab:green", linewidths=2, zorder=4, label=f"knee (trial {k.trial})")
    chosen = next((r for r in rows if r.default), None)
    if chosen is not None:
        ax.scatter([chosen.memory_mib], [chosen.throughput], marker="s", s=140,
                   facecolors="none", edgecolors="black", linewidths=1.5, zorder=5,
                   label=f"default pick (trial {chosen.trial})")
    if budget:
        ax.axvline(budget, ls="--", c="tab:orange", label=f"budget {budget:,.0f} MiB")
    ax.set_xlabel(names[1])
    ax.set_ylabel(names[0])
    ax.set_title(f"{study.study_name}: throughput against peak memory")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def _importance_png(study: optuna.Study, path: Path) -> tuple[Path, str]:
    """PED-ANOVA importances (Optuna's default evaluator, needing no scikit-learn) of
    each knob for reaching the good end of each objective: high throughput, low memory.
    Knobs that never changed are left out, and said so; returns the picture and a
    line saying what it rests on."""
    import warnings

    import matplotlib.pyplot as plt
    import numpy as np

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    varied, constant = _varied_knobs(done)
    if not varied:
        raise ValueError(f"no knob varied across the {len(done)} completed trials")
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    with warnings.catch_warnings(record=True) as caught:  # said in the note, not printed
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="PedAnovaImportanceEvaluator computes")
        per_metric = [optuna.importance.get_param_importances(
            study, evaluator=evaluator, params=varied,
            target=lambda t, i=i, s=sign: s * t.values[i]) for i, sign in enumerate((-1.0, 1.0))]
    names = sorted(varied, key=lambda n: -sum(imp.get(n, 0.0) for imp in per_metric))
    note = f"{len(done)} completed trials"
    if constant:
        note += f"; left out, never changed: {', '.join(constant)}"
    for said in dict.fromkeys(" ".join(str(w.message).split()) for w in caught):
        note += f"; Optuna: {said}"  # few trials: "... may be inaccurate"
    # a bar a knob, and room for the two-line label and the legend with few knobs
    fig, ax = plt.subplots(figsize=(FIGSIZE[0], max(3.2, 1.2 + 0.45 * len(names))))
    y = np.arange(len(names))
    names_ = StudyRecord.from_study(study).task.metric_names()
    for i, (name, imp) in enumerate(zip(names_, per_metric)):
        ax.barh(y + (i - 0.5) * 0.38, [imp.get(n, 0.0) for n in names], height=0.38, label=name)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel(f"importance for reaching the best 10% (PED-ANOVA, normalised)\n{note}")
    ax.set_title(f"Effect of each knob that changed ({len(done)} trials)")
    ax.legend(fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path), note


def _varied_knobs(trials: list) -> tuple[list[str], list[str]]:
    """The knobs that took two values or more across ``trials``, and those that never
    changed (an importance credited to a constant knob is noise: PED-ANOVA's)."""
    seen: dict[str, set[str]] = {}
    for t in trials:
        for name, value in t.params.items():
            seen.setdefault(name, set()).add(repr(value))
    varied = sorted(n for n, values in seen.items() if len(values) > 1)
    return varied, sorted(set(seen) - set(varied))


def _step_times_png(study: optuna.Study, path: Path) -> Path:
    import matplotlib.pyplot as plt

    rows = study_front(study)[:MAX_BOXES]
    by_number = {t.number: t for t in rec.records(study)}
    data, labels = [], []
    for r in rows:
        steps = by_number[r.trial].step_times_s
        if steps:
            data.append([1000 * s for s in steps])
            labels.append(f"#{r.trial}")
    fig, ax = plt.subplots(figsize=FIGSIZE)
    if data:
        ax.boxplot(data, showfliers=True)
        ax.set_xticks(range(1, len(labels) + 1), labels)
    ax.set_xlabel("Pareto trial (fastest first)")
    ax.set_ylabel("step time (ms)")
    ax.set_title("Step-time distributions of the Pareto trials (timed window)")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=DPI, format=path.suffix[1:]))
    plt.close(fig)
    return path


def _html(study: optuna.Study, report: Report, url: str) -> str:
    e = html.escape
    s = StudyRecord.from_study(study)
    reference = study_reference(study)
    header, cells = front_columns(study_front(study) + ([reference] if reference else []),
                                  s.task)
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    table = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row[:-2]) +
                    f"<td><code>{e(row[-2])}</code></td><td>{e(row[-1])}</td></tr>"
                    for row in cells)
    captions = {"pareto": "Pareto front: throughput against peak memory",
                "importance": "Effect of each knob", "step_times": "Step-time distributions"}
    figures = "".join(f'<figure><a href="{p.name}"><img src="{p.name}" alt="{captions[k]}"></a>'
                      f"<figcaption>{captions[k]}"
                      f"{': ' + e(report.notes[k]) if k in report.notes else ''}"
                      f"</figcaption></figure>"
                      for k, p in report.images.items())
    missing = "".join(f"<p class=warn>{e(k)} not drawn: {e(why)}</p>"
                      for k, why in report.not_drawn.items())
    env = s.env
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="{STUDY_META}" content="{e(study.study_name)}">
<title>autotune report: {e(study.study_name)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2em .5em;text-align:right}}
img{{max-width:100%}}.warn{{color:#a40}}</style></head><body>
<h1>autotune report: {e(study.study_name)}</h1>
<p>Storage {e(masked(url))}; {len(study.trials)} trials; written
{e(time.strftime('%Y-%m-%d %H:%M:%S'))}. Environment: {e(str(env.get('cpu', '')))},
torch {e(str(env.get('torch', '')))}.</p>
<h2>Pareto front (fastest first)</h2>
<p>Task {e(s.task.name)}; objectives {e(" up, ".join(s.task.metric_names()))} down; quality
metric {e(s.task.metric)}.</p>
<table><tr>{head}</tr>{table}</table>
{"".join(f"<p>{e(line)}</p>" for line in drift_lines(drifts(rec.records(study))))}
{missing}{figures}
</body></html>
"""
