"""The paired confirmation (``--confirm-by pairs``, a CPU's default): the baseline and
the candidates in one trial process, in short alternating windows, each candidate's
pairs decided by the comparison engine. The pair logic runs against scripted windows
(what is asserted is the rule, not this machine's noise); one real search checks the
whole path, from the trial process to the front."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import time

import optuna
import pytest
import yaml
from _helpers import cli

from autotune.compare import Comparison, Rule
from autotune.specs import MeasureSpec
from autotune.study import _window_length as _lengths
from autotune.study._front import front_rows
from autotune.study._paired import confirmed
from autotune.study._records import records
from autotune.trial import _pairs
from autotune.trial._pairs import Candidate, Side, window_steps

from test_paired import TRUE  # noqa: E402  (the fake machine's true rates)


def test_a_window_holds_whole_blocks_and_whole_short_epochs():
    assert window_steps(0.5, 0.05, 2) == 10  # 0.5 s at 50 ms a step
    assert window_steps(0.5, 0.05, 2, epoch_steps=4) == 12  # three whole epochs
    assert window_steps(0.5, 0.05, 2, epoch_steps=40) == 10  # an epoch longer than it
    assert window_steps(0.5, 1.0, 3) == 12  # four blocks at least, of a step per worker


def test_a_pairs_inner_halves_are_the_two_halves_that_ran_next_to_each_other():
    assert _pairs.halves([[10, 1.0], [99, 1.0], [20, 1.0]]) == (10.0, 20.0)  # middle left out
    assert _pairs.halves([[10, 1.0]]) is None
    ref, own = {"halves": (10.0, 20.0)}, {"halves": (30.0, 40.0)}
    assert _pairs.inner_ratio(ref, own, ref_first=True) == 30.0 / 20.0
    assert _pairs.inner_ratio(ref, own, ref_first=False) == 40.0 / 10.0
    assert _pairs.inner_ratio({"halves": None}, own, ref_first=True) is None


class _Stepper:
    def __init__(self, workers: int) -> None:
        self.pipe = type("P", (), {"config": type("C", (), {"num_workers": workers})()})()


def _side(index: int) -> Side:
    return Side(index, _Stepper(0), 4, 1, lambda: [])


def _scripted(monkeypatch, rates: dict[int, list[float]], busy: dict[int, list[bool]]):
    """timed_window's stand-in: each config's windows give these rates (and loads) in
    turn; returns the order the configs were measured in."""
    order = []

    def window(side, others, spec):
        order.append(side.index)
        disturbed = busy.get(side.index, [])
        out = {"config": side.index, "rate": rates[side.index].pop(0), "precision": 0.01,
               "busy": disturbed.pop(0) if disturbed else False, "seconds": 0.5,
               "fixed_s": 0.1, "load": {"top": [[4321, "stress", 1.0]], "share": 0.5,
                                        "cores": 2}}
        side.windows.append(out)
        return out

    monkeypatch.setattr(_pairs, "timed_window", window)
    return order


def test_pairs_alternate_abba_and_stop_once_the_engine_decides(monkeypatch):
    rates = {0: [100.0] * 40, 1: [150.0, 151.0, 149.0, 150.5, 150.0] * 8}
    order = _scripted(monkeypatch, rates, {})
    candidate = Candidate(_side(1), Comparison(Rule(precision=0.10)))
    ended = _pairs.run_pairs(_side(0), [candidate], MeasureSpec(), _pairs.PairSpec())
    assert ended == "decided" and candidate.stopped == "decided"
    decision = candidate.comparison.decision()
    assert decision.verdict == "faster" and decision.pairs == 4  # the rule's least
    assert order == [0, 1, 1, 0, 0, 1, 1, 0]  # A B, B A, A B, B A


def test_two_candidates_share_the_references_window_each_alternating_its_side(monkeypatch):
    """Two candidates paired in a round share one window of the reference, one just
    before it and one just after, swapping sides each round (ABBA for each): 12
    windows for their 4 pairs each, not 16. A shared pair costs its own window and
    half the reference's. A shared pair disturbed on one side only is measured again
    alone; the other candidate's, disturbed on both, is kept."""
    rates = {0: [100.0] * 20, 1: [150.0, 151.0, 149.0, 150.5] * 5,
             2: [149.0, 150.0, 151.0, 150.2] * 5}
    order = _scripted(monkeypatch, rates, {})
    one, two = (Candidate(_side(i), Comparison(Rule(precision=0.10))) for i in (1, 2))
    _pairs.run_pairs(_side(0), [one, two], MeasureSpec(), _pairs.PairSpec())
    assert one.stopped == two.stopped == "decided"
    assert [c.comparison.pairs for c in (one, two)] == [4, 4]
    assert order == [1, 0, 2, 2, 0, 1] * 2
    assert [p["ref_first"] for p in one.pairs] == [False, True] * 2
    assert [p["ref_first"] for p in two.pairs] == [True, False] * 2
    assert one.comparison.ratios == [r / 100.0 for r in (150.0, 151.0, 149.0, 150.5)]
    assert two.comparison.ratios == [r / 100.0 for r in (149.0, 150.0, 151.0, 150.2)]
    assert all(p["seconds"] == pytest.approx(0.6 + 0.3) for p in one.pairs + two.pairs)

    # the reference's window and #2's disturbed, #1's not: #1's pair is measured again
    busy = {0: [True, False], 1: [False, False], 2: [True]}
    rates = {0: [50.0, 100.0] + [100.0] * 20, 1: [150.0] * 20, 2: [60.0] + [120.0] * 20}
    order = _scripted(monkeypatch, rates, busy)
    one, two = (Candidate(_side(i), Comparison(Rule(min_pairs=2, max_pairs=2))) for i in (1, 2))
    _pairs.run_pairs(_side(0), [one, two], MeasureSpec(busy_retries=2), _pairs.PairSpec())
    assert order[:5] == [1, 0, 2, 1, 0]  # the shared round, then #1's again alone
    assert one.redone == 1 and one.busy_pairs == 0 and one.comparison.ratios == [1.5, 1.5]
    assert two.redone == 0 and two.busy_pairs == 1 and two.comparison.ratios == [1.2, 1.2]
    assert one.pairs[0]["seconds"] == pytest.approx(0.6 + 0.3 + 0.6 + 0.6)  # the try dropped too


def test_a_candidate_about_as_fast_as_the_reference_stops_once_precise_and_placed(
        monkeypatch):
    """The confirmation's rule (``pairs_rule``): a candidate at about 0.98x stops once
    its interval is within the precision and places it, with the precision as the
    margin (as the front places two configs): tied, or not faster. Not before it is
    precise (the wider series would be "not faster" at a 10% margin after 4 pairs, at
    ±12%), and no later: not paired on until its interval lies within 2% of 1."""
    from autotune.study._confirm import pairs_rule

    def pairs_of(rule: Rule, ratios: list[float]) -> Candidate:
        _scripted(monkeypatch, {0: [100.0] * 120, 1: [100.0 * r for r in ratios * 15]}, {})
        candidate = Candidate(_side(1), Comparison(rule))
        _pairs.run_pairs(_side(0), [candidate], MeasureSpec(), _pairs.PairSpec())
        return candidate

    for ratios, verdict, pairs in (([0.95, 1.01, 0.97, 0.99], "tied", 4),
                                   ([0.93, 1.03, 0.96, 1.0], "not faster", 5)):
        placed = pairs_of(pairs_rule(0.10), ratios)
        decision = placed.comparison.decision()
        assert placed.stopped == "decided" and placed.to_dict()["verdict"] == verdict
        assert decision.half_width <= 0.10 and decision.pairs == pairs, decision
        unplaced = pairs_of(dataclasses.replace(pairs_rule(0.10), precision=None), ratios)
        assert unplaced.comparison.pairs > decision.pairs, unplaced.comparison.decision()


