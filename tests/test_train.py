"""From a Pareto point to training: the Python API on an exported config,
``autotune train``, and the accuracy guard marking a damaging config infeasible."""
from __future__ import annotations

import dataclasses
import json

import optuna
import pytest
import yaml

from _helpers import cli
from autotune.config import TrialConfig
from autotune.specs import GuardOptions
from autotune.specs import MeasureSpec

FAST = ["--dataset", "synthetic", "--scale", "0.004", "--steps", "3", "--warmup", "1",
        "--warmup-time", "0",
        "--max-seconds", "0.5", "--confirm", "0"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    common = ["--root", str(tmp / "data"), "--studies-dir", str(tmp / "studies")]
    run = cli("search", *FAST, *common, "--space", "quick", "--study-name", "t",
              "--n-trials", "3")
    assert run.returncode == 0, run.stderr
    out = tmp / "best.yaml"
    run = cli("export", "--study-name", "t", "--studies-dir", str(tmp / "studies"),
              "--pick", "knee", "--out", str(out))
    assert run.returncode == 0, run.stderr
    return tmp, common, out


@pytest.mark.slow
def test_export_load_build_one_epoch_lowers_the_loss(exported):
    import autotune
    from autotune.data import synthetic_reddit

    _, _, out = exported
    config = autotune.load_config(out)
    data = synthetic_reddit(scale=0.02, seed=1, mean_degree=12, num_features=32,
                            num_classes=4)
    # A smaller batch than the export's, so one epoch has enough steps to compare.
    # closed at the block's end: the export may hold loader workers (left to the
    # garbage collector, their shutdown waits out torch's timeout: Pipeline.close)
    with autotune.build(config.replace(batch_size=64), data, num_classes=4) as pipe, \
            pipe.activate():
        losses = [float(pipe.train_step(batch)) for batch in pipe.loader]
    assert len(losses) >= 20
    quarter = len(losses) // 4
    assert sum(losses[-quarter:]) / quarter < 0.9 * sum(losses[:quarter]) / quarter, losses


@pytest.mark.slow
def test_train_command_reports_accuracy_and_throughput_against_the_trial(exported):
    tmp, common, out = exported
    run = cli("train", "--config", str(out), *FAST[:4], *common, "--epochs", "2")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    header = next(line.split() for line in lines if line.startswith("epoch"))
    assert header[:5] == ["epoch", "loss", "train", "s", "eval"], header
    epochs = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"])]
    assert len(epochs) == 2
    for row in epochs:
        val, test = float(row[-2]), float(row[-1])
        assert 0 <= val <= 1 and 0 <= test <= 1
        assert float(row[3]) > 0, row  # its evaluation's seconds, beside training's
    spent = next(line for line in lines if line.startswith("time: training")).split()
    said = float(spent[2]), float(spent[5])  # "time: training T s, evaluation E s (...)"
    summed = [sum(float(row[i]) for row in epochs) for i in (2, 3)]
    assert all(abs(a - b) <= 0.06 for a, b in zip(said, summed)), (spent, epochs)
    measured = yaml.safe_load(out.read_text())["measured"]
    assert f"trial #{measured['trial']} measured" in lines[-1]
    assert "throughput: achieved" in lines[-1] and lines[-1].endswith("x")


@pytest.mark.bad_input
@pytest.mark.parametrize("text, needle", [
    ("format: 2\nconfig: {batch_size: 512}\n", "has format 2"),
    ("config: {batch_size: 512, warp_drive: true}\n", "unknown keys warp_drive"),
])
def test_train_refuses_a_foreign_config(tmp_path, text, needle):
    path = tmp_path / "other.yaml"
    path.write_text(text)
    run = cli("train", "--config", str(path), *FAST[:4], "--root", str(tmp_path / "data"),
              "--epochs", "1", timeout=120)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert needle in run.stderr
    assert not (tmp_path / "data").exists(), "nothing may be prepared for a refused config"


@pytest.mark.exclusive
@pytest.mark.slow
def test_the_guard_rejects_fanout_1_1_and_keeps_a_baseline_like_config(tmp_path):
    """On a homophilous graph with weak features, fanout [1, 1] with batch 16 learns
    much less in the baseline's time than fanout [25, 10]; bit-cut dropout masks (the
    same masks in law, no slower) learn as well. (bfloat16 was the kept config, until
    a 2-core EPYC ran it at half the baseline's speed here, so that equal wall time
    trained it for half the steps: a machine's speed, not the guard.)"""
    from autotune.data import DatasetRef
    from autotune.study._space import load_space, params_for
    from autotune.study import _identity as identity, _search as search_module, _options as options, _records as records

    (tmp_path / "space.yaml").write_text(
        "knobs:\n  batch_size: {choices: [16, 512]}\n"
        "  num_neighbors: {choices: [[1, 1], [25, 10]]}\n"
        "  num_workers: 0\n  dropout_masks: {choices: [bernoulli, bits]}\n"
        "  sampling_backend: builtin\nfixed:\n  hidden_channels: 64\n")
    base = TrialConfig(batch_size=512, num_workers=0, hidden_channels=64)
    space = load_space(str(tmp_path / "space.yaml"), baseline=base)
    baseline = space.baseline(base)
    ref = DatasetRef("synthetic", root=str(tmp_path / "data"), scale=0.025)
    dataset = ref.prepare()
    opts = options.SearchOptions(dataset=ref, space=space, n_trials=1, optuna_sampler="random",
                              storage=f"sqlite:///{tmp_path / 'g.db'}", study_name="g",
                              studies_dir=tmp_path,
                              measure=MeasureSpec(warmup_steps=1, min_warmup_s=0.0, min_steps=3,
                                                  max_window_s=0.5),
                              # 0.95, not 0.99: the guard trains each config for the
                              # baseline's wall time, so a config's accuracy moves with the
                              # machine's speed: on CI machines a kept config fell 0.04% short
                              # of 0.99 once, and the bit-cut one 0.15% short of 0.98 on a
                              # 2-core Xeon; [1, 1] stays below 0.2. Three epochs, not two:
                              # accuracy is 0.85 after 8 steps (an epoch), 1.0 after 16, and
                              # with two epochs a bit-cut run scored 0.9476x on a 2-core
                              # AVX2-only EPYC; with three it reached 1.0 in 20 of 24 steps,
                              # but scored 0.927x once on a 2-core EPYC with avx512_bf16 in
                              # the suite (its warm-up and window count in its budget, so
                              # it trains fewer steps than the baseline); four give it room.
                              # Those epochs were of batch 1024 on a 0.05-scale graph; 512 on
                              # half the graph keeps 8 steps an epoch at half the cost (the
                              # test runs alone: its time is the whole machine's)
                              guard=GuardOptions(ratio=0.95, epochs=4))
    study = identity.open_study(opts, dataset_stats=dataset.stats(), env={})

    # the baseline, then the two configs, in order, in one run (one fork server); each
    # trains for the guard in its own process, after its window
    study.enqueue_trial({}, user_attrs={records.ROLE: "baseline"})
    damaging = baseline.replace(batch_size=16, num_neighbors=(1, 1))
    for config in (damaging, baseline.replace(dropout_masks="bits")):
        study.enqueue_trial(params_for(config, space))
    search_module.Search(dataclasses.replace(opts, n_trials=3, priors=False, confirm=0),
                         study, baseline).run()
    trials = study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3, [t.user_attrs for t in trials]
    guard = study.user_attrs["guard"]
    assert guard["baseline_trial"] == 0 and guard["budget_s"] > 0
    base_t, bad, bits = trials
    assert base_t.user_attrs["validation"] == guard["baseline_validation"]
    assert guard["baseline_validation"]["accuracy"] > 0.5  # named for what it holds
    assert bad.user_attrs["config"]["num_neighbors"] == [1, 1]
    assert "validation" in bad.user_attrs, "the low-memory [1, 1] trial joins the front"
    assert bad.user_attrs["guard_shortfall"] > 0, bad.user_attrs["guard_ratio"]
    assert bad.constraints["accuracy"] > 0
    best = {t.number for t in study.best_trials}
    assert best and 1 not in best, best  # the baseline may be dominated by bits
    assert base_t.constraints["accuracy"] <= 0, "the baseline is feasible"
    assert bits.constraints["accuracy"] <= 0, "the bit-cut dropout config stays feasible"
    if "validation" in bits.user_attrs:  # trained: it joined the front
        assert bits.user_attrs["guard_shortfall"] <= 0, bits.user_attrs["guard_ratio"]
    else:  # dominated by a feasible trial, so it can never be on the front
        assert any(p.feasible and p.dominates(records.TrialRecord.from_frozen(bits).point())
                   for p in records.points(study))
    for t in trials:
        if "validation" in t.user_attrs:
            assert t.user_attrs["guard_s"] > 0 and t.user_attrs["guard_train_s"] > 0
    assert not (tmp_path / "g" / "guard").exists(), "no guard ran in a process of its own"


@pytest.mark.slow
def test_accuracy_as_a_third_objective_trains_every_trial(tmp_path):
    studies = tmp_path / "studies"
    run = cli("search", *FAST, "--root", str(tmp_path / "data"), "--studies-dir",
              str(studies), "--space", "quick", "--study-name", "acc", "--n-trials", "2",
              "--objectives", "throughput,memory,accuracy", "--guard-epochs", "1")
    assert run.returncode == 0, run.stderr
    assert "val acc" in run.stdout and "accuracy guard: 2 configs trained" in run.stdout
    study = optuna.load_study(study_name="acc", storage=f"sqlite:///{studies / 'acc.db'}")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE", "MAXIMIZE"]
    assert study.metric_names[2] == "validation accuracy"
    for t in study.trials:
        assert t.state.name == "COMPLETE" and len(t.values) == 3
        assert t.values[2] == t.user_attrs["validation"]["accuracy"]
    again = cli("search", *FAST, "--root", str(tmp_path / "data"), "--studies-dir",
                str(studies), "--space", "quick", "--study-name", "acc", "--n-trials", "3",
                timeout=120)
    assert again.returncode == 2 and "--objectives" in again.stderr, again.stderr


@pytest.mark.slow
def test_train_takes_the_dataset_from_the_export_and_saves_the_best_epoch(exported, tmp_path):
    """No dataset flags: the export's dataset (scale 0.004 here), not the full-size
    default; the best validation epoch is named and its weights saved."""
    import torch

    _, _, out = exported
    saved = tmp_path / "model.pt"
    run = cli("train", "--config", str(out), "--epochs", "2", "--save", str(saved),
              "--studies-dir", str(tmp_path / "s"))
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr, run.stderr
    best = next(ln for ln in run.stdout.splitlines() if ln.startswith("best validation"))
    assert "at epoch" in best and str(saved) in best
    assert "measured" in run.stdout.splitlines()[-1], "same dataset: throughput compared"
    state = torch.load(saved)
    assert any(k.endswith("weight") for k in state)
    other = cli("train", "--config", str(out), "--epochs", "1", "--scale", "0.003",
                "--root", str(tmp_path / "d"), "--studies-dir", str(tmp_path / "s"))
    assert other.returncode == 0, other.stderr
    assert "throughputs are not compared" in other.stderr
    assert "no measurement of" in other.stdout.splitlines()[-1]


@pytest.mark.slow
def test_the_guard_training_goes_on_from_the_window(tmp_path):
    """A guarded candidate's warm-up and window train its model from the seed's
    fresh weights, so they are its guard training's first steps: shorter than the
    budget, it trains on for the rest; longer, the weights it had when its steps
    reached the budget are the ones evaluated (CiteSeer's guard cost 28% of its
    search when each candidate trained the whole budget again after its window)."""
    from autotune.data import DatasetRef
    from autotune.study._guard import verdict_of
    from autotune.trial._window import measure
    from autotune.pipeline import build
    import torch

    from autotune.trial._worker import GuardMark, _guard_on

    ref = DatasetRef("synthetic", root=str(tmp_path / "data"), scale=0.01)
    ref.prepare()
    dataset = ref.load()
    config = TrialConfig(batch_size=64, num_neighbors=(5, 5), hidden_channels=16,
                         num_workers=0)

    def guarded(budget_s: float, window_s: float):
        pipe = build(config, dataset.data, num_classes=dataset.num_classes)
        mark = GuardMark(pipe, budget_s)
        m = measure(pipe, MeasureSpec(warmup_steps=2, min_warmup_s=0.0, min_steps=3,
                                      min_window_s=window_s,
                                      max_window_s=window_s, precision=1e-6), on_step=mark)
        live = {k: v.clone() for k, v in pipe.model.state_dict().items()}
        with pipe:
            return pipe, m, mark, live, _guard_on(pipe, m, mark, dataset.data)

    # the measurement (about 0.3 s) is shorter than the budget: it trains on
    pipe, m, mark, _, out = guarded(budget_s=1.5, window_s=0.3)
    measured = len(m.warmup_step_times_s) + len(m.step_times_s)
    assert mark.weights is None and out["epochs"] and 0.0 <= out["val_metric"] <= 1.0
    assert out["from_window"] == {"steps": measured, "train_s": pytest.approx(
        sum(m.warmup_step_times_s) + sum(m.step_times_s))}
    assert out["train_s"] >= 1.5 and out["from_window"]["train_s"] < 1.5
    ref_ = {"budget_s": 1.5, "baseline_validation": {"accuracy": out["val_metric"]}}
    assert verdict_of(out, 0.0, GuardOptions(ratio=0.99), ref_).steps == \
        measured + sum(e["steps"] for e in out["epochs"])
    # the window outlasts the budget: the weights from the budget's end are evaluated
    pipe, m, mark, live, out = guarded(budget_s=0.2, window_s=1.0)
    assert mark.weights is not None and out["epochs"] == []
    assert 0.2 <= out["from_window"]["train_s"] < 0.2 + 0.5
    assert out["from_window"]["steps"] < len(m.warmup_step_times_s) + len(m.step_times_s)
    now = pipe.model.state_dict()
    assert all(torch.equal(now[k], mark.weights[k]) for k in now)
    assert any(not torch.equal(live[k], mark.weights[k]) for k in live), \
        "a copy, not the live weights: the window trained on after it"


def test_a_trial_trains_for_the_guard_only_where_it_could_join_the_front():
    """The rule a trial's own process applies after its window (the search's, for a
    trial it did not train): dominated by a feasible front point, or over the memory
    budget, it does not train; the baseline and an accuracy objective always do."""
    from autotune.specs import GuardRun

    run = GuardRun(budget_s=1.0, front=((100.0, 50.0),), budget_mib=80.0)
    assert not run.wanted(90.0, 60.0)
    assert run.wanted(110.0, 60.0) and run.wanted(90.0, 40.0) and run.wanted(100.0, 50.0)
    assert not run.wanted(500.0, 90.0), "over --max-memory"
    assert GuardRun(epochs=2).wanted(1.0, 1e9)
    assert GuardRun(budget_s=1.0, front=((100.0, 50.0),), always=True).wanted(1.0, 99.0)
    spec = MeasureSpec(guard=run)
    assert MeasureSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_the_one_epoch_loop_counts_each_step_once_also_where_a_budget_stops_it(
        tiny_synthetic, monkeypatch):
    """fit's epochs read their steps, seeds and loss from the source's one timer
    (pipeline.timed): whole epochs, and the last epoch a budget stops mid-way, count
    exactly the steps trained (the step that spent the budget included), and each
    epoch's seconds cover its steps."""
    from autotune.pipeline import Pipeline, TrainSpec, build, fit

    import time

    calls: list[int] = []
    pause = {"s": 0.0}  # a slower step, so that the budget ends mid-epoch
    real = Pipeline.train_step

    def counted(self, batch):
        calls.append(int(batch.batch_size))
        time.sleep(pause["s"])
        return real(self, batch)

    monkeypatch.setattr(Pipeline, "train_step", counted)
    config = TrialConfig(batch_size=64, num_neighbors=(5, 5), hidden_channels=16,
                         num_workers=0, sampling_backend="builtin")
    pipe = build(config, tiny_synthetic, num_classes=4)
    seeds = int(tiny_synthetic.train_mask.sum())
    with pipe:
        whole = fit(pipe, tiny_synthetic, TrainSpec(epochs=2, every_epoch=False))
        assert [e.seeds for e in whole.epochs] == [seeds, seeds]
        assert sum(e.steps for e in whole.epochs) == len(calls)
        calls.clear()
        pause["s"] = 0.02
        cut = fit(pipe, tiny_synthetic, TrainSpec(budget_s=0.05))
    assert cut.stopped_by_budget and cut.epochs[-1].seeds < seeds
    assert sum(e.steps for e in cut.epochs) == len(calls)
    assert sum(e.seeds for e in cut.epochs) == sum(calls)
    assert all(e.train_s > 0 and e.loss > 0 for e in cut.epochs)


def test_a_window_is_timed_whole_from_its_loaders_start():
    """pipeline.timed's rate covers the whole window, its first step and its loader's
    start included: a window's loader holds that window's seeds alone, so its workers
    sample them all within it, the most while the first step waits
    (docs/measurement.md, "A window's rate"). Here a loader whose first batch takes
    0.3 s and the rest nothing: 4 batches of 10 seeds in about 0.3 s (the old rate,
    after the first step, read thousands a second)."""
    import time
    from types import SimpleNamespace

    import torch

    from autotune.pipeline import Window, timed

    class Batch:
        def to(self, device, non_blocking=False):
            return self

    class SlowStart:
        def __iter__(self):
            time.sleep(0.3)  # the workers resumed and the first batch sampled
            yield from (Batch() for _ in range(4))

    pipe = SimpleNamespace(device=torch.device("cpu"), loader=SlowStart(),
                           task=SimpleNamespace(seeds=lambda batch: 10),
                           config=SimpleNamespace(gpu_sampling=False))
    window = Window()
    for _ in timed(pipe, window):
        with window.step():
            pass
    assert (window.steps, window.seeds) == (4, 40)
    assert window.seconds >= 0.3
    assert window.rate == pytest.approx(40 / window.seconds) and window.rate < 40 / 0.3
