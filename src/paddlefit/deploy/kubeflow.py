"""Kubeflow ``PaddleJob`` manifests (training-operator v1, ``kubeflow.org/v1``): render one for a job and validate
any manifest against the CRD's own OpenAPI v3 schema (shipped in ``deploy/data``, see ``data/SOURCES.md``).

The CRD schema checks structure and types; it does not enumerate ``restartPolicy`` values (a free string there),
so :data:`RESTART_POLICIES` (from the CRD's description: "One of Always, OnFailure, Never and ExitCode") is checked
here too.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
from typing import Any

from pydantic import ConfigDict, Field

from paddlefit import options
from paddlefit.errors import PaddlefitError
from paddlefit.validation import RequestModel

RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
API_VERSION = "kubeflow.org/v1"
KIND = "PaddleJob"


@functools.lru_cache(maxsize=1)
def paddlejob_schema() -> dict[str, Any]:
    """The ``openAPIV3Schema`` of the shipped PaddleJob CRD (version ``v1``) as a dict (cached)."""
    import yaml

    text = (importlib.resources.files("paddlefit.deploy") / "data" / "kubeflow.org_paddlejobs.yaml").read_text(
        encoding="utf-8"
    )
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(text, Loader=loader)  # a SafeLoader (C or Python)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def validate_paddlejob(manifest: dict[str, Any]) -> list[str]:
    """Problems of a PaddleJob manifest, each as ``path: message``; empty when it is valid.

    Checks ``apiVersion``/``kind``, the CRD's OpenAPI v3 schema (``jsonschema`` Draft 7 validator: Kubernetes
    ``x-kubernetes-*`` keywords are ignored) and the replica ``restartPolicy`` values.
    """
    import jsonschema

    problems = []
    if manifest.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: {manifest.get('apiVersion')!r} is not {API_VERSION!r}")
    if manifest.get("kind") != KIND:
        problems.append(f"kind: {manifest.get('kind')!r} is not {KIND!r}")
    validator = jsonschema.Draft7Validator(paddlejob_schema())
    for err in sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(x) for x in err.absolute_path) or "(root)"
        problems.append(f"{path}: {err.message}")
    specs = (manifest.get("spec") or {}).get("paddleReplicaSpecs") or {}
    for role, rs in specs.items() if isinstance(specs, dict) else []:
        policy = rs.get("restartPolicy") if isinstance(rs, dict) else None
        if policy is not None and policy not in RESTART_POLICIES:
            problems.append(
                f"spec.paddleReplicaSpecs.{role}.restartPolicy: {policy!r} is not one of {', '.join(RESTART_POLICIES)}"
            )
    return problems


class PaddleJobRequest(RequestModel):
    """What :func:`render_paddlejob` needs.

    Attributes:
        name: Kubernetes object name (DNS-1123: lower case, digits, '-').
        image: container image (e.g. from ``paddlefit image``).
        command: the container command, e.g. ``["paddlefit", "train", "job.yaml", "--resume", "auto"]``.
        nodes: pods in all (1 Master + nodes-1 Workers when nodes > 1), >= 1.
        gpus_per_node: ``nvidia.com/gpu`` limit per pod (0 = CPU pods).
        shm_gib: size of the in-memory ``/dev/shm`` volume (DataLoader workers share batches through it).
        checkpoint_claim: a PersistentVolumeClaim mounted at ``checkpoint_mount`` so a restarted pod resumes.
        restart_policy: one of :data:`RESTART_POLICIES`; ``ExitCode`` retries exit codes 128-255 (paddlefit's 143
            after a SIGTERM checkpoint) and fails on 1-127 (training-operator docs).
        env: container variables by value (no secret: :func:`paddlefit.process.secretenv.refuse_secret_values`).
        env_refs: variables passed by reference: ``valueFrom.secretKeyRef`` of key NAME in the Kubernetes Secret
            ``secret_name`` (Kubernetes docs, "Distribute Credentials Securely Using Secrets"), never a value.

    Raises:
        PaddlefitError: (on construction) a field of the wrong type or out of range, named by its option.
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Kubernetes object name.")
    image: str = Field(description="Container image.", json_schema_extra=options.IMAGE.field())
    command: list[str] = Field(description="The container command.")
    nodes: int = Field(1, **options.NODES.bounds, description="Pods in all.", json_schema_extra=options.NODES.field())
    gpus_per_node: int = Field(
        1,
        **options.GPUS_PER_NODE_LAUNCH.bounds,
        description="GPUs per pod.",
        json_schema_extra=options.GPUS_PER_NODE_LAUNCH.field(),
    )
    shm_gib: int = Field(
        options.SHM_GIB.shown["shm"],
        **options.SHM_GIB.bounds,
        description="``/dev/shm`` per pod, GiB.",
        json_schema_extra=options.SHM_GIB.field(),
    )
    checkpoint_claim: str | None = Field(None, description="Checkpoint PVC.", json_schema_extra=options.PVC.field())
    checkpoint_mount: str = Field("/ckpt", description="Where the claim is mounted.")
    restart_policy: str = Field("ExitCode", description="One of :data:`RESTART_POLICIES`.")
    env: dict[str, str] = Field(default_factory=dict, description="Variables by value.")
    env_refs: tuple[str, ...] = Field((), description="Variables by reference.")
    secret_name: str | None = Field(None, description="The Secret ``env_refs`` come from.")