def test_a_pair_disturbed_on_one_side_is_measured_again_and_one_on_both_is_kept(monkeypatch):
    rates = {0: [100.0] * 10, 1: [50.0, 120.0, 120.0, 120.0, 120.0, 120.0]}
    # pair 1: the candidate's window alone disturbed (its 50 would be a false "slower"),
    # then measured again quietly; pair 2: both windows disturbed: kept, it cancels
    busy = {0: [False, False, True, False], 1: [True, False, True, False]}
    _scripted(monkeypatch, rates, busy)
    candidate = Candidate(_side(1), Comparison(Rule(min_pairs=3, max_pairs=3)))
    _pairs.run_pairs(_side(0), [candidate], MeasureSpec(busy_retries=2), _pairs.PairSpec())
    assert candidate.redone == 1 and candidate.busy_pairs == 1
    assert candidate.comparison.ratios == [1.2, 1.2, 1.2]
    # whose load, for the report: the dropped window's and both of the kept pair's
    assert len(candidate.to_dict()["taken_by"]) == 3


def test_racing_drops_a_candidate_known_slower_than_another(monkeypatch):
    rates = {0: [100.0] * 60, 1: [200.0, 202.0, 198.0] * 20, 2: [120.0, 80.0, 160.0] * 20}
    _scripted(monkeypatch, rates, {})
    fast = Candidate(_side(1), Comparison(Rule(precision=0.01, max_pairs=20)))
    slow = Candidate(_side(2), Comparison(Rule(precision=0.01, max_pairs=20)))
    _pairs.run_pairs(_side(0), [fast, slow], MeasureSpec(), _pairs.PairSpec())
    assert slow.stopped == "slower" and slow.slower_than == 1
    assert slow.comparison.pairs < 20


def test_racing_reads_two_candidates_quotients_where_a_rounds_drift_moves_both(monkeypatch):
    """Each round moves both candidates' ratios alike (a neighbour that slows them
    more than the reference), 0.7x to 1.4x: their intervals against the reference
    stay wide and overlap, but the quotients of their ratios in the same rounds are
    1.25 each, and the slower is dropped at the rule's least pairs."""
    drift = [1.0, 0.7, 1.4, 0.8, 1.3, 0.75, 1.2, 0.9]
    rates = {0: [100.0] * 16, 1: [150.0 * d for d in drift], 2: [120.0 * d for d in drift]}
    _scripted(monkeypatch, rates, {})
    fast, slow = (Candidate(_side(i), Comparison(Rule(precision=0.10, max_pairs=8)))
                  for i in (1, 2))
    _pairs.run_pairs(_side(0), [fast, slow], MeasureSpec(), _pairs.PairSpec())
    assert slow.stopped == "slower" and slow.slower_than == 1
    assert slow.comparison.pairs == 4  # the rule's least
    low_fast, _ = fast.comparison.interval()
    _, high_slow = slow.comparison.interval()
    assert high_slow > low_fast  # the intervals alone would not have told them apart
    assert _pairs.known_faster(fast, slow) and not _pairs.known_faster(slow, fast)


