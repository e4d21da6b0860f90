"""Sum the JUnit XML reports `./pants test ::` writes ([test].report = true).

Prints one line, ``N passed, N failed, N skipped``, and exits 1 when there are
no reports, no tests, or any failure/error, so CI cannot pass on an empty run.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def totals(report_dir: Path) -> tuple[int, int, int]:
    passed = failed = skipped = 0
    for xml in sorted(report_dir.rglob("*.xml")):
        root = ET.parse(xml).getroot()
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        for s in suites:
            n = int(s.get("tests", 0))
            f = int(s.get("failures", 0)) + int(s.get("errors", 0))
            k = int(s.get("skipped", 0))
            passed += n - f - k
            failed += f
            skipped += k
    return passed, failed, skipped


def main(argv: list[str]) -> int:
    report_dir = Path(argv[1] if len(argv) > 1 else "dist/test/reports")
    if not report_dir.is_dir():
        print(f"0 passed, 0 failed (no test reports under {report_dir})")
        return 1
    passed, failed, skipped = totals(report_dir)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
