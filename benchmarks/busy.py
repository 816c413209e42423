"""The README's quick start on a quiet machine and on busy ones, side by side: does the
answer hold when other work runs (issues 46 and 58)?

Runs the quick start's search three times in one run, each in a fresh folder: first on
a quiet machine; then with a process that burns one core (pinned to the last one) for
``--busy-s`` seconds, starting ``--busy-after`` seconds after the first result line,
in the search's middle; then with another training (a PyTorch model trained on
random data, torch's threads as it sets them) running beside the whole search. Records for each run its default pick (config, speed-up, its
interval, confirmed or not and why), every front row's confirmation, and what the
busy run named as disturbing its windows. busy.json holds:

- ``default_ok``: the busy run's default pick is marked unconfirmed, or the quiet run
  measured that config within its own default's interval (``why`` says which), and
  ``same_config_speedups``: the two runs' speed-ups of it (run-to-run drift);
- ``confirmed_too_wide``: front rows of either run called confirmed with a speed-up
  interval wider than the stated precision (``--confirm-precision``): 0 is the target;
- ``disturbing_process``: the processes the busy run named (pid, name, CPU seconds),
  and ``named_the_burner``: whether the burner's pid is among them;
- ``training``: the run beside another training: its time over the quiet run's
  (target: at most 2), whether it said the machine stays busy and how often (target:
  once), and whether its default is the quiet run's config or one the quiet run's
  front places tied with it (``judge``, as for the burner).

Each run's ``total_s`` is its search's own time, from its start to its exit (a burner
that outlasts it is waited for afterwards, not counted).

    python benchmarks/busy.py --out benchmarks/results/busy.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import write

COMMAND = ["search", "--dataset", "synthetic", "--scale", "0.02", "--space", "quick",
           "--n-trials", "8"]


def _burn(core: int) -> subprocess.Popen:
    code = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    return subprocess.Popen([sys.executable, "-c", code])


TRAINING = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 64))
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(4096, 512), torch.randint(0, 64, (4096,))
while True:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def _run(folder: Path, busy: tuple[float, float] | None, beside: bool = False) -> dict:
    """The quick start in ``folder``; ``busy``: (seconds after the first result line,
    seconds) of a burner on the last core; ``beside``: another training runs through
    the whole search. Its output, the study as ``show`` gives it, and the burner's (or
    the training's) pid and times."""
    env = {**os.environ, "AUTOTUNE_CACHE": str(folder / "cache"),
           "AUTOTUNE_DATA_ROOT": str(folder / "data")}
    env.pop("AUTOTUNE_MAX_BUSY", None)  # the default, as a user has it
    other = subprocess.Popen([sys.executable, "-c", TRAINING]) if beside else None
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "autotune", *COMMAND], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, burner, timer = [], {}, None

    def start_burner() -> None:
        core = sorted(os.sched_getaffinity(0))[-1]
        process = _burn(core)
        burner.update(pid=process.pid, core=core, started_s=time.perf_counter() - started)
        time.sleep(busy[1])
        process.kill()
        process.wait()
        burner["ended_s"] = time.perf_counter() - started

    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        print(f"{time.perf_counter() - started:6.1f}s {line}", end="", flush=True)
        if busy is not None and timer is None and line.startswith("[  1/"):
            timer = threading.Timer(busy[0], start_burner)
            timer.start()
    code = proc.wait()
    searched = time.perf_counter() - started  # the search's own time: no wait for a burner
    if other is not None:
        other.kill()
        other.wait()
        burner.update(pid=other.pid, training=True, ended_s=time.perf_counter() - started)
    if timer is not None:
        timer.join()
        while "ended_s" not in burner and burner:
            time.sleep(0.1)
    if code != 0:
        raise SystemExit(f"the quick start exited {code}")
    show = subprocess.run([sys.executable, "-m", "autotune", "show", "--format", "json"],
                          cwd=folder, env=env, capture_output=True, text=True, check=True)
    return {"output": lines, "study": json.loads(show.stdout), "burner": burner or None,
            "total_s": searched, "wall_s": time.perf_counter() - started}


def _row_figures(row: dict) -> dict:
    confirmation = next((m for m in row["marks"] if m.startswith(("confirmed", "unconfirmed"))),
                        None)
    return {"trial": row["trial"], "config": row["config"], "speedup": row["speedup"],
            "default": any(m.startswith("default:") for m in row["marks"]),
            "interval": (row["speedup_precision"] / row["speedup"]
                         if row["speedup_precision"] is not None and row["speedup"] else None),
            "confirmation": confirmation,
            "confirmed": bool(confirmation and confirmation.startswith("confirmed"))}


