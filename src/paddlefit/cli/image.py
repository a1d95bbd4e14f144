"""``paddlefit image``: a Dockerfile and `docker run` line that fit the host (driver, GPU, /dev/shm)."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer
from rich.markup import escape

from paddlefit.cli.common import err, fail, handle_errors
from paddlefit.deploy.docker import DOCKERIGNORE, choose_build, render_image
from paddlefit.diagnose.checks import FLAG_VALUES
from paddlefit.diagnose.snapshot import load_snapshot
from paddlefit.fileio import atomic_write_text, check_output_path
from paddlefit.spec import load_job_spec, merge_loader_options, parse_input_spec


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
    prefetch_factor: int = typer.Option(None, "--prefetch-factor", help="DataLoader prefetch_factor [2]."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Per-device batch size (sizes /dev/shm)."),
    inputs: list[str] = typer.Option(None, "--input", "-i", help="Per-sample input spec (sizes /dev/shm)."),
    devices: int = typer.Option(None, "--devices", help="Trainer processes in the container [1]."),
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
    spec = load_job_spec(config) if config is not None else None
    opts = merge_loader_options(spec, num_workers=num_workers, prefetch_factor=prefetch_factor,
                                batch_size=batch_size, inputs=inputs, devices=devices)  # fmt: skip
    num_workers, prefetch_factor, batch_size = opts.num_workers, opts.prefetch_factor, opts.batch_size
    inputs, devices, use_shm = opts.inputs, opts.devices, opts.use_shared_memory
    if num_workers < 0 or prefetch_factor < 1 or devices < 1:
        raise fail("`--num-workers` must be >= 0, `--prefetch-factor` and `--devices` >= 1.")
    if batch_size is not None and batch_size < 1:
        raise fail(f"`--batch-size` must be >= 1 (got {batch_size}).")
    for name, v in (("--paddle", paddle_version), ("--cuda", cuda)):
        if v is not None and not v.strip():
            raise fail(f"`{name}` is empty; give a version such as 3.0.0 / 12.6, or leave it out.")
    specs = [parse_input_spec(x) for x in inputs or []]
    snap = load_snapshot(from_snapshot, "--from-snapshot") if from_snapshot is not None else None
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise fail(f"`--out {out_dir}` is a file or a symlink; give a directory.")
    # a snapshot with a GPU build but no visible GPU is a host set up wrong (doctor PF104), not a CPU host
    gpu = not cpu and (snap is None or bool(snap.gpus) or bool(snap.paddle_cuda))
    build = choose_build(paddle_version, cuda, snap, gpu=gpu)
    need = 0
    if use_shm and batch_size and specs:
        need = devices * num_workers * prefetch_factor * batch_size * sum(s.bytes_per_sample for s in specs)
    if need > 1024**4:
        raise fail(f"The DataLoader would need {need / 1024**4:,.0f} TiB of /dev/shm; check --num-workers, "
                   "--batch-size and --input (or set use_shared_memory: false).")  # fmt: skip
    flags = {"FLAGS_cudnn_exhaustive_search": "1"} if fixed_shape_cnn and build.device == "gpu" else {}
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise fail(f"`--command` does not parse as a shell command: {exc}.") from None
    if not argv:
        raise fail("`--command` is empty.")
    plan = render_image(build, list(requirement or []), argv, shm_need_bytes=need, flags=flags,
                        known_flags=list(FLAG_VALUES), ipc_host=ipc_host)  # fmt: skip
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"`--out {out_dir}` cannot be created ({exc.strerror or exc}).") from None
    for name in ("Dockerfile", "requirements.txt", ".dockerignore"):
        check_output_path(out_dir / name, "--out")
    atomic_write_text(out_dir / "requirements.txt", plan.requirements)
    atomic_write_text(out_dir / ".dockerignore", DOCKERIGNORE)
    atomic_write_text(out_dir / "Dockerfile", plan.dockerfile)
    err.print(f"wrote {escape(str(out_dir / 'Dockerfile'))} (FROM {build.docker_image}), requirements.txt and "
              ".dockerignore", highlight=False)  # fmt: skip
    print(plan.run_command)
