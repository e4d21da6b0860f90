from __future__ import annotations

import numpy as np
import pytest

from nexrl.core.pool import ConsumerConflictError
from nexrl.core.pool.cursor import Cursor, CursorStore, indices_of, ranges_of
from nexrl.core.pool.kv import LocalKV


def test_ranges_roundtrip():
    assert ranges_of(np.array([5, 1, 2, 3, 7, 8])) == [[1, 4], [5, 6], [7, 9]]
    assert indices_of([[1, 4], [7, 9]]).tolist() == [1, 2, 3, 7, 8]
    assert ranges_of(np.array([], dtype=np.int64)) == []


def test_mark_folds_complete_commits_into_done():
    c = Cursor()
    c.mark("w", 1, np.array([0, 1]), 2)  # commit 1 done before commit 0
    assert c.done("w") == 0 and c.handled("w", 1) is not None
    c.mark("w", 0, np.array([2]), 3)
    c.mark("w", 0, np.array([0, 1]), 3)
    assert c.done("w") == 2 and c.writers["w"].partial == {}
    later = c.handled("w", 5)
    assert c.handled("w", 0) is None and later is not None and later.tolist() == []
    with pytest.raises(ValueError):
        c.mark("w", 0, np.array([0]), 3)
    c.mark("w", 2, np.array([1]), 3)
    with pytest.raises(ValueError, match="twice"):
        c.mark("w", 2, np.array([1]), 3)
    back = Cursor.from_json(c.to_json())
    assert back == c


def test_store_generations_exclusive_and_latest_hint(tmp_path):
    kv = LocalKV(tmp_path)
    store = CursorStore(kv, "trainer")
    assert store.load() == Cursor()
    for g in (1, 2, 3):
        store.save(Cursor(generation=g, steps=g))
    assert store.latest() == 3 and store.load().steps == 3 and store.load(2).steps == 2
    with pytest.raises(ConsumerConflictError):
        store.save(Cursor(generation=3))
    kv.put("_consumers/trainer/LATEST", b"1")  # stale hint: still finds the newest
    assert store.latest() == 3
    kv.delete("_consumers/trainer/LATEST")
    assert store.latest() == 3 and store.generations() == [1, 2, 3]
    with pytest.raises(ValueError):
        CursorStore(kv, "../x")
