"""Both trainer front-ends are a ``TrainerHandle``; their calls are one ``PendingCall``,
named from one table (``RankCall``): a name outside it fails before anything is sent."""

from __future__ import annotations

import concurrent.futures
import re
import time
from pathlib import Path
from typing import Any

import pytest

from nexrl.trainer.actor import TrainerGroup
from nexrl.trainer.errors import TrainerGroupError
from nexrl.trainer.handle import TrainerHandle
from nexrl.trainer.pending import PendingCall
from nexrl.trainer.rank_actor import TrainerActor
from nexrl.trainer.rank_calls import CALLS, RankCall
from nexrl.trainer.service.client import TrainingClientError
from nexrl.trainer.service.group import ServiceTrainerGroup

# What a controller uses of its trainer (nexrl.driver.controller): the protocol, no more.
CONTROLLER_USES = {
    "timeout_s",
    "world_size",
    "heartbeats",
    "check_heartbeats",
    "start",
    "call",
    "setup_info",
    "step",
    "train_step",
    "publish_snapshot",
    "save_checkpoint",
    "close",
}


# mypy checks these assignments structurally (./pants check)
def _self_hosted(group: TrainerGroup) -> TrainerHandle:
    return group


def _service(group: ServiceTrainerGroup) -> TrainerHandle:
    return group


class _Client:
    base_url = "http://service.invalid"

    def __init__(self, **answers: Any) -> None:
        self.answers = answers

    def extra_state(self) -> Any:
        answer = self.answers["extra_state"]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def close(self) -> None:
        pass


def _protocol_members() -> set[str]:
    names = set(TrainerHandle.__annotations__)
    names |= {n for n in vars(TrainerHandle) if not n.startswith("_")}
    return names


def test_both_front_ends_are_trainer_handles() -> None:
    assert _protocol_members() == CONTROLLER_USES
    hosted = TrainerGroup(None, [], [], [], timeout_s=5.0)
    service = ServiceTrainerGroup(_Client(), timeout_s=5.0)  # type: ignore[arg-type]
    try:
        for handle in (_self_hosted(hosted), _service(service)):
            assert isinstance(handle, TrainerHandle)
            assert all(hasattr(handle, n) for n in CONTROLLER_USES), type(handle)
            assert handle.heartbeats is None  # no workers (the service never has any)
            handle.check_heartbeats("worker (step 1)")  # nothing silent: no error
    finally:
        service.close()


def test_a_service_call_is_a_one_rank_pending_call() -> None:
    service = ServiceTrainerGroup(_Client(extra_state={"a": 1}), timeout_s=5.0)  # type: ignore[arg-type]
    try:
        pending = service.start(RankCall.EXTRA_STATE)
        assert isinstance(pending, PendingCall)
        assert pending.wait(5.0) and pending.result() == [{"a": 1}]
        with pytest.raises(
            TrainerGroupError, match=r"^no trainer call 'nope'; the calls are: setup"
        ):
            service.call("nope")  # type: ignore[arg-type]  # a name outside the table
        # a rank call the service has no route for: named, with the ones it answers
        with pytest.raises(
            TrainerGroupError,
            match=r"^training service: no 'greedy_answers' call \(.* answers describe, step,",
        ):
            service.call(RankCall.GREEDY_ANSWERS, [[1]], 1, [], 0)
    finally:
        service.close()


def test_the_call_table_is_the_rank_actors_methods_and_a_stray_name_sends_nothing() -> None:
    public = {
        n
        for n in vars(TrainerActor)
        if not n.startswith("_") and callable(getattr(TrainerActor, n))
    }
    assert {c.value for c in RankCall} == public
    assert set(CALLS) == set(RankCall)
    # the self-hosted group refuses before touching an actor (it has none here)
    group = TrainerGroup(None, [], [], [], timeout_s=5.0)
    with pytest.raises(TrainerGroupError, match=r"^no trainer call 'stepp'; the calls are: "):
        group.start("stepp")  # type: ignore[arg-type]


def test_a_failed_service_call_names_the_service() -> None:
    failing = _Client(extra_state=TrainingClientError("HTTP 500: boom"))
    service = ServiceTrainerGroup(failing, timeout_s=5.0)  # type: ignore[arg-type]
    try:
        with pytest.raises(TrainerGroupError, match=r"^training service: extra_state: ") as err:
            service.call(RankCall.EXTRA_STATE)
        assert err.value.ranks == (0,)
    finally:
        service.close()


def test_a_pending_call_names_the_failed_ranks() -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:

        def fail() -> int:
            raise ValueError("bad batch")

        futures = [pool.submit(lambda: 7), pool.submit(fail)]
        pending: PendingCall[int] = PendingCall("step", futures, time.monotonic() + 5.0)
        with pytest.raises(
            TrainerGroupError,
            match=r"trainer step failed on rank\(s\) 1; rank 1: ValueError: bad batch",
        ) as err:
            pending.result()
        assert err.value.ranks == (1,)
        ok: PendingCall[int] = PendingCall("step", [pool.submit(lambda: 3)], time.monotonic() + 5.0)
        assert ok.result() == [3]


def test_no_trainer_call_is_named_by_a_string_in_the_code() -> None:
    """The driver and the trainer name calls by ``RankCall`` (a typo is a NameError
    at import, not a failed step an hour in)."""
    names = "|".join(c.value for c in RankCall)
    by_string = re.compile(rf"\.(call|start)\(\s*['\"]({names})['\"]")
    root = Path(__file__).resolve().parents[3] / "src" / "python"
    found = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if by_string.search(line)
    ]
    assert len(list(root.rglob("*.py"))) > 100  # the tree was found
    assert found == []
