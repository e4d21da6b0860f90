"""Process bodies for the integration tests (run as ``python -m tests.integration.pool._workers``)."""

from __future__ import annotations

import json
import sys

import numpy as np

from nexrl.core.pool import PoolWriter, TrajectoryPool, get_writer
from nexrl.core.pool.config import PoolConfig
from tests.unit.pool._data import check_columns, fast_columns, make_columns


def write_uids(store: str, uids: list[int], block: int, group_size: int) -> int:
    """Rollout-task body: append ``uids`` in blocks through the per-process writer."""
    w = get_writer(PoolConfig(store=store))
    for i in range(0, len(uids), block):
        w.append(make_columns(uids[i : i + block], group_size=group_size))
    return len(uids)


def writer_loop(store: str, first_uid: int, block: int) -> None:
    """Append blocks forever, announcing each append on stdout just before it starts."""
    w = PoolWriter(store)
    uid = first_uid
    k = 0
    while True:
        cols = fast_columns(np.arange(uid, uid + block))
        print(f"start {k} {uid}", flush=True)
        w.append(cols)
        print(f"done {k} {uid}", flush=True)
        uid += block
        k += 1


def consumer_loop(store: str, batch_size: int, log_path: str, resume: bool) -> None:
    """Consume batches, logging (uids, state_dict) after each as a trainer checkpoint would."""
    pool = TrajectoryPool(PoolConfig(store=store, batch_size=batch_size))
    if resume:  # keep the complete checkpoint lines (the kill may have cut the last one)
        complete = []
        with open(log_path) as f:
            lines = f.read().splitlines()
        for line in lines:
            try:
                complete.append(json.loads(line))
            except json.JSONDecodeError:
                break
        with open(log_path, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in complete)
        if complete:
            pool.load_state_dict(complete[-1]["state"])
    while (batch := pool.get_batch()) is not None:
        uids = check_columns(batch.columns)
        with open(log_path, "a") as f:
            f.write(json.dumps({"uids": uids, "state": pool.state_dict()}) + "\n")
        print("batch", flush=True)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "writer":
        writer_loop(args[0], int(args[1]), int(args[2]))
    elif cmd == "consumer":
        consumer_loop(args[0], int(args[1]), args[2], args[3] == "resume")
