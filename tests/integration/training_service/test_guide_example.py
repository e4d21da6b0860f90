"""docs/training-service.md's custom loop, run as written against a real embedded
inference server and a training service on the same tiny model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from safetensors.torch import load_file

from backends.inference.embedded import EmbeddedServer
from nexrl.trainer.service.server import TrainingService
from tests.integration.inference._helpers import SERVED_NAME
from tests.unit.trainer._helpers import spec

GUIDE = Path("docs/training-service.md")


def test_the_guides_custom_loop_trains_and_the_server_serves_its_snapshots(
    embedded_server: EmbeddedServer,
    tiny_model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    (loop,) = [b for b in blocks if "forward_backward(" in b]
    assert 'INFERENCE = "http://127.0.0.1:8000"' in loop
    assert 'TRAINING = "http://127.0.0.1:8300"' in loop and 'MODEL = "policy"' in loop
    s = spec(tiny_model_dir, trainer={"lr": 1e-2}, snapshot_dir=str(tmp_path / "snaps"))
    with TrainingService(s) as service:
        code = (
            loop.replace("http://127.0.0.1:8000", embedded_server.base_url)
            .replace("http://127.0.0.1:8300", service.base_url)
            .replace('MODEL = "policy"', f'MODEL = "{SERVED_NAME}"')
        )
        namespace: dict[str, Any] = {}
        exec(compile(code, str(GUIDE), "exec"), namespace)
        info = httpx.get(f"{service.base_url}/v1/info", timeout=30).json()
    lines = re.findall(r"step (\d): loss \S+, grad norm (\S+), v(\d)", capsys.readouterr().out)
    assert [(step, version) for step, _, version in lines] == [("0", "1"), ("1", "2")]
    assert (info["global_step"], info["policy_version"]) == (2, 2)
    # the server now serves the loop's last snapshot, which differs from the start
    health = httpx.get(f"{embedded_server.base_url}/health", timeout=30).json()
    assert health.get("policy_version") == 2, health
    start, last = load_file(next(tiny_model_dir.glob("*.safetensors"))), {}
    for f in (tmp_path / "snaps" / "v2").glob("*.safetensors"):
        last.update(load_file(f))
    assert any(not bool((last[k] == v).all()) for k, v in start.items() if k in last)
