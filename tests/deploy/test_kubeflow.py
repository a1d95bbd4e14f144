"""PaddleJob manifests: rendered ones validate against the shipped training-operator v1.9 CRD schema; broken ones
are reported with their path."""

from __future__ import annotations

import copy
import hashlib
import importlib.resources

import pytest
import yaml

from paddlefit.deploy.kubeflow import PaddleJobRequest, paddlejob_schema, render_paddlejob, validate_paddlejob
from paddlefit.errors import PaddlefitError


def _req(**kw) -> PaddleJobRequest:
    base = {
        "name": "digits-dp",
        "image": "registry.example/paddlefit:3.0.0-cu126",
        "command": ["paddlefit", "train", "job.yaml", "--resume", "auto"],
        "nodes": 3,
        "gpus_per_node": 8,
        "checkpoint_claim": "ckpt",
    }
    return PaddleJobRequest(**{**base, **kw})


def test_shipped_crd_is_the_sourced_file():
    data = (importlib.resources.files("paddlefit.deploy") / "data" / "kubeflow.org_paddlejobs.yaml").read_bytes()
    assert hashlib.sha256(data).hexdigest() == "a0c2371ec289519c027b3b82fa4e85f943f869d5a3c1858e90dacdd1fcd6adc0"
    assert "paddleReplicaSpecs" in paddlejob_schema()["properties"]["spec"]["properties"]


def test_rendered_manifest_validates_and_has_master_workers_gpus_shm_and_checkpoints():
    m = render_paddlejob(_req())
    assert validate_paddlejob(m) == []
    specs = m["spec"]["paddleReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 2)
    pod = specs["Worker"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}} in pod["volumes"]
    assert specs["Master"]["restartPolicy"] == "ExitCode"
    text = yaml.safe_dump(m)
    assert "&id" not in text and yaml.safe_load(text) == m  # plain YAML, round-trips
    single = render_paddlejob(_req(nodes=1, gpus_per_node=0, checkpoint_claim=None))
    assert list(single["spec"]["paddleReplicaSpecs"]) == ["Master"] and validate_paddlejob(single) == []


def test_broken_manifests_are_reported_with_their_path():
    m = render_paddlejob(_req())
    bad = copy.deepcopy(m)
    bad["spec"]["paddleReplicaSpecs"]["Worker"]["replicas"] = "two"
    bad["spec"]["paddleReplicaSpecs"]["Master"]["restartPolicy"] = "Sometimes"
    bad["spec"]["paddleReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = 7
    bad["kind"] = "PyTorchJob"
    problems = validate_paddlejob(bad)
    assert "spec.paddleReplicaSpecs.Worker.replicas: 'two' is not of type 'integer'" in problems
    assert "spec.paddleReplicaSpecs.Master.template.spec.containers.0.image: 7 is not of type 'string'" in problems
    assert any(p.startswith("spec.paddleReplicaSpecs.Master.restartPolicy: 'Sometimes'") for p in problems)
    assert "kind: 'PyTorchJob' is not 'PaddleJob'" in problems
    assert len(problems) == 4


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"nodes": 0}, "`--nodes` must be 1..1024"),
        ({"restart_policy": "Sometimes"}, "not one of"),
        ({"name": "Digits_DP"}, "DNS-1123"),
    ],
)
def test_bad_requests_are_refused(kw, needle):
    with pytest.raises(PaddlefitError, match=needle):
        render_paddlejob(_req(**kw))
