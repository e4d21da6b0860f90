"""Padded vs packed RL steps at three length distributions: tokens/s and peak memory.

    python -m bench.packing [--steps 3] [--rows 32]

One DeepSpeed trainer rank (ZeRO-1, CPU, world size 1) of a tiny Qwen2 (hidden
256, 4 layers) trains GRPO steps on batches of ``--rows`` sequences whose response
lengths follow each distribution:

* ``uniform``: 8-256 tokens;
* ``long-tail``: most 8-40, one in eight 40-256 (a log-uniform tail);
* ``outlier``: every row 16 tokens but one of 256.

``padded``: ``trainer.micro_batch_size=8`` rows, each padded to its micro-batch's
longest; ``packed``: ``trainer.packing=true`` with
``trainer.max_tokens_per_micro_batch=2048``. Each (distribution, layout) runs in a
process of its own, alternated, so its peak RSS is its own. tokens/s counts real
tokens (prompt + response) over the median step time after one warm-up step.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

MODEL: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_layers": 4,
    "num_heads": 4,
}
DISTRIBUTIONS = ("uniform", "long-tail", "outlier")
LAYOUTS: dict[str, dict[str, Any]] = {
    "padded": {"micro_batch_size": 8, "packing": False},
    "packed": {"packing": True, "max_tokens_per_micro_batch": 2048},
}


def response_lengths(dist: str, rows: int, rng: random.Random) -> list[int]:
    if dist == "uniform":
        return [rng.randint(8, 256) for _ in range(rows)]
    if dist == "long-tail":
        return [
            round(40 * (256 / 40) ** rng.random()) if rng.random() < 0.125 else rng.randint(8, 40)
            for _ in range(rows)
        ]
    if dist == "outlier":
        return [256 if i == rows // 2 else 16 for i in range(rows)]
    raise ValueError(f"unknown distribution {dist!r}: one of {', '.join(DISTRIBUTIONS)}")


def _batch(dist: str, rows: int, vocab: int, seed: int) -> Any:
    from nexrl.core.types.batch import Batch
    from nexrl.core.types.trajectory import Trajectory

    rng = random.Random(seed)
    trajs = []
    for i, n in enumerate(response_lengths(dist, rows, rng)):
        trajs.append(
            Trajectory(
                prompt_ids=[rng.randrange(10, vocab) for _ in range(rng.randint(8, 16))],
                response_ids=[rng.randrange(10, vocab) for _ in range(n)],
                loss_mask=[1] * n,
                logprobs=[-1.0] * n,
                reward=float(i % 2),
                group_id=i // 4,
                run_id=i % 4,
            )
        )
    return Batch.from_trajectories(trajs, pad_token_id=0)


def _one(dist: str, layout: str, steps: int, rows: int, model_dir: str) -> dict[str, Any]:
    """In this process: time ``steps`` train steps of one (distribution, layout)."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from dataclasses import replace

    from nexrl.core.config.sections.algorithm import AlgorithmConfig
    from nexrl.core.config.sections.trainer import TrainerConfig
    from nexrl.trainer import create_trainer
    from nexrl.trainer.spec import TrainerSpec

    settings: dict[str, Any] = {
        "lr": 1e-4,
        "zero_stage": 1,
        "total_train_steps": 100,
        **LAYOUTS[layout],
    }
    spec = TrainerSpec(
        trainer=replace(TrainerConfig(), **settings),
        algorithm=replace(AlgorithmConfig(), do_old_log_prob_compute=False),
        model_path=model_dir,
    )
    trainer = create_trainer(spec)
    model_config: Any = trainer.model_config
    vocab = int(model_config.vocab_size)
    times, tokens = [], 0
    for s in range(steps + 1):
        batch = _batch(dist, rows, vocab, seed=s)
        tokens = int(batch["attention_mask"].sum())
        t0 = time.perf_counter()
        trainer.train_step(batch)
        if s:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    padded_tokens = int(batch["attention_mask"].numel())
    return {
        "distribution": dist,
        "layout": layout,
        "packing_used": bool(trainer.packing),
        "tokens": tokens,
        "padded_tokens": padded_tokens,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.packing", description=__doc__)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--one", nargs=3, metavar=("DIST", "LAYOUT", "MODEL_DIR"))
    args = parser.parse_args(argv)
    if args.one:
        dist, layout, model = args.one
        print(json.dumps(_one(dist, layout, args.steps, args.rows, model)))
        return 0
    from nexrl.driver.modeling.tiny import save_tiny_model

    model_dir = save_tiny_model(Path(tempfile.mkdtemp()) / "model", seed=0, init_std=0.05, **MODEL)
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for dist in DISTRIBUTIONS:
        for layout in LAYOUTS:
            out = (
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "bench.packing",
                        "--one",
                        dist,
                        layout,
                        str(model_dir),
                        "--steps",
                        str(args.steps),
                        "--rows",
                        str(args.rows),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            results[(dist, layout)] = json.loads(out)
    print(
        "| lengths | real / padded tokens | padded tok/s | packed tok/s | speed-up | peak RSS padded / packed (MiB) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for dist in DISTRIBUTIONS:
        p, k = results[(dist, "padded")], results[(dist, "packed")]
        print(
            f"| {dist} | {p['tokens']} / {p['padded_tokens']} | {p['tokens_per_s']:.0f} | "
            f"{k['tokens_per_s']:.0f} | {k['tokens_per_s'] / p['tokens_per_s']:.2f}x | "
            f"{p['peak_rss_mib']:.0f} / {k['peak_rss_mib']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
