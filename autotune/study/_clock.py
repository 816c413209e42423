"""The search's time: ``--timeout`` stops new trials; ``--budget`` also bounds the
running one, less the seconds kept for the confirmation; and the ETA the progress
lines show."""
from __future__ import annotations

import math
import statistics
import time

from autotune.env import clock as clock_text, plural
from autotune.study._confirm import Schedule
from autotune.study._options import BUDGET_SHARE
from autotune.study._records import TrialRecord


class Clock:
    """The search's time: ``timeout`` stops new trials, ``budget`` also bounds the
    running one, less the time kept for the confirmation; the ETA is the smaller of
    the trials' pace (the confirmation's measurements included) and the budget's
    rest."""

    def __init__(self, schedule: Schedule, done_at_start: int) -> None:
        self.schedule, self.opts = schedule, schedule.opts
        self.done_at_start, self.start = done_at_start, time.monotonic()
        self.durations: list[float] = []  # each measurement's wall time, this run
        self.overheads: list[float] = []  # what storing each took after its result
        self.confirmed = 0  # the confirmation's measurements so far
        self.confirming = 0  # the confirmation's measurements in all, once it started
        self.why = ""  # why may_start said no

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def budget_left(self) -> float | None:
        return None if self.opts.budget is None else self.opts.budget - self.elapsed()

    def measured(self, record: TrialRecord) -> None:
        """Counts a stored trial: a measurement's time runs from its start until it
        is stored (forking, measuring and storing)."""
        if record.measured_at and record.reused_from is None:
            self.durations.append(time.time() - record.measured_at[0])
            self.overheads.append(time.time() - record.measured_at[1])
        self.confirmed += record.confirm is not None

    def per_measurement(self) -> float:
        """A measurement's typical wall time in this run (the median)."""
        return statistics.median_high(self.durations) if self.durations else 0.0

    def overhead(self) -> float:
        """What storing a measurement typically takes in this run, after its result."""
        return statistics.median_high(self.overheads) if self.overheads else 0.0

    def reserve(self, ahead: int = 0) -> float:
        """The seconds kept for the confirmation of the study's front, each config
        measured as long as its own trial took (:meth:`Schedule.expected_s`);
        ``ahead=1``: with one more candidate as long as this run's typical
        measurement (the next trial may join the front). At most
        :data:`BUDGET_SHARE` of ``budget``, and none where that share is less than a
        confirmation needs to start (:meth:`Schedule.start_s`): time kept for one that
        cannot start would be kept from the trials for nothing."""
        seconds = self.schedule.expected_s(self.per_measurement() if ahead else 0.0,
                                           self.overhead())
        if self.opts.budget is None or not seconds:
            return seconds
        seconds = min(seconds, BUDGET_SHARE * self.opts.budget)
        return seconds if seconds >= self.schedule.start_s() else 0.0

    def may_start(self) -> bool:
        """Whether a trial may start; if not, ``why`` says why."""
        timeout, left = self.opts.timeout, self.budget_left()
        if timeout is not None and self.elapsed() > timeout:
            self.why = f"stopped: --timeout {clock_text(timeout)} has passed"
            return False
        if left is None:
            return True
        reserve = self.reserve(ahead=1)
        if left - reserve > 0:
            return True
        if left <= 0:
            self.why = f"stopped: --budget {clock_text(self.opts.budget)} has run out"
            return False
        self.why = (f"stopped: --budget {clock_text(self.opts.budget)} has "
                    f"{clock_text(max(left, 0.0))} left, kept for the confirmation (about "
                    f"{clock_text(reserve)}, at most {BUDGET_SHARE:.0%} of the "
                    "budget)")
        return False

    def keeps_confirmation(self) -> bool:
        """Whether a confirmation is to come: one is asked for (``--confirm``), and a
        ``budget`` keeps time for it (:meth:`reserve`)."""
        return bool(self.opts.confirm) and (self.opts.budget is None or
                                            self.reserve(ahead=1) > 0)

    def estimate_note(self, n_total: int) -> str | None:
        """After the baseline, the run's first measurement: what the trials left take at
        its pace, and the confirmation, where one is to come and the trials are
        counted (``--n-trials``)."""
        left = self.opts.max_trials - n_total
        if len(self.durations) != 1 or not 0 < left < math.inf:
            return None
        size = self.opts.confirmation_size() if self.keeps_confirmation() else 0
        then = f", then a confirmation of up to {plural(size, 'measurement')}" if size else ""
        take = "takes" if left == 1 and not size else "take"
        return (f"estimate: the baseline took {clock_text(self.elapsed())}; "
                f"{plural(left, 'more trial')} like it{then} {take} about "
                f"{clock_text(self.eta(n_total))} (compiling and guard training take longer)")

    def budget_note(self) -> str | None:
        """After the baseline: how the budget will be spent, or a warning that what is
        left is all kept for the confirmation, so that no other trial starts."""
        left, budget = self.budget_left(), self.opts.budget
        if left is None or budget is None:
            return None
        trial, reserve = self.per_measurement(), self.reserve(ahead=1)
        need = self.schedule.start_s()
        if not reserve and need:
            return (f"budget: {clock_text(left)} of --budget {clock_text(budget)} left after "
                    f"the baseline; a confirmation needs about {clock_text(need)} to start "
                    f"now, more than the {BUDGET_SHARE:.0%} of the budget kept for one, so none "
                    "is kept: trials run to the budget's end and the front stays unconfirmed "
                    f"(--budget {clock_text(need / BUDGET_SHARE)} or more keeps time for one)")
        if left > reserve:
            return (f"budget: {clock_text(left)} of --budget {clock_text(budget)} left after "
                    f"the baseline; trials run while more than the confirmation's reserve is "
                    f"left (about {clock_text(reserve)} now, at most "
                    f"{BUDGET_SHARE:.0%} of the budget)")
        return (f"warning: --budget {clock_text(budget)} has {clock_text(max(left, 0.0))} "
                f"left after the baseline, which took {clock_text(trial)}: all of it is kept "
                f"for the confirmation (about {clock_text(reserve)}), and no other config will "
                f"be measured. Give --budget at least {clock_text(budget - left + trial + reserve)}"
                ", or measure faster (--precision, --max-seconds)")

    def eta(self, n_total: int) -> float:
        n_done = n_total - self.done_at_start
        left_trials = max(self.opts.max_trials - n_total, 0)
        confirmation = self.reserve() if not self.confirming else \
            max(self.confirming - self.confirmed, 0) * self.per_measurement()  # extra rounds
        eta = (self.elapsed() / n_done * left_trials if n_done > 0 else 0.0) + confirmation
        left = self.budget_left()
        return eta if left is None else max(0.0, min(eta, left))
