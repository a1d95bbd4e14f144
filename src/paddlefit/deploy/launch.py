"""Hand a job spec to multi-node engines: Paddle's own launcher (per-node commands, plain or over ssh), a SkyPilot
task YAML and a Kubeflow PaddleJob manifest.

Every target runs the same thing on each node: ``python -m paddle.distributed.launch`` with ``--nnodes``,
``--master`` (node 0's ``host:port``), ``--rank`` and ``--devices`` (arguments from Paddle's launch docs; the
same values can come from the ``PADDLE_MASTER``/``PADDLE_NNODES`` environment, ``paddle/distributed/launch/context/
args_envs.py``, which is how the Kubeflow training-operator passes them) starting paddlefit's worker
(:mod:`paddlefit.train.worker`) with ``--resume auto``, so a restarted job continues from its newest checkpoint.
Only global rank 0 writes; the run directory must be storage every node sees (NFS, a bucket mount, a PVC).
Paddle's launcher runs through :mod:`paddlefit.train.distlaunch`, which keeps secrets out of the files it writes.

Environment variables reach the nodes by value (``env``: NCCL settings, ``--env NAME=value``) or by reference
(``env_refs``: ``--env NAME``): a reference is resolved where the job starts and its value is never written
(:mod:`paddlefit.process.secretenv`); each target's form is in its renderer.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from pydantic import ConfigDict, Field

from paddlefit import options
from paddlefit.errors import PaddlefitError
from paddlefit.process.safepath import SAFE_PATH_ENV
from paddlefit.process.secretenv import ENV_NAME, looks_like_secret, refuse_credentials_in, refuse_secret_values
from paddlefit.validation import RequestModel

#: The worker script's path on the node, resolved there (it differs per Python install).
WORKER_PATH_SH = "\"$(python -c 'import paddlefit.train.worker as w; print(w.__file__)')\""
SPEC_DELIMITER = "PADDLEFIT_SPEC_EOF"
#: Default rendezvous port of node 0 (any free TCP port works; Paddle's docs use 8080 and 12538 in examples).
DEFAULT_PORT = options.PORT.shown["port"]
#: Most nodes one launch writes for (a sanity bound: one script per node for `local`).
MAX_NODES = options.NODES.bounds["le"]
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"


def _no_control(value: str, what: str) -> None:
    if any(ord(c) < 32 or ord(c) == 127 or c in "\u0085\u2028\u2029" for c in value):
        raise PaddlefitError(f"{what} {value!r} contains a control character (newline, tab...); use a plain path.")


def parse_master(text: str) -> str:
    """``HOST:PORT`` of node 0 (a DNS name, IPv4, or ``[IPv6]``; port 1-65535).

    Raises:
        PaddlefitError: anything else.
    """
    m = re.fullmatch(rf"({_HOST}):(\d{{1,5}})", text.strip())
    if not m or not 1 <= int(m.group(2)) <= 65535:
        raise PaddlefitError(f"`--master {text}` must be HOST:PORT with a port 1-65535, e.g. 10.0.0.1:{DEFAULT_PORT}.")
    return f"{m.group(1)}:{int(m.group(2))}"


def parse_hosts(text: str) -> list[str]:
    """``--hosts h0,h1,...``: each ``[user@]host`` (no port, no option-like names, no empty entries).

    Raises:
        PaddlefitError: a bad entry (named), with how to give ports (``~/.ssh/config``).
    """
    hosts = [h.strip() for h in text.split(",")]
    for h in hosts:
        if not re.fullmatch(rf"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?{_HOST}", h):
            raise PaddlefitError(
                f"`--hosts`: {h!r} is not [user@]host (empty entries, ports and names starting "
                "with '-' are refused; put ports and options in ~/.ssh/config)."
            )
    return hosts


@dataclass(frozen=True)
class NodeLaunch:
    """What every node runs.

    Attributes:
        spec_path: the job spec's path as the nodes see it.
        run_dir: checkpoints and metrics (shared by all nodes).
        nodes: node count (>= 1); gpus_per_node: GPUs per node (0 = one CPU process per node, gloo).
        job_id: Paddle's ``--job_id`` (names the logs).
        log_dir: Paddle's per-node ``--log_dir`` (node-local; ``workerlog.N`` per local rank).
        env: environment exported before the launch, by value (NCCL settings, ``--env NAME=value``); no secret
            (:func:`paddlefit.process.secretenv.refuse_secret_values`).
        env_refs: variables passed by reference (``--env NAME``): taken from the environment the node script runs
            in (``local``) or the shell that runs the ssh driver (``ssh``, sent on ssh's stdin), never written.
    """

    spec_path: str
    run_dir: str
    nodes: int
    gpus_per_node: int
    job_id: str
    log_dir: str = "paddlefit-logs"
    env: dict[str, str] = field(default_factory=dict)
    env_refs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        refuse_secret_values(self.env, "the node environment")
        bad = [n for n in (*self.env, *self.env_refs) if not ENV_NAME.fullmatch(n)]
        if bad or set(self.env) & set(self.env_refs):
            raise PaddlefitError(
                f"environment variable names must be [A-Za-z_][A-Za-z0-9_]* and given once "
                f"(got {', '.join(map(repr, bad or sorted(set(self.env) & set(self.env_refs))))})."
            )
        if self.nodes < 1 or self.gpus_per_node < 0:
            raise PaddlefitError(f"nodes must be >= 1 and gpus per node >= 0 (got {self.nodes}, {self.gpus_per_node}).")
        for what, value in (
            ("the spec path", self.spec_path),
            ("the run directory", self.run_dir),
            ("the job id", self.job_id),
            ("the log directory", self.log_dir),
            *((f"NCCL setting {k}", f"{k}={v}") for k, v in self.env.items()),
        ):
            _no_control(value, what)

    def devices_args(self) -> list[str]:
        """``--devices 0,1,..`` on GPU nodes, ``--nproc_per_node 1`` on CPU nodes."""
        if self.gpus_per_node:
            return ["--devices", ",".join(str(i) for i in range(self.gpus_per_node))]
        return ["--nproc_per_node", "1"]


def node_command(
    n: NodeLaunch,
    rank: int | str | None,
    master: str | None,
    nnodes: str | None = None,
    devices: list[str] | None = None,
    from_env: bool = False,
) -> str:
    """The shell command one node runs. ``rank``/``master``/``nnodes`` may be shell expressions such as
    ``"$SKYPILOT_NODE_RANK"``; ``from_env`` leaves all three to ``PADDLE_RANK``/``PADDLE_MASTER``/``PADDLE_NNODES``
    (set by Kubeflow's training-operator)."""
    parts = ["python", "-m", "paddlefit.train.distlaunch"]
    if not from_env and (n.nodes > 1 or nnodes is not None):
        parts += ["--nnodes", nnodes if nnodes is not None else str(n.nodes)]
        if master is not None:
            parts += ["--master", master]
        if rank is not None:
            parts += ["--rank", str(rank)]
    parts += devices if devices is not None else n.devices_args()
    parts += ["--log_dir", n.log_dir, "--job_id", n.job_id]
    quoted = " ".join(p if p.startswith('"$') else shlex.quote(p) for p in parts)
    tail = " ".join(shlex.quote(a) for a in ("--spec", n.spec_path, "--run-dir", n.run_dir, "--resume", "auto"))
    return f"{SAFE_PATH_ENV}=1 {quoted} {WORKER_PATH_SH} {tail}"  # no current directory on sys.path (safepath)


def _exports(env: dict[str, str], refs: tuple[str, ...] = ()) -> str:
    """``export`` lines: by value (shell-quoted), then by reference: the variable must be set where the script runs
    (``${NAME:?...}`` stops the script with a message otherwise); its value is never in the script."""
    lines = [f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items())]
    lines += [
        f'export {n}="${{{n}:?{n} must be set in the environment: passed by reference, not written here}}"\n'
        for n in refs
    ]
    return "".join(lines)


#: ``pf_env`` of ``launch-ssh.sh`` (bash): each variable passed by reference as ``export NAME='value'``, the value
#: single-quoted for any POSIX shell (each ' becomes '\''), printed for ssh's stdin, where the remote shell
#: ``eval``s it; NAMES is replaced by the names.
SSH_ENV_FUNCTION = r"""pf_env() {  # the --env variables passed by reference: read here, sent on ssh's stdin
  local n v q="'\\''"
  for n in NAMES; do
    v=${!n}
    printf "export %s='%s'\n" "$n" "${v//\'/"$q"}"
  done
}"""


def _ssh_env_lines(refs: tuple[str, ...]) -> list[str]:
    """Lines of ``launch-ssh.sh`` for variables passed by reference: stop early when one is unset, then
    :data:`SSH_ENV_FUNCTION`; so no value is in a file or on a command line."""
    if not refs:
        return []
    checks = [
        f': "${{{n}:?{n} must be set in this shell: passed to the nodes by reference, not written here}}"' for n in refs
    ]
    return [*checks, SSH_ENV_FUNCTION.replace("NAMES", " ".join(refs))]


def local_scripts(n: NodeLaunch, master: str | None) -> dict[str, str]:
    """``launch-node<r>.sh`` per node: run node r's script on node r (node 0 first or all at once; the launcher waits
    for every node at ``master``).

    Raises:
        PaddlefitError: several nodes without ``master`` (``host:port`` of node 0).
    """
    if n.nodes > 1 and not master:
        raise PaddlefitError(
            "several nodes need `--master HOST:PORT`: node 0's address the others can reach "
            f"(e.g. 10.0.0.1:{DEFAULT_PORT})."
        )
    out = {}
    for r in range(n.nodes):
        out[f"launch-node{r}.sh"] = (
            "#!/usr/bin/env bash\n"
            f"# node {r} of {n.nodes}: run from the directory that holds {shlex.quote(n.spec_path)}; "
            f"{shlex.quote(n.run_dir)} must be shared.\n"
            "set -euo pipefail\n" + _exports(n.env, n.env_refs) + node_command(n, r, master) + "\n"
        )
    return out


def ssh_script(n: NodeLaunch, hosts: list[str], port: int, workdir: str) -> str:
    """``launch-ssh.sh`` (next to ``job.yaml``): copies the spec to every host, starts node r on ``hosts[r]`` over
    ssh (node 0 = the master at ``hosts[0]:port``), writes each node's output to ``node<r>.log`` and exits non-zero
    if any node failed.

    Raises:
        PaddlefitError: the host count differs from the node count, or a host name is not a plain host.
    """
    if len(hosts) != n.nodes:
        raise PaddlefitError(f"`--hosts` names {len(hosts)} host(s) for `--nodes {n.nodes}`; give one per node.")
    for h in hosts:
        parse_hosts(h)
    _no_control(workdir, "`--workdir`")
    master_host = hosts[0].split("@")[-1]
    master = f"{master_host}:{port}"
    lines = [
        "#!/usr/bin/env bash",
        f"# {n.nodes} node(s) over ssh; every host needs paddlefit + Paddle, passwordless "
        f"ssh, and {shlex.quote(n.run_dir)} on shared storage.",
        "set -uo pipefail",
        'here="$(cd "$(dirname "$0")" && pwd)"',
        "pids=()",
        *_ssh_env_lines(n.env_refs),
    ]
    for r, h in enumerate(hosts):
        remote = f"mkdir -p {shlex.quote(workdir)} && cd {shlex.quote(workdir)} && cat > {shlex.quote(n.spec_path)}"
        lines.append(f'ssh {shlex.quote(h)} {shlex.quote(remote)} < "$here/job.yaml" || exit 1')
        cmd = f"cd {shlex.quote(workdir)} && " + " && ".join(
            (['eval "$(cat)"'] if n.env_refs else [])
            + [f"export {k}={shlex.quote(v)}" for k, v in sorted(n.env.items())]
            + [node_command(n, r, master)]
        )
        start = "pf_env | ssh" if n.env_refs else "ssh -n"
        lines.append(f'{start} {shlex.quote(h)} {shlex.quote(cmd)} > "$here/node{r}.log" 2>&1 & pids+=($!)')
    lines += [
        "rc=0",
        'for p in "${pids[@]}"; do wait "$p" || rc=$?; done',
        'echo "nodes finished, exit $rc (logs: $here/node*.log)"',
        "exit $rc",
    ]
    return "\n".join(lines) + "\n"


def dump_yaml(doc: Any) -> str:
    """YAML for a manifest or task: key order kept, multi-line strings (scripts) as literal ``|`` blocks."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000)


def spec_heredoc(spec_text: str, path: str) -> str:
    """Shell lines that write ``spec_text`` to ``path`` (quoted heredoc: no expansion)."""
    if SPEC_DELIMITER in spec_text:
        raise PaddlefitError(f"the job spec contains {SPEC_DELIMITER!r}; rename that value.")
    return f"cat > {shlex.quote(path)} <<'{SPEC_DELIMITER}'\n{spec_text.rstrip()}\n{SPEC_DELIMITER}\n"


# ---- SkyPilot --------------------------------------------------------------------------------------------------


class SkyPilotRequest(RequestModel):
    """A SkyPilot task: ``accelerator`` (SkyPilot name) x ``gpus_per_node`` on ``nodes`` nodes, spot or not, the
    checkpoint bucket (``bucket`` URL such as ``s3://b/p``, or None = a new bucket SkyPilot creates, named
    ``bucket_name``), the setup commands, the image, and ``workdir`` (synced to every node; SkyPilot runs
    ``setup`` and ``run`` in it). ``env``: ``envs`` by value (no secret); ``env_refs``: passed by reference, as
    SkyPilot's ``secrets: {NAME: null}`` when the name looks like a secret, else ``envs: {NAME: null}`` (null =
    required: ``sky launch`` stops unless ``--secret NAME`` / ``--env NAME`` gives it, read from the local
    environment; SkyPilot docs, "Environment Variables and Secrets"; :func:`skypilot_env_args`).

    Raises:
        PaddlefitError: (on construction) a field of the wrong type or out of range, named by its option.
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Task name (``--name``, else from the spec file).")
    accelerator: str = Field(description="SkyPilot's accelerator name.", json_schema_extra=options.GPU_LAUNCH.field())
    nodes: int = Field(description="Nodes.", **options.NODES.bounds, json_schema_extra=options.NODES.field())
    gpus_per_node: int = Field(
        description="GPUs per node.",
        **options.GPUS_PER_NODE_LAUNCH.bounds,
        json_schema_extra=options.GPUS_PER_NODE_LAUNCH.field(),
    )
    spot: bool = Field(description="Spot instances.", json_schema_extra=options.SPOT_LAUNCH.field())
    spec_text: str = Field(description="The job spec, written into the task.")
    bucket: str | None = Field(None, description="Checkpoint bucket URL.", json_schema_extra=options.BUCKET.field())
    bucket_name: str = Field("", description="Name of the bucket SkyPilot creates when ``bucket`` is None.")
    setup: str = Field(
        options.SETUP.shown["setup"], description="Setup commands.", json_schema_extra=options.SETUP.field()
    )
    workdir: str | None = Field(".", description="Synced to every node; setup and run start there.")
    image_id: str | None = Field(None, description="``docker:<image>``.", json_schema_extra=options.IMAGE.field())
    cloud: str | None = Field(None, description="Pinned cloud.", json_schema_extra=options.CLOUD_LAUNCH.field())
    env: dict[str, str] = Field(default_factory=dict, description="Variables by value (no secret).")
    port: int = Field(
        DEFAULT_PORT, description="Rendezvous port.", **options.PORT.bounds, json_schema_extra=options.PORT.field()
    )
    env_refs: tuple[str, ...] = Field((), description="Variables passed by reference.")


