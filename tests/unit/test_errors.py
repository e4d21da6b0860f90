"""Every user-facing exception of nexrl (and the backends) is a NexrlError, keeps its
older bases, and still crosses a process boundary (pickle) the way it did."""

from __future__ import annotations

import importlib
import pickle
import pkgutil

import pytest

import nexrl
from backends.inference.adapters import ReloadError
from backends.inference.embedded.handle import ServerStartError
from backends.inference.embedded.weights import SnapshotError as EmbeddedSnapshotError
from nexrl.core.chat.client import InferenceError
from nexrl.core.config.errors import RecipeError
from nexrl.core.conversations import WarmStartError
from nexrl.core.data.errors import DataError
from nexrl.core.errors import NexrlError
from nexrl.core.pool.columns import PoolDataError
from nexrl.core.pool.cursor import ConsumerConflictError
from nexrl.core.pool.layout import PoolStoreError
from nexrl.core.pool.pool import PoolConfigError
from nexrl.core.types.batch import BatchError
from nexrl.core.types.trajectory import TrajectoryError
from nexrl.core.weights.checkpoint import CheckpointError
from nexrl.core.weights.handoff.layout import LayoutError
from nexrl.core.weights.handoff.transport import TransportError
from nexrl.core.weights.snapshot import SnapshotError
from nexrl.driver.cli.flags import FlagError
from nexrl.driver.cli.new_task import NewTaskError
from nexrl.driver.cluster.kubernetes import KubernetesError
from nexrl.driver.cluster.remote_server import InferenceJobLost
from nexrl.driver.cluster.slurm import SlurmError
from nexrl.driver.controller import ControllerError
from nexrl.driver.controller.reload import WeightSyncError
from nexrl.driver.controller.rundir import RunDirError
from nexrl.driver.controller.silent_workers import NoWorkerLeft
from nexrl.driver.metrics.sinks import MetricSinkError
from nexrl.driver.modeling.prepare import ModelSetupError
from nexrl.inference.supervisor import ServiceError
from nexrl.rollout.agent_service.client import AgentServiceError
from nexrl.rollout.agent_service.errors import ServiceError as AgentServiceHTTPError
from nexrl.rollout.agent_service.server import AgentServiceStartError
from nexrl.rollout.evaluators.sandbox import SandboxUnavailable
from nexrl.rollout.worker.agent.config import AgentConfigError
from nexrl.rollout.worker.openai_agent.entrypoint import AgentError
from nexrl.trainer.actor import TrainerGroupError, TrainerLostError, TrainerSilentError
from nexrl.trainer.algorithms.registry import UnknownNameError
from nexrl.trainer.base import TrainerError
from nexrl.trainer.service.client import TrainingClientError
from nexrl.trainer.service.core import TrainingServiceError
from nexrl.trainer.service.server import TrainingServiceStartError
from nexrl.trainer.sft_data import SftDataError

# class -> the bases it had before NexrlError (existing `except` clauses rely on them)
USER_FACING: dict[type[BaseException], tuple[type[BaseException], ...]] = {
    RecipeError: (),
    DataError: (),
    RunDirError: (RuntimeError,),
    ModelSetupError: (RuntimeError,),
    ControllerError: (RuntimeError,),
    WeightSyncError: (ControllerError, RuntimeError),
    NoWorkerLeft: (ControllerError, RuntimeError),
    ServiceError: (RuntimeError,),
    TrajectoryError: (ValueError,),
    BatchError: (ValueError,),
    UnknownNameError: (KeyError, ValueError),
    PoolConfigError: (ValueError,),
    PoolDataError: (ValueError,),
    PoolStoreError: (RuntimeError,),
    ConsumerConflictError: (RuntimeError,),
    CheckpointError: (RuntimeError,),
    SnapshotError: (RuntimeError,),
    TrainerError: (RuntimeError,),
    TrainerGroupError: (RuntimeError,),
    TrainerLostError: (TrainerGroupError, RuntimeError),
    TrainerSilentError: (TrainerGroupError, RuntimeError),
    SandboxUnavailable: (RuntimeError,),
    KubernetesError: (RuntimeError,),
    MetricSinkError: (RuntimeError,),
    InferenceError: (RuntimeError,),
    WarmStartError: (ValueError,),
    SftDataError: (DataError, ValueError),
    AgentConfigError: (ValueError,),
    AgentError: (RuntimeError,),
    AgentServiceError: (RuntimeError,),
    AgentServiceHTTPError: (),
    AgentServiceStartError: (RuntimeError,),
    ServerStartError: (RuntimeError,),
    ReloadError: (RuntimeError,),
    EmbeddedSnapshotError: (ValueError,),
    SlurmError: (RuntimeError,),
    NewTaskError: (),
    FlagError: (),
    InferenceJobLost: (RuntimeError,),
    TrainingClientError: (RuntimeError,),
    TrainingServiceError: (ValueError,),
    TrainingServiceStartError: (RuntimeError,),
    LayoutError: (ValueError,),
    TransportError: (RuntimeError,),
}

# Raised and caught inside one module, never shown to a user as such.
INTERNAL = {
    "_FieldProblem",
    "Rewritten",
}  # Rewritten: nexrl.driver.dashboard.history re-reads a file


@pytest.mark.parametrize("cls", list(USER_FACING), ids=lambda c: c.__qualname__)
def test_user_facing_errors_are_nexrl_errors_with_their_old_bases(
    cls: type[BaseException],
) -> None:
    assert issubclass(cls, NexrlError)
    for base in USER_FACING[cls]:
        assert issubclass(cls, base)


def test_no_exception_class_under_nexrl_is_left_out() -> None:
    # Import every nexrl module, then every Exception subclass they define must be listed
    # above (user-facing) or be internal: a new error class has to choose.
    for mod in pkgutil.walk_packages(nexrl.__path__, "nexrl."):
        if not mod.name.endswith(".__main__"):  # (running a __main__ starts a program)
            importlib.import_module(mod.name)
    seen: set[type[BaseException]] = set()
    todo: list[type[BaseException]] = [Exception]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    ours = {c for c in seen if c.__module__.startswith("nexrl.")}
    missing = {
        f"{c.__module__}.{c.__qualname__}"
        for c in ours
        if c is not NexrlError and c not in USER_FACING and c.__name__ not in INTERNAL
    }
    assert not missing, f"exception classes neither NexrlError-listed nor internal: {missing}"


def test_recipe_error_still_pickles_with_its_problems() -> None:
    err = pickle.loads(pickle.dumps(RecipeError(["a.b: bad", "c: missing"])))
    assert isinstance(err, RecipeError) and isinstance(err, NexrlError)
    assert err.problems == ["a.b: bad", "c: missing"]


@pytest.mark.parametrize(
    "err",
    [
        TrainerError("trainer: batch has no responses"),
        TrainerGroupError("trainer.world_size=3 needs 3 Dask workers"),
        TrainerLostError("rank 1's worker is gone", (1,)),
        CheckpointError("checkpoints/step_3: missing meta.json"),
        InferenceError("timed out", base_url="http://x", status_code=504),
        PoolConfigError(["trajectory_pool.key_list: a key is listed twice"]),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_that_travel_between_processes_still_pickle(err: NexrlError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err)
    assert back.__dict__ == err.__dict__
