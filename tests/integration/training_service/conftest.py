"""The trainer tests' model: ``tiny_model_dir`` (tests/conftest.py) with ``TRAINER_MODEL``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.trainer._helpers import TRAINER_MODEL


@pytest.fixture(scope="module")
def tiny_model_dir(tiny_model: Callable[..., Path]) -> Path:
    return tiny_model(**TRAINER_MODEL)
