"""``paddlefit launch`` without the rendering: a job spec and a target -> the files that run it on N nodes,
validated and written, and the commands that start them.

Targets: ``local`` (``launch-node<r>.sh`` per node), ``ssh`` (``launch-ssh.sh`` starts every node from here),
``skypilot`` (``task.yaml``; checkpoints on a bucket, preemptions recovered) and ``kubeflow`` (``paddlejob.yaml``;
Master/Worker pods, checkpoints on a PVC). The per-node command is :func:`paddlefit.deploy.launch.node_command`.

Example:
    >>> req = LaunchRequest(config=Path("job.yaml"), target="local", nodes=2, master="10.0.0.1:8090")
    >>> r = launch(req)  # doctest: +SKIP
    >>> r.commands  # doctest: +SKIP
    ['bash launch/launch-node0.sh', 'bash launch/launch-node1.sh']
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from pydantic import ConfigDict, Field

from paddlefit import options
from paddlefit.catalog.published import skypilot_accelerator, skypilot_names
from paddlefit.deploy.launch import (
    DEFAULT_PORT,
    NodeLaunch,
    SkyPilotRequest,
    dump_yaml,
    local_scripts,
    node_command,
    parse_hosts,
    parse_master,
    render_skypilot,
    skypilot_env_args,
    spec_heredoc,
    ssh_script,
)
from paddlefit.errors import PaddlefitError
from paddlefit.process.secretenv import parse_env_options, refuse_credentials_in
from paddlefit.validation import RequestModel

Target = Literal["local", "ssh", "skypilot", "kubeflow"]
TARGETS: tuple[str, ...] = get_args(Target)
#: Options that apply to some targets only (a stray one is refused, not ignored).
TARGET_OPTIONS = {
    "--master": ("local",),
    "--hosts": ("ssh",),
    "--workdir": ("ssh",),
    "--run-dir": ("local", "ssh"),
    "--gpu": ("skypilot",),
    "--spot": ("skypilot",),
    "--bucket": ("skypilot",),
    "--cloud": ("skypilot",),
    "--pvc": ("kubeflow",),
    "--image": ("skypilot", "kubeflow"),
    "--port": ("ssh", "skypilot"),
    "--setup": ("skypilot",),
    "--shm-gib": ("kubeflow",),
}
_IMAGE = r"[A-Za-z0-9][A-Za-z0-9._/:@-]*"


class LaunchRequest(RequestModel):
    """What to write (the ``paddlefit launch`` options; see ``paddlefit launch --help`` for each).

    Raises (when built):
        PaddlefitError: a field of the wrong type or out of range, named by its option (``--nodes``).
    """

    model_config = ConfigDict(frozen=True)

    config: Path = Field(
        description="The job spec YAML (needs ``data.train`` and ``epochs`` or ``max_steps``).",
        json_schema_extra=options.CONFIG_ARG.field(),
    )
    target: Target = Field(
        description="Where the job runs: one of :data:`TARGETS`.", json_schema_extra=options.TARGET.field()
    )
    nodes: int = Field(
        options.NODES.default,
        description="Machines or pods.",
        **options.NODES.bounds,
        json_schema_extra=options.NODES.field(),
    )
    gpus_per_node: int = Field(
        1,
        description="GPUs per node (0: one CPU process per node).",
        **options.GPUS_PER_NODE_LAUNCH.bounds,
        json_schema_extra=options.GPUS_PER_NODE_LAUNCH.field(),
    )
    out_dir: Path = Field(
        Path("launch"), description="Directory for the files written.", json_schema_extra=options.OUT.field()
    )
    name: str | None = Field(
        None, description="Job name (None: from the spec file name).", json_schema_extra=options.NAME.field()
    )
    master: str | None = Field(
        None, description="local: node 0's ``HOST:PORT``.", json_schema_extra=options.MASTER.field()
    )
    hosts: str | None = Field(None, description="ssh: ``h0,h1,...``.", json_schema_extra=options.HOSTS.field())
    port: int | None = Field(
        None,
        description="ssh/skypilot: rendezvous TCP port on node 0 (None: "
        ":data:`~paddlefit.deploy.launch.DEFAULT_PORT`).",
        **options.PORT.bounds,
        json_schema_extra=options.PORT.field(),
    )
    workdir: str | None = Field(
        None,
        description="ssh: directory on every host (None: this directory).",
        json_schema_extra=options.WORKDIR.field(),
    )
    run_dir: str | None = Field(
        None, description="local/ssh: run directory.", json_schema_extra=options.RUN_DIR_LAUNCH.field()
    )
    gpu: str | None = Field(None, description="skypilot: the GPU.", json_schema_extra=options.GPU_LAUNCH.field())
    spot: bool = Field(False, description="skypilot: spot instances.", json_schema_extra=options.SPOT_LAUNCH.field())
    bucket: str | None = Field(
        None, description="skypilot: checkpoint bucket URL.", json_schema_extra=options.BUCKET.field()
    )
    cloud: str | None = Field(
        None, description="skypilot: pin a cloud.", json_schema_extra=options.CLOUD_LAUNCH.field()
    )
    setup: str | None = Field(
        None,
        description="skypilot: setup commands on each node (None: the SkyPilot task's default).",
        json_schema_extra=options.SETUP.field(),
    )
    image: str | None = Field(
        None, description="skypilot/kubeflow: the container image.", json_schema_extra=options.IMAGE.field()
    )
    pvc: str | None = Field(
        None, description="kubeflow: PersistentVolumeClaim for checkpoints.", json_schema_extra=options.PVC.field()
    )
    shm_gib: int | None = Field(
        None,
        **options.SHM_GIB.bounds,
        description="kubeflow: ``/dev/shm`` per pod, GiB (None: the PaddleJob's default).",
        json_schema_extra=options.SHM_GIB.field(),
    )
    from_snapshot: Path | None = Field(
        None,
        description="A node's ``paddlefit doctor --snapshot`` file: doctor's NCCL fixes go into the environment.",
        json_schema_extra=options.FROM_SNAPSHOT_LAUNCH.field(),
    )
    nccl_ifname: str | None = Field(
        None,
        description="``NCCL_SOCKET_IFNAME`` (wins over the snapshot's).",
        json_schema_extra=options.NCCL_IFNAME.field(),
    )
    no_ib: bool = Field(
        False, description="``NCCL_IB_DISABLE=1`` (wins over the snapshot's).", json_schema_extra=options.NO_IB.field()
    )
    env: list[str] = Field(
        default_factory=list,
        description="``--env`` options, ``NAME=value`` (by value; a "
        "secret-looking one is refused) or ``NAME`` (by reference: the value is read where the "
        "job starts, never written; :mod:`paddlefit.process.secretenv`). They win over the snapshot's NCCL "
        "fixes; naming a variable ``--nccl-ifname``/``--no-ib`` sets is refused.",
        json_schema_extra=options.ENV.field(),
    )


@dataclass(frozen=True)
class LaunchResult:
    """The files written (in order), the commands that start the job, and notes for the user (warnings)."""

    target: str
    files: list[Path]
    commands: list[str]
    notes: list[str] = field(default_factory=list)


def nccl_env(snapshot: Path | None, ifname: str | None, no_ib: bool) -> dict[str, str]:
    """NCCL settings for the nodes: the ``NCCL_*`` variables doctor's fixes set (``Finding.env`` of checks PF112
    NCCL_SOCKET_IFNAME and PF113 NCCL_IB_DISABLE) on a node's ``paddlefit doctor --snapshot`` file, then the
    explicit options (which win). Values with whitespace are dropped (not a NCCL setting)."""
    env: dict[str, str] = {}
    if snapshot is not None:
        from paddlefit.diagnose import fix_env, load_snapshot, run_checks

        fixes = fix_env(run_checks(load_snapshot(snapshot, "--from-snapshot")), prefix="NCCL_")
        env.update({k: v for k, v in fixes.items() if v and not any(c.isspace() for c in v)})
    if ifname:
        env["NCCL_SOCKET_IFNAME"] = ifname
    if no_ib:
        env["NCCL_IB_DISABLE"] = "1"
    return env


def _port(req: LaunchRequest) -> int:
    """Node 0's rendezvous port: ``--port``, else :data:`~paddlefit.deploy.launch.DEFAULT_PORT`."""
    return req.port if req.port is not None else DEFAULT_PORT


