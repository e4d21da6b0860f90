"""A Markdown table of build-support/gpu/check.sh's runs: per-step times (medians),
reward at the start and the end, validation, and the GPU's peak memory.

    python build-support/gpu/summarize.py OUT    # OUT: the check's output folder
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

COLUMNS = {
    "timing/step": "step s",
    "timing/trainer_update": "update s",
    "timing/trainer_snapshot": "snapshot s",
    "timing/reload": "reload s",
    "timing/wait_batch": "wait batch s",
}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _median(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows[1:] if key in r]  # the first step pays warm-up
    return f"{statistics.median(values):.3f}" if values else "-"


def _reward(rows: list[dict], first: bool) -> str:
    values = [r["reward/mean"] for r in rows if "reward/mean" in r]
    if not values:
        return "-"
    window = values[:5] if first else values[-5:]
    return f"{sum(window) / len(window):.3f}"


def _validation(rows: list[dict]) -> str:
    values = [f"{r['val/reward/mean']:.2f}" for r in rows if "val/reward/mean" in r]
    return " ".join(values) if values else "-"


def main(out: Path) -> None:
    summary = {}
    for line in (out / "summary.txt").read_text().splitlines():
        name, *fields = line.split()
        summary[name] = dict(f.split("=", 1) for f in fields)
    print(
        "| run | rc | wall s | GPU mem peak MiB | steps | "
        + " | ".join(COLUMNS.values())
        + " | reward first 5 | reward last 5 | validation | trainer/server ppl |"
    )
    print("|" + " --- |" * (10 + len(COLUMNS)))
    for name, info in summary.items():
        path = out / "metrics" / f"{name}.jsonl"
        all_rows = _rows(path) if path.exists() else []
        rows = [r for r in all_rows if "timing/step" in r]  # the training steps
        ppl = _median(rows, "rollout_corr/ppl_ratio")
        cells = [
            name,
            info.get("rc", "?"),
            info.get("wall_s", "?"),
            info.get("gpu_mem_peak_mib", "?"),
            str(len(rows)),
        ]
        cells += [_median(rows, k) for k in COLUMNS]
        cells += [_reward(rows, True), _reward(rows, False), _validation(all_rows), ppl]
        print("| " + " | ".join(cells) + " |")
        log = out / "logs" / f"{name}.log"
        if info.get("rc") != "0" and log.exists():
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            errors = [ln for ln in tail if re.search(r"error", ln, re.IGNORECASE)]
            print(f"\n{name}: " + " / ".join((errors or tail)[-3:])[:600] + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
