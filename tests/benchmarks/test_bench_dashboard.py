"""The /nexrl page's cost per step: the same short run twice, back to back, on the
same machine: without a browser (baseline), then with the page open in headless
chromium the whole run (it refreshes once a second from the run folder).

Per run: the median ``timing/step`` of metrics.jsonl over the steps after the
first (the first holds the cold start). ``extra_info`` records both medians and
``step_time_ratio_page_open`` (with / without); not asserted (docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from tests.e2e._recipe import train_rows
from tests.e2e.test_dashboard_page import Run, page_source

STEPS = 8


def median_step_s(out: Path) -> float:
    rows = [r for r in train_rows(out) if r["step"] > 1]
    return statistics.median(float(r["timing/step"]) for r in rows)


def test_bench_dashboard_page_open(benchmark: Any, tmp_path: Path) -> None:
    baseline = Run(tmp_path / "closed", steps=STEPS)
    baseline.finish()
    closed = median_step_s(tmp_path / "closed")

    def with_page() -> float:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
            opts.add_argument(arg)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        try:
            run = Run(tmp_path / "open", steps=STEPS)
            driver.get(run.url())
            while run.proc.poll() is None:  # the page stays open the whole run
                page_source(driver, "nexrl-metrics")
                time.sleep(1.0)
            run.finish()
        finally:
            driver.quit()
        return median_step_s(tmp_path / "open")

    opened = benchmark.pedantic(with_page, rounds=1, iterations=1)
    benchmark.extra_info.update(
        {
            "median_step_s_page_closed": closed,
            "median_step_s_page_open": opened,
            "step_time_ratio_page_open": opened / closed,
        }
    )
    print(
        f"median step: page closed {closed:.3f} s, open {opened:.3f} s, ratio {opened / closed:.3f}"
    )
