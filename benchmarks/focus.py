"""Where a paired confirmation's time goes when it cannot confirm every config: the
focus (:func:`autotune.trial._pairs.focus`) replayed on this machine's recorded pairs.

A confirmation beside a training on a 2-core machine has its 90 s of pairs for the
configs it races, each needing many pairs to come within ±10%, and cannot give every
one what it needs. Live quick starts race two to five configs as the search leaves
them, so a rule's effect shows in few of them. This replays the confirmation's own loop
(:func:`autotune.trial._pairs.run_pairs`: the focus, racing, the engine's decisions,
its 90 s) many times over noise recorded here, in configs whose speed-ups are those
the quick start confirmed beside a training, and counts how often the fastest is
confirmed in the one confirmation, the pairs it gets, and how often another config is
confirmed while the fastest is not (the default would be a slower config, or a
follow-up confirmation would be needed).

The noise is recorded, never simulated (``--record``): the quick start's baseline
paired with itself (A/A: every ratio is noise) in one paired trial of busy windows
(1 s or 0.5 s, the lengths a busy confirmation takes, threads passive) with busy.py's
training beside it, as a busy search's confirmation measures; each series is
replayed on its own. A replay draws each config's pairs from the centred series by
verdicts.py's circular block bootstrap (blocks of 4 pairs) and multiplies them by its
speed-up; each pair takes the series' mean seconds (recorded alone: two candidates
paired in a round share one window of the reference, so each of theirs takes three
quarters of it, :data:`SHARED`).

The ways replayed, each a rule the code ran:
- ``as-read``: the time goes to the fastest config as read, once their pooled spread
  is known (a fresh folder: the record holds none), as on 75d5fcb;
- ``as-read-guess``: the same, reading the contender rule's guess of a busy pair's
  spread (:data:`GUESS`) from the first pair;
- ``best-case-guess``: the time goes to the config whose pairs allow the most
  speed-up (:meth:`autotune.compare.Comparison.best_case`), from the first pair, as
  shipped since 9233da9.

    python benchmarks/focus.py --record --beside-training               # 1-s pairs here
    python benchmarks/focus.py --record --beside-training --window 0.5  # 0.5-s pairs
    python benchmarks/focus.py --replays 2000                           # replays them
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from _common import write
from verdicts import _machine, draws  # the block bootstrap verdicts.py replays with

from autotune.study._confirm import PAIRED_MAX_S
from autotune.study._window_length import UNKNOWN_SPREAD

RESULTS = Path(__file__).parent / "results"
SERIES = RESULTS / "focus-series.json"
MAX_S = PAIRED_MAX_S  # the confirmation's seconds of pairs
GUESS = UNKNOWN_SPREAD[True]  # the contender rule's guess of a busy pair's spread
# a pair's share of a round where two candidates share the reference's window: its
# own window and half the reference's, of two windows alike
SHARED = 0.75
# The configs' speed-ups as quick starts beside a training confirmed them (the fastest
# first): docs/benchmarks.md, quickstart.py --one-folder --beside-training
SCENARIOS = {
    # AVX2-only EPYC, 2026-12-02: #3, #1, #7, #2 and the emulated bfloat16 #5
    "avx2-five": [1.80, 1.46, 1.14, 1.06, 0.60],
    # EPYC with avx512_bf16 (model 17), 2026-12-02, run 3 of the -guess set
    "avx512bf16-four": [2.30, 1.72, 1.65, 1.05],
    # two configs close together: a bfloat16 config and its float32 twin
    "twins": [2.20, 2.05],
}
WAYS = ("as-read", "as-read-guess", "best-case-guess")


def record(pairs: int, beside: bool, window_s: float) -> dict:
    """``pairs`` A/A pairs of the quick start's baseline in windows of ``window_s``,
    threads passive, one paired trial, beside busy.py's training where ``beside``."""
    import os
    import tempfile

    from busy import TRAINING

    from autotune.compare import Rule
    from autotune.data._datasets import DatasetRef
    from autotune.specs import MeasureSpec, TrialLimits
    from autotune.study._api import default_config
    from autotune.trial import PairSpec, run_trial

    ref = DatasetRef("synthetic", root="data", scale=0.02)
    ref.prepare()
    baseline = default_config("cpu")
    other = subprocess.Popen([sys.executable, "-c", TRAINING]) if beside else None
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # the trial's, as a busy search's (not its)
    try:
        with tempfile.TemporaryDirectory() as folder:
            result = run_trial(baseline, dataset=ref, trial_dir=folder,
                               measure=MeasureSpec(precision=0.10),
                               limits=TrialLimits(timeout_s=30 * pairs),
                               pairs=PairSpec((baseline,), Rule(min_pairs=pairs,
                                                                max_pairs=pairs),
                                              max_s=20.0 * pairs, window_s=window_s))
    finally:
        if other is not None:
            other.kill()
    if not result.ok:
        sys.exit(f"the paired trial failed: {result.status} {result.reason}")
    candidate = result.pairs["candidates"][0]
    seconds = [p["seconds"] for p in candidate["pairs"]]
    logs = [math.log(r) for r in candidate["ratios"]]
    print(f"{len(logs)} pairs, spread {statistics.stdev(logs):.3f}, "
          f"{statistics.fmean(seconds):.2f} s a pair", flush=True)
    return {"source": f"A/A pairs of the quick start's baseline, {window_s:g}-s windows, "
                      "threads passive", "window_s": window_s,
            "beside_training": beside, "ratios": candidate["ratios"],
            "pair_s": statistics.fmean(seconds), "busy_pairs": candidate["busy_pairs"],
            "redone": candidate["redone"]}


