"""The checks of ``paddlefit doctor``: pure functions over a :class:`~paddlefit.diagnose.snapshot.Snapshot`.

Each is registered once with ``@check("PF1xx", "slug")`` (:mod:`paddlefit.diagnose.registry`), cites its source in
its docstring and returns findings with a fix. IDs: PF100-PF104 Paddle build, driver and devices; PF105-PF108
devices and job (``/dev/shm``, cores, disk); PF109-PF111 ``FLAGS_*`` and folklore variables; PF112-PF113 NCCL;
PF120 GPU health (NVML); PF121 OpenMP wait policy; PF122 NVIDIA's TF32 override; PF123 Kunlunxin XPUs
(``xpu-smi``). Data they compare against (CUDA driver minima, Paddle's flags) is in ``paddlefit.catalog``
(``catalog/data/cuda_drivers.csv``, ``catalog/data/paddle_flags.csv``).

Example:
    >>> from paddlefit.diagnose import collect_snapshot
    >>> [f.title for f in run_checks(collect_snapshot()) if f.severity in ("warn", "error")]  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import statistics
from typing import Any

from paddlefit.catalog.cuda import major_floor_driver, toolkit_min_driver, version_tuple
from paddlefit.catalog.flags import get_flag, removed_flags
from paddlefit.diagnose.registry import REGISTRY, Finding, JobContext, check, found
from paddlefit.diagnose.repeats import MIN_ROUNDS, ratio_bound
from paddlefit.diagnose.snapshot import Snapshot
from paddlefit.diagnose.xpu_checks import XPU_WHEEL, xpu_build_vs_devices
from paddlefit.process.mklpath import MKL_AVX2_ENV, SET_MARK_ENV
from paddlefit.units import GIB, MIB

__all__ = ["run_checks"]


@check("PF101", "paddle-import")
def check_paddle_import(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """Paddle must import (the `paddle.utils.run_check()` idea, reported instead of raised)."""
    if s.paddle_version is None:
        return [
            found(
                "error",
                "Paddle does not import",
                fix="pip install paddlepaddle==3.3.1  (CPU)  or paddlepaddle-gpu from Paddle's index",
            )
        ]
    build = f"CUDA {s.paddle_cuda}" if s.paddle_cuda else "Kunlunxin XPU" if s.paddle_xpu else "CPU"
    return [found("ok", f"Paddle {s.paddle_version} ({build} build) imports")]


@check("PF102", "cuda-driver-too-old")
def check_cuda_driver(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """The driver must be new enough for the CUDA the Paddle wheel was built with.

    Source: CUDA release notes, table 3 (minimum driver per toolkit) and the minor-version compatibility rules.
    """
    if not s.paddle_cuda or not s.driver_version:
        return []
    cuda = ".".join(s.paddle_cuda.split(".")[:2])
    floor = major_floor_driver(cuda)
    need = toolkit_min_driver(cuda)
    drv = version_tuple(s.driver_version)
    if floor and drv < version_tuple(floor):
        return [
            found(
                "error",
                f"driver {s.driver_version} is too old for Paddle's CUDA {cuda} build",
                f"CUDA {cuda.split('.')[0]}.x needs driver >= {floor} (minor-version compatibility)",
                f"upgrade the NVIDIA driver to >= {need or floor}, or install a Paddle wheel built for an older CUDA",
            )
        ]
    if need and drv < version_tuple(need):
        return [
            found(
                "warn",
                f"driver {s.driver_version} is below CUDA {cuda}'s own minimum {need}",
                "runs through minor-version compatibility; PTX JIT of newer kernels can fail",
                f"upgrade the NVIDIA driver to >= {need}",
            )
        ]
    return [found("ok", f"driver {s.driver_version} runs CUDA {cuda}")]


@check("PF103", "cuda13-on-volta")
def check_cuda13_arch(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """CUDA 13 dropped Maxwell, Pascal and Volta (CUDA 13.0 release notes): a CUDA 13 wheel cannot run on V100."""
    if not s.paddle_cuda or version_tuple(s.paddle_cuda)[:1] < (13,):
        return []
    old = [g for g in s.gpus if g.compute_capability and version_tuple(g.compute_capability) < (7, 5)]
    if old:
        return [
            found(
                "error",
                f"Paddle CUDA {s.paddle_cuda} build cannot run on {old[0].name} (CC {old[0].compute_capability})",
                "CUDA 13 supports compute capability 7.5 and newer",
                "install the cu126 or cu129 paddlepaddle-gpu wheel",
            )
        ]
    return []


@check("PF104", "build-vs-gpu")
def check_build_vs_gpu(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """A GPU build with no GPU visible trains nowhere; a CPU build on a GPU machine wastes the GPU. The same for
    Kunlunxin XPUs: an XPU build (``paddle.device.is_compiled_with_xpu()``) is checked against the XPUs ``xpu-smi``
    lists, never against NVIDIA GPUs (an XPU build has no CUDA: that is not an error)."""
    if s.paddle_xpu:
        return xpu_build_vs_devices(s)
    if s.paddle_cuda and not s.gpus:
        extra = f"; this machine has {len(s.xpus)} Kunlunxin XPU(s): install paddlepaddle-xpu" if s.xpus else ""
        return [
            found(
                "error",
                "GPU build of Paddle but no NVIDIA GPU is visible",
                "NVML found no GPU (no NVIDIA driver, or a container started without --gpus)" + extra,
                "start the container with `--gpus all`, check `nvidia-smi`, or use the CPU wheel",
            )
        ]
    if s.paddle_version and not s.paddle_cuda and s.gpus:
        return [
            found(
                "warn",
                f"CPU build of Paddle on a machine with {len(s.gpus)} GPU(s)",
                fix="pip uninstall paddlepaddle && pip install paddlepaddle-gpu (Paddle's index)",
            )
        ]
    if s.paddle_version and not s.paddle_cuda and s.xpus:
        return [
            found(
                "warn",
                f"CPU build of Paddle on a machine with {len(s.xpus)} Kunlunxin XPU(s)",
                fix=f"pip uninstall paddlepaddle && {XPU_WHEEL}",
            )
        ]
    if s.paddle_version:
        what = f"GPU build with {len(s.gpus)} GPU(s)" if s.paddle_cuda else "CPU build, no GPU"
        return [found("ok", f"Paddle build matches the devices ({what})")]
    return []


@check("PF110", "unknown-flag")
def check_flags(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """Every ``FLAGS_*`` in the environment must be a flag this Paddle build knows (``paddle.base.core.globals()``;
    Paddle ``paddle/common/flags.cc``). Unknown ones are ignored silently by Paddle."""
    if not s.paddle_flags:
        return []
    known = set(s.paddle_flags)
    out = []
    for name in sorted(k for k in s.env if k.startswith("FLAGS_")):
        if name in known:
            continue
        why = removed_flags().get(name)
        if why is None:
            close = difflib.get_close_matches(name, s.paddle_flags, n=1, cutoff=0.75)
            why = "Paddle ignores it" + (f"; did you mean {close[0]}?" if close else "")
        out.append(found("error", f"{name} is not a flag of Paddle {s.paddle_version}", why, unset=[name]))
    if not out:
        n = sum(k.startswith("FLAGS_") for k in s.env)
        out.append(found("ok", f"{n} FLAGS_* set, all known to this Paddle build"))
    return out


@check("PF109", "flag-value")
def check_flag_values(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """Known ``FLAGS_*`` must hold a value of their type/range (Paddle ``paddle/common/flags.cc``); Paddle
    fails at import or silently misreads a bad one. ``FLAGS_fraction_of_gpu_memory_to_use`` only acts with
    ``FLAGS_allocator_strategy=naive_best_fit``. The rules: ``catalog/data/paddle_flags.csv``."""
    out = []
    for name, value in sorted(s.env.items()):
        flag = get_flag(name)
        if flag and not flag.accepts(value):
            out.append(found("error", f"{name}={value!r} is out of range", f"allowed: {flag.allowed}", unset=[name]))
    if "FLAGS_fraction_of_gpu_memory_to_use" in s.env and s.env.get("FLAGS_allocator_strategy") != "naive_best_fit":
        out.append(
            found(
                "warn",
                "FLAGS_fraction_of_gpu_memory_to_use has no effect",
                "it only sizes the first chunk of allocator_strategy=naive_best_fit; the default is auto_growth",
                unset=["FLAGS_fraction_of_gpu_memory_to_use"],
            )
        )
    return out


@check("PF111", "not-a-paddle-variable")
def check_paddle_dist_type(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """``PADDLE_DIST_TYPE`` is not read by Paddle (blog-post folklore); NCCL is already the GPU default."""
    if "PADDLE_DIST_TYPE" in s.env:
        return [
            found(
                "warn",
                "PADDLE_DIST_TYPE is not a Paddle variable",
                "Paddle never reads it; NCCL is already the default backend on GPU",
                unset=["PADDLE_DIST_TYPE"],
            )
        ]
    return []


def _ifname_matches(spec: str, name: str) -> bool:
    """NCCL_SOCKET_IFNAME semantics (NCCL docs): comma list of prefixes, ``^`` excludes, ``=`` exact."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    items = [i for i in (body[1:] if exact else body).split(",") if i]
    hit = any(name == i if exact else name.startswith(i) for i in items)
    return not hit if exclude else hit


