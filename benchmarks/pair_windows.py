"""Where a paired confirmation's noise lies, by the length of its windows.

The quick start's baseline and its default config (b1024 f[10, 5], 0 workers; the
quick space's 64 hidden channels, which its baseline takes too) are measured in paired trials, as the search's confirmation measures them, with windows
of each length in ``--windows`` (seconds at the warm-up's pace), ``--pairs`` pairs
each, the lengths interleaved over ``--repeats`` rounds. For each length:

- the spread of the pairs' log ratios (``sd_pair``: what the engine's interval reads);
- the windows' own noise, from their blocks (``sd_within``: the log ratio's standard
  deviation a pair would have if the machine's speed never moved between windows),
  and the rest, the variance between windows (``sd_between``). The blocks of a
  prefetching loader alternate fast and slow, so ``sd_within`` can come out above
  ``sd_pair`` (then ``sd_between`` is 0): it is reported, not trusted alone;
- a pair's seconds, and the pairs and seconds a ±10% interval takes at that spread
  (the engine's confidence sequence, :func:`autotune.compare.boundary`).

If the windows' own noise dominated, longer windows would reach ±10% in fewer
seconds (Kalibera and Jones: spend repetitions where the variance is); if the
variance between windows does, short windows and many pairs do.

- ``split``: that balance read from each pair's inner halves (the second half of
  the window that ran first and the first half of the other: a pair of windows half
  as long), and the length it would choose (:func:`split`). Its ``sd_inner`` at one
  length is its forecast of ``sd_pair`` at half that length, beside the measured one.

With ``--beside-training`` another training (busy.py's) runs for the whole
measurement, and the trials' threads wait passively, as a search on a busy machine
runs them: where the noise lies when the machine stays busy.

    python benchmarks/pair_windows.py --out benchmarks/results/pair-windows-amx.json
"""
from __future__ import annotations

import math
import statistics
import subprocess
import sys
import tempfile

from _common import parser, prepare, write
from busy import TRAINING

from autotune.compare import Rule, boundary
from autotune.specs import MeasureSpec
from autotune.study._api import default_config
from autotune.study._search import BUSY_ENV
from autotune.trial import pooled
from autotune.trial._pairs import PairSpec, block_of
from autotune.trial._result import t975
from autotune.trial._runner import ForkServer, run_trial

TARGET = 0.10  # the confirmation's default precision
SPLIT_RANGE = (0.125, 8.0)  # the window lengths the split may name


def pairs_to(sd: float, precision: float = TARGET, most: int = 1000) -> int | None:
    """The pairs the engine's interval needs to reach ``precision`` at this spread."""
    for n in range(2, most):
        if sd * boundary(n) <= math.log1p(precision):
            return n
    return None


def window_sd(window: dict, workers: int) -> float | None:
    """A window's standard error of its log rate, from its blocks' half-width."""
    blocks = math.ceil(window["steps"] / block_of(workers))
    if window["precision"] is None or blocks < 2:
        return None
    return math.log1p(window["precision"] / t975(blocks - 1))


def split(groups: list[list[dict]], window_s: float, fixed_s: float) -> dict | None:
    """Kalibera and Jones's split of a pair's variance at windows of ``window_s``
    timed seconds, each opened by ``fixed_s`` (drain and untimed steps), from the
    pairs' log ratios and their inner halves' (``inner``: a pair of windows half as
    long), pooled around each candidate's mean. If a window's noise were its steps'
    alone (``within``, falling as one over its length) beside a variance from one
    window to the next (``between``), a precision would take the least time at
    ``best_s = sqrt(within * window_s * fixed_s / between)``: the measured spreads at
    each length say whether that holds. None with fewer than two degrees of freedom."""
    logs = [[(math.log(p["ratio"]), math.log(p["inner"])) for p in pairs
             if p.get("inner") and p["ratio"] > 0] for pairs in groups]
    (full, dof), (inner, _) = (pooled([[b[k] for b in both] for both in logs])
                               for k in (0, 1))
    if dof < 2:
        return None
    full, inner = full / dof, inner / dof
    within, between = max(inner - full, 0.0), max(2 * full - inner, 0.0)
    low, high = SPLIT_RANGE
    best = low if within <= 0 else high if between <= 0 else \
        min(high, max(low, math.sqrt(within * window_s * fixed_s / between)))
    return {"window_s": window_s, "fixed_s": fixed_s, "sd_pair": math.sqrt(full),
            "sd_inner": math.sqrt(inner), "between": between, "within": within, "dof": dof,
            "best_s": best}


