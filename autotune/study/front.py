"""What a study's answer looks like: the Pareto front with ratios against the
baseline, ``pareto.yaml`` and the export file, each rewritten atomically so a crash
never loses the current answer. Imports neither torch nor PyG."""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.pareto import best_under, front, knee, pick
from autotune.result import MIB
from autotune.study import records as rec
from autotune.study.records import TrialRecord
from autotune.storage import masked


@dataclass(frozen=True)
class FrontRow:
    """One trial of the front, fastest first, with ratios against the baseline."""

    trial: int
    throughput: float
    memory_mib: float
    speedup: float | None
    memory_ratio: float | None
    val_acc: float | None
    marks: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    precision: float | None = None  # relative 95% half-width of the throughput
    speedup_precision: float | None = None  # of the speed-up, the baseline's included
    payback_epochs: float | None = None  # compiled: compile time / time saved per epoch

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def budget_mib(study) -> float | None:
    budget = study.user_attrs.get(rec.STUDY_MAX_MEMORY)
    return budget / MIB if budget else None


def front_rows(trials: list[TrialRecord], baseline_no: int | None,
               budget: float | None, train_nodes: int | None = None) -> list[FrontRow]:
    """The Pareto front, fastest first, with ratios against the baseline and marks."""
    by_number = {t.number: t for t in trials}
    pts = [t.point() for t in trials if t.on_front_candidate]
    base = by_number.get(baseline_no) if baseline_no is not None else None
    base = base if base is not None and base.complete else None
    k, best = knee(pts), best_under(pts, budget)
    rows = []
    for p in front(pts):
        marks = [m for m, hit in (("knee", k and p.number == k.number),
                                  ("best-under-budget", budget is not None and best
                                   and p.number == best.number),
                                  ("baseline", p.number == baseline_no),
                                  ("eager: recompile limit hit", p.eager)) if hit]
        t = by_number[p.number]
        speedup, speedup_pm = t.speedup(base)
        payback = payback_epochs(t, trials, train_nodes)
        if t.imprecise:
            marks.append(f"IMPRECISE: --max-seconds ran out at ±{100 * t.precision:.1f}%"
                         if t.precision is not None else "IMPRECISE")
        if payback is not None:
            marks.append("compile never pays back" if payback == float("inf") else
                         f"compile pays back in {payback:.1f} epochs")
        rows.append(FrontRow(p.number, p.throughput, p.memory_mib, speedup,
                             p.memory_mib / base.memory_mib if base else None,
                             p.accuracy, marks, p.config, t.precision, speedup_pm, payback))
    return rows


def eager_twin(trial: TrialRecord, trials: list[TrialRecord]) -> TrialRecord | None:
    """The completed trial that measured ``trial``'s config without compile."""
    from autotune.config import TrialConfig
    from autotune.space import eager_twin as twin_of

    if not trial.config or trial.config.get("compile_mode", "none") == "none":
        return None
    key = twin_of(TrialConfig.from_dict(trial.config)).key()
    return next((t for t in trials if t.complete and t.config and t.throughput and
                 TrialConfig.from_dict(t.config).key() == key), None)


def payback_epochs(trial: TrialRecord, trials: list[TrialRecord],
                   train_nodes: int | None) -> float | None:
    """For a compiled trial: its compile time divided by the time it saves per epoch
    (``train_nodes`` seeds) against its eager twin; inf when it saves nothing, None
    when not compiled or no twin was measured."""
    twin = eager_twin(trial, trials)
    if twin is None or not train_nodes or not trial.throughput:
        return None
    saved = train_nodes / twin.throughput - train_nodes / trial.throughput
    return trial.compile.compile_time_s / saved if saved > 0 else float("inf")


def study_front(study) -> list[FrontRow]:
    return front_rows(rec.records(study), study.user_attrs.get(rec.STUDY_BASELINE),
                      budget_mib(study), (study.user_attrs.get(rec.STUDY_DATASET) or {}).get(
                          "num_train"))


def atomic_write(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def dump(blob: Any, fmt: str) -> str:
    """``blob`` as JSON or YAML text."""
    if fmt == "json":
        return json.dumps(blob, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(blob, sort_keys=False)


def write_pareto(study, path: Path, url: str) -> None:
    """Rewrites ``pareto.yaml``."""
    blob = {"study": study.study_name, "storage": masked(url),
            "baseline_trial": study.user_attrs.get(rec.STUDY_BASELINE),
            "max_memory_mib": budget_mib(study), "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "front": [r.to_dict() for r in study_front(study)]}
    atomic_write(path, dump(blob, "yaml"))


def export_blob(study, how: str, url: str, out: str | Path) -> tuple[dict, TrialRecord]:
    """The export of the trial ``how`` picks (knee, max-throughput, min-memory,
    trial:N): its full config, the measured figures, the environment and the command
    that reproduces the measurement."""
    from autotune.config import CONFIG_FORMAT, TrialConfig

    trials = {t.number: t for t in rec.records(study)}
    explicit = how.startswith("trial:")  # any completed trial, flags and all
    chosen = pick([t.point() for t in trials.values()
                   if (t.complete if explicit else t.on_front_candidate)], how, budget_mib(study))
    t = trials[chosen.number]
    config = TrialConfig.from_dict(t.config)
    ref = study.user_attrs.get(rec.STUDY_DATASET_REF, {})
    reproduce = (f"autotune trial --dataset {ref.get('name')} --root {ref.get('root')} "
                 f"--scale {ref.get('scale')} --data-seed {ref.get('seed')} --config {out}")
    measured = {"trial": t.number, "measured_in_trial": t.reused_from if t.reused_from
                is not None else t.number, "seed_nodes_per_s": t.throughput,
                "peak_memory_mib": t.memory_mib, "summary": t.summary,
                "memory": t.memory.to_dict(), "compile": t.compile.to_dict(),
                "observed": t.observed.to_dict(), "val_acc": t.val_acc,
                "accuracy_ratio": t.accuracy_ratio, "window": t.window.to_dict(),
                "precision": t.precision, "screened": t.screened, "imprecise": t.imprecise,
                "payback_epochs": payback_epochs(t, list(trials.values()), (study.user_attrs.get(
                    rec.STUDY_DATASET) or {}).get("num_train"))}
    blob = {"format": CONFIG_FORMAT, "config": config.to_dict(), "model": config.model,
            "measured": measured, "env": study.user_attrs.get(rec.STUDY_ENV),
            "dataset": study.user_attrs.get(rec.STUDY_DATASET), "dataset_ref": ref,
            "study": study.study_name, "storage": masked(url), "reproduce": reproduce}
    return blob, t


def write_export(study, how: str, url: str, out: Path) -> tuple[dict, TrialRecord]:
    """Writes the export of ``how``'s trial to ``out`` (.yaml, .yml or .json)."""
    blob, t = export_blob(study, how, url, out)
    atomic_write(out, dump(blob, "json" if out.suffix == ".json" else "yaml"))
    return blob, t
