"""Precision tried safely: a precision candidate of a tuned run is checked by its
gradients on the incumbent's first batches before it trains a window, and refused
(with why) where they differ; where the CPU emulates bfloat16 the run says it left
bfloat16 out, and without consent it names the flag that would try it."""
from __future__ import annotations

import pytest
import torch

from fake_clock import FakeClock

from autotune.config import TrialConfig
from autotune.pipeline import Pipeline, TrainSpec, build, fit
from autotune.pipeline import _source
from autotune.tuning import Change, TunedRun, TuneSpec, loss_check, numerics_check, \
    precision_notes
from autotune.tuning import _checks

CONFIG = TrialConfig(batch_size=32, num_neighbors=(5, 5), num_workers=0, hidden_channels=16,
                     sampling_backend="builtin")


@pytest.fixture
def pipes(tiny_synthetic):
    """The incumbent (float32) and candidates sharing its model, and three probe
    batches from its loader."""
    torch.manual_seed(0)
    incumbent = build(CONFIG, tiny_synthetic, num_classes=4)
    model, optimizer = incumbent.eager_model, incumbent.optimizer

    def candidate(**change):
        return build(CONFIG.replace(**change), tiny_synthetic, model, num_classes=4,
                     optimizer=optimizer)

    probes = [batch for _, batch in zip(range(3), incumbent.loader)]
    return incumbent, candidate, probes


def test_the_same_numerics_pass_and_bfloat16_features_pass(pipes):
    incumbent, candidate, probes = pipes
    assert numerics_check(incumbent, candidate(), probes) == ""
    assert numerics_check(incumbent, candidate(feature_dtype="bfloat16"), probes) == ""


def test_both_probe_passes_draw_the_same_bit_masks_whatever_the_pipelines_train_with(
        pipes, monkeypatch):
    """Bit dropout masks draw other masks by the same law: a candidate that changes
    them (with bfloat16 features) is checked on its arithmetic, both of its probe
    passes drawing bit masks (the cheaper draw) from one seed, and passes; each under
    its own masks, their gradients differ (so a check that let them would refuse
    every such candidate). Pipelines sharing one model each train with their own
    masks."""
    from autotune.pipeline._models import DROPOUT

    incumbent, candidate, probes = pipes
    bits = candidate(dropout_masks="bits", feature_dtype="bfloat16")
    drawn = []
    real = Pipeline.gradients
    monkeypatch.setattr(Pipeline, "gradients", lambda self, batch, seed=0, masks=None: (
        drawn.append((self.config.feature_dtype, seed, masks)) or real(self, batch, seed, masks)))
    assert numerics_check(incumbent, bits, probes) == ""
    assert drawn == [(dtype, k, "bits") for k in (1, 2, 3) for dtype in ("float32", "bfloat16")]
    monkeypatch.undo()
    ours, theirs = incumbent.gradients(probes[0], seed=1), bits.gradients(probes[0], seed=1)
    assert float(torch.nn.functional.cosine_similarity(ours, theirs, dim=0)) < 0.99
    model = incumbent.eager_model
    assert bits.eager_model is model and incumbent.own_masks
    for pipe, drop in ((bits, DROPOUT["bits"]), (incumbent, DROPOUT["bernoulli"])):
        with pipe.activate():
            assert model.drop is drop


def test_a_candidate_whose_gradients_differ_is_refused_with_why(pipes, monkeypatch):
    incumbent, candidate, probes = pipes
    broken = candidate(feature_dtype="bfloat16")
    real = broken.gradients

    def turned(batch, seed=0, masks=None):  # its gradient turned a quarter of the way round
        g = real(batch, seed, masks)
        noise = torch.randn(g.shape, generator=torch.Generator().manual_seed(seed))
        noise = noise / noise.norm() * g.norm()
        return 0.7 * g + 0.7 * noise

    monkeypatch.setattr(broken, "gradients", turned)
    why = numerics_check(incumbent, broken, probes)
    assert why.startswith("gradient direction off on probe batch 1: cosine")
    monkeypatch.setattr(broken, "gradients",
                        lambda batch, seed=0, masks=None: 1.2 * real(batch, seed, masks))
    why = numerics_check(incumbent, broken, probes)  # 1.2x, and bfloat16's own rounding
    assert why.startswith("gradient size off on probe batch 1: ") and why.endswith(
        "x the float32 one, beyond ±5%") and abs(float(why.split()[7][:-1]) - 1.2) < 0.01
    monkeypatch.setattr(broken, "gradients",
                        lambda batch, seed=0, masks=None: real(batch, seed, masks) * float("nan"))
    assert numerics_check(incumbent, broken, probes).startswith("non-finite gradients")
    assert numerics_check(incumbent, broken, []) == "no probe batch trained yet"


