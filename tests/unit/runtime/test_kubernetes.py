"""The Kubernetes resources of a run (nexrl.driver.cluster.kubernetes), checked against the
CRD schemas of the Dask operator that ships with the installed dask-kubernetes, as
strictly as ``kubectl apply --validate=strict``. No API server can run here: what is
tested is what the operator would be given (docs/cluster.md, "Kubernetes")."""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from nexrl.core.config.sections.cluster import KubePodSize, KubernetesConfig
from nexrl.driver.cluster.kubernetes import cluster_name, manifests, validate_manifests

GPU_CLUSTER = KubernetesConfig(
    image="registry.example/nexrl:1",
    namespace="rl",
    n_workers=3,
    cpu="8",
    memory="32Gi",
    trainer=KubePodSize(cpu="16", memory="128Gi", gpus=4),
    inference=KubePodSize(cpu="8", memory="64Gi", gpus=1),
)


def _args(doc: dict[str, Any]) -> list[str]:
    (container,) = doc["spec"]["worker"]["spec"]["containers"]
    return list(container["args"])


def _pre_spawn_environ(env: dict[str, str]) -> dict[str, Any]:
    """What a nanny started with ``env`` exports to its worker (``None`` = left out)."""
    import dask.config

    cfg = copy.deepcopy(dask.config.defaults)
    merged: dict[str, Any] = {}
    for d in cfg:
        dask.config.update(merged, d)
    dask.config.update(merged, dask.config.collect_env(env))
    spawn = merged["distributed"]["nanny"]["pre-spawn-environ"]
    return {k: v for k, v in spawn.items() if v is not None}


def test_a_runs_resources_are_valid_for_the_operator() -> None:
    docs = manifests(GPU_CLUSTER, "Max Digit_tiny", trainer_gpus=4, trainer_ranks=2)
    assert validate_manifests(docs) == []
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("DaskCluster", "nexrl-max-digit-tiny"),
        ("DaskWorkerGroup", "nexrl-max-digit-tiny-trainer-0"),
        ("DaskWorkerGroup", "nexrl-max-digit-tiny-trainer-1"),
        ("DaskWorkerGroup", "nexrl-max-digit-tiny-inference"),
    ]
    assert all(d["metadata"]["namespace"] == "rl" for d in docs)
    assert all(d["spec"]["cluster"] == "nexrl-max-digit-tiny" for d in docs[1:])
    rollout, trainer, _, inference = docs
    assert rollout["spec"]["worker"]["replicas"] == 3
    assert _args(rollout)[-2:] == ["--resources", "CPU=8"]
    assert _args(trainer)[-2:] == ["--resources", "GPU=4"]
    assert _args(inference)[-2:] == ["--resources", "INFERENCE=1"]
    (container,) = trainer["spec"]["worker"]["spec"]["containers"]
    assert container["image"] == "registry.example/nexrl:1"
    assert container["resources"]["limits"] == {
        "cpu": "16",
        "memory": "128Gi",
        "nvidia.com/gpu": "4",
    }
    assert container["resources"]["requests"] == container["resources"]["limits"]
    # every pod's nanny leaves glibc's malloc tunable out (nexrl.core.process.worker_env):
    # the pod's Dask config, as Dask builds it from that environment at import
    for doc in docs:
        (container,) = doc["spec"]["worker"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert _pre_spawn_environ(env) == {
            "OMP_NUM_THREADS": 1,
            "MKL_NUM_THREADS": 1,
            "OPENBLAS_NUM_THREADS": 1,
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # no worker's progress bar in the logs
        }


def test_a_trainer_is_placeable_on_cpu_pods_and_external_engines_need_no_server_pod() -> None:
    cpu = KubernetesConfig(trainer=KubePodSize(gpus=0), inference=KubePodSize(gpus=0))
    docs = manifests(cpu, "t", trainer_gpus=1, trainer_ranks=1, inference=False)
    assert validate_manifests(docs) == []
    assert [d["metadata"]["name"] for d in docs] == ["nexrl-t", "nexrl-t-trainer-0"]
    # a trainer actor asks for GPU=1: its pod's worker offers it, GPUs or not
    assert _args(docs[1])[-2:] == ["--resources", "GPU=1"]
    (container,) = docs[1]["spec"]["worker"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    # None fields are left out, as the API server prunes them; env is only the worker's
    assert all(v is not None for v in container.values())
    assert [e["name"] for e in container["env"]] == ["DASK_INTERNAL_INHERIT_CONFIG"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            lambda d: d[1]["spec"]["worker"]["spec"]["containers"][0].update(resource={}),
            "DaskWorkerGroup nexrl-t-trainer-0: spec.worker.spec.containers.0: Additional "
            "properties are not allowed ('resource' was unexpected)",
        ),
        (
            lambda d: d[0]["spec"]["worker"].update(replicas="two"),
            "DaskCluster nexrl-t: spec.worker.replicas: 'two' is not of type 'integer'",
        ),
        # a GPU count as a number: the CRD types quantities as strings
        (
            lambda d: d[1]["spec"]["worker"]["spec"]["containers"][0]["resources"]["limits"].update(
                {"nvidia.com/gpu": 1}
            ),
            "DaskWorkerGroup nexrl-t-trainer-0: spec.worker.spec.containers.0.resources.limits."
            "nvidia.com/gpu: 1 is not of type 'string'",
        ),
        (
            lambda d: d[2]["spec"].pop("cluster"),
            "DaskWorkerGroup nexrl-t-inference: spec: 'cluster' is a required property",
        ),
    ],
)
def test_the_check_names_what_the_operator_would_reject(
    change: Callable[[list[dict[str, Any]]], object], named: str
) -> None:
    docs = copy.deepcopy(manifests(KubernetesConfig(), "t"))
    change(docs)
    problems = validate_manifests(docs)
    assert len(problems) == 1 and problems[0].startswith(named), problems


def test_cluster_names_are_dns_labels() -> None:
    assert cluster_name("My_Exp.v2") == "nexrl-my-exp-v2"
    assert len(cluster_name("x" * 100)) <= 40


def _guide_command(marker: str) -> list[str]:
    """docs/cluster.md's indented command (continuation lines joined) holding ``marker``,
    as ``python -m nexrl.driver.cli.train`` arguments (what the ./pants run target runs)."""
    text = Path("docs/cluster.md").read_text().replace("\\\n", " ")
    (line,) = [ln.strip() for ln in text.splitlines() if ln.startswith("    ") and marker in ln]
    args = shlex.split(line)
    assert args[:3] == ["./pants", "run", "src/python/nexrl:train"] and args[3] == "--", line
    return [sys.executable, "-m", "nexrl.driver.cli.train", *args[4:]]


def test_the_guides_dry_run_prints_the_manifests_kubectl_takes() -> None:
    command = _guide_command("cluster.kubernetes.image=registry.example/nexrl:1 --dry-run")
    env = {**os.environ, "NEXRL_TOKEN": "t0ken"}  # the guide's token, from the environment
    proc = subprocess.run(
        [*command, "trainer.world_size=2"], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    docs = list(yaml.safe_load_all(proc.stdout))
    assert [d["kind"] for d in docs] == ["DaskCluster", *["DaskWorkerGroup"] * 3]
    assert validate_manifests(docs) == []
    assert docs == manifests(
        KubernetesConfig(image="registry.example/nexrl:1"), "max_digit_tiny", trainer_ranks=2
    )
