"""A batch handed from the driver to the trainer through a file (``save_batch`` /
``load_batch``): tensors, per-row and global meta and the pad id come back as written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nexrl.core.types.batch import Batch
from nexrl.trainer.batch_io import load_batch, save_batch


def test_a_batch_comes_back_as_written(tmp_path: Path) -> None:
    meta = {
        "metrics": [{"answered_a_digit": 1.0}, {"answered_a_digit": 0.0}],
        "data_item": [{"prompt": "max 1 2 3", "answer": "3"}, {"prompt": "max 9 1 1"}],
        "packed": False,
    }
    batch = Batch({"input_ids": torch.tensor([[5, 6, 7], [8, 9, 0]])}, meta, pad_token_id=0)
    path = save_batch(batch, tmp_path / "step_1.pt")
    back = load_batch(path)
    assert torch.equal(back["input_ids"], batch["input_ids"])
    assert back.meta == meta and back.pad_token_id == 0
    assert [p.name for p in tmp_path.iterdir()] == ["step_1.pt"]  # no temporary file left


def test_a_file_that_is_not_a_batch_is_named(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match=r"other\.pt"):
        load_batch(path)
