"""A training run that tunes itself (autotune train --tune): every epoch trains each
seed once whatever it tries, a candidate that fails leaves the run going, and where
its space holds a faster config the run settles on it."""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import time

import psutil
import pytest
import torch

from autotune.config import TrialConfig
from autotune.pipeline import Pipeline, TrainSpec, fit
from autotune.pipeline._training import _one_epoch
from autotune.tuning import Change, TunedRun, TuneSpec, candidates
from autotune.tuning import _candidates, _run

# Batches of 32 on a graph of ~930 nodes: a loader worker's hand-off costs more than
# the in-process sampling of a batch, so 0 workers trains faster than 2
START = TrialConfig(batch_size=32, num_neighbors=(5, 5), num_workers=2, hidden_channels=16,
                    sampling_backend="builtin")


def _children() -> set[int]:
    return {c.pid for c in psutil.Process().children(recursive=True)}


def _seen(monkeypatch) -> tuple[list[list[int]], set[int]]:
    """The training seeds (node ids) of every step, as each batch gives them, and
    the processes this one started while it trained (not those it had before: a
    fork server an earlier search of this process kept)."""
    steps: list[list[int]] = []
    children: set[int] = set()
    before = _children()
    real = Pipeline.train_step

    def train_step(self, batch):
        steps.append(batch.n_id[:batch.batch_size].tolist())
        children.update(_children() - before)
        return real(self, batch)

    monkeypatch.setattr(Pipeline, "train_step", train_step)
    return steps, children


