"""Each check fires on a snapshot that shows the problem and stays quiet on a healthy one (Snapshot literals and
recorded snapshots, no subprocess); the registry, the findings' structured fixes and the catalog data they read."""

import json
import re
from pathlib import Path

import pytest

from paddlefit.diagnose.checks import run_checks
from paddlefit.diagnose.registry import JobContext
from paddlefit.diagnose.snapshot import GPUInfo, NetInterface, Snapshot
from paddlefit.units import GIB

SNAPS = Path(__file__).resolve().parents[1] / "data" / "snapshots"

FLAGS = ["FLAGS_check_nan_inf", "FLAGS_cudnn_exhaustive_search", "FLAGS_allocator_strategy"]


def healthy_gpu(**over) -> Snapshot:
    base = dict(
        os="Linux",
        python="3.11.7",
        paddle_version="3.3.1",
        paddle_cuda="12.6",
        paddle_cudnn="9.5",
        paddle_flags=FLAGS,
        driver_version="560.35.03",
        cuda_driver_version="12.6",
        gpus=[GPUInfo(index=0, name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")],
        net=[NetInterface("eth0", "up", 25000), NetInterface("lo", "unknown", None)],
        env={},
    )
    base.update(over)
    return Snapshot(**base)


def bad(findings):
    return sorted((f.check_id, f.severity) for f in findings if f.severity != "ok")


def test_healthy_gpu_snapshot_has_no_problem():
    assert bad(run_checks(healthy_gpu())) == []


def test_paddle_missing():
    assert ("PF101", "error") in bad(run_checks(healthy_gpu(paddle_version=None, paddle_cuda=None)))


def test_driver_too_old_for_cuda_build():
    f = [x for x in run_checks(healthy_gpu(driver_version="470.82.01")) if x.check_id == "PF102"]
    assert f[0].severity == "error" and ">= 560.28.03" in f[0].fix
    warn = [x for x in run_checks(healthy_gpu(driver_version="535.104.05")) if x.check_id == "PF102"]
    assert warn[0].severity == "warn"  # 12.x minor-version compatibility, below 12.6's own minimum


def test_cuda13_on_volta():
    s = healthy_gpu(
        paddle_cuda="13.0",
        driver_version="580.65.06",
        gpus=[GPUInfo(index=0, name="Tesla V100-SXM2-16GB", compute_capability="7.0")],
    )
    assert ("PF103", "error") in bad(run_checks(s))


def test_gpu_build_without_gpu_and_cpu_build_with_gpu():
    assert ("PF104", "error") in bad(run_checks(healthy_gpu(gpus=[])))
    assert ("PF104", "warn") in bad(run_checks(healthy_gpu(paddle_cuda=None)))


def test_blog_post_flag_and_typo():
    s = healthy_gpu(
        env={"FLAGS_enable_parallel_graph": "1", "FLAGS_cudnn_exhaustive_serch": "1", "FLAGS_check_nan_inf": "1"}
    )
    f = [x for x in run_checks(s) if x.check_id == "PF110"]
    assert [x.title.split()[0] for x in f] == ["FLAGS_cudnn_exhaustive_serch", "FLAGS_enable_parallel_graph"]
    assert "did you mean FLAGS_cudnn_exhaustive_search" in f[0].detail and f[0].fix == "unset " + f[0].title.split()[0]
    assert "PR #51375" in f[1].detail


def test_paddle_dist_type():
    assert ("PF111", "warn") in bad(run_checks(healthy_gpu(env={"PADDLE_DIST_TYPE": "nccl"})))


def test_nccl_interface():
    net = [NetInterface("eth0", "up", 1000), NetInterface("ib0", "up", 100000), NetInterface("lo", "unknown")]
    assert ("PF112", "error") in bad(run_checks(healthy_gpu(net=net, env={"NCCL_SOCKET_IFNAME": "enp"})))
    slow = [x for x in run_checks(healthy_gpu(net=net, env={"NCCL_SOCKET_IFNAME": "eth"})) if x.check_id == "PF112"]
    assert slow[0].severity == "warn" and slow[0].fix == "export NCCL_SOCKET_IFNAME=ib0"
    assert bad(run_checks(healthy_gpu(net=net, env={"NCCL_SOCKET_IFNAME": "^eth,lo"}))) == []


def test_omp_wait_policy_is_judged_on_its_measured_step() -> None:
    """PF121: the environment's OpenMP policy is reported when its measured step is >= 10% slower than another of
    (it, unset, PASSIVE) clear of noise: interleaved rounds, the 95% interval of the paired ratio above 1.10x; with
    the export that picks the faster; a value OpenMP does not know is reported as such."""
    from paddlefit.diagnose.checks import check_omp_wait_policy

    rounds = {"": [0.012, 0.0125, 0.0118, 0.0121], "PASSIVE": [0.009, 0.0092, 0.0089, 0.0091]}
    slow = check_omp_wait_policy(healthy_gpu(cpu_cores=2, omp={"user": "", "step_s": rounds}))
    assert [(f.severity, f.fix) for f in slow] == [("warn", "export OMP_WAIT_POLICY=PASSIVE")]
    assert "1.34x slower" in slow[0].title and "95%" in slow[0].detail and "4 interleaved rounds" in slow[0].detail
    back = check_omp_wait_policy(
        healthy_gpu(omp={"user": "PASSIVE", "step_s": {"PASSIVE": [0.02, 0.021, 0.019], "": [0.01, 0.0101, 0.0099]}})
    )
    assert [(f.severity, f.fix) for f in back] == [("warn", "unset OMP_WAIT_POLICY")]
    fine = check_omp_wait_policy(
        healthy_gpu(omp={"user": "", "step_s": {"": [0.0100, 0.0101, 0.0099], "PASSIVE": [0.0095, 0.0097, 0.0096]}})
    )
    assert [f.severity for f in fine] == ["ok"] and "within 10%" in fine[0].title
    junk = check_omp_wait_policy(healthy_gpu(omp={"user": "garbage"}))
    assert [(f.severity, f.title) for f in junk] == [("warn", "OMP_WAIT_POLICY=garbage is not a policy")]
    assert check_omp_wait_policy(healthy_gpu()) == []  # not measured (a replayed snapshot, --no-measure)


def test_omp_wait_policy_does_not_warn_inside_its_own_noise() -> None:
    """`warn ... 1.82x slower`, `ok` a minute later, `warn ... 1.21x slower` right after: one fresh process
    per policy, no repeats. The same rounds on a loaded machine (1.82x, 1.0x, 1.21x) are inconclusive with the
    noise said; a single measurement (an older snapshot) is too."""
    from paddlefit.diagnose.checks import check_omp_wait_policy

    noisy = {"": [0.0182, 0.0100, 0.0121], "PASSIVE": [0.0100, 0.0100, 0.0100]}
    got = check_omp_wait_policy(healthy_gpu(cpu_cores=2, omp={"user": "", "step_s": noisy}))
    assert [f.severity for f in got] == ["inconclusive"]  # it was labelled and counted `ok`
    assert re.search(r"inconclusive \(noise \d+%\)", got[0].title) and "no fix" in got[0].detail
    once = check_omp_wait_policy(healthy_gpu(omp={"user": "", "step_s": {"": 0.012, "PASSIVE": 0.009}}))
    assert [f.severity for f in once] == ["inconclusive"] and "inconclusive" in once[0].title


def _snap(**over):
    d = json.loads((SNAPS / "healthy_8xa100.json").read_text())
    s = Snapshot.from_dict(d)
    for k, v in over.items():
        setattr(s, k, v)
    return s


def test_job_checks_fire_and_stay_quiet():
    s = _snap(cpu_cores=8)
    assert ("PF107", "warn") in bad(run_checks(s, JobContext(num_workers=4, devices=8)))
    assert bad(run_checks(s, JobContext(num_workers=1, devices=8))) == []
    s = _snap(disk_free_bytes=10 * GIB)
    assert ("PF108", "error") in bad(run_checks(s, JobContext(checkpoint_bytes=4 * GIB)))
    assert bad(run_checks(s, JobContext(checkpoint_bytes=GIB))) == []


def test_device_and_nvml_checks():
    s = _snap(env={"CUDA_VISIBLE_DEVICES": "0,8"})
    assert ("PF105", "error") in bad(run_checks(s))
    s = _snap(env={"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "NCCL_IB_DISABLE": "1"})
    assert ("PF113", "warn") in bad(run_checks(s))
    s = _snap(infiniband=[], env={})
    assert ("PF113", "warn") in bad(run_checks(s))
    sick = GPUInfo(
        index=0,
        name="NVIDIA A100-SXM4-80GB",
        compute_capability="8.0",
        ecc_uncorrected_errors=3,
        pcie_gen_current=3,
        pcie_gen_max=4,
        pcie_width_current=8,
        pcie_width_max=16,
        throttle_reasons=0x20,
        processes=[{"pid": 4242, "used_bytes": 8 * GIB}],
    )
    found = [f for f in run_checks(_snap(gpus=[sick])) if f.check_id == "PF120"]
    assert sorted(f.severity for f in found) == ["error", "warn", "warn", "warn"]
    idle = GPUInfo(index=0, name="A100", compute_capability="8.0", throttle_reasons=0x1)
    assert [f.severity for f in run_checks(_snap(gpus=[idle])) if f.check_id == "PF120"] == ["ok"]


def test_flag_values():
    s = _snap(
        env={
            "FLAGS_cudnn_exhaustive_search": "yes",
            "FLAGS_allocator_strategy": "best",
            "FLAGS_conv_workspace_size_limit": "4096",
        }
    )
    found = [f for f in run_checks(s) if f.check_id == "PF109"]
    assert [f.title.split("=")[0] for f in found] == ["FLAGS_allocator_strategy", "FLAGS_cudnn_exhaustive_search"]
    s = _snap(env={"FLAGS_fraction_of_gpu_memory_to_use": "0.5"})
    assert ("PF109", "warn") in bad(run_checks(s))
    s = _snap(
        env={
            "FLAGS_fraction_of_gpu_memory_to_use": "0.5",
            "FLAGS_allocator_strategy": "naive_best_fit",
            "FLAGS_cudnn_exhaustive_search": "1",
        }
    )
    assert bad(run_checks(s)) == []


def test_a_checks_id_and_slug_come_from_its_registration_alone() -> None:
    """Every finding carries the ID and slug its check was registered with; IDs and slugs are unique, each check
    documents itself, and fixes that set or unset variables say so as data (``env``/``unset``)."""
    from paddlefit.diagnose.checks import check_nccl_ifname
    from paddlefit.diagnose.registry import REGISTRY

    assert len({c.check_id for c in REGISTRY}) == len({c.slug for c in REGISTRY}) == len(REGISTRY)
    assert all(c.description for c in REGISTRY)
    assert (check_nccl_ifname.check_id, check_nccl_ifname.slug) == ("PF112", "nccl-socket-ifname")
    snaps = [Snapshot.from_dict(json.loads(p.read_text())) for p in sorted(SNAPS.glob("*.json"))]
    snaps += [healthy_gpu(env={"FLAGS_x": "1", "PADDLE_DIST_TYPE": "nccl", "CUDA_VISIBLE_DEVICES": "7"})]
    seen = set()
    for s in snaps:
        for c in REGISTRY:
            for f in c(s, JobContext(num_workers=64, batch_bytes=10**9, devices=8, checkpoint_bytes=10**15)):
                assert (f.check_id, f.slug) == (c.check_id, c.slug)
                if f.env or f.unset:
                    assert f.fix == "; ".join(f.shell_lines()) and f.severity != "ok"
                    seen.add(f.check_id)
    assert {"PF105", "PF110", "PF111", "PF112"} <= seen


def test_structured_fixes_feed_fix_script_and_launch() -> None:
    """``Finding.env``/``unset`` give what `doctor --fix-script` prints and what `launch --from-snapshot` exports."""
    from paddlefit.deploy.targets import nccl_env
    from paddlefit.diagnose import fix_env, fix_script

    snap = SNAPS / "nccl_wrong_iface.json"
    findings = run_checks(Snapshot.from_dict(json.loads(snap.read_text())))
    pf112 = next(f for f in findings if f.check_id == "PF112")
    assert (pf112.env, pf112.unset, pf112.to_dict()["env"]) == ({"NCCL_SOCKET_IFNAME": "ens12"}, (), pf112.env)
    assert fix_env(findings, prefix="NCCL_") == {"NCCL_SOCKET_IFNAME": "ens12"}
    assert fix_script(findings) == "export NCCL_SOCKET_IFNAME=ens12"
    assert nccl_env(snap, None, True) == {"NCCL_SOCKET_IFNAME": "ens12", "NCCL_IB_DISABLE": "1"}
    assert nccl_env(snap, "ib0", False) == {"NCCL_SOCKET_IFNAME": "ib0"}  # the explicit option wins
    flags = run_checks(healthy_gpu(env={"FLAGS_enable_parallel_graph": "1"}))
    assert [f.unset for f in flags if f.severity != "ok"] == [("FLAGS_enable_parallel_graph",)]


def test_run_doctor_in_process() -> None:
    """The doctor command's core: a recorded snapshot and job options in, findings out; bad options named."""
    from paddlefit.diagnose.doctor import DoctorRequest, run_doctor
    from paddlefit.errors import PaddlefitError

    req = DoctorRequest(
        from_file=SNAPS / "docker_shm_64mb.json", num_workers=4, batch_size=64, inputs=["float32[3,224,224]"]
    )
    report = run_doctor(req)
    assert [(f.check_id, f.severity) for f in report.errors] == [("PF106", "error")]
    assert report.to_dict()["findings"][0].keys() >= {"check_id", "slug", "fix", "env", "unset"}
    with pytest.raises(PaddlefitError, match="`--num-workers` must be >= 0"):
        run_doctor(DoctorRequest(from_file=SNAPS / "healthy_8xa100.json", num_workers=-1))


def test_omp_policies_are_timed_in_interleaved_rounds_until_settled(monkeypatch) -> None:
    """The rounds alternate which policy goes first and stop once the verdict is clear (3 rounds when it is), else
    after MAX_ROUNDS."""
    from paddlefit.diagnose import snapshot
    from paddlefit.diagnose.repeats import MAX_ROUNDS, MIN_ROUNDS

    calls: list[str] = []
    clear = {"": 0.010, "PASSIVE": 0.010}
    monkeypatch.setattr(snapshot, "_omp_step", lambda pol: calls.append(pol) or clear[pol] * (1 + 0.001 * len(calls)))
    got = snapshot.measure_omp_policies(("", "PASSIVE"))
    assert calls == ["", "PASSIVE", "PASSIVE", "", "", "PASSIVE"] and [len(v) for v in got.values()] == [MIN_ROUNDS] * 2
    calls.clear()
    swings = iter([0.0182, 0.010, 0.010, 0.010, 0.0121, 0.010, 0.010, 0.015, 0.009, 0.010])
    monkeypatch.setattr(snapshot, "_omp_step", lambda pol: calls.append(pol) or next(swings))
    got = snapshot.measure_omp_policies(("", "PASSIVE"))
    assert len(calls) == 2 * MAX_ROUNDS and [len(v) for v in got.values()] == [MAX_ROUNDS] * 2


@pytest.mark.parametrize(
    ("amd", "env", "expected"),
    [
        (True, {"MKL_DEBUG_CPU_TYPE": "5"}, [("PF124", "ok")]),
        (True, {"MKL_DEBUG_CPU_TYPE": "5", "PADDLEFIT_SET_MKL": "1"}, [("PF124", "warn")]),  # set by paddlefit only
        (True, {}, [("PF124", "warn")]),
        (True, {"MKL_DEBUG_CPU_TYPE": ""}, [("PF124", "warn")]),
        (False, {}, []),
        (None, {}, []),
    ],
)
def test_mkl_code_path_is_checked_on_amd_cpus_only(amd, env, expected):
    found = [f for f in run_checks(healthy_gpu(cpu_amd_avx2=amd, env=env)) if f.check_id == "PF124"]
    assert [(f.check_id, f.severity) for f in found] == expected
    if expected and expected[0][1] == "warn":
        assert found[0].env == {"MKL_DEBUG_CPU_TYPE": "5"}
        assert "export MKL_DEBUG_CPU_TYPE=5" in found[0].fix
