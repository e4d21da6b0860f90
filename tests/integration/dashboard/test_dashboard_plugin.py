"""The scheduler plugin serves ``/nexrl`` on the cluster's own dashboard (same port
as ``/status``), lists it in Dask's navigation, and a second registration (a resumed
driver on the same scheduler) points the page at the new run folder."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from nexrl.driver.dashboard.plugin import install, page_url


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.status == 200
        return str(r.read().decode())


def test_the_page_is_served_and_listed_on_the_dask_dashboard(
    local_cluster: Any, tmp_path: Path
) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    url = install(local_cluster, str(tmp_path), {"recipe": "r.yaml"})
    status = str(local_cluster.dashboard_link)
    assert url == page_url(status) and url.rsplit("/", 1)[0] == status.rsplit("/", 1)[0]
    page = get(url)
    assert "<title>nexrl" in page or "nexrl" in page
    assert "Bokeh" in page  # a Bokeh document (its session is opened by the page's script)
    assert 'href="nexrl"' in get(status)  # Dask's navigation lists the page

    state = local_cluster.run_on_scheduler(
        lambda dask_scheduler: dict(dask_scheduler._nexrl_dashboard)
    )
    assert state["root"] == str(tmp_path)
    other = tmp_path / "resumed"
    other.mkdir()
    assert install(local_cluster, str(other), {"recipe": "r.yaml"}) == url
    state = local_cluster.run_on_scheduler(
        lambda dask_scheduler: dict(dask_scheduler._nexrl_dashboard)
    )
    assert state["root"] == str(other)
    get(url)  # still served (added once)


def test_page_url() -> None:
    assert page_url("http://127.0.0.1:8787/status") == "http://127.0.0.1:8787/nexrl"
    assert page_url("http://h:1/prefix/status") == "http://h:1/prefix/nexrl"
