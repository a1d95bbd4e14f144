"""``paddlefit launch``: write what runs a job spec on N nodes: per-node launch commands, an ssh script, a SkyPilot
task or a Kubeflow PaddleJob."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from paddlefit.cli.common import err, handle_errors, shown


@handle_errors
def launch_command(
    config: Path = typer.Argument(..., help="Job spec YAML."),
    target: str = typer.Option(..., "--target", "-t", help="local | ssh | skypilot | kubeflow"),
    nodes: int = typer.Option(1, "--nodes", help="Nodes (machines or pods)."),
    gpus_per_node: int = typer.Option(1, "--gpus-per-node", help="GPUs per node (0: one CPU process per node)."),
    out_dir: Path = typer.Option(Path("launch"), "--out", help="Directory for the files written."),
    name: str = typer.Option(
        None, "--name", help="Job name: lower case, digits, '-' (default: from the spec file name)."
    ),
    master: str = typer.Option(None, "--master", help="local: node 0's HOST:PORT that every node can reach."),
    hosts: str = typer.Option(None, "--hosts", help="ssh: comma-separated hosts, node 0 first (user@host ok)."),
    port: int = typer.Option(8090, "--port", help="ssh/skypilot: rendezvous TCP port on node 0."),
    workdir: str = typer.Option(
        None, "--workdir", help="ssh: directory on every host (default: this directory's path)."
    ),
    run_dir: str = typer.Option(
        None, "--run-dir", help="local/ssh: run directory on shared storage (default: the spec's run_dir)."
    ),
    gpu: str = typer.Option(
        None,
        "--gpu",
        help="skypilot: GPU (catalog name such as A100-SXM4-80GB or SkyPilot's A100-80GB); see `paddlefit cost`.",
    ),
    spot: bool = typer.Option(False, "--spot", help="skypilot: spot instances (managed recovery resumes the run)."),
    bucket: str = typer.Option(
        None,
        "--bucket",
        help="skypilot: checkpoint bucket URL (s3://b/p, gs://...) "
        "(default: a new bucket named <name>-ckpt-<8 random hex>, kept in the file).",
    ),
    cloud: str = typer.Option(None, "--cloud", help="skypilot: pin a cloud (aws, gcp, azure, lambda)."),
    setup: str = typer.Option(
        "pip install -r requirements.txt",
        "--setup",
        help="skypilot: setup commands on each "
        "node, run in the synced workdir (the directory you launch from): install paddlefit, "
        "the Paddle GPU wheel and your code's dependencies.",
    ),
    image: str = typer.Option(
        None,
        "--image",
        help="kubeflow (and skypilot image_id): the container image, e.g. built from `paddlefit image`.",
    ),
    pvc: str = typer.Option(
        None,
        "--pvc",
        help="kubeflow: PersistentVolumeClaim for checkpoints "
        "(default: <name>-checkpoints; ReadWriteMany for several nodes).",
    ),
    shm_gib: int = typer.Option(8, "--shm-gib", help="kubeflow: /dev/shm size per pod, GiB."),
    from_snapshot: Path = typer.Option(
        None,
        "--from-snapshot",
        help="A node's `paddlefit doctor --snapshot` file: its NCCL fixes go into the environment.",
    ),
    nccl_ifname: str = typer.Option(None, "--nccl-ifname", help="NCCL_SOCKET_IFNAME for the nodes."),
    no_ib: bool = typer.Option(False, "--no-ib", help="NCCL_IB_DISABLE=1 (nodes without InfiniBand/RoCE)."),
    env: list[str] = typer.Option(
        None,
        "--env",
        help="A variable for the nodes, repeatable: NAME=value, or NAME "
        "to pass it by reference (read where the job starts, never written into the "
        "files; the way to pass a secret: a secret-looking NAME=value is refused).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print {target, files, commands} as JSON."),
) -> None:
    """Write what runs CONFIG on N nodes with Paddle's own launcher (`python -m paddle.distributed.launch` with
    --nnodes/--master/--rank/--devices on every node, paddlefit's worker, --resume auto).

    local: OUT/launch-node<r>.sh per node. ssh: OUT/launch-ssh.sh starts every node from here.
    skypilot: OUT/task.yaml (`sky jobs launch OUT/task.yaml`; checkpoints on a bucket, preemptions recovered).
    kubeflow: OUT/paddlejob.yaml (`kubectl apply -f`; Master/Worker pods, checkpoints on a PVC, restartPolicy
    ExitCode retries a SIGTERM-stopped run). Every file is validated before it is written.

    Examples:
      paddlefit launch job.yaml -t local --nodes 2 --gpus-per-node 8 --master 10.0.0.1:8090
      paddlefit launch job.yaml -t ssh --nodes 2 --gpus-per-node 4 --hosts gpu1,gpu2 --no-ib
      paddlefit launch job.yaml -t skypilot --nodes 2 --gpus-per-node 8 --gpu A100-SXM4-80GB --spot
      paddlefit launch job.yaml -t kubeflow --nodes 4 --gpus-per-node 8 --image registry/me/ocr:1
      paddlefit launch job.yaml -t skypilot --gpu L4 --env HF_TOKEN --env WANDB_MODE=offline
    """
    from paddlefit.deploy.targets import LaunchRequest, launch

    result = launch(
        LaunchRequest(
            config=config,
            target=target,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            out_dir=out_dir,
            name=name,
            master=master,
            hosts=hosts,
            port=port,
            workdir=workdir,
            run_dir=run_dir,
            gpu=gpu,
            spot=spot,
            bucket=bucket,
            cloud=cloud,
            setup=setup,
            image=image,
            pvc=pvc,
            shm_gib=shm_gib,
            from_snapshot=from_snapshot,
            nccl_ifname=nccl_ifname,
            no_ib=no_ib,
            env=list(env or []),
        )
    )
    for note in result.notes:
        err.print(f"[yellow]{shown(note)}[/]")
    if json_out:
        print(
            json.dumps(
                {"target": result.target, "files": [str(f) for f in result.files], "commands": result.commands},
                indent=2,
            )
        )
        return
    err.print(f"wrote {', '.join(shown(str(f)) for f in result.files)}", highlight=False)
    for c in result.commands:
        print(c)
