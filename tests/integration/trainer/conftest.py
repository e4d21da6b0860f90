from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.trainer._helpers import save_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def vocab_size(model_dir: Path) -> int:
    return int(json.loads((model_dir / "config.json").read_text())["vocab_size"])
