"""A run's pods on Kubernetes: the dask-kubernetes operator's custom resources.

``cluster.type: kubernetes`` (``cluster.kubernetes.*``, :class:`KubernetesConfig`).
The driver stays where it was started (a machine with a kubeconfig for the
cluster); the Dask operator (installed once per Kubernetes cluster) creates:

* a ``DaskCluster`` named ``nexrl-<experiment>``: the scheduler pod and its
  service, and the rollout worker pods (worker group ``default``, ``n_workers``
  of them); their workers offer ``CPU=cpu`` and run rollout and evaluator futures;
* one ``DaskWorkerGroup`` per trainer rank, ``nexrl-<experiment>-trainer-<rank>``
  (one pod each, sized by ``trainer``); its worker offers
  ``GPU=resource.trainer_gpus`` (what a trainer actor asks for, by construction)
  and the driver pins rank ``r`` to group ``r``'s worker;
* a ``DaskWorkerGroup`` ``nexrl-<experiment>-inference`` (when nexrl runs the
  embedded server): its worker offers ``INFERENCE=1`` and starts the server in
  its pod (:mod:`nexrl.driver.cluster.remote_server`).

:func:`manifests` returns every resource as the operator receives it (what
``--dry-run`` prints); :func:`validate_manifests` checks them against the CRD
schemas that ship with the installed dask-kubernetes, as strictly as
``kubectl apply --validate=strict`` would. No Kubernetes API server can run on the
project's test machines: the manifests are tested, :func:`start_kubernetes` is
not (docs/cluster.md says so).
"""

from __future__ import annotations

import logging
import re
import time
from functools import cache
from pathlib import Path
from typing import Any

from nexrl.core.config.sections.cluster import KubePodSize, KubernetesConfig
from nexrl.core.errors import NexrlError
from nexrl.core.process.worker_env import job_environment
from nexrl.core.util.dask_workers import workers_of
from nexrl.driver.cluster.roles import resources_arg, role_resources

__all__ = [
    "KubernetesError",
    "cluster_name",
    "group_names",
    "manifests",
    "start_kubernetes",
    "validate_manifests",
]

logger = logging.getLogger(__name__)

API_VERSION = "kubernetes.dask.org/v1"


class KubernetesError(RuntimeError, NexrlError):
    """The Kubernetes pods of a run could not be created, or their workers never joined."""


def cluster_name(experiment: str) -> str:
    """``nexrl-<experiment>`` as a DNS-1035 label (what Kubernetes names must be)."""
    label = re.sub(r"[^a-z0-9-]+", "-", f"nexrl-{experiment}".lower()).strip("-")
    return label[:40].rstrip("-")  # room for "-trainer-N-worker-<uuid>" in pod names


def _cores(cpu: str) -> float:
    """Whole cores of a Kubernetes CPU quantity (``"4"``, ``"2.5"``, ``"500m"``), at least 1."""
    value = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    return max(1.0, float(int(value)))


def _worker_spec(
    image: str, replicas: int, size: KubePodSize, resources: dict[str, float]
) -> dict[str, Any]:
    """A worker group's pod spec: one ``dask worker`` container offering ``resources``."""
    from dask_kubernetes.operator import make_worker_spec

    limits: dict[str, Any] = {"cpu": size.cpu, "memory": size.memory}
    if size.gpus:
        limits["nvidia.com/gpu"] = str(size.gpus)  # a quantity: the CRD types it a string
    spec: dict[str, Any] = make_worker_spec(
        image=image, n_workers=replicas, resources={"requests": dict(limits), "limits": limits}
    )
    (container,) = spec["spec"]["containers"]
    container["args"] = [*container["args"], *resources_arg(resources)]
    # the pod's nanny leaves glibc's malloc tunables alone (nexrl.core.process.worker_env)
    env = container.get("env") or []
    container["env"] = [*env, *({"name": k, "value": v} for k, v in job_environment().items())]
    return _pruned(spec)


