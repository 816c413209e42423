"""Tuning inside the training run against the other ways to the same training: one
training (the same dataset, config, epochs and seed) six ways, each an ``autotune``
command in a fresh interpreter timed from its start to its end, and each run
``--runs`` times (2 by default). A run times the ways in :data:`WAYS`' order, each
tuned way beside its oracle, and the run after it in the reverse order (ABBA), so that
a drift of the machine weighs on both sides of each ratio alike:

- ``baseline``: the baseline config (PyG's examples/reddit.py) throughout;
- ``search_then_train``: ``autotune search --budget B`` (batch size and fanout
  pinned to the baseline's, as ``autotune train --tune`` keeps them), its export,
  and training that export; the search's wall time counts;
- ``tuned``: ``autotune train --tune`` from the baseline;
- ``tuned_precision``: ``autotune train --tune --tune-precision`` from the baseline;
- ``oracle``: the fastest config of a grid over the knobs ``--tune`` tries, trained
  from the first step;
- ``oracle_precision``: the fastest of that grid and of its precision variants (the
  AMP and feature dtypes and the dropout masks ``--tune-precision`` tries on this
  machine: bfloat16 autocast only where the CPU computes it natively) of its
  ``--precision-top`` fastest configs, trained from the first step.

The grid is measured once, first (``autotune trial`` per config), and its time is
not counted: no run can know the oracle in advance. Each way's figure is the median
of its runs' wall times, with the spread (max over min, less 1); each target's ratio
is the median of its runs' own ratios (the two ways timed in the same run, side by
side for a tuned way and its oracle), with their range; with two runs a way that
range is the only precision there is, and the JSON says so.

Time on the Reddit-shaped synthetic graph (``--scale``, 10% by default, 60 epochs of
16 steps by default: a tuned run's fixed cost, the evidence it gathers whatever the
run's length (its start config's windows, the numerics check, the fast end's parts
undone, its windows' records: docs/benchmarks.md has them measured), weighs on a
20-epoch run's minute of training three times as much as here, and a run a user
tunes trains for longer still);
accuracy on real Cora (../shared/data/planetoid, copied to the workdir; skipped with a
message where absent), one run a way, where the baseline also trains with more
seeds (``--cora-seeds``, 10 in all by default: a run that differs from the untuned
ones in nothing but its draws lies outside the range of n of them with probability
2 / (n + 1), a third of the time at 5, 18% at 10): the spread of the untuned runs,
within which each tuned run's accuracy must lie. Targets at the top of the
JSON: ``tuned_over_oracle`` and ``tuned_precision_over_oracle_precision`` <= 1.08,
``tuned_precision_over_search_then_train`` <= 0.6.

    python benchmarks/online.py --out benchmarks/results/online.json

A second kind of CPU is checked one run a way into a file of its own (``--runs 1``
is refused for online.json itself):

    python benchmarks/online.py --runs 1 --out benchmarks/results/online-avx2.json

``--accuracy-only`` runs the Cora part again into ``--out``'s JSON (its time left
as it was), and says when.

``--oracle FILE`` (an earlier run's oracle.yaml) runs only ``tuned`` and ``oracle``
(with ``--oracle-precision FILE`` also ``tuned_precision`` and that oracle), side by
side, ``--runs`` times (1 allowed), without the grid: a check of a change to
``--tune`` (with precision, 16 minutes a run at 60 epochs on a 2-core EPYC with
avx512_bf16; ``--epochs 20`` takes a third of that), not the benchmark (its JSON
says so and has no other way). It writes
online-tuned-oracle.json (which table.py reads) unless ``--out`` names another file,
never the full run's online.json.
"""
from __future__ import annotations

import itertools
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from _common import write

from autotune.config import TrialConfig, short
from autotune.env import fingerprint, native_bf16
from autotune.errors import AutotuneError
from autotune.pipeline import check_config
from autotune.study._api import default_config
from autotune.topology import STRATEGIES, affinity_sets, this_machine

PLANETOID = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "planetoid"
WAYS = ("baseline", "search_then_train", "tuned", "oracle", "oracle_precision",
        "tuned_precision")  # each tuned way beside its oracle; odd runs reversed
TARGETS = {"tuned_over_oracle": ("tuned", "oracle", 1.08),
           "tuned_precision_over_oracle_precision": ("tuned_precision", "oracle_precision", 1.08),
           "tuned_precision_over_search_then_train": ("tuned_precision", "search_then_train", 0.6)}