def render_skypilot(req: SkyPilotRequest) -> dict[str, Any]:
    """The task as a dict (``yaml.safe_dump`` it); run it with ``sky jobs launch task.yaml`` (managed: a preempted
    spot job is relaunched and ``--resume auto`` continues from the bucket).

    Raises:
        PaddlefitError: gpus_per_node < 1, or the task does not validate against SkyPilot's schemas.
    """
    if req.gpus_per_node < 1 or req.nodes < 1:
        raise PaddlefitError("a SkyPilot task needs --gpus-per-node >= 1 and --nodes >= 1.")
    refuse_credentials_in({"--setup": req.setup, "--bucket": req.bucket, "--image": req.image_id}, "the SkyPilot task")
    ckpt = "/checkpoints"
    n = NodeLaunch(
        spec_path="/tmp/paddlefit-job.yaml",
        run_dir=f"{ckpt}/{req.name}",
        nodes=req.nodes,
        gpus_per_node=req.gpus_per_node,
        job_id=req.name,
        log_dir="/tmp/paddlefit-logs",
    )
    launch = node_command(
        n,
        '"$SKYPILOT_NODE_RANK"',
        f'"$MASTER_ADDR:{req.port}"',
        nnodes='"$SKYPILOT_NUM_NODES"',
        devices=["--devices", '"$DEVICES"'],
    )
    run = (
        "set -euo pipefail\n"
        + spec_heredoc(req.spec_text, n.spec_path)
        + 'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
        + "DEVICES=$(seq -s, 0 $((SKYPILOT_NUM_GPUS_PER_NODE - 1)))\n"
        + launch
        + "\n"
    )
    resources: dict[str, Any] = {
        "accelerators": f"{req.accelerator}:{req.gpus_per_node}",
        "use_spot": req.spot,
        # preemptions are always recovered; a run that exits 143 (SIGTERM, checkpoint saved) or 203 (a node lost,
        # paddlefit.train.peers) is retried too
        "job_recovery": {
            "strategy": "EAGER_NEXT_REGION",
            "max_restarts_on_errors": 0,
            "recover_on_exit_codes": [143, 203],
        },
    }
    if req.image_id:
        resources["image_id"] = req.image_id
    if req.cloud:
        resources["cloud"] = req.cloud
    storage: dict[str, Any] = {"mode": "MOUNT_CACHED"}
    if req.bucket:
        storage["source"] = req.bucket
    else:
        storage["name"] = req.bucket_name or f"{req.name}-checkpoints"
    task: dict[str, Any] = {"name": req.name, "num_nodes": req.nodes, "resources": resources}
    if req.workdir:
        task["workdir"] = req.workdir
    task.update({"file_mounts": {ckpt: storage}, "setup": req.setup, "run": run})
    refuse_secret_values(req.env, "the SkyPilot task's envs")
    envs: dict[str, str | None] = dict(sorted(req.env.items()))
    envs.update({k: None for k in req.env_refs if not looks_like_secret(k)})
    if envs:
        task["envs"] = envs
    if any(looks_like_secret(k) for k in req.env_refs):
        task["secrets"] = {k: None for k in req.env_refs if looks_like_secret(k)}
    problems = validate_skypilot_task(task)
    if problems:
        raise PaddlefitError("the SkyPilot task does not validate: " + "; ".join(problems[:5]))
    return task


