"""Which environment variables are secrets, and the ``--env`` options that pass variables to generated files.

The one rule every generator follows: a value of the environment that looks like a credential is never written to
a file paddlefit generates (launch scripts, SkyPilot task, PaddleJob manifest, Dockerfile, doctor snapshots, the
run directory and its logs). A variable the user names with ``--env NAME`` is passed *by reference* instead: the
file says where the value comes from (``$NAME`` in a shell script, SkyPilot's ``secrets:``, a Kubernetes
``secretKeyRef``, ``docker run -e NAME``), never what it is.

A name looks like a secret (:func:`looks_like_secret`, case-insensitive, words split on ``_``, ``-`` and ``.``)
when it

1. contains SECRET, PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL, PRIVATE_KEY / PRIVATEKEY, API_KEY / APIKEY,
   ACCESS_KEY / ACCESSKEY, AUTHORIZATION, COOKIE, CONNECTION_STRING / CONNECTIONSTRING or WEBHOOK anywhere
   (``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``, ``MY_API_KEY``, ``GOOGLE_APPLICATION_CREDENTIALS``,
   ``AZURE_STORAGE_CONNECTION_STRING``, ``SLACK_WEBHOOK_URL``);
2. has a word that is or ends in TOKEN (``HF_TOKEN``, ``GITHUB_TOKEN``, ``NGROK_AUTHTOKEN``), but not TOKENS or
   TOKENIZERS (``MAX_TOKENS`` and ``TOKENIZERS_PARALLELISM`` are settings);
3. ends in the word PASS (``SMTP_PASS``; not in Paddle's ``FLAGS_*``, where a pass is a compiler pass:
   ``FLAGS_enable_auto_layout_pass``), or has a word PWD next to other words (``MYSQL_PWD``; ``PWD`` and
   ``OLDPWD`` alone are the shell's directories);
4. ends in the word KEY, or KEY then ID (``SECRET_KEY``, ``SIGNING_KEY``, ``AWS_ACCESS_KEY_ID``), or starts
   with AWS and has a word KEY anywhere (``AWS_*_KEY*``);
5. has the word AUTH (``BASIC_AUTH``, ``DOCKER_AUTH_CONFIG``; not ``SSH_AUTH_SOCK``, a socket path);
6. has the word DSN or JWT, or ends in the word PAT (``SENTRY_DSN``, whose URL carries the key; ``CI_JOB_JWT``;
   ``GH_PAT``, a personal access token);
7. has more than one word and ends in PW, PWD, CREDS, SK or HOOK (``DB_PW``, ``MY_CREDS``, ``STRIPE_SK``, a secret key;
   ``SLACK_HOOK``, a webhook URL whose path is the key; see rule 1 for WEBHOOK).

A value looks like a credential (:func:`looks_like_credential_value`) whatever its name when it holds

- a URL with a password, ``scheme://user:password@host`` (``DATABASE_URL``, ``https_proxy``);
- a connection string's or query's key, ``Password=``, ``Pwd=``, ``AccountKey=``, ``SharedAccessKey=``, ``sig=``
  (Azure Storage and Service Bus connection strings, SAS URLs, ADO.NET/ODBC strings, libpq's ``password=``);
- a JSON Web Token (``eyJ...``: base64url parts joined by dots) or a PEM private key (``-----BEGIN ... PRIVATE
  KEY-----``);
- a token in a well-known format: GitHub (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``, ``github_pat_``),
  GitLab (``glpat-``), Slack (``xoxb-``...), Hugging Face (``hf_``), OpenAI/Anthropic (``sk-``), npm (``npm_``),
  PyPI (``pypi-``), each with the length of a real one;
- an AWS access key ID (``AKIA`` long-term, ``ASIA`` temporary, then 16 upper-case letters or digits: AWS IAM
  User Guide, "IAM identifiers", unique ID prefixes), a Stripe secret or restricted key (``sk_live_``,
  ``sk_test_``, ``rk_live_``, ``rk_test_``: Stripe docs, "API keys"), or a Slack incoming webhook URL
  (``https://hooks.slack.com/services/...``, also ``/workflows/`` and ``/triggers/``: Slack docs, "Sending
  messages using incoming webhooks", which says to keep the URL secret).

Sources: Sentry's default scrubbing denylist (``sentry_sdk/scrubber.py`` ``DEFAULT_DENYLIST``, taken from Relay:
password, passwd, secret, api_key, apikey, auth, credentials, mysql_pwd, privatekey, private_key, token, cookie,
authorization); Django's ``SafeExceptionReporterFilter.hidden_settings`` (``API|TOKEN|KEY|SECRET|PASS|SIGNATURE|
HTTP_COOKIE``, substrings; rules 2-4 narrow TOKEN, PASS and KEY to whole words so ``MAX_TOKENS``, ``PASSTHROUGH``
and ``KEYBOARD`` stay settings); Yelp detect-secrets' keyword plugin (``detect_secrets/plugins/keyword.py``:
api_?key, private_?key, client_?key, password, passwd, pwd, secret, and its BasicAuthDetector for
``://user:password@``); the AWS CLI's variable names (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``); the token formats of detect-secrets' plugins (``github_token.py``, ``gitlab_token.py``,
``slack.py``, ``jwt.py``, ``private_key.py``, ``npm.py``, ``pypi_token.py``, ``azure_storage_key.py``,
``openai.py``) and Hugging Face's ``hf_`` user access tokens; docs/sources.md#secret-names. What each generator
writes instead: docs/commands/launch.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from paddlefit.errors import PaddlefitError

__all__ = [
    "REDACTED",
    "EnvVar",
    "is_secret",
    "looks_like_credential_value",
    "looks_like_secret",
    "parse_env_options",
    "redact_env",
    "refuse_credentials_in",
    "refuse_secret_values",
    "split_launcher_env",
]

#: What a redacted value is replaced by (doctor snapshots).
REDACTED = "<redacted>"
#: Rule 1: substrings of the upper-cased name.
SECRET_SUBSTRINGS = (
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "PRIVATE_KEY",
    "PRIVATEKEY",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "ACCESSKEY",
    "AUTHORIZATION",
    "COOKIE",
    "CONNECTION_STRING",
    "CONNECTIONSTRING",
    "WEBHOOK",
)
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:[^/?#@\s]+@")
#: Credentials recognisable by their value (the module docstring's list).
_CREDENTIAL_VALUES = re.compile(
    "|".join(
        (
            r"(?i:(?:^|[;&?\s])(?:password|passwd|pwd|accountkey|sharedaccesskey|sig)=[^;&\s])",
            r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.",
            r"-----BEGIN [A-Z ]*PRIVATE KEY",
            r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}"
            r"|xox[abposr]-[A-Za-z0-9-]{10,}|hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|npm_[A-Za-z0-9]{36}"
            r"|pypi-[A-Za-z0-9_-]{50,}|(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])|[sr]k_(?:live|test)_[A-Za-z0-9]{10,})",
            r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9]",
        )
    )
)
#: A variable name as POSIX shells, SkyPilot's ``envs`` schema and Kubernetes ``env[].name`` all accept it.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def looks_like_secret(name: str) -> bool:
    """Whether the variable ``name`` looks like it holds a credential (the rules in this module's docstring)."""
    up = name.upper()
    if any(s in up for s in SECRET_SUBSTRINGS):
        return True
    words = [w for w in re.split(r"[_.\-]+", up) if w]
    if not words:
        return False
    if any(w.endswith("TOKEN") for w in words):
        return True
    if (words[-1] == "PASS" and words[0] != "FLAGS") or (len(words) > 1 and "PWD" in words):
        return True
    if len(words) > 1 and words[-1] in ("PW", "PWD", "CREDS", "SK", "HOOK"):
        return True
    if words[-1] in ("KEY", "PAT") or words[-2:] == ["KEY", "ID"] or {"DSN", "JWT"} & set(words):
        return True
    if any(w == "AUTH" and words[i + 1 : i + 2] != ["SOCK"] for i, w in enumerate(words)):
        return True
    return words[0] == "AWS" and "KEY" in words


def looks_like_credential_value(value: str) -> bool:
    """Whether ``value`` holds a credential whatever the variable is called: a URL with a password
    (``scheme://user:password@host``, detect-secrets' BasicAuthDetector), a connection string's key, a JWT, a PEM
    private key or a token of a well-known format (the module docstring's list)."""
    return bool(_URL_PASSWORD.search(value) or _CREDENTIAL_VALUES.search(value))


def is_secret(name: str, value: str | None = None) -> bool:
    """:func:`looks_like_secret` of the name, or (``value`` given) :func:`looks_like_credential_value`."""
    return looks_like_secret(name) or (isinstance(value, str) and looks_like_credential_value(value))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the value of every secret (:func:`is_secret`) replaced by :data:`REDACTED`; names kept."""
    return {k: REDACTED if is_secret(k, v) else v for k, v in env.items()}


#: What Paddle's launcher may see of the environment, and so write into launch-logs/
#: (:mod:`paddlefit.train.distlaunch`): the variables Paddle, its collectives (NCCL, gloo, BKCL), the CUDA and XPU
#: runtimes, OpenMP/MKL, glog, Python and paddlefit read, by prefix, and a few of the system's by name. An
#: allow-list: a name nobody foresaw (``SSHPASS``, ``BW_SESSION``, ``GIT_CONFIG_VALUE_0``) stays out of every file.
LAUNCHER_VISIBLE_PREFIXES = (
    "PADDLE",
    "FLAGS_",
    "NCCL_",
    "GLOO_",
    "BKCL_",
    "CUDA_",
    "NVIDIA_",
    "XPU_",
    "HIP_",
    "GLOG_",
    "OMP_",
    "KMP_",
    "MKL_",
    "PYTHON",
    "LC_",
    "POD_",
)
LAUNCHER_VISIBLE_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "TZ",
        "TMPDIR",
        "USER",
        "HOSTNAME",
        "LD_LIBRARY_PATH",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    }
)


def split_launcher_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(visible, hidden)``: the variables Paddle's launcher may see (:data:`LAUNCHER_VISIBLE_PREFIXES`,
    :data:`LAUNCHER_VISIBLE_NAMES`, and never a secret by name or value: :func:`is_secret`), and all the others,
    which the workers get without the launcher seeing them."""
    visible: dict[str, str] = {}
    hidden: dict[str, str] = {}
    for k, v in env.items():
        allowed = k in LAUNCHER_VISIBLE_NAMES or k.startswith(LAUNCHER_VISIBLE_PREFIXES)
        (visible if allowed and not is_secret(k, v) else hidden)[k] = v
    return visible, hidden


def refuse_secret_values(env: Mapping[str, str], what: str) -> None:
    """The guard of every generator that writes ``NAME=value`` pairs: none may be a secret.

    Raises:
        PaddlefitError: a secret-looking pair (named, its value not shown), with the by-reference fix.
    """
    bad = sorted(k for k, v in env.items() if is_secret(k, v))
    if bad:
        raise PaddlefitError(
            f"{what}: {', '.join(bad)} look{'s' if len(bad) == 1 else ''} like a secret and would "
            "be written by value; pass it by reference (`--env NAME`) instead."
        )


def refuse_credentials_in(values: Mapping[str, str | None], where: str) -> None:
    """The guard of free-text options a generator writes as they are (SkyPilot's ``--setup``, the image's
    ``--command`` and requirements): none may hold a credential value (:func:`looks_like_credential_value`, such
    as ``pip install git+https://ghp_...@github.com/...``).

    Raises:
        PaddlefitError: naming the option (``values``: option -> text; None = not given), not the value, with the
            by-reference fix.
    """
    for option, text in values.items():
        if isinstance(text, str) and looks_like_credential_value(text):
            raise PaddlefitError(
                f"`{option}` holds what looks like a credential (a password in a URL, a token) and "
                f"would be written into {where} as typed; put it in a variable, pass that with "
                "`--env NAME` (by reference) and write `$NAME` instead."
            )


@dataclass(frozen=True)
class EnvVar:
    """One ``--env`` option: ``NAME=value`` (by value) or ``NAME`` (by reference: ``value`` is None, the value
    comes from the environment where the job starts)."""

    name: str
    value: str | None = None

    @property
    def secret(self) -> bool:
        """Whether the name looks like a secret (:func:`looks_like_secret`)."""
        return looks_like_secret(self.name)


def parse_env_options(items: Iterable[str], option: str = "--env") -> list[EnvVar]:
    """Parse ``--env NAME`` / ``--env NAME=value`` options, in order.

    Raises:
        PaddlefitError: a name that is not ``[A-Za-z_][A-Za-z0-9_]*``, a name given twice, a value with a control
            character, or a secret given by value (:func:`is_secret`; the message names the variable, never the
            value, and says to pass ``--env NAME`` to forward it by reference).
    """
    out: list[EnvVar] = []
    seen: set[str] = set()
    for item in items:
        name, eq, value = item.partition("=")
        if not ENV_NAME.fullmatch(name):
            raise PaddlefitError(
                f"`{option} {name[:60]}`: a variable name is letters, digits and '_', not starting "
                "with a digit (give NAME or NAME=value)."
            )
        if name in seen:
            raise PaddlefitError(f"`{option} {name}` is given twice; give each variable once.")
        seen.add(name)
        if not eq:
            out.append(EnvVar(name))
            continue
        if is_secret(name, value):
            raise PaddlefitError(
                f"`{option} {name}=...` gives a secret by value, which would be written into the "
                f"files; pass `{option} {name}` to forward it by reference (the value then comes "
                "from the environment where the job starts)."
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise PaddlefitError(f"`{option} {name}=...`: the value contains a control character (newline, tab...).")
        out.append(EnvVar(name, value))
    return out
