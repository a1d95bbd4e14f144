"""doctor's Kunlunxin XPU checks: PF104's branch for an XPU build of Paddle and PF123 (the XPUs ``xpu-smi`` lists).
Registered with the other checks when :mod:`paddlefit.diagnose.checks` imports this module."""

from __future__ import annotations

from paddlefit.diagnose.registry import Finding, JobContext, check, found
from paddlefit.diagnose.snapshot import Snapshot
from paddlefit.units import GIB

#: How to install Paddle's XPU wheel (Paddle's XPU install guide, docs/guides/hardware_support/xpu/install_cn.md,
#: and the FastDeploy Kunlunxin guide for the P800 package index).
XPU_WHEEL = (
    "pip install paddlepaddle-xpu (Paddle's XPU guide: https://www.paddlepaddle.org.cn/documentation/docs/"
    "zh/guides/hardware_support/xpu/install_cn.html)"
)


def xpu_build_vs_devices(s: Snapshot) -> list[Finding]:
    """PF104 for an XPU build: XPUs listed by ``xpu-smi`` (ok), none listed (error), or no ``xpu-smi`` to ask
    (warn: the device run, PF100, is then the only evidence)."""
    if s.xpus:
        return [found("ok", f"Paddle build matches the devices (XPU build with {len(s.xpus)} Kunlunxin XPU(s))")]
    if s.xpu_smi:
        return [
            found(
                "error",
                "XPU build of Paddle but xpu-smi lists no Kunlunxin XPU",
                f"`{s.xpu_smi}` ran and listed no device (no XPU driver loaded, or a container without the "
                "/dev/xpu* devices)",
                "start the container with `--privileged` (Paddle's XPU guide) and check `xpu-smi`",
            )
        ]
    runs = [d for d, r in s.device_runs.items() if d.startswith("xpu") and r == "ok"]
    if runs:
        return [
            found(
                "ok",
                f"Paddle build matches the devices (XPU build; forward/backward ran on {len(runs)} "
                "XPU(s); xpu-smi not on PATH)",
            )
        ]
    return [
        found(
            "warn",
            "XPU build of Paddle but xpu-smi is not on PATH",
            "cannot list the Kunlunxin XPUs or their driver",
            "put xpu-smi on PATH (Paddle's guides mount /usr/local/bin/xpu-smi into the container)",
        )
    ]


@check("PF123", "xpu-devices")
def check_xpu_devices(s: Snapshot, job: JobContext | None = None) -> list[Finding]:
    """The Kunlunxin XPUs ``xpu-smi`` lists, with its driver and runtime versions (its output as Paddle's XPU install
    guide shows it); a device whose memory is mostly taken by other processes is reported, as PF120 does for GPUs.
    Nothing on a machine without ``xpu-smi``."""
    if not s.xpus:
        return []
    models = ", ".join(f"{m} x{n}" for m, n in sorted(_count(x.model for x in s.xpus).items()))
    versions = ", ".join(
        f"{k} {v}" for k, v in (("driver", s.xpu_driver_version), ("runtime", s.xpu_runtime_version)) if v
    )
    out = [found("ok", f"{len(s.xpus)} Kunlunxin XPU(s): {models}", versions)]
    for x in s.xpus:
        if x.memory_total_bytes and x.memory_used_bytes and x.memory_used_bytes > 0.5 * x.memory_total_bytes:
            out.append(
                found(
                    "warn",
                    f"xpu:{x.index} ({x.model}) has {x.memory_used_bytes / GIB:.1f} of "
                    f"{x.memory_total_bytes / GIB:.1f} GiB in use",
                    "another process holds its memory",
                    "see the PROCESSES table of `xpu-smi`",
                )
            )
    if not s.paddle_xpu and s.paddle_version:
        out.append(
            found(
                "warn",
                "this Paddle build cannot use the Kunlunxin XPUs",
                "paddle.device.is_compiled_with_xpu() is False",
                XPU_WHEEL,
            )
        )
    return out


def _count(items) -> dict[str, int]:
    """How often each item occurs."""
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out
