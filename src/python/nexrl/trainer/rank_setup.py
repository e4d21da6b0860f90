"""What building a trainer rank needs before its engine: the algorithm check, the seeds, the model.

``SelfHostedTrainer.__init__`` calls these; the class keeps ``_load_model`` as a
hook (``load_model`` here), which the reference model loads through too.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from nexrl.trainer.errors import TrainerError

__all__ = ["check_algorithm", "load_model", "seed_everything"]


def check_algorithm(algo: Any) -> None:
    """``TrainerError`` when ``algo``'s ``loss_agg_mode`` needs a ``loss_norm_length`` unset."""
    if _needs_norm_length(algo):
        raise TrainerError(
            f"algorithm.loss_norm_length: loss_agg_mode {algo.loss_agg_mode!r} divides "
            "by a constant length; set it (TrainerSpec.from_recipe uses "
            "rollout_worker.max_response_length)"
        )


def load_model(path: str, dtype: torch.dtype) -> torch.nn.Module:
    """The causal LM at ``path`` (local files only) in ``dtype``."""
    from transformers import AutoModelForCausalLM

    model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, local_files_only=True
    )
    return model


def _needs_norm_length(algo: Any) -> bool:
    from nexrl.trainer.algorithms import LOSS_AGGREGATIONS

    mode = LOSS_AGGREGATIONS.get(algo.loss_agg_mode or "token-mean")
    return mode.uses_norm_length and algo.loss_norm_length is None


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's RNGs with ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
