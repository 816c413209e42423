"""``autotune report`` and ``autotune dashboard`` on a finished small study, the
dashboard checked in headless Chromium, and a reader beside a writing search."""
from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from _helpers import cli

FAST = ["--dataset", "synthetic", "--scale", "0.004", "--steps", "3", "--warmup", "1",
        "--warmup-time", "0",
        "--max-seconds", "0.5", "--space", "quick", "--confirm", "0"]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
METRICS = ("throughput (seed nodes/s)", "peak memory (MiB)")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash")
    run = cli("search", *FAST, "--root", str(tmp / "data"), "--studies-dir",
              str(tmp / "studies"), "--study-name", "dash-study", "--n-trials", "6")
    assert run.returncode == 0, run.stderr
    return tmp


@pytest.mark.slow
def test_report_writes_real_pictures_linked_from_html(finished):
    from PIL import Image

    out = finished / "report"
    run = cli("report", "--study-name", "dash-study", "--studies-dir",
              str(finished / "studies"), "--out", str(out))
    assert run.returncode == 0, run.stderr
    page = (out / "report.html").read_text()
    for name in ("pareto.png", "importance.png", "step_times.png"):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.width >= 400 and image.height >= 300
            colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
            assert colours is None or len(colours) > 50, f"{name} is nearly blank"
        assert f'src="{name}"' in page, f"report.html does not show {name}"
    assert "dash-study" in page and METRICS[0] in page
    assert re.search(r"<td>\d+</td><td>[\d,]+</td>", page), "no Pareto row in the table"


def test_report_writes_report_html_here_and_never_over_another_studys(finished, tmp_path):
    """``autotune report`` with no --out writes report.html and its pictures beside it
    in the current folder, as the README says; a report of another study there is
    never overwritten (exit 2, the file unchanged); the same study's is renewed."""
    here = tmp_path / "here"
    here.mkdir()
    studies = ["--studies-dir", str(finished / "studies")]
    run = cli("report", "--study-name", "dash-study", *studies, cwd=here)
    assert run.returncode == 0, run.stderr
    page = (here / "report.html").read_text()
    assert 'src="report-pareto.png"' in page and (here / "report-pareto.png").is_file()
    assert not (here / "report.html").is_dir()
    other = here / "other.html"
    other.write_text('<html><head><meta name="autotune-study" content="someone-else">')
    run = cli("report", "--study-name", "dash-study", *studies, "--out", str(other))
    assert run.returncode == 2 and "someone-else" in run.stderr, run.stderr
    assert "someone-else" in other.read_text()
    again = cli("report", "--study-name", "dash-study", *studies, cwd=here)
    assert again.returncode == 0, again.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(root: Path, port: int, name: str = "dash-study") -> tuple[subprocess.Popen, str]:
    proc = cli("dashboard", "--studies-dir", str(root / "studies"), "--study-name", name,
               "--port", str(port), background=True)
    lines = [proc.stdout.readline() for _ in range(2)]
    match = re.search(r"open (http://127\.0\.0\.1:\d+/dashboard/studies/\d+)", "".join(lines))
    assert match, f"no URL printed: {lines} {proc.stderr.read() if proc.poll() else ''}"
    return proc, match.group(1)


def _wait_for_ci_install(timeout_s: float = 900.0) -> None:
    """Under .ci/run, which installs the browser while the environment builds: waits
    for apt's exit status in ``$AUTOTUNE_CI_BROWSER/status``; fails, with apt's log,
    where it is not 0 or never comes."""
    folder = os.environ.get("AUTOTUNE_CI_BROWSER")
    if not folder:
        return
    status, log = Path(folder) / "status", Path(folder) / "log"
    deadline = time.monotonic() + timeout_s
    while not status.exists():
        if time.monotonic() > deadline:
            pytest.fail(f".ci/run's install of chromium did not end in {timeout_s:.0f} s "
                        f"(its output: {log})")
        time.sleep(1.0)
    code = status.read_text().strip()
    if code != "0":
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        pytest.fail(f".ci/run's install of chromium failed (apt exit {code}; {log}):\n{tail}")