def render_paddlejob(req: PaddleJobRequest) -> dict[str, Any]:
    """A ``kubeflow.org/v1`` PaddleJob manifest (as a dict, ready for ``yaml.safe_dump``) for ``req``.

    Raises:
        PaddlefitError: an unknown restart policy, a secret in ``env``,
            ``env_refs`` without ``secret_name``, or a manifest the CRD schema rejects (the message lists the
            problems).
    """
    import re

    from paddlefit.process.secretenv import refuse_secret_values

    if req.restart_policy not in RESTART_POLICIES:
        raise PaddlefitError(f"restart policy {req.restart_policy!r} is not one of {', '.join(RESTART_POLICIES)}.")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", req.name):
        raise PaddlefitError(f"PaddleJob name {req.name!r} must be lower-case letters, digits and '-' (DNS-1123).")
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{req.shm_gib}Gi"}}
    ]
    if req.checkpoint_claim:
        mounts.append({"name": "checkpoints", "mountPath": req.checkpoint_mount})
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": req.checkpoint_claim}})
    resources = {"limits": {"nvidia.com/gpu": req.gpus_per_node}} if req.gpus_per_node else {}
    container: dict[str, Any] = {
        "name": "paddle",
        "image": req.image,
        "command": list(req.command),
        "volumeMounts": mounts,
        "resources": resources,
    }
    refuse_secret_values(req.env, "the PaddleJob's env")
    if req.env_refs and not req.secret_name:
        raise PaddlefitError("variables passed by reference need the Kubernetes Secret that holds them.")
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(req.env.items())]
    env += [{"name": k, "valueFrom": {"secretKeyRef": {"name": req.secret_name, "key": k}}} for k in req.env_refs]
    if env:
        container["env"] = env

    def replica(count: int) -> dict[str, Any]:  # deep copies: no shared objects, so no YAML anchors when dumped
        return {
            "replicas": count,
            "restartPolicy": req.restart_policy,
            "template": {"spec": {"containers": [copy.deepcopy(container)], "volumes": copy.deepcopy(volumes)}},
        }

    specs = {"Master": replica(1)}
    if req.nodes > 1:
        specs["Worker"] = replica(req.nodes - 1)
    manifest = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": req.name},
        "spec": {"paddleReplicaSpecs": specs, "runPolicy": {"cleanPodPolicy": "None"}},
    }
    problems = validate_paddlejob(manifest)
    if problems:
        raise PaddlefitError("the rendered PaddleJob does not validate: " + "; ".join(problems[:5]))
    return manifest
