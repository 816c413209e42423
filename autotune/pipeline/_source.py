"""Where an epoch's batches come from, and the one timer of training steps.

The epoch loop (:func:`autotune.pipeline.fit`) asks a :class:`BatchSource` for an
epoch's batches and trains each inside its :meth:`~BatchSource.step`, on its
:attr:`~BatchSource.current` pipeline. :class:`PipelineSource` hands out one
pipeline's batches, the epoch as one window; a run that tunes itself
(:class:`autotune.tuning.TunedRun`) is a source that hands out windows of several
pipelines. Either way the steps are timed in :func:`timed`, into a :class:`Window`.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

from torch import Tensor

from autotune.files import check_interrupt
from autotune.pipeline._build import Pipeline, device_sync


class Step:
    """The step a caller trains on a batch, inside its source's ``step()``;
    ``loss`` (optional): the step's loss, of which its window and epoch record the
    mean over their seeds."""

    loss: Tensor | float | None = None


@dataclass
class Window:
    """Steps trained one after another on one pipeline, as :func:`timed` measured
    them."""

    steps: int = 0
    seeds: int = 0  # trained: the window's first ``seeds`` positions
    rate: float = 0.0  # seeds per second over its whole time, its first step included
    seconds: float = 0.0
    # each timed step's wait for its batch (on the host: the loader's next and the
    # batch's hand-over) and its whole time, the caller's step with it
    waits: list[tuple[float, float]] = field(default_factory=list)
    loss_sum: float = 0.0  # each loss its caller gave, times its step's seeds
    loss_seeds: int = 0  # the seeds of those steps
    error: BaseException | None = None  # what stopped it early (an Exception)
    failure: Exception | None = None  # what the caller's step raised, where caught
    given: Tensor | float | None = field(default=None, repr=False)  # the last step's loss

    def wait_share(self, skip: int) -> float | None:
        """The share of its timed steps' time spent waiting for their batches, past the
        first ``skip`` (the batches its loader had in flight when the window began,
        whose wait is not the loader's pace); None with fewer than 2 such steps."""
        steady = self.waits[skip:]
        total = sum(step for _, step in steady)
        return min(sum(wait for wait, _ in steady) / total, 1.0) \
            if len(steady) >= 2 and total > 0 else None

    @property
    def loss(self) -> float | None:
        """The mean loss over the seeds of the steps that gave one (None: none did)."""
        return self.loss_sum / self.loss_seeds if self.loss_seeds else None

    def add(self, other: Window) -> None:
        """Counts ``other``'s steps, seeds, seconds and loss in this one."""
        self.steps, self.seeds = self.steps + other.steps, self.seeds + other.seeds
        self.seconds += other.seconds
        self.loss_sum, self.loss_seeds = self.loss_sum + other.loss_sum, \
            self.loss_seeds + other.loss_seeds

    def count(self, seeds: int, loss_sum: Tensor | float) -> Tensor | float:
        """Counts a step of ``seeds`` seeds; returns ``loss_sum`` with its loss (where
        its caller gave one) times its seeds, on the loss's device."""
        self.steps, self.seeds = self.steps + 1, self.seeds + seeds
        if self.given is None:
            return loss_sum
        loss_sum, self.loss_seeds = loss_sum + self.given * seeds, self.loss_seeds + seeds
        self.given = None
        return loss_sum

    @contextlib.contextmanager
    def step(self, catch: bool = False) -> Iterator[Step]:
        """Around the caller's step on the batch this window yielded last: the loss it
        sets is the window's. With ``catch``, what the step raises (an Exception) is
        kept as the window's :attr:`failure`, which ends it at its next batch;
        otherwise it propagates."""
        step = Step()
        try:
            yield step
        except Exception as exc:
            if not catch:
                raise
            self.failure = exc
        if step.loss is not None:
            self.given = step.loss  # summed on its device, read at the window's end


def timed(pipe: Pipeline, window: Window) -> Iterator:
    """Yields ``pipe``'s batches, each on its device, until its loader is spent or a
    batch or a caught step (:meth:`Window.step`) fails, and times them into
    ``window``: its whole seconds, from the loader's start (its workers resumed and
    its first batch) to its last step, and its rate over them, with no host sync a
    step. The first step is timed too: a window's loader holds that window's seeds
    alone, so its workers sample every batch of it within it, the most at its start
    while they fill their queue, and its later steps run beside idle workers: a rate
    after the first step would count their head start as speed (docs/measurement.md,
    "A window's rate", has the figures). A loader's failure is kept as ``window.error``; the window's figures are whole
    also where its consumer stops early (the generator closed)."""
    sync = device_sync(pipe.device)
    loss_sum = 0.0  # the loss summed by seeds: no host sync a step
    sync()
    started = resumed = time.perf_counter()
    try:
        for batch in pipe.loader:
            seeds = pipe.task.seeds(batch)
            if not pipe.config.gpu_sampling:  # GPU-resident batches are built there
                batch = batch.to(pipe.device, non_blocking=True)
            arrived = time.perf_counter()
            try:
                yield batch
            finally:  # the step counts also where its consumer stops after it
                now = time.perf_counter()
                if window.steps:  # the first step's wait is the loader's start
                    window.waits.append((arrived - resumed, now - resumed))
                resumed = now
                if window.failure is None:
                    loss_sum = window.count(seeds, loss_sum)
            check_interrupt()  # Ctrl-C that Python swallowed (autotune.files)
            if window.failure is not None:
                raise window.failure
        sync()
    except Exception as exc:  # the caller decides: a candidate's failure, or the run's
        window.error = exc
    except GeneratorExit:  # its consumer stopped (a training budget spent)
        sync()
        raise
    finally:
        window.seconds, window.loss_sum = time.perf_counter() - started, float(loss_sum)
        window.rate = window.seeds / window.seconds if window.seeds and window.seconds > 0 \
            else 0.0


class BatchSource(Protocol):
    """What the epoch loop trains from: an epoch's batches, each trained inside
    :meth:`step` on :attr:`current`'s pipeline; :attr:`pipe` the pipeline whose
    model is evaluated and kept; :attr:`totals` the last epoch's steps, seeds,
    seconds and loss; :attr:`log` what a run that tunes itself did (None
    otherwise)."""

    pipe: Pipeline
    current: Pipeline
    totals: Window
    log: Any

    def batches(self, number: int) -> Iterator: ...

    def step(self) -> contextlib.AbstractContextManager[Step]: ...

    def close(self) -> None: ...

    def __enter__(self) -> BatchSource: ...

    def __exit__(self, *exc) -> None: ...


class PipelineSource:
    """One pipeline's batches, each epoch a single window of them (the loader's own
    order). ``close()`` ends its loader's workers."""

    log = None

    def __init__(self, pipe: Pipeline) -> None:
        self.pipe = self.current = pipe
        self.totals = Window()

    def batches(self, number: int) -> Iterator:
        """Epoch ``number``'s batches; a loader's failure raises."""
        self.totals = window = Window()
        with self.pipe.activate():
            yield from timed(self.pipe, window)
        if window.error is not None:
            raise window.error

    def step(self) -> contextlib.AbstractContextManager[Step]:
        """Around the step on the batch :meth:`batches` yielded last."""
        return self.totals.step()

    def close(self) -> None:
        self.pipe.close()

    def __enter__(self) -> PipelineSource:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def handover_seconds(batch) -> float:
    """What a loader worker's hand-over of ``batch`` costs that sampling in the
    training process never pays, at least: its tensors moved into shared memory (new
    shared pages, their bytes copied in), as torch's worker does before it queues a
    batch, timed on private host copies (``batch`` itself stays where it is, on its
    device: a worker hands batches over on the host either way). The training
    process's first touch of those pages, on its side, is not counted: a lower
    bound."""
    tensors = [value.detach().to("cpu", copy=True) for store in batch.stores
               for value in store.values() if isinstance(value, Tensor)]
    start = time.perf_counter()
    for tensor in tensors:
        tensor.share_memory_()
    return time.perf_counter() - start
