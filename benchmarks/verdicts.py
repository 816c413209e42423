"""Replays recorded series of real paired measurements, with a known gain injected,
through the one comparison engine (autotune.compare) and through the rules it
replaced: how often each detects a 1.07x gain, how often each keeps a 1.00x change,
and the mean pairs each used.

The series are the noise of these machines, recorded, never simulated:
- in-run windows: A/A pairs of a tuned run (``autotune train --tune``'s own windows
  of 8 steps: a candidate identical to the incumbent, so every ratio is noise),
  recorded with ``--record`` on the machine at hand;
- paired windows: the quick start's paired confirmation as it measures on a CPU
  (``--record-pairs``): its baseline (PyG's reddit.py config, 2 loader workers)
  against itself (A/A: every ratio is noise) and against the default it picks
  (b1024 f[10, 5], no loader workers: the noise of two unlike configs), each one
  paired trial of short windows, ABBA, recorded on the machine at hand;
- confirmation rounds: the quick start's confirmation by rounds of trial processes
  (benchmarks/quickstart.py's output before the paired confirmation), each
  candidate's ratio to its round's baseline, from every ``quickstart*.json`` given.

Each series is centred (its log ratios less their mean: only the noise stays), then
a replay draws pairs from it by a circular block bootstrap (blocks of 4 pairs, so
that runs of slow or fast windows stay together) and multiplies each by the gain.
The rules replayed, each as the code ran it:
- engine: :class:`autotune.compare.Comparison` (margin 2%, 4 to 32 pairs, as the
  in-run tuner asks), looked at after every pair, "detects" where it says faster;
- tuner: the in-run tuner's whole rule: its screen on the first two pairs
  (:func:`autotune.tuning._spec.screened`: dropped under 0.8x each, kept over 1.25x
  each), then the engine, stopped "no faster" where the pairs left could not call
  it faster (:meth:`autotune.compare.Comparison.out_of_reach`); ``mean_pairs_1.00``
  shows what that saves;
- tuner-range: the in-run tuner's old rule: the mean of 2-3 ratios less half their
  range above 1.02 (first pair under 0.8 dropped);
- confirm-median: the confirmation's old rule: the median of 3 rounds' ratios with
  a log t-interval, two more rounds while wider than ±20%, "detects" where the
  interval's low end is above 1;
- t-every-pair: a 95% t-interval looked at after every pair (3 to 32), stopping at
  its first verdict: why the engine uses a confidence sequence.

The old confirmation's rule takes few rounds because it gives up: it detects a 1.07x
gain in a fraction of replays. So each series also has ``confirm-median`` at the power
the engine is held to: the fewest rounds, fixed, at which that rule (the median's low
end above 1, :func:`median_half`) detects 1.07x in 90% of replays, with how often it then keeps 1.00x.
The engine's mean pairs at 1.07x against those rounds is the count at the same
decision.

A series of fewer than 8 pairs (a quick start's confirmation has 3 to 8 rounds a
candidate) is listed but not replayed: resampling it would replay its few values.

    python benchmarks/verdicts.py --record            # records in-run windows here
    python benchmarks/verdicts.py --record-pairs      # records paired windows here
    python benchmarks/verdicts.py --replays 2000      # replays every recorded series
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
from pathlib import Path

from _common import write

from autotune.compare import Comparison, Rule, t_quantile

RESULTS = Path(__file__).parent / "results"
SERIES = RESULTS / "verdict-series.json"
GAINS = (1.00, 1.07)
BLOCK = 4
ENGINE = Rule(margin=0.02, max_pairs=32)  # the in-run tuner's (TuneSpec)
MIN_PAIRS = 8  # a series shorter than this is too short to resample
MOST_ROUNDS = 64  # the most fixed rounds tried for the old rule's power
TARGETS = {"detects_1.07": 0.90, "keeps_1.00": 0.05}


def record(scale: float, pairs: int, batch_size: int) -> list[dict]:
    """A/A pairs of in-run windows for a config with loader workers (2) and one
    without, each from a tuned run whose one candidate is its own config."""
    from autotune.data._datasets import DatasetRef
    from autotune.tuning import Change, TunedRun, TuneSpec
    from autotune.study._api import default_config

    ref = DatasetRef("synthetic", root="data", scale=scale)
    prepared = ref.prepare()
    machine = _machine()
    out = []
    for workers in (2, 0):
        config = default_config().replace(batch_size=batch_size, num_workers=workers)
        spec = TuneSpec(share=1.0, window_steps=8, pairs=pairs, min_pairs=pairs,
                        min_gain=0.0, screen=0.0)
        seconds: list[float] = []
        run = TunedRun(config, prepared.data, spec, epochs=10_000,
                       num_classes=prepared.num_classes, cache_file=ref.csc_path(),
                       queue=[Change("num_workers", workers, config, "A/A")],
                       on_window=lambda event, log: seconds.append(event.seconds))
        try:
            epoch = 0
            while not run.log.tried or not run.log.tried[0].verdict:
                epoch += 1
                for batch in run.batches(epoch):
                    with run.step() as step:
                        step.loss = run.current.train_step(batch)
        finally:
            run.close()
        tried = run.log.tried[0]
        out.append({"source": "in-run windows", "machine": machine,
                    "config": f"scale {scale}, batch {batch_size}, {workers} workers, "
                              "windows of 8 steps", "ratios": tried.ratios,
                    "pair_s": 2 * statistics.fmean(seconds)})
        print(f"{out[-1]['config']}: {len(tried.ratios)} pairs, spread "
              f"{statistics.stdev(math.log(r) for r in tried.ratios):.3f}", flush=True)
    return out


def record_pairs(scale: float, pairs: int) -> list[dict]:
    """Paired windows of the quick start's confirmation: its baseline against itself
    and against its default, ``pairs`` pairs each, one paired trial each (two, so
    that racing drops neither), as :mod:`autotune.trial._pairs` measures them."""
    import tempfile

    from autotune.data._datasets import DatasetRef
    from autotune.specs import MeasureSpec, TrialLimits
    from autotune.study._api import default_config
    from autotune.trial import PairSpec, run_trial

    ref = DatasetRef("synthetic", root="data", scale=scale)
    ref.prepare()
    baseline = default_config("cpu")
    rule = Rule(margin=0.02, min_pairs=pairs, max_pairs=pairs)  # never decides early
    out = []
    for name, candidate in (("itself (A/A)", baseline),
                            ("b1024 f[10, 5] w0", baseline.replace(num_neighbors=(10, 5),
                                                                   num_workers=0))):
        with tempfile.TemporaryDirectory() as folder:
            result = run_trial(baseline, dataset=ref, trial_dir=folder,
                               measure=MeasureSpec(precision=0.10),
                               limits=TrialLimits(timeout_s=30 * pairs),
                               pairs=PairSpec((candidate,), rule, max_s=20.0 * pairs))
        if not result.ok:
            sys.exit(f"the paired trial against {name} failed: {result.status} "
                     f"{result.reason}")
        paired = result.pairs
        seconds = [w["seconds"] for side in paired["windows"] for w in side]
        out.append({"source": "paired windows", "machine": _machine(),
                    "config": f"scale {scale}, the quick start's baseline against {name}, "
                              f"windows of {paired['window_steps']} steps",
                    "ratios": paired["candidates"][0]["ratios"],
                    "pair_s": 2 * statistics.fmean(seconds)})
        print(f"{out[-1]['config']}: {len(out[-1]['ratios'])} pairs, spread "
              f"{statistics.stdev(math.log(r) for r in out[-1]['ratios']):.3f}", flush=True)
    return out


def _machine() -> str:
    from autotune.env import fingerprint

    env = fingerprint("cpu")
    return f"{env['cpu']} ({', '.join(env['cpu_features']) or 'no AVX-512'})"


ROUND = re.compile(r"\[round (\d+)\] of #(\d+) .*?([\d,]+) seed nodes/s")


def confirmation_series(path: Path) -> list[dict]:
    """Each confirmed candidate's ratios to its round's baseline in a quick start's
    output (the baseline is the first config of round 1)."""
    blob = json.loads(path.read_text())
    rounds: dict[int, dict[int, float]] = {}
    order: list[int] = []
    for line in blob["output"]:
        match = ROUND.search(line)
        if match:
            r, of, rate = int(match[1]), int(match[2]), float(match[3].replace(",", ""))
            rounds.setdefault(of, {})[r] = rate
            order.append(of)
    if not order:
        return []
    base = order[0]
    out = []
    for of, rates in rounds.items():
        both = [r for r in rates if r in rounds[base]]
        if of == base or len(both) < 3:
            continue
        out.append({"source": "confirmation rounds", "machine": blob["env"].get("cpu", "?"),
                    "config": f"{path.name}: #{of} over the baseline #{base}",
                    "ratios": [rates[r] / rounds[base][r] for r in sorted(both)],
                    "pair_s": None})
    return out


def draws(logs: list[float], n: int, rng: random.Random) -> list[float]:
    """``n`` centred log ratios by a circular block bootstrap of ``logs``."""
    centre = statistics.fmean(logs)
    out: list[float] = []
    while len(out) < n:
        start = rng.randrange(len(logs))
        out += [logs[(start + i) % len(logs)] - centre for i in range(BLOCK)]
    return out[:n]


def engine(ratios: list[float], futility: bool = False) -> tuple[bool, int]:
    """The engine looked at after every pair, and with ``futility`` stopped where the
    pairs left could not call it faster (the tuner's rule)."""
    comparison = Comparison(ENGINE)
    for ratio in ratios:
        decision = comparison.add(ratio)
        if decision.decided or comparison.exhausted or \
                futility and comparison.out_of_reach() is not None:
            return decision.verdict == "faster", decision.pairs
    return False, len(ratios)


def tuner(ratios: list[float]) -> tuple[bool, int]:
    from autotune.tuning._spec import SCREEN_PAIRS, TuneSpec, screened

    screen = screened(ratios[:SCREEN_PAIRS], TuneSpec().screen)
    if screen:
        return screen == "kept", SCREEN_PAIRS
    return engine(ratios, futility=True)


def tuner_range(ratios: list[float], pairs: int = 3, min_gain: float = 0.02,
                screen: float = 0.8) -> tuple[bool, int]:
    seen: list[float] = []
    for ratio in ratios[:pairs]:
        seen.append(ratio)
        mean = statistics.fmean(seen)
        half = (max(seen) - min(seen)) / 2 if len(seen) > 1 else 0.0
        if len(seen) == 1 and mean < screen:
            return False, 1
        if len(seen) >= 2 and (mean - half > 1 + min_gain or mean + half < 1):
            return mean - half > 1 + min_gain, len(seen)
    return mean - half > 1 + min_gain, len(seen)


def median_half(ratios: list[float]) -> tuple[float, float]:
    """The old confirmation's figures: the ratios' median and the relative half-width
    of their log t-interval."""
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    return statistics.median(ratios), \
        math.expm1(t_quantile(0.95, n - 1) * statistics.stdev(logs) / math.sqrt(n))


def confirm_median(ratios: list[float], rounds: int = 3, extra: int = 2,
                   within: float = 0.20) -> tuple[bool, int]:
    n = rounds
    while True:
        median, half = median_half(ratios[:n])
        if half <= within or n >= rounds + extra:
            return median * (1 - half) > 1, n
        n += 1


def rounds_to_power(series: dict, replays: int, seed: int,
                    power: float = TARGETS["detects_1.07"]) -> dict:
    """The fewest rounds (3 to :data:`MOST_ROUNDS`, fixed) at which the old rule
    detects a 1.07x gain in ``power`` of ``replays``, and its rate of keeping 1.00x
    there; rounds None where even the most do not reach it."""
    logs = [math.log(r) for r in series["ratios"]]
    rates = {}
    for gain in GAINS:
        rng = random.Random(seed)
        hits = [0] * (MOST_ROUNDS + 1)
        for _ in range(replays):
            ratios = [math.exp(x + math.log(gain)) for x in draws(logs, MOST_ROUNDS, rng)]
            for n in range(3, MOST_ROUNDS + 1):
                median, half = median_half(ratios[:n])
                hits[n] += median * (1 - half) > 1
        rates[gain] = [h / replays for h in hits]
    rounds = next((n for n in range(3, MOST_ROUNDS + 1) if rates[1.07][n] >= power), None)
    return {"rounds": rounds, "detects_1.07": rates[1.07][rounds] if rounds else None,
            "keeps_1.00": rates[1.00][rounds] if rounds else None}


def t_every_pair(ratios: list[float], first: int = 3, most: int = 32) -> tuple[bool, int]:
    for n in range(first, most + 1):
        logs = [math.log(r) for r in ratios[:n]]
        half = t_quantile(0.95, n - 1) * statistics.stdev(logs) / math.sqrt(n)
        mean = statistics.fmean(logs)
        if mean - half > 0 or mean + half < 0:
            return mean - half > 0, n
    return False, most


RULES = {"engine": engine, "tuner": tuner, "tuner-range": tuner_range,
         "confirm-median": confirm_median,
         "t-every-pair": t_every_pair}


def replay(series: dict, replays: int, seed: int) -> dict:
    """Each rule's rate of "faster" and mean pairs at each gain, over ``replays``."""
    logs = [math.log(r) for r in series["ratios"]]
    figures: dict[str, dict] = {}
    for gain in GAINS:
        rng = random.Random(seed)
        counts = {name: [0, 0] for name in RULES}
        for _ in range(replays):
            ratios = [math.exp(x + math.log(gain)) for x in draws(logs, ENGINE.max_pairs, rng)]
            for name, rule in RULES.items():
                faster, pairs = rule(ratios)
                counts[name][0] += faster
                counts[name][1] += pairs
        for name, (faster, pairs) in counts.items():
            figures.setdefault(name, {})[f"{gain:.2f}"] = {
                "faster": faster / replays, "mean_pairs": pairs / replays}
    return figures


def summary(rows: list[dict]) -> dict:
    """Each rule's figures over every series (their mean), with the engine's targets."""
    out = {}
    for name in RULES:
        detect = statistics.fmean(r["rules"][name]["1.07"]["faster"] for r in rows)
        keep = statistics.fmean(r["rules"][name]["1.00"]["faster"] for r in rows)
        pairs = statistics.fmean(r["rules"][name]["1.07"]["mean_pairs"] for r in rows)
        pairs_1 = statistics.fmean(r["rules"][name]["1.00"]["mean_pairs"] for r in rows)
        out[name] = {"detects_1.07": detect, "keeps_1.00": keep, "mean_pairs_1.07": pairs,
                     "mean_pairs_1.00": pairs_1,
                     "worst_detects_1.07": min(r["rules"][name]["1.07"]["faster"]
                                               for r in rows),
                     "worst_keeps_1.00": max(r["rules"][name]["1.00"]["faster"]
                                             for r in rows)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--record", action="store_true",
                   help="record in-run A/A windows on this machine first (adds to the series)")
    p.add_argument("--record-pairs", action="store_true",
                   help="record the quick start's paired windows on this machine first "
                        "(adds to the series)")
    p.add_argument("--scale", type=float, default=0.1,
                   help="the synthetic graph's scale for --record (--record-pairs: 0.02, "
                        "the quick start's)")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--quickstart", nargs="*", default=None,
                   help="quick-start outputs to read rounds from (default: results/quickstart*.json)")
    p.add_argument("--replays", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--series", default=str(SERIES))
    p.add_argument("--out", default=str(RESULTS / "verdicts.json"))
    args = p.parse_args()
    stored = json.loads(Path(args.series).read_text()) if Path(args.series).exists() else []
    if args.record:
        stored += record(args.scale, args.pairs, args.batch_size)
    if args.record_pairs:
        stored += record_pairs(0.02, args.pairs)
    if args.record or args.record_pairs:
        Path(args.series).write_text(json.dumps(stored, indent=1) + "\n")
    files = args.quickstart if args.quickstart is not None else \
        sorted(str(f) for f in RESULTS.glob("quickstart*.json"))
    series = [s for s in stored if s["source"] != "confirmation rounds"] + \
        [s for f in files for s in confirmation_series(Path(f))]
    if not series:
        sys.exit("no series: run with --record, or give --quickstart files")
    rows, short = [], []
    for s in series:
        logs = [math.log(r) for r in s["ratios"]]
        row = {**s, "pairs": len(logs), "log_sd": statistics.stdev(logs)}
        if len(logs) < MIN_PAIRS:
            short.append({k: v for k, v in row.items() if k != "ratios"})
            continue
        rows.append({**row, "rules": replay(s, args.replays, args.seed),
                     "confirm_median_at_power": rounds_to_power(s, args.replays, args.seed)})
    if not rows:
        sys.exit(f"no series of {MIN_PAIRS} pairs or more: run with --record")
    overall = summary(rows)
    best = overall["engine"]
    at_power = [r["confirm_median_at_power"]["rounds"] for r in rows]
    reached = [n for n in at_power if n is not None]
    write(args.out, {
        "benchmark": "verdicts", "device": "cpu", "replays": args.replays, "block": BLOCK,
        "engine_rule": {"margin": ENGINE.margin, "min_pairs": ENGINE.min_pairs,
                        "max_pairs": ENGINE.max_pairs, "confidence": ENGINE.confidence},
        "targets": TARGETS,
        "meets": {"detects_1.07": best["worst_detects_1.07"] >= TARGETS["detects_1.07"],
                  "keeps_1.00": best["worst_keeps_1.00"] <= TARGETS["keeps_1.00"],
                  "fewer_pairs_than_confirm_median":
                      best["mean_pairs_1.07"] < overall["confirm-median"]["mean_pairs_1.07"],
                  "fewer_pairs_than_confirm_median_at_its_power":
                      len(reached) == len(rows) and
                      best["mean_pairs_1.07"] < statistics.fmean(reached)},
        "summary": overall,
        "confirm_median_at_power": {
            "power": TARGETS["detects_1.07"], "most_rounds": MOST_ROUNDS,
            "mean_rounds": statistics.fmean(reached) if reached else None,
            "rounds": at_power},
        "series": [{k: v for k, v in r.items() if k != "ratios"} for r in rows],
        "too_short_to_replay": short,
    })


if __name__ == "__main__":
    main()
