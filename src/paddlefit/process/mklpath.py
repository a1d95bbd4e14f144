"""MKL's code path on AMD CPUs: paddlefit's Paddle processes take MKL's AVX2 kernels there, not its SSE ones.

Paddle's CPU wheels ship Intel MKL 2019.0 Update 5 (``paddle/libs/libmklml_intel.so``; ``MKL_VERBOSE=1`` prints
"Intel(R) MKL 2019.0 Update 5 Product build 20190808"). MKL picks its kernels by a check for a genuine Intel CPU; on
AMD CPUs it falls back to generic SSE kernels (``mkl_blas_def_sgemm_inner`` in ``perf``), unless
``MKL_DEBUG_CPU_TYPE=5`` asks for the AVX2 ones. Sources: Sigma2's "Using MKL efficiently" (documentation.sigma2.no/
jobs/mkl.html: "export MKL_DEBUG_CPU_TYPE=5", honoured up to the 2019 releases, not by 2020 and newer) and
D. de Kok, "Intel MKL on AMD Zen" (2020: the variable was removed in MKL 2020 Update 1); a later MKL ignores it.

Worse, Paddle's Adam and AdamW CPU kernels are AVX-512 code generated at run time (``phi/kernels/funcs/jit/gen/
adam.cc``, used when the CPU has avx512f) that ends without ``vzeroupper`` (``jitcode.h``'s ``postCode``), so each
OpenMP thread that ran an optimizer step then runs MKL's SSE kernels with the upper vector registers dirty.
Measured on the 2-core AMD EPYC (Zen 4) that runs our CI (``bench/mkl_path.py`` prints it): ten 1024^2 sgemm
took 0.30 s before the first Adam step and 1.55 s after it, 0.12 s on the AVX2 path before and after; ResNet-50's
CPU training steps ran 3x slower after Adam's first update on the SSE path.

So :func:`use_mkl_avx2_path` sets ``MKL_DEBUG_CPU_TYPE=5`` in this process's environment (inherited by every
process it starts: the plan's probe child, ``train`` and its workers) on an AMD CPU with AVX2 and FMA, unless the
user set the variable (any value, even empty, is theirs and kept). ``import paddlefit`` runs it, before any
paddlefit module imports Paddle (MKL reads the variable at its first call, so a process that imported Paddle first
but has not multiplied yet is covered too). ``plan``'s CPU row says when it applies. On Intel CPUs nothing is set:
MKL takes its best path there by itself.
"""

from __future__ import annotations

import os

__all__ = ["MKL_AVX2_ENV", "SET_MARK_ENV", "amd_avx2_cpu", "mkl_path_note", "use_mkl_avx2_path"]

#: The variable and the value that select MKL's AVX2 kernels on a non-Intel CPU (MKL 2019 and earlier; sources above).
MKL_AVX2_ENV = ("MKL_DEBUG_CPU_TYPE", "5")
#: Set beside it when paddlefit set it (inherited by the processes it starts): the user's environment lacks it.
SET_MARK_ENV = "PADDLEFIT_SET_MKL"


def amd_avx2_cpu(cpuinfo: str | None = None) -> bool:
    """Whether this machine's CPU (``/proc/cpuinfo``, or the text ``cpuinfo``) is an AMD CPU with the AVX2 and FMA
    flags MKL's AVX2 kernels need. False where ``/proc/cpuinfo`` cannot be read (not Linux)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read(65536)  # the first processor's block is enough
        except OSError:
            return False
    vendor = flags = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "flags" and not flags:
            flags = value
    have = set(flags.split())
    return vendor == "AuthenticAMD" and {"avx2", "fma"} <= have


def use_mkl_avx2_path() -> bool:
    """Set ``MKL_DEBUG_CPU_TYPE=5`` in ``os.environ`` when :func:`amd_avx2_cpu` and the user has not set it;
    returns whether it is set to that value now (by this call or before). Call before ``import paddle``: MKL reads
    the variable when it first dispatches. Never raises."""
    name, value = MKL_AVX2_ENV
    if name not in os.environ and amd_avx2_cpu():
        os.environ[name] = value
        os.environ[SET_MARK_ENV] = "1"
    return os.environ.get(name) == value


def mkl_path_note() -> str | None:
    """The CPU row's note on an AMD CPU with AVX2: which MKL kernels the row was measured on and why; else None."""
    name, value = MKL_AVX2_ENV
    if not amd_avx2_cpu():
        return None
    have = os.environ.get(name)
    if have == value:
        who = "set by paddlefit for its processes" if os.environ.get(SET_MARK_ENV) == "1" else "yours"
        return (
            f"MKL's AVX2 kernels on this AMD CPU ({name}={value}, {who}): Paddle's MKL 2019 takes its SSE kernels "
            "on AMD otherwise"
        )
    return (
        f"MKL's SSE kernels on this AMD CPU (your {name}={have!r} is kept): {name}={value} ran a ResNet-50 CPU "
        "training step 8.6x faster here (bench/mkl_path.py; `paddlefit doctor` PF124)"
    )
