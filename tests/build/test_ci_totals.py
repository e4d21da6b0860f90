"""CI's closing line comes from the JUnit reports the test run wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path.cwd() / ".ci" / "junit_totals.py"

SUITE = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="{e}" failures="{f}" skipped="{s}" tests="{n}">
</testsuite></testsuites>"""


def run(report_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(report_dir)], capture_output=True, text=True, timeout=60
    )


def test_sums_every_report_and_counts_errors_as_failures(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text(SUITE.format(n=5, f=0, e=0, s=1))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.xml").write_text(SUITE.format(n=4, f=1, e=1, s=0))
    proc = run(tmp_path)
    assert proc.stdout.strip() == "6 passed, 2 failed, 1 skipped"
    assert proc.returncode == 1


def test_all_green_exits_zero(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text(SUITE.format(n=3, f=0, e=0, s=0))
    proc = run(tmp_path)
    assert proc.stdout.strip() == "3 passed, 0 failed, 0 skipped"
    assert proc.returncode == 0


def test_no_reports_or_no_tests_is_a_failure(tmp_path: Path) -> None:
    assert run(tmp_path / "missing").returncode == 1
    (tmp_path / "a.xml").write_text(SUITE.format(n=0, f=0, e=0, s=0))
    proc = run(tmp_path)
    assert proc.stdout.strip() == "0 passed, 0 failed, 0 skipped"
    assert proc.returncode == 1
