"""Tuning inside a training run (``autotune train --tune``, ``train(..., tune=...)``).

The run starts on the config it is given and, while it trains, tries other values
of the knobs that leave what is learnt unchanged (:data:`NEUTRAL_KNOBS`; the AMP and
feature dtypes only where allowed, :attr:`TuneSpec.precision`). Batch size and
fanout never change in a run. A compile mode (and, compiled, the shapes) is tried
only where its compile pays back within what is left of the run
(:meth:`TunedRun._pays_back`), and its first window, which compiles, is a warm-up
outside its ratios. Loader workers added to an incumbent with none are weighed the
same way (their start against the most they could gain, tried only where pairs as
noisy as the run's so far could tell that gain from 1x), and the first window of a
candidate whose loader starts worker processes, which a run pays once (they
persist), is a warm-up too. Every candidate trains real steps on the same model,
with the same optimizer and its state: it is built around them
(:func:`autotune.pipeline.build` with ``model`` and ``optimizer``).

Each epoch visits every training seed exactly once. The seeds' order is drawn per
epoch from the config's seed, and the loaders take it from one :class:`SeedOrder`:
a window hands its loader the next seeds of the epoch, and the seeds a window did
not train (a candidate dropped or failed mid-window) go to the next window.

A candidate's window of :attr:`TuneSpec.window_steps` steps is paired with a window
of the incumbent's own, measured just before or just after it (the order alternates
pair by pair, as in ABBA, so that a steady drift cancels over two pairs), and the
pair's figure is the ratio of their rates. The verdict comes from the one comparison
engine (:class:`autotune.compare.Comparison`): kept where the speed-up's 95%
confidence sequence lies above 1 (and not wholly within :attr:`TuneSpec.min_gain`
of it), "no faster" where it lies under 1 + min_gain, "slower" where under 1; a
change back to float32 (or torch's dropout masks) is kept where it lies over
1 / (1 + min_gain), no slower than the margin: a lower precision stays only where it
pays. A
candidate whose pairs spread wide gets more pairs, up to :attr:`TuneSpec.pairs`,
while exploring's share lasts, and "no faster" once the pairs left could not call it
faster (:meth:`~autotune.compare.Comparison.out_of_reach`: at 1x it takes half the
pairs, benchmarks/verdicts.py); one under :attr:`TuneSpec.screen` times the incumbent
in each of its first two pairs is dropped then (it could not pay back the pairs a
verdict takes). One whose first :data:`~autotune.tuning._spec.ASIDE_PAIRS` pairs
(or twice, three times as many) read no better than the margin steps aside for the
candidates after it, its pairs kept, and goes on once they are decided (a tie takes
most of a verdict's pairs, and a gain queued behind it would wait for them); an
adoption meanwhile ends it ``unfinished``, its change tried again against the new
incumbent where the queue holds it.
The candidates are tried in the order of where the incumbent's step spends its time
(:func:`by_bottleneck`): the loader's knobs first where its windows waited for batches
more than half of their time, counting the computing its loader workers slow by
taking its cores, the model's first otherwise; bfloat16 autocast, where the run may
try it, before either (the largest gain measured on a CPU that computes it); a
compile always last; where the step is the model's, a candidate that added loader
workers and lost rules out more of them (:func:`beyond_a_loser`); after an adoption, a
change that lost to an earlier incumbent is tried again only where the gain kept since
could lift it over 1x (:meth:`TunedRun._carry_losers`). Before them all, at
the run's start and after each adoption, the fast end
(:func:`~autotune.tuning._candidates.fast_end`): the changes that paid alone where
measured, together in one candidate, where two or more of them are left; it goes
first in any order, so the queue is ordered after it. Windows are as
long as :attr:`TuneSpec.window_steps` where the run holds them, shorter where its
epochs or its share are short (:func:`fit_window`), and timed whole, from the
loader's start (:func:`autotune.pipeline.timed`).
A candidate that fails (out of memory, a worker crash, an error) is recorded and
dropped, and training goes on with the incumbent. Exploring ends when no candidate
is left, or once its candidates have lost :attr:`TuneSpec.share` of the run's
planned steps (a candidate's window loses the steps the incumbent would have trained
beyond it in its time; one as fast or faster loses nothing, so a candidate in sight
of a gain gets the pairs its verdict needs); the rest of the run trains on the
winner.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from typing import Any, Callable, Generator, Iterator

import torch
from torch.utils.data import Sampler

from autotune.compare import Decision, load_quantiles, pair_noise, pairs_to_tell
from autotune.config import TrialConfig, short
from autotune.env import plural
from autotune.pipeline import Pipeline, Step, Window, build, handover_seconds, timed
from autotune.tuning._candidates import DTYPE_KNOBS, FAST_END, FIRST, Change, \
    beyond_a_loser, by_bottleneck, candidates, cores_taken, fast_end, workers_gain
from autotune.tuning._checks import PROBES, departs, loss_check, numerics_check, \
    precision_notes, restores
from autotune.tuning._log import Tried, TuneLog, WindowEvent
from autotune.tuning._spec import ASIDE_PAIRS, SCREEN_PAIRS, TuneSpec, fit_window, screened


def _starts_once(config: TrialConfig) -> bool:
    """Whether ``config``'s pipeline pays a cost once, in its first window: a compile,
    or its loader's worker processes starting (persistent: its later windows reuse
    them)."""
    return config.compile_mode != "none" or config.num_workers > 0


def _value_key(change: Change) -> tuple[str, str]:
    """A change's knob and the value it gives, whatever the incumbent it changes."""
    return change.knob, repr(change.value)


