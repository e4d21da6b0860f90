"""``trainer.disable_dropout``: a model with dropout in its config (GPT-2: 0.1 on
attention, residuals and embeddings) trains with the log-probs the inference server
sampled with. The server samples in eval mode (no dropout); with dropout on in
training, the trainer's log-probs of the same tokens differ, so the policy ratio is
not 1 before the first update and the rollout-correction metrics show a mismatch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nexrl.trainer.ops import disable_dropout
from tests.unit.trainer._helpers import make_batch, spec
from tests.unit.trainer._plain_engine import plain_trainer


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random GPT-2 with GPT-2's default dropouts (0.1 each)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    assert (config.attn_pdrop, config.resid_pdrop, config.embd_pdrop) == (0.1, 0.1, 0.1)
    out = tmp_path_factory.mktemp("gpt2") / "model"
    GPT2LMHeadModel(config).save_pretrained(out)
    return out


def test_every_dropout_is_zeroed_and_the_config_kept(gpt2_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(gpt2_dir)
    # embeddings, and per layer: attention weights, attention output, MLP output
    assert disable_dropout(model) == 1 + 2 * 3
    assert all(
        m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd)
    )
    assert model.config.attn_pdrop == 0.1  # snapshots keep the user's config.json
    assert disable_dropout(model) == 0


@pytest.mark.parametrize("disabled", [True, False])
def test_the_first_step_sees_the_servers_log_probs_only_without_dropout(
    gpt2_dir: Path, disabled: bool
) -> None:
    """The batch's behaviour log-probs are the model's own in eval mode (what a server
    reports); the step's ``rollout_corr/kl_k3`` compares them with the trainer's."""
    trainer = plain_trainer(spec(gpt2_dir, trainer={"disable_dropout": disabled}))
    row = trainer.train_step(make_batch(64, model_dir=gpt2_dir))
    if disabled:
        assert row["rollout_corr/kl_k3"] == pytest.approx(0.0, abs=1e-9)
        assert row["rollout_corr/ppl_ratio"] == pytest.approx(1.0, abs=1e-6)
    else:
        assert row["rollout_corr/kl_k3"] > 1e-4  # dropout noise on every token
