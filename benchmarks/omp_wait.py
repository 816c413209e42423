"""What a trial's OpenMP wait policy does to its window, quiet and beside a burner.

Each ``autotune trial`` below runs in a fresh interpreter (OpenMP reads
``OMP_WAIT_POLICY`` as it starts), on the quick start's graph (synthetic, scale 0.02,
64 hidden channels), for two configs of the quick space: its usual default (b1024
f[10, 5] w0 bf16) and a checkpointing one (b1024 f[10, 5] w0 f32 ck+). For each
state, quiet and with a process burning the last core, the two policies alternate
(active, passive, passive, active, ...: ABBA), ``--runs`` of each. It reports each
window's seed nodes/s and each policy's median, and their ratio side by side.

Why: the search keeps OpenMP's default (threads spin at a barrier) and sets
``OMP_WAIT_POLICY=PASSIVE`` for its trials only where the machine is busy before it
starts (``autotune.study._search.BUSY_ENV``). A burner that starts mid-search meets
spinning threads.

    python benchmarks/omp_wait.py --out benchmarks/results/omp-wait.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import write

CONFIGS = {
    "default": {"batch_size": 1024, "num_neighbors": [10, 5], "num_workers": 0,
                "amp_dtype": "bfloat16", "hidden_channels": 64},
    "checkpointing": {"batch_size": 1024, "num_neighbors": [10, 5], "num_workers": 0,
                      "checkpointing": True, "hidden_channels": 64},
}
ORDER = ("active", "passive", "passive", "active")  # ABBA


def trial(config: Path, policy: str, max_seconds: float, timeout_s: float) -> dict:
    """One ``autotune trial`` in a fresh interpreter under ``policy``; its summary."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    out = subprocess.run(
        [sys.executable, "-m", "autotune", "trial", "--config", str(config), "--dataset",
         "synthetic", "--scale", "0.02", "--max-seconds", str(max_seconds), "--max-busy", "1",
         "-f", "json"], env=env, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"autotune trial exited {out.returncode}: {out.stderr[-2000:]}")
    result = json.loads(out.stdout)
    if result["status"] != "ok":
        raise RuntimeError(f"the trial did not measure: {result['status']}: {result['reason']}")
    s = result["summary"]
    return {"policy": policy, "seed_nodes_per_s": s["seed_nodes_per_s"],
            "window_s": s["window_s"], "precision": s["precision"]}


def burner(core: int) -> subprocess.Popen:
    """A process that burns ``core`` until killed."""
    code = f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    return subprocess.Popen([sys.executable, "-c", code])


def measure(configs: dict[str, Path], runs: int, max_seconds: float, timeout_s: float
            ) -> dict[str, list[dict]]:
    """Each config's windows under both policies, ABBA, ``runs`` of each."""
    order = [ORDER[i % len(ORDER)] for i in range(2 * runs)]
    return {name: [trial(path, policy, max_seconds, timeout_s) for policy in order]
            for name, path in configs.items()}


def summary(windows: list[dict]) -> dict:
    rates = {p: [w["seed_nodes_per_s"] for w in windows if w["policy"] == p]
             for p in ("active", "passive")}
    med = {p: statistics.median(r) for p, r in rates.items()}
    return {"active": med["active"], "passive": med["passive"],
            "passive_over_active": med["passive"] / med["active"],
            "range": {p: [min(r), max(r)] for p, r in rates.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2, help="windows of each policy per state")
    p.add_argument("--max-seconds", type=float, default=8.0, help="a window's longest")
    p.add_argument("--timeout", type=float, default=300.0, help="a trial's longest")
    p.add_argument("--out", default="benchmarks/results/omp-wait.json")
    args = p.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        configs = {}
        for name, config in CONFIGS.items():
            configs[name] = Path(tmp) / f"{name}.json"
            configs[name].write_text(json.dumps({"config": config}))
        quiet = measure(configs, args.runs, args.max_seconds, args.timeout)
        burn = burner(cores[-1])
        try:
            burnt = measure(configs, args.runs, args.max_seconds, args.timeout)
        finally:
            burn.kill()
            burn.wait()
    report = {"benchmark": "omp_wait", "device": "cpu", "cores": cores,
              "burner_core": cores[-1], "runs": args.runs, "configs": CONFIGS,
              "quiet": {n: {"windows": w, **summary(w)} for n, w in quiet.items()},
              "burnt": {n: {"windows": w, **summary(w)} for n, w in burnt.items()}}
    for name in CONFIGS:
        report.setdefault("burnt_over_quiet", {})[name] = {
            policy: report["burnt"][name][policy] / report["quiet"][name][policy]
            for policy in ("active", "passive")}
    write(args.out, report)


if __name__ == "__main__":
    main()
