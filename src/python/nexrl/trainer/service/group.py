"""``ServiceTrainerGroup``: the controller's trainer in ``trainer.mode: training-service``.

It is a ``TrainerHandle`` (``nexrl.trainer.handle``), as ``TrainerGroup`` is:
``setup_info``, ``call``/``start`` of ``step``, ``extra_state``,
``publish_snapshot``, ``save_checkpoint``, ``close``, ``timeout_s``, each a call to
the training service (``TrainingClient``) on a thread, as a one-rank
``PendingCall``. ``step`` is the service's fused ``train_step`` on the step's
rows in the pool (a ``BatchRef``: the service reads them from shared storage, as a
self-hosted rank does), so the update is the
self-hosted trainer's own, with the same numerics. Failures raise
``TrainerGroupError`` (rank 0), which the controller already reports. It watches
no worker heartbeats: ``heartbeats`` is None and ``check_heartbeats`` does
nothing (a service that stops answering fails its call, at the latest at the
call's deadline).
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any, NoReturn

from nexrl.trainer.errors import TrainerGroupError
from nexrl.trainer.handle import RankZeroCalls
from nexrl.trainer.heartbeats import Heartbeats
from nexrl.trainer.pending import PendingCall
from nexrl.trainer.rank_calls import CALLS, RankCall
from nexrl.trainer.result import StepResult
from nexrl.trainer.service.client import TrainingClient, TrainingClientError

__all__ = ["ServiceTrainerGroup"]


def _service_failure(method: str, errors: list[tuple[int, BaseException]]) -> NoReturn:
    """The ``PendingCall`` failure of a service call (one rank: 0)."""
    _, exc = errors[0]
    if isinstance(exc, concurrent.futures.TimeoutError):
        raise TrainerGroupError(
            f"training service: {method} still running at its deadline", (0,)
        ) from None
    if isinstance(exc, (TrainingClientError, OSError)):
        raise TrainerGroupError(f"training service: {method}: {exc}", (0,)) from exc
    raise exc


class ServiceTrainerGroup(RankZeroCalls):
    """The controller's trainer as a client of a training service (module doc)."""

    world_size = 1
    heartbeats: Heartbeats | None = None  # no worker to watch (module doc)

    def __init__(
        self, client: TrainingClient, *, timeout_s: float = 900.0, handle: Any = None
    ) -> None:
        self.client, self.timeout_s, self.handle = client, timeout_s, handle
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nexrl-svc")

    @property
    def url(self) -> str:
        return self.client.base_url

    def _run(self, method: RankCall, *args: Any) -> Any:
        if method in (RankCall.STEP, RankCall.TRAIN_STEP):
            (batch,) = args
            result = _step_result(self.client.train_step(batch))
            return result if method is RankCall.STEP else result.row()
        if method is RankCall.DESCRIBE:
            return {**self.client.info(), "rank": 0, "service_url": self.url}
        if method is RankCall.EXTRA_STATE:
            return self.client.extra_state()
        if method is RankCall.PUBLISH_SNAPSHOT:
            return self.client.save_weights_for_sampler()["path"]
        (extra,) = args or (None,)  # SAVE_CHECKPOINT, the last of CALLS' service calls
        return self.client.save_state(extra)["path"]

    def start(
        self, method: RankCall, *args: Any, timeout_s: float | None = None
    ) -> PendingCall[Any]:
        """Start ``method`` on the service's thread; a call the table does not mark
        ``service`` (``nexrl.trainer.rank_calls.CALLS``) fails before anything is sent."""
        method = RankCall.named(method)
        if not CALLS[method].service:
            served = ", ".join(c.value for c, info in CALLS.items() if info.service)
            raise TrainerGroupError(
                f"training service: no {method.value!r} call (trainer.mode: training-service "
                f"answers {served})"
            )
        future = self._pool.submit(self._run, method, *args)
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        return PendingCall(method, [future], deadline, failure=_service_failure)

    def check_heartbeats(self, what: str) -> None:
        """Nothing to check: a training service has no worker heartbeats (module doc)."""

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
