"""Write a Dockerfile and a `docker run` line that fit the host: the base image the driver can run, pinned
dependencies, a non-root user, only flags that exist, and a /dev/shm sized for the DataLoader.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from paddlefit.catalog.builds import PaddleBuild, load_builds
from paddlefit.catalog.cuda import toolkit_min_driver
from paddlefit.catalog.published import figures
from paddlefit.diagnose.snapshot import Snapshot
from paddlefit.errors import PaddlefitError
from paddlefit.units import GIB

_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9._,-]+\])?==([0-9][A-Za-z0-9.+!-]*)$")

#: Oldest CUDA whose compiler targets each compute capability (``min_cuda.ccX.Y`` rows of
#: ``catalog/data/published_figures.csv``, from the CUDA release notes: sm_89/sm_90 from 11.8, sm_100/sm_120 from
#: 12.8): (major, minor) -> CUDA version.
ARCH_MIN_CUDA = {
    tuple(int(p) for p in cc.removeprefix("cc").split(".")): f.text for cc, f in figures("min_cuda").items()
}

#: Files kept out of the build context (checkpoints, virtualenvs, VCS data, credentials).
DOCKERIGNORE = "runs/\n.git/\n.venv/\n__pycache__/\n*.pyc\n.env\n*.env\n*.pem\n*.key\n.ssh/\n.aws/\n"


def _ver(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", v))


def min_driver(build: PaddleBuild) -> str:
    """The stricter of the image's documented minimum driver and its CUDA's own minimum (CUDA release notes,
    ``catalog/data/cuda_drivers.csv``, the table doctor's PF102 uses), so `image` never picks what `doctor` warns
    about."""
    docs = build.min_driver or "0"
    cuda = (toolkit_min_driver(build.cuda) if build.cuda else None) or "0"
    return max(docs, cuda, key=_ver)


def choose_build(
    paddle: str | None = None,
    cuda: str | None = None,
    snapshot: Snapshot | None = None,
    gpu: bool = True,
    xpu: bool = False,
) -> PaddleBuild:
    """Pick the official image: the requested Paddle version (default: newest with an image) and CUDA, else
    the newest CUDA whose minimum driver the snapshot's driver meets (strict CUDA minimum first, then the
    minor-version-compatibility minimum the image docs print), that compiles for every GPU's architecture
    (``ARCH_MIN_CUDA``; CUDA 13 is excluded below CC 7.5). ``xpu``: Paddle's published Kunlunxin XPU image
    (:func:`choose_xpu_build`) instead of a CUDA one.

    Raises:
        PaddlefitError: no image matches; the message lists the ones that exist.
    """
    if xpu:
        return choose_xpu_build(paddle, snapshot)
    builds = [b for b in load_builds() if b.device == ("gpu" if gpu else "cpu")]
    versions = sorted({b.paddle for b in builds}, key=_ver)
    want = paddle or (versions[-1] if versions else None)
    pool = [b for b in builds if b.paddle == want]
    if cuda:
        pool = [b for b in pool if b.cuda == cuda]
    if snapshot and gpu and snapshot.driver_version:
        drv = _ver(snapshot.driver_version)
        strict = [b for b in pool if drv >= _ver(min_driver(b))]
        # else CUDA minor-version compatibility: the image docs' own minimum (doctor PF102 then warns)
        pool = strict or [b for b in pool if not b.min_driver or drv >= _ver(b.min_driver)]
    if snapshot and gpu:
        ccs = [_ver(g.compute_capability) for g in snapshot.gpus if g.compute_capability]
        if any(cc < (7, 5) for cc in ccs):
            pool = [b for b in pool if b.cuda and _ver(b.cuda) < (13,)]
        need = max((_ver(v) for cc in ccs for arch, v in ARCH_MIN_CUDA.items() if cc[:2] >= arch), default=())
        pool = [b for b in pool if b.cuda and _ver(b.cuda) >= need]
    if not pool:
        have = (
            ", ".join(
                f"{b.paddle} {b.device}{' CUDA ' + b.cuda if b.cuda else ''} (driver >= {b.min_driver})" for b in builds
            )
            or "none"
        )
        drv = f" with driver {snapshot.driver_version}" if snapshot and snapshot.driver_version else ""
        raise PaddlefitError(
            f"No official Paddle image for paddle={want!r}{' cuda=' + cuda if cuda else ''}{drv}. "
            f"Known images: {have}. Pick one with `--paddle`/`--cuda`, or upgrade the driver."
        )
    return max(pool, key=lambda b: _ver(b.cuda or "0"))


def choose_xpu_build(paddle: str | None = None, snapshot: Snapshot | None = None) -> PaddleBuild:
    """Paddle's published Kunlunxin XPU image (``device`` xpu rows of ``catalog/data/paddle_builds.csv``: Paddle's
    XPU install guide and PaddleX's P800 guide): the one for the XPU models the snapshot's ``xpu-smi`` lists (an
    R300 host gets the R200/R300 image, a P800 host the P800 one), else the requested or newest Paddle version.

    Raises:
        PaddlefitError: no published XPU image for that Paddle version or those chips (never a CUDA image instead).
    """
    builds = [b for b in load_builds() if b.device == "xpu"]
    have = "; ".join(f"Paddle {b.paddle} for {', '.join(b.chip_list)} ({b.docker_image})" for b in builds)
    pool = [b for b in builds if paddle is None or b.paddle == paddle]
    models = sorted({x.model for x in snapshot.xpus}) if snapshot else []
    if models:
        pool = [b for b in pool if all(any(m.upper().startswith(c.upper()) for c in b.chip_list) for m in models)]
    if not pool:
        what = (f"paddle={paddle!r} " if paddle else "") + (f"on {', '.join(models)}" if models else "")
        raise PaddlefitError(
            f"No published Paddle XPU image {what.strip()}: Paddle publishes {have}. Pick one with "
            "`--paddle`, or build Paddle for your chip from source (Paddle's XPU install guide); "
            "paddlefit does not write a CUDA image for an XPU host."
        )
    return max(pool, key=lambda b: _ver(b.paddle))


@dataclass(frozen=True)
class ImagePlan:
    """What `paddlefit image` writes and prints."""

    build: PaddleBuild
    dockerfile: str
    requirements: str
    run_command: str
    shm_bytes: int


def render_image(
    build: PaddleBuild,
    requirements: list[str],
    command: list[str],
    *,
    shm_need_bytes: int = 0,
    flags: dict[str, str] | None = None,
    known_flags: list[str] | None = None,
    ipc_host: bool = False,
    tag: str = "paddlefit-job",
    env: dict[str, str] | None = None,
    env_refs: tuple[str, ...] = (),
) -> ImagePlan:
    """Render the Dockerfile, requirements.txt and `docker run` line.

    Args:
        requirements: pinned `name==version` lines (unpinned lines are refused: builds must repeat).
        command: the container's command, e.g. ``["python", "train.py"]``.
        shm_need_bytes: DataLoader need (devices x workers x prefetch x batch bytes); /dev/shm gets 2x,
            at least 1 GiB (Paddle's own run examples pass ``--shm-size=8G``).
        flags: ``FLAGS_*`` to bake in as ENV; each must be in ``known_flags`` when that list is given.
        ipc_host: ``--ipc=host`` instead of ``--shm-size``.
        env: variables to bake in as ``ENV NAME="value"`` (no secret: a value in an image is readable by anyone
            who pulls it, ``docker history`` shows it).
        env_refs: variables passed by reference: ``-e NAME`` on the `docker run` line (Docker reads the value from
            the calling environment) and a comment in the Dockerfile; never ``ENV`` or ``ARG`` (Docker's docs:
            build arguments and environment variables are inappropriate for secrets, both persist in the image).

    Raises:
        PaddlefitError: an unpinned requirement, an unknown flag, a secret or a backslash in ``env``.
    """
    from paddlefit.process.secretenv import refuse_secret_values

    env = env or {}
    refuse_secret_values(env, "the Dockerfile's ENV")
    if any("\\" in v for v in env.values()):  # Docker versions disagree on \\ inside double quotes
        raise PaddlefitError(
            "`--env NAME=value`: a backslash in an image ENV value reads differently across Docker "
            "versions; leave it out or pass the variable at run time."
        )
    bad = [r for r in requirements if not _PINNED.match(r.strip())]
    if bad:
        raise PaddlefitError(f"Requirements must be pinned as `name==version`; fix: {', '.join(map(repr, bad))}.")
    names = [_PINNED.match(r.strip()).group(1).lower().replace("_", "-") for r in requirements]  # type: ignore[union-attr]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PaddlefitError(f"Requirement {dup[0]!r} is pinned more than once; keep one version.")
    if any(n.startswith("paddlepaddle") for n in names):
        raise PaddlefitError(
            "Do not pin paddlepaddle/paddlepaddle-gpu: the base image provides Paddle; choose its "
            "version with `--paddle`."
        )
    if any(not a or any(ord(c) < 32 for c in a) for a in command):
        raise PaddlefitError("`--command` arguments must be non-empty and contain no control characters.")
    flags = flags or {}
    unknown = [f for f in flags if known_flags is not None and f not in known_flags]
    if unknown:
        raise PaddlefitError(f"{', '.join(unknown)} is not a flag of this Paddle build; drop it.")
    what = (
        f"(CUDA {build.cuda}, cuDNN {build.cudnn}, TensorRT {build.trt})"
        if build.cuda
        else f"(Kunlunxin XPU: {', '.join(build.chip_list)})"
        if build.device == "xpu"
        else "(CPU)"
    )
    lines = [
        f"# Generated by paddlefit for Paddle {build.paddle} {what}",
        f"# Base image source: {build.source}",
        f"FROM {build.docker_image}",
        "ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1",
    ]
    if build.install:  # Paddle's XPU images carry the XPU runtime but not Paddle: the documented wheel
        lines += ["# Paddle itself, as the same install docs give it", f"RUN {build.install}"]
    for k, v in sorted(flags.items()):
        lines.append(f"ENV {k}={v}")
    for k, v in sorted(env.items()):  # double quotes, " and $ (substitution) escaped: Docker's shell lexer
        lines.append(f'ENV {k}="' + v.replace('"', '\\"').replace("$", "\\$") + '"')
    if env_refs:
        lines.append(f"# passed by reference at run time (docker run -e NAME), not baked in: {' '.join(env_refs)}")
    lines += [
        "RUN useradd --create-home --uid 1000 trainer",
        "WORKDIR /workspace",
        "# dependencies first: code changes do not invalidate this layer",
        "COPY requirements.txt /workspace/requirements.txt",
        "RUN python -m pip install --no-cache-dir -r /workspace/requirements.txt",
        "COPY --chown=trainer:trainer . /workspace",
        "USER trainer",
        "CMD " + json.dumps(list(command)),
    ]
    shm = max(GIB, 2 * shm_need_bytes)
    shm_g = math.ceil(shm / GIB)
    # XPU containers: Paddle's XPU guide starts them with --privileged (the /dev/xpu* devices)
    gpus = {"gpu": "--gpus all ", "xpu": "--privileged "}.get(build.device, "")
    mem = "--ipc=host" if ipc_host else f"--shm-size={shm_g}g"
    # the container runs as the calling user so checkpoints in the bind-mounted runs/ belong to them
    refs = "".join(f"-e {k} " for k in env_refs)
    run = (
        f"docker build -t {tag} . && mkdir -p runs && docker run --rm {gpus}{mem} "
        f'--user "$(id -u):$(id -g)" {refs}-v "$PWD/runs:/workspace/runs" {tag}'
    )
    return ImagePlan(
        build, "\n".join(lines) + "\n", "\n".join(r.strip() for r in requirements) + "\n", run, shm_g * GIB
    )