def check_request(req: LaunchRequest) -> None:
    """The checks that need no file and span options (target, sizes and port are the request's fields): empty and
    stray options, ``--nccl-ifname`` syntax.

    Raises:
        PaddlefitError: the first problem, naming the option.
    """
    given = {
        "--master": req.master,
        "--hosts": req.hosts,
        "--workdir": req.workdir,
        "--run-dir": req.run_dir,
        "--gpu": req.gpu,
        "--spot": req.spot or None,
        "--bucket": req.bucket,
        "--cloud": req.cloud,
        "--pvc": req.pvc,
        "--name": req.name,
        "--image": req.image,
        "--out": str(req.out_dir),
        "--nccl-ifname": req.nccl_ifname,
        "--port": req.port,
        "--setup": req.setup,
        "--shm-gib": req.shm_gib,
    }
    for opt, value in given.items():
        if opt != "--setup" and isinstance(value, str) and not value.strip():  # an empty setup runs nothing
            raise PaddlefitError(f"`{opt}` is empty; give a value or leave the option out.")
    stray = [opt for opt, targets in TARGET_OPTIONS.items() if given[opt] is not None and req.target not in targets]
    if stray:
        many = len(stray) > 1
        raise PaddlefitError(
            f"{', '.join(f'`{o}`' for o in stray)} {'do' if many else 'does'} not apply to "
            f"`--target {req.target}`; leave {'them' if many else 'it'} out."
        )
    nccl = [
        o
        for o, v in (("--no-ib", req.no_ib), ("--nccl-ifname", req.nccl_ifname), ("--from-snapshot", req.from_snapshot))
        if v
    ]
    if req.gpus_per_node == 0 and nccl:
        raise PaddlefitError(
            f"{', '.join(f'`{o}`' for o in nccl)} {'sets' if len(nccl) == 1 else 'set'} NCCL for GPU nodes, and "
            "`--gpus-per-node 0` runs CPU processes (no NCCL); leave "
            f"{'it' if len(nccl) == 1 else 'them'} out or give the GPUs per node."
        )
    ifname = req.nccl_ifname
    if ifname is not None and not re.fullmatch(r"\^?=?[A-Za-z0-9_.:-]+(,\^?=?[A-Za-z0-9_.:-]+)*", ifname):
        raise PaddlefitError(
            f"`--nccl-ifname {ifname}` must be interface names or prefixes such as eth0 or "
            "^lo,docker (NCCL_SOCKET_IFNAME syntax)."
        )
    named = {v.name for v in parse_env_options(req.env)}
    for var, opt, given in (("NCCL_SOCKET_IFNAME", "--nccl-ifname", ifname), ("NCCL_IB_DISABLE", "--no-ib", req.no_ib)):
        if given and var in named:
            raise PaddlefitError(f"`--env {var}` and `{opt}` both set {var}; give one of them.")


