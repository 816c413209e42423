"""The trial process: ``python -m autotune.trial._worker SPEC.json RESULT.json``.

Started by ``_runner.py`` as a fresh interpreter, or forked by ``_forkserver.py``
(which then calls :func:`main`). It memory-maps the prepared
dataset, builds the pipeline, measures it and writes a ``TrialResult`` as JSON.
Any exception becomes an ``error`` (or ``oom``) result with its traceback.

torch, PyG and the pipeline are imported inside :func:`run`, timed apart as the
trial's start-up (a forked trial finds them imported by the fork server already),
and the fork server imports this module before them.

``AUTOTUNE_TEST_FAULT`` set, it loads the test suite's fault hook
(:mod:`autotune.trial._faults`); unset, that module is never imported.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from autotune.env import end_quickly
from autotune.files import atomic_write
from autotune.logging import get_logger

log = get_logger(__name__)

FAULT_ENV = "AUTOTUNE_TEST_FAULT"  # the test suite's fault injection: see _faults.py


def _fault(trial_dir: Path):
    """The test suite's fault hook, imported only where a test asks for one."""
    if not os.environ.get(FAULT_ENV):
        return None
    from autotune.trial._faults import fault_hook

    return fault_hook(os.environ[FAULT_ENV], trial_dir)


def run(spec: dict, trial_dir: Path) -> dict:
    """Loads, builds, measures; returns the ``TrialResult`` as a dict."""
    t_start = time.time()
    import torch_geometric.loader  # noqa: F401  (timed apart: PyG imports torch._dynamo)

    from autotune.config import TrialConfig
    from autotune.data import DatasetRef
    from autotune.trial._window import MeasureSpec, measure
    from autotune.pipeline import build

    t_imported = time.time()
    config = TrialConfig.from_dict(spec["config"])
    ref = DatasetRef(**spec["dataset"])
    dataset = ref.load()
    t_loaded = time.time()
    if spec.get("gpu_memory_limit") and config.device == "cuda":
        import torch

        from autotune.pipeline import limit_gpu_memory

        limit_gpu_memory(spec["gpu_memory_limit"], torch.device(config.device))
    pipe = build(config, dataset.data, num_classes=dataset.num_classes,
                 cache_file=ref.csc_path())
    t_built = time.time()
    if spec.get("train"):
        return _train(spec, config, dataset, pipe, t_start, t_loaded, t_built)
    if spec.get("pairs"):
        return _paired(spec, config, ref, dataset, pipe, t_start, t_imported, t_loaded, t_built)
    fault = _fault(trial_dir)
    asked = MeasureSpec.from_dict(spec.get("measure", {}))
    guard_run = asked.guard
    mark = GuardMark(pipe, guard_run.budget_s) if guard_run and guard_run.budget_s and \
        config.compile_mode == "none" else None  # a warm-up that compiles is no training
    hooks = [h for h in ((lambda step: fault(step, pipe)) if fault else None, mark) if h]
    m = measure(pipe, asked, on_step=(lambda step: [h(step) for h in hooks]) if hooks else None,
                quiet=tuple(spec.get("quiet_pids", ())))
    t_done = time.time()
    profiled, warnings = _profile(pipe, spec.get("profile"))
    result = _measured(spec, config, dataset, m, profiled, warnings, {
        "startup": t_imported - spec["spawned_at"],
        "interpreter_start": t_start - spec["spawned_at"],
        "imports": t_imported - t_start, "dataset_load": t_loaded - t_imported,
        "build": t_built - t_loaded, "loader_start": m.loader_start_s,
        "warmup": sum(m.warmup_step_times_s), "window": m.window.wall_s,
        "measure_total": t_done - t_built})
    if guard_run is not None and (guard_run.always or not m.window.screened) and \
            guard_run.wanted(*result.objectives()):
        result = dataclasses.replace(result, training=_guard_training(
            guard_run, mark, pipe, m, config, ref, dataset))
    return _unless_diverged(result)


def _paired(spec: dict, config, ref, dataset, pipe, t_start: float, t_imported: float,
            t_loaded: float, t_built: float) -> dict:
    """A paired trial (:mod:`autotune.trial._pairs`): ``config`` the reference, the
    spec's ``pairs`` candidates, each built here and measured in turn."""
    from autotune.env import fingerprint
    from autotune.pipeline import build
    from autotune.trial._pairs import PairSpec, measure_paired
    from autotune.trial._result import MemoryStats, TrialResult
    from autotune.trial._window import MeasureSpec

    asked = PairSpec.from_dict(spec["pairs"])
    others = [build(c, dataset.data, num_classes=dataset.num_classes, cache_file=ref.csc_path())
              for c in asked.candidates]
    t_others = time.time()
    paired = measure_paired(pipe, others, MeasureSpec.from_dict(spec.get("measure", {})),
                            asked, quiet=tuple(spec.get("quiet_pids", ())))
    t_done = time.time()
    for each in [pipe, *others]:
        each.close()
    return TrialResult(
        status="ok", config=config, memory=MemoryStats(
            peak_rss_window_bytes=paired["peak_rss_bytes"],
            rss_covers="the paired trial's process and every config's loader workers"),
        env=fingerprint(config.device), dataset=dataset.stats(), pairs=paired,
        phases_s={"startup": t_imported - spec["spawned_at"], "imports": t_imported - t_start,
                  "dataset_load": t_loaded - t_imported, "build": t_others - t_loaded,
                  "measure_total": t_done - t_others,
                  "warmup": sum(sum(w) for w in paired["warmup_step_times_s"])}).to_dict()


