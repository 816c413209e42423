"""What a fork costs the training process's next windows: copies on write.

    python benchmarks/fork_cow.py --scale 0.1 --root data --out benchmarks/results/fork-cow.json

One process trains online.py's precision oracle config (w0, bfloat16 autocast and
features, sparse aggregation, bit dropout masks) in windows of 3 steps, as a tuned
run's pairs do, and times each window (seed nodes a second): ``--windows`` before
anything is forked; then after an idle child is forked (``os.fork``, asleep), the
same again, and after it is gone; then after a one-worker loader's iterator is
started beside the pipeline (a tuned run's workers candidate: its worker forked, its
batches taken for 3 steps, then left idle), the same again, and after its workers
end. Each page the training process writes first after a fork, shared with the child
until then, is copied: the window right after it pays that (autotune.tuning's
``TunedRun._warm_up`` trains it outside the pairs). No interval: each block's windows
are given whole, with their median, and the first window after each fork beside the
block's median before it, as a ratio measured side by side in one process.
"""
from __future__ import annotations

import os
import signal
import statistics
import sys
import time

from _common import parser, prepare, write

from autotune.config import TrialConfig
from autotune.pipeline import build

STEPS = 3  # a tuned run's window
CONFIG = TrialConfig(batch_size=1024, num_neighbors=(25, 10), num_workers=0,
                     amp_dtype="bfloat16", feature_dtype="bfloat16", aggregation="sparse",
                     dropout_masks="bits")


class Windows:
    """Windows of :data:`STEPS` steps of ``pipe`` over its loader, epoch after epoch."""

    def __init__(self, pipe) -> None:
        self.pipe, self.batches = pipe, iter(pipe.loader)

    def _next(self):
        try:
            return next(self.batches)
        except StopIteration:
            self.batches = iter(self.pipe.loader)
            return next(self.batches)

    def rate(self) -> float:
        start = time.perf_counter()
        for _ in range(STEPS):
            self.pipe.train_step(self._next())
        return STEPS * self.pipe.config.batch_size / (time.perf_counter() - start)

    def block(self, n: int) -> list[float]:
        return [self.rate() for _ in range(n)]


def idle_child(windows: Windows, n: int) -> dict:
    pid = os.fork()
    if pid == 0:  # the child sleeps until killed: only its pages are shared
        time.sleep(3600)
        os._exit(0)
    try:
        after = windows.block(n)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return {"after_fork": after, "after_child_gone": windows.block(n)}


def idle_worker(windows: Windows, data, n: int) -> dict:
    pipe = windows.pipe
    worker = build(CONFIG.replace(num_workers=1), data, model=pipe.model,
                   optimizer=pipe.optimizer)
    try:
        batches = iter(worker.loader)
        for _ in range(STEPS):  # the candidate's window: its worker forked, then idle
            worker.train_step(next(batches))
        after = windows.block(n)
    finally:
        worker.close()
    return {"after_worker": after, "after_worker_gone": windows.block(n)}


def main() -> None:
    p = parser(__doc__, "benchmarks/results/fork-cow.json")
    p.set_defaults(scale=0.1)
    p.add_argument("--windows", type=int, default=8, help="windows a block")
    args = p.parse_args()
    ref, stats, _ = prepare(args)
    data = ref.prepare().data  # prepared above: loaded from its files
    windows = Windows(build(CONFIG, data))
    windows.block(6)  # warm-up: the allocator's heap and the caches at their pace
    before = windows.block(args.windows)
    child = idle_child(windows, args.windows)
    again = windows.block(args.windows)
    worker = idle_worker(windows, data, args.windows)
    base, base_again = statistics.median(before), statistics.median(again)
    report = {
        "benchmark": "fork_cow", "device": "cpu", "dataset": stats, "scale": args.scale,
        "config": CONFIG.to_dict(), "window_steps": STEPS,
        "precision": "each block's windows whole (seed nodes/s) and their median; no "
                     "interval: the first window after a fork over the median before it",
        "before": before, **child, "before_worker": again, **worker,
        "first_after_fork_over_before": child["after_fork"][0] / base,
        "first_after_worker_over_before": worker["after_worker"][0] / base_again,
        "median_after_fork_over_before": statistics.median(child["after_fork"][1:]) / base,
    }
    write(args.out, report)


if __name__ == "__main__":
    sys.exit(main())
