"""``InferenceSupervisor``: the inference service as the controller sees it (runs in
the driver; the rollouts' side is ``nexrl.core.chat.client``).

* ``backend: embedded`` with no ``base_urls``: nexrl starts the embedded server
  (``backends.inference.embedded``) as a child process of the driver, logging to
  ``<output_dir>/logs/inference.log``. It exits by itself if the driver dies.
  If it dies during the run, or stops answering ``/health`` (``unhealthy_after``
  checks in a row, each bounded by ``health_timeout_s``: a hung process), ``check()``
  kills it and restarts it on the newest weights.
* ``command`` with no ``base_urls`` (vLLM, SGLang): nexrl starts that command the
  same way (``EmbeddedServer(command=...)``), reloads it through ``backend``'s
  adapter and restarts it on the newest weights if it dies. With ``backend: vllm``
  the command gets ``VLLM_SERVER_DEV_MODE=1`` (unless the environment sets it): the
  routes the reloads use (``/collective_rpc``, ``/pause``, ``/resume``) exist only then.
* ``base_urls`` given (vLLM, SGLang or an embedded server started elsewhere):
  nexrl only checks health and reloads weights.

``reload(path, version)`` loads a published snapshot on every replica through
the backend's reload adapter (``backends.inference.adapters``);
``reload_from_channel(descriptor, version, path)`` has them copy it from the
trainer's weight channel instead (``weight.handoff`` in memory), ``path`` being
where its snapshot is being written behind: a restart before that snapshot is
complete waits for it (``snapshot_ready``; after a while, the newest complete one). ``lora_name``
(``nexrl.inference.lora``): LoRA snapshots are loaded as that adapter on vLLM; a
command nexrl starts then gets ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and, when
the newest weights are an adapter, starts on its base model and loads the adapter.

Security: a server nexrl starts binds ``service.inference_service.host``
(127.0.0.1 by default; on Slurm its node's address). ``api_key`` (unless
``"EMPTY"``) is the bearer token the server then requires on every request;
the supervisor sends it with its health checks and reloads, the rollouts with
their requests. The embedded server is told ``snapshot_root`` (the run's
``weight.snapshot_dir``) and reloads nothing outside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nexrl.core.util.auth import token_of
from nexrl.core.util.logfile import NO_ROTATION, LogRotation, rotate_copytruncate
from nexrl.inference.launch import ServiceError, cpu_threads_args, launch, what_runs
from nexrl.inference.spec import InferenceSpec

__all__ = ["InferenceSupervisor", "ServiceError"]

logger = logging.getLogger(__name__)


class InferenceSupervisor:
    """Starts (or connects to) the inference service, reloads it, restarts it."""

    def __init__(
        self,
        spec: InferenceSpec,
        *,
        log_dir: Path,
        server_factory: Callable[..., Any] | None = None,
        snapshot_ready: Callable[[str, int], Any] | None = None,
        log_rotation: LogRotation = NO_ROTATION,
    ) -> None:
        """``spec``: the recipe's side (``nexrl.inference.spec``). ``server_factory(model,
        **kwargs)`` makes the embedded server's handle (default: ``EmbeddedServer``, a
        child of this process; on Slurm the controller passes one that starts it in
        the inference job). ``snapshot_ready(path, version)``: waits for a snapshot
        written behind (``weight.handoff`` in memory) before a restart, giving
        ``(version, path)`` to start on (or None). ``log_rotation``: ``inference.log``,
        which the server writes, is rotated by it at each health check."""
        config = spec.service
        self.spec = spec
        self.snapshot_ready = snapshot_ready
        self.config = config
        self.lora_name = spec.lora_name
        self.snapshot_root = spec.snapshot_root
        self.token = token_of(config.api_key)
        self.server_factory = server_factory
        self.log_dir = log_dir
        self.log_rotation = log_rotation
        self.seed = spec.seed
        self.reload_timeout_s = spec.reload_timeout_s
        self.server: Any = None  # EmbeddedServer when we own it
        self.model_path: str | None = None
        self.version = 0
        self.restarts = 0
        self._urls: list[str] = list(config.base_urls)
        self._adapter: Any = None
        self.health_timeout_s = spec.health_timeout_s
        self.unhealthy_after = spec.unhealthy_after
        self.wait_notice_s = spec.wait_notice_s  # given replicas not healthy yet: a line this often
        self._missed = 0  # consecutive /health checks without an answer
        self._written_behind = False  # model_path: a snapshot the trainer may still be writing

    @property
    def owns_server(self) -> bool:
        return not self.config.base_urls

    @property
    def base_urls(self) -> list[str]:
        return list(self._urls)

    def start(self, model_path: str | Path, version: int) -> list[str]:
        """Start the embedded server on ``model_path`` (or check the given replicas)."""
        self.model_path, self.version = str(model_path), int(version)
        if self.owns_server:
            self._start_embedded()
        else:
            self._wait_healthy(self.config.startup_timeout_s)
            if version > 0:  # a resumed run: the replicas must serve the resumed weights
                self.reload(self.model_path, version)
        return self.base_urls

    def _start_embedded(self) -> None:
        if self._written_behind:
            self._await_snapshot()
        factory = self.server_factory
        if factory is None:
            from nexrl.inference.reload import INFERENCE_SERVERS, LOCAL_SERVER

            factory = INFERENCE_SERVERS.get(LOCAL_SERVER)
        cfg = self.config
        server, on_base = launch(
            factory,
            cfg,
            self.model_path or "",
            embedded_args=[] if cfg.command else self._embedded_args(),
            token=self.token,
            snapshot_root=self.snapshot_root,
            log_dir=self.log_dir,
            lora_name=self.lora_name,
        )
        self.server = server
        self._urls = [server.base_url]
        self._close_adapter()
        what = what_runs(cfg)
        if on_base:
            try:
                self._adapter_for().reload(str(self.model_path), self.version)
            except Exception as exc:
                raise ServiceError(
                    f"{what} started but loading the adapter {self.model_path} failed: {exc}"
                ) from exc
        elif cfg.command:  # it serves model_path's weights: vLLM labels them
            try:
                self._adapter_for().started(self.version)
            except Exception as exc:
                raise ServiceError(
                    f"{what} started but labelling its weights v{self.version} failed: {exc}"
                ) from exc
        logger.info(
            "inference: %s at %s (pid %s)",
            self._server_kind,
            server.base_url,
            server.pid,
        )

    def _embedded_args(self) -> list[str]:
        cfg = self.config
        return [
            "--policy-version",
            str(self.version),
            "--max-batch-size",
            str(cfg.max_batch_size),
            "--seed",
            str(self.seed + self.restarts),
            "--log-level",
            "warning",
            "--decoder",
            cfg.decoder,
            "--kv-cache-gib",
            str(cfg.kv_cache_gib),
            *([] if cfg.cuda_graphs else ["--no-cuda-graphs"]),
            *cpu_threads_args(cfg.cpu_threads),
        ]

    @property
    def _server_kind(self) -> str:
        """How the log names the replica: the user's command or the embedded server."""
        if self.config.command:
            return "server started by service.inference_service.command"
        return "embedded server"

    def _adapter_for(self) -> Any:
        if self._adapter is None:
            from nexrl.inference.reload import make_reload_adapter

            extra = {"lora_name": self.lora_name} if self.lora_name else {}
            self._adapter = make_reload_adapter(
                self.config.backend,
                self._urls,
                timeout_s=self.reload_timeout_s,
                api_key=self.token,
                **extra,
            )
        return self._adapter

    def _close_adapter(self) -> None:
        if self._adapter is not None:
            self._adapter.close()
            self._adapter = None

    def _wait_healthy(self, timeout_s: float) -> None:
        """Until every replica at ``base_urls`` answers ``/health``; a line every
        ``wait_notice_s`` while one does not (a server still loading its model waits quietly
        otherwise, a mistyped URL too), an error naming the setting after ``timeout_s``."""
        start, notice_s = time.monotonic(), self.wait_notice_s
        next_notice = start + notice_s
        while True:
            adapter = self._adapter_for()
            health = adapter.health(timeout_s=5.0)
            if health and all(health.values()):
                return
            problems = "; ".join(
                f"{u}: {adapter.health_problems.get(u, 'not healthy')}"
                for u, ok in health.items()
                if not ok
            )
            waited = time.monotonic() - start
            if waited > timeout_s:
                raise ServiceError(
                    f"inference replicas not healthy after {timeout_s:g}s "
                    f"(service.inference_service.startup_timeout_s): {problems}; check "
                    "service.inference_service.base_urls (--inference-url) and that the "
                    "servers are running"
                )
            if time.monotonic() >= next_notice:
                next_notice += notice_s
                logger.warning(
                    "inference: waiting for %s (%.0fs of startup_timeout_s=%g)",
                    problems,
                    waited,
                    timeout_s,
                )
            time.sleep(1.0)

    def reload(self, path: str | Path, version: int) -> float:
        """Load snapshot ``path`` as ``version`` everywhere; returns the seconds it took.

        A server nexrl owns that does not answer ``/health`` (hung) or fails the
        reload is replaced by one started on ``path`` (``restarts`` counts it)."""
        start = time.perf_counter()
        if self.owns_server and not self._answers():
            self._replace(path, version, "did not answer /health before the reload")
            return time.perf_counter() - start
        try:
            self._adapter_for().reload(str(path), int(version))
        except Exception as exc:
            if not self.owns_server:
                raise ServiceError(f"inference reload of v{version} failed: {exc}") from exc
            from nexrl.core.weights.snapshot_read import verify_snapshot

            damaged = verify_snapshot(path)
            if damaged is not None:  # a restart on it would fail the same way
                raise ServiceError(
                    f"the {self._adapter_for().backend} server refused snapshot v{version} "
                    f"({_reason(exc)}): the snapshot is damaged: {damaged}"
                ) from exc
            self._replace(path, version, f"failed the reload ({exc})")
            return time.perf_counter() - start
        self.model_path, self.version = str(path), int(version)
        self._written_behind = False
        return time.perf_counter() - start

    def reload_from_channel(self, descriptor: dict[str, Any], version: int, path: str) -> float:
        """Copy ``version`` from the trainer's weight channel everywhere (``path``: its
        snapshot, being written behind); returns the seconds. A failure raises (the
        caller falls back to files), except on a server nexrl owns that does not answer
        ``/health``, before the copy or after it failed (it died mid-transfer):
        replaced by one started on ``path`` once written; memory stays on."""
        start = time.perf_counter()
        if self.owns_server and not self._answers():
            self._written_behind = True
            self._replace(path, version, "did not answer /health before the reload (in memory)")
            return time.perf_counter() - start
        try:
            self._adapter_for().reload_from_channel(descriptor, int(version))
        except Exception as exc:
            if not self.owns_server or self._answers():
                raise  # it is there and refused: the caller goes back to files
            self._written_behind = True
            self._replace(path, version, f"died taking v{version} in memory ({_reason(exc)})")
            return time.perf_counter() - start
        self.model_path, self.version = str(path), int(version)
        self._written_behind = True
        return time.perf_counter() - start

    def channel_identity(self) -> dict[str, dict[str, Any]]:
        """Each replica's host and CUDA device (an embedded server's ``/weight_channel``)."""
        identity: dict[str, dict[str, Any]] = self._adapter_for().channel_identity()
        return identity

    def _await_snapshot(self) -> None:
        """Before a restart: the snapshot written behind, or the newest complete one
        (``snapshot_ready``, given by the controller)."""
        path, version = str(self.model_path), self.version
        found = self.snapshot_ready(path, version) if self.snapshot_ready else (version, path)
        self._written_behind = False
        if found is None:
            raise ServiceError(f"restart: snapshot {path} (v{version}) never appeared")
        if found[0] != version:
            logger.warning(
                "inference: snapshot v%d was not written in time; restarting on v%d",
                version,
                found[0],
            )
        self.model_path, self.version = str(found[1]), int(found[0])

    def _replace(self, path: str | Path, version: int, why: str) -> None:
        logger.warning(
            "inference: the server (pid %s) %s: killed; starting one on v%d",
            None if self.server is None else self.server.pid,
            why,
            version,
        )
        self.model_path, self.version = str(path), int(version)
        if self.server is not None:
            self.server.stop()
        self.restarts += 1
        self._missed = 0
        self._start_embedded()

    def exited(self) -> bool:
        """A server nexrl started whose process has ended (killed, crashed): every
        request sent to it fails until ``check`` starts another."""
        return self.owns_server and self.server is not None and not self.server.alive()

    def check(self) -> bool:
        """Health check; a dead or hung server nexrl owns is restarted on the newest
        weights. Returns True when the service was restarted (callers must update the
        base URLs they hand out; ``restarts`` counts every restart, also by ``reload``)."""
        if self.owns_server:
            rotate_copytruncate(self.log_dir / "inference.log", self.log_rotation)
            if self.server is not None and self.server.alive():
                if self._answers():
                    self._missed = 0
                    return False
                self._missed += 1
                if self._missed < self.unhealthy_after:
                    logger.warning(
                        "inference: the server did not answer /health within %gs (%d of %d)",
                        self.health_timeout_s,
                        self._missed,
                        self.unhealthy_after,
                    )
                    return False
                logger.warning(
                    "inference: the server (pid %s) did not answer /health %d times in a "
                    "row: taken for hung, killed; restarting on v%d",
                    self.server.pid,
                    self._missed,
                    self.version,
                )
            else:
                logger.warning(
                    "inference: the %s exited (code %s); restarting on v%d",
                    self._server_kind,
                    None if self.server is None else self.server.returncode,
                    self.version,
                )
            self._missed = 0
            if self.server is not None:
                self.server.stop()
            self.restarts += 1
            self._start_embedded()
            return True
        health = self._adapter_for().health(timeout_s=5.0)
        bad = [u for u, ok in health.items() if not ok]
        if bad:
            logger.warning("inference: unhealthy replicas %s", bad)
        return False

    def _answers(self) -> bool:
        """One ``GET /health`` of the owned server, bounded by ``health_timeout_s`` (on the
        adapter's open connection: a new HTTP client costs ~40 ms, every step)."""
        health = self._adapter_for().health(timeout_s=self.health_timeout_s)
        return bool(health) and all(health.values())

    def close(self) -> None:
        self._close_adapter()
        if self.server is not None:
            self.server.stop()
            self.server = None


def _reason(exc: BaseException) -> str:
    """A reload error's reason, once: the replica's own words when there is one."""
    failures = getattr(exc, "failures", None)
    text = "; ".join(failures.values()) if isinstance(failures, dict) and failures else str(exc)
    return text if len(text) <= 400 else text[:400] + "..."
