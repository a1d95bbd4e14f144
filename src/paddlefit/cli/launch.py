"""``paddlefit launch``: write what runs a job spec on N nodes: per-node launch commands, an ssh script, a SkyPilot
task or a Kubeflow PaddleJob."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import typer
import yaml
from rich.markup import escape

from paddlefit.cli.common import err, fail, handle_errors
from paddlefit.errors import PaddlefitError
from paddlefit.fileio import atomic_write_many, current_umask
from paddlefit.spec import load_job_spec

TARGETS = ("local", "ssh", "skypilot", "kubeflow")


def nccl_env(snapshot: Path | None, ifname: str | None, no_ib: bool) -> dict[str, str]:
    """NCCL settings for the nodes: doctor's fixes (checks PF112 NCCL_SOCKET_IFNAME, PF113 NCCL_IB_DISABLE) on a node's
    ``paddlefit doctor --snapshot`` file, then the explicit options (which win)."""
    env: dict[str, str] = {}
    if snapshot is not None:
        from paddlefit.diagnose.checks import check_nccl_ib, check_nccl_ifname
        from paddlefit.diagnose.snapshot import load_snapshot

        snap = load_snapshot(snapshot, "--from-snapshot")
        for f in check_nccl_ifname(snap) + check_nccl_ib(snap):
            m = re.fullmatch(r"export (NCCL_[A-Z_]+)=(\S+)", f.fix.strip())
            if m:
                env[m.group(1)] = m.group(2)
    if ifname:
        env["NCCL_SOCKET_IFNAME"] = ifname
    if no_ib:
        env["NCCL_IB_DISABLE"] = "1"
    return env


@handle_errors
def launch_command(
    config: Path = typer.Argument(..., help="Job spec YAML."),
    target: str = typer.Option(..., "--target", "-t", help="local | ssh | skypilot | kubeflow"),
    nodes: int = typer.Option(1, "--nodes", help="Nodes (machines or pods)."),
    gpus_per_node: int = typer.Option(1, "--gpus-per-node", help="GPUs per node (0: one CPU process per node)."),
    out_dir: Path = typer.Option(Path("launch"), "--out", help="Directory for the files written."),
    name: str = typer.Option(None, "--name", help="Job name: lower case, digits, '-' "
                            "(default: from the spec file name)."),
    master: str = typer.Option(None, "--master", help="local: node 0's HOST:PORT that every node can reach."),
    hosts: str = typer.Option(None, "--hosts", help="ssh: comma-separated hosts, node 0 first (user@host ok)."),
    port: int = typer.Option(8090, "--port", help="ssh/skypilot: rendezvous TCP port on node 0."),
    workdir: str = typer.Option(None, "--workdir", help="ssh: directory on every host "
                               "(default: this directory's path)."),
    run_dir: str = typer.Option(None, "--run-dir", help="local/ssh: run directory on shared "
                               "storage (default: the spec's run_dir)."),
    gpu: str = typer.Option(None, "--gpu", help="skypilot: GPU (catalog name such as A100-SXM4-80GB or SkyPilot's "
                            "A100-80GB); see `paddlefit cost`."),
    spot: bool = typer.Option(False, "--spot", help="skypilot: spot instances (managed recovery resumes the run)."),
    bucket: str = typer.Option(None, "--bucket", help="skypilot: checkpoint bucket URL (s3://b/p, gs://...) "
                               "(default: a new bucket named <name>-checkpoints)."),
    cloud: str = typer.Option(None, "--cloud", help="skypilot: pin a cloud (aws, gcp, azure, lambda)."),
    setup: str = typer.Option("pip install -r requirements.txt", "--setup", help="skypilot: setup commands on each "
                              "node, run in the synced workdir (the directory you launch from): install paddlefit, "
                              "the Paddle GPU wheel and your code's dependencies."),
    image: str = typer.Option(None, "--image", help="kubeflow (and skypilot image_id): the container image, "
                              "e.g. built from `paddlefit image`."),
    pvc: str = typer.Option(None, "--pvc", help="kubeflow: PersistentVolumeClaim for checkpoints "
                            "(default: <name>-checkpoints; ReadWriteMany for several nodes)."),
    shm_gib: int = typer.Option(8, "--shm-gib", help="kubeflow: /dev/shm size per pod, GiB."),
    from_snapshot: Path = typer.Option(None, "--from-snapshot", help="A node's `paddlefit doctor --snapshot` file: "
                                       "its NCCL fixes go into the environment."),
    nccl_ifname: str = typer.Option(None, "--nccl-ifname", help="NCCL_SOCKET_IFNAME for the nodes."),
    no_ib: bool = typer.Option(False, "--no-ib", help="NCCL_IB_DISABLE=1 (nodes without InfiniBand/RoCE)."),
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
    """
    from paddlefit.deploy.launch import MAX_NODES, NodeLaunch, local_scripts, parse_hosts, parse_master, ssh_script

    if target not in TARGETS:
        raise fail(f"`--target {target}` must be one of {', '.join(TARGETS)}.")
    if not 1 <= nodes <= MAX_NODES or gpus_per_node < 0 or gpus_per_node > 64:
        raise fail(f"`--nodes` must be 1..{MAX_NODES} and `--gpus-per-node` 0..64 (got {nodes}, {gpus_per_node}).")
    if not 1 <= port <= 65535:
        raise fail(f"`--port {port}` is not a TCP port (1-65535).")
    given = {"--master": master, "--hosts": hosts, "--workdir": workdir, "--run-dir": run_dir, "--gpu": gpu,
             "--spot": spot or None, "--bucket": bucket, "--cloud": cloud, "--pvc": pvc, "--name": name,
             "--image": image, "--out": str(out_dir), "--nccl-ifname": nccl_ifname}  # fmt: skip
    for opt, value in given.items():
        if isinstance(value, str) and not value.strip():
            raise fail(f"`{opt}` is empty; give a value or leave the option out.")
    applies = {"--master": ("local",), "--hosts": ("ssh",), "--workdir": ("ssh",), "--run-dir": ("local", "ssh"),
               "--gpu": ("skypilot",), "--spot": ("skypilot",), "--bucket": ("skypilot",), "--cloud": ("skypilot",),
               "--pvc": ("kubeflow",), "--image": ("skypilot", "kubeflow")}  # fmt: skip
    stray = [opt for opt, targets in applies.items() if given[opt] is not None and target not in targets]
    if stray:
        many = len(stray) > 1
        raise fail(f"{', '.join(f'`{o}`' for o in stray)} {'do' if many else 'does'} not apply to `--target {target}`; "
                   f"leave {'them' if many else 'it'} out.")  # fmt: skip
    if nccl_ifname is not None and not re.fullmatch(r"\^?=?[A-Za-z0-9_.:-]+(,\^?=?[A-Za-z0-9_.:-]+)*", nccl_ifname):
        raise fail(f"`--nccl-ifname {nccl_ifname}` must be interface names or prefixes such as eth0 or ^lo,docker "
                   "(NCCL_SOCKET_IFNAME syntax).")  # fmt: skip
    spec = load_job_spec(config, option="CONFIG")
    if spec.data.train is None or (spec.epochs is None and spec.max_steps is None):
        raise fail(f"CONFIG {config}: `train` needs `data.train` and `epochs` or `max_steps`; every node would "
                   "stop on this spec. Add them first.")  # fmt: skip
    if name is None:
        name = re.sub(r"[^a-z0-9-]+", "-", config.stem.lower()).strip("-")[:42].strip("-") or "paddlefit-job"
    elif not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?", name):
        raise fail(f"`--name {name}` must be lower-case letters, digits and '-' (at most 42 characters).")
    spec = spec.model_copy(update={"devices": nodes * max(gpus_per_node, 1)})  # the job's world size
    spec_text = yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    env = nccl_env(from_snapshot, nccl_ifname, no_ib) if gpus_per_node else {}
    files: dict[str, str] = {}
    commands: list[str] = []
    if target in ("local", "ssh"):
        rd = run_dir or spec.run_dir
        n = NodeLaunch(spec_path="job.yaml" if target == "ssh" else str(config), run_dir=rd, nodes=nodes,
                       gpus_per_node=gpus_per_node, job_id=name, env=env)  # fmt: skip
        if target == "local":
            files = local_scripts(n, parse_master(master) if master is not None else None)
            commands = [f"bash {out_dir / f}" for f in files]
        else:
            if not hosts:
                raise fail("`--target ssh` needs `--hosts host0,host1,...` (node 0 first).")
            files = {"job.yaml": spec_text,
                     "launch-ssh.sh": ssh_script(n, parse_hosts(hosts), port, workdir or str(Path.cwd()))}
            commands = [f"bash {out_dir / 'launch-ssh.sh'}"]
    elif target == "skypilot":
        files = {"task.yaml": _skypilot(name, gpu, nodes, gpus_per_node, spot, spec_text, bucket, setup, image, cloud,
                                        env, port)}  # fmt: skip
        commands = [f"sky jobs launch {out_dir / 'task.yaml'}" if spot else f"sky launch {out_dir / 'task.yaml'}"]
    else:
        files = {"paddlejob.yaml": _kubeflow(name, nodes, gpus_per_node, spec_text, image, pvc, shm_gib, env)}
        commands = [f"kubectl apply -f {out_dir / 'paddlejob.yaml'}"]
    _write(out_dir, files)
    if json_out:
        print(json.dumps({"target": target, "files": [str(out_dir / f) for f in files], "commands": commands},
                         indent=2))  # fmt: skip
        return
    err.print(f"wrote {', '.join(escape(str(out_dir / f)) for f in files)}", highlight=False)
    for c in commands:
        print(c)


