"""Weight-reload adapters for inference engines, selected by backend name.

``make_reload_adapter(backend, base_urls)`` with ``backend`` one of
``"embedded"``, ``"vllm"``, ``"sglang"`` (``service.inference_service.backend``
in a recipe). An adapter knows the replicas' base URLs, hands them out
round-robin (``next_base_url``), checks their health, and reloads a weight
snapshot (an HF-format directory) on every replica in parallel through the
engine's own HTTP endpoints. ``reload`` raises ``ReloadError`` naming each
replica that failed; replicas that succeeded keep the new weights.

Publish every snapshot in a new directory (never overwrite one in place):
engines may cache weights by path, and a reader must never see a half-written
directory.

Engine endpoints targeted:

* ``embedded`` (this repo): ``POST /update_weights_from_disk``
  ``{"model_path", "version"}``; atomic, validates the snapshot, 4xx on a bad one.
* ``sglang`` (SGLang >= 0.5; ``weight_version`` was added in the 0.4.10-0.5
  line and older servers ignore it): ``POST /update_weights_from_disk``
  ``{"model_path", "weight_version": str(version), "abort_all_requests": false}``;
  reply ``{"success", "message", "num_paused_requests"}`` (400 on failure).
  SGLang takes its model-update lock, so in-flight requests finish first.
* ``vllm`` (vLLM >= 0.10.2, V1 engine, server started with
  ``VLLM_SERVER_DEV_MODE=1``, which exposes ``/collective_rpc``): vLLM has no
  load-from-disk endpoint (issue vllm-project/vllm#12774; ``/v1/load_lora_adapter``
  loads LoRA adapters only), so the adapter drives the worker methods through
  ``POST /collective_rpc``: ``update_config`` with
  ``{"model_config": {"model": <snapshot dir>}}`` then ``reload_weights``
  (in-place reload from the new path), then ``POST /reset_prefix_cache`` so no
  KV computed with the old weights is reused. With ``pause=True`` it first
  calls ``POST /pause?mode=wait`` and finally ``POST /resume`` (vLLM >= 0.12
  dev-mode routes) so in-flight requests finish on the old weights; without it
  a request running during the reload may mix old and new weights. vLLM does
  not report a policy version; the adapter's ``policy_version`` is the last
  version it reloaded everywhere.

  A LoRA snapshot (``adapter_config.json``, no ``config.json``: ``trainer.lora``)
  is loaded as an adapter beside the base model instead: ``POST
  /v1/load_lora_adapter`` ``{"lora_name": <lora_name>, "lora_path": <snapshot
  dir>, "load_inplace": true}`` (vLLM >= 0.11; the server started with
  ``--enable-lora --max-lora-rank R`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``),
  then ``POST /reset_prefix_cache``: an in-place load keeps the adapter's id, so
  KV cached under the old adapter must go. Requests name ``lora_name`` as their
  ``model`` (vLLM serves the base model under its own name, unchanged).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from nexrl.errors import NexrlError
from nexrl.inference.balance import RoundRobin, normalize_base_urls
from nexrl.util.adapters import is_adapter_snapshot


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


def _reply_text(resp: httpx.Response) -> str:
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

    @property
    def base_urls(self) -> list[str]:
        return list(self._urls.items)

    def next_base_url(self) -> str:
        """The next replica, round-robin."""
        return self._urls.next()

    def health(self, timeout_s: float = 5.0) -> dict[str, bool]:
        """``GET /health`` on every replica (200 = healthy)."""
        out = {}
        for url in self.base_urls:
            try:
                out[url] = self._client.get(f"{url}/health", timeout=timeout_s).status_code == 200
            except httpx.HTTPError:
                out[url] = False
        return out

    def reload(self, model_path: str, version: int) -> list[ReloadOutcome]:
        """Reload ``model_path`` as ``version`` on every replica, in parallel."""
        with ThreadPoolExecutor(max_workers=len(self.base_urls)) as pool:
            outcomes = list(
                pool.map(lambda u: self._reload_timed(u, model_path, version), self.base_urls)
            )
        failures = {o.base_url: o.detail for o in outcomes if not o.ok}
        if failures:
            raise ReloadError(
                f"{self.backend} reload of {model_path!r} (version {version}) failed on "
                f"{len(failures)}/{len(outcomes)} replicas: {failures}",
                failures,
            )
        self.policy_version = version
        return outcomes

    def _reload_timed(self, url: str, model_path: str, version: int) -> ReloadOutcome:
        start = time.monotonic()
        try:
            detail = self._reload_one(url, model_path, version)
            ok = True
        except (httpx.HTTPError, ReloadError) as exc:
            detail, ok = f"{type(exc).__name__}: {exc}", False
        return ReloadOutcome(url, ok, detail, time.monotonic() - start)

    def _post(self, url: str, json: Any = None, params: dict[str, str] | None = None) -> Any:
        resp = self._client.post(url, json=json, params=params)
        if resp.status_code >= 400:
            raise ReloadError(f"{url} answered {resp.status_code}: {_reply_text(resp)}", {})
        try:
            return resp.json()
        except ValueError:
            return None

    @abstractmethod
    def _reload_one(self, base_url: str, model_path: str, version: int) -> str:
        """Reload one replica; return a short detail or raise."""

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ReloadAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EmbeddedReloadAdapter(ReloadAdapter):
    backend = "embedded"

    def _reload_one(self, base_url: str, model_path: str, version: int) -> str:
        body = self._post(
            f"{base_url}/update_weights_from_disk",
            {"model_path": model_path, "version": version},
        )
        served = body.get("policy_version") if isinstance(body, dict) else None
        if served != version:
            raise ReloadError(f"{base_url} serves version {served!r}, expected {version}", {})
        return str(body.get("message", "ok"))


class SGLangReloadAdapter(ReloadAdapter):
    backend = "sglang"

    def _reload_one(self, base_url: str, model_path: str, version: int) -> str:
        body = self._post(
            f"{base_url}/update_weights_from_disk",
            {"model_path": model_path, "weight_version": str(version), "abort_all_requests": False},
        )
        if not isinstance(body, dict) or body.get("success") is not True:
            raise ReloadError(f"{base_url} refused the update: {body!r}", {})
        return str(body.get("message", "ok"))


class VLLMReloadAdapter(ReloadAdapter):
    backend = "vllm"

    def __init__(
        self,
        base_urls: str | Sequence[str],
        *,
        pause: bool = False,
        lora_name: str | None = None,
        **kw: Any,
    ) -> None:
        """``lora_name``: the model name LoRA snapshots are loaded under (see the module
        doc); None = this run publishes full weights only."""
        super().__init__(base_urls, **kw)
        self.pause = pause
        self.lora_name = lora_name

    def _rpc(self, base_url: str, method: str, args: list[Any] | None = None) -> Any:
        payload: dict[str, Any] = {"method": method, "timeout": self.timeout_s}
        if args:
            payload["args"] = args
        return self._post(f"{base_url}/collective_rpc", payload)

    def _reload_one(self, base_url: str, model_path: str, version: int) -> str:
        adapter = is_adapter_snapshot(model_path)
        if adapter and not self.lora_name:
            raise ReloadError(f"{model_path} is a LoRA snapshot but no lora_name was given", {})
        if self.pause:
            self._post(f"{base_url}/pause", params={"mode": "wait"})
        try:
            if adapter:
                self._load_lora(base_url, model_path)
            else:
                self._rpc(base_url, "update_config", [{"model_config": {"model": model_path}}])
                self._rpc(base_url, "reload_weights")
            self._post(f"{base_url}/reset_prefix_cache")
        finally:
            if self.pause:
                self._post(f"{base_url}/resume")
        if adapter:
            return f"loaded adapter {model_path} as {self.lora_name!r}"
        return f"reloaded {model_path}"

    def _load_lora(self, base_url: str, model_path: str) -> None:
        body = {"lora_name": self.lora_name, "lora_path": model_path, "load_inplace": True}
        try:
            self._post(f"{base_url}/v1/load_lora_adapter", body)
        except ReloadError as exc:
            raise ReloadError(
                f"{exc} (vLLM loads LoRA adapters at run time only when started with "
                "--enable-lora --max-lora-rank <trainer.lora.rank or more> and "
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment)",
                {},
            ) from None


ADAPTERS: dict[str, type[ReloadAdapter]] = {
    a.backend: a for a in (EmbeddedReloadAdapter, VLLMReloadAdapter, SGLangReloadAdapter)
}


def make_reload_adapter(
    backend: str, base_urls: str | Sequence[str], **kwargs: Any
) -> ReloadAdapter:
    """The adapter for ``backend`` ("embedded", "vllm" or "sglang") over ``base_urls``."""
    try:
        cls = ADAPTERS[backend]
    except KeyError:
        raise ValueError(
            f"unknown inference backend {backend!r}; choose one of {sorted(ADAPTERS)}"
        ) from None
    return cls(base_urls, **kwargs)