def skypilot_env_args(refs: tuple[str, ...]) -> list[str]:
    """The ``sky launch`` arguments that fill variables passed by reference from the local environment:
    ``--secret NAME`` for secret-looking names, ``--env NAME`` for the others (SkyPilot's CLI reads the value of a
    bare ``NAME`` from the environment, ``sky/client/cli/flags.py``)."""
    return [a for k in refs for a in ("--secret" if looks_like_secret(k) else "--env", k)]


@functools.lru_cache(maxsize=3)
def skypilot_schema(kind: str) -> dict[str, Any]:
    """SkyPilot's own JSON schema for ``task``, ``resources`` or ``storage`` (generated by skypilot 0.14.1,
    ``sky.utils.schemas``; see ``deploy/data/SOURCES.md``)."""
    text = (importlib.resources.files("paddlefit.deploy") / "data" / f"skypilot_{kind}_schema.json").read_text(
        encoding="utf-8"
    )
    return json.loads(text)


def _validator(schema: dict[str, Any]) -> Any:
    """A jsonschema validator for ``schema`` that also checks SkyPilot's ``case_insensitive_enum`` keyword, as
    SkyPilot's own validator does (``sky/utils/common_utils.py``)."""
    import jsonschema

    def case_insensitive_enum(validator: Any, enums: list[str], instance: Any, schema: Any) -> Any:
        if isinstance(instance, str) and instance.lower() not in {e.lower() for e in enums}:
            yield jsonschema.ValidationError(f"{instance!r} is not one of {enums}")

    base = jsonschema.validators.validator_for(schema)
    cls = jsonschema.validators.extend(base, {"case_insensitive_enum": case_insensitive_enum})
    return cls(schema)


def validate_skypilot_task(task: dict[str, Any]) -> list[str]:
    """Problems of a SkyPilot task dict (``path: message``) against SkyPilot's task schema, its resources schema
    and its storage schema for each ``file_mounts`` entry that is a storage object; empty when valid. Top-level
    nulls are dropped first, as SkyPilot does."""
    task = {k: v for k, v in task.items() if v is not None}
    problems = []
    checks: list[tuple[str, dict[str, Any], Any]] = [("$", skypilot_schema("task"), task)]
    if isinstance(task.get("resources"), dict):
        checks.append(("$.resources", skypilot_schema("resources"), task["resources"]))
    for dst, src in (task.get("file_mounts") or {}).items():
        if isinstance(src, dict):
            checks.append((f"$.file_mounts[{dst}]", skypilot_schema("storage"), src))
    for where, schema, doc in checks:
        for e in sorted(_validator(schema).iter_errors(doc), key=lambda e: list(e.absolute_path)):
            path = where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
            problems.append(f"{path}: {e.message}")
    return problems
