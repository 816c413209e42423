"""A paired confirmation's window length on this machine, from its earlier pairs.

Kalibera and Jones split a benchmark's repetitions between its levels by the
variance a dry run measured at each. Within a window the split cannot be read
(docs/measurement.md, "Why not split it from within a window"): only pairs measured
at each length tell, and which length reaches a precision soonest differs from one
machine to the next, quiet or busy. So every paired confirmation records its pairs'
spread and pace at its length, quiet or busy, in a file of this machine's under the
studies folder (:func:`history_path`, by host and CPU), and the next one in the same
state chooses from them (:func:`choose`, by its :class:`Lengths`):

- until its first length has :data:`MIN_DOF` degrees of freedom of pairs: that one
  (:data:`WINDOW_S` quiet, :data:`BUSY_WINDOW_S` busy);
- then the other is tried: quiet, where 0.5-s pairs spread :data:`TRY_SPREAD` or more
  (where they spread that wide, 1-s ones reached ±10% as soon or sooner; where they
  spread less, 0.5 s was the soonest: docs/measurement.md); busy, always (beside a
  training 1-s windows were the soonest on the AVX2-only EPYC, 0.5-s ones on an AMX
  Xeon). A try goes back to the first length within the confirmation once its own
  pairs show it costlier (:func:`autotune.trial.costlier`), and is not tried again
  while its recorded pairs show it so;
- once both are known, the one whose pairs reach a precision soonest: the least
  ``spread ** 2 * seconds a pair``.

Each length keeps its latest :data:`KEEP` confirmations of each state, and those older
than :data:`MAX_AGE_S` are not read.
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from autotune.env import isa_key
from autotune.files import atomic_write
from autotune.storage import file_lock
from autotune.trial import BUSY_WINDOW_S, WINDOW_S, Known, TrialResult, costlier, known_of

MIN_DOF = 24  # a length's spread is known to about ±15% (one standard error) from this many
TRY_SPREAD = 0.12  # a quiet machine's 0.5-s pairs spread this wide: 1 s is worth a try
KEEP = 20  # the confirmations a length keeps of each state (the latest)
# How far the ratio of two windows is taken to vary (a log spread) until this machine's
# pairs in that state are known: about the noisier machines' 0.5-s and 1-s pairs,
# quiet and beside a training (docs/benchmarks.md, pair_windows.py). A guess too wide
# races a config or two more in the confirmation; one too narrow can leave the
# fastest out of it
UNKNOWN_SPREAD = {False: 0.10, True: 0.15}
MAX_AGE_S = 30 * 86400  # older ones are not read: a host's neighbours and load change


@dataclass(frozen=True)
class Lengths:
    """The window lengths of one state of the machine: the ``first`` a machine takes,
    the ``other`` it may try, once the first's pairs spread ``try_spread`` or more."""

    first: float
    other: float
    try_spread: float


LENGTHS = {False: Lengths(WINDOW_S, 1.0, TRY_SPREAD),  # quiet
           True: Lengths(BUSY_WINDOW_S, WINDOW_S, 0.0)}  # busy


@dataclass(frozen=True)
class Choice:
    """A confirmation's window length, and why, in words ("" where the record keeps
    the state's first length without a comparison); ``busy``: chosen for a busy
    machine (its pairs are recorded as such); ``back_to``: where the length is a try,
    what the record knows of the state's first length, which the pairs go back to once
    the try is known costlier; ``noise``: how far a pair at ``window_s`` is taken to
    spread, which the confirmation's focus reads before its own pairs show it: the
    record's, where the record chose the length (:data:`MIN_DOF` degrees of freedom at
    least), else :meth:`MachineRecord.spread`'s (None: a try, whose pairs show it)."""

    window_s: float
    why: str = ""
    busy: bool = False
    back_to: Known | None = None
    noise: float | None = None