@check("PF112", "nccl-socket-ifname")
def check_nccl_ifname(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """``NCCL_SOCKET_IFNAME`` must match an interface that is up (NCCL docs, environment variables)."""
    spec = s.env.get("NCCL_SOCKET_IFNAME")
    if not spec:
        return []
    live = [n for n in s.net if n.state in ("up", "unknown")]
    up = sorted((n for n in live if n.name != "lo"), key=lambda n: -(n.speed_mbps or 0))  # fastest first
    matched = [n for n in live if _ifname_matches(spec, n.name)]  # `lo` is legitimate on one node
    if not matched:
        names = ", ".join(n.name for n in up) or "none"
        return [
            found(
                "error",
                f"NCCL_SOCKET_IFNAME={spec} matches no interface that is up",
                f"interfaces up: {names}",
                env={"NCCL_SOCKET_IFNAME": up[0].name} if up else None,
                unset=[] if up else ["NCCL_SOCKET_IFNAME"],
            )
        ]
    fastest = max((n.speed_mbps or 0 for n in up), default=0)
    chosen = max((n.speed_mbps or 0 for n in matched if n.name != "lo"), default=0)
    if fastest and chosen and chosen < fastest:
        best = next(n.name for n in up if (n.speed_mbps or 0) == fastest)
        return [
            found(
                "warn",
                f"NCCL_SOCKET_IFNAME={spec} picks a {chosen} Mb/s interface; {best} runs at {fastest} Mb/s",
                env={"NCCL_SOCKET_IFNAME": best},
            )
        ]
    return []


@check("PF100", "device-run")
def check_device_runs(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """A tiny forward/backward must run on every visible device (``paddle.utils.run_check``'s idea, but each
    device reported, not raised)."""
    out = []
    for dev, result in sorted(s.device_runs.items()):
        if result == "ok":
            out.append(found("ok", f"forward/backward runs on {dev}"))
        else:
            out.append(
                found(
                    "error",
                    f"forward/backward fails on {dev}",
                    result,
                    "run `python -c 'import paddle; paddle.utils.run_check()'` and fix the error it "
                    "shows (driver, CUDA libraries)",
                )
            )
    return out


@check("PF105", "cuda-visible-devices")
def check_visible_devices(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """``CUDA_VISIBLE_DEVICES`` must name GPUs that exist (CUDA programming guide, env vars); NVML lists all."""
    spec = s.env.get("CUDA_VISIBLE_DEVICES")
    if spec is None or not s.gpus:
        return []
    items = [i.strip() for i in spec.split(",") if i.strip()]
    if items and items[0].startswith("-"):
        return [
            found(
                "warn",
                f"CUDA_VISIBLE_DEVICES={spec!r} hides every GPU from Paddle",
                env={"CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in s.gpus)},
            )
        ]
    missing = [i for i in items if i.isdigit() and int(i) >= len(s.gpus)]
    if not items or missing:
        what = f"names GPU {', '.join(missing)}" if missing else "is empty"
        return [
            found(
                "error",
                f"CUDA_VISIBLE_DEVICES={spec!r} {what}; this machine has {len(s.gpus)} GPU(s)",
                env={"CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in s.gpus)},
            )
        ]
    return []


@check("PF106", "shm-size")
def check_shm(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """DataLoader workers pass batches through ``/dev/shm``; Docker's default 64 MB kills them with "Unexpected
    BUS error ... insufficient shared memory" (Paddle ``python/paddle/io/reader.py`` defaults: prefetch_factor 2,
    use_shared_memory True). Need: devices x num_workers x prefetch_factor x batch bytes."""
    if s.shm_total_bytes is None:
        return []
    if job and job.num_workers and not job.use_shared_memory:
        return [found("ok", "DataLoader workers do not use shared memory")]
    if job and job.num_workers and job.batch_bytes:
        need = job.devices * job.num_workers * job.prefetch_factor * job.batch_bytes
        free = s.shm_free_bytes if s.shm_free_bytes is not None else s.shm_total_bytes
        if need > free:
            gib = -(-need * 2 // GIB)  # ceil, x2 headroom
            return [
                found(
                    "error",
                    f"/dev/shm has {free / MIB:,.0f} MiB free; the DataLoader needs {need / MIB:,.0f} MiB",
                    f"{job.devices} x {job.num_workers} workers x "
                    f"prefetch {job.prefetch_factor} x {job.batch_bytes / MIB:,.1f} MiB per batch",
                    f"docker run --shm-size={max(gib, 1)}g ... (or --ipc=host), or use_shared_memory=False",
                )
            ]
        return [found("ok", f"/dev/shm fits the DataLoader ({need / MIB:,.0f} MiB)")]
    if s.in_container and s.shm_total_bytes < GIB:
        return [
            found(
                "warn",
                f"/dev/shm is {s.shm_total_bytes / MIB:,.0f} MiB in a container",
                "DataLoader workers with shared memory need more than Docker's 64 MB default",
                "docker run --shm-size=8g ... (Paddle's own run examples) or --ipc=host",
            )
        ]
    return []


@check("PF107", "workers-vs-cores")
def check_workers(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """More DataLoader workers than cores (all trainers together) oversubscribes the CPU."""
    if not job or not job.num_workers or not s.cpu_cores:
        return []
    total = job.num_workers * job.devices
    if total > s.cpu_cores:
        per = max(s.cpu_cores // job.devices - 1, 0)
        return [
            found(
                "warn",
                f"{total} DataLoader workers ({job.devices} x {job.num_workers}) on {s.cpu_cores} cores",
                fix=f"num_workers={per} per trainer",
            )
        ]
    return []


@check("PF108", "disk-for-checkpoints")
def check_disk(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """The run directory's disk must hold at least 3 checkpoints (the one being written + the kept ones)."""
    if not job or not job.checkpoint_bytes or s.disk_free_bytes is None:
        return []
    need = 3 * job.checkpoint_bytes
    if s.disk_free_bytes < need:
        return [
            found(
                "error",
                f"{s.disk_free_bytes / GIB:,.1f} GiB free where checkpoints go; 3 checkpoints need "
                f"{need / GIB:,.1f} GiB",
                fix="free disk space or point --run-dir at a larger disk",
            )
        ]
    return []


@check("PF113", "nccl-ib-disable")
def check_nccl_ib(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """``NCCL_IB_DISABLE=1`` with InfiniBand present throws away the fastest link; unset without any IB device,
    NCCL probes for it at every start (NCCL docs, environment variables). Only matters with several GPUs."""
    if len(s.gpus) < 2:
        return []
    disabled = s.env.get("NCCL_IB_DISABLE") == "1"
    if s.infiniband and disabled:
        return [
            found(
                "warn",
                f"NCCL_IB_DISABLE=1 but InfiniBand devices exist ({', '.join(s.infiniband)})",
                unset=["NCCL_IB_DISABLE"],
            )
        ]
    if not s.infiniband and "NCCL_IB_DISABLE" not in s.env:
        return [
            found(
                "warn",
                "no InfiniBand device and NCCL_IB_DISABLE unset",
                "NCCL looks for IB/RoCE first",
                env={"NCCL_IB_DISABLE": "1"},
            )
        ]
    return []


@check("PF120", "gpu-health")
def check_gpu_health(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """Per GPU from NVML: uncorrected ECC errors, PCIe link below its maximum, active clock throttling,
    memory held by other processes (NVML API reference: nvmlDeviceGetTotalEccErrors,
    nvmlDeviceGetCurrPcieLinkGeneration/Width, nvmlDeviceGetCurrentClocksThrottleReasons)."""
    out = []
    idle_mask = 0x1  # nvmlClocksThrottleReasonGpuIdle: not a problem
    for g in s.gpus:
        tag = f"GPU {g.index} ({g.name})"
        if g.ecc_uncorrected_errors:
            out.append(
                found(
                    "error",
                    f"{tag}: {g.ecc_uncorrected_errors} uncorrected ECC errors",
                    fix="drain the node and ask the provider to replace the GPU",
                )
            )
        if (g.pcie_gen_current and g.pcie_gen_max and g.pcie_gen_current < g.pcie_gen_max) or (
            g.pcie_width_current and g.pcie_width_max and g.pcie_width_current < g.pcie_width_max
        ):
            out.append(
                found(
                    "warn",
                    f"{tag}: PCIe link gen{g.pcie_gen_current} x{g.pcie_width_current}, max "
                    f"gen{g.pcie_gen_max} x{g.pcie_width_max}",
                    "an idle GPU downclocks its link; check again under load",
                    "reseat the card or check the slot/riser if it stays low under load",
                )
            )
        if g.throttle_reasons and g.throttle_reasons & ~idle_mask:
            out.append(
                found(
                    "warn",
                    f"{tag}: clocks throttled (NVML reasons 0x{g.throttle_reasons:x})",
                    fix="check cooling and power limits (`nvidia-smi -q -d PERFORMANCE`)",
                )
            )
        if g.processes:
            used = sum(p.get("used_bytes") or 0 for p in g.processes)
            out.append(
                found(
                    "warn",
                    f"{tag}: {len(g.processes)} other process(es) hold {used / GIB:,.1f} GiB",
                    fix="stop them (`nvidia-smi` lists the PIDs)",
                )
            )
        if not any(f.title.startswith(tag) for f in out):
            out.append(found("ok", f"{tag}: no ECC errors, full PCIe link, no throttling"))
    return out


#: the user's OpenMP setting is reported when it measured this much slower than another policy, clear of noise
OMP_SLOW_RATIO = 1.10


def omp_rounds(times: dict[str, Any]) -> dict[str, list[float]]:
    """``Snapshot.omp["step_s"]`` as lists of per-round seconds (an older snapshot's single float is one round)."""
    return {p: [float(x) for x in (v if isinstance(v, list) else [v])] for p, v in times.items()}


@check("PF121", "omp-wait-policy")
def check_omp_wait_policy(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """Paddle's CPU kernels run on OpenMP (Intel's libiomp5 for MKL/oneDNN), whose idle threads spin unless
    ``OMP_WAIT_POLICY=PASSIVE``: faster on an idle machine, much slower when other processes (DataLoader workers, a
    second job) want the cores. Measured (``Snapshot.omp``): a small training step in a fresh process under the
    environment's policy, the runtime's default and PASSIVE, in interleaved rounds. The rule
    (:mod:`paddlefit.diagnose.repeats`): warn only when the 95% interval of the paired slowdown against another
    policy lies above 1.10x; ok when every interval lies below it; else ``inconclusive (noise X%)``, no fix
    (``bench/cpu_threads.py`` measures real models)."""
    omp = s.omp or {}
    times = omp_rounds(omp.get("step_s") or {})
    user = omp.get("user", "")
    if user and user.upper() not in ("ACTIVE", "PASSIVE"):
        return [
            found(
                "warn",
                f"OMP_WAIT_POLICY={user} is not a policy",
                "OpenMP takes ACTIVE or PASSIVE and ignores other values with a warning (the OpenMP 5.2 "
                "specification, section 21.2.5)",
                unset=["OMP_WAIT_POLICY"],
            )
        ]
    mine = times.get(user.upper())
    others = {p: v for p, v in times.items() if p != user.upper() and len(v) == len(mine or [])}
    if not mine or not others:
        return []

    def name(p: str) -> str:
        return f"OMP_WAIT_POLICY={p}" if p else "OMP_WAIT_POLICY unset (the OpenMP default)"

    bounds = {p: ratio_bound(mine, v, OMP_SLOW_RATIO) for p, v in others.items()}
    n = len(mine)
    detail = (
        f"a small CPU training step on {s.cpu_cores} cores, a fresh process per policy in each of {n} "
        "interleaved rounds (median ms: "
        + ", ".join(f"{name(p)} {statistics.median(v) * 1e3:,.1f}" for p, v in times.items())
        + "); "
        + "; ".join(f"vs {name(p)}: {b.ratio:.2f}x, 95% interval {b.low:.2f}-{b.high:.2f}x" for p, b in bounds.items())
        + f". Rule: warn only when the interval lies above {OMP_SLOW_RATIO:.2f}x, ok when below, else "
        "inconclusive"
    )
    slower = [p for p, b in bounds.items() if b.verdict == "slower"]
    if slower:
        best = max(slower, key=lambda p: bounds[p].low)
        return [
            found(
                "warn",
                f"{name(user)} is {bounds[best].ratio:.2f}x slower than {name(best)} here",
                detail,
                env={"OMP_WAIT_POLICY": best} if best else None,
                unset=[] if best else ["OMP_WAIT_POLICY"],
            )
        ]
    if all(b.verdict == "not slower" for b in bounds.values()):
        return [found("ok", f"{name(user)}: within {OMP_SLOW_RATIO - 1:.0%} of the other policies here", detail)]
    noise = max(b.noise for b in bounds.values())
    said = "one run each" if n < MIN_ROUNDS else f"noise {noise:.0%}"
    return [
        found(
            "inconclusive",
            f"{name(user)}: inconclusive ({said})",
            detail + "; no fix: the difference is not "
            "clear of this machine's noise (run `paddlefit doctor` again when it is idle)",
        )
    ]


#: Where ``NVIDIA_TF32_OVERRIDE`` is documented: NVIDIA's developer blog "Accelerating AI Training with NVIDIA TF32
#: Tensor Cores" (developer.nvidia.com/blog/accelerating-ai-training-with-tf32-tensor-cores/, cited for the variable
#: by MONAI's "Precision and Accelerating" docs); DeepRec's "NVIDIA TF32" docs put it as `export
#: NVIDIA_TF32_OVERRIDE=0` "to command all Nvidia libraries to turn off TF32". The same blog's Table 1 gives the A100's
#: relative math throughput FP32 1x, TF32 8x (the catalog's 19.5 and 156 TFLOPS).
TF32_OVERRIDE_SOURCE = "NVIDIA, Accelerating AI Training with NVIDIA TF32 Tensor Cores (developer blog)"


@check("PF122", "tf32-override")
def check_tf32_override(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """``NVIDIA_TF32_OVERRIDE``, when set: ``0`` turns TF32 off inside NVIDIA's libraries (cuBLAS, cuDNN) for every
    framework, whatever Paddle's switches say (:data:`TF32_OVERRIDE_SOURCE`), so fp32 matmuls and convolutions run on
    the FP32 CUDA cores (an A100: 19.5 instead of 156 TFLOPS); NVIDIA documents no other value. Reported because a
    container image can set it unseen, and ``plan`` assumes TF32 unless the job says ``tf32: false``."""
    value = s.env.get("NVIDIA_TF32_OVERRIDE")
    if value is None:
        return []
    if value.strip() == "0":
        return [
            found(
                "warn",
                "NVIDIA_TF32_OVERRIDE=0: TF32 is off in cuBLAS/cuDNN for every framework",
                "fp32 matmuls and convolutions run on the FP32 CUDA cores on Ampere and later (an A100 does "
                "19.5 instead of 156 TFLOPS), whatever Paddle's TF32 switches say (NVIDIA's override, from its "
                "TF32 developer blog)",
                "keep it for full-precision fp32 and put `tf32: false` in the job spec (`plan`/`cost --no-tf32`) "
                "so the plan times fp32 on CUDA cores; or `unset NVIDIA_TF32_OVERRIDE` for TF32 speed",
            )
        ]
    return [
        found(
            "warn",
            f"NVIDIA_TF32_OVERRIDE={value} is not a documented value",
            "NVIDIA documents NVIDIA_TF32_OVERRIDE=0 (TF32 off in cuBLAS/cuDNN); with another value Paddle's "
            "TF32 switches (the job's `tf32`) decide",
            "`export NVIDIA_TF32_OVERRIDE=0` to turn TF32 off everywhere, or `unset NVIDIA_TF32_OVERRIDE`",
        )
    ]


@check("PF124", "mkl-code-path")
def check_mkl_code_path(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """On an AMD CPU with AVX2, Paddle's MKL 2019 runs its SSE kernels unless ``MKL_DEBUG_CPU_TYPE=5``
    (:mod:`paddlefit.process.mklpath`: sources, and why it is worse after an Adam step). paddlefit sets it for its own
    processes when the user did not; the snapshot holds the user's own setting, which their Paddle scripts run
    with. Nothing to say on other CPUs."""
    if not s.cpu_amd_avx2:
        return []
    name, value = MKL_AVX2_ENV
    have, ours = s.env.get(name), s.env.get(SET_MARK_ENV) == "1"  # ours: paddlefit set it, the shell has none
    if have == value and not ours:
        return [found("ok", f"{name}={value}: MKL's AVX2 kernels on this AMD CPU")]
    said = f"{name}={have}" if have is not None and not ours else f"{name} unset"
    mine = "paddlefit's own processes set it themselves; " if ours else "paddlefit keeps your value; "
    return [
        found(
            "warn",
            f"{said}: Paddle's MKL runs its SSE kernels on this AMD CPU",
            "MKL 2019 (Paddle's CPU wheels) takes generic SSE kernels on non-Intel CPUs; measured on a 2-core "
            "AMD EPYC (`bench/mkl_path.py`): a ResNet-50 CPU training step 8.6x slower than on the AVX2 path, "
            "sgemm 2.3x slower, 12x after an Adam step (Paddle's AVX-512 Adam kernel leaves the vector "
            f"registers dirty for SSE code). {mine}your own Paddle scripts run with what your shell sets",
            env={name: value},
        )
    ]


def run_checks(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """Run every registered check in ID order on ``s`` (and the optional job context)."""
    out: list[Finding] = []
    for c in sorted(REGISTRY, key=lambda c: c.check_id):
        out.extend(c(s, job))
    return out
