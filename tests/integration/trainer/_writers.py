"""Subprocess writers for the atomicity tests (run as ``python -m tests.integration.trainer._writers``).

``snapshot-loop ROOT``: publishes v1, v2, ... of a ~27 MB model forever; every
weight of version N equals ``base + N``. Prints ``start N`` / ``done N``.
``snapshot-efbig ROOT LIMIT``: with a file-size limit of LIMIT bytes (a real
failing write, like a full disk), publishes v2 over an existing v1; prints the error.
``checkpoint-loop ROOT``: saves checkpoints step_1, step_2, ... with a 32 MB
engine file; prints ``start N`` / ``done N``.
"""

from __future__ import annotations

import resource
import signal
import sys
from pathlib import Path
from typing import Any

import torch

from nexrl.core.weights.checkpoint import CheckpointManager
from nexrl.core.weights.snapshot import SnapshotPublisher
from nexrl.driver.modeling.tiny import build_tiny_model

BIG: dict[str, Any] = {
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_heads": 8,
    "num_kv_heads": 2,
}


def big_model() -> torch.nn.Module:
    return build_tiny_model(427, seed=0, **BIG)


def versioned_state(model: torch.nn.Module, version: int) -> dict[str, torch.Tensor]:
    return {k: v + float(version) for k, v in model.state_dict().items()}


class FileEngine:
    rank = 0
    world_size = 1

    def __init__(self) -> None:
        self.payload = torch.zeros(8 * 1024 * 1024)  # 32 MB

    def save_checkpoint(self, save_dir: str, tag: str) -> None:
        (Path(save_dir) / tag).mkdir(parents=True)
        torch.save(self.payload, Path(save_dir) / tag / "w.pt")

    def load_checkpoint(self, load_dir: str, tag: str) -> None:
        self.payload = torch.load(Path(load_dir) / tag / "w.pt")

    def barrier(self) -> None:
        pass

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone()


def main(argv: list[str]) -> None:
    mode, root = argv[0], Path(argv[1])
    if mode == "snapshot-loop":
        model = big_model()
        pub = SnapshotPublisher(root, keep=3)
        version = 1
        while True:
            print(f"start {version}", flush=True)
            pub.publish(versioned_state(model, version), model.config, version)
            print(f"done {version}", flush=True)
            version += 1
    elif mode == "snapshot-efbig":
        model = big_model()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit raises EFBIG
        limit = int(argv[2])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        try:
            SnapshotPublisher(root).publish(versioned_state(model, 2), model.config, 2)
        except Exception as exc:  # OSError, or safetensors' wrapper of it
            print(f"failed {type(exc).__name__}: {exc}", flush=True)
            return
        print("published", flush=True)
    elif mode == "checkpoint-loop":
        mgr, engine = CheckpointManager(root), FileEngine()
        step = 1
        while True:
            print(f"start {step}", flush=True)
            engine.payload.fill_(float(step))
            mgr.save(engine, step, {"global_step": step, "policy_version": step})
            print(f"done {step}", flush=True)
            step += 1
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
