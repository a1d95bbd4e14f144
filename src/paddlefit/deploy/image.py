"""``paddlefit image`` without the rendering: options (and a job spec, a host snapshot) -> Dockerfile,
requirements.txt and .dockerignore written, the `docker build` + `docker run` line returned.

Example:
    >>> result = build_image(ImageRequest(out_dir=Path("docker"), requirements=["paddleocr==3.0.0"]))  # doctest: +SKIP
    >>> print(result.plan.run_command)  # doctest: +SKIP
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from pydantic import ConfigDict, Field, model_validator

from paddlefit import options
from paddlefit.catalog.flags import current_flags
from paddlefit.deploy.docker import DOCKERIGNORE, ImagePlan, choose_build, render_image
from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.loader import LoaderRequest
from paddlefit.units import TIB


class ImageRequest(LoaderRequest):
    """What to build. Job options left None come from ``config`` (a job spec), then Paddle's DataLoader defaults.

    Raises (when built):
        PaddlefitError: a field of the wrong type or out of range, or options that ask for different images;
            named by the option, with the fix.
    """

    model_config = ConfigDict(frozen=True)

    config: Path | None = Field(
        None,
        description="Job spec YAML (DataLoader, devices, batch, inputs) that sizes ``/dev/shm``.",
        json_schema_extra=options.CONFIG_ARG.field(),
    )
    paddle_version: str | None = Field(
        None, description="Paddle version of the base image (None: newest).", json_schema_extra=options.PADDLE.field()
    )
    cuda: str | None = Field(
        None, description="CUDA ``X.Y`` (None: newest the host driver runs).", json_schema_extra=options.CUDA.field()
    )
    cpu: bool = Field(False, description="A CPU image.", json_schema_extra=options.CPU.field())
    xpu: bool = Field(
        False,
        description="Paddle's published Kunlunxin XPU image (also chosen when the snapshot "
        "shows an XPU build or XPUs).",
        json_schema_extra=options.XPU.field(),
    )
    from_snapshot: Path | None = Field(
        None,
        description="``paddlefit doctor --snapshot`` file of the host (driver, GPUs).",
        json_schema_extra=options.FROM_SNAPSHOT.field(),
    )
    out_dir: Path = Field(
        Path("."),
        description="Directory for Dockerfile, requirements.txt and .dockerignore.",
        json_schema_extra=options.OUT.field(),
    )
    requirements: list[str] = Field(
        default_factory=list,
        description="Pinned ``name==version`` dependencies.",
        json_schema_extra=options.REQUIREMENT.field(),
    )
    command: str = Field(
        options.COMMAND.default, description="The container's command line.", json_schema_extra=options.COMMAND.field()
    )
    fixed_shape_cnn: bool = Field(
        False,
        description="Bake in ``FLAGS_cudnn_exhaustive_search=1`` (GPU images; fixed input shapes only).",
        json_schema_extra=options.FIXED_SHAPE_CNN.field(),
    )
    ipc_host: bool = Field(
        False, description="``--ipc=host`` instead of ``--shm-size``.", json_schema_extra=options.IPC_HOST.field()
    )
    env: list[str] = Field(
        default_factory=list,
        description="``--env`` options: ``NAME=value`` baked in as "
        "``ENV`` (a secret-looking one is refused), ``NAME`` passed by reference as ``docker run "
        "-e NAME`` (:mod:`paddlefit.process.secretenv`).",
        json_schema_extra=options.ENV.field(),
    )

    @model_validator(mode="after")
    def _one_image(self) -> ImageRequest:
        """Refuse option values no image can have: an empty version, CPU and XPU, CUDA options on them."""
        for name, v in (("--paddle", self.paddle_version), ("--cuda", self.cuda)):
            if v is not None and not v.strip():
                raise PaddlefitError(f"`{name}` is empty; give a version such as 3.0.0 / 12.6, or leave it out.")
        if self.cpu and self.xpu:
            raise PaddlefitError("`--cpu` and `--xpu` ask for different images; give one.")
        if (self.cpu or self.xpu) and (self.cuda is not None or self.fixed_shape_cnn):
            given = "`--cuda`" if self.cuda is not None else "`--fixed-shape-cnn` (a cuDNN setting)"
            raise PaddlefitError(
                f"{given} does not apply to a `--{'cpu' if self.cpu else 'xpu'}` image; drop one of them."
            )
        return self


@dataclass(frozen=True)
class ImageResult:
    """The rendered image (base build, files' text, run line) and the files written."""

    plan: ImagePlan
    files: list[Path]


def build_image(req: ImageRequest) -> ImageResult:
    """Pick the base image, render the files and write them into ``req.out_dir`` (each write atomic).

    Raises:
        PaddlefitError: a bad option value (named), no matching official image, an unpinned requirement, or an
            output path that is not writable.
    """
    from paddlefit.diagnose.snapshot import load_snapshot
    from paddlefit.fileio import atomic_write_text, check_output_path
    from paddlefit.jobspec.inputs import parse_input_spec
    from paddlefit.jobspec.spec import load_job_spec, merge_loader_options
    from paddlefit.process.secretenv import parse_env_options, refuse_credentials_in

    evars = parse_env_options(req.env)
    refuse_credentials_in(
        {"--command": req.command, **{f"--requirement #{i + 1}": r for i, r in enumerate(req.requirements)}},
        "the Dockerfile",
    )
    spec = load_job_spec(req.config, options.CONFIG_ARG.flag) if req.config is not None else None
    opts = merge_loader_options(
        spec,
        num_workers=req.num_workers,
        prefetch_factor=req.prefetch_factor,
        batch_size=req.batch_size,
        inputs=req.inputs,
        devices=req.devices,
    )
    specs = [parse_input_spec(x) for x in opts.inputs or []]
    snap = load_snapshot(req.from_snapshot, "--from-snapshot") if req.from_snapshot is not None else None
    out_dir = req.out_dir
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise PaddlefitError(f"`--out {out_dir}` is a file or a symlink; give a directory.")
    # a snapshot with a GPU build but no visible GPU is a host set up wrong (doctor PF104), not a CPU host
    # an XPU host (XPU build of Paddle, or xpu-smi lists XPUs and there is no NVIDIA GPU) gets Paddle's XPU image
    xpu = req.xpu or (
        not req.cpu
        and req.cuda is None
        and snap is not None
        and (bool(snap.paddle_xpu) or (bool(snap.xpus) and not snap.gpus))
    )
    if xpu and req.fixed_shape_cnn:
        raise PaddlefitError("`--fixed-shape-cnn` (a cuDNN setting) does not apply to a Kunlunxin XPU image.")
    gpu = not req.cpu and not xpu and (snap is None or bool(snap.gpus) or bool(snap.paddle_cuda))
    build = choose_build(req.paddle_version, req.cuda, snap, gpu=gpu, xpu=xpu)
    need = 0
    if opts.use_shared_memory and opts.batch_size and specs:
        need = (
            opts.devices
            * opts.num_workers
            * opts.prefetch_factor
            * opts.batch_size
            * sum(s.bytes_per_sample for s in specs)
        )
    if need > TIB:
        raise PaddlefitError(
            f"The DataLoader would need {need / TIB:,.0f} TiB of /dev/shm; check --num-workers, "
            "--batch-size and --input (or set use_shared_memory: false)."
        )
    flags = {"FLAGS_cudnn_exhaustive_search": "1"} if req.fixed_shape_cnn and build.device == "gpu" else {}
    try:
        argv = shlex.split(req.command)
    except ValueError as exc:
        raise PaddlefitError(f"`--command` does not parse as a shell command: {exc}.") from None
    if not argv:
        raise PaddlefitError("`--command` is empty.")
    plan = render_image(
        build,
        list(req.requirements),
        argv,
        shm_need_bytes=need,
        flags=flags,
        known_flags=current_flags(),
        ipc_host=req.ipc_host,
        env={v.name: v.value for v in evars if v.value is not None},
        env_refs=tuple(v.name for v in evars if v.value is None),
    )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PaddlefitError(f"`--out {out_dir}` cannot be created ({exc.strerror or exc}).") from None
    for name in ("Dockerfile", "requirements.txt", ".dockerignore"):
        check_output_path(out_dir / name, "--out")
    atomic_write_text(out_dir / "requirements.txt", plan.requirements)
    atomic_write_text(out_dir / ".dockerignore", DOCKERIGNORE)
    atomic_write_text(out_dir / "Dockerfile", plan.dockerfile)
    return ImageResult(plan, [out_dir / "Dockerfile", out_dir / "requirements.txt", out_dir / ".dockerignore"])