def history_path(studies_dir: str | os.PathLike) -> Path:
    """This machine's record of its paired confirmations:
    ``STUDIES_DIR/.cache/pairs/HOST-ISA.json`` (:func:`autotune.env.isa_key`): a
    studies folder that several hosts share keeps one each."""
    return Path(studies_dir) / ".cache" / "pairs" / f"{socket.gethostname()}-{isa_key()}.json"


def read(path: Path) -> list[dict]:
    """The entries recorded in ``path`` ([] where it does not exist); raises
    ValueError where it cannot be read as such."""
    try:
        blob = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} cannot be read ({err})") from err
    if not isinstance(blob, dict) or not isinstance(blob.get("entries"), list):
        raise ValueError(f"{path} holds no list of entries")
    for entry in blob["entries"]:
        if not _valid(entry):
            raise ValueError(f"{path} holds an entry that is not one: {entry!r:.120}")
    return blob["entries"]


def _valid(entry: Any) -> bool:
    """Whether ``entry`` has the fields :func:`entries_of` writes, each a number in range."""
    if not isinstance(entry, dict) or not isinstance(entry.get("busy", False), bool):
        return False
    fields = [entry.get(k) for k in ("window_s", "at", "dof", "squares", "pair_s")]
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
               for v in fields) and entry["window_s"] > 0 and entry["pair_s"] > 0


def known(entries: list[dict], window_s: float, busy: bool = False,
          now: float | None = None) -> Known | None:
    """The pooled figures of ``entries`` of this state at ``window_s``, within
    :data:`MAX_AGE_S` of ``now`` (None: none)."""
    since = (time.time() if now is None else now) - MAX_AGE_S
    mine = [e for e in entries if e["window_s"] == window_s and e["at"] >= since
            and bool(e.get("busy", False)) == busy]
    dof = sum(int(e["dof"]) for e in mine)
    if not dof:
        return None
    spread = math.sqrt(sum(float(e["squares"]) for e in mine) / dof)
    pair_s = sum(float(e["pair_s"]) * int(e["dof"]) for e in mine) / dof
    return Known(window_s, spread, dof, pair_s)


def choose(entries: list[dict], busy: bool = False, now: float | None = None) -> Choice:
    """The window length for this machine's next confirmation in this state (the
    module's rule), and why."""
    lengths = LENGTHS[busy]
    first, other = (known(entries, w, busy, now) for w in (lengths.first, lengths.other))
    state = " busy" if busy else ""
    if first is None or first.dof < MIN_DOF:
        return Choice(lengths.first, busy=busy)
    if other is None or other.dof < MIN_DOF:
        if first.spread < lengths.try_spread:
            return Choice(lengths.first, busy=busy, noise=first.spread)
        if other is not None and costlier(other, first):
            return Choice(lengths.first, f"this machine's{state} pairs of {other.words()} "
                                         f"({other.dof} degrees of freedom) were costlier "
                                         f"than of {first.words()}", busy, noise=first.spread)
        return Choice(lengths.other, f"tried, this machine's{state} pairs of {first.words()} "
                                     f"({first.dof} degrees of freedom); back to "
                                     f"{first.window_s:g} s once its own pairs show the try "
                                     f"costlier", busy, back_to=first)
    best = min((first, other), key=lambda k: k.cost)
    return Choice(best.window_s, f"this machine's{state} pairs reach a precision soonest "
                                 f"there: {first.words()}; {other.words()}", busy,
                  noise=best.spread)


def least_spread(entries: list[dict], busy: bool = False,
                 now: float | None = None) -> float | None:
    """The least spread of this state's pairs at either length (None: none known): how
    far the ratio of two windows measured side by side varies on this machine, the
    least it was seen to. Two windows minutes apart vary at least as much. A length
    with fewer than :data:`MIN_DOF` degrees of freedom counts only where no length has
    that many (then the one with the most): a try that went back after a few pairs
    can read low by chance."""
    lengths = LENGTHS[busy]
    both = [k for k in (known(entries, w, busy, now) for w in (lengths.first, lengths.other))
            if k is not None]
    sure = [k for k in both if k.dof >= MIN_DOF]
    if not sure and both:
        sure = [max(both, key=lambda k: k.dof)]
    return min((k.spread for k in sure), default=None)


