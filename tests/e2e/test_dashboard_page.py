"""End-to-end, in a real browser (Debian's chromium, driven by selenium): the run's
``/nexrl`` page on its Dask dashboard shows the run's real values while it runs, on
the finished run folder (``nexrl.driver.cli.dashboard``), and after a resume (history
intact). The page's data are read from the Bokeh document in the page
(``Bokeh.documents[0]``) and compared with metrics.jsonl / samples.jsonl.

The screenshot is kept under ``$NEXRL_TEST_ARTIFACTS`` (default
``dist/test-artifacts``) as ``dashboard_live.png``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import _launch
from tests.e2e._gated_evaluator import GATE_ENV, close_after
from tests.e2e._recipe import RECIPE, overrides, subprocess_env, train_rows

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
DEADLINE_S = 900  # generous bound for a slow CI machine; a hang fails instead of blocking
GATED = "tests/e2e/_gated_evaluator.py:GatedMaxDigit"
# the page is read while the run is held (tests/e2e/_gated_evaluator.py): once this many
# steps are logged, every rollout's scoring waits. The rollouts of the next step may have
# been scored already (sync mode sends them while the step's row is written), so the
# run is held at step LIVE_STEPS + 2 at the latest: the first run has 3 steps
LIVE_STEPS = 1
READ_SOURCE = """
const doc = window.Bokeh && Bokeh.documents && Bokeh.documents[0];
if (!doc) return null;
const src = doc.get_model_by_name(arguments[0]);
if (!src) return null;
const data = src.data instanceof Map ? Array.from(src.data.entries()) : Object.entries(src.data);
const out = {};
for (const [k, v] of data) out[k] = Array.from(v);
return out;
"""


def artifacts() -> Path:
    d = Path(os.environ.get("NEXRL_TEST_ARTIFACTS", "dist/test-artifacts"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail(
            f"{CHROMIUM} or {CHROMEDRIVER} missing: run build-support/system-packages.sh",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.add_argument("--window-size=1400,1100")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


class Run:
    """``nexrl train`` in a subprocess; its output lines collected as they come."""

    def __init__(self, out: Path, steps: int, gate: Path | None = None) -> None:
        extra, env = [], subprocess_env()
        if gate is not None:  # held while the file exists (tests/e2e/_gated_evaluator.py)
            extra, env[GATE_ENV] = [f"rollout_worker.evaluator={GATED}"], str(gate)
        cmd = [
            sys.executable,
            "-m",
            "nexrl.driver.cli.train",
            RECIPE,
            *run_overrides(out, steps),
            *extra,
        ]
        self.proc = _launch.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def url(self, pattern: str = r"nexrl: run page (\S+)") -> str:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            for line in self.lines:
                if m := re.search(pattern, line):
                    return m.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"the run exited ({self.proc.returncode}):\n{self.output()}")
            time.sleep(0.2)
        raise AssertionError(f"no page URL printed:\n{self.output()}")

    def output(self) -> str:
        return "".join(self.lines[-40:])

    def finish(self) -> None:
        assert self.proc.wait(DEADLINE_S) == 0, self.output()


def run_overrides(out: Path, steps: int) -> list[str]:
    # a checkpoint every 3 steps: the first run (3 steps) can be resumed
    return [*overrides(out, steps=steps), "trainer.save_every=3"]


def page_source(driver: Any, name: str) -> dict[str, list[Any]] | None:
    return driver.execute_script(READ_SOURCE, name)


def wait_page_steps(driver: Any, n: int, live: Run | None = None) -> dict[str, list[Any]]:
    """The page's metrics once it shows ``n`` steps; with ``live``, fails at once when
    that run has ended first (its page with it)."""
    deadline = time.monotonic() + DEADLINE_S
    data: dict[str, list[Any]] | None = None
    while time.monotonic() < deadline:
        data = page_source(driver, "nexrl-metrics")
        if data and len(data["step"]) >= n:
            return data
        if live is not None and live.proc.poll() is not None:
            raise AssertionError(f"the run ended before its page showed {n} steps: {data}")
        time.sleep(0.5)
    raise AssertionError(f"the page never showed {n} steps: {data}")


def assert_matches_metrics(data: dict[str, list[Any]], out: Path) -> None:
    """Every step on the page holds metrics.jsonl's values for that step."""
    rows = {int(r["step"]): r for r in train_rows(out)}
    assert data["step"], "no steps on the page"
    for i, step in enumerate(data["step"]):
        row = rows[int(step)]
        assert data["reward_mean"][i] == pytest.approx(row["reward/mean"])
        assert data["reward_std"][i] == pytest.approx(row["reward/std"])
        assert data["t_train"][i] == pytest.approx(row["timing/train"])
        assert data["t_wait"][i] == pytest.approx(row["timing/wait_batch"])
        assert data["v_trainer"][i] == row["version/trainer"]
        assert data["groups_done"][i] == row["rollout/groups_done"]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, Path]]:
    out = tmp_path_factory.mktemp("dash") / "run"
    # held until the live test has read the page and removes the gate
    gate = close_after(out.with_name("gate"), LIVE_STEPS)
    run = Run(out, 3, gate=gate)
    try:
        yield run, out
    finally:
        gate.unlink(missing_ok=True)
        if run.proc.poll() is None:
            run.proc.kill()


