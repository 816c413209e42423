"""Whole epochs with a config, tuned or not (:func:`train`, which ``autotune train``
calls): the one place that picks the source the epoch loop trains from."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from autotune.config import TrialConfig
from autotune.pipeline import Epoch, PipelineSource, TrainResult, build, prepare_training, \
    train_from
from autotune.tuning._log import TuneLog, WindowEvent
from autotune.tuning._run import TunedRun
from autotune.tuning._spec import TuneSpec

if TYPE_CHECKING:
    from autotune.data import Dataset, DatasetRef


def train(config: TrialConfig | str | os.PathLike, dataset: DatasetRef | Dataset, *,
          epochs: int, save: str | os.PathLike | None = None,
          on_epoch: Callable[[Epoch], None] | None = None,
          inductor_cache: str | os.PathLike | None = None, tune: TuneSpec | bool | None = None,
          on_line: Callable[[str], None] | None = None,
          on_window: Callable[[WindowEvent, TuneLog], None] | None = None) -> TrainResult:
    """Trains with every knob of ``config`` (a ``TrialConfig``, or a file written by
    ``autotune export``) for ``epochs`` whole epochs on ``dataset`` (a
    :class:`autotune.DatasetRef`, prepared here, or a prepared dataset), evaluating
    the task's metric on validation and test after each. The best validation epoch's
    weights are kept and, with ``save``, written there (``torch.save``), also when
    Ctrl-C stops the training (:class:`autotune.TrainingInterrupted`). A compiled
    config reuses the kernels its search compiled: ``inductor_cache`` (default the
    studies folder's, :func:`autotune.files.inductor_cache_dir`), unless
    ``TORCHINDUCTOR_CACHE_DIR`` is set. With ``tune`` (:class:`TuneSpec`, or True) the
    run tunes itself (:class:`TunedRun`; ``on_line`` hears what it decides,
    ``on_window`` each window it trains), its winner the config."""
    tune = TuneSpec() if tune is True else tune or None
    config, prepared, cache = prepare_training(config, dataset, inductor_cache)
    source = PipelineSource(build(config, prepared.data, num_classes=prepared.num_classes,
                                  cache_file=cache)) if tune is None else \
        TunedRun(config, prepared.data, tune, epochs=epochs, num_classes=prepared.num_classes,
                 cache_file=cache, on_line=on_line, on_window=on_window)
    return train_from(source, prepared, epochs=epochs, save=save, on_epoch=on_epoch)