def entries_of(result: TrialResult, choice: Choice) -> list[dict]:
    """What a paired trial measured in ``choice``'s windows adds to the record: for
    each length its pairs ran in (two where a try went back), its candidates' log
    ratios' squared deviations around each one's mean, their degrees of freedom and a
    pair's seconds (:func:`autotune.trial.known_of`); none where it has none to add
    (failed, no candidate with two pairs at a length, or a quiet machine's that kept a
    disturbed pair)."""
    if not result.ok or not result.pairs:
        return []
    candidates = result.pairs.get("candidates", [])
    if not choice.busy and any(c.get("busy_pairs") for c in candidates):
        return []
    used = [choice.window_s] + ([] if choice.back_to is None else [choice.back_to.window_s])
    out = []
    for window_s in used:
        got = known_of([c.get("pairs", []) for c in candidates], window_s)
        if got is not None:
            out.append({"window_s": window_s, "busy": choice.busy, "at": time.time(),
                        "dof": got.dof, "squares": got.spread ** 2 * got.dof,
                        "pair_s": got.pair_s})
    return out


def record(path: Path, entry: dict) -> None:
    """Adds ``entry`` to ``path``'s record (the latest :data:`KEEP` of its length
    kept), under a lock, replacing the file whole; raises ValueError where the
    record there cannot be read (it is left as it is)."""
    with file_lock(path.with_name(path.name + ".lock")):
        entries = read(path)
        key = (entry["window_s"], entry["busy"])
        same = [e for e in entries if (e["window_s"], e.get("busy", False)) == key]
        kept = [e for e in entries if (e["window_s"], e.get("busy", False)) != key] + \
            same[-(KEEP - 1):] + [entry]
        atomic_write(path, json.dumps({"entries": kept}, indent=1) + "\n")


class MachineRecord:
    """A search's reading of this machine's record (:func:`history_path` under
    ``studies_dir``) and its one addition to it. A record that cannot be read is said
    once through ``note`` and left as it is: the confirmation then takes its state's
    first length and adds nothing."""

    def __init__(self, studies_dir: str | os.PathLike, note: Callable[[str], None]) -> None:
        self.path, self.note, self.readable = history_path(studies_dir), note, True

    def choice(self, busy: bool) -> Choice:
        """The next confirmation's length in this state (:func:`choose`); where the
        record knows too little of that length to say how far its pairs spread, with
        the :meth:`spread` it knows or guesses, so that a confirmation whose time
        cannot confirm every config focuses from each one's first pair on, a fresh
        folder's first too, rather than after the rule's least pairs of each."""
        try:
            choice = choose(read(self.path), busy)
        except ValueError as err:
            self.unreadable(err)
            choice = Choice(LENGTHS[busy].first, busy=busy)
        if choice.noise is None and choice.back_to is None:
            return replace(choice, noise=self.spread(busy))
        return choice

    def spread(self, busy: bool) -> float:
        """:func:`least_spread` of this state's pairs; :data:`UNKNOWN_SPREAD` where
        none are known."""
        try:
            known_spread = least_spread(read(self.path), busy)
        except ValueError as err:
            self.unreadable(err)
            known_spread = None
        return UNKNOWN_SPREAD[busy] if known_spread is None else known_spread

    def add(self, result: TrialResult, choice: Choice) -> None:
        """Records the pairs of a paired trial measured in ``choice``'s windows
        (:func:`entries_of`), if it has any."""
        for entry in entries_of(result, choice) if self.readable else []:
            try:
                record(self.path, entry)
            except (ValueError, OSError) as err:
                self.unreadable(err)
                return

    def unreadable(self, err: Exception) -> None:
        if self.readable:
            self.note(f"warning: this machine's record of its paired windows is not used "
                      f"or added to: {err}")
        self.readable = False
