"""Kunlunxin XPUs as the environment snapshot sees them: Paddle's XPU build flag and ``xpu-smi``'s device table
(:mod:`paddlefit.diagnose.snapshot` stores them; PF104 and PF123 check them, :mod:`paddlefit.diagnose.xpu_checks`)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

from paddlefit.units import MIB


@dataclass
class XPUInfo:
    """One Kunlunxin XPU as ``xpu-smi`` lists it (its DEVICES table): device id, model (``R300``, ``P800``...),
    memory total/used in bytes (``xpu-smi`` prints MB = MiB)."""

    index: int
    model: str
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None


def paddle_xpu() -> bool | None:
    """``paddle.device.is_compiled_with_xpu()`` (Paddle API docs: True for a ``WITH_XPU=ON`` build, Baidu Kunlun);
    None when Paddle does not import."""
    try:
        import paddle

        return bool(paddle.device.is_compiled_with_xpu())
    except Exception:  # not installed, broken, or a build without the function: the checks report the import
        return None


#: ``xpu-smi``'s version lines and its DEVICES table rows (the layout Paddle's XPU install guide prints,
#: docs/guides/hardware_support/xpu/install_cn.md: ``| DevID | PCI Addr | Model | SN | INODE | UseRate | L3 | Memory |``
#: with memory as ``used / total MB``).
_XPU_VERSION = re.compile(r"^\s*(Runtime|Driver) Version:\s*(\S+)", re.MULTILINE)
_XPU_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*[0-9a-fA-F:.]+\s*\|\s*(\S+)\s*\|.*\|\s*(\d+)\s*/\s*(\d+)\s*MB\s*\|\s*$")


def parse_xpu_smi(text: str) -> tuple[str | None, str | None, list[XPUInfo]]:
    """(driver version, runtime version, XPUs) from ``xpu-smi``'s output; rows of its VIDEO and PROCESSES tables
    are skipped (they have no PCI address column). Memory MB are MiB (2^20 bytes, as ``32768 MB`` = 32 GiB)."""
    versions = {k: v for k, v in _XPU_VERSION.findall(text)}
    xpus = []
    for line in text.splitlines():
        m = _XPU_ROW.match(line.strip())
        if m:
            xpus.append(
                XPUInfo(
                    index=int(m[1]),
                    model=m[2],
                    memory_used_bytes=int(m[3]) * MIB,
                    memory_total_bytes=int(m[4]) * MIB,
                )
            )
    return versions.get("Driver"), versions.get("Runtime"), xpus


def collect_xpus() -> tuple[str | None, str | None, str | None, list[XPUInfo]]:
    """(xpu-smi path, driver version, runtime version, XPUs): runs ``xpu-smi`` (Kunlunxin's tool; Paddle's guides
    call it ``xpu_smi`` inside its images and mount ``/usr/local/bin/xpu-smi``) when either name is on PATH."""
    import subprocess

    tool = shutil.which("xpu-smi") or shutil.which("xpu_smi")
    if tool is None:
        return None, None, None, []
    try:
        r = subprocess.run([tool], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return tool, None, None, []
    driver, runtime, xpus = parse_xpu_smi(r.stdout)
    return tool, driver, runtime, xpus
