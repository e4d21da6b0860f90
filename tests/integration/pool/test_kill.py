"""Processes killed with SIGKILL: a writer mid-append leaves only whole trajectories
and nothing corrupt; a consumer killed mid-run resumes from its checkpoint exactly."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from nexrl.core.pool import PoolWriter, TrajectoryPool
from nexrl.core.pool.commits import CommitLog
from nexrl.core.pool.config import PoolConfig
from nexrl.core.pool.kv import LocalKV
from nexrl.core.pool.layout import ROW_COLUMNS
from tests.unit.pool._data import fast_check, fast_columns, make_columns, must

ROOT = Path(__file__).resolve().parents[3]
# The interpreter running the tests may get its sources from sys.path only (Pants
# sandboxes): hand the same path to the writer subprocesses.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.pool._workers", *args],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
    )


def test_writer_killed_mid_append_leaves_only_whole_trajectories(tmp_path):
    store = str(tmp_path / "pool.zarr")
    block = 20_000  # big blocks (~0.7M tokens): an append lasts long enough to be killed in
    rng = random.Random(0)
    killed_in_write = victims = 0
    while victims < 3 or (killed_in_write == 0 and victims < 6):
        proc = spawn("writer", store, str(victims * 10**6), str(block))
        target = rng.randint(1, 3)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(f"start {target} "):
                break
        time.sleep(rng.uniform(0.0, 0.01))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        killed_in_write += f"done {target} " not in out
        assert proc.returncode == -signal.SIGKILL
        victims += 1
    assert killed_in_write >= 1  # at least one kill landed inside an append
    # the pool is readable and holds exactly the committed blocks, whole
    markers = CommitLog(LocalKV(store)).scan({})
    committed = sum(m.n for m in markers)
    assert committed % block == 0 and committed >= victims * block
    pool = TrajectoryPool(PoolConfig(store=store, batch_size=block))
    delivered: list[int] = []
    while (batch := pool.get_batch()) is not None:
        delivered += fast_check(batch.columns).tolist()
    assert len(delivered) == len(set(delivered)) == committed
    by_first = sorted({u - (u % 10**6) for u in delivered})
    for base in by_first:
        got = sorted(u for u in delivered if u - base < 10**6 and u >= base)
        assert got == list(range(base, base + len(got)))  # a prefix of blocks, no holes
    # every committed chunk also decodes through zarr itself
    for seg in (Path(store) / "segments").iterdir():
        if not seg.is_dir():
            continue
        g: Any = zarr.open_group(str(seg), mode="r")
        mine = [m for m in markers if m.writer == seg.name]
        for m in mine:
            assert np.asarray(g["rows"][m.row : m.row + m.n]).shape == (m.n, len(ROW_COLUMNS))
            assert (
                len(g["response_ids"][m.response[0] : m.response[1]])
                == m.response[1] - m.response[0]
            )
    # and life goes on: a new writer appends, the consumer sees it
    PoolWriter(store).append(fast_columns(np.arange(10**7, 10**7 + block)))
    assert fast_check(must(pool.get_batch()).columns).min() == 10**7


def test_consumer_killed_resumes_from_checkpoint_exactly(tmp_path):
    store = str(tmp_path / "pool.zarr")
    n, batch = 600, 10
    w = PoolWriter(store)
    for i in range(0, n, 50):
        w.append(make_columns(range(i, i + 50)))
    log = tmp_path / "ckpt.jsonl"
    log.write_text("")
    proc = spawn("consumer", store, str(batch), str(log), "fresh")
    assert proc.stdout is not None
    for k, _ in enumerate(proc.stdout):
        if k == 7:
            break
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.endswith("}")]
    assert 8 <= len(lines) < n // batch
    proc = spawn("consumer", store, str(batch), str(log), "resume")
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    trained = [u for x in log.read_text().splitlines() for u in json.loads(x)["uids"]]
    assert sorted(trained) == list(range(n))  # nothing lost, nothing trained twice
