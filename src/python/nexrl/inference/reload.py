"""Weight reloads on inference replicas: the ``ReloadAdapter`` base and its registry.

An adapter knows the replicas' base URLs, hands them out round-robin
(``next_base_url``), checks their health, and reloads a weight snapshot (an
HF-format directory) on every replica in parallel through the engine's own
HTTP endpoints. ``reload`` raises ``ReloadError`` naming each replica that
failed; replicas that succeeded keep the new weights.

``RELOAD_ADAPTERS`` maps ``service.inference_service.backend`` to an adapter
class; ``INFERENCE_SERVERS`` maps a server kind to the handle class that starts
one as a local process (``start()``, ``stop()``, ``alive()``, ``base_url``).
Engines register themselves (``backends/register.py``: ``embedded``, ``vllm``,
``sglang``; the endpoints each one drives are in ``backends.inference.adapters``);
a plugin registers its own, or a recipe names a class
``path/to/file.py:MyAdapter``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import httpx

from nexrl.core.chat.balance import RoundRobin, normalize_base_urls
from nexrl.core.errors import NexrlError
from nexrl.core.plugins.registry import Registry

__all__ = [
    "INFERENCE_SERVERS",
    "LOCAL_SERVER",
    "RELOAD_ADAPTERS",
    "ReloadAdapter",
    "ReloadError",
    "ReloadOutcome",
    "make_reload_adapter",
    "reply_text",
]


class ReloadError(RuntimeError, NexrlError):
    """Reload failed on at least one replica; ``failures`` maps base URL -> reason."""

    def __init__(self, message: str, failures: dict[str, str]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass(frozen=True)
class ReloadOutcome:
    base_url: str
    ok: bool
    detail: str
    elapsed_s: float


def reply_text(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if body.get(key):
                return str(body[key])
    return str(body)[:500]


class ReloadAdapter(ABC):
    """Replicas of one engine kind: round-robin URLs, health, reload of all."""

    backend: ClassVar[str]

    def __init__(
        self,
        base_urls: str | Sequence[str],
        *,
        timeout_s: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self._urls = RoundRobin(normalize_base_urls(base_urls))
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=10.0), headers=headers)
        self.policy_version: int | None = None
        self.health_problems: dict[str, str] = {}  # the last health() call's, per replica

    @property
    def base_urls(self) -> list[str]:
        return list(self._urls.items)

    def next_base_url(self) -> str:
        """The next replica, round-robin."""
        return self._urls.next()

    def health(self, timeout_s: float = 5.0) -> dict[str, bool]:
        """``GET /health`` on every replica (200 = healthy); why one is not, in
        ``health_problems``."""
        out, self.health_problems = {}, {}
        for url in self.base_urls:
            try:
                status = self._client.get(f"{url}/health", timeout=timeout_s).status_code
            except httpx.HTTPError as exc:
                self.health_problems[url] = f"{type(exc).__name__}: {exc}".rstrip(": ")
                out[url] = False
                continue
            out[url] = status == 200
            if status != 200:
                self.health_problems[url] = f"HTTP {status} from /health"
        return out

    def started(self, version: int) -> None:
        """Replicas nexrl has just started on the weights of ``version`` (no reload:
        they loaded them at start)."""
        self.policy_version = version

    def reload(self, model_path: str, version: int) -> list[ReloadOutcome]:
        """Reload ``model_path`` as ``version`` on every replica, in parallel."""
        return self._on_all(
            lambda u: self._reload_one(u, model_path, version), f"reload of {model_path!r}", version
        )

    def reload_from_channel(self, descriptor: dict[str, Any], version: int) -> list[ReloadOutcome]:
        """Copy ``version`` from the trainer's weight channel (``nexrl.core.weights.handoff``) on
        every replica, in parallel; engines without an in-memory handoff raise."""
        return self._on_all(
            lambda u: self._channel_one(u, descriptor, version), "in-memory handoff", version
        )

    def _channel_one(self, base_url: str, descriptor: dict[str, Any], version: int) -> str:
        """One replica's copy from the channel; this engine has none (files only)."""
        raise ReloadError(f"the {self.backend} engine loads weights from snapshots only", {})

    def _on_all(self, one: Any, what: str, version: int) -> list[ReloadOutcome]:
        with ThreadPoolExecutor(max_workers=len(self.base_urls)) as pool:
            outcomes = list(pool.map(lambda u: self._timed(one, u), self.base_urls))
        failures = {o.base_url: o.detail for o in outcomes if not o.ok}
        if failures:
            raise ReloadError(
                f"{self.backend} {what} (version {version}) failed on "
                f"{len(failures)}/{len(outcomes)} replicas: {failures}",
                failures,
            )
        self.policy_version = version
        return outcomes

    @staticmethod
    def _timed(one: Any, url: str) -> ReloadOutcome:
        start = time.monotonic()
        try:
            detail = one(url)
            ok = True
        except (httpx.HTTPError, ReloadError) as exc:
            detail, ok = f"{type(exc).__name__}: {exc}", False
        return ReloadOutcome(url, ok, detail, time.monotonic() - start)

    def _post(self, url: str, json: Any = None, params: dict[str, str] | None = None) -> Any:
        resp = self._client.post(url, json=json, params=params)
        if resp.status_code >= 400:
            raise ReloadError(f"{url} answered {resp.status_code}: {reply_text(resp)}", {})
        try:
            return resp.json()
        except ValueError:
            return None

    @abstractmethod
    def _reload_one(self, base_url: str, model_path: str, version: int) -> str:
        """Reload one replica; return a short detail or raise."""

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


RELOAD_ADAPTERS: Registry[type[ReloadAdapter]] = Registry(
    "reload adapter", base=ReloadAdapter, field="service.inference_service.backend"
)
INFERENCE_SERVERS: Registry[Any] = Registry("inference server")
# The server kind nexrl starts itself (its own embedded server, or a recipe's 'command').
LOCAL_SERVER = "embedded"


def make_reload_adapter(
    backend: str, base_urls: str | Sequence[str], **kwargs: Any
) -> ReloadAdapter:
    """The adapter ``backend`` names (``embedded``, ``vllm``, ``sglang``, a plugin's)
    over ``base_urls``."""
    try:
        cls = RELOAD_ADAPTERS.get(backend)
    except KeyError:
        raise ValueError(
            f"unknown inference backend {backend!r}; choose one of {RELOAD_ADAPTERS.names()}"
        ) from None
    return cls(base_urls, **kwargs)
