"""MKL's code path (paddlefit.process.mklpath): AVX2 on AMD CPUs with AVX2 and FMA, the user's own setting kept,
inherited by the processes paddlefit starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paddlefit.process.mklpath import MKL_AVX2_ENV, SET_MARK_ENV, amd_avx2_cpu, mkl_path_note, use_mkl_avx2_path

NAME, VALUE = MKL_AVX2_ENV
ZEN4 = (
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel name\t: AMD EPYC\n"
    "flags\t\t: fpu sse sse2 avx avx2 fma avx512f\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\n"
)
XEON = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse sse2 avx avx2 fma avx512f\n"
OLD_AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse sse2 avx\n"  # no AVX2 kernels to run


@pytest.mark.parametrize(("cpuinfo", "expected"), [(ZEN4, True), (XEON, False), (OLD_AMD, False), ("", False)])
def test_amd_avx2_cpu_reads_the_vendor_and_the_flags(cpuinfo: str, expected: bool) -> None:
    assert amd_avx2_cpu(cpuinfo) is expected


def test_the_users_own_setting_is_kept_and_the_cpu_row_says_which_kernels_it_ran(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(NAME, "")
    monkeypatch.delenv(SET_MARK_ENV, raising=False)
    assert use_mkl_avx2_path() is False
    assert os.environ[NAME] == "" and SET_MARK_ENV not in os.environ
    note = mkl_path_note()
    if amd_avx2_cpu():
        assert note is not None and "MKL's SSE kernels" in note and "your MKL_DEBUG_CPU_TYPE='' is kept" in note
        monkeypatch.setenv(NAME, VALUE)
        assert "(MKL_DEBUG_CPU_TYPE=5, yours)" in (mkl_path_note() or "")
    else:
        assert note is None


def test_set_only_on_an_amd_cpu_with_avx2_and_marked_as_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)
    monkeypatch.delenv(SET_MARK_ENV, raising=False)
    amd = amd_avx2_cpu()
    assert use_mkl_avx2_path() is amd
    assert os.environ.get(NAME) == (VALUE if amd else None)
    assert os.environ.get(SET_MARK_ENV) == ("1" if amd else None)
    assert (mkl_path_note() is not None) is amd
    if amd:
        assert "set by paddlefit for its processes" in (mkl_path_note() or "")


def test_import_paddlefit_sets_it_for_the_processes_it_starts() -> None:
    env = {k: v for k, v in os.environ.items() if k != NAME}
    child = f"import os; print(os.environ.get({NAME!r}))"
    code = f"import subprocess, sys\nimport paddlefit\nsubprocess.run([sys.executable, '-c', {child!r}], check=True)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == (VALUE if amd_avx2_cpu() else "None")
