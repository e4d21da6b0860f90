"""Sum the JUnit XML reports `./pants test ::` writes ([test].report = true).

Prints one line, ``N passed, N failed, N skipped``, and exits 1 when there are
no reports, no tests, or any failure/error, so CI cannot pass on an empty run.

``--slowest N`` first prints the N slowest test files with their seconds (and
the tests' total seconds, which exceeds the wall time: Pants runs files side
by side). A report of one file counts its pytest session (imports, collection
and fixtures included); a report of a batch of unit files splits by its test
cases' times.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def _suites(xml: Path) -> list[ET.Element]:
    root = ET.parse(xml).getroot()
    return [root] if root.tag == "testsuite" else list(root.iter("testsuite"))


def totals(report_dir: Path) -> tuple[int, int, int]:
    passed = failed = skipped = 0
    for xml in sorted(report_dir.rglob("*.xml")):
        for s in _suites(xml):
            n = int(s.get("tests", 0))
            f = int(s.get("failures", 0)) + int(s.get("errors", 0))
            k = int(s.get("skipped", 0))
            passed += n - f - k
            failed += f
            skipped += k
    return passed, failed, skipped


def test_file(classname: str) -> str:
    """``tests.e2e.test_x.TestY`` -> ``tests/e2e/test_x.py`` (the module is the first
    dotted part named ``test_*``)."""
    parts = classname.split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: i + 1]) + ".py"
    return "/".join(parts) + ".py"


def file_seconds(report_dir: Path) -> dict[str, float]:
    """Seconds per test file over every report under ``report_dir``."""
    seconds: dict[str, float] = defaultdict(float)
    for xml in sorted(report_dir.rglob("*.xml")):
        for s in _suites(xml):
            per_file: dict[str, float] = defaultdict(float)
            for case in s.iter("testcase"):
                per_file[test_file(case.get("classname", ""))] += float(case.get("time", 0))
            if len(per_file) == 1 and s.get("time") is not None:
                (name,) = per_file
                per_file[name] = max(per_file[name], float(s.get("time", 0)))
            for name, t in per_file.items():
                seconds[name] += t
    return dict(seconds)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dir", nargs="?", default="dist/test/reports")
    parser.add_argument("--slowest", type=int, default=0, metavar="N")
    args = parser.parse_args(argv[1:])
    report_dir = Path(args.report_dir)
    if not report_dir.is_dir():
        print(f"0 passed, 0 failed (no test reports under {report_dir})")
        return 1
    if args.slowest > 0:
        seconds = file_seconds(report_dir)
        slowest = sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0]))[: args.slowest]
        print(
            f"the {len(slowest)} slowest of {len(seconds)} test files "
            f"(all files: {sum(seconds.values()):.0f} s of test time):"
        )
        for name, t in slowest:
            print(f"  {t:7.0f} s  {name}")
    passed, failed, skipped = totals(report_dir)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
