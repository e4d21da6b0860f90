"""``TrainingClient``: the training service from Python (needs only ``httpx``).

::

    client = TrainingClient("http://127.0.0.1:8300")
    out = client.forward_backward(data, loss="ppo_clip")     # {"loss", "metrics", ...}
    step = client.optim_step()                                # {"applied", "policy_version", ...}
    snap = client.save_weights_for_sampler()                  # {"path", "version"}

Every call has a timeout (``timeout_s``; ``step_timeout_s`` for the calls that
train or write weights). Retries are bounded (``max_retries``) and only where a
repeat cannot change what the service did: a refused connection (nothing was
sent) for every call, and also a timeout or a 502/503/504 for the read-only
calls (``health``, ``info``, ``extra_state``). A ``forward_backward`` that timed
out is not repeated (it may have accumulated its gradients). Failures raise
``TrainingClientError`` with the service's one-line message (``status``,
``field``).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from nexrl.core.errors import NexrlError

__all__ = ["TrainingClient", "TrainingClientError"]

_RETRY_STATUS = (502, 503, 504)


class TrainingClientError(RuntimeError, NexrlError):
    """A training-service call failed (``status``: the HTTP status, 0 = no answer)."""

    def __init__(self, message: str, status: int = 0, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.field = status, field


class TrainingClient:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        step_timeout_s: float = 1800.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s, self.step_timeout_s = timeout_s, step_timeout_s
        self.max_retries, self.backoff_s = max_retries, backoff_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers)

    # -- the API ---------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health", idempotent=True)

    def info(self) -> dict[str, Any]:
        return self._call("GET", "/v1/info", idempotent=True)

    def forward_backward(
        self, data: list[dict[str, Any]], loss: str, *, weight: float = 1.0
    ) -> dict[str, Any]:
        """Accumulate ``weight * grad L(data)``; ``{"loss", "weight", "metrics"}``."""
        body = {"loss": loss, "data": data, "weight": weight}
        return self._call("POST", "/v1/forward_backward", body, slow=True)

    def optim_step(self) -> dict[str, Any]:
        return self._call("POST", "/v1/optim_step", {}, slow=True)

    def save_weights_for_sampler(self) -> dict[str, Any]:
        return self._call("POST", "/v1/save_weights_for_sampler", {}, slow=True)

    def save_state(self, extra_state: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call("POST", "/v1/save_state", {"extra_state": extra_state}, slow=True)

    def load_state(self, path: str) -> dict[str, Any]:
        return self._call("POST", "/v1/load_state", {"path": str(path)}, slow=True)

    def train_step(self, batch: Any) -> dict[str, Any]:
        """The fused self-hosted step (``StepResult`` fields) on a ``BatchRef`` (the
        step's rows in the pool) or a ``save_batch`` file's path."""
        body = (
            {"batch": batch.to_json()} if hasattr(batch, "to_json") else {"batch_path": str(batch)}
        )
        return self._call("POST", "/v1/train_step", body, slow=True)

    def extra_state(self) -> dict[str, Any]:
        return self._call("GET", "/v1/extra_state", idempotent=True)

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Poll ``/health`` until it answers or ``timeout_s`` passed."""
        end = time.monotonic() + timeout_s
        while True:
            try:
                self._call("GET", "/health", timeout=min(5.0, self.timeout_s), retries=0)
                return
            except TrainingClientError:
                if time.monotonic() > end:
                    raise TrainingClientError(
                        f"{self.base_url} was not healthy within {timeout_s:g}s"
                    ) from None
                time.sleep(0.2)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TrainingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport -------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        slow: bool = False,
        idempotent: bool = False,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> dict[str, Any]:
        limit = timeout or (self.step_timeout_s if slow else self.timeout_s)
        left = self.max_retries if retries is None else retries
        url = f"{self.base_url}{path}"
        while True:
            try:
                resp = self._http.request(method, path, json=body, timeout=limit)
            except httpx.ConnectError as exc:
                if left <= 0:
                    raise TrainingClientError(f"{url}: cannot connect ({exc})") from None
            except httpx.TimeoutException:
                if not idempotent or left <= 0:
                    raise TrainingClientError(f"{url} did not answer within {limit:g}s") from None
            except httpx.HTTPError as exc:
                raise TrainingClientError(f"{url}: {type(exc).__name__}: {exc}") from None
            else:
                if resp.status_code in _RETRY_STATUS and idempotent and left > 0:
                    pass
                elif resp.status_code >= 400:
                    raise _error(url, resp)
                else:
                    out: dict[str, Any] = resp.json()
                    return out
            left -= 1
            time.sleep(self.backoff_s)


def _error(url: str, resp: httpx.Response) -> TrainingClientError:
    try:
        err = resp.json().get("error", {})
        message, field = str(err.get("message")), err.get("field")
    except (ValueError, AttributeError):
        message, field = resp.text[:200], None
    return TrainingClientError(f"{url}: {resp.status_code}: {message}", resp.status_code, field)
