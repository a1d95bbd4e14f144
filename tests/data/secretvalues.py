"""Secret-looking environment values the secret tests plant and then look for in every file a command writes
(importable because conftest puts tests/data on sys.path): ``tests/process/test_secretenv.py`` and the fault tests."""

from pathlib import Path

MARK = b"s3cr3t-VALUE"  # every secret value below contains it
SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "s3cr3t-VALUE-123",
    "HF_TOKEN": "s3cr3t-VALUE-hf-'quoted' & $HOME \\ \"x\"",  # the shell quoting of a reference is exercised
    "DB_PASSWORD": "s3cr3t-VALUE-db-789",
    "MY_API_KEY": "s3cr3t-VALUE-api-012",
    "DATABASE_URL": "postgres://user:s3cr3t-VALUE-url@db.internal/app",  # a credential by its value
    "PADDLE_AUTH_TOKEN": "s3cr3t-VALUE-paddle",  # a prefix the doctor snapshot keeps
    "NCCL_DEBUG_SUBSYS": "https://u:s3cr3t-VALUE-nccl@proxy:3128",  # kept prefix, credential value
    # names with no credential word that hold credentials (the launcher logs of `train --devices 2` kept them)
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=s3cr3t-VALUE-az==",
    "SENTRY_DSN": "https://s3cr3t-VALUE-dsn@o1.ingest.sentry.io/1",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/s3cr3t-VALUE-slack",
    "CI_JOB_JWT": "s3cr3t-VALUE-jwt",
    "GH_PAT": "s3cr3t-VALUE-pat",
    "DOCKER_AUTH_CONFIG": '{"auths": {"r.io": {"auth": "s3cr3t-VALUE-docker"}}}',
    "PADDLE_STORE_DSN_STRING": "Server=db;Uid=u;Pwd=s3cr3t-VALUE-pwd",  # kept prefix: a credential by its value
    # Near misses the launcher logs kept
    "DB_PW": "s3cr3t-VALUE-pw",
    "MY_CREDS": "AKIA0123456789ABCDEF s3cr3t-VALUE-aws",
    "STRIPE_SK": "sk_live_0123456789s3cr3t-VALUE-stripe",
    "SLACK_HOOK": "https://hooks.slack.com/services/T0/B0/s3cr3t-VALUE-hook",
    "APP_BILLING": "sk_live_0123456789s3cr3t-VALUE-billing",  # a credential by its value
    "APP_NOTIFY": "https://hooks.slack.com/services/T0/B0/s3cr3t-VALUE-notify",
    # Names no rule foresees: only the launcher's allow-list keeps them out of launch-logs/
    "SSHPASS": "s3cr3t-VALUE-sshpass",
    "BW_SESSION": "s3cr3t-VALUE-bitwarden",
    "MY_SVC": "s3cr3t-VALUE-svc",
    "GIT_CONFIG_VALUE_0": "s3cr3t-VALUE-gitconfig",
}
BY_VALUE = {"DATABASE_URL", "NCCL_DEBUG_SUBSYS", "APP_BILLING", "APP_NOTIFY"}  # secrets by their value only
UNNAMED = {"SSHPASS", "BW_SESSION", "MY_SVC", "GIT_CONFIG_VALUE_0"}  # neither name nor value tells


def leaks(*roots: Path) -> list[str]:
    """Every file under ``roots`` (read as bytes) that holds a secret value."""
    return [str(p) for root in roots for p in sorted(root.rglob("*")) if p.is_file() and MARK in p.read_bytes()]
