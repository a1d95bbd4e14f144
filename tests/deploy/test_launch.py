"""paddlefit launch: every target validates, and the local and ssh targets really run a 2-node job on this machine."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from trainrun import LAUNCH_SPEC as SPEC

from paddlefit.deploy.kubeflow import validate_paddlejob
from paddlefit.deploy.launch import SPEC_DELIMITER, validate_skypilot_task
from paddlefit.jobspec.spec import JobSpec

BIN = str(Path(sys.executable).parent)


def run(*args, cwd=None, env=None, timeout=300):
    e = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), GLOG_minloglevel="2", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=e,
        timeout=timeout,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spec_in(script: str) -> JobSpec:
    """The job spec a generated script writes with its heredoc."""
    m = re.search(rf"<<'{SPEC_DELIMITER}'\n(.*?)\n{SPEC_DELIMITER}\n", script, re.S)
    assert m, script
    return JobSpec.model_validate(yaml.safe_load(m.group(1)))


def _bash_syntax_ok(script: str) -> None:
    r = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "job.yaml").write_text(SPEC)
    return tmp_path / "job.yaml"


def test_skypilot_task_validates_and_carries_the_spec(job: Path, tmp_path: Path) -> None:
    r = run(
        "launch",
        str(job),
        "-t",
        "skypilot",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--gpu",
        "A100-SXM4-80GB",
        "--spot",
        "--bucket",
        "s3://my-bucket/ckpt",
        "--no-ib",
        "--out",
        str(tmp_path / "sky"),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["commands"] == [f"sky jobs launch {tmp_path / 'sky' / 'task.yaml'}"]
    task = yaml.safe_load((tmp_path / "sky" / "task.yaml").read_text())
    assert validate_skypilot_task(task) == []
    res = task["resources"]
    assert res["accelerators"] == "A100-80GB:8" and res["use_spot"] is True
    assert res["job_recovery"]["recover_on_exit_codes"] == [143, 203] and task["num_nodes"] == 2
    assert task["file_mounts"]["/checkpoints"] == {"mode": "MOUNT_CACHED", "source": "s3://my-bucket/ckpt"}
    assert task["envs"] == {"NCCL_IB_DISABLE": "1"}
    run_script = task["run"]
    _bash_syntax_ok(run_script)
    for var in ("SKYPILOT_NODE_IPS", "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_GPUS_PER_NODE", "SKYPILOT_NUM_NODES"):
        assert var in run_script
    assert "--run-dir /checkpoints/job --resume auto" in run_script
    assert _spec_in(run_script) == JobSpec.model_validate(yaml.safe_load(SPEC)).model_copy(update={"devices": 16})
    assert task["workdir"] == "." and task["setup"] == "pip install -r requirements.txt"
    # SkyPilot's schemas reject what SkyPilot rejects
    bad = dict(
        task,
        num_nodes="two",
        resources=dict(res, use_spot="yes"),
        file_mounts={"/c": {"mode": "FAST", "name": "x"}},
        foo=1,
    )
    problems = " | ".join(validate_skypilot_task(bad))
    for needle in (
        "$.num_nodes: 'two' is not of type 'integer'",
        "'foo' was unexpected",
        "$.resources.use_spot: 'yes' is not of type 'boolean'",
        "$.file_mounts[/c].mode: 'FAST'",
    ):
        assert needle in problems, problems


def test_skypilot_task_loads_with_skypilots_own_loader_when_installed(job: Path, tmp_path: Path) -> None:
    sky = pytest.importorskip("sky", reason="SkyPilot not installed: the schema test above covers the task")
    r = run("launch", str(job), "-t", "skypilot", "--gpus-per-node", "1", "--gpu", "L4", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    task = sky.Task.from_yaml(str(tmp_path / "task.yaml"))
    assert task.num_nodes == 1


def test_kubeflow_manifest_validates_against_the_crd(job: Path, tmp_path: Path) -> None:
    r = run(
        "launch",
        str(job),
        "-t",
        "kubeflow",
        "--nodes",
        "3",
        "--gpus-per-node",
        "4",
        "--image",
        "reg/me/x:1",
        "--pvc",
        "shared-ckpt",
        "--nccl-ifname",
        "eth0",
        "--out",
        str(tmp_path / "k"),
    )
    assert r.returncode == 0, r.stderr
    m = yaml.safe_load((tmp_path / "k" / "paddlejob.yaml").read_text())
    assert validate_paddlejob(m) == []
    specs = m["spec"]["paddleReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    pod = specs["Worker"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "reg/me/x:1" and c["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"} in c["env"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "shared-ckpt"}} in pod["volumes"]
    assert specs["Worker"]["restartPolicy"] == "ExitCode"
    script = c["command"][2]
    _bash_syntax_ok(script)
    assert "--nnodes" not in script and "--devices 0,1,2,3" in script  # PADDLE_NNODES/PADDLE_MASTER from the operator
    assert _spec_in(script).batch_size == 16 and _spec_in(script).devices == 12  # 3 pods x 4 GPUs


@pytest.mark.slow
def test_local_target_runs_a_two_node_job(job: Path, tmp_path: Path) -> None:
    """The two generated node scripts, started side by side on this machine (CPU, gloo), train one job."""
    port = _free_port()
    r = run(
        "launch",
        "job.yaml",
        "-t",
        "local",
        "--nodes",
        "2",
        "--gpus-per-node",
        "0",
        "--master",
        f"127.0.0.1:{port}",
        "--out",
        "launch",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"], GLOG_minloglevel="2")
    procs = [
        subprocess.Popen(
            ["bash", f"launch/launch-node{i}.sh"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in (0, 1)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    s = json.loads((tmp_path / "runs" / "mn" / "summary.json").read_text())
    assert (s["devices"], s["global_batch"], s["steps"]) == (2, 32, 12)
    assert sorted(p.name for p in (tmp_path / "runs" / "mn" / "checkpoints").iterdir()) == [
        "step-00000005",
        "step-00000010",
        "step-00000012",
    ]


@pytest.mark.slow
def test_ssh_target_runs_a_two_node_job_through_a_stand_in_ssh(job: Path, tmp_path: Path) -> None:
    """`ssh` replaced by a script that runs the remote command here: checks the script's quoting, the spec copy and
    the rendezvous end to end."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text('#!/usr/bin/env bash\n[ "$1" = -n ] && shift\nshift\nexec bash -c "$1"\n')
    (fake / "ssh").chmod(0o755)
    work = tmp_path / "remote"
    port = _free_port()
    r = run(
        "launch",
        str(job),
        "-t",
        "ssh",
        "--nodes",
        "2",
        "--gpus-per-node",
        "0",
        "--hosts",
        "127.0.0.1,localhost",
        "--port",
        str(port),
        "--workdir",
        str(work),
        "--out",
        str(tmp_path / "out"),
    )
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, PATH=os.pathsep.join([str(fake), BIN, os.environ["PATH"]]), GLOG_minloglevel="2")
    p = subprocess.run(
        ["bash", str(tmp_path / "out" / "launch-ssh.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    logs = "\n".join((tmp_path / "out" / f"node{i}.log").read_text() for i in (0, 1))
    assert p.returncode == 0, p.stdout + p.stderr + logs
    assert (work / "job.yaml").read_text() == (tmp_path / "out" / "job.yaml").read_text()
    s = json.loads((work / "runs" / "mn" / "summary.json").read_text())
    assert (s["devices"], s["global_batch"], s["steps"]) == (2, 32, 12)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["-t", "slurm"], "must be one of local, ssh, skypilot, kubeflow"),
        (["-t", "local", "--nodes", "2"], "need `--master HOST:PORT`"),
        (["-t", "local", "--nodes", "2", "--master", "10.0.0.1"], "must be HOST:PORT"),
        (["-t", "ssh", "--nodes", "2", "--hosts", "a"], "names 1 host(s) for `--nodes 2`"),
        (["-t", "ssh", "--hosts", "a;rm -rf /"], "is not [user@]host"),
        (["-t", "ssh", "--hosts=-Eowned.log"], "is not [user@]host"),
        (["-t", "ssh", "--nodes", "2", "--hosts", "a,,b"], "is not [user@]host"),
        (["-t", "local", "--nodes", "2", "--master", "10.0.0.1:0"], "port 1-65535"),
        (["-t", "local", "--hosts", "a", "--gpu", "L4"], "`--hosts`, `--gpu` do not apply to `--target local`"),
        (["-t", "local", "--run-dir", "runs/x\ntouch /tmp/pwned"], "contains a control character"),
        (["-t", "kubeflow", "--image", ""], "`--image` is empty"),
        (["-t", "kubeflow", "--pvc", "My_PVC!"], "is not a PersistentVolumeClaim name"),
        (["-t", "skypilot"], "needs `--gpu NAME`"),
        (["-t", "skypilot", "--gpu", "H900"], "Unknown GPU"),
        (["-t", "skypilot", "--gpu", "L4", "--bucket", "my-bucket"], "bucket URL"),
        (["-t", "kubeflow", "--name", "Bad_Name"], "lower-case"),
        (["-t", "local", "--nodes", "0"], "`--nodes` must be 1..1024"),
    ],
)
def test_bad_launch_input_exits_2_and_writes_nothing(job: Path, tmp_path: Path, args: list, needle: str) -> None:
    r = run("launch", str(job), *args, "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_skypilot_bucket_names_differ_between_launches_and_files_are_readable(job: Path, tmp_path: Path) -> None:
    names = []
    for d in ("a", "b"):
        r = run("launch", str(job), "-t", "skypilot", "--gpu", "L4", "--out", str(tmp_path / d))
        assert r.returncode == 0, r.stderr
        task = yaml.safe_load((tmp_path / d / "task.yaml").read_text())
        names.append(task["file_mounts"]["/checkpoints"]["name"])
        mask = os.umask(0)
        os.umask(mask)
        assert (tmp_path / d / "task.yaml").stat().st_mode & 0o777 == 0o666 & ~mask  # as open() would, not 0600
    assert all(re.fullmatch(r"job-ckpt-[0-9a-f]{8}", n) for n in names) and names[0] != names[1]