def _write(out_dir: Path, files: dict[str, str]) -> None:
    """All files or none (temp files first, then renames); scripts made executable."""
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise fail(f"`--out {out_dir}` is a file or a symlink; give a directory.")
    for f in files:
        if (out_dir / f).is_dir():
            raise fail(f"`--out {out_dir}` holds a directory named {f}; remove it or choose another `--out`.")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"`--out {out_dir}` cannot be created ({exc.strerror or exc}).") from None
    for path in atomic_write_many({out_dir / f: text for f, text in files.items()}, option="--out"):
        if path.suffix == ".sh":
            path.chmod(path.stat().st_mode | 0o111 & ~current_umask())


def _skypilot(name: str, gpu: str | None, nodes: int, gpus_per_node: int, spot: bool, spec_text: str,
              bucket: str | None, setup: str, image: str | None, cloud: str | None, env: dict[str, str],
              port: int) -> str:  # fmt: skip
    from paddlefit.catalog.gpus import get_gpu
    from paddlefit.deploy.launch import SKYPILOT_ACCELERATORS, SkyPilotRequest, dump_yaml, render_skypilot

    if not gpu:
        raise PaddlefitError("`--target skypilot` needs `--gpu NAME` (e.g. A100-SXM4-80GB or L4; `paddlefit cost` "
                             "ranks them).")  # fmt: skip
    if gpus_per_node < 1:
        raise PaddlefitError("`--target skypilot` needs `--gpus-per-node` >= 1.")
    if bucket is not None and not re.fullmatch(r"(s3|gs|r2|cos|oci)://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/[\w./-]*)?",
                                               bucket):  # fmt: skip
        raise PaddlefitError(f"`--bucket {bucket}` must be a bucket URL such as s3://my-bucket/ckpt or gs://b/p "
                             "(lower-case bucket name, then an optional path).")  # fmt: skip
    if image is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", image):
        raise PaddlefitError(f"`--image {image}` is not an image reference such as registry/me/train:1.")
    sky_names = set(SKYPILOT_ACCELERATORS.values())
    if gpu in sky_names:
        acc = gpu
    else:
        g = get_gpu(gpu)
        acc = SKYPILOT_ACCELERATORS.get(g.name, g.name)
    # bucket names are global per cloud: a random suffix keeps two users' "train" jobs apart; the task file keeps it,
    # so a recovered or relaunched job finds its checkpoints
    bucket_name = f"{name}-ckpt-{secrets.token_hex(4)}"
    task = render_skypilot(SkyPilotRequest(
        name=name, accelerator=acc, nodes=nodes, gpus_per_node=gpus_per_node, spot=spot, spec_text=spec_text,
        bucket=bucket, bucket_name=bucket_name, setup=setup, image_id=f"docker:{image}" if image else None,
        cloud=cloud, env=env, port=port))  # fmt: skip
    head = (f"# SkyPilot task written by paddlefit launch: {nodes} node(s) x {gpus_per_node} {acc}"
            f"{', spot' if spot else ''}.\n# Run from your project directory (synced as workdir; setup installs from "
            "it): sky jobs launch <this file>.\n# Managed jobs replace preempted nodes and the run resumes from the "
            "newest checkpoint on /checkpoints\n# (a bucket: a directory rename there is not atomic, so resume "
            "verifies each checkpoint's sha256 manifest and skips incomplete ones).\n")  # fmt: skip
    return head + dump_yaml(task)


