"""Addresses a multi-node Slurm run depends on: the scheduler's host must be this
machine's, the inference server binds the address its worker is reached on."""

from __future__ import annotations

import pytest

from nexrl.core.util.net import interface_of, is_loopback, local_addresses
from nexrl.driver.cluster.remote_server import server_address
from nexrl.driver.cluster.slurm import SlurmError, check_scheduler_host


def test_loopback_is_an_address_of_lo() -> None:
    assert interface_of("127.0.0.1") is not None
    assert "127.0.0.1" in local_addresses()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.77.0.1") and not is_loopback("node1")


def test_a_scheduler_host_of_this_machine_passes() -> None:
    check_scheduler_host(None)
    check_scheduler_host("127.0.0.1")
    check_scheduler_host("0.0.0.0")
    for addr in local_addresses():
        check_scheduler_host(addr)


def test_a_scheduler_host_of_another_machine_is_named() -> None:
    other = "198.51.100.254"  # TEST-NET-2: documentation only, never a real host
    assert other not in local_addresses()
    with pytest.raises(SlurmError) as err:
        check_scheduler_host(other)
    msg = str(err.value)
    assert f"cluster.slurm.scheduler_host={other} is not an address of this machine" in msg
    assert "127.0.0.1 (" in msg  # what it has instead


def test_a_scheduler_host_that_does_not_resolve_is_named() -> None:
    with pytest.raises(SlurmError, match=r"scheduler_host=no-such-host\.invalid does not resolve"):
        check_scheduler_host("no-such-host.invalid")


def test_the_server_binds_nexrl_inference_host_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXRL_INFERENCE_HOST", "10.9.8.7")
    assert server_address() == "10.9.8.7"


def test_cluster_slurm_interface_reaches_every_role_job() -> None:
    from nexrl.core.config.sections.cluster import SlurmConfig
    from nexrl.driver.cluster.slurm_job import job_kwargs

    for role in ("rollout", "trainer", "inference"):
        assert "interface" not in job_kwargs(SlurmConfig(), role, experiment="x")
        kwargs = job_kwargs(SlurmConfig(interface="ib0"), role, experiment="x")
        assert kwargs["interface"] == "ib0"