OUT = "benchmarks/results/online.json"
PARTIAL_OUT = "benchmarks/results/online-tuned-oracle.json"  # --oracle's


def autotune(*args: str, ok: tuple[int, ...] = (0,)) -> tuple[dict | None, float, str]:
    """``autotune ARGS -f json`` in a fresh interpreter: its JSON, its wall time, and
    its stderr's tail; a command that exits other than ``ok`` stops the benchmark,
    saying why."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "autotune", *args, "-f", "json"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in ok:
        raise SystemExit(f"autotune {' '.join(args)} failed ({proc.returncode}):\n"
                         f"{proc.stderr[-3000:]}")
    return json.loads(proc.stdout) if proc.stdout.strip() else None, wall, proc.stderr[-2000:]


def grid(base: TrialConfig) -> list[TrialConfig]:
    """Every config of the knobs ``--tune`` tries (loader workers, affinity, sampling
    backend, aggregation) that is valid here; batch size and fanout the baseline's."""
    topology = this_machine()
    workers = sorted({0, 1, 2, len(topology.cores) - 1, base.num_workers})
    out = []
    for w, strategy, backend, aggregation in itertools.product(
            workers, ("none", *STRATEGIES), ("builtin", "pyg"), ("scatter", "sparse")):
        if strategy != "none" and (w == 0 or topology.why_not(strategy)):
            continue
        cores = dict(zip(("loader_cores", "compute_cores"), affinity_sets(strategy, w, topology))) \
            if strategy != "none" else {"loader_cores": None, "compute_cores": None}
        try:
            config = base.replace(num_workers=w, sampling_backend=backend,
                                  aggregation=aggregation, **cores)
            check_config(config)
        except AutotuneError:
            continue
        out.append(config)
    return list({c.key(): c for c in out}.values())


def config_file(config: TrialConfig, path: Path) -> str:
    path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    return str(path)


