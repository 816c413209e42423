"""A busy machine, seen and acted on: what else ran on a trial's cores during its
window (:mod:`autotune.trial._load`), the window measured again when other
processes took more than their share, and a confirmation that leaves out a round
the machine disturbed."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from autotune.specs import MeasureSpec, Screen
from autotune.trial import _window
from autotune.trial import Load, LoadMeter, WindowStats, busy_note


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _burner(core: int) -> int:
    """A process that burns ``core``, outside this process's tree (its parent, a
    shell, exits at once): its pid."""
    code = (f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass")
    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{code}" >/dev/null 2>&1 & '
                          "echo $!"], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_a_small_disturbers_cpu_time_is_not_printed_as_nothing():
    """A 0.5-s window's disturbance may be a few hundredths of a CPU second: the
    named process reads 0.03 CPU-s, not 0.0 (a quick start's pair once named a
    ``python`` at 0.0 CPU-s)."""
    load = Load(cores=2, wall_s=0.5, others_s=0.12, share=0.12,
                top=[[8119, "python", 0.03], [0, "steal", 0.4]])
    assert load.named() == "pid 8119 (python) 0.03 CPU-s, the hypervisor (steal) 0.4 CPU-s"


def test_what_no_process_seen_accounts_for_is_said_beside_the_named_ones():
    """A window that lost 0.68 CPU-s names the process that took 0.1 of it, and says
    that no process seen here took the rest, rather than leave the 0.1 to stand for
    the whole; a small remainder is left out, and with nobody seen it says so."""
    top = [[12286, "beam.smp", 0.1]]
    load = Load(cores=2, wall_s=1.0, others_s=0.68, share=0.34, top=top, unseen_s=0.58)
    assert load.named() == ("pid 12286 (beam.smp) 0.1 CPU-s, "
                            "0.6 CPU-s that no process seen here accounts for")
    assert Load(cores=2, others_s=0.12, top=top, unseen_s=0.02).named() == \
        "pid 12286 (beam.smp) 0.1 CPU-s"
    assert Load(cores=2, others_s=0.68, unseen_s=0.68).named() == "no process seen at both ends"
    assert Load.from_dict({"cores": 2, "others_s": 0.3, "top": top}).unseen_s == 0.0


def test_the_windows_of_a_busy_confirmation_name_each_process_once_with_all_it_took():
    """A training beside a confirmation took some of every window: its pairs' line
    named it once per window ("pid 18607 (python) 1.2 CPU-s; pid 18607 (python) 0.6
    CPU-s; ..."). The windows' loads summed name each process once, with all it took
    over them, the most first and the three that took most only; what no process
    seen accounts for is summed too."""
    from autotune.study._paired import who_took

    windows = [Load(cores=2, wall_s=1.0, others_s=1.3, share=0.65, unseen_s=0.5,
                    top=[[18607, "python", 1.2], [2956, "erl_child_setup", 0.1]]),
               Load(cores=2, wall_s=1.0, others_s=0.8, share=0.4, unseen_s=0.3,
                    top=[[18607, "python", 0.6], [77, "kdamond.0", 0.02],
                         [0, "steal", 0.01]]),
               Load(cores=2, wall_s=1.0, others_s=0.2, share=0.1, top=[[9, "sshd", 0.05]])]
    total = Load.summed(windows)
    assert total.top == [[18607, "python", 1.8], [2956, "erl_child_setup", 0.1],
                         [9, "sshd", 0.05]]
    assert (total.wall_s, total.others_s, total.unseen_s) == pytest.approx((3.0, 2.3, 0.8))
    assert total.share == pytest.approx(2.3 / 6)
    assert who_took(w.to_dict() for w in windows) == (
        "pid 18607 (python) 1.8 CPU-s, pid 2956 (erl_child_setup) 0.1 CPU-s, pid 9 (sshd) "
        "0.05 CPU-s, 0.8 CPU-s that no process seen here accounts for")
    assert who_took([]) == ""


def test_a_load_the_hypervisors_steal_took_most_of_is_stolen():
    """On a cloud host whose neighbours are busy, the hypervisor's steal is most of
    what others took (a quick start's baseline: steal 23.8 CPU-s, its parent 0.2): no
    process here for the trials' threads to spin against. A training beside the
    search is not, nor a window that no other process took."""
    steal = Load(cores=2, wall_s=10.0, others_s=24.0, share=0.3,
                 top=[[0, "steal", 23.8], [10800, "python", 0.2]])
    assert steal.stolen
    assert Load.summed([steal, Load(cores=2, wall_s=10.0, others_s=0.0)]).stolen
    shared = Load(cores=2, wall_s=10.0, others_s=12.0, share=0.6,
                  top=[[18607, "python", 7.0], [0, "steal", 5.0]])
    assert not shared.stolen and not Load(cores=2, wall_s=10.0).stolen


@pytest.mark.exclusive
def test_the_meter_tells_the_trials_own_work_from_another_process():
    cores = sorted(os.sched_getaffinity(0))
    meter = LoadMeter()
    meter.start()
    _spin(0.6)
    quiet = meter.stop()
    assert quiet.own_s == pytest.approx(0.6, abs=0.15)
    assert quiet.cores == len(cores)
    pid = _burner(cores[-1])
    try:
        time.sleep(0.2)  # the burner is running
        meter.start()
        _spin(1.0)
        busy = meter.stop()
    finally:
        psutil.Process(pid).kill()
    # the burner took about one of the cores for the whole window
    assert busy.others_s > 0.6 and busy.share > quiet.share + 0.2, (quiet, busy)
    assert busy.top[0][0] == pid and busy.top[0][1].startswith("python"), busy.top
    assert f"pid {pid} (python" in busy.describe()


def _short_lived_burners(core: int) -> int:
    """A shell outside this process's tree that runs, one after another, processes
    that each burn ``core`` for 0.1 s and exit: each lives inside a window, seen at
    neither of its ends. The shell's pid."""
    code = ("import os, time; os.sched_setaffinity(0, {%d}); end = time.perf_counter() + 0.1"
            "\nwhile time.perf_counter() < end: pass" % core)
    loop = f'while :; do "{sys.executable}" -S -c "{code}"; done'
    out = subprocess.run(["sh", "-c", f"sh -c '{loop}' >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.exclusive
def test_processes_that_lived_inside_the_window_are_named_by_their_parent():
    """A build's compilers or a shell loop's commands start and end inside a window:
    what they took is counted to the parent that reaped them, which is named."""
    shell = _short_lived_burners(sorted(os.sched_getaffinity(0))[-1])
    try:
        time.sleep(0.3)  # the loop is running
        meter = LoadMeter()
        meter.start()
        _spin(1.0)
        busy = meter.stop()
    finally:
        loop = psutil.Process(shell)
        for proc in [loop, *loop.children()]:
            with contextlib.suppress(psutil.NoSuchProcess):  # a child that just ended
                proc.kill()
    assert busy.others_s > 0.5, busy
    pid, name, cpu_s = busy.top[0]
    assert (pid, name) == (shell, "sh and its exited children"), busy.top
    assert cpu_s > 0.5, busy.top
    assert f"pid {shell} (sh and its exited children)" in busy.describe()
    assert busy.unseen_s < 0.25 * busy.others_s, busy  # the children's time is seen


@pytest.mark.exclusive
def test_the_process_that_started_the_measured_one_is_named_as_such():
    """A search's own process watches its trial and takes a little of the cores: named
    among a window's disturbers, it says that it started the measured process, so a
    user does not take it for another program."""
    code = ("import json, time\nfrom autotune.trial import LoadMeter\n"
            "meter = LoadMeter()\nmeter.start()\nprint('started', flush=True)\n"
            "time.sleep(1.0)\nprint(json.dumps(meter.stop().top), flush=True)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "started"
        _spin(0.7)  # this process, the measured one's parent, takes a core meanwhile
        top = json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
    ours = [(name, cpu_s) for pid, name, cpu_s in top if pid == os.getpid()]
    assert ours and ours[0][0].endswith(", which started the measured process"), top
    assert ours[0][1] > 0.4, top


def test_a_reaped_childs_time_before_the_window_is_not_the_windows():
    """A child seen at the window's start and reaped inside it adds its whole life to
    its parent's reaped time: only what it ran after the start is the window's."""
    from autotune.trial._load import _Seen, _took
    parent, child, other = (10, 1.0), (11, 2.0), (12, 3.0)
    before = {parent: _Seen("make", 1, 1.0, 5.0), child: _Seen("cc1", 10, 0.3, 0.1),
              other: _Seen("python", 1, 2.0, 0.0)}
    after = {parent: _Seen("make", 1, 1.1, 5.9), other: _Seen("python", 1, 2.2, 0.0)}
    took = _took(before, after, mine=set())
    # make: 0.1 of its own, and 0.9 reaped less the child's 0.4 before the window
    assert took[0] == (pytest.approx(0.6), 10, "make and its exited children")
    assert took[1] == (pytest.approx(0.2), 12, "python")
    assert _took(before, after, mine={parent}) == [(pytest.approx(0.2), 12, "python")]


class _ScriptedMeter:
    """LoadMeter's stand-in: the shares of successive windows, as scripted."""

    def __init__(self, shares):
        self.shares = list(shares)

    def __call__(self):
        return self

    def start(self):
        pass

    def stop(self):
        return Load(cores=2, wall_s=1.0, own_s=1.0, others_s=2 * self.shares[0],
                    share=self.shares.pop(0), top=[[4321, "stress", 0.9]])


@pytest.mark.parametrize("shares, kept, again, disturbed", [
    ([0.02], 0.02, 0, False),  # quiet: measured once
    ([0.5, 0.03], 0.03, 1, False),  # disturbed, then quiet: the quiet one is kept
    ([0.5, 0.6, 0.4], 0.4, 2, True),  # disturbed each time: kept after 2, flagged
])
def test_a_disturbed_window_is_measured_again_then_flagged(monkeypatch, shares, kept, again,
                                                           disturbed):
    windows, screens = [], []

    def fake_window(stepper, spec, warmup, memory_mib, warm_rate=0.0):
        windows.append(warm_rate)
        screens.append(spec.screen)
        return _window._Window(stats=WindowStats(wall_s=1.0, stopped="precise"))

    monkeypatch.setattr(_window, "LoadMeter", _ScriptedMeter(shares))
    monkeypatch.setattr(_window, "_window", fake_window)
    screen = Screen(front=((1000.0, 500.0),))
    out = _window._undisturbed_window(None, MeasureSpec(max_busy=0.1, screen=screen), [],
                                      lambda: 0.0, 5.0)
    assert len(windows) == again + 1
    assert windows[1:] == [0.0] * again  # no screening on a warm-up that was disturbed
    # ... nor on the window measured again: a config is never screened out on a window
    # that a disturbance may have slowed
    assert screens == [screen] + [None] * again
    assert out.stats.load["share"] == kept and len(out.stats.remeasured) == again
    assert out.stats.disturbed is disturbed
    note = busy_note(out.stats)
    assert ("DISTURBED" in note) is disturbed and ("pid 4321 (stress)" in note) is bool(again)


def test_max_busy_is_checked_as_a_flag_a_keyword_and_the_environment(monkeypatch):
    from _helpers import cli

    from autotune.errors import ConfigError

    with pytest.raises(ConfigError, match="max-busy"):
        MeasureSpec(max_busy=0)
    assert MeasureSpec(max_busy=1).max_busy == 1
    monkeypatch.setenv("AUTOTUNE_MAX_BUSY", "25%")
    assert MeasureSpec().max_busy == 0.25
    monkeypatch.setenv("AUTOTUNE_MAX_BUSY", "lots")
    with pytest.raises(ConfigError, match="AUTOTUNE_MAX_BUSY"):
        MeasureSpec()
    out = cli("trial", "--dataset", "synthetic", "--max-busy", "150%")
    assert out.returncode == 2 and "--max-busy" in out.stderr and "(0, 1]" in out.stderr


@pytest.mark.exclusive
@pytest.mark.slow
def test_a_search_on_a_busy_machine_names_what_took_its_cores(tmp_path):
    """busy.py at small scale: a process burns a core while a search measures its
    trials, and stops as the confirmation starts. The search sees the machine busy
    before its first trial and says so once, naming the burner's pid; its windows are
    kept as measured, marked DISTURBED, not measured again; no front row is called
    confirmed with an interval wider than the stated precision, and the default pick
    is confirmed in quiet pairs or marked unconfirmed."""
    import json

    from _helpers import cli

    pid = _burner(sorted(os.sched_getaffinity(0))[-1])
    common = ["--root", str(tmp_path / "data"), "--studies-dir", str(tmp_path / "s")]

    stopped = []

    def stop_burning(line: str) -> None:  # as the search prints it
        if line.startswith("confirmation:") and not stopped:
            psutil.Process(pid).kill()
            stopped.append(line)

    try:
        search = cli("search", "--dataset", "synthetic", "--scale", "0.004", "--steps", "2",
                     "--warmup", "1", "--warmup-time", "0", "--max-seconds", "0.5",
                     "--space", "quick", "--n-trials", "2", "--confirm", "1", "--no-priors",
                     "--confirm-precision", "20%",  # the rows checked against it below
                     "--max-busy", "10%", *common, env={"AUTOTUNE_MAX_BUSY": None},
                     on_line=stop_burning)
    finally:
        if psutil.pid_exists(pid):
            psutil.Process(pid).kill()
    out = search.stdout
    assert search.returncode == 0, search.stderr
    assert stopped, "the burner ran on through the confirmation"
    said = [line for line in out.splitlines()
            if line.startswith("the machine is busy before the search starts")]
    assert len(said) == 1 and f"pid {pid} (python" in said[0], out
    assert "DISTURBED" in out, out
    shown = json.loads(cli("show", "--format", "json", *common[2:]).stdout)
    assert not any(t["remeasured"] for t in shown["trials"])  # kept as measured
    for row in shown["pareto"]:
        if any(m.startswith("confirmed") for m in row["marks"]):
            assert row["speedup_precision"] <= 0.2, row  # --confirm-precision; relative
    default = next(r for r in shown["pareto"] if any(m.startswith("default") for m in
                                                     r["marks"]))
    assert any(m.startswith(("confirmed", "unconfirmed")) for m in default["marks"]), default
