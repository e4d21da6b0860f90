"""``nexrl dashboard``: a folder that is not a run folder is one error line, exit 2."""

from __future__ import annotations

import socket
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


def test_a_port_in_use_is_one_line_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    with socket.socket() as taken:  # a real listener holds the port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main([str(tmp_path), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port} (")
    assert err.endswith("pick another --port (0: a free one) or an --address of this machine")
    assert "\n" not in err and "Traceback" not in err