def _bfloat16_gradients_off(monkeypatch, data, start: TrialConfig, features: str,
                            lines: list | None = None) -> TunedRun:
    """A tuned run from ``start`` of one candidate, its feature dtype ``features``
    (2 epochs, windows of 4 steps, 4 pairs), where every pipeline with bfloat16
    features reports gradients 1.5x their true size; the run, ended."""
    real = Pipeline.gradients

    def off(self, batch, seed=0, masks=None):
        g = real(self, batch, seed, masks)
        return g * (1.5 if self.config.feature_dtype == "bfloat16" else 1.0)

    monkeypatch.setattr(Pipeline, "gradients", off)
    queue = [Change.of(start, "feature_dtype", features)]
    with TunedRun(start, data, TuneSpec(share=1.0, window_steps=4, pairs=4, precision=True),
                  epochs=2, num_classes=4, queue=queue,
                  on_line=lines.append if lines is not None else None) as run:
        fit(run, data, TrainSpec(epochs=2))
    return run


def test_a_tuned_run_refuses_a_precision_candidate_that_fails_the_check(tiny_synthetic,
                                                                        monkeypatch):
    """Through the run: the candidate never trains a window, its verdict is refused,
    and its line says why."""

    lines = []
    run = _bfloat16_gradients_off(monkeypatch, tiny_synthetic, CONFIG, "bfloat16", lines)
    tried = run.log.tried[0]
    assert tried.verdict == "refused" and tried.steps == 0, tried
    assert tried.reason.startswith("numerics check: gradient size off"), tried.reason
    assert any("refused (numerics check" in line for line in lines), lines
    assert run.pipe.config.feature_dtype == "float32"


def test_a_candidate_back_to_float32_is_not_checked_against_a_lower_precision(
        tiny_synthetic, monkeypatch):
    """float32 is what the checks compare against: a candidate that returns to it
    from bfloat16 features trains its windows, however far the bfloat16 incumbent's
    own gradients are off (a check of it would refuse it: the test above)."""
    start = CONFIG.replace(feature_dtype="bfloat16")
    run = _bfloat16_gradients_off(monkeypatch, tiny_synthetic, start, "float32")
    tried = run.log.tried[0]
    assert tried.steps > 0 and tried.verdict != "refused", tried


@pytest.mark.parametrize("inflated", [False, True])
def test_a_faster_precision_candidate_whose_loss_rises_beyond_the_noise_is_refused(
        tiny_synthetic, monkeypatch, inflated):
    """A precision candidate that passes the gradient check and is faster is kept;
    the same candidate whose training loss reads 3x the float32 windows' beside it
    is refused by the loss check, and the run goes on with float32. The windows are
    timed on a fake clock (tests/fake_clock.py) on which a bfloat16 step takes
    0.25 s and a float32 step 1 s more than its real time: 4x apart, whatever the
    machine's load does to the real few milliseconds (a real 20 ms sleep in the
    float32 step left 4-step windows undecided after 6 pairs beside two busy cores,
    1 run in 4: ratios 1.22-4.78 on an AVX2-only EPYC)."""

    queue = [Change.of(CONFIG, "feature_dtype", "bfloat16")]
    real = Pipeline.train_step
    clock = FakeClock()
    monkeypatch.setattr(_source, "time", clock)

    def step(self, batch):
        loss = real(self, batch)
        if self.config.feature_dtype == "bfloat16":
            clock.sleep(0.25)
            return loss * 3 if inflated else loss
        clock.sleep(1.0)
        return loss

    monkeypatch.setattr(Pipeline, "train_step", step)
    with TunedRun(CONFIG, tiny_synthetic, TuneSpec(share=1.0, window_steps=4, pairs=6,
                                                   precision=True),
                  epochs=3, num_classes=4, queue=queue) as run:
        fit(run, tiny_synthetic, TrainSpec(epochs=3))
    tried = run.log.tried[0]
    assert len(tried.losses) == len(tried.ratios) >= 2, tried
    if inflated:
        assert tried.verdict == "refused" and tried.reason.startswith("loss check: "), tried
        assert run.pipe.config.feature_dtype == "float32"
    else:
        assert tried.verdict == "kept", tried
    assert loss_check([(1.0, 1.0), (0.9, 0.95)]) == ""  # lower: no harm
    assert loss_check([(2.0, 1.0), (1.9, 0.9)]).startswith("its training loss +1")
    assert loss_check([(2.0, 1.0)]) == ""  # one pair tells nothing


