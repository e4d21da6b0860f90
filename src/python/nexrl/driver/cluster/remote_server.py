"""The embedded inference server on another node: started by a Dask actor there.

On Slurm the server must not run next to the driver (a login node): the
inference job's Dask worker (resource ``INFERENCE=1``) hosts a :class:`ServerHost`
actor that starts ``backends.inference.embedded`` as its child, bound to the
node's address, and reports whether it is alive. :class:`RemoteEmbeddedServer`
is the driver's handle on it, with the surface of the local ``EmbeddedServer``
the inference supervisor uses (``start``, ``stop``, ``alive``, ``base_url``,
``pid``). The server exits with its worker (``--parent-pid``), so a job that
ends takes its server with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from nexrl.core.errors import NexrlError
from nexrl.core.util.dask_workers import workers_of

__all__ = ["InferenceJobLost", "RemoteEmbeddedServer", "ServerHost", "server_address"]


class InferenceJobLost(RuntimeError, NexrlError):
    """The inference job's worker is gone: its server cannot be restarted there."""


def server_address() -> str:
    """The address the server binds on its node: ``NEXRL_INFERENCE_HOST`` if set (in
    the job's environment, e.g. ``cluster.slurm.prologue``), else the address of this
    Dask worker, which the driver and the rollout workers already reach (the address
    facing the scheduler). Not ``distributed.utils.get_ip()``: that asks for a route to
    the internet, which compute nodes often lack; without one it falls back to the
    hostname's address (e.g. ``127.0.1.1``), unreachable from other nodes."""
    import os

    from distributed.utils import get_ip

    from nexrl.core.util.net import worker_host

    return os.environ.get("NEXRL_INFERENCE_HOST") or worker_host() or get_ip()


class ServerHost:
    """Runs on the inference worker (a Dask actor): owns the server process there."""

    def __init__(self) -> None:
        self.server: Any = None

    def start(self, model: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        import os

        from nexrl.inference.reload import INFERENCE_SERVERS, LOCAL_SERVER

        server_cls = INFERENCE_SERVERS.get(LOCAL_SERVER)
        self.stop()
        # the node's address (the rollouts run on other nodes): the supervisor's
        # ``host`` (loopback by default) does not apply here; a token is required
        kwargs = {k: v for k, v in kwargs.items() if k != "host"}
        host = server_address()
        self.server = server_cls(model, host=host, **kwargs).start()
        return {
            "base_url": self.server.base_url,
            "pid": self.server.pid,
            "node": os.uname().nodename,
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "slurm_node": os.environ.get("SLURMD_NODENAME"),
        }

    def alive(self) -> bool:
        return self.server is not None and bool(self.server.alive())

    def returncode(self) -> int | None:
        return None if self.server is None else self.server.returncode

    def kill(self) -> None:
        """SIGKILL the server now (what a crash looks like; for fault tests)."""
        if self.server is not None:
            self.server.kill()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


class RemoteEmbeddedServer:
    """The driver's handle on a server started by a :class:`ServerHost` actor."""

    def __init__(
        self,
        client: Any,
        worker: str | Callable[[], str],
        model: str,
        *,
        timeout_s: float = 600.0,
        **kwargs: Any,
    ) -> None:
        """``worker``: the address of the worker to start it on, or a callable that
        returns one (on Slurm: the inference job's, replaced if it ended)."""
        self.client, self.locate, self.model = client, worker, model
        self.worker: str | None = None
        self.kwargs = {**kwargs, "exit_with_parent": True}
        self.timeout_s = timeout_s
        self.info: dict[str, Any] = {}
        self._future: Any = None
        self._actor: Any = None

    def _host(self) -> Any:
        if self._actor is None:
            if callable(self.locate):  # it returns a live worker (replacing a lost job)
                self.worker = self.locate()
            else:
                self.worker = self.locate
                if self.worker not in workers_of(self.client):
                    raise InferenceJobLost(
                        f"the inference job's Dask worker {self.worker} is gone (its Slurm "
                        "job ended: scancel, node failure or walltime); run the same command "
                        "again to resume from the last checkpoint"
                    )
            self._future = self.client.submit(
                ServerHost,
                actor=True,
                workers=[self.worker],
                allow_other_workers=False,
                resources={"INFERENCE": 1},
                pure=False,
            )
            self._actor = self._future.result(timeout=self.timeout_s)
        return self._actor

    def start(self) -> RemoteEmbeddedServer:
        self.info = self._host().start(self.model, self.kwargs).result(timeout=self.timeout_s)
        return self

    @property
    def base_url(self) -> str:
        return str(self.info["base_url"])

    @property
    def pid(self) -> int | None:
        return self.info.get("pid")

    @property
    def returncode(self) -> int | None:
        try:
            return self._host().returncode().result(timeout=30)
        except Exception:
            return None

    def alive(self) -> bool:
        """False when the server or its whole job is gone."""
        try:
            return bool(self._host().alive().result(timeout=30))
        except Exception:
            return False

    def kill(self) -> None:
        self._host().kill().result(timeout=60)

    def stop(self) -> None:
        if self._actor is not None:
            # an error here: the worker (and with it the server) is already gone
            with contextlib.suppress(Exception):
                self._actor.stop().result(timeout=60)
        if self._future is not None:
            self.client.cancel(self._future)
        self._actor = self._future = None