def replay(way: str, speedups: list[float], logs: list[float], pair_s: float,
           rng: random.Random) -> dict:
    """One confirmation's pairs (the real :func:`run_pairs`), each pair drawn from
    ``logs`` for its config, on a clock that each pair moves by ``pair_s`` (by
    :data:`SHARED` of it where two share a window of the reference)."""
    from autotune.study._confirm import MAX_PAIRS, pairs_rule
    from autotune.trial import _pairs

    rule = pairs_rule(0.10)
    noise = {c: iter(draws(logs, MAX_PAIRS, rng)) for c in range(len(speedups))}
    clock = [0.0]

    def pairs_of(reference, before, after, sides, round_, spec, window_s):
        shared = before is not None and after is not None
        for c in (before, after):
            if c is None:
                continue
            ratio = speedups[c.side.index] * math.exp(next(noise[c.side.index]))
            seconds = pair_s * (SHARED if shared else 1.0)
            clock[0] += seconds
            c.pairs.append({"ratio": ratio, "window_s": window_s, "seconds": seconds,
                            "round": round_, "half_width": None,
                            "ref_first": c is after})
            c.comparison.add(ratio)

    candidates = [_pairs.Candidate(SimpleNamespace(index=i), _pairs.Comparison(rule))
                  for i in range(len(speedups))]
    saved = _pairs._pairs_of, _pairs.time.perf_counter, _pairs.Comparison.best_case
    _pairs._pairs_of, _pairs.time.perf_counter = pairs_of, lambda: clock[0]
    if way.startswith("as-read"):
        _pairs.Comparison.best_case = lambda self, spread: self.decision().speedup
    try:
        _pairs.run_pairs(None, candidates, None, _pairs.PairSpec(
            rule=rule, max_s=MAX_S, window_s=1.0, noise=GUESS if "guess" in way else None))
    finally:
        _pairs._pairs_of, _pairs.time.perf_counter, _pairs.Comparison.best_case = saved
    # confirmed as the front reads it (Confirmed.why_not): its interval within ±10%
    widths = [c.comparison.decision().half_width for c in candidates]
    confirmed = [w is not None and w <= rule.precision for w in widths]
    return {"fastest_confirmed": confirmed[0], "other_confirmed": any(confirmed[1:]),
            "fastest_pairs": candidates[0].comparison.pairs,
            "pairs": sum(c.comparison.pairs for c in candidates), "seconds": clock[0]}


def summary(runs: list[dict]) -> dict:
    n = len(runs)
    return {"fastest_confirmed": sum(r["fastest_confirmed"] for r in runs) / n,
            "other_confirmed_not_fastest": sum(r["other_confirmed"] and not r["fastest_confirmed"]
                                               for r in runs) / n,
            "fastest_pairs_mean": statistics.fmean(r["fastest_pairs"] for r in runs),
            "pairs_mean": statistics.fmean(r["pairs"] for r in runs),
            "seconds_mean": statistics.fmean(r["seconds"] for r in runs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--record", action="store_true", help="record busy A/A pairs here")
    p.add_argument("--beside-training", action="store_true",
                   help="with busy.py's training beside the recording")
    p.add_argument("--pairs", type=int, default=40, help="pairs to record")
    p.add_argument("--window", type=float, default=1.0,
                   help="the recorded windows' seconds (a busy confirmation's: 1, or 0.5)")
    p.add_argument("--replays", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--series", default=str(SERIES))
    p.add_argument("--out", default=str(RESULTS / "focus.json"))
    args = p.parse_args()
    path = Path(args.series)
    kept = json.loads(path.read_text()) if path.exists() else []
    if args.record:  # a series of the same windows and state is replaced
        series = {**record(args.pairs, args.beside_training, args.window),
                  "machine": _machine()}
        kept = [k for k in kept if (k["window_s"], k["beside_training"]) !=
                (series["window_s"], series["beside_training"])] + [series]
        path.write_text(json.dumps(kept, indent=1) + "\n")
        return
    out = []
    for series in kept:
        logs = [math.log(r) for r in series["ratios"]]
        results = {}
        for name, speedups in SCENARIOS.items():
            results[name] = {}
            for way in WAYS:
                rng = random.Random(args.seed)  # the same draws for each way: side by side
                results[name][way] = summary([replay(way, speedups, logs, series["pair_s"],
                                                     rng) for _ in range(args.replays)])
        out.append({"series": {k: v for k, v in series.items() if k != "ratios"},
                    "spread": statistics.stdev(logs), "results": results})
    write(args.out, {"benchmark": "focus", "replays": args.replays, "max_s": MAX_S,
                     "guess": GUESS, "scenarios": SCENARIOS, "series": out})


if __name__ == "__main__":
    main()
