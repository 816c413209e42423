"""Tuning inside the caller's own training loop (:class:`TunedLoop`): what ``autotune
train --tune`` does under its own loop (:class:`autotune.tuning.TunedRun`), under the
caller's, who keeps the model, the optimizer, the loss and the step."""
from __future__ import annotations

import os
from typing import Callable, Iterator

import torch

from autotune.config import TrialConfig
from autotune.export import load_config
from autotune.pipeline import Step
from autotune.tuning._log import TuneLog, WindowEvent
from autotune.tuning._run import TunedRun
from autotune.tuning._spec import TuneSpec


class TunedLoop:
    """Batches for the caller's own training loop from a loader that tunes itself.

    ``batches()`` yields one epoch's batches (every training seed once, on the
    config's device); the caller trains each inside ``step()``, calling ``model`` (the
    compiled model where the config compiles) under ``autocast()`` on
    ``edges(batch)``. Meanwhile the loop tries the knobs that leave what is learnt
    unchanged (loader workers, core affinity, sampling backend, sparse aggregation; the
    AMP and feature dtypes with ``TuneSpec(precision=True)``, not the dropout masks:
    the caller's model draws its own), each candidate's window
    paired with the incumbent's around it, and settles within ``tune.share`` of the
    ``epochs`` planned. ``model`` and ``optimizer`` are the caller's and stay so: every
    candidate trains them. A candidate whose batch or step raises is recorded and
    dropped, and the batch trains again on the incumbent. ``on_line`` hears each
    verdict, ``on_window`` each window (:class:`autotune.study.RunRecorder`'s
    ``window`` records them as a study). ``config`` is the incumbent's, ``log`` what
    the loop tried. ``close()`` (or the ``with`` block's end) ends the loaders' workers.

    Example::

        with autotune.TunedLoop(data, model, optimizer, epochs=3) as loop:
            for epoch in range(3):
                for batch in loop.batches():
                    with loop.step() as step, loop.autocast():
                        out = loop.model(batch.x, loop.edges(batch))[:batch.batch_size]
                        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
                        step.loss = loss.detach()
        print(loop.config)
    """

    def __init__(self, data, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 config: TrialConfig | str | os.PathLike | None = None, *, epochs: int,
                 tune: TuneSpec | None = None, cache_file: str | os.PathLike | None = None,
                 on_line: Callable[[str], None] | None = None,
                 on_window: Callable[[WindowEvent, TuneLog], None] | None = None) -> None:
        if config is None:
            config = TrialConfig(device=next(model.parameters()).device.type)
        elif not isinstance(config, TrialConfig):
            config = load_config(config)
        self._run = TunedRun(config, data, tune or TuneSpec(), epochs=epochs,
                             cache_file=cache_file, on_line=on_line, on_window=on_window,
                             model=model, optimizer=optimizer, counts_edges=True)
        self._epochs = 0

    def batches(self) -> Iterator:
        """The next epoch's batches."""
        self._epochs += 1
        return self._run.batches(self._epochs)

    def step(self):
        """Around the step on the last batch (a context manager yielding a
        :class:`Step`, whose ``loss`` the window records where it is set)."""
        return self._run.step()

    @property
    def model(self) -> torch.nn.Module:
        """The model to call on this batch: compiled where its config compiles."""
        return self._run.current.model

    def autocast(self):
        """This batch's config's autocast (disabled under float32)."""
        return self._run.current.autocast()

    def edges(self, batch):
        """What the model aggregates over: ``batch.edge_index``, or its CSR adjacency
        where this batch's config aggregates sparse. A step that never calls it leaves
        an aggregation candidate ``unused``, and the run says so."""
        if self._run.current is not self._run.pipe:
            self._run.edges_asked += 1
        return self._run.current.edges(batch)

    @property
    def config(self) -> TrialConfig:
        return self._run.pipe.config

    @property
    def log(self) -> TuneLog:
        return self._run.log

    @property
    def settled(self) -> bool:
        return self._run.log.settled_step is not None

    def close(self) -> None:
        self._run.close()

    def __enter__(self) -> TunedLoop:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Step", "TunedLoop"]
