"""No secret leaves the machine by accident: with credentials set in the environment (and in a doctor snapshot),
no file paddlefit generates holds their values, and the variables named with `--env NAME` are passed by reference
in each target's own form (docs/commands/launch.md#secrets)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser
from secretvalues import BY_VALUE, MARK, SECRETS, UNNAMED, leaks
from typer.testing import CliRunner

from paddlefit.cli.main import app
from paddlefit.deploy.kubeflow import validate_paddlejob
from paddlefit.deploy.launch import validate_skypilot_task
from paddlefit.errors import PaddlefitError
from paddlefit.process.secretenv import (
    REDACTED,
    is_secret,
    looks_like_credential_value,
    looks_like_secret,
    parse_env_options,
    redact_env,
    split_launcher_env,
)
from paddlefit.train.distlaunch import secret_env_popen, worker_secrets

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data"
SPEC = """model: paddlefit.models.examples:digits_cnn
data: {train: digits, train_args: {split: train}}
batch_size: 16
max_steps: 4
run_dir: runs/sec
"""
ENV_ARGS = ["--env", "HF_TOKEN", "--env", "DB_PASSWORD", "--env", "WANDB_MODE=offline", "--env", "PLAIN_REF"]


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PLAIN_REF", "not-a-secret")
    monkeypatch.setenv("COLUMNS", "200")
    return SECRETS


def cli(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def snapshot_with_secrets(tmp_path: Path) -> Path:
    doc = json.loads((DATA / "snapshots" / "nccl_wrong_iface.json").read_text())
    doc["env"].update({k: v for k, v in SECRETS.items() if k.startswith(("PADDLE_", "NCCL_"))})
    path = tmp_path / "host-with-secrets.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_rule_names_credentials_not_settings() -> None:
    for name in [
        *SECRETS.keys() - BY_VALUE - UNNAMED,
        "AWS_ACCESS_KEY_ID",
        "AWS_SESSION_TOKEN",
        "GITHUB_TOKEN",
        "WANDB_API_KEY",
        "SMTP_PASS",
        "MYSQL_PWD",
        "SECRET_KEY",
        "SSH_PRIVATE_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "NGROK_AUTHTOKEN",
        "BASIC_AUTH",
        "client_secret",
        "db-passwd",
    ]:
        assert looks_like_secret(name), name
    for name in [
        "PATH",
        "HOME",
        "PWD",
        "OLDPWD",
        "SSH_AUTH_SOCK",
        "TOKENIZERS_PARALLELISM",
        "MAX_TOKENS",
        "PADDLE_MASTER",
        "PADDLE_TRAINER_ENDPOINTS",
        "NCCL_SOCKET_IFNAME",
        "CUDA_VISIBLE_DEVICES",
        "FLAGS_enable_auto_layout_pass",
        "KEYBOARD",
        "PASSTHROUGH",
        "AWS_REGION",
        "WANDB_MODE",
    ]:
        assert not looks_like_secret(name), name
    assert is_secret("DATABASE_URL", SECRETS["DATABASE_URL"]) and not is_secret("PROXY", "http://proxy:3128")
    assert not looks_like_secret("XAUTHORITY") and not looks_like_secret("LD_LIBRARY_PATH")
    assert redact_env({"HF_TOKEN": "x", "NCCL_DEBUG": "INFO"}) == {"HF_TOKEN": REDACTED, "NCCL_DEBUG": "INFO"}
    refs = parse_env_options(["HF_TOKEN", "WANDB_MODE=offline"])
    assert [(v.name, v.value, v.secret) for v in refs] == [("HF_TOKEN", None, True), ("WANDB_MODE", "offline", False)]
    for bad, needle in (
        (["HF_TOKEN=s3cr3t-VALUE-x"], "pass `--env HF_TOKEN` to forward it by reference"),
        (["DATABASE_URL=postgres://u:s3cr3t-VALUE-x@h/d"], "`--env DATABASE_URL` to forward it"),
        (["1BAD=x"], "a variable name is letters"),
        (["A=1", "A"], "given twice"),
    ):
        with pytest.raises(PaddlefitError) as exc:
            parse_env_options(bad)
        assert needle in str(exc.value) and "s3cr3t" not in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    "value",
    [
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFy==;EndpointSuffix=core.windows.net",
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=Zm9vYmFy=",
        "https://acct.blob.core.windows.net/c?sv=2022-11-02&sp=r&sig=Zm9vYmFy",
        "Server=db;Database=app;User Id=u;Password=hunter2;",
        "host=db user=app password=hunter2",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=",
        "ghp_" + "A1b2" * 9,
        "github_pat_" + "A1b2" * 10,
        "glpat-" + "x" * 20,
        "xoxb-1234-5678-abcdefgh",
        "hf_" + "AbCd" * 9,
        "sk-proj-" + "Ab1" * 16,
        "npm_" + "a1B2" * 9,
        "pypi-AgEIcHlwaS5vcmc" + "x" * 40,
        "https://ghp_" + "A1b2" * 9 + "@github.com/org/repo.git",
    ],
)
def test_a_credential_is_known_by_its_value_whatever_its_name(value: str) -> None:
    """Secrets under names with no credential word (`GIT_REMOTE`, `STORE`, an app's own variable), in the
    formats of detect-secrets' regex plugins; found, they stay out of launch-logs and doctor snapshots and are
    refused by value in `--env`."""
    assert is_secret("STORE", value)
    assert redact_env({"PADDLE_STORE": value}) == {"PADDLE_STORE": REDACTED}
    with pytest.raises(PaddlefitError, match="gives a secret by value"):
        parse_env_options([f"STORE={value}"] if "\n" not in value else ["STORE=" + value.split("\n")[0]])


@pytest.mark.parametrize(
    "value",
    [
        "/usr/local/bin:/usr/bin",
        "127.0.0.1:6170,127.0.0.1:6171",
        "01;31:*.tsk=01;32",
        "task-" + "a" * 30,
        "desk-" + "b" * 30,
        "https://proxy.internal:3128",
        "ghp_short",
        "hf_x",
        "fp16-o1",
        "eth0,ib0",
    ],
)
def test_settings_that_look_a_little_like_credentials_are_not_hidden(value: str) -> None:
    assert not is_secret("SETTING", value), value


def test_near_miss_secret_names_and_values_stay_out_of_the_launcher_environment() -> None:
    """DB_PW, MY_CREDS=AKIA..., STRIPE_SK=sk_live_..., SLACK_HOOK=https://hooks...
    were written in plain text to launch-logs/ (the names and the AWS, Stripe and Slack formats were not known).
    The launcher's filter (distlaunch's ``split_secrets``) now takes each out, by its name and by its value."""
    aws, stripe = "AKIA" + "IOSFODNN7EXAMPL1", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    slack = "https://hooks.slack.com/services/T00000000/B00000000/" + "X" * 24
    for name in ("DB_PW", "MY_CREDS", "STRIPE_SK", "SLACK_HOOK", "TEAMS_WEBHOOK", "mysql-pwd"):
        assert looks_like_secret(name), name
    for name in ("TASK", "NCCL_IB_HCA", "PADDLE_HOOK_DIR_X", "PW_DEBUG"):
        assert not looks_like_secret(name), name
    for value in (aws, "ASIA" + "Y" * 16, stripe, "sk_test_" + "a1" * 12, "rk_live_" + "b2" * 12, slack):
        assert looks_like_credential_value(value), value
    for value in ("AKIA" + "x" * 16, "AKIA1234", "sk_live", "https://hooks.example.com/services/T0"):
        assert not looks_like_credential_value(value), value
    env = {
        "DB_PW": "hunter2",
        "MY_CREDS": aws,
        "STRIPE_SK": stripe,
        "SLACK_HOOK": slack,
        "APP_A": aws,
        "APP_B": stripe,
        "APP_C": slack,
        "NCCL_DEBUG": "INFO",
    }
    kept, hidden = split_launcher_env(env)
    assert kept == {"NCCL_DEBUG": "INFO"} and set(hidden) == set(env) - {"NCCL_DEBUG"}
    unnamed = {k: SECRETS[k] for k in UNNAMED}
    visible = {"PATH": "/bin", "FLAGS_x": "1"}
    assert split_launcher_env({**unnamed, **visible}) == (visible, unnamed)


def test_the_launcher_wrapper_hands_secrets_to_the_processes_it_starts_only() -> None:
    popen = secret_env_popen(worker_secrets({"HF_TOKEN": "v1", "https_proxy": "http://u:p@proxy:1"}))
    code = "import os; print(os.environ.get('HF_TOKEN'), os.environ.get('https_proxy'), os.environ['KEEP'])"
    with popen(
        [sys.executable, "-c", code], env={"KEEP": "k", "PATH": os.environ["PATH"]}, stdout=subprocess.PIPE, text=True
    ) as p:
        assert p.communicate()[0].split() == ["v1", "None", "k"]  # a proxy goes in as https_proxy_original
    assert worker_secrets({"https_proxy": "x"}) == {"https_proxy_original": "x"}


def test_every_launch_target_passes_named_variables_by_reference_and_writes_no_secret(
    secret_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.yaml").write_text(SPEC)
    snap = snapshot_with_secrets(tmp_path)
    common = ["--nodes", "2", "--gpus-per-node", "1", "--from-snapshot", str(snap), *ENV_ARGS]
    runs = {
        "local": ["--master", "10.0.0.1:8090"],
        "ssh": ["--hosts", "h0,h1"],
        "skypilot": ["--gpu", "L4"],
        "kubeflow": ["--image", "reg/me/x:1"],
    }
    out = {}
    for target, extra in runs.items():
        r = cli("launch", "job.yaml", "-t", target, *common, *extra, "--out", f"o/{target}", "--json")
        assert r.exit_code == 0, r.output
        assert MARK not in r.output.encode(), r.output
        out[target] = json.loads(r.stdout)
    assert leaks(tmp_path / "o") == []

    # local: `${NAME:?...}` references, values only for the plain variables
    node = (tmp_path / "o" / "local" / "launch-node1.sh").read_text()
    assert 'export HF_TOKEN="${HF_TOKEN:?' in node and 'export PLAIN_REF="${PLAIN_REF:?' in node
    assert "export WANDB_MODE=offline" in node and "export NCCL_SOCKET_IFNAME=" in node  # doctor's fix, by value
    # ssh: the references travel on ssh's stdin (pf_env), every ssh that starts a node reads them
    ssh = (tmp_path / "o" / "ssh" / "launch-ssh.sh").read_text()
    assert "for n in HF_TOKEN DB_PASSWORD PLAIN_REF; do" in ssh and ssh.count("pf_env | ssh ") == 2
    for script in (node, ssh):
        assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
    # skypilot: secrets (and the plain reference) are required nulls, filled by the sky command line
    task = yaml.safe_load((tmp_path / "o" / "skypilot" / "task.yaml").read_text())
    assert validate_skypilot_task(task) == []
    assert task["secrets"] == {"HF_TOKEN": None, "DB_PASSWORD": None}
    assert task["envs"]["PLAIN_REF"] is None and task["envs"]["WANDB_MODE"] == "offline"
    assert out["skypilot"]["commands"][0].endswith("task.yaml --secret HF_TOKEN --secret DB_PASSWORD --env PLAIN_REF")
    # kubeflow: secretKeyRef into the job's Secret, which the first command creates from this shell's variables
    m = yaml.safe_load((tmp_path / "o" / "kubeflow" / "paddlejob.yaml").read_text())
    assert validate_paddlejob(m) == []
    for rs in m["spec"]["paddleReplicaSpecs"].values():
        env = {e["name"]: e for e in rs["template"]["spec"]["containers"][0]["env"]}
        for name in ("HF_TOKEN", "DB_PASSWORD", "PLAIN_REF"):
            assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": {"name": "job-env", "key": name}}}
        assert env["WANDB_MODE"] == {"name": "WANDB_MODE", "value": "offline"}
    assert out["kubeflow"]["commands"][0] == (
        "kubectl create secret generic job-env --from-literal=HF_TOKEN="
        '"$HF_TOKEN" --from-literal=DB_PASSWORD="$DB_PASSWORD" '
        '--from-literal=PLAIN_REF="$PLAIN_REF"'
    )


def test_a_secret_given_by_value_is_refused_and_nothing_is_written(secret_env: dict, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(SPEC)
    for args in (
        ["launch", str(tmp_path / "job.yaml"), "-t", "kubeflow", "--env", "MY_API_KEY=s3cr3t-VALUE-typed"],
        ["image", "--cpu", "--env", "DB_PASSWORD=s3cr3t-VALUE-typed"],
    ):
        r = cli(*args, "--out", str(tmp_path / "o"))
        assert r.exit_code == 2 and "to forward it by reference" in r.output and "s3cr3t" not in r.output, r.output
        assert not (tmp_path / "o").exists()


def test_node_scripts_hand_a_reference_to_the_node_and_write_no_value(secret_env: dict, tmp_path: Path) -> None:
    """The generated local and ssh scripts run (a stand-in `ssh` runs the remote command here, a stand-in `python`
    records the sha256 of HF_TOKEN it was started with): the node sees the value, no file holds it, and a node
    whose shell lacks the variable stops with the reference's message."""
    (tmp_path / "job.yaml").write_text(SPEC)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text('#!/usr/bin/env bash\n[ "$1" = -n ] && shift\nshift\nexec bash -c "$1"\n')
    (bin_dir / "python").write_text(
        '#!/usr/bin/env bash\n[ "$1" = -c ] && { echo worker.py; exit 0; }\n'
        'printf %s "$HF_TOKEN" | sha256sum | cut -d" " -f1 > "$PWD/seen-$$"\n'
    )
    for f in ("ssh", "python"):
        (bin_dir / f).chmod(0o755)
    for target, extra in (("local", []), ("ssh", ["--hosts", "127.0.0.1", "--workdir", str(tmp_path / "remote")])):
        r = cli(
            "launch",
            str(tmp_path / "job.yaml"),
            "-t",
            target,
            "--gpus-per-node",
            "0",
            "--env",
            "HF_TOKEN",
            *extra,
            "--out",
            str(tmp_path / target),
        )
        assert r.exit_code == 0, r.output
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for script, cwd in (
        (tmp_path / "local" / "launch-node0.sh", tmp_path),
        (tmp_path / "ssh" / "launch-ssh.sh", tmp_path),
    ):
        p = subprocess.run(["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
    want = hashlib.sha256(SECRETS["HF_TOKEN"].encode()).hexdigest()
    seen = [f.read_text().strip() for f in [*tmp_path.glob("seen-*"), *(tmp_path / "remote").glob("seen-*")]]
    assert seen == [want, want]
    assert leaks(tmp_path) == []
    unset = {k: v for k, v in env.items() if k != "HF_TOKEN"}
    p = subprocess.run(
        ["bash", str(tmp_path / "local" / "launch-node0.sh")],
        cwd=tmp_path,
        env=unset,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode != 0 and "HF_TOKEN must be set in the environment" in p.stderr


def test_image_passes_a_named_secret_at_run_time_never_in_the_image(secret_env: dict, tmp_path: Path) -> None:
    r = cli("image", "--cpu", "--env", "HF_TOKEN", "--env", 'MODE=fast "$x"', "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert MARK not in r.output.encode() and leaks(tmp_path) == []
    steps = DockerfileParser(fileobj=io.BytesIO((tmp_path / "Dockerfile").read_bytes())).structure
    assert not [s for s in steps if s["instruction"] in ("ENV", "ARG") and "HF_TOKEN" in s["value"]]
    assert 'ENV MODE="fast \\"\\$x\\""' in (tmp_path / "Dockerfile").read_text()
    assert " -e HF_TOKEN " in r.stdout and "docker run" in r.stdout


def test_doctor_snapshots_record_secret_names_not_values(secret_env: dict, tmp_path: Path) -> None:
    r = cli("doctor", "--snapshot", str(tmp_path / "here.json"), "--no-measure", "--json")
    assert MARK not in r.output.encode(), r.output
    env = json.loads((tmp_path / "here.json").read_text())["env"]
    assert env["PADDLE_AUTH_TOKEN"] == REDACTED and env["NCCL_DEBUG_SUBSYS"] == REDACTED
    # a snapshot file that carries values (an older paddlefit, another tool) is redacted when loaded
    r = cli(
        "doctor",
        "--from",
        str(snapshot_with_secrets(tmp_path)),
        "--snapshot",
        str(tmp_path / "again.json"),
        "--json",
        "--all",
    )
    assert MARK not in r.output.encode(), r.output
    assert json.loads((tmp_path / "again.json").read_text())["env"]["PADDLE_AUTH_TOKEN"] == REDACTED
    assert leaks(tmp_path) == [str(tmp_path / "host-with-secrets.json")]  # only the input


def test_a_two_process_train_writes_no_secret_and_its_workers_see_them(secret_env: dict, tmp_path: Path) -> None:
    """examples/digits.yaml for 3 steps on 2 CPU processes (paddle.distributed.launch, which writes its whole
    environment into launch-logs unless paddlefit's wrapper keeps the secrets out); the training data refuses to
    load unless the worker's HF_TOKEN is the value set here."""
    spec = yaml.safe_load((ROOT / "examples" / "digits.yaml").read_text())
    spec["data"]["train"] = "trainhelpers:env_checked_digits"
    spec["data"]["train_args"] = {
        "split": "train",
        "name": "HF_TOKEN",
        "sha256": hashlib.sha256(SECRETS["HF_TOKEN"].encode()).hexdigest(),
    }
    (tmp_path / "digits.yaml").write_text(yaml.safe_dump(spec))
    run_dir = tmp_path / "run"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(DATA), os.environ.get("PYTHONPATH", "")]), GLOG_minloglevel="2"
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "paddlefit.cli.main",
            "train",
            str(tmp_path / "digits.yaml"),
            "--run-dir",
            str(run_dir),
            "--devices",
            "2",
            "--max-steps",
            "3",
        ],
        env=env,
        capture_output=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    assert MARK not in p.stdout + p.stderr
    logs = {f.name for f in (run_dir / "launch-logs").iterdir()}
    assert {"envlog.0", "backup_env.0.json", "workerlog.0"} <= logs  # the files Paddle dumps its environment into
    assert "PADDLE_AUTH_TOKEN" not in (run_dir / "launch-logs" / "envlog.0").read_text()
    assert "SSHPASS" not in (run_dir / "launch-logs" / "envlog.0").read_text()
    assert (run_dir / "launch-logs").stat().st_mode & 0o077 == 0  # the owner's only
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 3
    assert leaks(run_dir) == []


def test_a_credential_typed_into_a_free_text_option_is_refused_not_written(tmp_path: Path) -> None:
    """`--setup "pip install git+https://ghp_...@github.com/..."` went into task.yaml as typed (and `--command`,
    a requirement, `--image`... into their files): refused, the option named, nothing written, the value not
    echoed."""
    token = "ghp_" + "s3cr3tVALUE" * 4
    (tmp_path / "job.yaml").write_text(SPEC)
    for args in (
        [
            "launch",
            str(tmp_path / "job.yaml"),
            "-t",
            "skypilot",
            "--gpu",
            "L4",
            "--setup",
            f"pip install git+https://{token}@github.com/org/pkg.git",
        ],
        ["launch", str(tmp_path / "job.yaml"), "-t", "kubeflow", "--image", f"reg.io/x:1?sig={token}"],
        [
            "launch",
            str(tmp_path / "job.yaml"),
            "-t",
            "local",
            "--master",
            "10.0.0.1:8090",
            "--run-dir",
            f"https://u:{token}@share/runs",
        ],
        ["image", "--cpu", "--command", f"python train.py --hub-token {token}"],
        ["image", "--cpu", "-r", f"pkg @ git+https://u:{token}@git.example.com/pkg.git"],
    ):
        r = cli(*args, "--out", str(tmp_path / "o"))
        assert r.exit_code == 2 and "looks like a credential" in r.output and "s3cr3t" not in r.output, r.output
        assert "`--env NAME`" in r.output and not (tmp_path / "o").exists()
