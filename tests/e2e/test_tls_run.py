"""End-to-end: the default recipe trains on a LocalCluster whose comms are all TLS
(``cluster.tls.temporary: true``): the scheduler, every worker, the trainer actor's
worker and the driver's client on ``tls://``."""

from __future__ import annotations

import json
from pathlib import Path

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows


def test_default_recipe_trains_with_tls_on_every_dask_comm(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(RECIPE, overrides(out, "cluster.tls.temporary=true", steps=2))
    result = Controller(recipe, progress=False).run()
    assert (result.steps, result.stopped_by) == (2, None)
    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["pool/num_groups"] == 4 and r["version/trainer"] == r["step"] for r in rows)

    record = json.loads((out / "cluster.json").read_text())
    assert record["scheduler"].startswith("tls://127.0.0.1:")
    assert len(record["rollout_workers"]) == 2
    assert all(addr.startswith("tls://") for addr in record["rollout_workers"])
    assert "Dask scheduler: tls://127.0.0.1:" in (out / "logs" / "driver.log").read_text()
    # The temporary key lived in memory: nothing of it was written to the run folder.
    files = [p for p in out.rglob("*") if p.is_file()]
    assert [p for p in files if b"PRIVATE KEY" in p.read_bytes()] == []
