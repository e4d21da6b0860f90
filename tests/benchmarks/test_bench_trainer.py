"""Trainer benchmarks (pytest-benchmark), each against a baseline in the same run.

* ``trainer-step``: one GRPO update (PPO-clip loss through the registries, AdamW,
  grad clip 1.0) of the DeepSpeed trainer (ZeRO-1, CPU accelerator, gloo, world
  size 1, ``train_step`` with all its metrics) against a plain PyTorch loop doing
  the same forward / loss / backward / step on the same model and batch.
  extra_info: tokens/s, and for DeepSpeed ``vs_plain`` (its tokens/s over the
  plain loop's) and ``vs_plain_paired`` (median of per-pair ratios, each
  DeepSpeed step right after a plain step: robust to load on a shared machine).
* ``snapshot-publish``: ``publish_snapshot`` of a ~27 MB model (consolidate,
  write safetensors + config + tokenizer, fsync, rename, repoint ``latest``,
  prune) against the I/O floor: the same number of bytes written with plain
  file writes + fsync. extra_info: bytes, MB/s, ``vs_floor`` (floor time over
  publish time; 1.0 = at the floor) and ``vs_floor_paired`` (median over
  publishes each right after a floor write). ``test_snapshot_checksums``: the
  sha256 manifest a publish writes (``tree_checksums`` of the same snapshot),
  extra_info ``share_of_publish`` (its time over the publish's mean, same run).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from nexrl.trainer import create_trainer
from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS, entropy_from_logits
from nexrl.trainer.algorithms.advantages import token_level_from_scalar
from nexrl.trainer.algorithms.policy_loss import ppo_clip
from nexrl.trainer.ops import model_inputs, response_log_probs
from tests.unit.trainer._helpers import make_batch, spec

os.environ.setdefault("DS_ACCELERATOR", "cpu")

STEP_MODEL = {"hidden_size": 128, "intermediate_size": 256, "num_layers": 2, "num_heads": 4}
PUBLISH_MODEL = {"hidden_size": 512, "intermediate_size": 1376, "num_layers": 2, "num_heads": 8}
TRAIN = {"lr": 1e-4, "grad_clip": 1.0, "micro_batch_size": 32, "zero_stage": 1}
ALGO = {"do_old_log_prob_compute": False}
# Rounds of the train-step pair: 3 in CI (its time), 10 with NEXRL_BENCH_LARGE=1 (the table).
STEP_ROUNDS = 10 if os.environ.get("NEXRL_BENCH_LARGE") == "1" else 3
_results: dict[str, Any] = {}


def _save(path: Path, **model: Any) -> Path:
    from nexrl.driver.modeling.tiny import save_tiny_model

    return save_tiny_model(path, seed=0, init_std=0.05, **model)


@pytest.fixture(scope="module")
def step_setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model_dir = _save(tmp_path_factory.mktemp("bench") / "model", **STEP_MODEL)
    batch = make_batch(
        427,
        groups=8,
        group_size=4,
        seed=0,
        model_dir=model_dir,
        prompt_len=(16, 32),
        response_len=(32, 96),
    )
    return {"model_dir": model_dir, "batch": batch, "tokens": float(batch["attention_mask"].sum())}


class PlainLoop:
    """The baseline: the same GRPO step written directly in PyTorch."""

    def __init__(self, model_dir: Path, batch: Any) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model.config.use_cache = False
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=TRAIN["lr"], weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8
        )
        self.batch = batch

    def step(self) -> float:
        b, mask = self.batch, self.batch["response_mask"].bool()
        rewards = token_level_from_scalar(b["rewards"], b["response_mask"])
        adv, _ = ADVANTAGE_ESTIMATORS.get("grpo")(rewards, mask, b["group_ids"], b["run_ids"])
        self.model.train()
        logits = self.model(**model_inputs(b)).logits
        lp, _ = response_log_probs(logits, b.prompt_width, b["responses"], entropy_grad=None)
        loss, _ = ppo_clip(lp, b["old_log_probs"], adv, mask, "token-mean")
        with torch.no_grad():  # the trainer reports entropy too
            z = logits[:, b.prompt_width - 1 : -1].float()
            entropy_from_logits(z)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), TRAIN["grad_clip"])
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(norm)


@pytest.mark.benchmark(group="trainer-step")
def test_train_step_plain_pytorch(benchmark: Any, step_setup: dict[str, Any]) -> None:
    loop = PlainLoop(step_setup["model_dir"], step_setup["batch"])
    benchmark.pedantic(loop.step, rounds=STEP_ROUNDS, warmup_rounds=1)
    tps = step_setup["tokens"] / benchmark.stats.stats.mean
    _results["plain_tokens_per_s"] = tps
    benchmark.extra_info.update({"tokens_per_step": step_setup["tokens"], "tokens_per_s": tps})


@pytest.mark.benchmark(group="trainer-step")
def test_train_step_deepspeed(benchmark: Any, step_setup: dict[str, Any]) -> None:
    trainer = create_trainer(spec(step_setup["model_dir"], trainer=TRAIN, algorithm=ALGO))
    batch = step_setup["batch"]
    metrics = benchmark.pedantic(
        trainer.train_step, args=(batch,), rounds=STEP_ROUNDS, warmup_rounds=1
    )
    assert metrics["actor/update_skipped"] == 0.0
    tps = step_setup["tokens"] / benchmark.stats.stats.mean
    loop = PlainLoop(step_setup["model_dir"], batch)
    ratios = []
    for _ in range(8):  # paired: a plain step, then a DeepSpeed step
        t0 = time.perf_counter()
        loop.step()
        t1 = time.perf_counter()
        trainer.train_step(batch)
        ratios.append((t1 - t0) / (time.perf_counter() - t1))
    info = {"tokens_per_step": step_setup["tokens"], "tokens_per_s": tps}
    if "plain_tokens_per_s" in _results:
        info["vs_plain"] = tps / _results["plain_tokens_per_s"]
    info["vs_plain_paired"] = statistics.median(ratios)
    info["load_avg_1m"] = os.getloadavg()[0]  # the machine may be shared
    benchmark.extra_info.update(info)
    trainer.close()


def _publishing_trainer(root: Path, model: dict[str, Any], keep: int) -> tuple[Any, Any]:
    """A trainer of a tiny model of these shapes publishing under ``root / "snaps"``,
    and its first snapshot."""
    model_dir = _save(root / "model", **model)
    trainer = create_trainer(
        spec(model_dir, trainer=TRAIN, snapshot_dir=str(root / "snaps"), keep_snapshots=keep)
    )
    snap = trainer.publish_snapshot()
    assert snap is not None
    return trainer, snap


@pytest.fixture(scope="module")
def publish_setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("publish")
    trainer, snap = _publishing_trainer(root, PUBLISH_MODEL, keep=2)
    return {"root": root, "trainer": trainer, "bytes": snap.num_bytes}


def _write_floor(path: Path, num_bytes: int) -> None:
    block = b"\0" * (8 * 1024 * 1024)
    with open(path, "wb") as fh:
        left = num_bytes
        while left > 0:
            left -= fh.write(block[: min(left, len(block))])
        fh.flush()
        os.fsync(fh.fileno())


@pytest.mark.benchmark(group="snapshot-publish")
def test_disk_write_floor(benchmark: Any, publish_setup: dict[str, Any]) -> None:
    path = publish_setup["root"] / "floor.bin"

    def setup() -> None:
        path.unlink(missing_ok=True)

    benchmark.pedantic(
        _write_floor, args=(path, publish_setup["bytes"]), setup=setup, rounds=5, warmup_rounds=1
    )
    _results["floor_s"] = benchmark.stats.stats.mean
    mb = publish_setup["bytes"] / 1e6
    benchmark.extra_info.update(
        {"bytes": publish_setup["bytes"], "MB_per_s": mb / _results["floor_s"]}
    )
    path.unlink(missing_ok=True)


@pytest.mark.benchmark(group="snapshot-publish")
def test_snapshot_publish(benchmark: Any, publish_setup: dict[str, Any]) -> None:
    trainer = publish_setup["trainer"]

    def publish() -> None:
        trainer.policy_version += 1
        trainer.publish_snapshot()

    benchmark.pedantic(publish, rounds=5, warmup_rounds=1)
    mean = _results["publish_s"] = benchmark.stats.stats.mean
    floor_file = publish_setup["root"] / "floor-paired.bin"
    ratios = []
    for _ in range(5):  # paired: the floor write, then a publish of the same bytes
        floor_file.unlink(missing_ok=True)
        t0 = time.perf_counter()
        _write_floor(floor_file, publish_setup["bytes"])
        t1 = time.perf_counter()
        publish()
        ratios.append((t1 - t0) / (time.perf_counter() - t1))
    floor_file.unlink(missing_ok=True)
    info: dict[str, float] = {
        "bytes": publish_setup["bytes"],
        "MB_per_s": publish_setup["bytes"] / 1e6 / mean,
    }
    if "floor_s" in _results:
        info["vs_floor"] = _results["floor_s"] / mean
    info["vs_floor_paired"] = statistics.median(ratios)
    info["load_avg_1m"] = os.getloadavg()[0]
    benchmark.extra_info.update(info)
    snaps = sorted(p.name for p in (publish_setup["root"] / "snaps").iterdir())
    assert len([s for s in snaps if s.startswith("v")]) == 2 and "latest" in snaps


@pytest.mark.benchmark(group="snapshot-publish")
def test_snapshot_checksums(benchmark: Any, publish_setup: dict[str, Any]) -> None:
    """What checking a snapshot's sha256 manifest costs (``verify_snapshot``, on resume):
    the files read back and hashed. A publish no longer does this: it hashes the
    weights while writing them (the two benchmarks below)."""
    from nexrl.core.util.checksums import tree_checksums
    from nexrl.core.weights.snapshot import CHECKSUMS_FILE, VERSION_FILE, latest_snapshot

    found = latest_snapshot(publish_setup["root"] / "snaps")
    assert found is not None
    path = found[1]
    sums = benchmark.pedantic(tree_checksums, args=(path,), rounds=5, warmup_rounds=1)
    assert json.loads((path / CHECKSUMS_FILE).read_text()) == {
        k: v for k, v in sums.items() if k not in (CHECKSUMS_FILE, VERSION_FILE)
    }
    info: dict[str, float] = {"load_avg_1m": os.getloadavg()[0]}
    if "publish_s" in _results:
        info["share_of_publish"] = benchmark.stats.stats.mean / _results["publish_s"]
    benchmark.extra_info.update(info)


HASHED_MB = 256  # ~a third of the 358M-parameter bf16 snapshot of docs/trainer.md


@pytest.fixture(scope="module")
def hash_payload() -> list[memoryview]:
    """Weights-like bytes: HASHED_MB of random bf16 in 8 tensors."""
    gen = torch.Generator().manual_seed(0)
    n = HASHED_MB * 1024 * 1024 // 2 // 8
    return [
        memoryview(
            cast(Any, torch.randn(n, generator=gen).to(torch.bfloat16).view(torch.int16).numpy())
        )
        for _ in range(8)
    ]


def _record_speedup(benchmark: Any, name: str, mb: int, baseline: str) -> None:
    """extra_info (size, load, and the speedup over the baseline test's mean, kept in
    ``_results[f"{baseline}_s"]`` when that test ran first in this run), printed."""
    mean = benchmark.stats.stats.mean
    info: dict[str, float] = {"mb": mb, "load_avg_1m": os.getloadavg()[0]}
    if f"{baseline}_s" in _results:
        info[f"speedup_over_{baseline}"] = _results[f"{baseline}_s"] / mean
    benchmark.extra_info.update(info)
    print(f"\n{name} {mb} MB: {mean:.3f} s, {info}")


@pytest.mark.benchmark(group="snapshot-hash")
def test_write_then_read_back_and_hash(
    benchmark: Any, hash_payload: list[memoryview], tmp_path: Path
) -> None:
    """Baseline: write the bytes, then sha256 the file (a publish before write_hashed)."""
    from nexrl.core.util.checksums import file_sha256

    path = tmp_path / "w.bin"

    def run() -> str:
        with open(path, "wb") as fh:
            for buf in hash_payload:
                fh.write(buf)
        return file_sha256(path)

    _results["read_back_digest"] = benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    _results["read_back_s"] = benchmark.stats.stats.mean
    benchmark.extra_info.update(mb=HASHED_MB, load_avg_1m=os.getloadavg()[0])


@pytest.mark.benchmark(group="snapshot-hash")
def test_write_hashed(benchmark: Any, hash_payload: list[memoryview], tmp_path: Path) -> None:
    """``write_hashed``: the same bytes hashed on a second thread while they are written."""
    from nexrl.core.util.checksums import write_hashed

    path = tmp_path / "w.bin"

    def run() -> str:
        with open(path, "wb") as fh:
            return write_hashed(fh, hash_payload)

    digest = benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    if "read_back_digest" in _results:
        assert digest == _results["read_back_digest"]
    _record_speedup(benchmark, "write_hashed", HASHED_MB, "read_back")


SHARDED_MB = 256


@pytest.fixture(scope="module")
def shard_state() -> dict[str, torch.Tensor]:
    """SHARDED_MB of random bf16 weights in 32 tensors (a model's layers, roughly)."""
    gen = torch.Generator().manual_seed(0)
    n = SHARDED_MB * 1024 * 1024 // 2 // 32
    return {f"layers.{i}.w": torch.randn(n, generator=gen).to(torch.bfloat16) for i in range(32)}


def _publish_rounds(benchmark: Any, state: dict[str, torch.Tensor], root: Path, shard: int) -> Any:
    from transformers import Qwen2Config

    from nexrl.core.weights.snapshot import SnapshotPublisher

    publisher = SnapshotPublisher(root, keep=1, max_shard_bytes=shard)
    versions = iter(range(1, 1000))
    snap = benchmark.pedantic(
        lambda: publisher.publish(state, Qwen2Config(), next(versions)), rounds=5, warmup_rounds=1
    )
    publisher.wait()
    return snap


@pytest.mark.benchmark(group="snapshot-shards")
def test_publish_one_file(
    benchmark: Any, shard_state: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    """Baseline: the whole snapshot as one safetensors file (one writer, one hasher)."""
    snap = _publish_rounds(benchmark, shard_state, tmp_path, shard=1 << 40)
    assert (snap.path / "model.safetensors").is_file()
    _results["one_file_s"] = benchmark.stats.stats.mean
    benchmark.extra_info.update(mb=SHARDED_MB, load_avg_1m=os.getloadavg()[0])


@pytest.mark.benchmark(group="snapshot-shards")
def test_publish_parallel_shards(
    benchmark: Any, shard_state: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    """The same snapshot in 64 MiB shards, written, hashed and fsynced by up to
    ``MAX_SHARD_WRITERS`` threads (one per core); every shard verifies."""
    from safetensors.torch import load_file

    from nexrl.core.weights.snapshot import verify_snapshot

    snap = _publish_rounds(benchmark, shard_state, tmp_path, shard=64 << 20)
    shards = sorted(snap.path.glob("model-*-of-*.safetensors"))
    assert len(shards) == 4 and verify_snapshot(snap.path) is None
    loaded: dict[str, torch.Tensor] = {}
    for f in shards:
        loaded.update(load_file(f))
    assert loaded.keys() == shard_state.keys()
    assert all(torch.equal(loaded[k], v) for k, v in shard_state.items())
    _record_speedup(benchmark, "parallel shards", SHARDED_MB, "one_file")


def _write_and_fsync(path: Path, payload: list[memoryview], writeback: bool) -> str:
    from nexrl.core.util.checksums import write_hashed

    with open(path, "wb") as fh:
        digest = write_hashed(fh, payload, writeback=writeback)
        os.fsync(fh.fileno())
    return digest


@pytest.mark.benchmark(group="snapshot-writeback")
def test_write_hashed_then_fsync(
    benchmark: Any, hash_payload: list[memoryview], tmp_path: Path
) -> None:
    """Baseline: write (hashed while written), then fsync the whole file."""
    path = tmp_path / "w.bin"
    _results["fsync_digest"] = benchmark.pedantic(
        lambda: _write_and_fsync(path, hash_payload, False), rounds=5, warmup_rounds=1
    )
    _results["fsync_s"] = benchmark.stats.stats.mean
    benchmark.extra_info.update(mb=HASHED_MB, load_avg_1m=os.getloadavg()[0])


@pytest.mark.benchmark(group="snapshot-writeback")
def test_write_hashed_with_writeback_then_fsync(
    benchmark: Any, hash_payload: list[memoryview], tmp_path: Path
) -> None:
    """The same with each 16 MiB piece sent to disk as it is written
    (``sync_file_range``): the final fsync waits for the last pieces only."""
    path = tmp_path / "w.bin"
    digest = benchmark.pedantic(
        lambda: _write_and_fsync(path, hash_payload, True), rounds=5, warmup_rounds=1
    )
    if "fsync_digest" in _results:
        assert digest == _results["fsync_digest"]
    _record_speedup(benchmark, "writeback", HASHED_MB, "fsync")


SMALL_MODEL = {"hidden_size": 64, "intermediate_size": 128, "num_layers": 2, "num_heads": 4}


@pytest.fixture(scope="module")
def small_publish(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The default recipe's model shapes (a ~330 KB snapshot): what the sync step of
    ``nexrl train`` publishes after every update, with a trainer publishing it."""
    root = tmp_path_factory.mktemp("small")
    trainer, snap = _publishing_trainer(root, SMALL_MODEL, keep=3)
    files = {p.name: p.read_bytes() for p in snap.path.iterdir() if p.is_file()}
    return {"root": root, "trainer": trainer, "files": files}


def _write_folder_floor(folder: Path, files: dict[str, bytes]) -> None:
    """The least a durable folder of these files costs: each file written and
    fsynced, then the folder fsynced (no hashing, no rename, no other folder)."""
    folder.mkdir()
    for name, data in files.items():
        with open(folder / name, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.benchmark(group="snapshot-small")
def test_small_snapshot_floor(benchmark: Any, small_publish: dict[str, Any]) -> None:
    """Baseline: the same files as a published snapshot of the default recipe's model,
    written and fsynced one by one into a new folder."""
    import shutil

    folders = iter(range(1000))
    root = small_publish["root"]

    def setup() -> tuple[tuple[Path, dict[str, bytes]], dict[str, Any]]:
        folder = root / f"floor{next(folders)}"
        shutil.rmtree(folder, ignore_errors=True)
        return (folder, small_publish["files"]), {}

    benchmark.pedantic(_write_folder_floor, setup=setup, rounds=20, warmup_rounds=2)
    _results["small_floor_s"] = benchmark.stats.stats.mean
    benchmark.extra_info.update(files=len(small_publish["files"]), load_avg_1m=os.getloadavg()[0])


@pytest.mark.benchmark(group="snapshot-small")
def test_small_snapshot_publish(benchmark: Any, small_publish: dict[str, Any]) -> None:
    """``publish_snapshot`` of the default recipe's model, as the trainer does after each
    update (write and hash, checksums.json, fsyncs, rename, ``latest``, prune); the
    published weights are the trainer's. extra_info ``x_floor``: its mean time over the
    floor's (1.0 = at the floor)."""
    from safetensors.torch import load_file

    from nexrl.core.weights.snapshot import verify_snapshot

    trainer = small_publish["trainer"]

    def publish() -> Any:
        trainer.policy_version += 1
        return trainer.publish_snapshot()

    snap = benchmark.pedantic(publish, rounds=20, warmup_rounds=2)
    assert verify_snapshot(snap.path) is None
    weights = load_file(snap.path / "model.safetensors")
    params = dict(trainer.engine.module.named_parameters())
    assert all(torch.equal(weights[k], params[k].detach()) for k in weights)
    info: dict[str, float] = {"load_avg_1m": os.getloadavg()[0]}
    if "small_floor_s" in _results:
        info["x_floor"] = benchmark.stats.stats.mean / _results["small_floor_s"]
        print(f"\nsmall snapshot publish: {info['x_floor']:.2f}x the floor's time")
    benchmark.extra_info.update(info)