def test_the_live_page_shows_the_runs_values(browser: Any, first_run: tuple[Run, Path]) -> None:
    run, out = first_run
    url = run.url()
    assert url.endswith("/nexrl")
    browser.get(url)
    # live: the run is held until the gate opens
    data = wait_page_steps(browser, LIVE_STEPS, live=run)
    assert_matches_metrics(data, out)
    status = browser.execute_script(
        "return Bokeh.documents[0].get_model_by_name('nexrl-status').text"
    )
    assert RECIPE in status and "/ 3" in status
    nav = [a.text.strip().lower() for a in browser.find_elements("css selector", "a")]
    assert "nexrl" in nav, nav  # listed in the Dask dashboard's navigation
    time.sleep(1.5)  # the next refresh fills the trajectory table
    browser.save_screenshot(str(artifacts() / "dashboard_live.png"))
    assert run.proc.poll() is None, run.output()  # the page was read from the live run
    out.with_name("gate").unlink()
    run.finish()


def test_the_page_on_a_finished_run_folder(browser: Any, first_run: tuple[Run, Path]) -> None:
    run, out = first_run
    run.finish()
    proc = _launch.Popen(
        [sys.executable, "-m", "nexrl.driver.cli.dashboard", str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"dashboard (\S+)", line)
        assert m, line
        browser.get(m.group(1))
        data = wait_page_steps(browser, 3)
        assert data["step"] == [1.0, 2.0, 3.0]
        assert_matches_metrics(data, out)
        table = page_source(browser, "nexrl-samples")
        assert table is not None
        samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
        newest = samples[::-1]
        assert table["step"] == [s["step"] for s in newest]
        assert table["reward"] == pytest.approx([s["reward"] for s in newest])
        # selecting a row shows its agent trace below the table (this task's rollouts
        # are single calls: the page says there is none; tests/e2e/test_agent_run.py
        # checks an agent run's trace tables in samples.jsonl)
        read_trace = "return Bokeh.documents[0].get_model_by_name('nexrl-trace').text"
        assert "Select a trajectory" in browser.execute_script(read_trace)
        browser.execute_script(
            "Bokeh.documents[0].get_model_by_name('nexrl-samples').selected.indices = [0]"
        )
        deadline = time.monotonic() + 30
        while "no trace" not in browser.execute_script(read_trace):
            assert time.monotonic() < deadline, browser.execute_script(read_trace)
            time.sleep(0.2)
        assert "finished" in browser.execute_script(
            "return Bokeh.documents[0].get_model_by_name('nexrl-status').text"
        )
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_page_after_a_resume_keeps_the_history(
    browser: Any, first_run: tuple[Run, Path]
) -> None:
    run, out = first_run
    run.finish()
    before = {int(r["step"]): r for r in train_rows(out)}
    assert sorted(before) == [1, 2, 3]
    # resume.mode=auto (the default): from the step-3 checkpoint; held once step 4 is
    # logged (at step 6 at the latest)
    gate = close_after(out.with_name("gate"), 4)
    resumed = Run(out, steps=6, gate=gate)
    try:
        browser.get(resumed.url())
        data = wait_page_steps(browser, 4, live=resumed)
        gate.unlink()
        assert data["step"][:4] == [1.0, 2.0, 3.0, 4.0]
        for i in range(3):  # the first run's steps, as the first run wrote them
            assert data["reward_mean"][i] == pytest.approx(before[i + 1]["reward/mean"])
            assert data["t_train"][i] == pytest.approx(before[i + 1]["timing/train"])
        assert_matches_metrics(data, out)
        resumed.finish()
    finally:
        gate.unlink(missing_ok=True)
        if resumed.proc.poll() is None:
            resumed.proc.kill()
