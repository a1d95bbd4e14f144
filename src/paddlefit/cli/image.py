"""``paddlefit image``: a Dockerfile and `docker run` line that fit the host (driver, GPU, /dev/shm)."""

from __future__ import annotations

from paddlefit import options
from paddlefit.cli import common
from paddlefit.cli.common import err, shown
from paddlefit.cli.params import Args, command


@command(
    options.CONFIG_ARG_IMAGE,
    options.PADDLE,
    options.CUDA,
    options.CPU,
    options.XPU,
    options.FROM_SNAPSHOT,
    options.OUT_IMAGE,
    options.REQUIREMENT,
    options.COMMAND,
    options.NUM_WORKERS_IMAGE,
    options.PREFETCH_FACTOR,
    options.BATCH_SIZE_IMAGE,
    options.INPUT_IMAGE,
    options.DEVICES_IMAGE,
    options.FIXED_SHAPE_CNN,
    options.IPC_HOST,
    options.ENV,
)
def image_command(args: Args) -> None:
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
            config=args.config,
            paddle_version=args.paddle_version,
            cuda=args.cuda,
            cpu=args.cpu,
            xpu=args.xpu,
            from_snapshot=args.from_snapshot,
            out_dir=args.out_dir,
            requirements=list(args.requirement or []),
            command=args.command,
            **common.loader_fields(args),
            fixed_shape_cnn=args.fixed_shape_cnn,
            ipc_host=args.ipc_host,
            env=list(args.env or []),
        )
    )
    err.print(
        f"wrote {shown(str(args.out_dir / 'Dockerfile'))} (FROM {result.plan.build.docker_image}), requirements.txt "
        "and .dockerignore",
        highlight=False,
    )
    print(result.plan.run_command)