@pytest.mark.slow
def test_a_tuned_run_trains_every_seed_once_an_epoch_and_outlives_a_failing_candidate(
        tiny_synthetic, monkeypatch):
    """Candidates come and go mid-epoch (one fails at its build: PyG's sampler needs
    pyg-lib or torch-sparse, which this machine may lack; one is dropped or kept);
    each epoch still trains every training seed exactly once, and no loader worker
    outlives the run."""

    steps, workers = _seen(monkeypatch)
    failing = START.replace(sampling_backend="pyg", num_workers=0)
    queue = [Change("sampling_backend", "pyg", failing, "sampling_backend builtin -> pyg"),
             Change.of(START, "aggregation", "sparse"), Change.of(START, "num_workers", 0)]
    # a kept candidate remakes the queue around itself: here, with nothing more to try,
    # so that the run settles within its 3 epochs whichever candidate the timings keep
    monkeypatch.setattr(_run, "candidates", lambda config, spec, topology=None, masks=True: [])
    lines: list[str] = []
    run = TunedRun(START, tiny_synthetic, TuneSpec(share=1.0, window_steps=3, pairs=2),
                   epochs=3, num_classes=4, on_line=lines.append, queue=queue)
    train_nodes = tiny_synthetic.train_mask.nonzero().flatten().tolist()
    train_seeds = len(train_nodes)
    try:
        for epoch in (1, 2, 3):
            before = len(steps)
            done = _one_epoch(run, epoch, None)
            trained, seeds, loss = done.steps, done.seeds, done.loss
            positions = [p for step in steps[before:] for p in step]
            assert sorted(positions) == train_nodes, f"epoch {epoch}"
            assert trained == len(steps) - before and seeds == train_seeds
            assert loss == loss  # not NaN
    finally:
        run.close()
    assert workers, "the run started on loader workers"
    left = [c for c in psutil.Process().children(recursive=True)
            if c.pid in workers and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, left
    verdicts = {t.label: t for t in run.log.tried}
    pyg = verdicts["sampling_backend builtin -> pyg"]
    try:
        import torch_geometric.typing as pyg_typing
        has_pyg_sampler = pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE
    except ImportError:
        has_pyg_sampler = False
    if not has_pyg_sampler:
        assert pyg.verdict == "failed" and "pyg" in pyg.reason.lower(), pyg
        assert any(line.startswith("tried sampling_backend") and "failed" in line
                   for line in lines), lines
    assert all(t.verdict in ("kept", "slower", "dropped", "no faster", "failed", "unfinished")
               for t in run.log.tried), run.log.tried
    assert run.log.settled_step is not None
    assert sum(run.log.steps_by_config.values()) == len(steps)


@pytest.mark.exclusive  # it compares timings: a test beside it would skew them
@pytest.mark.slow
def test_a_tuned_run_settles_on_the_faster_config_its_space_holds(tiny_synthetic):
    """Started on 2 loader workers where in-process sampling is faster, the run
    tries 0 workers, pairs its windows with the incumbent's, keeps it, and trains
    the rest of the run there. (Batches of 16 in windows of 16 steps: with 32 in
    windows of 8, about 50 ms, one CI machine drew 0.91x, 1.31x and 1.41x, and the
    run rightly kept nothing; on a 2-core AVX2-only EPYC the least of 16 pairs went
    from 1.61x to 2.06x. A pair an epoch: 20 epochs give up to 20 pairs; with 6, a
    2-core Xeon with AMX drew 1.72x, 1.06x, 1.10x, 1.23x, 2.34x, 1.78x, undecided,
    and with 12 a CI run there drew 0.70x among 1.1x-1.8x, undecided after 12.)"""
    config = START.replace(batch_size=16)
    queue = [Change.of(config, "num_workers", 0)]
    with TunedRun(config, tiny_synthetic, TuneSpec(share=1.0, window_steps=16, pairs=20),
                  epochs=20, num_classes=4, queue=queue) as run:
        out = fit(run, tiny_synthetic, TrainSpec(epochs=20))
    tried = run.log.tried[0]
    assert tried.verdict == "kept", (tried.ratios, tried.verdict)
    assert tried.ratio > 1 and run.pipe.config.num_workers == 0
    assert run.log.final.num_workers == 0
    assert out.epochs[-1].val_metric is not None
    by = collections.Counter(run.log.steps_by_config)
    assert by and sum(by.values()) == sum(e.steps for e in out.epochs)


def test_candidates_change_one_learning_neutral_knob_each():
    """Never the batch size or the fanout; the dtypes only when allowed."""
    from autotune.topology import Topology

    two = Topology(cpus=(0, 1), cores=((0,), (1,)), nodes=((0, 1),))
    changes = candidates(START, TuneSpec(), two)
    assert changes and all(c.config.batch_size == START.batch_size and
                           c.config.num_neighbors == START.num_neighbors for c in changes)
    for change in changes:  # the knob and value it carries are what its config changed
        differ = {k for k, v in change.config.to_dict().items() if START.to_dict()[k] != v}
        assert differ and differ <= {"num_workers", "sampling_backend", "aggregation",
                                     "loader_cores", "compute_cores"}, (change.label, differ)
        assert differ == ({"loader_cores", "compute_cores"} & differ or {change.knob})
        if change.knob != "affinity":
            assert getattr(change.config, change.knob) == change.value
            assert change.label == f"{change.knob} {getattr(START, change.knob)} -> " \
                                   f"{change.value}"
    assert not any(c.config.amp_dtype != START.amp_dtype for c in changes)
    precise = candidates(START, TuneSpec(precision=True), two)
    assert any(c.knob == "feature_dtype" and c.value == "bfloat16" for c in precise)
    # bit dropout masks: with precision, of a built-in model the run's own step
    # trains (masks), eager
    assert [c.label for c in precise if c.knob == "dropout_masks"] == [
        "dropout_masks bernoulli -> bits"]
    assert not any(c.knob == "dropout_masks" for c in changes)
    assert not any(c.knob == "dropout_masks" for c in
                   candidates(START, TuneSpec(precision=True), two, masks=False))
    assert not any(c.knob == "dropout_masks" for c in
                   candidates(START.replace(compile_mode="default"),
                              TuneSpec(precision=True), two))
    # compile modes: on a GPU, or where asked; then last, and shapes once compiled
    assert not any(c.knob == "compile_mode" for c in changes), "not on a CPU by default"
    compiled = candidates(START, TuneSpec(compile=True), two)
    assert compiled[-1].label == "compile_mode none -> default"
    assert any(c.label == "shapes dynamic -> padded" for c in
               candidates(START.replace(compile_mode="default"), TuneSpec(compile=True), two))
    # no change to a backend that resolves to the sampler already in use
    auto = START.replace(sampling_backend="auto")
    assert not [c for c in candidates(auto, TuneSpec(), two) if c.knob == "sampling_backend"
                and _candidates._resolved(c.value) == _candidates._resolved("auto")]


def test_dropout_masks_are_tried_only_where_the_runs_own_step_trains_a_built_in_model(
        tiny_synthetic):
    """A user's own step (TunedLoop's: it counts its calls of the aggregation's hook)
    calls the user's model, whose dropout the run cannot set: no masks candidate."""
    start, spec = START.replace(num_workers=0), TuneSpec(precision=True)
    for own_step in (True, False):
        with TunedRun(start, tiny_synthetic, spec, epochs=1, num_classes=4,
                      counts_edges=not own_step) as run:
            knobs = {change.knob for change in run.queue}
        assert ("dropout_masks" in knobs) == own_step, knobs


def test_candidates_go_in_the_order_of_the_side_the_step_spends_its_time_on(monkeypatch):
    """The loader's knobs first where the step waits for its batch more than half of
    its time, the model's first otherwise; a compile last either way; stable within;
    the AMP dtype before either."""
    from autotune.topology import Topology

    two = Topology(cpus=(0, 1), cores=((0,), (1,)), nodes=((0, 1),))
    changes = candidates(START, TuneSpec(compile=True), two)
    knobs = [c.knob for c in changes]
    assert "aggregation" in knobs and "num_workers" in knobs
    for wait, first in ((0.1, {"aggregation"}), (0.9, set(_candidates.LOADER_KNOBS))):
        ordered = _candidates.by_bottleneck(changes, wait)
        assert sorted(c.label for c in ordered) == sorted(c.label for c in changes)
        side = [c for c in ordered if c.knob in first]
        assert ordered[:len(side)] == side == [c for c in changes if c.knob in first]
        assert ordered[-1].label == "compile_mode none -> default"
    # a step that waits 10% for its batches, beside loader workers that take all its
    # cores (2 workers on 2): the loader's knobs first; beside 2 of 16 cores, the model's
    assert _candidates.by_bottleneck(changes, 0.1, 1.0)[0].knob in _candidates.LOADER_KNOBS
    assert _candidates.by_bottleneck(changes, 0.1, 2 / 16)[0].knob == "aggregation"
    # bfloat16 autocast, where it is a candidate, before either side
    monkeypatch.setattr(_candidates, "native_bf16", lambda: True)  # a CPU that computes it
    monkeypatch.setattr(_candidates, "bf16_matmul_gain", lambda: 1.4)  # faster than float32
    precise = candidates(START, TuneSpec(precision=True), two)
    for wait in (0.1, 0.9):
        assert _candidates.by_bottleneck(precise, wait)[0].label == "amp_dtype float32 -> bfloat16"
    # and back to float32 autocast first where the incumbent has bfloat16's (a fast end
    # kept it): its gain varies most by machine
    bf16 = START.replace(amp_dtype="bfloat16", feature_dtype="bfloat16", aggregation="sparse")
    undone = candidates(bf16, TuneSpec(precision=True), two)
    for wait in (0.1, 0.9):
        assert _candidates.by_bottleneck(undone, wait)[0].label == "amp_dtype bfloat16 -> float32"
    assert _candidates.cores_taken(START, two) == 1.0
    assert _candidates.cores_taken(START.replace(num_workers=0), two) == 0.0


def test_the_fast_end_candidate_makes_together_what_paid_alone(monkeypatch):
    """The fast end: bfloat16 autocast and features and bit dropout masks (where
    tried) and the sparse aggregation, with
    no loader workers where the incumbent's take all the cores, in one candidate of
    knob ``fast-end`` whose value names what it sets; nothing else of the config
    changes; fewer than two such changes, or a GPU, make none."""
    from autotune.topology import Topology

    two = Topology(cpus=(0, 1), cores=((0,), (1,)), nodes=((0, 1),))
    monkeypatch.setattr(_candidates, "native_bf16", lambda: True)  # a CPU that computes it
    monkeypatch.setattr(_candidates, "bf16_matmul_gain", lambda: 1.4)  # faster than float32
    precise = candidates(START, TuneSpec(precision=True), two)
    end = _candidates.fast_end(START, precise, cores_taken=1.0)
    assert end.knob == "fast-end"
    assert end.value == {"num_workers": 0, "amp_dtype": "bfloat16",
                         "feature_dtype": "bfloat16", "aggregation": "sparse",
                         "dropout_masks": "bits"}
    assert end.config == START.replace(**end.value)
    assert end.label.startswith("fast end: ") and "num_workers 2 -> 0" in end.label
    assert _candidates.fast_end(START, precise, 2 / 16).value == {
        "amp_dtype": "bfloat16", "feature_dtype": "bfloat16", "aggregation": "sparse",
        "dropout_masks": "bits"}, \
        "2 workers of 16 cores stay"
    plain = candidates(START, TuneSpec(), two)
    assert _candidates.fast_end(START, plain, 1.0).value == {"num_workers": 0,
                                                             "aggregation": "sparse"}
    assert _candidates.fast_end(START, plain, 2 / 16) is None, "one change is no fast end"
    assert _candidates.fast_end(START.replace(device="cuda"), precise, 1.0) is None


def test_a_run_on_2_cores_tries_its_fast_end_first(tiny_synthetic, monkeypatch):
    """Started on 2 loader workers on 2 cores, the run's first candidate is its fast
    end (no workers and the sparse aggregation together), whatever its verdict; a
    queue given is tried in its own order (the other tests')."""
    from autotune.topology import Topology

    two = Topology(cpus=(0, 1), cores=((0,), (1,)), nodes=((0, 1),))
    monkeypatch.setattr(_candidates, "this_machine", lambda: two)
    events = []
    with TunedRun(START, tiny_synthetic, TuneSpec(share=1.0, window_steps=4, pairs=4),
                  epochs=1, num_classes=4, on_window=lambda e, log: events.append(e)) as run:
        fit(run, tiny_synthetic, TrainSpec(epochs=1))
    first = run.log.tried[0]
    assert first.knob == "fast-end", [t.label for t in run.log.tried]
    assert first.config == START.replace(num_workers=0, aggregation="sparse")
    # it goes first in any order: the incumbent's window before it is not the ordering
    # one, which runs on past the 2 x 2 batches its workers have in flight
    assert (events[0].change, events[0].steps) == (None, run.window_steps), events[0]


@pytest.mark.exclusive  # shares of time: a test beside it slows the step (2 threads, 1 core)
@pytest.mark.parametrize("slow, first", [("step", "aggregation"), ("batch", "num_workers")])
def test_a_run_tries_first_the_knobs_of_what_its_step_waits_on(tiny_synthetic, monkeypatch,
                                                                 slow, first):
    """A step slowed by 100 ms in the model's step, or in the sampling of its batch
    (in the loader's 2 workers: 50 ms a batch), far above the tiny model's own step:
    the run measures the share its incumbent waits for its batches, says it, and
    tries that side's knob first. (On a machine of 16 cores, where its 2 workers
    leave the step its cores: on 2, they take them all, and the loader goes first.)"""
    from autotune.sampling import NeighborSampler
    from autotune.topology import Topology

    sixteen = Topology(cpus=tuple(range(16)), cores=tuple((c,) for c in range(16)),
                       nodes=(tuple(range(16)),))
    monkeypatch.setattr(_candidates, "this_machine", lambda: sixteen)

    target, name = (Pipeline, "train_step") if slow == "step" else \
        (NeighborSampler, "sample_from_nodes")
    real = getattr(target, name)

    def slowed(self, *args, **kwargs):
        time.sleep(0.1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(target, name, slowed)
    with TunedRun(START, tiny_synthetic, TuneSpec(share=1.0, window_steps=8, pairs=1),
                  epochs=1, num_classes=4) as run:
        fit(run, tiny_synthetic, TrainSpec(epochs=1))
    # far from the tiny model's own share (about half: a worker's hand-over of a
    # batch costs as much as its step), so a slowdown that missed would fail here
    share = run.log.wait_share
    assert share > 0.7 if slow == "batch" else share < 0.3, share
    assert run.log.cores_taken == 2 / 16
    assert run.log.order == ("the loader's knobs" if slow == "batch" else "the model's knobs")
    assert run.log.tried[0].label.startswith(first), [t.label for t in run.log.tried]


def test_a_candidates_verdict_is_the_comparison_engines():
    """The tuner's verdicts are the engine's (autotune.compare) over the pairs: a gain
    known to lie within min_gain of 1 is no faster (tied), one clear of 1 is kept, one
    known to be under 1 is slower; no verdict before min_pairs, "no faster" once
    the pairs are spent undecided; two first pairs under the screen are dropped. The old
    rule (mean less half the range above 1.02) kept 1.10, 1.08 after two pairs and
    called 0.89, 1.12, 1.12 no faster."""
    from types import SimpleNamespace

    from autotune.tuning import Tried

    def verdict(ratios, **spec):
        tried = Tried(Change("num_workers", 0, START, "change"), ratios=list(ratios))
        tune = TuneSpec(**spec)
        run = SimpleNamespace(spec=tune, rule=dataclasses.replace(tune.rule,
                                                                  max_pairs=tune.pairs),
                              pipe=SimpleNamespace(config=START))
        return TunedRun._verdict(run, tried)[0]

    assert verdict([1.005, 1.004, 1.006, 1.005]) == "no faster"  # tied within 2%
    assert verdict([1.005, 1.004, 1.006, 1.005], min_gain=0.0) == "kept"
    assert verdict([1.10, 1.08, 1.09]) == "" and verdict([1.10, 1.08, 1.09, 1.10]) == "kept"
    assert verdict([0.90, 0.92, 0.91, 0.90]) == "slower"
    assert verdict([0.89, 1.12, 1.12, 1.10]) == ""  # wide: more pairs
    assert verdict([0.89, 1.12, 1.12], pairs=3) == "no faster"  # spent, undecided
    assert verdict([0.5]) == "" and verdict([0.5, 0.7]) == "dropped"
    assert verdict([0.5, 0.9]) == "" and verdict([1.05]) == ""


@pytest.mark.parametrize("knob, back", [("feature_dtype", "float32"),
                                        ("amp_dtype", "float32"),
                                        ("dropout_masks", "bernoulli")])
def test_a_change_back_to_full_precision_is_kept_where_it_is_no_slower(knob, back):
    """A change that gives precision back (float32, torch's dropout masks) is kept
    where its interval lies over 1 / 1.02, no slower beyond the margin, where one that
    lowers it, or any other, must be faster: a lower precision stays only where it
    pays. Known under 1 it is slower; about 1x in wide pairs it is not stopped as out
    of reach (it could not be faster, but may be no slower) and goes on to its last
    pair, not kept where its pairs never showed it no slower."""
    from types import SimpleNamespace

    from autotune.tuning import Tried

    low = {"feature_dtype": "bfloat16", "amp_dtype": "bfloat16", "dropout_masks": "bits"}
    incumbent = START.replace(num_workers=0, **low)

    def verdict(ratios, to=back):
        tried = Tried(Change.of(incumbent, knob, to), ratios=list(ratios))
        run = SimpleNamespace(spec=TuneSpec(), rule=TuneSpec().rule,
                              pipe=SimpleNamespace(config=incumbent))
        run._restored = lambda decision, margin: TunedRun._restored(run, decision, margin)
        return TunedRun._verdict(run, tried)

    tie, kept_tie = [1.005, 0.995, 1.0, 1.002], [0.99, 0.995, 0.99, 0.992]
    assert verdict(tie) == ("kept", "no slower beyond the ±2% margin: the higher "
                                    "precision at no cost")
    assert verdict(kept_tie)[0] == "kept"  # just under 1x, within the margin
    assert verdict(tie[:3]) == ("", "")  # no verdict before 4 pairs
    assert verdict([0.90, 0.92, 0.91, 0.90]) == ("slower", "")
    wide = [(0.92, 1.08)[i % 2] for i in range(16)]
    assert verdict(wide) == ("", "")  # out of reach for "faster", not for "no slower"
    assert verdict(wide + [1.0] * 16) == ("no faster", "not shown no slower after 32 pairs")
    # the same ratios on a change that does not give precision back: no faster
    other = Tried(Change.of(incumbent, "aggregation", "sparse"), ratios=tie)
    run = SimpleNamespace(spec=TuneSpec(), rule=TuneSpec().rule,
                          pipe=SimpleNamespace(config=incumbent))
    assert TunedRun._verdict(run, other)[0] == "no faster"
    assert TunedRun._verdict(run, Tried(Change.of(incumbent, "aggregation", "sparse"),
                                        ratios=wide))[0] == "no faster"


def test_a_run_goes_back_to_float32_features_where_they_are_no_slower(tiny_synthetic,
                                                                      monkeypatch):
    """Through the run: bfloat16 features (a fast end's part) whose change back to
    float32 reads as a tie end the run on float32 features, the change kept at its
    fourth pair, the first that may decide."""
    start = START.replace(num_workers=0, feature_dtype="bfloat16")
    monkeypatch.setattr(_run, "candidates", lambda config, spec, topology=None, masks=True: [])
    real = TunedRun._verdict

    def verdict(self, tried):  # scripted ratios about 1x, decided by the run's own rule
        tried.ratios[:] = [(0.995, 1.005)[i % 2] for i in range(len(tried.ratios))]
        return real(self, tried)

    monkeypatch.setattr(TunedRun, "_verdict", verdict)
    with TunedRun(start, tiny_synthetic, TuneSpec(share=1.0, window_steps=3, precision=True),
                  epochs=4, num_classes=4,
                  queue=[Change.of(start, "feature_dtype", "float32")]) as run:
        fit(run, tiny_synthetic, TrainSpec(epochs=4))
    tried = run.log.tried[0]
    assert (tried.verdict, len(tried.ratios)) == ("kept", 4), tried
    assert run.pipe.config.feature_dtype == run.log.final.feature_dtype == "float32"


def test_tune_flags_without_tune_are_one_line_errors(tmp_path):
    from _helpers import cli

    config = tmp_path / "cfg.yaml"
    config.write_text("batch_size: 32\nnum_neighbors: [5, 5]\n")
    out = cli("train", "--config", str(config), "--epochs", "1", "--tune-share", "20%",
              "--root", str(tmp_path / "data"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--tune-share, --tune-precision, --tune-compile and --study-name need --tune" \
        in out.stderr
    assert not (tmp_path / "data").exists(), "nothing prepared for refused flags"
    compiled = cli("train", "--config", str(config), "--epochs", "1", "--tune-compile")
    assert compiled.returncode == 2 and "need --tune" in compiled.stderr, compiled.stderr
    bad = cli("train", "--config", str(config), "--epochs", "1", "--tune", "--tune-share", "0")
    assert bad.returncode == 2 and "--tune-share" in bad.stderr, bad.stderr


@pytest.mark.slow
def test_a_tuned_run_is_a_study_that_show_export_and_studies_read(tmp_path):
    """Every window of ``train --tune`` is a trial of a new study: show says what the
    run tried, the steps each config trained and when it settled; export writes the
    winner; studies lists it; a search, a report and a second run refuse the study,
    which keeps every trial."""
    import json

    import yaml
    from _helpers import cli

    from autotune.export import read_export

    config = tmp_path / "cfg.yaml"
    # no loader workers: with two, the fast end (workers 0) goes first, and the queue is
    # ordered (its wait share known) only at the turn after its verdict, in a window run
    # on past the 4 batches two workers hold in flight; a busy suite's fast end, refused
    # after 9 pairs, took the whole run, and the run had no wait share to show
    config.write_text(yaml.safe_dump(START.replace(num_workers=0).to_dict()))
    where = ["--studies-dir", str(tmp_path / "studies")]
    data = ["--dataset", "synthetic", "--scale", "0.004", "--root", str(tmp_path / "data")]
    # 3 epochs: a candidate that the screen does not keep in its first 2 pairs (a busy
    # suite's ratios) takes 4 or more, into the second epoch
    run = cli("train", "--config", str(config), *data, "--epochs", "3", "--tune",
              "--tune-share", "100%", "--study-name", "run", *where, "-f", "json")
    assert run.returncode == 0, run.stderr
    trained = json.loads(run.stdout)
    shown = json.loads(cli("show", "--study-name", "run", *where, "-f", "json").stdout)
    windows = shown["windows"]
    assert sum(w["steps"] for w in windows) == sum(e["steps"] for e in trained["epochs"])
    assert sum(shown["steps_by_config"].values()) == sum(w["steps"] for w in windows)
    assert [w["step"] for w in windows] == sorted(w["step"] for w in windows)
    assert any(w["change"] for w in windows) and any(not w["change"] for w in windows)
    assert shown["final"] == trained["config"] and shown["tried"]
    assert shown["tried"] == trained["tuning"]["tried"]
    text = cli("show", "--study-name", "run", *where).stdout
    assert "a training run that tuned itself" in text and "steps trained by config" in text
    assert 0 <= shown["wait_share"] <= 1 and shown["wait_share"] == trained["tuning"]["wait_share"]
    assert f"waited for its batches {100 * shown['wait_share']:.0f}%" in text, text
    assert all(t["change"] in text for t in shown["tried"]), text
    out = tmp_path / "best.yaml"
    exported = cli("export", "--study-name", "run", *where, "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert "the tuned run's winner" in exported.stdout, exported.stdout
    assert read_export(out).config.to_dict() == trained["config"]
    knee = cli("export", "--study-name", "run", *where, "--pick", "knee", "--out", str(out))
    assert knee.returncode == 2 and "one winner" in knee.stderr, knee.stderr
    rows = json.loads(cli("studies", *where, "-f", "json").stdout)
    assert [(r["study"], r["kind"]) for r in rows] == [("run", "tuned run")]
    assert rows[0]["best"] == shown["final_rate"] > 0
    search = cli("search", *data, *where, "--study-name", "run", "--space", "quick",
                 "--n-trials", "1")
    assert search.returncode == 2 and "records a training run" in search.stderr, search.stderr
    report = cli("report", "--study-name", "run", *where, "--out", str(tmp_path / "r.html"))
    assert report.returncode == 2 and "tuned itself" in report.stderr, report.stderr
    again = cli("train", "--config", str(config), *data, "--epochs", "1", "--tune",
                "--study-name", "run", *where)
    assert again.returncode == 2 and "already exists" in again.stderr, again.stderr
    after = json.loads(cli("show", "--study-name", "run", *where, "-f", "json").stdout)
    assert len(after["windows"]) == len(windows), "a refused command changed the study"


class _EdgeIndexOnly(torch.nn.Module):
    """A user's model that takes ``edge_index`` and nothing else: sparse aggregation's
    CSR adjacency makes it raise, in the user's own step."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        from torch_geometric.nn import SAGEConv

        self.conv1, self.conv2 = SAGEConv(features, 16), SAGEConv(16, classes)

    def forward(self, x, edge_index):
        if edge_index.layout != torch.strided:
            raise RuntimeError("this model takes edge_index only")
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


@pytest.mark.slow
def test_a_users_own_loop_trains_every_seed_once_on_its_optimizer_through_a_failing_step(
        tiny_synthetic, monkeypatch):
    """TunedLoop under a loop of the user's: each epoch yields every training seed
    once; the candidate whose step raises in the user's code (sparse aggregation to a
    model that takes edge_index only) is recorded failed and the batch trains again;
    the user's optimizer keeps its state through every change (Adam's step count is
    the steps the user took); windows carry the loss the user gave; no worker is left."""
    import torch.nn.functional as F

    from autotune.tuning import TunedLoop

    start = START.replace(num_workers=0)
    queue = [Change.of(start, "aggregation", "sparse"), Change.of(start, "num_workers", 1)]
    monkeypatch.setattr(_run, "candidates",
                        lambda config, spec, topology=None, masks=True: list(queue))
    torch.manual_seed(0)
    model = _EdgeIndexOnly(tiny_synthetic.num_features, 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    windows, lines, seen, taken = [], [], [], 0
    train_nodes = tiny_synthetic.train_mask.nonzero().flatten().tolist()
    before = _children()  # a fork server an earlier search of this process kept
    with TunedLoop(tiny_synthetic, model, optimizer, start, epochs=4,
                   tune=TuneSpec(share=1.0, window_steps=3, pairs=2),
                   on_line=lines.append, on_window=lambda e, log: windows.append(e)) as loop:
        for epoch in range(4):
            seeds: list[int] = []
            for batch in loop.batches():
                with loop.step() as step:
                    with loop.autocast():
                        out = loop.model(batch.x, loop.edges(batch))[:batch.batch_size]
                        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    taken += 1
                    seeds += batch.n_id[:batch.batch_size].tolist()
                    step.loss = loss.detach()
            assert sorted(seeds) == train_nodes, f"epoch {epoch + 1}"
            seen.append(len(seeds))
        workers = _children() - before
    left = [c for c in psutil.Process().children(recursive=True)
            if c.pid in workers and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, left
    verdicts = {t.label: t for t in loop.log.tried}
    sparse = verdicts["aggregation scatter -> sparse"]
    assert sparse.verdict == "failed" and "edge_index only" in sparse.reason, sparse
    assert any("aggregation" in line and "failed" in line for line in lines), lines
    assert verdicts["num_workers 0 -> 1"].verdict, verdicts
    assert loop.settled and loop.config in (start, start.replace(num_workers=1))
    steps = {int(optimizer.state[p]["step"]) for p in model.parameters()}
    assert steps == {taken}, (steps, taken)
    assert sum(w.steps for w in windows) == taken
    assert all(w.loss is not None and w.loss == w.loss for w in windows if w.steps), windows
    assert any(w.error and "edge_index only" in w.error for w in windows), windows


@pytest.mark.slow
@pytest.mark.fault
def test_ctrl_c_of_a_tuned_run_saves_its_best_epoch_and_its_windows(tmp_path):
    """Ctrl-C mid-run: the best epoch so far is written to --save (as a finished run
    writes it), the study keeps every window and says where the run was stopped, no
    loader worker is left, and the command exits 130."""
    import json
    import signal
    import time

    import yaml
    from _helpers import cli, trial_processes

    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump(START.to_dict()))
    where = ["--studies-dir", str(tmp_path / "studies")]
    data = ["--dataset", "synthetic", "--scale", "0.004", "--root", str(tmp_path / "data")]
    proc = cli("train", "--config", str(config), *data, "--epochs", "1000", "--tune",
               "--tune-share", "100%", "--study-name", "run", *where,
               "--save", str(tmp_path / "best.pt"), background=True)
    db = tmp_path / "studies" / "run.db"
    deadline, workers = time.monotonic() + 180, set()
    while True:  # until a window of epoch 2: epoch 1 has ended and was evaluated
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no window of epoch 2 in 180 s: {proc.communicate()}")
        workers |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        if any(window["epoch"] >= 2 for window in _windows(db)):
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "autotune: interrupted after " in stderr and "of 1000 epochs" in stderr, stderr
    assert f"saved to {tmp_path / 'best.pt'}" in stderr and "holds its windows" in stderr
    state = torch.load(tmp_path / "best.pt")
    assert any(k.endswith("weight") for k in state) and all(
        torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    shown = json.loads(cli("show", "--study-name", "run", *where, "-f", "json").stdout)
    assert shown["interrupted_step"] == sum(w["steps"] for w in shown["windows"]) > 0
    assert "interrupted (Ctrl-C) at step" in cli("show", "--study-name", "run", *where).stdout
    assert any(w["config"]["num_workers"] and w["steps"] for w in shown["windows"]), \
        "the run trained on loader workers"
    # a forked worker keeps the run's command line, which names tmp_path: found even
    # where the run swapped to 0 workers before the 0.1 s poll saw the first ones
    left = [p.pid for p in trial_processes(tmp_path)] + [
        p for p in workers if psutil.pid_exists(p)
        and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not left, left


def _windows(db) -> list[dict]:
    """The tuning windows a running study in SQLite file ``db`` holds so far, read
    only: optuna's load_study makes the schema, which raced the run's own making of it
    ("table trial_values already exists"); none before the run has made it."""
    import json
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            rows = con.execute("SELECT value_json FROM trial_user_attributes "
                               "WHERE key = 'tuning_window'").fetchall()
    except sqlite3.Error:  # not made yet (it is, at the first window)
        return []
    return [json.loads(value) for value, in rows]


@pytest.mark.slow
def test_a_tuned_run_learns_as_an_untuned_one_within_other_seeds_spread(cora_root, tmp_path,
                                                                        monkeypatch):
    """Real Cora, 12 epochs: a run that tries candidates (and may keep one) mid-run
    stays as near the untuned run of its seed as untuned runs of three other seeds are
    (their largest distance, epoch by epoch), in validation accuracy and in loss, at
    its farthest and in sum: the same weights, optimizer state and seeds go on
    through every change. (A candidate built on a fresh model and optimizer lands
    farther, and fails here: checked. Two other seeds were the reference while
    evaluation sampled neighbourhoods; evaluated on the whole graph, exactly, their
    spread narrowed, and the tuned run's sum came 5% over it: 0.276 against 0.262.)"""
    from autotune.data import DatasetRef

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    changes = {"aggregation": "sparse", "num_workers": 1}

    def left(config: TrialConfig, spec, topology=None, masks=True) -> list:
        """After a keep, the queue is remade around the new incumbent: the changes it
        does not hold yet (so both are tried whichever the machine keeps)."""
        return [Change.of(config, knob, value) for knob, value in changes.items()
                if getattr(config, knob) != value]

    monkeypatch.setattr(_run, "candidates", left)
    dataset = DatasetRef("Cora", root=cora_root).prepare()
    start = TrialConfig(batch_size=16, num_neighbors=(10, 10), num_workers=0,
                        hidden_channels=64, sampling_backend="builtin")
    epochs = 12

    def run(seed: int, changes: dict[str, object]) -> tuple[list[float], list[float], list]:
        config = start.replace(seed=seed)
        queue = [Change.of(config, knob, value) for knob, value in changes.items()]
        tuned = TunedRun(config, dataset.data, TuneSpec(share=1.0, window_steps=2, pairs=2),
                         epochs=epochs, num_classes=dataset.num_classes, queue=queue)
        try:
            out = fit(tuned, dataset.data, TrainSpec(epochs=epochs, evaluate_test=False))
        finally:
            tuned.close()
        return [e.val_metric for e in out.epochs], [e.loss for e in out.epochs], tuned.log

    base, *others = [run(seed, {}) for seed in (0, 1, 2, 3)]
    tuned = run(0, changes)
    log = tuned[2]
    assert [t.knob for t in log.tried] == list(changes) and all(t.steps for t in log.tried)
    assert min(r[0][-1] for r in (base, *others, tuned)) > 0.6  # they learn
    for i, name in enumerate(("val accuracy", "loss")):
        # each epoch's distance from the seed-0 untuned run: another seed's, the tuned run's
        seeds = [max(abs(x - o) for o in others_e)
                 for x, *others_e in zip(base[i], *(o[i] for o in others))]
        apart = [abs(x - t) for x, t in zip(base[i], tuned[i])]
        assert max(apart) <= max(seeds), (name, base[i], tuned[i], seeds)
        assert sum(apart) <= sum(seeds), (name, base[i], tuned[i], seeds)


class _SlowFirstCall(torch.nn.Module):
    """torch.compile's stand-in: the model itself, whose first call takes SECONDS more
    (a compile's time, without compiling: the run's decisions are under test here)."""

    SECONDS = 0.5

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.first = model, True

    def forward(self, *args, **kwargs):
        if self.first:
            time.sleep(self.SECONDS)
            self.first = False
        return self.inner(*args, **kwargs)


@pytest.mark.slow
def test_a_compile_is_tried_only_where_it_pays_back_and_its_first_window_warms_up(
        tiny_synthetic, monkeypatch):
    """Planned at 0.01 s, the first compile mode is tried: its first window (which
    compiles) is a warm-up outside its ratios, and its compile time is measured from
    it. The next compile mode is then planned at that measured time, which the rest
    of the 3-epoch run cannot pay back: not tried, and the log says why."""
    monkeypatch.setattr(torch, "compile", lambda model, **_: _SlowFirstCall(model))
    start = START.replace(num_workers=0)
    queue = [Change.of(start, "compile_mode", "default"),
             Change.of(start, "compile_mode", "max-autotune")]
    lines: list[str] = []
    # no screen: the same model's pairs of a few milliseconds a step read 1.25x twice
    # in a row in a busy suite once, and the screen kept it (the queue then remade)
    spec = TuneSpec(share=1.0, window_steps=3, pairs=2, min_gain=0.5, compile_s=0.01,
                    screen=0)
    run = TunedRun(start, tiny_synthetic, spec, epochs=3, num_classes=4, queue=queue,
                   on_line=lines.append)
    try:
        for epoch in (1, 2, 3):
            _one_epoch(run, epoch, None)
    finally:
        run.close()
    tried, refused = run.log.tried
    assert tried.verdict in ("slower", "no faster", "dropped"), tried  # the same model
    assert _SlowFirstCall.SECONDS - 0.1 < tried.compile_s < _SlowFirstCall.SECONDS + 1.0
    assert tried.steps > spec.window_steps * len(tried.ratios), "a warm-up window, unpaired"
    assert (refused.verdict, refused.steps) == ("not tried", 0), refused
    assert refused.reason.startswith("a compile of about") and "would not pay back" in \
        refused.reason, refused.reason
    assert any("compiled in" in line for line in lines), lines
    assert run.log.to_dict()["tried"][0]["compile_s"] == tried.compile_s


@pytest.fixture
def ctrl_c_raises():
    """SIGINT handled by Python's own handler (KeyboardInterrupt) for the test, as in a
    command; an xdist worker ignores SIGINT. Restored after."""
    import signal

    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, outer)


def test_ctrl_c_inside_a_storage_write_waits_for_its_end(ctrl_c_raises):
    """signals_deferred (around a tuned run's study writes): SIGINT inside the block is
    raised after it, as KeyboardInterrupt; the handlers are back as they were."""
    import os
    import signal

    from autotune.files import signals_deferred

    done = []
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # a handler would have run by now
            done.append("the write ended")
    assert done == ["the write ended"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_that_python_swallowed_is_raised_at_the_next_step(ctrl_c_raises):
    """A KeyboardInterrupt raised in a garbage collector's callback (here a __del__)
    is swallowed by Python ("Exception ignored in"): a training under
    interrupts_latched raises it again at its next check_interrupt (between steps).
    Seen in a real tuned run: Ctrl-C landed in SQLAlchemy's weakref callback, and
    the run trained on."""
    import os
    import signal

    from autotune.files import check_interrupt, interrupts_latched

    class Collected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler raises in here, and Python ignores it

    with interrupts_latched():
        Collected()  # collected at once: its KeyboardInterrupt goes nowhere
        with pytest.raises(KeyboardInterrupt):
            check_interrupt()
    check_interrupt()  # nothing latched outside the block
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_short_share_tries_its_candidates_in_short_windows():
    """A window is as long as asked where epochs and the share hold it; half an epoch
    at most; and as short as the share needs to hold each candidate's least pairs,
    never under three steps."""
    from autotune.tuning import fit_window
    from autotune.tuning._spec import MIN_WINDOW

    assert fit_window(8, 100) == 8
    assert fit_window(8, 10) == 5
    assert fit_window(8, 100, share_steps=1000, verdicts=7 * 4) == 8
    assert fit_window(8, 100, share_steps=150, verdicts=7 * 4) == 5
    assert fit_window(8, 100, share_steps=64, verdicts=7 * 4) == MIN_WINDOW
    assert fit_window(2, 100, share_steps=1, verdicts=28) == 2  # asked under the floor
    # a window is timed whole, so a short one reads a loader as a long one does: the
    # quick start's synthetic graph (16 steps an epoch, its share 32 steps) and real
    # Cora at batch 16 (9 steps an epoch, its share 27 steps) take 3 steps
    assert fit_window(8, 16, share_steps=32, verdicts=28) == MIN_WINDOW
    assert fit_window(8, 9, share_steps=27, verdicts=28) == MIN_WINDOW


def test_exploring_spends_what_a_candidate_loses_not_the_steps_it_trains():
    """A candidate's window spends of exploring's share the steps the incumbent would
    have trained beyond it in its seconds, at the incumbent's last pace: nothing at
    that pace or faster, all its steps at half of it; its whole steps before the
    incumbent has a pace, and for a compile's warm-up."""
    from types import SimpleNamespace

    from autotune.pipeline import Window
    from autotune.tuning import Tried

    def spent(pace: float, seconds: float, whole: bool = False) -> float:
        run = SimpleNamespace(_pace=pace, explore_steps_left=100.0, batch_size=10)
        window = Window(steps=8, seeds=80, seconds=seconds, rate=80 / seconds)
        TunedRun._count(run, Tried(Change("num_workers", 0, START, "w0")), window, whole)
        return 100.0 - run.explore_steps_left

    assert spent(pace=80.0, seconds=1.0) == 0.0  # at the incumbent's pace
    assert spent(pace=40.0, seconds=1.0) == 0.0  # faster than it
    assert spent(pace=80.0, seconds=2.0) == pytest.approx(8.0)  # half its pace: 8 steps
    assert spent(pace=0.0, seconds=1.0) == 8.0  # no pace yet: its steps
    assert spent(pace=80.0, seconds=1.0, whole=True) == 8.0  # a compile's warm-up


def test_a_tuned_runs_rate_is_its_winners_seeds_over_their_seconds():
    """show's and export's figure of a tuned run: the winner's complete windows' seeds
    over their seconds, so that an epoch's one-step window weighs one step; a failed
    or pruned window, or another config's, does not count; a run recorded before
    windows kept their seconds gives the median of its windows' rates."""
    from autotune.study._tuned import final_rate

    win, other = {"batch_size": 64}, {"batch_size": 32}
    windows = [
        {"config": win, "state": "complete", "rate": 100.0, "seeds": 800, "seconds": 8.0},
        {"config": win, "state": "complete", "rate": 40.0, "seeds": 80, "seconds": 2.0},
        {"config": win, "state": "pruned", "rate": None, "seeds": 0, "seconds": 0.1},
        {"config": other, "state": "complete", "rate": 999.0, "seeds": 999, "seconds": 1.0},
    ]
    assert final_rate(windows, win) == pytest.approx(880 / 10.0)  # the median: 70
    old = [{k: v for k, v in w.items() if k != "seconds"} for w in windows]
    assert final_rate(old, win) == pytest.approx(70.0)
    assert final_rate(windows[2:3], win) is None


def test_a_workers_candidate_starts_them_in_a_window_outside_its_pairs(tiny_synthetic):
    """A candidate whose loader starts worker processes (persistent: a run pays their
    start once) trains a first window outside its pairs, and its start is measured
    from it, as a compile's warm-up is; the incumbent's window right after it, which
    pays the fork's copies on write, is no pair's either: the first pair is the
    incumbent's next window and the candidate's after it."""
    start = START.replace(num_workers=0)
    lines: list[str] = []
    events: list = []
    spec = TuneSpec(share=1.0, window_steps=3, pairs=2, min_gain=0.5)
    run = TunedRun(start, tiny_synthetic, spec, epochs=3, num_classes=4, on_line=lines.append,
                   queue=[Change.of(start, "num_workers", 1)],
                   on_window=lambda event, log: events.append(event))
    try:
        for epoch in (1, 2, 3):
            _one_epoch(run, epoch, None)
    finally:
        run.close()
    tried, = run.log.tried
    assert tried.ratios and tried.start_s is not None and tried.compile_s is None, tried
    assert tried.steps == spec.window_steps * (len(tried.ratios) + 1), "a warm-up, unpaired"
    warm = next(k for k, e in enumerate(events) if e.change is not None)
    after, reference, own = events[warm + 1:warm + 4]
    assert after.change is None and reference.change is None and own.change is not None
    assert tried.ratios[0] == pytest.approx(own.rate / reference.rate), \
        "the first pair is the incumbent's window after the one the fork slowed"
    assert any("its workers started in" in line for line in lines), lines
    assert run.log.to_dict()["tried"][0]["start_s"] == tried.start_s


def test_workers_are_tried_where_their_start_pays_back_at_the_most_they_gain(
        tiny_synthetic, monkeypatch):
    """Where the incumbent has no workers, a candidate with some gains at most the
    step's wait spread over the cores (workers_gain): tried where its start pays back
    at that in what is left of the run, "not tried" where not, and not weighed before
    the wait is measured."""
    from autotune.topology import Topology
    from autotune.tuning import Tried

    two = Topology(cpus=(0, 1), cores=((0,), (1,)), nodes=((0, 1),))
    monkeypatch.setattr(_candidates, "this_machine", lambda: two)
    assert _candidates.workers_gain(0.16) == pytest.approx(1 / 0.92)
    assert _candidates.workers_gain(0.0) == 1.0
    start = START.replace(num_workers=0)
    one = Change.of(start, "num_workers", 1)
    with TunedRun(start, tiny_synthetic, TuneSpec(start_s=2.0), epochs=100, num_classes=4,
                  queue=[one]) as run:
        rate = 32 * run.planned_steps / 40.0  # the run's seeds in 40 s
        assert run._pays_back(Tried(one), rate), "the wait not measured: tried"
        run.log.wait_share = 0.16  # at best 1.087x: 3.2 s of the 40 s saved
        assert run._pays_back(Tried(one), rate)
        short = Tried(one)
        assert not run._pays_back(short, rate * 2), "1.6 s of 20 s saved: not tried"
        assert short.verdict == "not tried" and short.reason.startswith(
            "its workers' start of about 2.0 s would not pay back"), short.reason
        fewer = Change.of(START, "num_workers", 1)  # the incumbent's workers: not weighed
        run.pipe.config = START
        assert run._pays_back(Tried(fewer), rate / 100)


def test_a_workers_bound_counts_their_hand_over_of_each_batch(tiny_synthetic, monkeypatch):
    """A worker hands each batch over through shared memory, work that sampling in the
    training process never does: the bound spreads it over the cores with the wait
    (a 12% wait on 2 cores: 1.064x at best, 1.031x where the hand-over is 6% of the
    step). The run measures it once, on copies of its own first batches, which stay
    private, as a share of a step at the incumbent's pace; nothing before a batch.
    Where the hand-over outweighs the wait, workers are not tried."""
    from autotune.topology import Topology
    from autotune.tuning import Tried

    two = Topology(cpus=(0, 1), cores=((0,), (1,)), nodes=((0, 1),))
    monkeypatch.setattr(_candidates, "this_machine", lambda: two)
    assert _candidates.workers_gain(0.12) == pytest.approx(1 / 0.94)
    assert _candidates.workers_gain(0.12, handover=0.06) == pytest.approx(1 / 0.97)
    start = START.replace(num_workers=0)
    with TunedRun(start, tiny_synthetic, TuneSpec(), epochs=1, num_classes=4, queue=[]) as run:
        run._pace = 1000.0  # seeds a second
        assert run._handover() == 0.0, "no batch trained yet"
        fit(run, tiny_synthetic, TrainSpec(epochs=1))
        run._pace = 1000.0
        share = run._handover()
        assert run._handover_s > 0 and share == pytest.approx(run._handover_s * 1000.0 / 32)
        tensors = [t for batch in run._probes for store in batch.stores
                   for t in store.values() if isinstance(t, torch.Tensor)]
        assert tensors and not any(t.is_shared() for t in tensors)
        run.log.wait_share, run._handover_s = 0.12, 0.4 * 32 / 1000.0  # 40% of a step
        one = Tried(Change.of(start, "num_workers", 1))
        assert not run._pays_back(one, 1000.0) and one.verdict == "not tried"
        assert one.reason.startswith("at best 0.877x: the step's wait spread over the "
                                     "cores, its batches' hand-over"), one.reason


def test_workers_are_not_tried_where_the_runs_pair_noise_could_not_tell_their_best_gain(
        tiny_synthetic, monkeypatch):
    """At a wait of 8% on 2 cores workers gain at most 1.04x: tried where this run's
    pairs so far spread 2% (a handful of pairs tells 1.04x), not where they spread 9%
    (32 pairs would not), and the log says why; the engine's count of pairs agrees; a
    candidate resumed with its pairs is not weighed again."""
    from autotune.compare import Rule, pair_noise, pairs_to_tell
    from autotune.topology import Topology
    from autotune.tuning import Tried

    two = Topology(cpus=(0, 1), cores=((0,), (1,)), nodes=((0, 1),))
    monkeypatch.setattr(_candidates, "this_machine", lambda: two)
    assert pair_noise([[1.0], [1.1, 1.1]]) is None, "one degree of freedom: no estimate"
    assert pair_noise([[1.0, 1.0, 1.0], [2.0, 2.0]]) == 0.0
    rule = Rule(max_pairs=32)
    assert pairs_to_tell(1.04, 0.02, rule) == 5
    assert pairs_to_tell(1.04, 0.09, rule) is None
    assert pairs_to_tell(1.0, 0.001, rule) is None
    start = START.replace(num_workers=0)
    one = Change.of(start, "num_workers", 1)
    for spread, tried_it in ((0.02, True), (0.09, False)):
        with TunedRun(start, tiny_synthetic, TuneSpec(start_s=0.1, pairs=32), epochs=100,
                      num_classes=4, queue=[one]) as run:
            run.log.wait_share = 0.08  # at best 1.04x
            run.log.tried.append(Tried(Change.of(start, "aggregation", "sparse"), ratios=[
                0.8 * math.exp(spread * z) for z in (1, -1, 1, -1, 1, -1)]))
            candidate = Tried(one)
            rate = 32 * run.planned_steps / 400.0  # 400 s of run: its start pays back
            assert run._pays_back(candidate, rate) == tried_it, candidate.reason
            if not tried_it:
                assert candidate.verdict == "not tried" and candidate.reason.startswith(
                    "at best 1.04x: pairs as noisy as this run's so far (±10% each) would "
                    "not tell that from 1x in"), candidate.reason
                # one resumed with its pairs (an epoch's end cut it short) was weighed
                # before its first and goes on to its verdict (online.py's run called
                # one "not tried" with 3 pairs behind it)
                resumed = Tried(one, ratios=[0.6, 1.04, 0.62])
                assert run._pays_back(resumed, rate) and resumed.verdict == "", resumed


def test_more_workers_than_a_loser_added_are_not_tried_where_the_step_waits_little():
    """A candidate that added loader workers and was not kept rules out still more of
    them where the incumbent's step is the model's (it waits little for its batches);
    not where it waits most of its time, nor for another knob's loser."""
    start = START.replace(num_workers=0)
    w1, w2, w3 = (Change.of(start, "num_workers", w) for w in (1, 2, 3))
    sparse = Change.of(start, "aggregation", "sparse")
    queue = [w2, sparse, w3]
    assert _candidates.beyond_a_loser(w1, start, queue, 0.15) == [w2, w3]
    assert _candidates.beyond_a_loser(w2, start, queue, 0.15) == [w3]
    assert _candidates.beyond_a_loser(w1, start, queue, 0.9) == [], "the loader's step"
    assert _candidates.beyond_a_loser(w1, start, queue, None) == [], "not ordered yet"
    assert _candidates.beyond_a_loser(sparse, start, queue, 0.15) == []
    fewer = Change.of(START, "num_workers", 1)  # 2 -> 1 lost: 0 is fewer, not more
    assert _candidates.beyond_a_loser(fewer, START, [Change.of(START, "num_workers", 0)],
                                      0.15) == []


def test_a_run_imports_its_verdicts_scipy_before_it_trains(tiny_synthetic, monkeypatch):
    """The quantiles' scipy is imported when the run is made, not at its first
    verdict: Ctrl-C inside that import once left the command dying of SIGINT (-2)
    after its interrupt line, not exiting 130 (the Ctrl-C test caught it in a suite
    run); and the import's second stays out of the windows."""
    calls = []
    monkeypatch.setattr(_run, "load_quantiles", lambda: calls.append(1))
    with TunedRun(START, tiny_synthetic, TuneSpec(), epochs=1, num_classes=4):
        assert calls == [1]


def test_a_fast_end_dropped_before_the_ordering_is_still_named_first(tiny_synthetic,
                                                                     monkeypatch):
    """The fast end goes before the queue's ordering; dropped, the ordering that
    follows keeps it as what went first, and the run's closing lines say so."""
    from autotune.topology import Topology

    two = Topology(cpus=(0, 1), cores=((0,), (1,)), nodes=((0, 1),))
    monkeypatch.setattr(_candidates, "this_machine", lambda: two)
    real = TunedRun._verdict
    monkeypatch.setattr(TunedRun, "_verdict", lambda self, tried: (
        ("dropped", "as the test asks") if tried.knob == "fast-end" else real(self, tried)))
    with TunedRun(START, tiny_synthetic, TuneSpec(share=1.0, window_steps=4, pairs=4),
                  epochs=1, num_classes=4) as run:
        fit(run, tiny_synthetic, TrainSpec(epochs=1))
    end = run.log.tried[0]
    assert (end.knob, end.verdict) == ("fast-end", "dropped"), run.log.tried
    assert run.log.wait_share is not None, "ordered after it"
    assert run.log.ahead == end.label
    assert any(f"{end.label} first" in line for line in run.log.lines()), run.log.lines()


@pytest.mark.parametrize("gain, again", [(1.2, False), (1.6, True)])
def test_a_loser_is_tried_again_only_where_the_gain_kept_since_could_lift_it(
        tiny_synthetic, monkeypatch, gain, again):
    """A change that lost at 0.7x is not tried again after a change kept at 1.2x
    (0.84x: still under 1), and is after one kept at 1.6x (1.12x); the log says why."""
    loser, winner = Change.of(START, "aggregation", "sparse"), Change.of(START, "num_workers", 0)
    monkeypatch.setattr(_run, "candidates", lambda config, spec, topology=None, masks=True: [
        Change.of(config, "aggregation", "sparse")] if config.num_workers == 0 else [])

    def verdict(self, tried):  # scripted ratios: the loser's 0.7x, the winner's gain
        tried.ratios[:] = [0.7 if tried.knob == "aggregation" else gain] * len(tried.ratios)
        tried.compare(self.spec.rule)
        return ("dropped", "as the test asks") if tried.knob == "aggregation" else \
            ("kept", "as the test asks")

    monkeypatch.setattr(TunedRun, "_verdict", verdict)
    lines: list[str] = []
    with TunedRun(START, tiny_synthetic, TuneSpec(share=1.0, window_steps=3, pairs=2),
                  epochs=3, num_classes=4, queue=[loser, winner], on_line=lines.append) as run:
        fit(run, tiny_synthetic, TrainSpec(epochs=3))
    seen = [(t.knob, t.verdict) for t in run.log.tried]
    assert seen[:2] == [("aggregation", "dropped"), ("num_workers", "kept")], seen
    if again:
        assert seen[2:] == [("aggregation", "dropped")], seen
    else:
        assert seen[2:] == [("aggregation", "not tried")], seen
        reason = run.log.tried[2].reason
        assert "0.70x" in reason and f"{gain:.2f}x" in reason, reason
        assert any("not tried" in line for line in lines), lines


def _about_1x(n: int) -> list[float]:  # ±8% a pair: undecided at 8 and at 16
    return [(0.92, 1.08)[i % 2] for i in range(n)]


def _late_tie(n: int) -> list[float]:  # 1.05x over its first 8 pairs, 1.017x at 16
    return [(0.97, 1.13)[i % 2] if i < 8 else (1.15, 0.85)[i % 2] for i in range(n)]


@pytest.mark.parametrize("tie, second, aside_at, ends_at", [
    (_about_1x, 1.3, 8, None), (_about_1x, 0.7, 8, 9), (_late_tie, 0.7, 16, 18)])
def test_a_candidate_that_reads_as_a_tie_steps_aside_for_the_next(tiny_synthetic, monkeypatch,
                                                                  tie, second, aside_at,
                                                                  ends_at):
    """A candidate whose first 8 pairs (or 16) read no better than the margin, undecided,
    steps aside for the one queued after it, its pairs kept. A gain behind it is kept
    before the tie's verdict, and the tie, whose pairs were against the incumbent
    before, ends unfinished and is tried again against the new one; after a loser,
    the tie goes on with its pairs until the 24 pairs a candidate may have could not
    call it faster (at 9 pairs, and at 18), "no faster". Without stepping aside, the
    tie takes those pairs first."""
    start = START.replace(num_workers=0)
    queue = [Change.of(start, "aggregation", "sparse"),
             Change.of(start, "sampling_backend", "auto")]
    monkeypatch.setattr(_run, "candidates", lambda config, spec, topology=None, masks=True: [
        Change.of(config, "aggregation", "sparse")] if config.sampling_backend == "auto" else [])
    real = TunedRun._verdict

    def verdict(self, tried):  # scripted ratios, decided by the run's own rule
        n = len(tried.ratios)
        tried.ratios[:] = tie(n) if tried.knob == "aggregation" else [second] * n
        return real(self, tried)

    monkeypatch.setattr(TunedRun, "_verdict", verdict)
    lines: list[str] = []
    with TunedRun(start, tiny_synthetic, TuneSpec(share=1.0, window_steps=3, pairs=24),
                  epochs=20, num_classes=4, queue=queue, on_line=lines.append) as run:
        fit(run, tiny_synthetic, TrainSpec(epochs=20))
    seen = [(t.knob, t.verdict, t.aside_at, len(t.ratios)) for t in run.log.tried]
    aside = next(i for i, line in enumerate(lines) if "stepped aside" in line)
    assert "aggregation" in lines[aside] and f"over {aside_at} pairs" in lines[aside], lines
    decided = next(i for i, line in enumerate(lines) if "sampling_backend" in line)
    assert aside < decided, lines
    if second > 1:
        assert seen[:2] == [("sampling_backend", "kept", None, 2),
                            ("aggregation", "unfinished", 8, 8)], seen
        assert "sampling_backend builtin -> auto was kept" in run.log.tried[1].reason
        again = run.log.tried[2]
        assert (again.knob, again.config.sampling_backend) == ("aggregation", "auto"), seen
        assert again.verdict == "no faster" and again.aside_at is None, seen
    else:
        assert seen == [("sampling_backend", "dropped", None, 2),
                        ("aggregation", "no faster", aside_at, ends_at)], seen
        assert "24 could not call it faster" in run.log.tried[1].reason
        assert f"stepped aside after {aside_at} pairs" in run.log.tried[1].line()