def test_the_loss_check_reads_the_first_epochs_falling_loss_as_the_trend_it_is():
    """The fast end's pairs (candidate, incumbent) from online.py's tuned run with
    precision on a 2-core EPYC with AVX2 only, in its first epoch: the loss fell from
    3.7 to 0.002, the incumbent first in the first pair and second in the next, so
    the first two pairs read -0.74 and +1.05 and their mean +0.049 refused a
    candidate whose loss matched the incumbent's in every later pair. Their median
    passes it; the same pairs with the candidate's loss 3x in each are refused."""
    pairs = [(2.9155, 3.6595), (1.8341, 0.7822), (0.02027, 0.03662), (0.01304, 0.00904),
             (0.003985, 0.003054), (0.002630, 0.002277)]
    assert loss_check(pairs) == ""
    assert loss_check([(3 * theirs, theirs) for _, theirs in pairs]).startswith(
        "its training loss +")
    # a candidate higher in most pairs, not in a trend's one or two, is refused
    assert loss_check([(theirs + 0.01, theirs) for _, theirs in pairs[2:]]) != ""


def test_the_run_says_what_it_left_out_of_precision_and_why(monkeypatch):
    """Emulated bfloat16: autocast not tried, and why. Native: tried where a linear
    layer measured faster under it on this CPU, the hint without consent citing that
    figure and the benchmark; where it measured slower (as on a Xeon without AMX),
    not tried, and the hint says it would not pay here; the candidates agree."""
    from autotune.tuning import _candidates
    from autotune.tuning import candidates

    monkeypatch.setattr(_checks, "native_bf16", lambda: False)
    notes = precision_notes(CONFIG, TuneSpec(precision=True))
    assert notes and "bfloat16 autocast not tried" in notes[0] and "emulation" in notes[0]
    assert precision_notes(CONFIG, TuneSpec(precision=False)) == []
    for module in (_checks, _candidates):
        monkeypatch.setattr(module, "native_bf16", lambda: True)
    for gain in (1.4, 0.58):
        for module in (_checks, _candidates):
            monkeypatch.setattr(module, "bf16_matmul_gain", lambda: gain)
        notes = precision_notes(CONFIG, TuneSpec(precision=True))
        hint = precision_notes(CONFIG, TuneSpec(precision=False))
        assert hint and "--tune-precision" in hint[0] and f"{gain:.2f}x" in hint[0], hint
        amp = [c.value for c in candidates(CONFIG, TuneSpec(precision=True))
               if c.knob == "amp_dtype"]
        if gain > 1:
            assert notes == [] and "largest single-knob gain" in hint[0] and \
                amp == ["bfloat16"], (notes, amp)
        else:
            assert notes and "bfloat16 autocast not tried" in notes[0] and "0.58x" in notes[0]
            assert "would not pay here" in hint[0] and amp == [], (hint, amp)
    gpu = CONFIG.replace(device="cuda")  # a GPU computes it: no probe, the hint as before
    assert precision_notes(gpu, TuneSpec(precision=True)) == []
    assert "largest single-knob gain" in precision_notes(gpu, TuneSpec(precision=False))[0]


def test_the_bfloat16_probe_measures_this_cpu_once():
    """A real measurement: a positive finite ratio, taken once a process."""
    from autotune.env import bf16_matmul_gain

    bf16_matmul_gain.cache_clear()
    gain = bf16_matmul_gain()
    assert 0 < gain < float("inf") and bf16_matmul_gain() is gain


def test_a_precision_candidate_is_checked_and_built_once_however_many_epochs_its_pairs_span(
        tiny_synthetic, monkeypatch):
    """The numerics check comes before a candidate's first window, once: one whose
    pairs go on in the next epochs is not checked again, which would cost a check an
    epoch and, at weights that have moved on, could refuse it after its pairs were
    paid for. Its pipeline is kept across the epoch's end, not built again (a build
    an epoch), and ended with the run."""
    from autotune.tuning import _run

    checks, builds, epochs = [], [], set()
    real_check, real_build = _run.numerics_check, TunedRun._build
    monkeypatch.setattr(_run, "numerics_check", lambda *a: checks.append(1) or real_check(*a))

    def build(self, config, *args):
        builds.append(config.feature_dtype)
        return real_build(self, config, *args)

    monkeypatch.setattr(TunedRun, "_build", build)
    # kept (a busy machine's ratios can call it faster), it would remake the queue
    # around itself, and the next precision candidate would be checked and built too
    monkeypatch.setattr(_run, "candidates", lambda config, spec, topology=None, masks=True: [])
    # no verdict before 6 pairs (a busy machine's ratios could decide it within the
    # first epoch): its pairs span epochs, 2 an epoch here
    real_verdict = TunedRun._verdict
    monkeypatch.setattr(TunedRun, "_verdict", lambda self, tried: (
        ("", "") if len(tried.ratios) < 6 else real_verdict(self, tried)))
    queue = [Change.of(CONFIG, "feature_dtype", "bfloat16")]
    with TunedRun(CONFIG, tiny_synthetic, TuneSpec(share=1.0, window_steps=4, pairs=30,
                                                   precision=True),
                  epochs=4, num_classes=4, queue=queue,
                  on_window=lambda event, log: event.change and epochs.add(event.epoch)) as run:
        fit(run, tiny_synthetic, TrainSpec(epochs=4))
    assert len(epochs) >= 2, f"its windows stayed in epoch {epochs}: nothing resumed"
    assert len(checks) == 1, f"checked {len(checks)} times over {len(epochs)} epochs"
    assert builds.count("bfloat16") == 1, f"built {builds.count('bfloat16')} times"
    assert run._candidate is None, "the kept candidate's pipeline outlived the run"