class SeedOrder(Sampler):
    """The positions of the training seeds a loader takes next: set per window."""

    def __init__(self) -> None:
        self.positions: list[int] = []

    def __iter__(self):
        return iter(self.positions)

    def __len__(self) -> int:
        return len(self.positions)


class _IncumbentFailed(Exception):
    """The incumbent's own window failed: the run fails, as an untuned one would."""


class _Refused(Exception):
    """A candidate refused before its pairs (its numerics)."""


@dataclasses.dataclass
class _Turn:
    """A candidate's turn in an epoch: its entry in the log, the epoch's seeds not yet
    trained, and what its windows and the incumbent's beside them trained in all."""

    tried: Tried
    rest: list[int]
    total: Window = dataclasses.field(default_factory=Window)
    aside: bool = False  # it stepped aside for the others (TunedRun._steps_aside)


@dataclasses.dataclass
class _Lost:
    """A change that lost: its verdict, its ratio against the incumbent it lost to,
    and the product of the gains of the changes kept since."""

    verdict: str
    ratio: float
    since: float = 1.0

    @property
    def bound(self) -> float:
        return self.ratio * self.since


class TunedRun:
    """A training run that tunes itself: a source of batches
    (:class:`autotune.pipeline.BatchSource`) that sometimes swaps pipelines.
    :meth:`batches` yields one epoch's batches (every training seed once) in
    windows, trying candidates while exploring, and the caller trains each inside
    :meth:`step`, with :attr:`current`'s model and autocast (the epoch loop,
    :func:`autotune.pipeline.fit`, with the pipeline's own step); ``pipe`` is the
    incumbent's pipeline, ``log`` what the run did. ``close()`` (or the ``with``
    block's end, which notes where Ctrl-C stopped the run) ends every loader."""

    _handover_s: float | None = None  # a worker's hand-over of a batch (_handover), once

    def __init__(self, config: TrialConfig, data, spec: TuneSpec, *, epochs: int,
                 num_classes: int | None = None, cache_file=None,
                 on_line: Callable[[str], None] | None = None,
                 queue: list[Change] | None = None,
                 on_window: Callable[[WindowEvent, TuneLog], None] | None = None,
                 model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None,
                 counts_edges: bool = False) -> None:
        self.data, self.spec, self.num_classes, self.cache_file = data, spec, num_classes, \
            cache_file
        self.on_line = on_line or (lambda line: None)
        self.on_window = on_window or (lambda event, log: None)
        load_quantiles()  # its verdicts' scipy, imported before it trains
        self._epoch = 0
        self.order = SeedOrder()
        self.pipe = self._build(config, model, optimizer)
        self.current = self.pipe  # the pipeline whose batch :meth:`batches` yielded last
        self.seeds = len(self.pipe.loader.dataset)
        epoch_steps = -(-self.seeds // config.batch_size)
        self.planned_steps = epochs * epoch_steps
        self.explore_steps_left = spec.share * self.planned_steps
        # dropout masks are tried where the run's own step trains a built-in model
        # (TunedLoop's caller calls its own)
        self.masks = not counts_edges and self.pipe.own_masks
        self.queue = candidates(config, spec, masks=self.masks) if queue is None else list(queue)
        self._ordered = queue is not None  # a queue given is tried in its order
        windows = self._fit(epochs, epoch_steps)
        self.compile_s = spec.compile_s  # planned, until this run measures one
        self.start_s = spec.start_s  # a loader's workers' start: the same
        self.log = TuneLog(start=config, final=config, notes=precision_notes(config, spec))
        self.too_short = self._too_short(epochs, epoch_steps, windows)
        self.log.notes += [f"this run may be too short to decide a candidate: "
                           f"{self.too_short}"] if self.too_short else []
        for note in self.log.notes:
            self.on_line(note)
        self._probes: list = []  # the incumbent's first batches: the numerics check's
        # calls of the aggregation's hook in candidates' windows, where the caller
        # counts them (``counts_edges``: TunedLoop's; None: the run's own step, which
        # always calls it)
        self.edges_asked: int | None = 0 if counts_edges else None
        self.steps = 0
        self.totals = Window()  # the last epoch's steps, seeds, seconds and loss
        self.window = Window()  # the one being trained
        self._pace = 0.0  # seeds per second of the incumbent's last window
        self._unfinished: Tried | None = None  # a candidate the last epoch's end cut short
        self._aside: dict[str, Tried] = {}  # by config key: those stepped aside, queued last
        self._lost: dict[tuple[str, str], _Lost] = {}  # by (knob, value): _carry_losers
        # the pipeline of the one being tried, or of the one cut short, kept for its next
        # epoch: close() ends it too
        self._candidate: Pipeline | None = None

    def _fit(self, epochs: int, epoch_steps: int) -> int:
        """Sizes the run's windows (:func:`fit_window`) and a candidate's most pairs
        (:attr:`rule`: :attr:`TuneSpec.rule` with its ``max_pairs``); returns how many
        windows exploring's share holds."""
        spec = self.spec
        # a candidate keeps its batch size (it changes no knob that learns): so do epochs
        self.window_steps = fit_window(spec.window_steps, epoch_steps, self.explore_steps_left,
                                       len(self.queue) * spec.rule.min_pairs)
        # a candidate gets no more pairs than the run can give it (as many an epoch as
        # an epoch holds; the share ends them sooner where its windows lose steps) and
        # no fewer than a verdict needs. The windows the share holds where every one
        # lost all its steps: the run is too short below a verdict's worth of them
        windows = int(self.explore_steps_left // self.window_steps)
        per_epoch = max(epoch_steps // (2 * self.window_steps), 1)
        self.rule = dataclasses.replace(spec.rule, max_pairs=max(
            min(spec.pairs, epochs * per_epoch), spec.rule.min_pairs))
        return windows

    def _build(self, config: TrialConfig, model: torch.nn.Module | None,
               optimizer: torch.optim.Optimizer | None) -> Pipeline:
        """A pipeline of ``config`` around ``model`` and ``optimizer`` (None: its own,
        seeded); around a training's optimizer, the random state stays where it was."""
        state = torch.get_rng_state()
        pipe = build(config, self.data, model, num_classes=self.num_classes,
                     cache_file=self.cache_file, order=self.order, optimizer=optimizer)
        if optimizer is not None:
            torch.set_rng_state(state)
        return pipe

    def _too_short(self, epochs: int, epoch_steps: int, windows: int) -> str:
        """Before the run trains: why it may be too short to decide any candidate,
        where it may ("" otherwise). A verdict needs the rule's least pairs, each a
        window of the candidate's, and exploring's share holds ``windows`` of them
        where each loses all its steps: only a candidate about as fast as the
        incumbent, whose windows lose little, could get them."""
        least = self.spec.rule.min_pairs
        if not self.queue or windows >= least:
            return ""
        return (f"exploring's share ({self.spec.share:.0%} of {plural(epochs, 'epoch')} of "
                f"{plural(epoch_steps, 'step')}) holds {plural(windows, 'window')} of "
                f"{self.window_steps} steps where a candidate loses them all, and a verdict "
                f"needs {least} pairs, a window each: only a candidate about as fast as the "
                f"start gets them; give a larger --tune-share (TuneSpec(share=...)) or more "
                f"epochs")

    @property
    def exploring(self) -> bool:
        return bool(self.queue) and self.explore_steps_left > 0

    def step(self) -> contextlib.AbstractContextManager[Step]:
        """Around the caller's step on the batch :meth:`batches` yielded last. Where a
        candidate's batch it was, what the step raises is that candidate's failure: it
        is recorded and dropped, and the batch's seeds train again on the incumbent.
        The incumbent's step raises as an untuned run's would."""
        return self.window.step(catch=self.current is not self.pipe)

    def batches(self, number: int) -> Iterator:
        """Epoch ``number``'s batches, each on its device: every training seed once, in
        an order drawn from the config's seed and the epoch's number. A window's time
        spans its caller's steps; :attr:`totals` holds the epoch's."""
        self._epoch, self.totals = number, Window()
        generator = torch.Generator().manual_seed(self.log.start.seed * 1_000_003 + number)
        pending = torch.randperm(self.seeds, generator=generator).tolist()
        while pending:
            if self.exploring and len(pending) >= 2 * self.window_steps * self.batch_size:
                window = yield from self._try_next(pending)
            else:
                window = yield from self._window(self.pipe, pending, len(pending))
                if window.error is not None:
                    raise window.error
            pending = pending[window.seeds:]
            self.totals.add(window)
            if self.log.settled_step is None and not self.exploring:
                self._settle(number)

    def _window(self, pipe: Pipeline, pending: list[int], steps: int,
                change: str | None = None) -> Generator[Any, None, Window]:
        """Yields ``pipe``'s batches (a candidate's, ``change`` says which) of the next
        ``steps`` batches of ``pending``, timed (:func:`autotune.pipeline.timed`); the
        incumbent's first are kept as the numerics check's probes; :attr:`on_window`
        hears the window."""
        self.current, self.window = pipe, Window()
        self.order.positions = pending[:steps * pipe.config.batch_size]
        with pipe.activate():
            for batch in timed(pipe, self.window):
                if pipe is self.pipe and len(self._probes) < PROBES:
                    self._probes.append(batch)
                yield batch
        window = self.window
        key = short(pipe.config.to_dict())
        self.log.steps_by_config[key] = self.log.steps_by_config.get(key, 0) + window.steps
        error = None if window.error is None else \
            f"{type(window.error).__name__}: {window.error}"[:300]
        step, self.steps = self.steps, self.steps + window.steps  # counted before it is
        # heard: Ctrl-C handled at the end of its recording finds the run's steps whole
        self.on_window(WindowEvent(pipe.config, change, self._epoch, step, window.steps,
                                   window.seeds, window.seconds, window.rate, window.loss,
                                   error), self.log)
        return window

    def _try_next(self, pending: list[int]) -> Generator[Any, None, Window]:
        """Yields the batches of the next candidate, each of its windows paired with
        one of the incumbent's just before or after it (the order alternating pair by
        pair), until a verdict (:meth:`_verdict`, or failed) or the end of exploring's
        share; returns what they trained, in all."""
        self._fast_end_first()
        turn = _Turn(self._next(), pending)
        started, candidate, asked = time.perf_counter(), None, self.edges_asked
        try:
            # a window to order the queue by runs on past the batches in flight; the
            # fast end goes first whatever the order, which waits for its verdict
            ordering = not self._ordered and turn.tried.knob != FAST_END
            reference = yield from self._train(turn, self.pipe,
                                               self._in_flight() if ordering else 0)
            if ordering:
                turn.tried = self._reorder(turn.tried, reference)
            if self._pays_back(turn.tried, reference.rate):
                candidate = self._candidate_for(turn.tried)
                self._check_numerics(turn.tried, candidate)
                if self._warms_up(turn.tried):
                    reference = yield from self._warm_up(turn, candidate, reference.rate)
                yield from self._pairs(turn, candidate, reference)
        except _IncumbentFailed as failed:
            self._close_candidate()
            raise failed.__cause__
        except _Refused:  # its numerics differ: never trained, dropped
            pass
        except Exception as exc:  # out of memory, a dead worker, a compile error
            turn.tried.verdict, turn.tried.reason = "failed", \
                f"{type(exc).__name__}: {exc}"[:300]
        self._check_hook(turn.tried, asked)
        self.log.explore_s += time.perf_counter() - started
        self._conclude(turn, candidate)
        return turn.total

    def _candidate_for(self, tried: Tried) -> Pipeline:
        """``tried``'s pipeline, around the incumbent's model and optimizer: the one
        the last epoch's end cut short, where ``tried`` is that candidate resumed (kept
        open across the epoch's end: a build casts and caches its features again, in
        every epoch its pairs go on in), else a new one (and a kept one of another
        candidate is closed)."""
        if self._candidate is not None and self._candidate.config == tried.config:
            return self._candidate
        self._close_candidate()
        self._candidate = self._build(tried.config, self.pipe.eager_model, self.pipe.optimizer)
        return self._candidate

    def _close_candidate(self) -> None:
        """Ends the loader of the candidate being tried, or kept for its next epoch."""
        if self._candidate is not None:
            self._candidate.close()
            self._candidate = None

    def _train(self, turn: _Turn, pipe: Pipeline, extra: int = 0
               ) -> Generator[Any, None, Window]:
        """A window of ``pipe`` (the incumbent's, or ``turn``'s candidate's) on the next
        of ``turn``'s seeds, ``extra`` steps longer than the run's windows. A
        candidate's failure raises as it is; the incumbent's as
        :class:`_IncumbentFailed`, which ends the run."""
        window = yield from self._window(pipe, turn.rest, self.window_steps + extra,
                                         None if pipe is self.pipe else turn.tried.label)
        turn.rest = turn.rest[window.seeds:]
        turn.total.add(window)
        if pipe is self.pipe and window.rate:
            self._pace = window.rate
        if window.error is not None and pipe is self.pipe:
            raise _IncumbentFailed() from window.error
        if window.error is not None:
            raise window.error
        return window

    def _check_numerics(self, tried: Tried, candidate: Pipeline) -> None:
        """Refuses a candidate that lowers a dtype (:func:`departs`) whose gradients
        differ from the incumbent's (:func:`numerics_check`): its verdict says why, and
        it trains no window. Once,
        before its first window: one resumed in a later epoch with its pairs passed
        it then (checked again, at weights that have moved on, it could be refused
        after its pairs were paid for, and each epoch would pay for a check)."""
        if departs(self.pipe.config, tried.config, DTYPE_KNOBS) and not tried.ratios:
            why = numerics_check(self.pipe, candidate, self._probes)
            if why:
                tried.verdict, tried.reason = "refused", f"numerics check: {why}"
                raise _Refused()

    def _check_hook(self, tried: Tried, asked: int | None) -> None:
        """Marks an aggregation candidate ``unused`` where the user's step never
        called the aggregation's hook in its windows (``asked``: the calls before them;
        None: the run's own step)."""
        if asked is not None and asked == self.edges_asked and tried.steps and \
                tried.config.aggregation != self.pipe.config.aggregation:
            tried.verdict, tried.reason = "unused", (
                "the step never called loop.edges(batch) in its windows, so the aggregation "
                "changed nothing: call the model on loop.edges(batch), not batch.edge_index")

    def _pairs(self, turn: _Turn, candidate: Pipeline,
               reference: Window | None) -> Generator[Any, None, None]:
        """``turn``'s pairs, each a window of ``candidate`` and one of the incumbent's
        (``reference``: one trained just before, for the first), the incumbent's first
        in every other pair, until a verdict, the end of exploring's share, or an epoch
        with no room left for the next pair (it goes on in the next)."""
        tried = turn.tried
        while not tried.verdict and self.explore_steps_left > 0:
            if len(turn.rest) < (1 if reference is not None else 2) * self.window_steps * \
                    self.batch_size:  # the pair would not fit in the epoch: the next one's
                return
            if reference is None and len(tried.ratios) % 2 == 0:  # the incumbent first
                reference = yield from self._train(turn, self.pipe)
            own = yield from self._train(turn, candidate)
            self._count(tried, own)
            if not own.rate:  # it trained nothing: the loader had no batch for it
                return
            if reference is None:  # the candidate first: the epoch has room for the pair
                reference = yield from self._train(turn, self.pipe)
            if reference.rate:
                tried.ratios.append(own.rate / reference.rate)
                if own.loss is not None and reference.loss is not None:
                    tried.losses.append((own.loss, reference.loss))
                tried.verdict, tried.reason = self._verdict(tried)
                if not tried.verdict and self._steps_aside(tried):
                    turn.aside = True
                    return
            reference = None

    def _steps_aside(self, tried: Tried) -> bool:
        """Whether ``tried``, undecided at :data:`ASIDE_PAIRS` pairs (or twice, three
        times as many) that read no better than the margin, steps aside for the
        candidates queued after it, its pairs kept for when they are decided: a tie
        takes most of the pairs a verdict may have (benchmarks/verdicts.py), and a gain
        queued behind it would wait for them. Once a candidate, and only where another
        waits that has not stepped aside; never the fast end (what goes first waits
        for its verdict), nor one whose first window warms up (:func:`_starts_once`:
        a compile, or loader workers), which a new pipeline would pay again when it
        goes on."""
        decision = tried.decision
        if tried.aside_at is not None or len(tried.ratios) % ASIDE_PAIRS or \
                tried.knob == FAST_END or decision is None or decision.speedup is None:
            return False
        if decision.speedup >= 1 + self.spec.min_gain or _starts_once(tried.config):
            return False
        return any(change.config.key() not in self._aside for change in self.queue)

    def _fast_end_first(self) -> None:
        """Before the queue is ordered (the run's first pair, and after each
        adoption), the fast end (:func:`fast_end`) goes first, where the queue makes
        one that no candidate holds yet: it goes first in any order, so its turn
        skips the ordering window's batches in flight (an adoption orders the new
        incumbent's queue at its own first window)."""
        if self._ordered:
            return
        end = fast_end(self.pipe.config, self.queue, cores_taken(self.pipe.config))
        if end is None or end.config.key() in self._tried_keys() | \
                {c.config.key() for c in self.queue}:
            return
        self.queue.insert(0, end)
        self.log.ahead = end.label

    def _reorder(self, tried: Tried, window: Window) -> Tried:
        """At the run's first pair (and after each adoption), the queue in the order
        :func:`by_bottleneck` gives for ``window``, the incumbent's; returns the
        candidate to try now, ``tried`` or the one the new order puts first. The fast
        end was put first before it (:meth:`_fast_end_first`)."""
        share = None if self._ordered else window.wait_share(self._in_flight())
        if share is None:
            return tried
        self._ordered = True
        self.log.wait_share, self.log.cores_taken = share, cores_taken(self.pipe.config)
        queue = by_bottleneck([tried.change, *self.queue], share, self.log.cores_taken)
        if self.log.ahead is None and (queue[0].knob, queue[0].value) in FIRST:
            self.log.ahead = queue[0].label  # (a fast end, tried before, stays named)
        if tried.ratios or queue[0] == tried.change:  # one with pairs goes on first
            self.queue = [change for change in queue if change != tried.change]
            return tried
        self.log.tried.remove(tried)
        self.queue = queue
        return self._next()

    def _in_flight(self) -> int:
        """The batches the incumbent's loader has in flight as a window begins."""
        return self.pipe.config.num_workers * self.pipe.config.prefetch_factor

    def _count(self, tried: Tried, window: Window, whole: bool = False) -> None:
        """A candidate's window: its steps and seconds, and what it lost, spent of
        exploring's share: the steps the incumbent would have trained beyond it in its
        whole seconds (its loader's start included), at the pace of the incumbent's
        last window; nothing where it kept that pace. Its steps whole before the
        incumbent has a pace, and with ``whole`` (a compile's warm-up, whose time
        :meth:`_pays_back` weighed before it was tried)."""
        tried.steps, tried.seconds = tried.steps + window.steps, tried.seconds + window.seconds
        if whole or not self._pace:
            self.explore_steps_left -= window.steps
            return
        lost = window.seconds * self._pace - window.seeds  # seeds
        self.explore_steps_left -= max(lost, 0.0) / self.batch_size

    def _pays_back(self, tried: Tried, rate: float) -> bool:
        """Whether to try ``tried``: yes, unless what it costs once (:meth:`_once`)
        would not pay back within what is left of the run (at the incumbent's
        ``rate``) at its best-case gain (none at 1x or under), or the comparison could
        not call even that gain faster in the pairs a candidate may have
        (:func:`pairs_to_tell`, at the deviation of this run's pairs so far,
        :func:`pair_noise`); then it is "not tried", and the log says why."""
        once = self._once(tried)
        if once is None or not rate:
            return True
        what, cost_s, gain = once
        if gain <= 1:  # workers whose hand-over outweighs the wait they could hide
            tried.verdict, tried.reason = "not tried", (
                f"at best {gain:.3g}x: the step's wait spread over the cores, its batches' "
                "hand-over from a worker included, leaves nothing to gain")
            return False
        noise = pair_noise([t.ratios for t in self.log.tried])
        if noise is not None and pairs_to_tell(gain, noise, self.rule) is None:
            tried.verdict, tried.reason = "not tried", (
                f"at best {gain:.3g}x: pairs as noisy as this run's so far "
                f"(±{100 * math.expm1(noise):.0f}% each) would not tell that from 1x in "
                f"{self.rule.max_pairs}")
            return False
        left_s = max(self.planned_steps - self.steps, 0) * self.pipe.config.batch_size / rate
        saved_s = left_s * (1 - 1 / gain)
        if cost_s < saved_s:
            return True
        tried.verdict, tried.reason = "not tried", (
            f"{what} of about {cost_s:.1f} s would not pay back: {left_s:.0f} s of the run "
            f"left, {saved_s:.1f} s saved at {gain:.3g}x")
        return False

    def _once(self, tried: Tried) -> tuple[str, float, float] | None:
        """What ``tried`` costs once, before its pairs, where that may not pay back:
        (what, its seconds, the best-case gain it is weighed at), or None.

        - A compile: as long as this run's last, else :attr:`TuneSpec.compile_s`, at
          :attr:`TuneSpec.compile_gain`.
        - Loader workers where the incumbent has none: their start, as long as this
          run's last measured one, else :attr:`TuneSpec.start_s`, at the most they
          could gain (:func:`workers_gain`) for the incumbent's wait (measured at the
          queue's ordering; not weighed before) and a worker's hand-over of its
          batch (:meth:`_handover`).

        None for a candidate resumed with its pairs (the last epoch's end cut it
        short): it was weighed before its first, and its pipeline, kept open, paid
        that cost then (weighed again, one was called "not tried" with 3 pairs
        behind it)."""
        config = tried.config
        if tried.ratios:
            return None
        if config.compile_mode != "none":
            return "a compile", self.compile_s, self.spec.compile_gain
        share = self.log.wait_share
        if config.num_workers == 0 or self.pipe.config.num_workers > 0 or share is None:
            return None
        return "its workers' start", self.start_s, \
            workers_gain(share, handover=self._handover())

    def _handover(self) -> float:
        """The share of the incumbent's step that a loader worker's hand-over of its
        batch would add: the least of the probe batches' hand-overs
        (:func:`autotune.pipeline.handover_seconds`, measured once: batch size and
        fanout never change in a run) over a step at the incumbent's last pace; 0
        before it has trained a batch."""
        if self._handover_s is None and self._probes:
            self._handover_s = min(handover_seconds(batch) for batch in self._probes)
        return (self._handover_s or 0.0) * self._pace / self.batch_size

    @staticmethod
    def _warms_up(tried: Tried) -> bool:
        """Whether ``tried``'s first window pays what a run that kept it pays once: a
        compile, or its loader's worker processes starting (persistent: its later
        windows reuse them). Not where it was warmed up already (resumed in a later
        epoch on the pipeline it warmed)."""
        return _starts_once(tried.config) and tried.compile_s is None and \
            tried.start_s is None

    def _warm_up(self, turn: _Turn, candidate: Pipeline,
                 before: float) -> Generator[Any, None, Window | None]:
        """A candidate's first window, which compiles or starts its loader's workers
        (:meth:`_warms_up`): trained, outside its pairs (its first pair would read a
        once-only cost as its pace); what it took beyond the incumbent's pace
        (``before``, seeds per second) is its compile time, or its workers' start. A
        compile's counts whole against exploring's share (:meth:`_pays_back` weighed
        it before it was tried). Returns the incumbent's window after a compile, the
        reference of the first pair; after workers started, None: the incumbent's
        window right after their fork pays that fork's copies on write (each page of
        the training process it writes first, shared with the workers until then,
        copied: about half its pace in online.py's runs, which read a losing
        candidate's first pair as a tie; docs/benchmarks.md), so it trains outside
        the pairs too, and the first pair begins with the incumbent's next."""
        tried = turn.tried
        compiles = tried.config.compile_mode != "none"
        warm = yield from self._train(turn, candidate)
        self._count(tried, warm, whole=compiles)
        if warm.steps:
            pace_s = warm.seeds / before if before else 0.0
            beyond = max(warm.seconds - pace_s, 0.0)
            if compiles:
                tried.compile_s = self.compile_s = beyond
            else:
                tried.start_s = self.start_s = beyond
        after = yield from self._train(turn, self.pipe)
        return after if compiles else None

    def _conclude(self, turn: _Turn, candidate: Pipeline | None) -> None:
        """A kept candidate becomes the incumbent, another is closed; one without a
        verdict goes on in the next epoch, its pairs and its pipeline kept, where the
        epoch's seeds ran out first, or after the others, its pairs kept and its
        pipeline closed, where it stepped aside (:meth:`_steps_aside`)."""
        tried = turn.tried
        if turn.aside and not tried.verdict:  # (not where its windows showed it unused)
            self.log.tried.remove(tried)
            self.queue.append(tried.change)
            tried.aside_at = len(tried.ratios)
            self._aside[tried.config.key()] = tried
            self._close_candidate()
            self.on_line(tried.line("stepped aside", (
                f"no better than ±{100 * self.spec.min_gain:g}% so far: the candidates "
                "after it go first, then it goes on")))
            return
        if not tried.verdict:
            self.log.tried.remove(tried)
            self.queue.insert(0, tried.change)
            self._unfinished = tried
            return
        self.on_line(tried.line())
        if tried.verdict == "kept":
            self._log_unfinished(f"its pairs were against the incumbent before "
                                 f"{tried.label} was kept")
            self._candidate = None
            self._adopt(candidate)
            self._carry_losers(tried)
        else:
            self._close_candidate()
            self._rule_out(tried)

    def _rule_out(self, lost: Tried) -> None:
        """The queued changes a candidate not kept rules out (:func:`beyond_a_loser`):
        "not tried", and why, in the log; the loser itself is kept by its knob and value
        for the adoptions to come (:meth:`_carry_losers`)."""
        if lost.verdict not in ("slower", "no faster", "dropped"):  # a failure rules out nothing
            return
        if lost.knob != FAST_END and lost.ratio is not None:
            self._lost[_value_key(lost.change)] = _Lost(lost.verdict, lost.ratio)
        for change in beyond_a_loser(lost.change, self.pipe.config, self.queue,
                                     self.log.wait_share, self.log.cores_taken):
            self._not_tried(change, f"{lost.label} was {lost.verdict}, and the step waited "
                            f"{100 * self.log.wait_share:.0f}% of its time for its batches: "
                            "more workers take more of its cores")

    def _not_tried(self, change: Change, reason: str) -> None:
        """``change`` leaves the queue, "not tried" in the log, and ``reason`` why."""
        self.queue.remove(change)
        out = Tried(change, verdict="not tried", reason=reason)
        self.log.tried.append(out)
        self.on_line(out.line())

    def _next(self) -> Tried:
        """The next candidate, as a new entry of the log, or the one the last epoch's
        end cut short, or one that stepped aside, with the pairs it had."""
        change = self.queue.pop(0)
        resumed, self._unfinished = self._unfinished, None
        if resumed is None or resumed.change != change:
            resumed = self._aside.pop(change.config.key(), None)
        tried = resumed or Tried(change)
        self.log.tried.append(tried)
        return tried

    def _verdict(self, tried: Tried) -> tuple[str, str]:
        """The verdict on ``tried``'s pairs and why ("" while it needs more): the
        screen's on its first :data:`SCREEN_PAIRS` pairs (:func:`screened`: dropped
        under ``spec.screen`` each, kept over its inverse each); else the comparison's
        (:attr:`rule`): kept where faster, slower where known to be under 1, no
        faster where known to be under 1 + ``spec.min_gain`` or tied within it, and no
        faster once the rule's ``max_pairs`` pairs have not decided it, or once they
        could not call it faster (:meth:`autotune.compare.Comparison.out_of_reach`:
        about 1x in pairs that spread wider than the margin, which would explore to
        its last pair in short windows). A candidate that gives precision back is kept
        where it is no slower (:meth:`_restored`)."""
        decision = tried.compare(self.rule)
        screen = screened(tried.ratios, self.spec.screen)
        if screen == "dropped":
            return "dropped", f"under {self.spec.screen:g}x in its first {SCREEN_PAIRS} pairs"
        margin = f"±{100 * self.spec.min_gain:g}%"
        if decision.verdict == "faster" or screen == "kept":
            why = loss_check(tried.losses) if departs(self.pipe.config, tried.config) \
                else ""
            return ("refused", f"loss check: {why}") if why else \
                ("kept", "" if decision.verdict == "faster" else
                 f"over {1 / self.spec.screen:.3g}x in its first {SCREEN_PAIRS} pairs")
        if restores(self.pipe.config, tried.config):
            return self._restored(decision, margin)
        if decision.verdict == "not faster":
            return ("slower", "") if decision.high < 1 else \
                ("no faster", f"under the {margin} margin")
        if decision.verdict == "tied":
            return "no faster", f"tied within {margin}"
        if decision.pairs >= self.rule.max_pairs:
            return "no faster", f"undecided after {decision.pairs} pairs"
        if tried.reach is not None:
            return "no faster", (f"at most {tried.reach:.2f}x over {decision.pairs} pairs: "
                                 f"{self.rule.max_pairs} could not call it faster")
        return "", ""

    def _restored(self, decision: Decision, margin: str) -> tuple[str, str]:
        """The verdict on a candidate that gives precision back (:func:`restores`) and
        is not faster: kept where the comparison knows it no slower beyond the margin
        (:attr:`autotune.compare.Decision.no_slower`), so that a lower precision
        stays only where it pays; slower where known to be under 1; else undecided
        until its pairs run out. Not stopped as out of reach: that asks whether it
        could be faster, which is not its question."""
        if decision.no_slower:
            return "kept", f"no slower beyond the {margin} margin: the higher precision " \
                "at no cost"
        if decision.decided and decision.high < 1:
            return "slower", ""
        if decision.pairs >= self.rule.max_pairs:
            return "no faster", f"not shown no slower after {decision.pairs} pairs"
        return "", ""

    def _adopt(self, candidate: Pipeline) -> None:
        """``candidate`` becomes the incumbent; the queue is remade around it."""
        tried = self._tried_keys()
        self.pipe.close()
        self.pipe = candidate
        self.log.final = candidate.config
        self.log.ahead = None  # what goes first is the new incumbent's
        self.queue = [change for change in candidates(candidate.config, self.spec,
                                                      masks=self.masks)
                      if change.config.key() not in tried]
        self._ordered = False  # ordered again at the new incumbent's first window

    def _carry_losers(self, kept: Tried) -> None:
        """After ``kept`` was adopted, the changes that lost to an earlier incumbent
        are not tried again where their ratio then, times the gains kept since
        (``kept``'s included), is still under 1: "not tried", and why, in the log.
        The product lets the kept changes' gain carry over to the loser whole, and as
        much again through their interplay (it would need the kept changes to speed it
        up by their gain squared to win); a large gain, such as the fast end's, lets
        every loser be tried again."""
        gain = kept.ratio or 1.0
        for lost in self._lost.values():
            lost.since *= gain
        self._lost = {key: lost for key, lost in self._lost.items() if lost.bound < 1}
        for change in [c for c in self.queue if _value_key(c) in self._lost]:
            lost = self._lost[_value_key(change)]
            self._not_tried(change, f"it was {lost.verdict} at {lost.ratio:.2f}x against an "
                            f"earlier incumbent; times the {lost.since:.2f}x kept since, "
                            "still under 1x")

    def _tried_keys(self) -> set[str]:
        """The configs this run has trained: its incumbent's and every candidate's."""
        return {t.config.key() for t in self.log.tried} | {self.pipe.config.key()}

    def _settle(self, epoch: int) -> None:
        self.log.settled_step, self.log.settled_epoch = self.steps, epoch
        self.log.final = self.pipe.config
        self._log_unfinished("exploring's share of the run was spent before its verdict")
        for change in self.queue:
            self.log.tried.append(Tried(change, verdict="not tried",
                                           reason="exploring's share of the run was spent"))
        self.queue.clear()
        self.on_line(f"settled at step {self.steps} (epoch {epoch}): "
                     f"{short(self.pipe.config.to_dict())}")

    @property
    def batch_size(self) -> int:
        """The run's batch size (every candidate keeps it)."""
        return self.pipe.config.batch_size

    def close(self) -> None:
        """Ends every loader; a candidate the run's end cut short before its verdict
        goes into the log as ``unfinished``, with the pairs it had. A candidate being
        tried (Ctrl-C stopped the run in its windows) is closed too. A run too short to
        decide one says so again, where it decided none."""
        self._log_unfinished("the run ended before its verdict")
        decided = [t for t in self.log.tried if t.verdict not in ("unfinished", "not tried")]
        if self.too_short and not decided:
            self.log.notes.append(f"it decided no candidate: {self.too_short}")
        self._close_candidate()
        self.pipe.close()

    def __enter__(self) -> TunedRun:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        """Ends every loader (:meth:`close`); Ctrl-C's step is noted first."""
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            self.log.interrupted_step = self.steps
        self.close()

    def _log_unfinished(self, reason: str) -> None:
        """The candidates without a verdict, the one an epoch's end cut short and those
        stepped aside, go into the log as ``unfinished`` (with the pairs they had, and
        ``reason``) and leave the queue."""
        if self._unfinished is not None:
            self._close_candidate()
        waiting = [t for t in (self._unfinished, *self._aside.values()) if t is not None]
        self._unfinished, self._aside = None, {}
        keys = {tried.config.key() for tried in waiting}
        self.queue = [change for change in self.queue if change.config.key() not in keys]
        for tried in waiting:
            tried.verdict, tried.reason = "unfinished", reason
            self.log.tried.append(tried)
            self.on_line(tried.line())