def judge(quiet_front: list[dict], busy_front: list[dict]) -> dict:
    """Whether the busy run's default pick holds, from the two runs' fronts (as
    :func:`_row_figures` gives them): it is marked unconfirmed, or the quiet run's
    speed-up of the same config lies within the quiet default's interval (the busy
    run picked what the quiet run calls as good as its best). Also the ratio of the
    two runs' speed-ups of that config: run-to-run drift, which no interval of one run
    covers."""
    quiet = next((r for r in quiet_front if r["default"]), None)
    busy = next((r for r in busy_front if r["default"]), None)
    if busy is None or quiet is None:
        return {"default_ok": False, "why": "a run has no default pick"}
    same = next((r for r in quiet_front if r["config"] == busy["config"]), None)
    if not busy["confirmed"]:
        ok, why = True, "the busy run's default is marked unconfirmed"
    elif same is None:
        ok, why = False, "the busy run's default is not on the quiet run's front"
    else:
        low = quiet["speedup"] * (1 - (quiet["interval"] or 0.0))
        ok = same["speedup"] >= low
        why = (f"the quiet run measured the busy run's pick at {same['speedup']:.2f}x, "
               f"{'within' if ok else 'below'} its default's {quiet['speedup']:.2f}x "
               f"±{100 * (quiet['interval'] or 0):.1f}%")
    return {"default_ok": ok, "why": why,
            "same_config_speedups": None if same is None else
            {"quiet": same["speedup"], "busy": busy["speedup"],
             "busy_over_quiet": busy["speedup"] / same["speedup"]}}


def _named(study: dict) -> list[list]:
    """The processes the run's windows named, as its notes name them: each one's CPU
    seconds summed over every window it took (:meth:`Load.summed`, the most first)."""
    from autotune.trial import Load

    loads = []
    for t in study["trials"]:
        paired = ((t.get("confirm") or {}).get("pairs") or {}).get("taken_by") or []
        loads += [t.get("load") or {}, *(t.get("remeasured") or []), *paired]
    return [list(row) for row in Load.summed(Load.from_dict(x) for x in loads).top]


def main() -> None:
    from autotune.specs import CONFIRM_PRECISION

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--busy-after", type=float, default=20.0,
                   help="seconds after the first result line that the burner starts")
    p.add_argument("--busy-s", type=float, default=45.0, help="how long it burns")
    p.add_argument("--out", default="benchmarks/results/busy.json")
    args = p.parse_args()
    runs = {}
    for name, busy, beside in (("quiet", None, False),
                               ("busy", (args.busy_after, args.busy_s), False),
                               ("training", None, True)):
        with tempfile.TemporaryDirectory(prefix=f"autotune-busy-{name}-") as folder:
            runs[name] = _run(Path(folder), busy, beside)
    fronts = {name: [_row_figures(r) for r in run["study"]["pareto"]]
              for name, run in runs.items()}
    named, burner = _named(runs["busy"]["study"]), runs["busy"]["burner"] or {}
    too_wide = [f for front in fronts.values() for f in front
                if f["confirmed"] and f["interval"] is not None
                and f["interval"] > CONFIRM_PRECISION]
    write(args.out, {
        "benchmark": "busy", "device": "cpu", "command": "autotune " + " ".join(COMMAND),
        "confirm_precision": CONFIRM_PRECISION,
        "burner": burner, "busy_after_s": args.busy_after, "busy_s": args.busy_s,
        **judge(fronts["quiet"], fronts["busy"]), "confirmed_too_wide": len(too_wide),
        "too_wide": too_wide, "disturbing_process": named[:5],
        "named_the_burner": any(pid == burner.get("pid") for pid, _, _ in named),
        "quiet_front": fronts["quiet"], "busy_front": fronts["busy"],
        "quiet_total_s": runs["quiet"]["total_s"], "busy_total_s": runs["busy"]["total_s"],
        "quiet_output": runs["quiet"]["output"], "busy_output": runs["busy"]["output"],
        "training": _beside(runs, fronts),
    })


BUSY_SAID, BUSY_AT_START = "the machine stays busy", "the machine is busy before the search"


def _beside(runs: dict, fronts: dict) -> dict:
    """The run beside another training, against the quiet one."""
    run = runs["training"]
    said = [line for line in run["output"] if BUSY_SAID in line or BUSY_AT_START in line]
    quiet = next((r for r in fronts["quiet"] if r["default"]), None)
    mine = next((r for r in fronts["training"] if r["default"]), None)
    return {"total_s": run["total_s"], "over_quiet": run["total_s"] / runs["quiet"]["total_s"],
            "target_over_quiet": 2.0, "said_busy": len(said), "said": said,
            "same_default": quiet is not None and mine is not None and
            quiet["config"] == mine["config"],
            "named_the_training": any(pid == run["burner"]["pid"]
                                      for pid, _, _ in _named(run["study"])),
            **judge(fronts["quiet"], fronts["training"]), "front": fronts["training"],
            "output": run["output"]}


if __name__ == "__main__":
    main()
