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


CASES = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="0" tests="{n}" time="{t}">
{cases}
</testsuite></testsuites>"""


def case(classname: str, seconds: float) -> str:
    return f'<testcase classname="{classname}" name="test_it" time="{seconds}" />'


def test_slowest_names_files_by_their_seconds_slowest_first(tmp_path: Path) -> None:
    """A report of one file counts its whole session (imports and fixtures
    included); a batch of files splits by its cases; a class's cases count
    for its file."""
    (tmp_path / "e2e.xml").write_text(
        CASES.format(
            n=2, t=300.5, cases=case("tests.e2e.test_run", 100) + case("tests.e2e.test_run", 50)
        )
    )
    batch = (
        case("tests.unit.test_a", 2)
        + case("tests.unit.test_b.TestB", 7)
        + case("tests.unit.test_b.TestB", 1)
    )
    (tmp_path / "unit.xml").write_text(CASES.format(n=3, t=20, cases=batch))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--slowest", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "the 2 slowest of 3 test files (all files: 310 s of test time):",
        "      300 s  tests/e2e/test_run.py",
        "        8 s  tests/unit/test_b.py",
        "5 passed, 0 failed, 0 skipped",
    ]
