"""Collect the training environment once into a typed, JSON-serialisable snapshot (NVIDIA GPUs through NVML,
Kunlunxin XPUs through ``xpu-smi``).

Every probe returns None when it cannot collect its value (as PyTorch's ``collect_env.py`` does), so a
snapshot can always be taken, saved and replayed (``Snapshot.from_dict``) on another machine.
Sizes are bytes, speeds Mb/s (as ``/sys/class/net/*/speed`` reports them).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlefit.diagnose.xpu import XPUInfo, collect_xpus, paddle_xpu
from paddlefit.process.mklpath import amd_avx2_cpu
from paddlefit.process.safepath import python_command, safe_env

#: Environment variable prefixes the snapshot keeps (Paddle flags, NCCL, Paddle's launcher, CUDA, NVIDIA's TF32
#: override).
ENV_PREFIXES = (
    "FLAGS_",
    "NCCL_",
    "PADDLE_",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "NVIDIA_TF32_OVERRIDE",
    "MKL_DEBUG_CPU_TYPE",
    "PADDLEFIT_SET_MKL",
)


@dataclass
class NetInterface:
    """One network interface from ``/sys/class/net``: name, operstate (``up``/``down``), speed in Mb/s."""

    name: str
    state: str | None = None
    speed_mbps: int | None = None


@dataclass
class GPUInfo:
    """One GPU as NVML reports it (nvidia-ml-py). Memory in bytes; PCIe generation and lane width."""

    index: int
    name: str
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    compute_capability: str | None = None
    ecc_uncorrected_errors: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    throttle_reasons: int | None = None
    persistence_mode: bool | None = None
    nvlink_active_links: int | None = None
    processes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Snapshot:
    """Everything the checks look at, collected once.

    Attributes:
        os, python: platform strings.
        paddle_version: ``paddle.__version__`` or None if Paddle does not import.
        paddle_cuda / paddle_cudnn: CUDA and cuDNN versions the Paddle wheel was built with (None: CPU build).
        paddle_flags: every ``FLAGS_*`` name this Paddle build knows (``paddle.base.core.globals()``).
        cpu_cores: logical cores usable by this process; memory_total_bytes: RAM; cpu_amd_avx2: an AMD CPU with
            AVX2 and FMA (:func:`paddlefit.process.mklpath.amd_avx2_cpu`; None: a snapshot of an earlier version).
        shm_total_bytes / shm_free_bytes: ``/dev/shm`` size and free space (DataLoader workers use it).
        disk_free_bytes: free space where the run directory lives.
        in_container: a Docker/Podman/Kubernetes marker was found.
        env: environment variables whose names start with :data:`ENV_PREFIXES`; the value of one that looks like
            a secret (:func:`paddlefit.process.secretenv.is_secret`) is replaced by ``<redacted>`` whenever a snapshot
            is built (collected or loaded), so no snapshot file, ``doctor --json`` or finding carries it.
        net: network interfaces; infiniband: device names under ``/sys/class/infiniband``.
        driver_version / cuda_driver_version: from NVML, None without an NVIDIA driver.
        gpus: per-GPU details from NVML (empty without a GPU).
        paddle_xpu: ``paddle.device.is_compiled_with_xpu()`` (a Kunlunxin XPU build; None: Paddle does not import).
        xpu_smi: path of ``xpu-smi`` (or ``xpu_smi``) on PATH, None when neither is there.
        xpu_driver_version / xpu_runtime_version: the ``Driver Version`` / ``Runtime Version`` lines of ``xpu-smi``.
        xpus: the XPUs ``xpu-smi`` lists (empty without it).
        device_runs: device (``cpu``, ``gpu:0``, ``xpu:0``...) -> ``ok`` or the error of a tiny forward/backward
            there.
    """

    os: str
    python: str
    paddle_version: str | None = None
    paddle_cuda: str | None = None
    paddle_cudnn: str | None = None
    paddle_flags: list[str] = field(default_factory=list)
    cpu_cores: int | None = None
    cpu_amd_avx2: bool | None = None
    memory_total_bytes: int | None = None
    shm_total_bytes: int | None = None
    shm_free_bytes: int | None = None
    disk_free_bytes: int | None = None
    in_container: bool | None = None
    env: dict[str, str] = field(default_factory=dict)
    net: list[NetInterface] = field(default_factory=list)
    infiniband: list[str] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GPUInfo] = field(default_factory=list)
    paddle_xpu: bool | None = None
    xpu_smi: str | None = None
    xpu_driver_version: str | None = None
    xpu_runtime_version: str | None = None
    xpus: list[XPUInfo] = field(default_factory=list)
    device_runs: dict[str, str] = field(default_factory=dict)
    #: OpenMP wait policy: ``user`` (what the environment sets, "" = unset) and ``step_s`` (policy, "" = the
    #: runtime's default -> seconds of a small CPU training step at every core, each in a fresh process)
    omp: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from paddlefit.process.secretenv import redact_env

        if isinstance(self.env, dict):  # pydantic checks the type of a loaded one
            self.env = redact_env(self.env)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Snapshot:
        """Rebuild a snapshot saved with :meth:`to_dict`, validating every field's type (pydantic).

        Raises:
            pydantic.ValidationError: unknown keys, missing ``os``/``python``, or a wrong type.
        """
        from pydantic import TypeAdapter

        return TypeAdapter(cls).validate_python(doc)


def _structure_problem(doc: Any) -> str | None:
    """Unknown keys (top level, per GPU, per interface), `gpus`/`net` that are not lists, negative sizes or a
    non-numeric driver version."""
    if not isinstance(doc, dict):
        return "expected a JSON object"
    allowed = {f.name for f in dataclasses.fields(Snapshot)}
    extra = sorted(set(doc) - allowed)
    if extra:
        return f"unknown key `{extra[0]}`"
    for key, cls in (("gpus", GPUInfo), ("net", NetInterface), ("xpus", XPUInfo)):
        names = {f.name for f in dataclasses.fields(cls)}
        items = doc.get(key)
        if items is not None and not isinstance(items, list):  # `true` here was a TypeError traceback
            return f"`{key}` must be a list (got {type(items).__name__})"
        for i, item in enumerate(items or []):
            if isinstance(item, dict) and set(item) - names:
                return f"unknown key `{key}.{i}.{sorted(set(item) - names)[0]}`"
    for key in ("cpu_cores", "memory_total_bytes", "shm_total_bytes", "shm_free_bytes", "disk_free_bytes"):
        v = doc.get(key)
        if isinstance(v, int | float) and v < 0:
            return f"`{key}` is negative"
    drv = doc.get("driver_version")
    if drv is not None and not (isinstance(drv, str) and drv.replace(".", "").isdigit()):
        return f"`driver_version` {drv!r} is not a version like 560.35.03"
    return None


def load_snapshot(path: str | Path, option: str = "--from") -> Snapshot:
    """Read a snapshot JSON file written by ``paddlefit doctor --snapshot``.

    Raises:
        PaddlefitError: unreadable, not JSON, or not a snapshot (names the option, the file and the field).
    """
    import json

    from pydantic import ValidationError

    from paddlefit.errors import PaddlefitError
    from paddlefit.fileio import read_text_limited
    from paddlefit.validation import first_problem

    p = Path(path)
    text = read_text_limited(p, option)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PaddlefitError(f"`{option} {p}` is not valid JSON ({str(exc)[:150]}).") from None
    problem = _structure_problem(doc)
    if problem:
        raise PaddlefitError(
            f"`{option} {p}` is not a paddlefit snapshot: {problem}. Make one with `paddlefit doctor --snapshot FILE`."
        )
    try:
        return Snapshot.from_dict(doc)
    except ValidationError as exc:
        where, problem = first_problem(exc, {"?": "the document"})
        raise PaddlefitError(
            f"`{option} {p}` is not a paddlefit snapshot: `{where}`: {problem}. "
            "Make one with `paddlefit doctor --snapshot FILE`."
        ) from None


def _paddle_info() -> tuple[str | None, str | None, str | None, list[str]]:
    try:
        import paddle
    except Exception:  # not installed or broken: the checks report it
        return None, None, None, []
    cuda = paddle.version.cuda() if paddle.is_compiled_with_cuda() else None
    cudnn = paddle.version.cudnn() if paddle.is_compiled_with_cuda() else None
    try:
        flags = sorted(paddle.base.core.globals().keys())
    except Exception:  # older builds without the registry
        flags = []
    return paddle.__version__, (str(cuda) if cuda else None), (str(cudnn) if cudnn else None), flags


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _net(root: Path = Path("/sys/class/net")) -> list[NetInterface]:
    out = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        speed = _read(d / "speed")
        try:
            speed_i = int(speed) if speed is not None and int(speed) > 0 else None
        except ValueError:
            speed_i = None
        out.append(NetInterface(d.name, _read(d / "operstate"), speed_i))
    return out


def _in_container() -> bool:
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists():
        return True
    cgroup = _read(Path("/proc/1/cgroup")) or ""
    return any(k in cgroup for k in ("docker", "kubepods", "containerd", "libpod"))


def _nvlink_links(pynvml: Any, handle: Any, safe: Any) -> int | None:
    """Active NVLink links of a GPU (nvmlDeviceGetNvLinkState per link); None when NVML has no NVLink data."""
    states = [
        safe(pynvml.nvmlDeviceGetNvLinkState, handle, link)
        for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))
    ]
    known = [s for s in states if s is not None]
    return sum(1 for s in known if s) if known else None


def _gpus() -> tuple[str | None, str | None, list[GPUInfo]]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVIDIA driver / library: a CPU machine
        return None, None, []

    def safe(fn, *args):
        try:
            v = fn(*args)
            return v.decode() if isinstance(v, bytes) else v
        except Exception:  # a field this GPU or driver does not report
            return None

    driver = safe(pynvml.nvmlSystemGetDriverVersion)
    cuda = safe(pynvml.nvmlSystemGetCudaDriverVersion)
    cuda_s = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
    gpus = []
    for i in range(safe(pynvml.nvmlDeviceGetCount) or 0):
        h = safe(pynvml.nvmlDeviceGetHandleByIndex, i)
        mem = safe(pynvml.nvmlDeviceGetMemoryInfo, h)
        cc = safe(pynvml.nvmlDeviceGetCudaComputeCapability, h)
        procs = safe(pynvml.nvmlDeviceGetComputeRunningProcesses, h) or []
        gpus.append(
            GPUInfo(
                index=i,
                name=safe(pynvml.nvmlDeviceGetName, h) or f"gpu{i}",
                memory_total_bytes=getattr(mem, "total", None),
                memory_used_bytes=getattr(mem, "used", None),
                compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
                ecc_uncorrected_errors=safe(
                    pynvml.nvmlDeviceGetTotalEccErrors,
                    h,
                    pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    pynvml.NVML_VOLATILE_ECC,
                ),
                pcie_gen_current=safe(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                pcie_gen_max=safe(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                pcie_width_current=safe(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                pcie_width_max=safe(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                throttle_reasons=safe(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h),
                persistence_mode=(lambda m: None if m is None else bool(m))(
                    safe(pynvml.nvmlDeviceGetPersistenceMode, h)
                ),
                nvlink_active_links=_nvlink_links(pynvml, h, safe),
                processes=[{"pid": p.pid, "used_bytes": getattr(p, "usedGpuMemory", None)} for p in procs],
            )
        )
    return driver, cuda_s, gpus


def _device_runs() -> dict[str, str]:
    """A tiny forward/backward on the CPU and each visible GPU (``paddle.utils.run_check``'s idea, reported)."""
    try:
        import paddle
    except Exception as exc:  # reported by the paddle-import check
        return {"cpu": f"paddle does not import: {type(exc).__name__}"}
    devices = ["cpu"]
    try:
        if paddle.is_compiled_with_cuda():
            devices += [f"gpu:{i}" for i in range(paddle.device.cuda.device_count())]
    except Exception as exc:  # a broken CUDA runtime shows up here
        return {"cpu": "ok", "gpu": f"{type(exc).__name__}: {exc}"[:300]}
    try:  # Paddle API: paddle.device.is_compiled_with_xpu(), paddle.device.xpu.device_count()
        if paddle.device.is_compiled_with_xpu():
            devices += [f"xpu:{i}" for i in range(paddle.device.xpu.device_count())]
    except Exception as exc:  # a broken XPU runtime (XRE) shows up here
        return {"cpu": "ok", "xpu": f"{type(exc).__name__}: {exc}"[:300]}
    out = {}
    previous = paddle.get_device()
    for dev in devices:
        try:
            paddle.set_device(dev)
            layer = paddle.nn.Linear(4, 2)
            loss = layer(paddle.ones([3, 4])).mean()
            loss.backward()
            out[dev] = "ok" if layer.weight.grad is not None else "no gradient"
        except Exception as exc:  # the finding shows the error text
            out[dev] = f"{type(exc).__name__}: {exc}"[:300]
    paddle.set_device(previous)
    return out


#: a small CPU training loop (a conv net and an MLP, Adam), timed in a fresh process per OpenMP wait policy
_OMP_BENCH = """
import time, paddle
n = len(__import__('os').sched_getaffinity(0))
paddle.base.core.set_num_threads(n)
m = paddle.nn.Sequential(paddle.nn.Conv2D(3, 16, 3, padding=1), paddle.nn.BatchNorm2D(16), paddle.nn.ReLU(),
                         paddle.nn.Conv2D(16, 16, 3, padding=1), paddle.nn.ReLU(), paddle.nn.Flatten(),
                         paddle.nn.Linear(16 * 16 * 16, 64), paddle.nn.ReLU(), paddle.nn.Linear(64, 10))
opt = paddle.optimizer.Adam(parameters=m.parameters())
x, y = paddle.randn([8, 3, 16, 16]), paddle.randint(0, 10, [8])
best = 1e9
for i in range(12):
    t = time.perf_counter()
    paddle.nn.functional.cross_entropy(m(x), y).backward(); opt.step(); opt.clear_grad()
    best = min(best, time.perf_counter() - t) if i >= 2 else best
print(best)
"""


def _omp_step(pol: str) -> float | None:
    """Seconds of :data:`_OMP_BENCH`'s step in a fresh process under wait policy ``pol`` (``""``: unset), or None."""
    import subprocess

    env = safe_env({k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"})
    if pol:
        env["OMP_WAIT_POLICY"] = pol
    env["GLOG_minloglevel"] = "2"
    try:
        r = subprocess.run(
            python_command(code=_OMP_BENCH), env=env, capture_output=True, text=True, timeout=120, check=False
        )
        return float(r.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def measure_omp_policies(policies: tuple[str, ...]) -> dict[str, list[float]]:
    """Seconds of a small CPU training step (:data:`_OMP_BENCH`, best of 10, every core) with each OpenMP wait
    policy (``""`` = unset: the OpenMP runtime's default), each in a fresh Python process because the runtime
    reads ``OMP_WAIT_POLICY`` once when Paddle loads it; one list per policy, one value per round. Rounds are
    interleaved (round r starts at policy r mod k, so load drifts hit every policy alike) and repeat until the
    first policy (the user's) is judged against each other one (:mod:`paddlefit.diagnose.repeats`: at least
    MIN_ROUNDS, at most MAX_ROUNDS). A policy whose run fails is left out; the user's failing leaves nothing."""
    from paddlefit.diagnose.checks import OMP_SLOW_RATIO
    from paddlefit.diagnose.repeats import MAX_ROUNDS, MIN_ROUNDS, ratio_bound, settled

    out: dict[str, list[float]] = {p: [] for p in policies}
    for r in range(MAX_ROUNDS):
        live = [p for p in policies if p in out]
        for pol in live[r % len(live) :] + live[: r % len(live)]:
            t = _omp_step(pol)
            if t is None:
                if pol == policies[0]:
                    return {}
                out.pop(pol)
            else:
                out[pol].append(t)
        mine = out[policies[0]]
        if r + 1 >= MIN_ROUNDS and settled(
            [ratio_bound(mine, v, OMP_SLOW_RATIO).verdict for p, v in out.items() if p != policies[0]]
        ):
            break
    return out


def collect_snapshot(run_dir: str | Path = ".", run_devices: bool = True, measure_omp: bool = False) -> Snapshot:
    """Collect the snapshot of this machine (a second or two: imports Paddle, reads /sys, asks NVML).

    Args:
        run_dir: where checkpoints would be written (for free disk space).
        run_devices: also run a tiny forward/backward on each device (``device_runs``).
        measure_omp: on a machine with more than one core, time a small training step under the user's OpenMP
            wait policy, the runtime's default and ``PASSIVE`` (:func:`measure_omp_policies`: interleaved rounds,
            ~15 s idle, up to ~40 s on a noisy machine).
    """
    import psutil

    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}  # before Paddle sets its own
    version, cuda, cudnn, flags = _paddle_info()
    shm_total = shm_free = None
    if Path("/dev/shm").is_dir():
        usage = shutil.disk_usage("/dev/shm")
        shm_total, shm_free = usage.total, usage.free
    existing = Path(run_dir).resolve()
    while not existing.exists():  # the run dir may not exist yet: measure the disk it will be created on
        existing = existing.parent
    try:
        disk_free = shutil.disk_usage(existing).free
    except OSError:
        disk_free = None
    driver, cuda_driver, gpus = _gpus()
    xpu_smi, xpu_driver, xpu_runtime, xpus = collect_xpus()
    ib = Path("/sys/class/infiniband")
    return Snapshot(
        os=platform.platform(),
        python=sys.version.split()[0],
        paddle_version=version,
        paddle_cuda=cuda,
        paddle_cudnn=cudnn,
        paddle_flags=flags,
        cpu_cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        cpu_amd_avx2=amd_avx2_cpu(),
        memory_total_bytes=psutil.virtual_memory().total,
        shm_total_bytes=shm_total,
        shm_free_bytes=shm_free,
        disk_free_bytes=disk_free,
        in_container=_in_container(),
        env=env,
        net=_net(),
        infiniband=sorted(p.name for p in ib.iterdir()) if ib.is_dir() else [],
        driver_version=driver,
        cuda_driver_version=cuda_driver,
        gpus=gpus,
        paddle_xpu=paddle_xpu() if version else None,
        xpu_smi=xpu_smi,
        xpu_driver_version=xpu_driver,
        xpu_runtime_version=xpu_runtime,
        xpus=xpus,
        device_runs=_device_runs() if run_devices and version else {},
        omp=_omp(measure_omp and version is not None),
    )


def _omp(measure: bool) -> dict[str, Any]:
    """The user's and the effective OpenMP wait policy, and (``measure``) the step time under each."""
    user = os.environ.get("OMP_WAIT_POLICY", "")
    doc: dict[str, Any] = {"user": user}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if measure and cores > 1 and user.upper() in ("", "ACTIVE", "PASSIVE"):
        doc["step_s"] = measure_omp_policies(tuple(dict.fromkeys((user.upper(), "", "PASSIVE"))))
    return doc
