"""The value model of ``trainer.type: self_hosted_ppo``: one per trainer rank.

What it is: a copy of the policy's trunk with a value head of one output (Hugging
Face ``AutoModelForTokenClassification`` with ``num_labels=1``, as verl's critic),
the head zero-initialised so every value starts at 0, on its own training engine
(the same backend, ZeRO stage and ranks as the policy; its own AdamW and LR,
``trainer.critic.lr``). A separate model rather than a value head on the policy's
own trunk: the value loss then never moves the policy's weights (the snapshots the
inference server loads stay the policy's alone), which is what verl and OpenRLHF do;
the cost is a second copy of the weights and optimizer state on each rank.

Alignment: ``values[b, t]`` is the head's output at position ``P + t - 1`` (the
state before response token ``t``), the position whose logits give ``t``'s
log-prob (``nexrl.trainer.ops``).

Its rows and micro-batches are the policy's: a rank's share balanced by tokens and
packed forwards when the step packs (``trainer.packing``: the value model is
checked as the policy is, ``nexrl.trainer.packing.packed_response_values``), and
token-budget micro-batches with ``trainer.max_tokens_per_micro_batch``.

One update (``Critic.update``, after the policy's, on the prepared global batch)::

    for epoch in range(trainer.ppo_epochs):
        for each micro-batch b of this rank's share:
            L_b = token-mean over b of clipped_value_loss(V_theta, values, returns, c)
            backward(L_b * n_b / N * W)            (N: the global batch's policy tokens)
        step(), or none when the loss or gradient norm is NaN/inf on any rank

so the gradient is that of the token mean over the global batch (as the policy's:
``nexrl.trainer.base``). Checkpoints hold it beside the policy (``critic/`` in
each ``step_N`` folder, ``nexrl.core.weights.checkpoint``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import torch
from torch import Tensor

from nexrl.core.types.batch import Batch
from nexrl.trainer.algorithms.value import clipped_value_loss, explained_variance
from nexrl.trainer.engine import TrainingEngine, load_backend
from nexrl.trainer.errors import TrainerError
from nexrl.trainer.microbatch import micro_batch, rank_plan
from nexrl.trainer.ops import disable_dropout, model_inputs, rank_share, response_valid, unshare
from nexrl.trainer.packing import packed_response_values, packing_works
from nexrl.trainer.step_metrics import stats

__all__ = ["CHECKPOINT_TAG", "Critic", "load_value_model"]

logger = logging.getLogger("nexrl.trainer.base")

CHECKPOINT_TAG = "critic"  # its engine's folder inside a checkpoint


def load_value_model(path: str, *, check_packing: bool = False) -> tuple[torch.nn.Module, bool]:
    """``(model, packs)``: the trunk of the model at ``path`` with a zero-initialised
    value head (1 output); ``packs``: with ``check_packing``, whether it keeps packed
    sequences apart (checked before the head is zeroed: its outputs carry the trunk's)."""
    from transformers import AutoModelForTokenClassification
    from transformers.utils import logging as hf_logging

    # its load report (lm_head unused, the head new) is what a value model is: no news
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model: torch.nn.Module = AutoModelForTokenClassification.from_pretrained(
            path, num_labels=1, dtype=torch.float32, local_files_only=True
        )
    except ValueError as exc:  # a model type with no token-classification class
        raise TrainerError(
            f"trainer.critic: cannot build a value model from {path} ({exc}); point "
            "trainer.critic.model_path at a model type transformers has a "
            "ForTokenClassification class for (Llama, Qwen2/3, Mistral, Gemma, ...)"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    heads = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == 1]
    if not heads:
        raise TrainerError(f"trainer.critic: the value model from {path} has no 1-output head")
    disable_dropout(model)
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    packs = check_packing and vocab > 1 and packing_works(model, vocab, torch.device("cpu"))
    with torch.no_grad():
        heads[-1].weight.zero_()
        if heads[-1].bias is not None:
            heads[-1].bias.zero_()
    return model, packs


class Critic:
    """A rank's value model and its engine (module doc)."""

    def __init__(
        self,
        trainer_cfg: Any,
        policy_path: str,
        *,
        total_optimizer_steps: int,
        dist_timeout_s: float,
        packing: bool = False,
        engine: TrainingEngine | None = None,
    ) -> None:
        """``packing``: the policy packs (its model passed the check); the value model
        packs too when it passes the same check (a given ``engine``: taken as passing)."""
        ccfg = trainer_cfg.critic
        self.cliprange_value = float(ccfg.cliprange_value)
        self.ppo_epochs = int(trainer_cfg.ppo_epochs)
        self.micro_batch_size = int(trainer_cfg.micro_batch_size)
        self.max_tokens = trainer_cfg.max_tokens_per_micro_batch
        self.packing = packing
        if engine is None:
            lr = trainer_cfg.lr if ccfg.lr is None else ccfg.lr
            cfg = dataclasses.replace(trainer_cfg, lr=float(lr))
            path = str(ccfg.model_path or policy_path)
            model, self.packing = load_value_model(path, check_packing=packing)
            if packing and not self.packing:
                logger.warning(
                    "trainer.packing: the value model from %s attends across packed "
                    "sequences: the critic trains padded (the policy packed)",
                    path,
                )
            engine = load_backend(trainer_cfg.backend)(
                model,
                cfg,
                total_optimizer_steps=total_optimizer_steps,
                dist_timeout_s=dist_timeout_s,
            )
        self.engine = engine
        self.rank, self.world_size, self.device = engine.rank, engine.world_size, engine.device

    def _values(self, mb: Batch) -> Tensor:
        """``[b, R]`` values of a micro-batch (on the device; with gradient in training)."""
        if self.packing:
            return packed_response_values(self.engine.forward, mb)
        out = self.engine.forward(**model_inputs(mb))
        scores = out.logits[..., 0]
        p, r = mb.prompt_width, mb["responses"].shape[1]
        return scores[:, p - 1 : p - 1 + r].float()

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> Tensor:
        """``[B, R]`` values of the global ``batch`` (CPU float32, 0 on padding); collective:
        each rank its shard, all-gathered."""
        shard, order = rank_share(batch, self.rank, self.world_size, by_tokens=self.packing)
        out = torch.zeros(len(shard), batch.response_width, dtype=torch.float32)
        self.engine.train(False)
        plan = rank_plan(
            self.engine, shard, self.micro_batch_size, self.max_tokens, equal_across_ranks=False
        )
        for planned in plan:
            v = self._values(micro_batch(shard, planned).to(self.device))
            out[planned.rows, : v.shape[1]] = v.cpu()
        full = unshare(self.engine.all_gather(out).cpu(), order, len(batch))
        return torch.where(response_valid(batch), full, 0.0)

    def update(self, batch: Batch) -> dict[str, float]:
        """Train on this rank's shard of the prepared global ``batch`` (needs ``values``,
        ``returns``, ``response_mask``); the ``critic/`` metrics (same on every rank)."""
        for key in ("values", "returns", "response_mask"):
            if key not in batch:
                raise TrainerError(f"the critic's update needs {key!r} in the batch")
        units = max(int(batch["response_mask"].sum()), 1)
        shard, _ = rank_share(batch, self.rank, self.world_size, by_tokens=self.packing)
        plan = rank_plan(
            self.engine, shard, self.micro_batch_size, self.max_tokens, equal_across_ranks=True
        )
        self.engine.train(True)
        sums = torch.zeros(3, dtype=torch.float64)  # loss, clipped tokens, vpred sum
        norms: list[float] = []
        for _ in range(self.ppo_epochs):
            finite = True
            for i, planned in enumerate(plan):
                self.engine.set_boundary(i == len(plan) - 1)
                mb = micro_batch(shard, planned).to(self.device)
                mask = mb["response_mask"].bool()
                vpred = self._values(mb)
                loss_t, clipped = clipped_value_loss(
                    vpred, mb["values"], mb["returns"], mask, self.cliprange_value
                )
                n_b = int(mask.sum())
                loss = loss_t.sum() / max(n_b, 1)
                finite = finite and bool(torch.isfinite(loss.detach()))
                self.engine.backward(loss * (n_b / units * self.world_size))
                sums += torch.tensor(
                    [
                        float(loss_t.detach().sum()),
                        float(clipped.sum()),
                        float(vpred.detach()[mask].sum()),
                    ],
                    dtype=torch.float64,
                )
            bad = self.engine.all_reduce_sum(torch.tensor([0.0 if finite else 1.0]))
            if float(bad.sum()) > 0:
                self.engine.discard_gradients()
                norms.append(math.nan)
                break
            norms.append(self.engine.step())
            if not math.isfinite(norms[-1]):
                break
        total = self.engine.all_reduce_sum(sums).cpu() / (units * len(norms))
        mask = batch["response_mask"].bool()
        return {
            "critic/vf_loss": float(total[0]),
            "critic/vf_clipfrac": float(total[1]),
            "critic/vpred_mean": float(total[2]),
            "critic/grad_norm": float(sum(norms) / len(norms)),
            "critic/lr": self.engine.lr(),
            "critic/packed": float(self.packing),
            "critic/vf_explained_var": explained_variance(batch["values"], batch["returns"], mask),
            **stats("critic/values", batch["values"], mask),
            **stats("critic/returns", batch["returns"], mask),
        }

    def close(self) -> None:
        self.engine.close(destroy_process_group=False)