def _guard_training(guard_run, mark, pipe, m, config, ref, dataset) -> dict:
    """The guard's training after a measurement: on from the window where a
    ``mark`` followed it (:func:`_guard_on`), else (the baseline, whole epochs from
    the start, and a compiled config, whose warm-up spent its time compiling) on a
    pipeline built afresh (:func:`_guard`)."""
    if mark is not None:
        with pipe:
            return _guard_on(pipe, m, mark, dataset.data)
    pipe.close()  # the measured pipeline's loader workers go before the guard's
    del pipe, m
    return _guard(guard_run, config, ref, dataset)


def _measured(spec: dict, config, dataset, m, profiled: dict, warnings: tuple,
              phases_s: dict):
    """The ``TrialResult`` of a measurement ``m`` (:func:`autotune.trial._window.measure`)."""
    from autotune.env import fingerprint
    from autotune.trial._result import TrialResult

    return TrialResult(
        status="ok", config=config, step_times_s=tuple(m.step_times_s),
        seeds_per_step=tuple(m.seeds), nodes_per_step=tuple(m.nodes),
        edges_per_step=tuple(m.edges), warmup_step_times_s=tuple(m.warmup_step_times_s),
        losses=tuple(m.losses), memory=m.memory, compile=m.compile,
        observed=dataclasses.replace(m.observed, trial_start=spec.get("trial_start", "")),
        window=m.window, dataset=dataset.stats(), env=fingerprint(config.device),
        warnings=tuple(m.warnings) + warnings, profile=profiled, phases_s=phases_s)


class GuardMark:
    """The guard's budget inside the measurement. The warm-up and the window train
    the measured model from the seed's fresh weights, as the guard's training
    would, so they are its first steps. Called before each step, the mark keeps a
    copy of the weights once the steps so far have taken ``budget_s`` (on CUDA by
    the host's clock, a few queued steps ahead of the device); the copy is a
    fraction of a batch's activations. (The probe's one step after the window
    trains too, uncounted.)"""

    def __init__(self, pipe, budget_s: float) -> None:
        self.pipe, self.budget_s = pipe, budget_s
        self.started: float | None = None
        self.weights: dict | None = None
        self.steps, self.trained_s = 0, 0.0

    def __call__(self, step: int) -> None:
        now = time.perf_counter()
        if self.started is None:
            self.started = now
        elif self.weights is None and now - self.started >= self.budget_s:
            self.steps, self.trained_s = step, now - self.started
            self.weights = {k: v.detach().clone()
                            for k, v in self.pipe.model.state_dict().items()}


def _guard_on(pipe, m, mark: GuardMark, data) -> dict:
    """The guard's training on the measured pipeline (see :class:`GuardMark`): the
    weights it had when its steps reached the budget, or, where the warm-up and the
    window were shorter, trained on for what is left of the budget; then evaluated
    on the validation split. The training dict's ``from_window`` says how many
    steps and seconds the measurement gave."""
    from autotune.pipeline import Training, TrainSpec, evaluate, fit

    def train():
        steps = len(m.warmup_step_times_s) + len(m.step_times_s)
        trained_s = sum(m.warmup_step_times_s) + sum(m.step_times_s)
        training = Training()
        if mark.weights is not None:
            pipe.model.load_state_dict(mark.weights)
            steps, trained_s = mark.steps, mark.trained_s
        elif trained_s < mark.budget_s:  # else it ended within a step of the budget
            training = fit(pipe, data, TrainSpec(budget_s=mark.budget_s - trained_s,
                                                 evaluate_test=False, every_epoch=False))
        val = training.val_metric
        if val is None:
            with pipe.activate():
                val = evaluate(pipe, data, "val")
        return training, {"val_metric": val, "train_s": trained_s + training.train_s,
                          "from_window": {"steps": steps, "train_s": trained_s}}

    return _guard_record(train)


