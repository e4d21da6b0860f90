"""``cluster.tls`` on a real LocalCluster (worker processes): the scheduler listens on
``tls://``, the run's client and workers talk, and a client without the run's
certificate cannot."""

from __future__ import annotations

from pathlib import Path

import pytest
from distributed import Client, Security
from distributed.comm.core import CommClosedError, FatalCommClosedError

from nexrl.core.config.sections.cluster import ClusterConfig, TlsConfig
from nexrl.core.util.dask_workers import workers_of
from nexrl.driver.cluster.cluster import start_cluster


def local(tls: TlsConfig) -> ClusterConfig:
    return ClusterConfig(n_workers=2, dashboard_address="127.0.0.1:0", tls=tls)


def test_temporary_tls_cluster_refuses_clients_without_its_certificate() -> None:
    handle = start_cluster(local(TlsConfig(temporary=True)), "t")
    try:
        address = handle.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        workers = workers_of(handle.client)
        assert len(workers) == 2 and all(w.startswith("tls://") for w in workers)
        # Work flows between the client and both worker processes.
        assert sorted(handle.client.run(lambda: 7).values()) == [7, 7]
        fut = handle.client.submit(lambda x: x * 6, 7, resources={"CPU": 1})
        assert fut.result(timeout=60) == 42

        plain = address.replace("tls://", "tcp://")
        with pytest.raises(CommClosedError):  # plaintext: the TLS handshake fails
            Client(plain, timeout="10s")
        with pytest.raises(TypeError, match="TLS expects a `ssl_context`"):
            Client(address, timeout="10s")  # tls:// but no certificate at all
        with pytest.raises(FatalCommClosedError, match="certificate"):
            Client(address, timeout="10s", security=Security.temporary())  # another CA
        # None of them got in: the run's client is still the only one.
        assert len(workers_of(handle.client)) == 2
        clients = handle.client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.clients))
        assert clients == 2  # the run's client and the scheduler's own fire-and-forget one
    finally:
        handle.close()


def test_tls_from_files_and_a_client_of_an_existing_scheduler(tmp_path: Path) -> None:
    sec = Security.temporary()  # a self-signed certificate: its own CA
    cert, key = tmp_path / "run.crt", tmp_path / "run.key"
    cert.write_text(sec.tls_scheduler_cert)
    key.write_text(sec.tls_scheduler_key)
    files = TlsConfig(ca_file="run.crt", cert="run.crt", key="run.key")  # relative to roots
    handle = start_cluster(local(files), "t", roots=[tmp_path])
    try:
        address = handle.scheduler_address
        assert address.startswith("tls://")
        # cluster.type=address with the same files joins it ...
        joined = start_cluster(
            ClusterConfig(type="address", address=address, tls=files), "t", roots=[tmp_path]
        )
        try:
            assert joined.client.submit(lambda: "hi").result(timeout=60) == "hi"
        finally:
            joined.close()
        # ... and without them it cannot.
        with pytest.raises(TypeError, match="TLS expects a `ssl_context`"):
            start_cluster(ClusterConfig(type="address", address=address), "t")
    finally:
        handle.close()