def _kubeflow(name: str, nodes: int, gpus_per_node: int, spec_text: str, image: str | None, pvc: str | None,
              shm_gib: int, env: dict[str, str]) -> str:  # fmt: skip
    from paddlefit.deploy.docker import choose_build
    from paddlefit.deploy.kubeflow import PaddleJobRequest, render_paddlejob
    from paddlefit.deploy.launch import NodeLaunch, dump_yaml, node_command, spec_heredoc

    if not 1 <= shm_gib <= 4096:
        raise PaddlefitError(f"`--shm-gib` must be 1..4096 (got {shm_gib}).")
    if image is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", image):
        raise PaddlefitError(f"`--image {image}` is not an image reference such as registry/me/train:1.")
    if pvc is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", pvc):
        raise PaddlefitError(f"`--pvc {pvc}` is not a PersistentVolumeClaim name (lower case, digits, '-', '.').")
    if image is None:
        image = choose_build(gpu=gpus_per_node > 0).docker_image
        err.print(f"[yellow]--image not given: using the Paddle base image {image}, which lacks paddlefit and your "
                  "code; build one with `paddlefit image` and pass --image.[/]")  # fmt: skip
    claim = pvc or f"{name}-checkpoints"
    n = NodeLaunch(spec_path="/tmp/paddlefit-job.yaml", run_dir=f"/ckpt/{name}", nodes=nodes,
                   gpus_per_node=gpus_per_node, job_id=name, log_dir="/tmp/paddlefit-logs")  # fmt: skip
    # --nnodes/--master/--rank come from PADDLE_NNODES/PADDLE_MASTER set by the training-operator
    script = "set -eu\n" + spec_heredoc(spec_text, n.spec_path) + node_command(n, None, None, from_env=True) + "\n"
    manifest = render_paddlejob(PaddleJobRequest(
        name=name, image=image, command=["bash", "-c", script], nodes=nodes, gpus_per_node=gpus_per_node,
        shm_gib=shm_gib, checkpoint_claim=claim, checkpoint_mount="/ckpt", restart_policy="ExitCode", env=env))
    head = (f"# Kubeflow PaddleJob written by paddlefit launch: {nodes} pod(s) x {gpus_per_node} GPU(s).\n"
            f"# Needs the PersistentVolumeClaim {claim!r} (ReadWriteMany when pods are on several nodes).\n")
    return head + dump_yaml(manifest)