def node_env(req: LaunchRequest) -> tuple[dict[str, str], tuple[str, ...]]:
    """``(by value, by reference)``: the NCCL settings (GPU nodes) overridden by the ``--env`` options."""
    evars = parse_env_options(req.env)
    refs = tuple(v.name for v in evars if v.value is None)
    env = nccl_env(req.from_snapshot, req.nccl_ifname, req.no_ib) if req.gpus_per_node else {}
    env = {k: v for k, v in env.items() if k not in refs}
    env.update({v.name: v.value for v in evars if v.value is not None})
    return env, refs


def launch(req: LaunchRequest) -> LaunchResult:
    """Validate the request and the spec, render the target's files and write them all (or none).

    Raises:
        PaddlefitError: a bad option (named), a spec that would not train, or an output directory that cannot
            take the files.
    """
    import yaml

    from paddlefit.jobspec.spec import load_job_spec

    check_request(req)
    refuse_credentials_in(
        {
            "--master": req.master,
            "--hosts": req.hosts,
            "--workdir": req.workdir,
            "--run-dir": req.run_dir,
            "--bucket": req.bucket,
            "--setup": req.setup,
            "--image": req.image,
            "--pvc": req.pvc,
        },
        "the launch files",
    )
    spec = load_job_spec(req.config, option="CONFIG")
    if spec.data.train is None or (spec.epochs is None and spec.max_steps is None):
        raise PaddlefitError(
            f"CONFIG {req.config}: `train` needs `data.train` and `epochs` or `max_steps`; every "
            "node would stop on this spec. Add them first."
        )
    name = req.name
    if name is None:
        name = re.sub(r"[^a-z0-9-]+", "-", req.config.stem.lower()).strip("-")[:42].strip("-") or "paddlefit-job"
    elif not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?", name):
        raise PaddlefitError(f"`--name {name}` must be lower-case letters, digits and '-' (at most 42 characters).")
    spec = spec.model_copy(update={"devices": req.nodes * max(req.gpus_per_node, 1)})  # the job's world size
    spec_text = yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    env, refs = node_env(req)
    out_dir, notes = req.out_dir, []
    if req.target in ("local", "ssh"):
        n = NodeLaunch(
            spec_path="job.yaml" if req.target == "ssh" else str(req.config),
            run_dir=req.run_dir or spec.run_dir,
            nodes=req.nodes,
            gpus_per_node=req.gpus_per_node,
            job_id=name,
            env=env,
            env_refs=refs,
        )
        if req.target == "local":
            files = local_scripts(n, parse_master(req.master) if req.master is not None else None)
            commands = [f"bash {out_dir / f}" for f in files]
        else:
            if not req.hosts:
                raise PaddlefitError("`--target ssh` needs `--hosts host0,host1,...` (node 0 first).")
            files = {
                "job.yaml": spec_text,
                "launch-ssh.sh": ssh_script(n, parse_hosts(req.hosts), _port(req), req.workdir or str(Path.cwd())),
            }
            commands = [f"bash {out_dir / 'launch-ssh.sh'}"]
        if refs:
            where = (
                "on every node before its script runs"
                if req.target == "local"
                else "in the shell that runs launch-ssh.sh (sent to the hosts on ssh's stdin)"
            )
            notes.append(f"passed by reference, not written: set {', '.join(refs)} {where}.")
    elif req.target == "skypilot":
        files = {"task.yaml": skypilot_task(req, name, spec_text, env, refs)}
        # a managed job, spot or not: the task's job_recovery (a new node, the run resumed) applies only to one
        sky = f"sky jobs launch {out_dir / 'task.yaml'}"
        commands = [" ".join([sky, *skypilot_env_args(refs)])]
    else:
        files = {"paddlejob.yaml": kubeflow_manifest(req, name, spec_text, env, notes, refs)}
        commands = [f"kubectl apply -f {out_dir / 'paddlejob.yaml'}"]
        if refs:
            literals = " ".join(f'--from-literal={k}="${k}"' for k in refs)
            commands.insert(0, f"kubectl create secret generic {secret_name(name)} {literals}")
    write_files(out_dir, files)
    return LaunchResult(req.target, [out_dir / f for f in files], commands, notes)