def _guard(run, config, ref, dataset) -> dict:
    """The accuracy guard's training (a :class:`autotune.specs.GuardRun`) on a pipeline
    built afresh, so it starts where a fresh process would."""
    import gc

    from autotune.pipeline import build
    from autotune.pipeline import TrainSpec, fit

    def train():
        with build(config, dataset.data, num_classes=dataset.num_classes,
                   cache_file=ref.csc_path()) as pipe:
            return fit(pipe, dataset.data, TrainSpec(
                epochs=run.epochs, budget_s=run.budget_s, evaluate_test=False,
                every_epoch=False)), {}

    gc.collect()
    return _guard_record(train)


def _guard_record(train) -> dict:
    """Runs ``train`` (which returns the ``Training`` and what to add to its dict),
    timed: the training dict with ``guard_s`` (training and evaluation, and the
    build where there is one), or ``error`` where it failed or diverged (the
    measurement stands; the search fails the trial's guard)."""
    started = time.time()
    try:
        training, extra = train()
    except Exception as exc:  # recorded: the search fails the trial's guard with it
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}", "guard_s": time.time() - started}
    losses = [e.loss for e in training.epochs]
    if not all(map(_finite, losses)):
        return {"error": f"training diverged: non-finite loss {losses}",
                "guard_s": time.time() - started}
    return {**training.to_dict(), **extra, "guard_s": time.time() - started}


def _profile(pipe, asked: dict | None) -> tuple[dict, tuple[str, ...]]:
    """The profile ``autotune trial --profile`` asked for, after the window. A profile
    that fails leaves the measurement standing and says why in a warning."""
    if not asked:
        return {}, ()
    from autotune.trial._profile import ProfileSpec, profile_steps

    try:
        return profile_steps(pipe, ProfileSpec(**asked)), ()
    except Exception as exc:  # recorded: the CLI reports it and exits non-zero
        traceback.print_exc()
        reason = f"{type(exc).__name__}: {exc}"
        return {"error": reason}, (f"profile failed: {reason}",)


def _train(spec: dict, config, dataset, pipe, t_start: float, t_loaded: float,
           t_built: float) -> dict:
    """Train mode (the accuracy guard): trains for the spec's epochs or budget and
    reports the training, validation accuracy included, instead of a measurement."""
    from autotune.env import fingerprint
    from autotune.trial._result import TrialResult
    from autotune.pipeline import TrainSpec, fit

    with pipe:
        training = fit(pipe, dataset.data, TrainSpec(**spec["train"]))
    return _unless_diverged(TrialResult(
        status="ok", config=config, losses=tuple(e.loss for e in training.epochs),
        dataset=dataset.stats(), env=fingerprint(config.device), training=training.to_dict(),
        phases_s={"spawn_and_load": t_loaded - spec["spawned_at"], "build": t_built - t_loaded,
                  "train": training.train_s, "total": time.time() - t_start}))


def _unless_diverged(result) -> dict:
    """The result as a dict, or an error result when a loss was not finite."""
    if not all(map(_finite, result.losses)):
        return result.failed("error", result.config, "training diverged: non-finite loss "
                             f"{list(result.losses)}").to_dict()
    return result.to_dict()


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def _failure(spec: dict, exc: BaseException) -> dict:
    from autotune.config import TrialConfig
    from autotune.trial._result import TrialResult

    oom = isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
    reason = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (EOFError, ConnectionResetError)):
        reason += " (the connection to a DataLoader worker closed: a loader worker died?)"
    return TrialResult.failed("oom" if oom else "error", TrialConfig.from_dict(spec["config"]),
                              reason,
                              stderr_tail=traceback.format_exc()[-4000:]).to_dict()


def _write(path: Path, blob: dict) -> None:
    atomic_write(path, json.dumps(blob))


def die_with_parent() -> None:
    """Asks Linux to SIGKILL this process when its parent dies (the runner, or the
    fork server, which dies with the runner), say on kill -9 of the search, so no
    orphaned trial keeps measuring. Loader workers notice their
    parent's death themselves (torch's worker watchdog)."""
    import ctypes

    pr_set_pdeathsig = 1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("worker: prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())


def main(argv: list[str] | None = None) -> int:
    import faulthandler

    end_quickly()
    faulthandler.enable()  # a segfault leaves its Python stack in stderr.log
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the runner's "where are you?"
    die_with_parent()
    spec_path, result_path = map(Path, (argv or sys.argv[1:])[:2])
    if os.getppid() == 1:  # the runner died before the request above took effect
        return 1
    spec = json.loads(spec_path.read_text())
    # The trial's session is this pid: a forked trial's command line is the fork
    # server's, so this file is how a reader finds the trial's processes.
    atomic_write(spec_path.parent / "worker.pid", f"{os.getpid()}\n")
    try:
        blob = run(spec, spec_path.parent)
    except BaseException as exc:  # recorded, never swallowed: it goes into the result
        # torch's SIGCHLD handler raises again for each dead loader worker, which would
        # cut this handler short and lose the result: the failure is known now.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _write(result_path, _failure(spec, exc))
        traceback.print_exc()
        return 1
    _write(result_path, blob)
    return 0 if blob["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