class _UsersNet(torch.nn.Module):
    """A user's own model: two of PyG's SAGEConv layers (docs/python-api.md's)."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int) -> None:
        from torch_geometric.nn import SAGEConv

        super().__init__()
        self.conv1, self.conv2 = SAGEConv(in_channels, hidden), SAGEConv(hidden, out_channels)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


@pytest.mark.parametrize("features", ["float32", "bfloat16"])
def test_a_users_pyg_layers_aggregate_sparse_under_bfloat16(tiny_synthetic, features):
    """PyG's SAGEConv hands the adjacency to torch.sparse as it is, which refuses a
    float32 adjacency beside a bfloat16 input (the second layer's, under autocast):
    where a candidate lowers a dtype the pipeline's adjacency takes its input's
    dtype, the layers give what scatter aggregation gives within bfloat16's rounding,
    and the numerics check of such a candidate on the user's model runs (it could
    not) and passes. Under float32 the adjacency is torch's own."""
    from torch import Tensor

    from autotune.pipeline._build import sparse_adjacency
    from autotune.pipeline._models import FollowingAdjacency

    torch.manual_seed(0)
    model = _UsersNet(tiny_synthetic.num_features, 16, 4)
    incumbent = build(CONFIG, tiny_synthetic, model, num_classes=4)
    sparse = build(CONFIG.replace(aggregation="sparse", amp_dtype="bfloat16",
                                  feature_dtype=features), tiny_synthetic, model,
                   num_classes=4, optimizer=incumbent.optimizer)
    batch = next(iter(incumbent.loader))
    adj = sparse.edges(batch)
    assert isinstance(adj, FollowingAdjacency) and adj.layout == torch.sparse_csr
    with sparse.autocast(), torch.no_grad():
        ours, theirs = model(batch.x, adj), model(batch.x, batch.edge_index)
        with pytest.raises(RuntimeError, match="scalar type"):
            model(batch.x, sparse_adjacency(batch.edge_index, batch.num_nodes))  # torch's
    assert type(ours) is Tensor and ours.dtype == theirs.dtype == torch.bfloat16
    cosine = torch.nn.functional.cosine_similarity(ours.float().flatten(),
                                                   theirs.float().flatten(), dim=0)
    assert float(cosine) > 0.999
    assert numerics_check(incumbent, sparse, [batch]) == ""
    plain = build(CONFIG.replace(aggregation="sparse"), tiny_synthetic, model, num_classes=4,
                  optimizer=incumbent.optimizer)
    assert type(plain.edges(batch)) is Tensor


@pytest.mark.parametrize("amp, rel", [("float32", 1e-5), ("bfloat16", 0.02)])
def test_sum_aggregation_runs_sparse_in_bfloat16_on_a_cpu(tiny_synthetic, amp, rel):
    """GIN sums its neighbours with torch.sparse's plain product, whose CPU kernel
    takes float32 and float64 only and which autocast lowers to bfloat16: under
    bfloat16 autocast the adjacency runs it as a sum reduction (NotImplementedError
    before); the loss is scatter aggregation's, within float32's tolerance or
    bfloat16's rounding."""
    losses = []
    for aggregation in ("scatter", "sparse"):
        torch.manual_seed(0)
        pipe = build(CONFIG.replace(model="gin", aggregation=aggregation, amp_dtype=amp),
                     tiny_synthetic, num_classes=4)
        batch = next(iter(pipe.loader))
        with pipe.activate():
            losses.append(float(pipe.train_step(batch)))
    assert losses[1] == pytest.approx(losses[0], rel=rel)
    from autotune.pipeline._models import _plain_product_runs

    x = torch.ones(2, 2)  # the plain product is left alone where it runs
    assert _plain_product_runs(x) and not _plain_product_runs(x.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not _plain_product_runs(x)
