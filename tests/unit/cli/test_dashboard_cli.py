"""``nexrl dashboard``: a folder that is not a run folder is one error line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexrl.cli.dashboard import main


def test_a_folder_without_metrics_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {tmp_path}: no metrics.jsonl here; pass a run folder (output_dir of a run)"
    )
