"""``ServiceTrainerGroup``: the controller's trainer in ``trainer.mode: training-service``.

It offers what the controller uses of ``TrainerGroup`` (``setup_info``,
``call``/``start`` of ``step``, ``extra_state``, ``publish_snapshot``,
``save_checkpoint``, ``close``, ``timeout_s``), each as a call to the training
service (``TrainingClient``). ``step`` is the service's fused ``train_step`` on
the batch file the controller wrote to the run folder (shared storage), so the
update is the self-hosted trainer's own, with the same numerics. Failures raise
``TrainerGroupError`` (rank 0), which the controller already reports.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from nexrl.trainer.actor import TrainerGroupError
from nexrl.trainer.result import StepResult
from nexrl.training_service.client import TrainingClient, TrainingClientError

__all__ = ["ServiceTrainerGroup"]


class _Pending:
    """A service call running on a thread (the shape of ``actor.PendingCall``)."""

    def __init__(self, method: str, future: concurrent.futures.Future[Any], deadline: float):
        self.method, self.future, self.deadline = method, future, deadline

    def done(self) -> bool:
        return self.future.done()

    def wait(self, timeout_s: float) -> bool:
        concurrent.futures.wait([self.future], timeout=timeout_s)
        return self.done()

    def result(self) -> list[Any]:
        try:
            return [self.future.result(timeout=max(1.0, self.deadline - time.monotonic()))]
        except concurrent.futures.TimeoutError:
            raise TrainerGroupError(
                f"training service: {self.method} still running at its deadline", (0,)
            ) from None
        except (TrainingClientError, OSError) as exc:
            raise TrainerGroupError(f"training service: {self.method}: {exc}", (0,)) from exc


class ServiceTrainerGroup:
    """The controller's trainer as a client of a training service (module doc)."""

    world_size = 1

    def __init__(
        self, client: TrainingClient, *, timeout_s: float = 900.0, handle: Any = None
    ) -> None:
        self.client, self.timeout_s, self.handle = client, timeout_s, handle
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nexrl-svc")

    @property
    def url(self) -> str:
        return self.client.base_url

    def _run(self, method: str, *args: Any) -> Any:
        if method == "step":
            (path,) = args
            return _step_result(self.client.train_step(str(path)))
        if method == "train_step":
            (path,) = args
            return _step_result(self.client.train_step(str(path))).row()
        if method == "describe":
            info = self.client.info()
            return {**info, "rank": 0, "service_url": self.url}
        if method == "extra_state":
            return self.client.extra_state()
        if method == "publish_snapshot":
            return self.client.save_weights_for_sampler()["path"]
        if method == "save_checkpoint":
            (extra,) = args or (None,)
            return self.client.save_state(extra)["path"]
        raise TrainerGroupError(f"training service: no method {method!r}")

    def start(self, method: str, *args: Any, timeout_s: float | None = None) -> _Pending:
        future = self._pool.submit(self._run, method, *args)
        return _Pending(method, future, time.monotonic() + (timeout_s or self.timeout_s))

    def call(self, method: str, *args: Any, timeout_s: float | None = None) -> list[Any]:
        return self.start(method, *args, timeout_s=timeout_s).result()

    def setup_info(self) -> list[dict[str, Any]]:
        return self.call("describe")

    def step(self, batch_path: str) -> StepResult:
        result: StepResult = self.call("step", batch_path)[0]
        return result

    def train_step(self, batch_path: str) -> dict[str, float]:
        row: dict[str, float] = self.call("train_step", batch_path)[0]
        return row

    def publish_snapshot(self) -> str | None:
        path: str | None = self.call("publish_snapshot")[0]
        return path

    def save_checkpoint(self, extra_state: dict[str, Any] | None = None) -> str | None:
        path: str | None = self.call("save_checkpoint", extra_state)[0]
        return path

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.client.close()
        if self.handle is not None:
            self.handle.close()


def _step_result(body: dict[str, Any]) -> StepResult:
    return StepResult(
        global_step=int(body["global_step"]),
        policy_version=int(body["policy_version"]),
        published_version=body.get("published_version"),
        snapshot_path=body.get("snapshot_path"),
        metrics={k: float(v) for k, v in body.get("metrics", {}).items()},
    )
