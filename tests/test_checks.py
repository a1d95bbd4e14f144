"""Each check fires on a snapshot that shows the problem and stays quiet on a healthy one (Snapshot literals)."""

from paddlefit.diagnose.checks import run_checks
from paddlefit.diagnose.snapshot import GPUInfo, NetInterface, Snapshot

FLAGS = ["FLAGS_check_nan_inf", "FLAGS_cudnn_exhaustive_search", "FLAGS_allocator_strategy"]


def healthy_gpu(**over) -> Snapshot:
    base = dict(os="Linux", python="3.11.7", paddle_version="3.3.1", paddle_cuda="12.6", paddle_cudnn="9.5",
                paddle_flags=FLAGS, driver_version="560.35.03", cuda_driver_version="12.6",
                gpus=[GPUInfo(index=0, name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")],
                net=[NetInterface("eth0", "up", 25000), NetInterface("lo", "unknown", None)], env={})  # fmt: skip
    base.update(over)
    return Snapshot(**base)


def bad(findings):
    return [(f.check_id, f.severity) for f in findings if f.severity != "ok"]


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
    s = healthy_gpu(paddle_cuda="13.0", driver_version="580.65.06",
                    gpus=[GPUInfo(index=0, name="Tesla V100-SXM2-16GB", compute_capability="7.0")])
    assert ("PF103", "error") in bad(run_checks(s))


def test_gpu_build_without_gpu_and_cpu_build_with_gpu():
    assert ("PF104", "error") in bad(run_checks(healthy_gpu(gpus=[])))
    assert ("PF104", "warn") in bad(run_checks(healthy_gpu(paddle_cuda=None)))


def test_blog_post_flag_and_typo():
    s = healthy_gpu(env={"FLAGS_enable_parallel_graph": "1", "FLAGS_cudnn_exhaustive_serch": "1",
                         "FLAGS_check_nan_inf": "1"})  # fmt: skip
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
    """PF121: the environment's OpenMP policy is reported when its measured step is >= 10% slower than the best of
    (it, unset, PASSIVE), with the export that picks the best; a value OpenMP does not know is reported as such."""
    from paddlefit.diagnose.checks import check_omp_wait_policy

    slow = check_omp_wait_policy(healthy_gpu(cpu_cores=2, omp={"user": "", "step_s": {"": 0.012, "PASSIVE": 0.009}}))
    assert [(f.severity, f.fix) for f in slow] == [("warn", "export OMP_WAIT_POLICY=PASSIVE")]
    assert "1.33x slower" in slow[0].title
    back = check_omp_wait_policy(healthy_gpu(omp={"user": "PASSIVE", "step_s": {"PASSIVE": 0.02, "": 0.01}}))
    assert [(f.severity, f.fix) for f in back] == [("warn", "unset OMP_WAIT_POLICY")]
    fine = check_omp_wait_policy(healthy_gpu(omp={"user": "", "step_s": {"": 0.0100, "PASSIVE": 0.0095}}))
    assert [f.severity for f in fine] == ["ok"]
    junk = check_omp_wait_policy(healthy_gpu(omp={"user": "garbage"}))
    assert [(f.severity, f.title) for f in junk] == [("warn", "OMP_WAIT_POLICY=garbage is not a policy")]
    assert check_omp_wait_policy(healthy_gpu()) == []  # not measured (a replayed snapshot, --no-measure)
