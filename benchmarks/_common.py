"""Shared set-up for the trial benchmarks: the dataset, the baseline config, JSON out."""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from autotune.taskinfo import DEFAULT_TASK
from autotune.data._datasets import DatasetRef
from autotune.env import fingerprint
from autotune.study._api import default_config


def parser(doc: str, out: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="synthetic graph size (1.0 = Reddit)")
    p.add_argument("--root", default="data", help="dataset folder")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="timed steps at least")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--precision", type=float, default=0.03,
                   help="the window's target: relative 95%% half-width of the throughput")
    p.add_argument("--max-seconds", type=float, default=60.0)
    p.add_argument("--workdir", default="studies/benchmarks")
    p.add_argument("--out", default=out)
    return p


def prepare(args, name: str = "synthetic", task: str = DEFAULT_TASK) -> tuple[DatasetRef, dict, float]:
    ref = DatasetRef(name, root=args.root, scale=args.scale, task=task)
    start = time.perf_counter()
    stats = ref.prepare().stats()
    return ref, stats, time.perf_counter() - start


def measure_spec(args):
    """The trials' MeasureSpec from the common flags."""
    from autotune.specs import MeasureSpec

    return MeasureSpec(warmup_steps=args.warmup, min_steps=args.steps,
                       precision=args.precision, max_window_s=args.max_seconds)


def baseline():
    return default_config()


def write_space(space: dict, path: Path) -> Path:
    """A benchmark's search space as the YAML file a search reads."""
    import yaml

    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def spread_from_median(values: list[float]) -> float:
    """The largest deviation from the values' median, relative: the spread of repeated
    speed-ups that noise.py's and quickstart.py's 5% targets read."""
    mid = statistics.median(values)
    return max(abs(v / mid - 1) for v in values)


def write(path: str, report: dict, env: bool = True) -> None:
    """Writes ``report`` to ``path`` (and prints it), with this machine's fingerprint as
    its ``env``; ``env`` False keeps the report's own (figures of another run's machine
    kept beside new ones, which carry their machine themselves)."""
    if env or "env" not in report:
        report["env"] = fingerprint(report.get("device", "cpu"))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def timed_search(workdir, study_name: str, **options):
    """Runs :func:`autotune.search` in this process as a user's script would; returns
    the study, the ``SearchResult``, the wall time in seconds and the progress lines."""
    import optuna

    import autotune
    from autotune.cli._render import progress_line
    from autotune.study._studies import load_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress lines say it all
    lines: list[str] = []

    def progress(*event) -> None:
        lines.append(progress_line(*event))
        print(lines[-1], flush=True)

    start = time.perf_counter()
    result = autotune.search(studies_dir=workdir, study_name=study_name, progress=progress,
                             **options)
    wall = time.perf_counter() - start
    study, _ = load_study(study_name, studies_dir=workdir)
    return study, result, wall, "\n".join(lines)


def rounds(configs: dict, ref, args, server, n_rounds: int, tag: str,
           on_measured=None) -> tuple[list, dict]:
    """A confirmation as a search runs one, on named configs: ``n_rounds`` rounds of
    every config in order (the first, ``configs``' first, is the reference), each
    measurement a forked trial, then the reference once more to close the last
    round. Returns the measurements as ``TrialRecord``s and each config's figures
    from :func:`autotune.study._paired.confirmed` (paired with the reference of its
    round, interpolated in time), keyed by name."""
    import dataclasses

    from autotune.trial._runner import run_trial
    from autotune.study._paired import confirmed
    from autotune.study._records import TrialRecord

    names = list(configs)
    schedule = [(r, n) for r in range(n_rounds) for n in names] + [(n_rounds, names[0])]
    measured = []
    for number, (round_, name) in enumerate(schedule, start=len(names)):
        started = time.time()
        result = run_trial(configs[name], dataset=ref, server=server, measure=measure_spec(args),
                           trial_dir=f"{args.workdir}/{tag}-{round_}-{name}")
        record = TrialRecord.from_result(number, result, measured_at=(started, time.time()))
        record = dataclasses.replace(
            record, state="complete" if result.ok else "fail",
            values=result.objectives() if result.ok else None,
            confirm={"run": 0, "round": round_, "of": names.index(name)})
        measured.append(record)
        if on_measured is not None:
            on_measured(name, record)
    base = TrialRecord(0, "complete", role="baseline")
    figures = confirmed([base, *measured])
    return measured, {name: figures.get(i) for i, name in enumerate(names)}
