"""``paddlefit launch``: write what runs a job spec on N nodes: per-node launch commands, an ssh script, a SkyPilot
task or a Kubeflow PaddleJob."""

from __future__ import annotations

import json

from paddlefit import options
from paddlefit.cli.common import err, shown
from paddlefit.cli.params import Args, command


@command(
    options.CONFIG_ARG_LAUNCH,
    options.TARGET,
    options.NODES,
    options.GPUS_PER_NODE_LAUNCH,
    options.OUT_LAUNCH,
    options.NAME,
    options.MASTER,
    options.HOSTS,
    options.PORT,
    options.WORKDIR,
    options.RUN_DIR_LAUNCH,
    options.GPU_LAUNCH,
    options.SPOT_LAUNCH,
    options.BUCKET,
    options.CLOUD_LAUNCH,
    options.SETUP,
    options.IMAGE,
    options.PVC,
    options.SHM_GIB,
    options.FROM_SNAPSHOT_LAUNCH,
    options.NCCL_IFNAME,
    options.NO_IB,
    options.ENV_LAUNCH,
    options.JSON_LAUNCH,
)
def launch_command(args: Args) -> None:
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
            config=args.config,
            target=args.target,
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            out_dir=args.out_dir,
            name=args.name,
            master=args.master,
            hosts=args.hosts,
            port=args.port,
            workdir=args.workdir,
            run_dir=args.run_dir,
            gpu=args.gpu,
            spot=args.spot,
            bucket=args.bucket,
            cloud=args.cloud,
            setup=args.setup,
            image=args.image,
            pvc=args.pvc,
            shm_gib=args.shm_gib,
            from_snapshot=args.from_snapshot,
            nccl_ifname=args.nccl_ifname,
            no_ib=args.no_ib,
            env=list(args.env or []),
        )
    )
    for note in result.notes:
        err.print(f"[yellow]{shown(note)}[/]")
    if args.json_out:
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
