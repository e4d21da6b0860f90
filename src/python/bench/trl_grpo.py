"""TRL's ``GRPOTrainer`` on the default recipe's task, as a command (the baseline of
tests/benchmarks/test_bench_vs_trl.py, test_bench_generation_heavy.py and
build-support/gpu/gen_heavy.py):

    python -m bench.trl_grpo --model DIR --data FILE --out DIR --steps N ...

It trains the model folder ``--model`` (weights and tokenizer) on the prompts of
``--data`` in file order (no shuffle), ``--prompts`` prompts x ``--group-size``
samples per step, ``--max-new-tokens`` new tokens (one by default; none of them an
end of sequence before ``--min-new-tokens``) at temperature 1, constant ``--lr``, no KL, on
CPU with ``--threads`` torch threads (``--device cuda``: the GPU, bf16), no checkpoints,
no report_to, logging every
step. The reward function wraps the recipe's evaluator (``--evaluator``
``path/file.py:Class``) so rewards mean what they mean in our run.

It writes under ``--out``:

* ``metrics.jsonl``: one row per step, ``{"step", "time", "reward/mean",
  "train_start", "completion_min_length", "completion_max_length"}`` (``time``,
  ``train_start``: ``time.time()`` at the end of the step and when training began;
  the shortest and longest completion of the step, in tokens);
* ``setup.json``: what the trainer really used: the parameter checksum of the
  model at the start of training (``param_checksum``), the tokenizer's vocabulary
  and chat template, and the prompt token ids of each step (``step_prompt_ids``,
  one list of ``--prompts`` prompts per step, in order).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any


def param_checksum(model: Any) -> str:
    """sha256 over the float32 bytes of every parameter, by name (order-free)."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="model folder (weights + tokenizer)")
    p.add_argument(
        "--data", required=True, help="JSON lines with 'prompt' and the evaluator's fields"
    )
    p.add_argument("--max-samples", type=int, default=None, help="first N rows only")
    p.add_argument("--evaluator", required=True, help="path/file.py:Class")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--prompts", type=int, default=16, help="prompts per step")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--entropy-coef", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=1)
    p.add_argument(
        "--min-new-tokens",
        type=int,
        default=0,
        help="no end-of-sequence before this many tokens (generation_kwargs min_new_tokens)",
    )
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads; 0 = torch's default (the cores)"
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: TRL on the GPU with bf16 mixed precision (build-support/gpu/gen_heavy.py)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    import torch
    from datasets import Dataset  # pants: no-infer-dep (installed with trl)
    from transformers import AutoTokenizer, PreTrainedTokenizerBase, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from nexrl.core.plugins import load_spec
    from nexrl.rollout_worker import BaseEvaluationTarget

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    rows = rows[: args.max_samples] if args.max_samples else rows
    # Conversational prompts: TRL applies the tokenizer's chat template, as our server does.
    dataset = Dataset.from_list(
        [{**r, "prompt": [{"role": "user", "content": r["prompt"]}]} for r in rows]
    )
    evaluator = load_spec(args.evaluator, [Path.cwd()], "--evaluator")()

    columns = [k for k in rows[0] if k != "prompt"]  # the data row's fields, as TRL passes them

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        out_r: list[float | None] = []
        for i, completion in enumerate(completions):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            data = {"prompt": prompts[i][-1]["content"], **{k: kwargs[k][i] for k in columns}}
            out_r.append(evaluator.evaluate(data, BaseEvaluationTarget(final_answer=text)).reward)
        return out_r

    reward.__name__ = type(evaluator).__name__

    samples = args.prompts * args.group_size
    config = GRPOConfig(
        output_dir=str(out / "trl"),
        use_cpu=args.device == "cpu",
        bf16=args.device == "cuda",
        fp16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        max_steps=args.steps,
        per_device_train_batch_size=samples,  # completions per step: prompts x group
        gradient_accumulation_steps=1,
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        generation_kwargs=(
            {"min_new_tokens": args.min_new_tokens} if args.min_new_tokens > 0 else None
        ),
        temperature=args.temperature,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,  # no KL, no reference model
        epsilon=0.2,
        num_iterations=1,
        entropy_coef=args.entropy_coef,
        shuffle_dataset=False,  # prompts in file order, like data.shuffle=false
        dataloader_num_workers=0,
        seed=args.seed,
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    step_prompts: list[list[list[int]]] = []

    class Recorder(GRPOTrainer):
        """Records the prompt ids each step generated from (TRL's own tokenization)."""

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            batch = super()._generate_and_score_completions(inputs)
            ids, mask = batch["prompt_ids"], batch["prompt_mask"]
            rows_ = [ids[i][mask[i].bool()].tolist() for i in range(0, len(ids), args.group_size)]
            step_prompts.append(rows_)
            return batch

    setup: dict[str, Any] = {}
    metrics = (out / "metrics.jsonl").open("w")

    class Log(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            setup["param_checksum"] = param_checksum(kwargs["model"])
            setup["train_start"] = time.time()

        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            logs = kwargs.get("logs") or {}
            if "reward" in logs:
                row = {
                    "step": int(state.global_step),
                    "time": round(time.time(), 4),
                    "reward/mean": float(logs["reward"]),
                    "train_start": setup["train_start"],
                    "completion_min_length": logs.get("completions/min_length"),
                    "completion_max_length": logs.get("completions/max_length"),
                }
                metrics.write(json.dumps(row) + "\n")
                metrics.flush()

    trainer = Recorder(
        model=args.model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Log()],
    )
    trainer.train()
    metrics.close()
    used = trainer.processing_class  # the tokenizer TRL tokenized with
    assert isinstance(used, PreTrainedTokenizerBase) and trainer.model is not None
    setup.update(
        vocab=used.get_vocab(),
        chat_template=used.chat_template,
        step_prompt_ids=step_prompts,
        device=str(next(trainer.model.parameters()).device),
        torch_threads=torch.get_num_threads(),
    )
    (out / "setup.json").write_text(json.dumps(setup))


if __name__ == "__main__":
    main()