def write_files(out_dir: Path, files: dict[str, str]) -> None:
    """Write ``{file name: text}`` into ``out_dir``: all files or none (temp files first, then renames); ``.sh``
    scripts made executable (as the umask allows).

    Raises:
        PaddlefitError: ``out_dir`` is a file or symlink, holds a directory of a file's name, or cannot be created.
    """
    from paddlefit.fileio import atomic_write_many, current_umask

    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise PaddlefitError(f"`--out {out_dir}` is a file or a symlink; give a directory.")
    for f in files:
        if (out_dir / f).is_dir():
            raise PaddlefitError(f"`--out {out_dir}` holds a directory named {f}; remove it or choose another `--out`.")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PaddlefitError(f"`--out {out_dir}` cannot be created ({exc.strerror or exc}).") from None
    for path in atomic_write_many({out_dir / f: text for f, text in files.items()}, option="--out"):
        if path.suffix == ".sh":
            path.chmod(path.stat().st_mode | 0o111 & ~current_umask())


def secret_name(name: str) -> str:
    """The Kubernetes Secret that holds job ``name``'s variables passed by reference (key = variable name)."""
    return f"{name}-env"


def skypilot_task(
    req: LaunchRequest, name: str, spec_text: str, env: dict[str, str], refs: tuple[str, ...] = ()
) -> str:
    """The SkyPilot task file (a comment header, then the task YAML) for ``req``, named ``name``; ``env`` by value,
    ``refs`` by reference (``secrets``/``envs`` with null values).

    Raises:
        PaddlefitError: no ``--gpu``, no GPUs per node, a bad bucket URL or image, an unknown GPU name.
    """
    from paddlefit.catalog.gpus import get_gpu

    gpu, bucket, image, nodes, gpus_per_node = req.gpu, req.bucket, req.image, req.nodes, req.gpus_per_node
    if not gpu:
        raise PaddlefitError(
            "`--target skypilot` needs `--gpu NAME` (e.g. A100-SXM4-80GB or L4; `paddlefit cost` ranks them)."
        )
    if gpus_per_node < 1:
        raise PaddlefitError("`--target skypilot` needs `--gpus-per-node` >= 1.")
    if bucket is not None and not re.fullmatch(
        r"(s3|gs|r2|cos|oci)://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/[\w./-]*)?", bucket
    ):
        raise PaddlefitError(
            f"`--bucket {bucket}` must be a bucket URL such as s3://my-bucket/ckpt or gs://b/p "
            "(lower-case bucket name, then an optional path)."
        )
    if image is not None and not re.fullmatch(_IMAGE, image):
        raise PaddlefitError(f"`--image {image}` is not an image reference such as registry/me/train:1.")
    if gpu in {r.skypilot_name for r in skypilot_names()}:
        acc = gpu
    else:
        g = get_gpu(gpu)
        acc = skypilot_accelerator(g.name) or g.name
    # bucket names are global per cloud: a random suffix keeps two users' "train" jobs apart; the task file keeps it,
    # so a recovered or relaunched job finds its checkpoints
    bucket_name = f"{name}-ckpt-{secrets.token_hex(4)}"
    task = render_skypilot(
        SkyPilotRequest(
            name=name,
            accelerator=acc,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            spot=req.spot,
            spec_text=spec_text,
            bucket=bucket,
            bucket_name=bucket_name,
            **({} if req.setup is None else {"setup": req.setup}),
            image_id=f"docker:{image}" if image else None,
            cloud=req.cloud,
            env=env,
            port=_port(req),
            env_refs=refs,
        )
    )
    head = (
        f"# SkyPilot task written by paddlefit launch: {nodes} node(s) x {gpus_per_node} {acc}"
        f"{', spot' if req.spot else ''}.\n# Run from your project directory (synced as workdir; setup installs "
        "from it): sky jobs launch <this file>.\n# Managed jobs replace preempted nodes and the run resumes from "
        "the newest checkpoint on /checkpoints\n# (a bucket: a directory rename there is not atomic, so resume "
        "verifies each checkpoint's sha256 manifest and skips incomplete ones).\n"
    )
    if refs:
        head += (
            f"# Passed by reference (values never in this file): {' '.join(skypilot_env_args(refs))} on the "
            "sky command line reads them from your environment.\n"
        )
    return head + dump_yaml(task)