def summary(window_s: float, results: list, workers: tuple[int, int]) -> dict:
    """One window length's figures over its paired trials."""
    logs, within, seconds, speedups, groups, timed, fixed = [], [], 0.0, [], [], [], []
    for result in results:
        paired = result.pairs
        c = paired["candidates"][0]
        groups.append(c["pairs"])
        timed += [w["seconds"] for side in paired["windows"] for w in side]
        fixed += [w["fixed_s"] for side in paired["windows"] for w in side]
        logs += [math.log(r) for r in c["ratios"]]
        speedups.append(c["speedup"])
        ref_w, own_w = paired["windows"]
        for ref, own in zip(ref_w, own_w):
            a, b = window_sd(ref, workers[0]), window_sd(own, workers[1])
            if a is not None and b is not None:
                within.append(a * a + b * b)
        seconds += result.phases_s["measure_total"]
    sd_pair = statistics.stdev(logs)
    var_within = statistics.fmean(within)
    pair_s = seconds / len(logs)
    needed = pairs_to(sd_pair)
    return {"split": split(groups, statistics.fmean(timed), statistics.fmean(fixed)), "window_s": window_s, "pairs": len(logs), "speedups": speedups,
            "sd_pair": sd_pair, "sd_within": math.sqrt(var_within),
            "sd_between": math.sqrt(max(sd_pair ** 2 - var_within, 0.0)),
            "pair_s": pair_s, "pairs_to_10pct": needed,
            "seconds_to_10pct": None if needed is None else needed * pair_s}


def main() -> None:
    p = parser(__doc__, "benchmarks/results/pair-windows.json")
    p.add_argument("--windows", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--beside-training", action="store_true",
                   help="another training (busy.py's) runs beside, threads passive")
    p.set_defaults(scale=0.02)
    args = p.parse_args()
    ref, stats, _ = prepare(args)
    base = default_config().replace(hidden_channels=64)  # the quick space's
    candidate = base.replace(num_neighbors=(10, 5), num_workers=0)
    rule = Rule(margin=0.0, min_pairs=args.pairs, max_pairs=args.pairs)
    got: dict[float, list] = {w: [] for w in args.windows}
    other = subprocess.Popen([sys.executable, "-c", TRAINING]) if args.beside_training \
        else None
    env = dict(BUSY_ENV) if args.beside_training else None
    try:
        with ForkServer() as server, tempfile.TemporaryDirectory() as folder:
            for repeat in range(args.repeats):
                for window_s in args.windows:
                    result = run_trial(base, dataset=ref, env=env, server=server,
                                       trial_dir=f"{folder}/{repeat}-{window_s}",
                                       measure=MeasureSpec(),
                                       pairs=PairSpec((candidate,), rule, 600.0, window_s))
                    if not result.ok:
                        raise SystemExit(f"the paired trial failed: {result.status} "
                                         f"{result.reason}")
                    got[window_s].append(result)
                    print(f"round {repeat}: windows of {window_s} s: "
                          f"{result.pairs['candidates'][0]['speedup']:.3f}x", flush=True)
    finally:
        if other is not None:
            other.kill()
    rows = [summary(w, got[w], (base.num_workers, candidate.num_workers)) for w in args.windows]
    for row in rows:
        print(f"{row['window_s']:>4} s windows: sd_pair {row['sd_pair']:.3f}, within "
              f"{row['sd_within']:.3f}, between {row['sd_between']:.3f}; {row['pair_s']:.2f} s "
              f"a pair; ±10% in {row['pairs_to_10pct']} pairs, "
              f"{row['seconds_to_10pct'] or float('nan'):.0f} s", flush=True)
        if row["split"]:
            h = row["split"]
            print(f"      inner halves sd {h['sd_inner']:.3f}: between {h['between'] ** 0.5:.3f}, "
                  f"within {h['within'] ** 0.5:.3f}, opened in {h['fixed_s']:.2f} s: "
                  f"best {h['best_s']:.2f} s", flush=True)
    write(args.out, {"benchmark": "pair_windows", "device": "cpu", "dataset": stats,
                     "baseline": base.to_dict(), "candidate": candidate.to_dict(),
                     "pairs_each": args.pairs, "repeats": args.repeats,
                     "beside_training": args.beside_training, "rows": rows})


if __name__ == "__main__":
    main()