def test_racing_reads_the_quotients_of_two_candidates_never_paired_in_one_round():
    """A focus that pairs one candidate a round, alternating between two 1.25x apart,
    their pairs spreading about 9% each: after 8 pairs each their intervals still
    overlap, and they share no round; their pairs matched in order tell the faster."""
    noise = {1: [1.1, 0.9, 1.0, 1.12, 0.89, 1.0, 1.06, 0.94],
             2: [0.9, 1.1, 1.12, 0.9, 1.0, 1.04, 0.92, 1.04]}
    fast, slow = (Candidate(_side(i), Comparison(Rule(precision=0.10))) for i in (1, 2))
    for k in range(16):
        c, speedup = (fast, 2.0) if k % 2 == 0 else (slow, 1.6)
        ratio = speedup * noise[c.side.index][k // 2]
        c.pairs.append({"round": k, "ratio": ratio, "half_width": None})
        c.comparison.add(ratio)
    (_, high_slow), (low_fast, _) = slow.comparison.interval(), fast.comparison.interval()
    assert high_slow > low_fast  # the intervals alone do not tell them apart
    assert _pairs.known_faster(fast, slow) and not _pairs.known_faster(slow, fast)
    _pairs._race([fast, slow])
    assert slow.stopped == "slower" and slow.slower_than == 1 and not fast.stopped


def test_pairs_stop_at_their_time_limit(monkeypatch):
    rates = {0: [100.0] * 40, 1: [100.0, 130.0, 80.0, 120.0] * 10}
    _scripted(monkeypatch, rates, {})
    candidate = Candidate(_side(1), Comparison(Rule(precision=0.01)))
    ended = _pairs.run_pairs(_side(0), [candidate], MeasureSpec(), _pairs.PairSpec(max_s=0.0))
    assert ended == "max-seconds" and candidate.stopped == "time"


def test_where_time_cannot_confirm_every_candidate_it_goes_to_one_that_it_can(monkeypatch):
    """Two candidates a pair's noise apart, 52 s of pairs in windows of 1 s (3 s a
    round where the two share the reference's window, 2 s a pair alone): confirming
    both to ±10% would take about 37 pairs, so once their spread is known (pooled
    over both, from five pairs each) the pairs go to the one whose own fit, the
    faster one where both would: it is confirmed. Paired in turn to the end (as
    without the rule), the faster one is not: the slower is confirmed instead."""
    import types

    def run(rule_on: bool):
        clock = [0.0]
        wiggle = [0.80, 1.22, 0.92, 1.10, 1.0, 0.86, 1.15, 0.95, 1.05, 1.0]
        rates = {0: [100.0] * 400, 1: [200.0 * w for w in wiggle] * 20,
                 2: [190.0 * w for w in reversed(wiggle)] * 20}
        _scripted(monkeypatch, rates, {})
        scripted = _pairs.timed_window

        def window(side, others, spec):  # a second of the machine's time a window
            clock[0] += 1.0
            return {**scripted(side, others, spec), "seconds": 0.9, "fixed_s": 0.1}

        monkeypatch.setattr(_pairs, "timed_window", window)
        monkeypatch.setattr(_pairs, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
        if not rule_on:
            monkeypatch.setattr(_pairs, "focus", lambda open_, *_: open_)
        both = [Candidate(_side(i), Comparison(Rule(precision=0.10, max_pairs=60)))
                for i in (1, 2)]
        ended = _pairs.run_pairs(_side(0), both, MeasureSpec(), _pairs.PairSpec(max_s=52.0))
        return ended, [(c.stopped, c.comparison.decision()) for c in both]

    ended, (one, two) = run(rule_on=True)
    assert ended == "max-seconds" and one[0] == "decided" and one[1].verdict == "faster"
    assert one[1].half_width <= 0.10 and two[0] == "time"
    assert two[1].pairs < one[1].pairs  # its pairs stopped once the time went to #1
    ended, results = run(rule_on=False)
    assert ended == "max-seconds" and [stopped for stopped, _ in results] == ["time", "decided"]


def test_the_focus_pairs_everyone_while_their_needs_fit_or_their_spread_is_unknown():
    def candidate(ratios):
        return Candidate(_side(1), Comparison(Rule(precision=0.10), ratios=ratios))

    noisy = [1.6, 2.4, 1.8, 2.2, 2.0, 1.7, 2.3, 1.9]  # 8 pairs: its spread known
    early = candidate(noisy[:3])  # before the rule's least pairs
    fast, slow = candidate(noisy), candidate([r * 0.9 for r in noisy])
    assert _pairs.focus([fast, early], left_s=1.0, pair_s=2.0) == [fast, early]
    assert _pairs.focus([fast, slow], left_s=1e6, pair_s=2.0) == [fast, slow]
    assert _pairs.focus([slow, fast], left_s=1.0, pair_s=2.0) == [fast]  # neither fits
    need = fast.comparison.pairs_to_precision() - fast.comparison.pairs
    assert _pairs.focus([slow, fast], left_s=need * 2.0, pair_s=2.0) == [fast]
    assert _pairs.focus([fast], left_s=0.0, pair_s=2.0) == [fast]


def test_with_many_candidates_the_focus_reads_their_pairs_spread_pooled_before_their_own():
    """Five candidates beside a busy machine, four pairs each (before twice the rule's
    least, where each one's own spread is too rough): their pairs pooled (15 degrees
    of freedom) already show that the time left cannot confirm them all, so it goes
    to the fastest; where it can, or where the pairs are too few even pooled,
    everyone is paired."""
    wiggle = [0.85, 1.18, 0.9, 1.12]  # a busy machine's pairs: spread about 0.16

    def candidate(speedup, pairs=4):
        return Candidate(_side(1), Comparison(Rule(precision=0.10),
                                              ratios=[speedup * w for w in wiggle[:pairs]]))

    five = [candidate(s) for s in (1.6, 2.2, 1.7, 1.3, 1.9)]
    assert [c.comparison.pairs_to_precision() for c in five] == [None] * 5
    assert _pairs.pooled_noise(five) == pytest.approx(0.161, abs=0.001)
    assert _pairs.focus(five, left_s=45.0, pair_s=2.3) == [five[1]]
    assert _pairs.focus(five, left_s=1e4, pair_s=2.3) == five
    two = [candidate(2.2, pairs=3), candidate(1.9, pairs=3)]  # 4 degrees of freedom
    assert _pairs.pooled_noise(two) is None
    assert _pairs.focus(two, left_s=1.0, pair_s=2.3) == two


def test_with_this_machines_spread_known_the_focus_acts_from_the_first_pair():
    """Five configs beside a training, one pair each: too few for their own spreads or
    their pooled one, but this machine's record knows how its pairs spread at this
    length, so the time that cannot confirm them all goes to the fastest at once,
    not after the rule's least pairs of each; without the record, all five are paired
    until their pooled spread is known."""
    def candidate(speedup):
        return Candidate(_side(1), Comparison(Rule(precision=0.10), ratios=[speedup]))

    five = [candidate(s) for s in (1.6, 2.2, 1.7, 1.3, 1.9)]
    assert _pairs.pooled_noise(five) is None
    assert _pairs.focus(five, left_s=60.0, pair_s=3.1) == five  # unknown: all
    assert _pairs.focus(five, left_s=60.0, pair_s=3.1, noise=0.13) == [five[1]]
    assert _pairs.focus(five, left_s=1e4, pair_s=3.1, noise=0.13) == five  # all fit
    quiet = five[0].comparison.pairs_to_precision(0.065, least=1)
    assert quiet < five[0].comparison.pairs_to_precision(0.13, least=1)
    assert _pairs.focus(five, left_s=5 * quiet * 2.0, pair_s=2.0, noise=0.065) == five


def test_the_focus_pairs_again_a_config_whose_few_pairs_could_still_make_it_the_fastest():
    """Beside a training on the EPYC with avx512_bf16 the focus gave a confirmation's
    time to a float32 config read at 1.72x over 17 pairs while the bfloat16 one had 5
    when the time ran out, at 2.19x; a follow-up confirmed it. A config paired once
    whose best case (at the pooled spread) is above the leader's is paired next; one
    whose best case is under it is not, nor is the same reading over as many pairs as
    the leader's."""
    from autotune.compare import Comparison, Rule
    from autotune.trial._pairs import Candidate

    wiggle = [1.0, 1.12, 0.9, 1.08, 0.92, 1.0, 1.1, 0.91, 1.05, 0.95]  # log sd 0.082

    def candidate(ratios):
        return Candidate(_side(1), Comparison(Rule(precision=0.10), ratios=ratios))

    leader = candidate([1.72 * w for w in wiggle])
    unlucky = candidate([1.6])  # one pair, read low: the next may show 2.2x
    slow = candidate([1.1])  # one pair, far under: its best case is too
    three = [leader, unlucky, slow]
    spread = _pairs.pooled_noise(three)
    assert spread == pytest.approx(0.082, abs=0.001)
    assert slow.comparison.best_case(spread) < leader.comparison.best_case(spread) < \
        unlucky.comparison.best_case(spread)
    assert _pairs.focus(three, left_s=60.0, pair_s=2.7, noise=0.105) == [unlucky]
    unlucky.comparison.add(2.2)  # the next pair shows it: still first
    assert _pairs.focus(three, left_s=60.0, pair_s=2.7, noise=0.105) == [unlucky]
    sure = candidate([1.6 * w for w in wiggle])  # that first reading, over ten pairs
    assert _pairs.focus([leader, sure, slow], left_s=60.0, pair_s=5.0,
                        noise=0.105) == [leader]


def test_the_pairs_read_the_records_spread_at_the_length_they_run_in(monkeypatch):
    """The spread the focus is handed is the record's at the pairs' length: the
    spec's, then, once a try has gone back, the known length's."""
    rates = {0: [100.0] * 40, 1: [200.0, 230.0, 180.0, 220.0] * 5,
             2: [150.0, 180.0, 130.0, 170.0] * 5}
    _scripted(monkeypatch, rates, {})
    real, seen = _pairs.focus, []

    def focus(open_, left_s, pair_s, noise=None):
        seen.append(noise)
        return real(open_, left_s, pair_s, noise)

    monkeypatch.setattr(_pairs, "focus", focus)
    monkeypatch.setattr(_pairs, "went_back", lambda candidates, pairs: len(seen) == 2)
    both = [Candidate(_side(i), Comparison(Rule(precision=0.01, max_pairs=4))) for i in (1, 2)]
    _pairs.run_pairs(_side(0), both, MeasureSpec(), _pairs.PairSpec(
        window_s=0.5, noise=0.17, back_to=_pairs.Known(1.0, 0.126, 25, 3.1)))
    assert seen[:2] == [0.17, 0.17] and set(seen[2:]) == {0.126}, seen


def test_short_time_goes_to_a_config_off_the_front_only_where_it_is_the_fastest():
    """A contender (off the search's front, paired to tell it from the fastest)
    confirmed slower would be no default, so the time the fastest's need does not
    fit in stays with the fastest rather than going to it; a front config that fits
    gets it, and so does a contender that reads fastest."""
    def candidate(ratios, off_front=False):
        return Candidate(_side(1), Comparison(Rule(precision=0.10), ratios=ratios),
                         off_front=off_front)

    noisy = [1.6, 2.4, 1.8, 2.2, 2.0, 1.7, 2.3, 1.9]  # about 2x, short of its precision
    steady = [1.70, 1.80, 1.74, 1.77, 1.72, 1.78, 1.75, 1.76]  # within its precision
    fast, on_front, off = candidate(noisy), candidate(steady), candidate(steady, True)
    assert on_front.comparison.pairs_to_precision() == on_front.comparison.pairs
    assert fast.comparison.pairs_to_precision() > fast.comparison.pairs
    assert _pairs.focus([fast, on_front], left_s=1.0, pair_s=2.0) == [on_front]
    assert _pairs.focus([fast, off], left_s=1.0, pair_s=2.0) == [fast]
    faster_off = candidate([r * 1.3 for r in steady], True)
    assert _pairs.focus([fast, faster_off], left_s=1.0, pair_s=2.0) == [faster_off]


def test_a_pair_spec_keeps_its_configs_off_the_front_through_the_trial_process():
    spec = _pairs.PairSpec(off_front=(1, 3), noise=0.13)
    assert _pairs.PairSpec.from_dict(spec.to_dict()).off_front == (1, 3)
    assert _pairs.PairSpec.from_dict(spec.to_dict()).noise == 0.13
    assert _pairs.PairSpec.from_dict({**spec.to_dict(), "noise": None}).noise is None
    old = {k: v for k, v in spec.to_dict().items() if k != "off_front"}
    assert _pairs.PairSpec.from_dict(old).off_front == ()


def test_a_real_search_confirms_its_front_in_one_paired_process(tmp_path):
    """A real search on this CPU: the confirmation is one trial process (not this
    one) holding the baseline and the candidates; each config's figure is stored,
    the candidates' with their pairs, and the front's confirmed figures are the
    engine's reading of those pairs."""
    proc = cli("search", "--dataset", "synthetic", "--scale", "0.004", "--steps", "3",
               "--warmup", "1", "--warmup-time", "0", "--max-seconds", "0.5", "--space", "quick",
               "--n-trials", "4", "--confirm", "1", "--no-racing", "--confirm-precision", "30%",
               "--root", str(tmp_path / "data"), "--studies-dir", str(tmp_path / "studies"),
               "--study-name", "p")
    assert proc.returncode == 0, proc.stderr
    assert "confirmation: pairs of short windows in one process of #0 (baseline)" in proc.stdout
    assert "[paired] of #0" in proc.stdout
    study = optuna.load_study(study_name="p",
                              storage=f"sqlite:///{tmp_path / 'studies' / 'p.db'}")
    trials = records(study)
    stored = [t for t in trials if t.confirm is not None]
    assert stored and all("pairs" in t.confirm and t.complete for t in stored)
    runs = {t.confirm["run"] for t in stored}
    for run in runs:  # one paired trial each: one folder, one figure per config
        mine = [t for t in stored if t.confirm["run"] == run]
        assert len({os.path.dirname(t.trial_dir) for t in mine}) == 1
        assert len({t.confirm["of"] for t in mine}) == len(mine) >= 2
    figures = confirmed(trials)
    candidates = [t for t in stored if t.confirm["pairs"].get("ratios")]
    assert candidates
    for t in candidates:
        pairs = t.confirm["pairs"]
        assert len(pairs["ratios"]) >= 1 and all(r > 0 for r in pairs["ratios"])
        c = figures[t.confirm["of"]]
        assert c.unit == "pair" and c.rounds == len(pairs["ratios"])
        assert c.ratios == tuple(pairs["ratios"])
        # each pair's round, rising: where two candidates' quotients are read
        assert len(pairs["pair_rounds"]) == len(pairs["ratios"]) and c.at == tuple(
            pairs["pair_rounds"]) == tuple(sorted(set(pairs["pair_rounds"])))
    pareto = yaml.safe_load((tmp_path / "studies" / "p" / "pareto.yaml").read_text())
    for row in pareto["front"]:
        if row["trial"] in figures and row.get("confirmed"):
            assert row["confirmed"]["unit"] == "pair"
            assert row["confirmed"]["rounds"] == figures[row["trial"]].rounds
    # the real pairs' spread and pace, recorded for this machine's next confirmation: an
    # entry a paired run (a second run, where the knee moved, adds its own)
    added = _lengths.read(_lengths.history_path(tmp_path / "studies"))
    assert 1 <= len(added) <= len(runs), (added, runs)
    assert all(a["window_s"] == 0.5 and a["pair_s"] > 0.5 for a in added), added


class PairedFake:
    """``run_trial``'s stand-in for both kinds of trial: a search trial as
    test_paired's FakeMachine measures it, and a paired trial whose every candidate's
    pairs are its true rate over the baseline's, with a spread of ±2%."""

    SPREAD = (1.02, 0.98, 1.01, 0.99)

    def __init__(self, machine, stop_at_pairs: bool = False,
                 ran_out: dict | None = None, slowed: float = 1.0) -> None:
        self.machine, self.stop_at_pairs, self.paired = machine, stop_at_pairs, 0
        # batch size -> its ratios' factors in the first paired trial, whose time ran out
        self.ran_out = dict(ran_out or {})
        # the share of their rates the first paired trial's windows read, the
        # baseline's and the candidates' alike (the hypervisor took the cores)
        self.slowed = slowed
        self.specs: list = []  # the PairSpecs asked for
        self.envs: list = []  # the environment each paired trial's process was given

    def __call__(self, config, **kw):
        from autotune.trial import TrialResult

        pairs = kw.get("pairs")
        if pairs is None:
            return self.machine(config, **kw)
        self.paired += 1
        self.specs.append(pairs)
        self.envs.append(kw.get("env"))
        if self.stop_at_pairs and self.paired == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        base = TRUE[config.batch_size][0]
        slowed = self.slowed if self.paired == 1 else 1.0
        windows = [[{"rate": base * slowed, "seeds": base * slowed, "seconds": 1.0}
                    for _ in self.SPREAD]]
        candidates = []
        for i, other in enumerate(pairs.candidates, start=1):
            rate = TRUE[other.batch_size][0]
            spread = self.ran_out.pop(other.batch_size, None) if self.paired == 1 else None
            factors = spread or self.SPREAD
            windows.append([{"rate": rate * f * slowed, "seeds": rate * f * slowed,
                             "seconds": 1.0} for f in factors])
            ratios = [rate * f / base for f in factors]
            candidates.append({"config": i, "ratios": ratios,
                               "half_widths": [0.01] * len(factors),
                               "verdict": "undecided" if spread else
                               "faster" if rate > base else "not faster",
                               "stopped": "time" if spread else "decided",
                               "slower_than": None, "busy_pairs": 0, "redone": 0,
                               "taken_by": [], "pairs": [
                                   {"ratio": r, "window_s": pairs.window_s, "seconds": 2.0,
                                    "round": k} for k, r in enumerate(ratios)]})
        return TrialResult(status="ok", config=config,
                           phases_s={"startup": 0.0, "warmup": 1.0,
                                     "measure_total": 1.0 + 2 * len(self.SPREAD)},
                           pairs={"stopped": "decided", "candidates": candidates,
                                  "windows": windows, "window_steps": [4] * len(windows)})


def test_a_search_stopped_by_sigterm_in_its_paired_confirmation_finishes_it_when_run_again(
        tmp_path, monkeypatch):
    """SIGTERM during the paired trial: the run is left stopped, the interrupt says so;
    the same search run again measures the paired trial (all it lacked) and finishes
    the run, each candidate confirmed in its pairs; the export says pairs."""
    from test_paired import FakeMachine, _search

    from autotune.cli._main import Terminated, _terminated
    from autotune.study import interrupted_note
    from autotune.study._confirm import unfinished

    outer = signal.signal(signal.SIGTERM, _terminated)
    try:
        with pytest.raises(Terminated):
            _search(tmp_path, monkeypatch, PairedFake(FakeMachine(drift=0.0), True),
                    sizes=[640, 896, 1024], n_trials=3, confirm=2, study_name="s",
                    confirm_by="pairs")
    finally:
        signal.signal(signal.SIGTERM, outer)
    study = optuna.load_study(study_name="s",
                              storage=f"sqlite:///{tmp_path / 'studies' / 's.db'}")
    assert unfinished(study)["state"] == "stopped"
    assert interrupted_note(study).startswith(
        "the confirmation was stopped after 0 of its measurements")
    result, trials, s = _search(tmp_path, monkeypatch, PairedFake(FakeMachine(drift=0.0)),
                                sizes=[640, 896, 1024], n_trials=3, confirm=2, study_name="s",
                                confirm_by="pairs")
    assert [r["state"] for r in s.confirmations] == ["done"] and s.confirmations[0]["paired"]
    figures = confirmed(trials)
    asked = s.confirmations[0]["candidates"]
    assert set(asked) <= set(figures)
    for n in asked[1:]:
        c = figures[n]
        assert c.unit == "pair" and c.rounds == 4
        true = TRUE[trials[n].config.batch_size][0] / TRUE[1024][0]
        assert c.low <= true <= c.high and c.interval < 0.10
    fast = max(asked[1:], key=lambda n: figures[n].speedup)
    rows = {r.trial: r for r in front_rows(trials, s.baseline, s.budget_mib)}
    assert rows[fast].confirmation.startswith("confirmed in 4 pairs"), rows[fast].marks


@pytest.mark.parametrize("busy_before", [False, True])
@pytest.mark.parametrize("busy", [False, True])
def test_a_paired_confirmation_where_another_process_takes_the_cores_has_longer_windows(
        tmp_path, monkeypatch, busy, busy_before):
    """Where other processes take the cores in both looks as the confirmation starts
    (another training, or a burner that outlasts the trials), a short window's own
    noise grows: its windows are BUSY_WINDOW_S, its threads wait passively, and its
    line says why; on a quiet machine they stay WINDOW_S and spin, whatever the
    trials' were (``busy_before``: the search's own looks found the machine busy, so
    its trials ran passive)."""
    from test_paired import FakeMachine, _search_after_looks

    from autotune.trial import BUSY_WINDOW_S, WINDOW_S, Load

    def load(look: int) -> Load:  # the trainer takes half the cores, or nothing
        taken = busy_before if look <= (2 if busy_before else 1) else busy  # the search's
        return Load(cores=2, wall_s=0.25, others_s=0.25 * taken, share=0.5 * taken,
                    top=[[4242, "trainer", 0.25]] if taken else [])

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    fake = FakeMachine(drift=0.0, busy=lambda config, nth: busy_before)  # through the trials
    machine = PairedFake(fake)
    notes, looks = _search_after_looks(tmp_path, monkeypatch, machine, 3, load,
                                       sizes=[640, 896, 1024], racing=False, confirm=1,
                                       confirm_by="pairs")
    passive = {"OMP_WAIT_POLICY": "PASSIVE"}
    assert looks == (2 if busy_before else 1) + (2 if busy else 1)
    assert fake.envs == [passive if busy_before else {}] * 3, fake.envs
    assert [spec.window_s for spec in machine.specs] == [BUSY_WINDOW_S if busy else WINDOW_S]
    assert machine.envs == [passive if busy else {}], machine.envs
    line = next(n for n in notes if n.startswith("confirmation: pairs"))
    assert ("(1 s each, threads passive: the machine is busy)" in line) == busy, line
    # a busy machine's pairs are recorded as such: no guide to its quiet ones
    added, = _lengths.read(_lengths.history_path(tmp_path / "studies"))
    assert (added["window_s"], added["busy"]) == ((1.0, True) if busy else (0.5, False))


def _known(window_s: float, spread: float, dof: int, pair_s: float, age_s: float = 0.0,
           busy: bool = False) -> dict:
    """A record entry of a confirmation at ``window_s`` whose pairs spread so."""
    return {"window_s": window_s, "busy": busy, "dof": dof, "squares": spread ** 2 * dof,
            "pair_s": pair_s, "at": time.time() - age_s}


def test_a_machines_window_length_follows_its_earlier_pairs_quiet_or_busy():
    """Kalibera and Jones's dry run, one confirmation at a time. Quiet: 0.5 s until
    this machine's pairs are known, 1 s tried where 0.5-s pairs spread wide; busy:
    1 s, then 0.5 s tried; once both are known, the length that reaches a precision
    soonest (spread squared times a pair's seconds)."""
    from autotune.study._window_length import MIN_DOF, TRY_SPREAD, choose, known

    assert choose([]) == _lengths.Choice(0.5)
    assert choose([_known(0.5, 0.2, MIN_DOF - 1, 1.6)]) == _lengths.Choice(0.5)  # too few
    narrow = choose([_known(0.5, TRY_SPREAD - 0.01, 40, 1.6)])
    assert (narrow.window_s, narrow.why, narrow.back_to) == (0.5, "", None)
    assert narrow.noise == pytest.approx(TRY_SPREAD - 0.01)  # the focus reads it
    tried = choose([_known(0.5, 0.145, 20, 1.6), _known(0.5, 0.145, 20, 1.6)])
    assert tried.noise is None  # a try: its spread is what its pairs will show
    assert tried.window_s == 1.0 and tried.why.startswith("tried, this machine's pairs of "
                                                          "0.5 s: spread 0.145"), tried
    # the AMX Xeon's figures (pair-windows-amx.json): 1-s pairs reach ±10% sooner there
    noisy = [_known(0.5, 0.145, 40, 1.6), _known(1.0, 0.093, 30, 2.6)]
    assert choose(noisy).window_s == 1.0 and "soonest" in choose(noisy).why
    assert choose(noisy).noise == pytest.approx(0.093)
    # the AVX2-only EPYC's: 0.5-s ones do
    assert choose([_known(0.5, 0.082, 40, 1.6), _known(1.0, 0.102, 40, 2.7)]).window_s == 0.5
    old = _known(1.0, 0.093, 30, 2.6, age_s=_lengths.MAX_AGE_S + 1)  # not read: tried again
    assert choose([noisy[0], old]).why.startswith("tried")
    # a busy machine's are its own: 1 s first, then 0.5 s tried whatever the spread,
    # then the soonest (beside a training: the AVX2-only EPYC's 1 s, an AMX Xeon's 0.5 s)
    assert choose(noisy, busy=True) == _lengths.Choice(1.0, busy=True)  # quiet ones: not read
    busy = [_known(1.0, 0.104, 40, 2.8, busy=True)]
    assert choose(busy, busy=True).window_s == 0.5 and choose(busy, True).why.startswith(
        "tried, this machine's busy pairs of 1 s")
    assert choose(busy + [_known(0.5, 0.169, 40, 2.0, busy=True)], busy=True).window_s == 1.0
    assert choose([_known(1.0, 0.116, 40, 2.8, busy=True),
                   _known(0.5, 0.116, 40, 1.9, busy=True)], busy=True).window_s == 0.5
    pooled = known([_known(0.5, 0.1, 10, 1.0), _known(0.5, 0.2, 30, 2.0), _known(1.0, 1, 5, 1)],
                   0.5)
    assert pooled.dof == 40 and pooled.pair_s == pytest.approx(1.75)
    assert pooled.spread == pytest.approx(((0.01 * 10 + 0.04 * 30) / 40) ** 0.5)


def test_a_try_is_costlier_where_its_spread_and_pace_take_longer_beyond_the_f_test():
    """Pairs reach a precision in time spread squared times a pair's seconds; a try is
    called costlier where that ratio passes the F distribution's 95% quantile on both
    lengths' degrees of freedom, not where it is merely over 1."""
    from autotune.trial import Known, costlier

    known = Known(1.0, 0.114, 26, 2.7)  # the busy EPYC's 1-s pairs (2026-12-02)
    # its 0.5-s pairs: spread 0.203 at 1.8 s a pair, about 2.1 times the cost
    assert costlier(Known(0.5, 0.203, 20, 1.8), known)
    assert not costlier(Known(0.5, 0.203, 12, 1.8), known)  # too few to tell
    assert not costlier(Known(0.5, 0.116, 40, 1.9), Known(1.0, 0.116, 40, 2.8))  # cheaper
    # 1.3 times the cost over 40 degrees of freedom each: within the test's reach
    assert not costlier(Known(0.5, 0.14, 40, 1.8), Known(1.0, 0.1, 40, 2.7))
    assert costlier(Known(0.5, 0.14, 400, 1.8), Known(1.0, 0.1, 400, 2.7))
    assert not costlier(Known(0.5, 0.3, 10, 1.8), Known(1.0, 0.0, 10, 2.7))


def _lengths_run(monkeypatch, tried_factors: list[float]) -> Candidate:
    """One candidate paired in 0.5-s windows, a try where 1-s pairs are known (spread
    0.1, 2.2 s a pair): its windows at the try's steps wiggle by ``tried_factors``,
    those at 1 s by ±1%; a window takes its steps at 50 ms each."""
    def window(side, others, spec):
        long = side.steps == window_steps(1.0, 0.05, 2)
        wiggle = [1.01, 0.99] if long else tried_factors
        rate = 100.0 * (1.5 * wiggle[len(side.windows) % len(wiggle)] if side.index else 1)
        out = {"config": side.index, "rate": rate, "precision": 0.01, "busy": False,
               "seconds": 0.05 * side.steps, "fixed_s": 0.1, "load": {}}
        side.windows.append(out)
        return out

    monkeypatch.setattr(_pairs, "timed_window", window)
    sides = [_side(0), _side(1)]
    for side in sides:
        side.step_s = 0.05
        side.length(0.5)
    candidate = Candidate(sides[1], Comparison(Rule(precision=0.005, max_pairs=24)))
    spec = _pairs.PairSpec(window_s=0.5, back_to=_pairs.Known(1.0, 0.1, 40, 2.2))
    _pairs.run_pairs(sides[0], [candidate], MeasureSpec(), spec)
    return candidate


def test_a_try_of_another_window_length_goes_back_once_its_pairs_show_it_costlier(
        monkeypatch):
    """A try whose pairs spread about 0.3 at 1.2 s a pair, where 1-s ones are known at
    0.1 and 2.2 s (over three times the cost): back to 1 s after a few pairs, each pair
    saying its length; one whose pairs spread 0.1 too (cheaper) stays to the end."""
    costly = _lengths_run(monkeypatch, [1.35, 0.74, 1.3, 0.77])
    lengths = [p["window_s"] for p in costly.pairs]
    back = lengths.index(1.0)
    assert _pairs.BACK_MIN_DOF < back <= 12 and set(lengths[back:]) == {1.0}, lengths
    assert costly.side.steps == window_steps(1.0, 0.05, 2)
    assert costly.pairs[0]["seconds"] == pytest.approx(2 * (0.5 + 0.1))
    # what the focus takes a pair to cost: its length's, not the try's mixed in
    assert _pairs.pair_seconds([costly], 1.0) == pytest.approx(2 * (1.0 + 0.1))
    assert _pairs.pair_seconds([costly], 2.0) is None
    spec = _pairs.PairSpec(window_s=0.5, back_to=_pairs.Known(1.0, 0.1, 40, 2.2))
    tried, known = _pairs.back_from([costly], spec)  # what the trial reports of it
    assert (tried["window_s"], tried["dof"], known) == (0.5, back - 1, spec.back_to.to_dict())
    assert tried["spread"] > 0.25 and tried["pair_s"] == pytest.approx(1.2)
    cheap = _lengths_run(monkeypatch, [1.1, 0.9, 1.12, 0.91])
    assert {p["window_s"] for p in cheap.pairs} == {0.5} and len(cheap.pairs) == 24
    assert _pairs.back_from([cheap], spec) is None
    assert _pairs.PairSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_a_try_recorded_costlier_is_not_tried_again_and_one_not_yet_is():
    from autotune.study._window_length import choose

    busy = [_known(1.0, 0.114, 26, 2.7, busy=True)]
    again = choose(busy + [_known(0.5, 0.14, 10, 1.8, busy=True)], busy=True)
    assert again.window_s == 0.5 and again.back_to.window_s == 1.0
    assert again.back_to.spread == pytest.approx(0.114)
    kept = choose(busy + [_known(0.5, 0.203, 20, 1.8, busy=True)], busy=True)
    assert kept.window_s == 1.0 and kept.back_to is None
    assert kept.why.startswith("this machine's busy pairs of 0.5 s: spread 0.203, 1.8 s a "
                               "pair (20 degrees of freedom) were costlier than of 1 s"), kept


def test_the_paired_line_of_the_reference_says_where_a_try_went_back():
    from autotune.study._progress import paired_text

    tried, back = _pairs.Known(0.5, 0.203, 20, 1.8), _pairs.Known(1.0, 0.114, 26, 2.7)
    figure = {"rates": [1.0] * 50, "went_back": [tried.to_dict(), back.to_dict()]}
    assert paired_text(figure) == (
        "  reference, 50 windows; 0.5 s tried, back to 1 s: its pairs costlier than this "
        "machine's record (0.5 s: spread 0.203, 1.8 s a pair, 20 degrees of freedom; 1 s: "
        "spread 0.114, 2.7 s a pair, 26)")
    assert paired_text({"rates": [1.0] * 4}) == "  reference, 4 windows"


def test_how_far_two_windows_vary_is_the_least_spread_of_this_states_pairs(tmp_path):
    """What the contender rule widens the search's figures by: the least spread of the
    pairs of the state the search is in, at either length (None where none are known;
    for a search, then, or where the record cannot be read, a guess)."""
    from autotune.study._window_length import MAX_AGE_S, UNKNOWN_SPREAD, MachineRecord, \
        least_spread, record

    entries = [_known(0.5, 0.10, 30, 1.5), _known(1.0, 0.07, 30, 2.6),
               _known(1.0, 0.15, 20, 2.7, busy=True), _known(0.5, 0.03, 20, 1.5,
                                                            age_s=MAX_AGE_S + 1)]
    assert least_spread(entries) == pytest.approx(0.07)
    assert least_spread(entries, busy=True) == pytest.approx(0.15)
    assert least_spread([]) is None and least_spread(entries[:2], busy=True) is None
    # a try that went back after a few pairs counts only where no length is known
    short = _known(0.5, 0.03, 6, 1.4, busy=True)
    assert least_spread(entries + [short], busy=True) == pytest.approx(0.15)
    assert least_spread([short, _known(1.0, 0.15, 30, 2.7, busy=True)],
                        busy=True) == pytest.approx(0.15)
    assert least_spread([short], busy=True) == pytest.approx(0.03)
    path, said = _lengths.history_path(tmp_path), []
    assert MachineRecord(tmp_path, said.append).spread(False) == UNKNOWN_SPREAD[False]
    for entry in entries:
        record(path, entry)
    assert MachineRecord(tmp_path, said.append).spread(False) == pytest.approx(0.07)
    path.write_text("{")
    assert MachineRecord(tmp_path, said.append).spread(True) == UNKNOWN_SPREAD[True]
    assert len(said) == 1


def test_a_confirmations_focus_reads_a_spread_from_a_fresh_folders_first_confirmation_on(
        tmp_path):
    """The window length's spread the confirmation's focus reads (``Choice.noise``):
    the record's where it chose the length; where it knows too little of it, the least
    it knows of this state, else the contender rule's guess (a fresh folder beside a
    training: 0.15, so that its focus picks the fastest from the first pairs on, not
    after the rule's least pairs of each config); none for a try of another length."""
    from autotune.study._window_length import MIN_DOF, UNKNOWN_SPREAD, MachineRecord, record

    path, said = _lengths.history_path(tmp_path), []
    machine = MachineRecord(tmp_path, said.append)
    assert machine.choice(True) == _lengths.Choice(1.0, busy=True, noise=UNKNOWN_SPREAD[True])
    assert machine.choice(False) == _lengths.Choice(0.5, noise=UNKNOWN_SPREAD[False])
    record(path, _known(1.0, 0.13, MIN_DOF - 4, 2.8, busy=True))  # too few to choose by
    assert machine.choice(True).noise == pytest.approx(0.13)
    record(path, _known(1.0, 0.11, 10, 2.8, busy=True))
    tried = machine.choice(True)  # 0.5 s tried beside a training: its pairs will show
    assert (tried.window_s, tried.noise) == (0.5, None) and tried.back_to is not None
    record(path, _known(0.5, 0.2, MIN_DOF, 2.0, busy=True))
    assert machine.choice(True).noise == pytest.approx(0.12, abs=0.005)  # chose 1 s by it
    path.write_text("{")
    assert machine.choice(True).noise == UNKNOWN_SPREAD[True] and len(said) == 1


def test_a_confirmations_pairs_are_recorded_for_the_next_and_a_bad_record_is_left_alone(
        tmp_path):
    from autotune.config import TrialConfig
    from autotune.trial import TrialResult

    def result(ratios, busy_pairs=0, went_back=0):
        pairs = [{"ratio": r, "window_s": 1.0 if k < went_back else 0.5, "seconds": 1.5}
                 for k, r in enumerate(ratios)]
        return TrialResult(status="ok", config=TrialConfig(),
                           pairs={"candidates": [{"ratios": ratios, "busy_pairs": busy_pairs,
                                                  "pairs": pairs}]})

    quiet, busy = _lengths.Choice(0.5), _lengths.Choice(1.0, busy=True)
    entry, = _lengths.entries_of(result([2.0, 2.2, 1.8, 2.0]), quiet)
    logs = [math.log(r) for r in (2.0, 2.2, 1.8, 2.0)]
    mean = sum(logs) / 4
    assert entry["dof"] == 3 and entry["pair_s"] == 1.5 and entry["window_s"] == 0.5
    assert entry["squares"] == pytest.approx(sum((x - mean) ** 2 for x in logs))
    assert _lengths.entries_of(result([2.0, 2.2], busy_pairs=1), quiet) == []  # disturbed
    assert _lengths.entries_of(result([1.0, 1.1], busy_pairs=1), dataclasses.replace(
        busy, window_s=0.5))[0]["busy"]
    assert _lengths.entries_of(result([2.0]), quiet) == []  # no spread of its own
    # a try of 1 s that went back to 0.5 s after three pairs: an entry at each length
    tried = dataclasses.replace(busy, busy=False, back_to=_pairs.Known(0.5, 0.1, 30, 1.5))
    both = _lengths.entries_of(result([2.0, 2.4, 1.6, 2.0, 2.1], went_back=3), tried)
    assert [(e["window_s"], e["dof"]) for e in both] == [(1.0, 2), (0.5, 1)]
    path = _lengths.history_path(tmp_path)
    for k in range(_lengths.KEEP + 3):
        _lengths.record(path, {**entry, "n": k})
    _lengths.record(path, {**entry, "window_s": 1.0})
    _lengths.record(path, {**entry, "busy": True})
    kept = _lengths.read(path)
    assert [e.get("n") for e in kept if e["window_s"] == 0.5 and not e["busy"]] == \
        list(range(3, _lengths.KEEP + 3))  # the latest of a length and state
    assert sum(e["window_s"] == 1.0 for e in kept) == sum(e["busy"] for e in kept) == 1
    for bad in ("{not json", '{"entries": [{"window_s": 0.5, "dof": "7"}]}',
                json.dumps({"entries": [{**entry, "busy": "no"}]})):
        path.write_text(bad)
        with pytest.raises(ValueError, match="cannot be read|not one"):
            _lengths.record(path, entry)
        assert path.read_text() == bad


@pytest.mark.parametrize("before", ["none", "narrow", "wide", "unreadable"])
def test_a_search_takes_its_paired_windows_from_this_machines_record_and_adds_to_it(
        tmp_path, monkeypatch, before):
    """A quiet search's paired confirmation reads this machine's record of earlier
    confirmations (under the studies folder): none, its windows are 0.5 s; 0.5-s pairs
    that spread wide, 1 s is tried, and its line says why; narrow, 0.5 s, and the
    pairs are handed their spread (none or unreadable: the guess); a record that
    cannot be read is said once and left as it was. Its own pairs are then recorded."""
    from test_paired import FakeMachine, _search_after_looks

    from autotune.trial import Load

    path = _lengths.history_path(tmp_path / "studies")
    path.parent.mkdir(parents=True)
    if before in ("wide", "narrow"):
        spread = 0.15 if before == "wide" else 0.08
        path.write_text(json.dumps({"entries": [_known(0.5, spread, 40, 1.6)]}))
    elif before == "unreadable":
        path.write_text("{not json")
    machine = PairedFake(FakeMachine(drift=0.0))
    notes, _ = _search_after_looks(tmp_path, monkeypatch, machine, 3, lambda look: Load(
        cores=2, wall_s=0.25), sizes=[640, 896, 1024], racing=False, confirm=1,
        confirm_by="pairs")
    assert [spec.window_s for spec in machine.specs] == [1.0 if before == "wide" else 0.5]
    # the record's spread where it chose the length, none for a try (its pairs show
    # it), else the guess of a machine whose pairs are not known: the focus reads it
    assert machine.specs[0].noise == {"narrow": pytest.approx(0.08), "wide": None}.get(
        before, _lengths.UNKNOWN_SPREAD[False])
    line = next(n for n in notes if n.startswith("confirmation: pairs"))
    assert ("(1 s each; tried, this machine's pairs of 0.5 s: spread 0.150" in line) == \
        (before == "wide"), line
    warned = [n for n in notes if "record of its paired windows" in n]
    assert len(warned) == (before == "unreadable"), notes
    if before == "unreadable":
        assert path.read_text() == "{not json"
        return
    added = _lengths.read(path)[-1]
    assert added["window_s"] == machine.specs[0].window_s and added["dof"] > 0, added


def _followed_up(tmp_path, monkeypatch, machine: PairedFake, sizes: tuple[int, ...]):
    """A search of ``sizes`` (each measured once) on ``machine``, confirming one
    config in pairs: its confirmation runs, the second one's line, the trials by
    batch size, the baseline's number, and the default pick's row."""
    import dataclasses

    import autotune
    from test_paired import _space, search_module

    from autotune.study import StudyRecord
    from autotune.study._records import records

    monkeypatch.setattr(search_module, "run_trial", machine)
    plan = autotune.prepare_search(
        dataset="synthetic", scale=0.004, root=str(tmp_path / "data"),
        studies_dir=str(tmp_path / "studies"), space=_space(sizes), priors=False,
        racing=False, progress=False, optuna_sampler="random", n_trials=len(sizes),
        confirm=1, confirm_by="pairs")
    notes: list[str] = []
    result = dataclasses.replace(plan, on_note=notes.append).run()
    study = optuna.load_study(study_name=result.study_name, storage=result._url)
    trials, s = records(study), StudyRecord.from_study(study)
    by_size = {t.config.batch_size: t.number for t in trials
               if t.search_point and t.reused_from is None}
    lines = [n for n in notes if n.startswith("confirmation:")]
    default = next(r for r in result.front if r.default)
    assert default.confirmation.startswith("confirmed"), result.front
    return s.confirmations, lines[1:2], by_size, s.baseline, default


def test_a_default_pick_no_confirmation_measured_is_measured_in_a_follow_up(
        tmp_path, monkeypatch):
    """The hypervisor took the cores through the first paired trial: every window,
    the baseline's too, read 0.6 of its rate, and the pairs of 896 (truly 1.10x) and
    640 (0.85x) still spread ±20% when its time ran out. Their rates (660 and 510)
    then read under 768's search figure (872: its window read 0.8 of its 1,090, so no
    contender of 896's on a machine whose pairs spread 1%), which no confirmation
    measured, and the default fell to it. A follow-up measures it against the
    baseline, and 896, whose speed-up (1.10x) was above its (0.87x), again, not 640
    (0.85x); its line says why; 896, confirmed there, is the default."""
    from test_paired import FakeMachine, _pairs_spread

    _pairs_spread(tmp_path, 0.01)
    monkeypatch.setitem(TRUE, 768, (1090.0, 1400.0))  # the most memory: not the knee
    factors = (1.3, 0.75, 1.25, 0.8, 1.2, 0.85)
    runs, line, by_size, baseline, default = _followed_up(
        tmp_path, monkeypatch, PairedFake(FakeMachine(drift=0.0, boost={768: 0.8}),
                                          slowed=0.6, ran_out={896: factors, 640: factors}),
        (1024, 896, 768, 640, 256))
    assert len(runs) == 2 and by_size[768] not in runs[0]["candidates"], runs
    assert runs[1]["knee"] == by_size[768] and runs[1]["moved"] == "default pick", runs
    assert runs[1]["candidates"][:2] == [baseline, by_size[768]], runs
    assert runs[1]["candidates"][2:] == [by_size[896]], runs
    assert f"the default pick moved to #{by_size[768]}, which the confirmation did not " \
        "measure" in line[0], line
    assert default.trial == by_size[896] and default.speedup == pytest.approx(1.10, rel=0.02)


def test_a_faster_config_whose_pairs_ran_out_is_measured_again_before_a_slower_default(
        tmp_path, monkeypatch):
    """The confirmation's time runs out on the fastest config (896, truly 1.10x) while
    its pairs still spread ±20% (a burner beside them), and the knee (640, 0.85x) is
    confirmed: the default would fall to 640 only for that. A follow-up measures 896
    again against the baseline, its line says why, and 896, confirmed there, is the
    default."""
    from test_paired import FakeMachine

    runs, line, by_size, baseline, default = _followed_up(
        tmp_path, monkeypatch, PairedFake(FakeMachine(drift=0.0), ran_out={
            896: (1.3, 0.75, 1.25, 0.8, 1.2, 0.85)}), (1024, 896, 640, 256))
    assert [r["candidates"] for r in runs] == [
        [baseline, by_size[896], by_size[640]], [baseline, by_size[896]]], runs
    assert runs[1]["follow_up_of"] == 0 and runs[1]["knee"] is None
    assert f"#{by_size[896]} ran out of time or pairs before their precision" in line[0], line
    assert default.trial == by_size[896] and default.speedup == pytest.approx(1.10, rel=0.02)


def test_a_busy_confirmations_estimate_counts_its_longer_windows():
    from autotune.study._confirm import EXPECTED_PAIRS, PAIR_S, paired_s
    from autotune.study import TrialRecord

    trials = [TrialRecord(n, "complete", (1.0, 1.0)) for n in range(2)]  # no warm-ups
    assert paired_s(trials, [0, 1]) == pytest.approx(EXPECTED_PAIRS * PAIR_S)
    assert paired_s(trials, [0, 1], window_s=1.0) == pytest.approx(EXPECTED_PAIRS * (PAIR_S + 1))


def test_a_paired_line_names_what_took_the_cores_in_its_disturbed_pairs():
    from autotune.study._progress import paired_text
    from autotune.trial import Load

    load = Load(cores=2, wall_s=1.0, own_s=1.0, others_s=0.9, share=0.45,
                top=[[4321, "stress", 0.9]]).to_dict()
    figure = {"ratios": [1.2, 1.21, 1.19], "half_widths": [0.01] * 3, "verdict": "faster",
              "stopped": "decided", "busy_pairs": 1, "redone": 0, "taken_by": [load, load]}
    text = paired_text(figure)
    assert "over 3 pairs: faster" in text
    assert "over 3 pairs: out of time" in paired_text({**figure, "stopped": "time"})
    # both windows of the pair lost 0.9 CPU-s to it: named once, with all it took
    assert text.endswith("the machine was busy in 1 pair (pid 4321 (stress) 1.8 CPU-s)")


def test_a_budget_too_short_for_a_paired_confirmation_says_what_starting_one_needs(
        tmp_path, monkeypatch):
    """A paired confirmation is not started where --budget leaves less than its
    warm-ups and MIN_PAIRED_S of pairs: it is not announced, the machine's load is not
    looked at for it, no paired trial runs, and the search says it was cut short and
    what starting one needs."""
    from test_paired import FakeMachine, _search_after_looks

    from autotune.study._confirm import MIN_PAIRED_S
    from autotune.trial import Load

    def quiet(look: int) -> Load:
        return Load(cores=2, wall_s=0.25, own_s=0.0)

    machine = PairedFake(FakeMachine(drift=0.0))
    notes, looks = _search_after_looks(tmp_path, monkeypatch, machine, 3, quiet,
                                       sizes=[640, 896, 1024], confirm=1, confirm_by="pairs",
                                       budget=MIN_PAIRED_S - 2)
    assert machine.paired == 0 and looks == 1, (machine.specs, looks)  # the search's own
    assert not any(n.startswith("confirmation: pairs") for n in notes), notes
    cut = next(n for n in notes if n.startswith("confirmation cut short: "))
    assert "--budget left " in cut and "needs to start (about " in cut, cut
    assert f"its warm-ups and {MIN_PAIRED_S:g} s of pairs)" in cut, cut


@pytest.mark.parametrize("budget, kept", [(40.0, 0.0), (80.0, 20.0)])
def test_a_budget_whose_share_cannot_start_a_confirmation_keeps_none_for_it(budget, kept):
    """The confirmation's reserve is at most a quarter of --budget. Where that is less
    than a paired confirmation needs to start (its warm-ups and MIN_PAIRED_S of
    pairs), keeping it would stop the trials early for a confirmation that never
    starts: none is kept, trials may run to the budget's end, and the budget's note
    says why and what budget would confirm."""
    from types import SimpleNamespace

    from autotune.study._clock import Clock

    schedule = SimpleNamespace(opts=SimpleNamespace(budget=budget, timeout=None),
                               expected_s=lambda extra_s=0.0, overhead_s=0.0: 30.0,
                               start_s=lambda: 15.0)
    clock = Clock(schedule, done_at_start=0)
    assert clock.reserve(ahead=1) == kept
    assert clock.may_start()
    note = clock.budget_note()
    if kept:
        assert "more than the confirmation's reserve is left (about 0:20 now" in note, note
    else:
        assert "a confirmation needs about 0:15 to start now" in note, note
        assert "none is kept" in note and "(--budget 1:00 or more keeps time for one)" in note


@pytest.mark.parametrize("budget, said", [
    (None, "7 more trials like it, then a confirmation of up to 4 measurements take about"),
    (40.0, "7 more trials like it take about"), (400.0, "then a confirmation of up to 4")])
def test_the_estimate_counts_a_confirmation_only_where_one_is_to_come(budget, said):
    """After the baseline, the estimate counts the confirmation's measurements only
    where one is to come: with --n-trials and a --budget too short to keep time for
    one (Clock.reserve keeps none), it counts the trials only."""
    from types import SimpleNamespace

    from autotune.study._clock import Clock

    opts = SimpleNamespace(budget=budget, timeout=None, confirm=1, max_trials=8,
                           confirmation_size=lambda: 4)
    schedule = SimpleNamespace(opts=opts, start_s=lambda: 15.0,
                               expected_s=lambda extra_s=0.0, overhead_s=0.0: 30.0)
    clock = Clock(schedule, done_at_start=0)
    clock.durations.append(5.0)  # the baseline, the run's first measurement
    note = clock.estimate_note(1)
    assert note.startswith("estimate: the baseline took 0:0") and said in note, note
    clock.durations.append(5.0)
    assert clock.estimate_note(2) is None  # said once, after the run's first measurement


def test_a_ticker_given_the_confirmation_size_still_works_with_a_warning():
    """Ticker's third argument, the confirmation's size, which its estimate line once
    read, is no longer read (the search says the estimate as a note): passing it
    still works, with a FutureWarning."""
    import io

    from autotune.study import Ticker

    with pytest.warns(FutureWarning, match="no longer read"):
        ticker = Ticker(io.StringIO(), None, 8)
    ticker.note("a note")
    assert ticker.stream.getvalue() == "a note\n"


@pytest.mark.parametrize("stopped, said", [
    ("time", "±{w}% > ±10% after 24 pairs, when the confirmation's time for pairs ran out; "
             "about {n} pairs would reach ±10% at their spread"),
    ("pairs spent", "after 24 pairs, when the pairs it may take were spent; about {n} pairs"),
    ("decided", "pairs disagree: ±{w}% > ±10%")])
def test_a_candidate_short_of_its_precision_says_whether_its_pairs_ran_out(stopped, said):
    """A paired candidate left wider than --confirm-precision because the
    confirmation's time (or its pairs) ran out says so, and how many pairs at their
    spread would have confirmed it; its pairs did not disagree, there were too few."""
    from autotune.compare import pair_noise, pairs_to_tell
    from autotune.study import TrialRecord

    ratios = [2.0 * f for f in (0.8, 1.25, 0.9, 1.15) * 6]
    base = TrialRecord(0, "complete", (100.0, 1.0), role="baseline")
    trials = [base] + [
        TrialRecord(n, "complete", (rate, 1.0), role="confirmation",
                    confirm={"run": 0, "round": 0, "of": of, "pairs": figure})
        for n, of, rate, figure in [
            (1, 0, 100.0, {"rates": [100.0] * 24, "stopped": "max-seconds"}),
            (2, 5, 200.0, {"rates": [200.0] * 24, "ratios": ratios, "stopped": stopped,
                           "half_widths": [0.02] * 24})]]
    figure = confirmed(trials)[5]
    need = pairs_to_tell(1.1, pair_noise([ratios]), Rule(min_pairs=24, max_pairs=200))
    assert need is not None and need > 24
    why = figure.why_not(0.10)
    assert said.format(w=f"{100 * figure.interval:.1f}", n=need) in why, why
    assert ("would reach" in why) == (stopped != "decided"), why