def kubeflow_manifest(
    req: LaunchRequest, name: str, spec_text: str, env: dict[str, str], notes: list[str], refs: tuple[str, ...] = ()
) -> str:
    """The Kubeflow PaddleJob file (a comment header, then the manifest) for ``req``, named ``name``; a warning
    for the user goes to ``notes`` (no ``--image``: Paddle's base image, which lacks paddlefit). ``env`` by value,
    ``refs`` by reference (``secretKeyRef`` into the Secret :func:`secret_name`).

    Raises:
        PaddlefitError: a ``--shm-gib`` out of 1..4096, a bad image reference or PVC name, an invalid manifest.
    """
    from paddlefit.deploy.docker import choose_build
    from paddlefit.deploy.kubeflow import PaddleJobRequest, render_paddlejob

    image, pvc, nodes, gpus_per_node = req.image, req.pvc, req.nodes, req.gpus_per_node
    shm_gib = req.shm_gib if req.shm_gib is not None else options.SHM_GIB.shown["shm"]
    if image is not None and not re.fullmatch(_IMAGE, image):
        raise PaddlefitError(f"`--image {image}` is not an image reference such as registry/me/train:1.")
    if pvc is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", pvc):
        raise PaddlefitError(f"`--pvc {pvc}` is not a PersistentVolumeClaim name (lower case, digits, '-', '.').")
    if image is None:
        image = choose_build(gpu=gpus_per_node > 0).docker_image
        notes.append(
            f"--image not given: using the Paddle base image {image}, which lacks paddlefit and your code; "
            "build one with `paddlefit image` and pass --image."
        )
    claim = pvc or f"{name}-checkpoints"
    n = NodeLaunch(
        spec_path="/tmp/paddlefit-job.yaml",
        run_dir=f"/ckpt/{name}",
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        job_id=name,
        log_dir="/tmp/paddlefit-logs",
    )
    # --nnodes/--master/--rank come from PADDLE_NNODES/PADDLE_MASTER set by the training-operator
    script = "set -eu\n" + spec_heredoc(spec_text, n.spec_path) + node_command(n, None, None, from_env=True) + "\n"
    manifest = render_paddlejob(
        PaddleJobRequest(
            name=name,
            image=image,
            command=["bash", "-c", script],
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            shm_gib=shm_gib,
            checkpoint_claim=claim,
            checkpoint_mount="/ckpt",
            restart_policy="ExitCode",
            env=env,
            env_refs=refs,
            secret_name=secret_name(name),
        )
    )
    head = (
        f"# Kubeflow PaddleJob written by paddlefit launch: {nodes} pod(s) x {gpus_per_node} GPU(s).\n"
        f"# Needs the PersistentVolumeClaim {claim!r} (ReadWriteMany when pods are on several nodes).\n"
    )
    if refs:
        head += (
            f"# Needs the Secret {secret_name(name)!r} with the keys {', '.join(refs)} (passed by reference, "
            "values never in this file).\n"
        )
    return head + dump_yaml(manifest)