def _pruned(obj: Any) -> Any:
    """``obj`` without ``None`` values: the API server drops them before validating."""
    if isinstance(obj, dict):
        return {k: _pruned(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_pruned(v) for v in obj]
    return obj


def group_names(experiment: str, trainer_ranks: int, inference: bool) -> dict[str, str]:
    """``{role-or-rank: DaskWorkerGroup name}``: ``trainer-0..``, ``inference``."""
    name = cluster_name(experiment)
    groups = {f"trainer-{r}": f"{name}-trainer-{r}" for r in range(trainer_ranks)}
    if inference:
        groups["inference"] = f"{name}-inference"
    return groups


def manifests(
    cfg: KubernetesConfig,
    experiment: str,
    *,
    trainer_gpus: int = 1,
    trainer_ranks: int = 1,
    inference: bool = True,
) -> list[dict[str, Any]]:
    """The run's custom resources: the ``DaskCluster``, then its ``DaskWorkerGroup``\\ s."""
    from dask_kubernetes.operator import make_cluster_spec

    name = cluster_name(experiment)
    rollout = KubePodSize(cpu=cfg.cpu, memory=cfg.memory, gpus=cfg.gpus)
    cluster: dict[str, Any] = make_cluster_spec(name=name, image=cfg.image)
    cluster["metadata"]["namespace"] = cfg.namespace
    cluster["spec"]["worker"] = _worker_spec(
        cfg.image, cfg.n_workers, rollout, role_resources("rollout", _cores(cfg.cpu), trainer_gpus)
    )
    docs = [_pruned(cluster)]
    for key, group in group_names(experiment, trainer_ranks, inference).items():
        role = key.split("-")[0]
        size: KubePodSize = getattr(cfg, role)
        worker = _worker_spec(
            cfg.image, 1, size, role_resources(role, _cores(size.cpu), trainer_gpus)
        )
        docs.append(
            {
                "apiVersion": API_VERSION,
                "kind": "DaskWorkerGroup",
                "metadata": {"name": group, "namespace": cfg.namespace},
                "spec": {"cluster": name, "worker": worker},
            }
        )
    return docs


# -- validation against the CRDs ------------------------------------------------


@cache
def _crd_schemas() -> dict[str, dict[str, Any]]:
    """``{kind: openAPIV3Schema}`` of the CRDs shipped in the dask-kubernetes package."""
    import dask_kubernetes
    import yaml

    crds = Path(dask_kubernetes.__file__).parent / "operator" / "customresources"
    helm = Path(dask_kubernetes.__file__).parent / "operator" / "deployment" / "helm"
    found: dict[str, dict[str, Any]] = {}
    # The helm chart's CRDs are complete (the customresources/ ones are templates
    # that the build patches with the PodSpec schema).
    for path in sorted(helm.glob("*/crds/*.yaml")) or sorted(crds.glob("dask*.yaml")):
        crd = yaml.safe_load(path.read_text())
        kind = crd["spec"]["names"]["kind"]
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        found[kind] = version["schema"]["openAPIV3Schema"]
    return found


def _strict(schema: Any) -> Any:
    """An OpenAPI v3 structural schema as a JSON schema that rejects unknown fields
    (``kubectl --validate=strict``) and knows ``x-kubernetes-int-or-string``."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserve = out.pop("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


_OBJECT_FIELDS: dict[str, Any] = {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}},
        "required": ["name"],
    },
}


def validate_manifests(docs: list[dict[str, Any]]) -> list[str]:
    """Problems of ``docs`` against the operator's CRD schemas, one line each
    (``<kind> <name>: <path>: <message>``); empty when every manifest is valid."""
    import jsonschema

    schemas = _crd_schemas()
    problems: list[str] = []
    for doc in docs:
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
        if doc.get("apiVersion") != API_VERSION or kind not in schemas:
            problems.append(f"{kind} {name}: not a {API_VERSION} kind ({', '.join(schemas)})")
            continue
        schema = _strict(schemas[kind])
        # Every object has these; the API server checks them, not the CRD schema.
        schema["properties"] = {**schema["properties"], **_OBJECT_FIELDS}
        validator = jsonschema.Draft7Validator(schema)
        for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            where = ".".join(str(p) for p in err.absolute_path) or "(top)"
            problems.append(f"{kind} {name}: {where}: {err.message}")
    return problems


# -- start ------------------------------------------------------------------------


def start_kubernetes(
    cfg: KubernetesConfig,
    experiment: str,
    *,
    trainer_gpus: int,
    trainer_ranks: int,
    inference: bool,
) -> tuple[Any, Any, list[str], str | None]:
    """Create the run's DaskCluster and worker groups; ``(client, cluster,
    trainer_workers, inference_worker)`` once every trainer/inference worker joined."""
    from dask_kubernetes.operator import KubeCluster
    from distributed import Client

    docs = manifests(
        cfg, experiment, trainer_gpus=trainer_gpus, trainer_ranks=trainer_ranks, inference=inference
    )
    cluster = KubeCluster(custom_cluster_spec=docs[0], namespace=cfg.namespace)
    client = None
    try:
        prefix = f"{cluster_name(experiment)}-"
        for doc in docs[1:]:
            group = doc["metadata"]["name"]
            cluster.add_worker_group(group[len(prefix) :], custom_spec=doc["spec"]["worker"])
        client = Client(cluster, timeout="120s")
        groups = [doc["metadata"]["name"] for doc in docs[1:]]
        found = wait_for_groups(client, groups, cfg.worker_start_timeout_s)
        trainers = [found[g] for g in groups if "-trainer-" in g]
        server = next((found[g] for g in groups if g.endswith("-inference")), None)
        return client, cluster, trainers, server
    except BaseException:
        if client is not None:
            client.close()
        cluster.close()
        raise


def wait_for_groups(client: Any, groups: list[str], timeout_s: float) -> dict[str, str]:
    """``{worker group: worker address}`` once a worker of each group has joined (the
    operator names a group's workers ``<group>-worker-<id>``); an error naming the
    groups still missing after ``timeout_s``."""
    deadline = time.monotonic() + float(timeout_s)
    while True:
        workers = workers_of(client)
        found: dict[str, str] = {}
        for addr, info in workers.items():
            for group in groups:
                if str(info.get("name", "")).startswith(f"{group}-worker-"):
                    found.setdefault(group, addr)
        if len(found) == len(groups):
            return found
        if time.monotonic() > deadline:
            missing = ", ".join(g for g in groups if g not in found)
            raise KubernetesError(
                f"worker groups without a worker after {timeout_s:g}s "
                f"(cluster.kubernetes.worker_start_timeout_s): {missing}; see "
                f"'kubectl get pods -l dask.org/workergroup-name=<group>' and its pods' events"
            )
        time.sleep(1.0)
