"""``paddlefit image``: a Dockerfile and `docker run` line that fit the host (driver, GPU, /dev/shm)."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from paddlefit.cli.common import err, fail, handle_errors
from paddlefit.deploy.docker import choose_build, render_image
from paddlefit.diagnose.checks import FLAG_VALUES
from paddlefit.diagnose.snapshot import load_snapshot
from paddlefit.fileio import atomic_write_text, check_output_path
from paddlefit.spec import load_job_spec, parse_input_spec


@handle_errors
def image_command(
    config: Path = typer.Argument(None, help="Job spec YAML (DataLoader, devices, batch, inputs) to size the image."),
    paddle_version: str = typer.Option(None, "--paddle", help="Paddle version of the base image (default newest)."),
    cuda: str = typer.Option(None, "--cuda", help="CUDA X.Y of the base image (default: newest the driver runs)."),
    cpu: bool = typer.Option(False, "--cpu", help="CPU image (no --gpus)."),
    from_snapshot: Path = typer.Option(None, "--from-snapshot", help="`paddlefit doctor --snapshot` of the host."),
    out_dir: Path = typer.Option(Path("."), "--out", help="Directory for Dockerfile and requirements.txt."),
    requirement: list[str] = typer.Option(None, "--requirement", "-r", help="Pinned dependency `name==version`."),
    command: str = typer.Option("python train.py", "--command", help="Container command."),
    num_workers: int = typer.Option(None, "--num-workers", help="DataLoader workers per trainer (sizes /dev/shm)."),
    prefetch_factor: int = typer.Option(2, "--prefetch-factor", help="DataLoader prefetch_factor."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Per-device batch size (sizes /dev/shm)."),
    inputs: list[str] = typer.Option(None, "--input", "-i", help="Per-sample input spec (sizes /dev/shm)."),
    devices: int = typer.Option(1, "--devices", help="Trainer processes in the container."),
    fixed_shape_cnn: bool = typer.Option(False, "--fixed-shape-cnn",
                                         help="Bake in FLAGS_cudnn_exhaustive_search=1 (fixed input shapes only)."),
    ipc_host: bool = typer.Option(False, "--ipc-host", help="Share the host IPC namespace instead of --shm-size."),
) -> None:
    """Write OUT/Dockerfile and OUT/requirements.txt and print the matching `docker build` + `docker run` line.

    The base image is an official `paddlepaddle/paddle` tag whose CUDA the host driver runs (from
    `--from-snapshot`), dependencies are pinned, the container runs as a non-root user, and /dev/shm is
    sized for the DataLoader (2x devices x workers x prefetch x batch bytes, at least 1 GiB).
    `--fixed-shape-cnn` sets FLAGS_cudnn_exhaustive_search=1: cuDNN tries every conv algorithm once per
    shape and caches the fastest, which pays off only when input shapes do not change.

    Examples:
      paddlefit doctor --snapshot host.json    # on the training host
      paddlefit image --from-snapshot host.json --num-workers 8 -b 64 -i float32[3,224,224] --fixed-shape-cnn
      paddlefit image --paddle 3.0.0 --cuda 11.8 -r paddleocr==3.0.0 --out docker/
      paddlefit image job.yaml --from-snapshot host.json --fixed-shape-cnn
    """
    if config is not None:
        spec = load_job_spec(config)
        num_workers = num_workers if num_workers is not None else spec.data.num_workers
        prefetch_factor = spec.data.prefetch_factor if prefetch_factor == 2 else prefetch_factor
        batch_size = batch_size or spec.batch_size
        inputs = inputs or spec.inputs
        devices = spec.devices if devices == 1 else devices
    num_workers = num_workers or 0
    for name, v in (("--num-workers", num_workers), ("--prefetch-factor", prefetch_factor - 1),
                    ("--devices", devices - 1)):  # fmt: skip
        if v < 0:
            raise fail(f"`{name}` is out of range.")
    if batch_size is not None and batch_size < 1:
        raise fail(f"`--batch-size` must be >= 1 (got {batch_size}).")
    specs = [parse_input_spec(x) for x in inputs or []]
    snap = None
    if from_snapshot is not None:
        snap = load_snapshot(from_snapshot, "--from-snapshot")
    if out_dir.exists() and not out_dir.is_dir():
        raise fail(f"`--out {out_dir}` is a file; give a directory.")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("Dockerfile", "requirements.txt"):
        check_output_path(out_dir / name, "--out")
    gpu = not cpu and not (snap is not None and not snap.gpus)
    build = choose_build(paddle_version, cuda, snap, gpu=gpu)
    need = devices * num_workers * prefetch_factor * batch_size * sum(s.bytes_per_sample for s in specs) \
        if batch_size and specs else 0
    flags = {"FLAGS_cudnn_exhaustive_search": "1"} if fixed_shape_cnn and gpu else {}
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise fail(f"`--command` does not parse as a shell command: {exc}.") from None
    if not argv:
        raise fail("`--command` is empty.")
    plan = render_image(build, list(requirement or []), argv, shm_need_bytes=need, flags=flags,
                        known_flags=list(FLAG_VALUES), ipc_host=ipc_host)  # fmt: skip
    atomic_write_text(out_dir / "requirements.txt", plan.requirements)
    atomic_write_text(out_dir / "Dockerfile", plan.dockerfile)
    err.print(f"wrote {out_dir / 'Dockerfile'} (FROM {build.docker_image}) and {out_dir / 'requirements.txt'}",
              highlight=False)  # fmt: skip
    print(plan.run_command)
