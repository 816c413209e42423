"""Shared set-up for the trial benchmarks: the dataset, the baseline config, JSON out."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from autotune.cli import default_config
from autotune.datasets import DatasetRef
from autotune.env import fingerprint


def parser(doc: str, out: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="synthetic graph size (1.0 = Reddit)")
    p.add_argument("--root", default="data", help="dataset folder")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--workdir", default="studies/benchmarks")
    p.add_argument("--out", default=out)
    return p


def prepare(args) -> tuple[DatasetRef, dict, float]:
    ref = DatasetRef("synthetic", root=args.root, scale=args.scale)
    start = time.perf_counter()
    stats = ref.prepare().stats()
    return ref, stats, time.perf_counter() - start


def baseline():
    return default_config()


def write(path: str, report: dict) -> None:
    report["env"] = fingerprint(report.get("device", "cpu"))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def timed_search(flags: list[str], workdir, study_name: str):
    """Runs ``autotune search FLAGS --studies-dir WORKDIR --study-name NAME`` as a user
    would; returns the study, the wall time in seconds and the search's stdout."""
    import subprocess
    import sys

    import optuna

    from autotune.study import default_storage

    command = [sys.executable, "-m", "autotune", "search", *flags, "--studies-dir",
               str(workdir), "--study-name", study_name]
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{study_name}: search failed ({run.returncode}): "
                         f"{run.stderr[-2000:]}")
    return optuna.load_study(study_name=study_name,
                             storage=default_storage(Path(workdir), study_name)), wall, run.stdout
