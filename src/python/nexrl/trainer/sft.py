"""``SelfHostedSftTrainer``: supervised fine-tuning (cross-entropy on response tokens).

Per micro-batch ``L = agg(-log pi(y_t), response_mask, loss_agg_mode)``: the
negative log-likelihood of the response tokens the ``response_mask`` marks
(prompt tokens and masked turns are not trained on). Rewards, groups and
advantages are ignored; no reference model is loaded.
"""

from __future__ import annotations

from torch import Tensor

from nexrl.core.types.batch import Batch
from nexrl.trainer.algorithms import agg_loss
from nexrl.trainer.base import SelfHostedTrainer

__all__ = ["SelfHostedSftTrainer"]


class SelfHostedSftTrainer(SelfHostedTrainer):
    """Cross-entropy trainer (see the module doc)."""

    uses_reference_model = False

    def compute_loss(
        self, mb: Batch, log_probs: Tensor, entropy: Tensor | None
    ) -> tuple[Tensor, dict[str, Tensor | float]]:
        mask = mb["response_mask"].bool()
        mode, norm = self.loss_agg_mode, self.algo.loss_norm_length
        loss = agg_loss(-log_probs, mask, mode, norm_length=norm)
        metrics: dict[str, Tensor | float] = {"actor/sft_loss": loss.detach()}
        if entropy is not None:
            metrics["actor/entropy"] = agg_loss(entropy, mask, mode, norm_length=norm).detach()
        return loss, metrics