def test_the_browser_tests_fail_where_ci_could_not_install_the_browser(tmp_path,
                                                                      monkeypatch):
    """.ci/run installs chromium beside the environment's build: an apt that failed,
    or never ended, fails the browser tests with apt's own words, never skips them."""
    monkeypatch.setenv("AUTOTUNE_CI_BROWSER", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="did not end in 0 s"):
        _wait_for_ci_install(timeout_s=0.0)
    (tmp_path / "log").write_text("E: Unable to locate package chromium\n")
    (tmp_path / "status").write_text("100\n")
    with pytest.raises(pytest.fail.Exception, match="(?s)apt exit 100.*Unable to locate"):
        _wait_for_ci_install()
    (tmp_path / "status").write_text("0\n")
    _wait_for_ci_install()  # installed: the test goes on


def _browser():
    _wait_for_ci_install()
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        message = "Debian's chromium and chromium-driver are not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; .ci/run installs them")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def _wait_for_text(driver, wanted: tuple[str, ...], timeout_s: float = 60.0) -> str:
    from selenium.webdriver.common.by import By

    deadline, text = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        text = driver.find_element(By.TAG_NAME, "body").text
        if all(w in text for w in wanted):
            return text
        time.sleep(0.5)
    missing = [w for w in wanted if w not in text]
    raise AssertionError(f"page never showed {missing}; it showed: {text!r}")


@pytest.mark.slow
def test_dashboard_renders_study_metrics_and_note_in_chromium(finished, tmp_path):
    driver = _browser()
    proc, url = _serve(finished, _free_port())
    try:
        driver.get(url)
        # The study name, both metric names (on the Pareto front's axes) and a chart
        # computed from the trials. Cards further down (Best Trials, attributes) render
        # later and were seen missing after 30 s under CI load, so they are not waited on.
        _wait_for_text(driver, ("dash-study", *METRICS, "Pareto Front",
                                "Hyperparameter Importance"))
        shot = tmp_path / "dashboard.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 20_000
        driver.get(url + "/note")
        note = _wait_for_text(driver, ("autotune: dash-study", "Pareto front", "Baseline"))
        assert re.search(r"Baseline: trial 0, [\d,]+ seed nodes/s", note)
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.bad_input
def test_dashboard_on_a_taken_port_is_one_line(finished):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = cli("dashboard", "--studies-dir", str(finished / "studies"), "--study-name",
                  "dash-study", "--port", str(port), timeout=60)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert f"127.0.0.1:{port}" in run.stderr and "--port" in run.stderr


@pytest.mark.slow
def test_a_reader_holding_the_sqlite_file_does_not_break_a_search(tmp_path):
    """optuna-dashboard#545: a reader of the SQLite file made the writing study fail
    with "database is locked". Here a reader holds a read transaction open for the
    whole search; in WAL mode the search still commits every trial."""
    studies = tmp_path / "studies"
    first = cli("search", *FAST, "--root", str(tmp_path / "data"), "--studies-dir",
                str(studies), "--study-name", "busy", "--n-trials", "1")
    assert first.returncode == 0, first.stderr
    db = studies / "busy.db"
    reader = sqlite3.connect(db, timeout=0.1)
    assert reader.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM trials").fetchone()  # holds its snapshot
    dash, url = _serve(studies.parent, _free_port(), "busy")
    stop, polled = threading.Event(), []
    api = re.sub(r"/dashboard/studies/(\d+)", r"/api/studies/\1", url)

    def poll() -> None:  # the dashboard reads the study while the search writes it
        while not stop.is_set():
            with urllib.request.urlopen(api, timeout=30) as response:
                polled.append(response.status)
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        run = cli("search", *FAST, "--root", str(tmp_path / "data"), "--studies-dir",
                  str(studies), "--study-name", "busy", "--n-trials", "3")
    finally:
        stop.set()
        poller.join(timeout=30)
        reader.rollback()
        reader.close()
        dash.terminate()
        dash.wait(timeout=30)
    assert run.returncode == 0, run.stderr
    assert "database is locked" not in run.stderr
    assert len(polled) > 10 and set(polled) == {200}, polled
    check = sqlite3.connect(db)
    assert check.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone() \
        == (3,)
    check.close()
