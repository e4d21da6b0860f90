"""The driver's CPU per step for handing the batch to the trainer: the previous
design (pad the trained rows, write ``batches/step_N.pt``) vs a ``BatchRef`` (the
rows' addresses in the pool), on a real zarr pool, in the same run.

    python -m bench.driver_batch [--rows 128] [--repeat 20]

Both start from what the driver has either way: the pool's batch (columns read
from zarr) and the trained rows. Measured at three response lengths; the
rank-side read (``BatchRef.load``) is timed too, since it moved there.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["main"]


def _cpu_ms(fn, repeat: int) -> float:
    fn()  # warm-up (first calls pay lazy imports and allocator growth)
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.driver_batch", description=__doc__)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)

    from nexrl.core.pool import TrajectoryColumns, TrajectoryPool
    from nexrl.core.pool.config import PoolConfig
    from nexrl.core.types.batch import Batch
    from nexrl.trainer.batch_io import BatchRef, save_batch

    rng = np.random.default_rng(0)
    print(
        "| response tokens | rows | pad + write file (ms CPU) | BatchRef (ms CPU) | ratio "
        "| a rank's read of a BatchRef (ms CPU) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for resp in (1, 64, 512):
        root = Path(tempfile.mkdtemp())
        pool = TrajectoryPool(PoolConfig(store=str(root / "pool.zarr"), batch_size=args.rows))
        n = args.rows
        plens = rng.integers(20, 40, n)
        rlens = np.maximum(1, rng.integers(resp // 2, resp + 1, n))
        pool.writer().append(
            TrajectoryColumns.from_arrays(
                prompt_ids=rng.integers(0, 1000, int(plens.sum())).astype(np.int32),
                prompt_lens=plens,
                response_ids=rng.integers(0, 1000, int(rlens.sum())).astype(np.int32),
                loss_mask=np.ones(int(rlens.sum()), np.int8),
                logprobs=np.full(int(rlens.sum()), -1.0, np.float32),
                response_lens=rlens,
                reward=rng.random(n).astype(np.float32),
                group_id=np.arange(n) // 8,
                run_id=np.arange(n) % 8,
                policy_version=np.zeros(n, np.int64),
            )
        )
        batch = pool.get_batch()
        assert batch is not None and batch.rows is not None
        keep = np.arange(n)
        trained, rows = batch.columns.take(keep), batch.rows
        path = root / "step_1.pt"
        before = _cpu_ms(
            lambda t=trained, p=path: save_batch(Batch.from_columns(t, 0), p), args.repeat
        )
        after = _cpu_ms(lambda r=rows, k=keep: BatchRef(r.take(k), 0), args.repeat)
        ref = BatchRef(rows.take(keep), 0)
        rank = _cpu_ms(ref.load, args.repeat)
        print(f"| {resp} | {n} | {before:.2f} | {after:.3f} | {before / after:.0f}x | {rank:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