def pinned_space(base: TrialConfig, folder: Path) -> str:
    """search_spaces/default.yaml with batch size and fanout pinned to the baseline's."""
    from autotune.study._space import resolve_space_path

    space = yaml.safe_load(resolve_space_path("default").read_text())
    space["description"] = "benchmarks/online.py: default.yaml, batch size and fanout pinned"
    space["knobs"].update(batch_size=base.batch_size, num_neighbors=list(base.num_neighbors))
    (folder / "online-space.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    return str(folder / "online-space.yaml")


def trained(blob: dict, wall: float, **extra) -> dict:
    key = next(k for k in blob if k.startswith("best_test_"))
    tuning = blob.get("tuning") or {}
    return {"wall_s": wall, "train_s": blob["train_s"], "explore_s": tuning.get("explore_s", 0.0),
            "final_test_metric": blob["epochs"][-1]["test_metric"],
            "best_val_epoch_test_metric": blob[key], "config": blob["config"],
            "epochs_s": [e["train_s"] for e in blob["epochs"]],
            "evals_s": [e.get("eval_s", 0.0) for e in blob["epochs"]],  # outside epochs_s
            "losses": [e["loss"] for e in blob["epochs"]],
            **({"tuning": tuning} if tuning else {}), **extra}


def precision_variants(config: TrialConfig) -> list[TrialConfig]:
    """``config`` with each AMP and feature dtype and dropout masks ``--tune-precision``
    tries here (bfloat16 autocast only on a CPU that computes it natively), each
    valid here."""
    amp = ("float32", "bfloat16") if native_bf16() else ("float32",)
    out = []
    for amp_dtype, feature_dtype, masks in itertools.product(
            amp, ("float32", "bfloat16"), ("bernoulli", "bits")):
        try:
            variant = config.replace(amp_dtype=amp_dtype, feature_dtype=feature_dtype,
                                     dropout_masks=masks)
            check_config(variant)
        except AutotuneError:
            continue
        if variant.key() != config.key():
            out.append(variant)
    return out


def measure(data: list[str], configs: list[TrialConfig], folder: Path, grid_s: float,
            name: str) -> list[tuple[float, TrialConfig]]:
    """Each config's throughput, one ``autotune trial`` each (its task's first figure)."""
    measured = []
    for i, config in enumerate(configs):
        blob, _, _ = autotune("trial", *data, "--config",
                              config_file(config, folder / f"{name}{i}.yaml"),
                              "--max-seconds", str(grid_s), "--studies-dir", str(folder / "studies"))
        rate = next(iter(blob["summary"].values()))
        measured.append((rate, config))
        print(f"{name} {i}: {rate:,.0f} {short(config.to_dict())}", flush=True)
    return measured


def oracles(data: list[str], base: TrialConfig, folder: Path, grid_s: float, top: int
            ) -> tuple[TrialConfig, TrialConfig, list[dict]]:
    """The oracle (the grid's fastest) and the oracle with precision (the fastest of
    the grid and the precision variants of its ``top`` fastest), and every figure."""
    plain = measure(data, grid(base), folder, grid_s, "grid")
    ranked = sorted(plain, key=lambda m: -m[0])
    variants = list({v.key(): v for _, c in ranked[:top] for v in precision_variants(c)}.values())
    precise = measure(data, variants, folder, grid_s, "precision")
    rows = [{"throughput": t, "config": c.to_dict(), "precision_variant": i >= len(plain)}
            for i, (t, c) in enumerate(plain + precise)]
    return ranked[0][1], max(plain + precise, key=lambda m: m[0])[1], rows


def search_then_train(data: list[str], base: TrialConfig, train: list[str], budget: str,
                      folder: Path) -> dict:
    """``autotune search``, its export, and training the export (the baseline where
    the search found nothing), the three timed together."""
    name = f"online-{time.strftime('%Y%m%d-%H%M%S')}"
    study = ["--study-name", name, "--studies-dir", str(folder / "studies")]
    # A budget too short to compare anything ends the search with exit 1: its user
    # then trains the baseline, and that is what this way times.
    _, search_s, why = autotune("search", *data, *study, "--budget", budget,
                                "--space", pinned_space(base, folder), ok=(0, 1))
    export = str(folder / "export.yaml")
    blob, export_s, _ = autotune("export", *study, "--out", export, ok=(0, 2))
    found = blob is not None
    blob, wall, _ = autotune(*train, "--config", export if found else
                             str(folder / "baseline.yaml"))
    return trained(blob, search_s + export_s + wall, search_s=search_s, export_s=export_s,
                   train_wall_s=wall, search_found=found,
                   search_stderr=None if found else why)


def one_run(data: list[str], base: TrialConfig, epochs: int, budget: str, folder: Path,
            oracle: TrialConfig, oracle_precision: TrialConfig, reverse: bool = False) -> dict:
    """The six ways once, in :data:`WAYS`' order (``reverse``: the other way round)."""
    folder.mkdir(parents=True, exist_ok=True)
    train = ["train", *data, "--epochs", str(epochs), "--studies-dir", str(folder / "studies")]
    baseline = config_file(base, folder / "baseline.yaml")
    commands = {"baseline": ["--config", baseline],
                "tuned": ["--config", baseline, "--tune"],
                "tuned_precision": ["--config", baseline, "--tune", "--tune-precision"],
                "oracle": ["--config", config_file(oracle, folder / "oracle.yaml")],
                "oracle_precision": ["--config", config_file(oracle_precision,
                                                             folder / "oracle-precision.yaml")]}
    out = {}
    for way in reversed(WAYS) if reverse else WAYS:
        if way == "search_then_train":
            out[way] = search_then_train(data, base, train, budget, folder)
        else:
            blob, wall, _ = autotune(*train, *commands[way])
            out[way] = trained(blob, wall)
        print(f"{folder.name} {way}: {out[way]['wall_s']:.0f} s", flush=True)
    return out


def summary(runs: list[dict], way: str) -> dict:
    """A way's wall times over the runs: their median and spread (max over min, less 1)."""
    walls = [run[way]["wall_s"] for run in runs]
    return {"wall_s": statistics.median(walls), "walls_s": walls,
            "spread": max(walls) / min(walls) - 1}


def six_ways(data: list[str], base: TrialConfig, epochs: int, budget: str, folder: Path,
             grid_s: float, top: int, runs: int) -> dict:
    """The grid, then the six ways ``runs`` times; each way's median and spread."""
    folder.mkdir(parents=True, exist_ok=True)
    oracle, oracle_precision, measured = oracles(data, base, folder, grid_s, top)
    done = []
    for r in range(runs):  # each run kept as it ends: a failure later loses none
        done.append(one_run(data, base, epochs, budget, folder / f"run{r}", oracle,
                            oracle_precision, reverse=r % 2 == 1))
        (folder / "runs.json").write_text(json.dumps({"grid": measured, "runs": done}))
    return {"grid": measured, "oracle": oracle.to_dict(),
            "oracle_precision": oracle_precision.to_dict(),
            "ways": {way: summary(done, way) for way in WAYS}, "runs": done,
            "order": ["reversed" if r % 2 else "as WAYS" for r in range(runs)]}


def tuned_and_oracle(data: list[str], base: TrialConfig, epochs: int, oracle: str,
                     folder: Path, precise: str | None = None, runs: int = 1) -> dict:
    """``tuned`` and ``oracle`` only, the oracle's config given (``--oracle``), and
    with ``precise`` (``--oracle-precision``) ``tuned_precision`` and that oracle too;
    ``runs`` times, the ways interleaved, each run in the reverse order of the one
    before (ABBA). Each way: its first run's figures, with every run's wall time
    (``walls_s``) and their median (``wall_s``)."""
    folder.mkdir(parents=True, exist_ok=True)
    start = config_file(base, folder / "baseline.yaml")
    ways = {"tuned": ("--config", start, "--tune"), "oracle": ("--config", oracle)}
    if precise:
        ways.update(tuned_precision=("--config", start, "--tune", "--tune-precision"),
                    oracle_precision=("--config", precise))
    out: dict = {}
    for r in range(runs):
        train = ["train", *data, "--epochs", str(epochs), "--studies-dir",
                 str(folder / f"studies{r}")]
        for way, flags in list(ways.items())[::-1 if r % 2 else 1]:
            blob, wall, _ = autotune(*train, *flags)
            out.setdefault(way, trained(blob, wall)).setdefault("walls_s", []).append(wall)
    for way in out.values():
        way["wall_s"] = statistics.median(way["walls_s"])
    return out


def ratios(runs: list[dict]) -> dict:
    """Each target's ratio, run by run (its two ways timed in the same run), their
    median and range, and whether the median meets the target; the targets whose two
    ways the runs hold (``--oracle`` runs no baseline or search)."""
    out = {}
    for name, (top, bottom, target) in TARGETS.items():
        if top not in runs[0] or bottom not in runs[0]:
            continue
        each = [run[top]["wall_s"] / run[bottom]["wall_s"] for run in runs]
        ratio = statistics.median(each)
        out[name] = {"ratio": ratio, "target": target, "runs": each,
                     "range": [min(each), max(each)], "meets": ratio <= target}
    return out


def accuracy(base: TrialConfig, epochs: int, batch: int, folder: Path, seeds: int) -> dict:
    """Real Cora's test accuracy (at the best validation epoch): the baseline with
    ``seeds`` seeds (the untuned spread), and the two tuned ways (seed 0), one run each."""
    shutil.copytree(PLANETOID / "Cora", folder / "planetoid" / "Cora")
    cora = ["train", "--dataset", "Cora", "--root", str(folder / "planetoid"), "--epochs",
            str(epochs), "--studies-dir", str(folder / "studies")]
    base = base.replace(batch_size=batch)
    ways = {}
    for seed in range(seeds):
        blob, wall, _ = autotune(*cora, "--config",
                                 config_file(base.replace(seed=seed), folder / f"seed{seed}.yaml"))
        ways[f"baseline_seed{seed}"] = trained(blob, wall)
    for way, flags in (("tuned", ["--tune"]), ("tuned_precision", ["--tune", "--tune-precision"])):
        blob, wall, _ = autotune(*cora, "--config", str(folder / "seed0.yaml"), *flags)
        ways[way] = trained(blob, wall)
    untuned = [ways[f"baseline_seed{s}"]["best_val_epoch_test_metric"] for s in range(seeds)]
    tuned = {w: ways[w]["best_val_epoch_test_metric"] for w in ("tuned", "tuned_precision")}
    return {"dataset": "Cora", "epochs": epochs, "batch_size": batch,
            "untuned_test_accuracy": untuned, "tuned_test_accuracy": tuned,
            "within_untuned_spread": all(min(untuned) <= t <= max(untuned)
                                         for t in tuned.values()), "ways": ways}


def partial(args, synthetic: list[str], base: TrialConfig, stats: dict, work: Path) -> None:
    """``--oracle``: the tuned ways beside the oracles given, into their own file."""
    ways = tuned_and_oracle(synthetic, base, args.epochs, args.oracle, work / "synthetic",
                            args.oracle_precision, args.runs)
    # each ratio as the full run's: the median of the runs' own (a tuned way over the
    # oracle run beside it), not the ratio of the ways' median walls
    each = ratios([{way: {"wall_s": blob["walls_s"][r]} for way, blob in ways.items()}
                   for r in range(args.runs)])
    over = {name: r["ratio"] for name, r in each.items()}
    out = PARTIAL_OUT if args.out == OUT else args.out  # never the full run's file
    write(out, {"benchmark": "online", "partial": "tuned and oracle only (--oracle), "
                f"{args.runs} runs a way, each ratio the median of the runs' own",
                "device": "cpu", **over, "ratios": each,
                "meets": {name: r["meets"] for name, r in each.items()},
                "dataset": stats, "scale": args.scale, "epochs": args.epochs,
                "runs": args.runs, "time": ways})


def main() -> None:
    from _common import parser, prepare

    p = parser(__doc__, OUT)
    p.set_defaults(scale=0.1)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--runs", type=int, default=2, help="runs of each way (2 at least)")
    p.add_argument("--budget", default="5m", help="the search's --budget (search_then_train)")
    p.add_argument("--grid-seconds", type=float, default=10.0,
                   help="the longest window of a grid config's measurement (the oracle's)")
    p.add_argument("--precision-top", type=int, default=3,
                   help="the grid's fastest configs whose precision variants are measured")
    p.add_argument("--cora-epochs", type=int, default=30)
    p.add_argument("--cora-seeds", type=int, default=10,
                   help="the untuned Cora runs, a seed each: their accuracies' spread")
    p.add_argument("--cora-batch", type=int, default=16,
                   help="Cora's batch size (its 140 training nodes: steps to tune in)")
    p.add_argument("--oracle", help="an earlier run's oracle.yaml: run tuned and oracle only")
    p.add_argument("--oracle-precision",
                   help="with --oracle, an earlier run's oracle with precision: run "
                        "tuned_precision beside it too")
    p.add_argument("--accuracy-only", action="store_true",
                   help="run only the Cora part again, into --out's existing JSON")
    args = p.parse_args()
    if args.cora_seeds < 2:
        p.error(f"--cora-seeds must be 2 or more: one untuned run has no spread "
                f"(got {args.cora_seeds})")
    if args.runs < 2 and not args.oracle and args.out == OUT:
        p.error("online.json's ways run 2 times or more (--runs): a way run once has no "
                "spread; a one-run check of another CPU names its own --out")
    work = Path(args.workdir) / f"online-{time.strftime('%Y%m%d-%H%M%S')}"
    base = default_config("cpu")
    if args.accuracy_only:
        report = json.loads(Path(args.out).read_text())
        report["accuracy"] = accuracy(base, args.cora_epochs, args.cora_batch, work / "cora",
                                      args.cora_seeds)
        report["accuracy"]["run_again"] = time.strftime("%Y-%m-%d %H:%M")
        report["accuracy"]["env"] = fingerprint("cpu")  # the time's machine stays "env"
        report["meets"]["accuracy_within_spread"] = report["accuracy"]["within_untuned_spread"]
        write(args.out, report, env=False)
        return
    _, stats, prepare_s = prepare(args)  # generated once, before any way is timed
    synthetic = ["--dataset", "synthetic", "--scale", str(args.scale), "--root", args.root]
    if args.oracle:
        partial(args, synthetic, base, stats, work)
        return
    timed = six_ways(synthetic, base, args.epochs, args.budget, work / "synthetic",
                     args.grid_seconds, args.precision_top, args.runs)
    report = {"benchmark": "online", "device": "cpu", "native_bf16": native_bf16(),
              "ratios": ratios(timed["runs"]),
              "precision": (f"{args.runs} runs a way; each ratio the median of its runs' "
                            "own (its two ways timed in the same run, a tuned way beside "
                            "its oracle, odd runs in reverse order), its range theirs; "
                            "no interval beyond that"
                            if args.runs > 1 else "one run a way: no spread, no interval")}
    report["meets"] = {name: r["meets"] for name, r in report["ratios"].items()}
    report.update(dataset=stats, prepare_s=prepare_s, scale=args.scale, epochs=args.epochs,
                  budget=args.budget, runs=args.runs, baseline=base.to_dict(), time=timed)
    if (PLANETOID / "Cora" / "raw").is_dir():
        report["accuracy"] = accuracy(base, args.cora_epochs, args.cora_batch, work / "cora",
                                      args.cora_seeds)
        report["meets"]["accuracy_within_spread"] = report["accuracy"]["within_untuned_spread"]
    else:
        report["accuracy"] = f"skipped: real Cora is not in {PLANETOID / 'Cora' / 'raw'}"
        print(f"online.py: accuracy {report['accuracy']}", file=sys.stderr)
    write(args.out, report)


if __name__ == "__main__":
    main()
