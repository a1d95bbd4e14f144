"""``paddlefit image``: a Dockerfile and `docker run` line that fit the host (driver, GPU, /dev/shm)."""

from __future__ import annotations

from pathlib import Path

import typer

from paddlefit.cli.common import err, handle_errors, shown


@handle_errors
def image_command(
    config: Path = typer.Argument(None, help="Job spec YAML (DataLoader, devices, batch, inputs) to size the image."),
    paddle_version: str = typer.Option(None, "--paddle", help="Paddle version of the base image (default newest)."),
    cuda: str = typer.Option(None, "--cuda", help="CUDA X.Y of the base image (default: newest the driver runs)."),
    cpu: bool = typer.Option(False, "--cpu", help="CPU image (no --gpus)."),
    xpu: bool = typer.Option(
        False,
        "--xpu",
        help="Kunlunxin XPU image: Paddle's published XPU image + the "
        "paddlepaddle-xpu wheel (chosen by itself for a snapshot of an XPU host).",
    ),
    from_snapshot: Path = typer.Option(None, "--from-snapshot", help="`paddlefit doctor --snapshot` of the host."),
    out_dir: Path = typer.Option(Path("."), "--out", help="Directory for Dockerfile and requirements.txt."),
    requirement: list[str] = typer.Option(None, "--requirement", "-r", help="Pinned dependency `name==version`."),
    command: str = typer.Option("python train.py", "--command", help="Container command."),
    num_workers: int = typer.Option(None, "--num-workers", help="DataLoader workers per trainer (sizes /dev/shm)."),
    prefetch_factor: int = typer.Option(None, "--prefetch-factor", help="DataLoader prefetch_factor [2]."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Per-device batch size (sizes /dev/shm)."),
    inputs: list[str] = typer.Option(None, "--input", "-i", help="Per-sample input spec (sizes /dev/shm)."),
    devices: int = typer.Option(None, "--devices", help="Trainer processes in the container [1]."),
    fixed_shape_cnn: bool = typer.Option(
        False, "--fixed-shape-cnn", help="Bake in FLAGS_cudnn_exhaustive_search=1 (fixed input shapes only)."
    ),
    ipc_host: bool = typer.Option(False, "--ipc-host", help="Share the host IPC namespace instead of --shm-size."),
    env: list[str] = typer.Option(
        None,
        "--env",
        help="A container variable, repeatable: NAME=value (baked in as "
        "ENV), or NAME to pass it by reference (`docker run -e NAME`, never in the "
        "image: the way to pass a secret; a secret-looking NAME=value is refused).",
    ),
) -> None:
    """Write OUT/Dockerfile and OUT/requirements.txt and print the matching `docker build` + `docker run` line.

    The base image is an official `paddlepaddle/paddle` tag whose CUDA the host driver runs (from
    `--from-snapshot`); for a Kunlunxin XPU host (`--xpu`, or a snapshot of an XPU build / XPUs) it is Paddle's
    published XPU image for the host's chips with the `paddlepaddle-xpu` wheel its docs give, run `--privileged`
    (no published image for the chips: exit 2, never a CUDA image). Dependencies are pinned, the container runs as
    a non-root user, and /dev/shm is sized for the DataLoader (2x devices x workers x prefetch x batch bytes, at
    least 1 GiB).
    `--fixed-shape-cnn` sets FLAGS_cudnn_exhaustive_search=1: cuDNN tries every conv algorithm once per
    shape and caches the fastest, which pays off only when input shapes do not change.

    Examples:
      paddlefit doctor --snapshot host.json    # on the training host
      paddlefit image --from-snapshot host.json --num-workers 8 -b 64 -i float32[3,224,224] --fixed-shape-cnn
      paddlefit image --paddle 3.0.0 --cuda 11.8 -r paddleocr==3.0.0 --out docker/
      paddlefit image job.yaml --from-snapshot host.json --fixed-shape-cnn
      paddlefit image --xpu --paddle 3.2.0 --out docker/   # Kunlunxin P800
    """
    from paddlefit.deploy.image import ImageRequest, build_image

    result = build_image(
        ImageRequest(
            config=config,
            paddle_version=paddle_version,
            cuda=cuda,
            cpu=cpu,
            xpu=xpu,
            from_snapshot=from_snapshot,
            out_dir=out_dir,
            requirements=list(requirement or []),
            command=command,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor,
            batch_size=batch_size,
            inputs=list(inputs or []),
            devices=devices,
            fixed_shape_cnn=fixed_shape_cnn,
            ipc_host=ipc_host,
            env=list(env or []),
        )
    )
    err.print(
        f"wrote {shown(str(out_dir / 'Dockerfile'))} (FROM {result.plan.build.docker_image}), requirements.txt "
        "and .dockerignore",
        highlight=False,
    )
    print(result.plan.run_command)
