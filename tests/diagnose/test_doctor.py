"""`paddlefit doctor` (the command, end to end) on recorded snapshots: each yields exactly its finding and fix; the
healthy one none. The checks themselves are unit-tested in test_checks.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SNAPS = Path(__file__).resolve().parents[1] / "data" / "snapshots"


def doctor(*args):
    env = dict(os.environ, COLUMNS="200")
    env.pop("FLAGS_enable_parallel_graph", None)
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "doctor", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def problems(r):
    doc = json.loads(r.stdout)
    return sorted((f["check_id"], f["severity"]) for f in doc["findings"] if f["severity"] != "ok"), doc


@pytest.mark.parametrize(
    ("name", "job", "expected", "code"),
    [
        ("healthy_8xa100", [], [], 0),
        ("docker_shm_64mb", ["--num-workers", "4", "-b", "64", "-i", "float32[3,224,224]"], [("PF106", "error")], 1),
        ("driver_too_old", [], [("PF100", "error"), ("PF102", "error")], 1),
        ("blog_flags", [], [("PF110", "error"), ("PF111", "warn")], 1),
        ("nccl_wrong_iface", [], [("PF112", "warn")], 0),
        ("gpu_build_no_gpu", [], [("PF104", "error")], 1),
    ],
)
def test_recorded_snapshots(name, job, expected, code):
    r = doctor("--from", str(SNAPS / f"{name}.json"), "--json", *job)
    assert r.returncode == code, r.stderr
    found, doc = problems(r)
    assert found == expected
    fixes = {f["check_id"]: f["fix"] for f in doc["findings"] if f["severity"] != "ok"}
    if name == "docker_shm_64mb":
        assert fixes["PF106"].startswith("docker run --shm-size=1g")
    if name == "nccl_wrong_iface":
        assert fixes["PF112"] == "export NCCL_SOCKET_IFNAME=ens12"
    if name == "driver_too_old":
        assert ">= 560.28.03" in fixes["PF102"]


def test_fix_script_is_shell(tmp_path):
    r = doctor("--from", str(SNAPS / "blog_flags.json"), "--fix-script")
    assert r.stdout.split("\n")[:2] == ["unset FLAGS_enable_parallel_graph", "unset PADDLE_DIST_TYPE"]
    assert subprocess.run(["bash", "-n", "-c", r.stdout]).returncode == 0


@pytest.mark.serial
def test_this_machine_reports_cpu_build_and_passes(tmp_path):
    snap = tmp_path / "me.json"
    r = doctor("--all", "--snapshot", str(snap))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Paddle 3.3.1 (CPU build) imports" in r.stdout and "forward/backward runs on cpu" in r.stdout
    again = doctor("--from", str(snap), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["snapshot"]["paddle_cuda"] is None


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{", "not valid JSON"),
        ('{"x": 1}', "not a paddlefit"),
        ('{"os": "Linux", "python": "3", "gpus": [1]}', "`gpus.0`"),
        (None, "cannot be read"),
    ],
)
def test_bad_snapshot_file(tmp_path, content, needle):
    f = tmp_path / "s.json"
    if content is not None:
        f.write_text(content)
    r = doctor("--from", str(f))
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_fix_script_never_runs_odd_names(tmp_path):
    snap = json.loads((SNAPS / "nccl_wrong_iface.json").read_text())
    snap["net"] = [{"name": "x;touch /tmp/pwned", "state": "up", "speed_mbps": 100000}]
    snap["env"]["FLAGS_x$(touch /tmp/pwned)"] = "1"
    (tmp_path / "s.json").write_text(json.dumps(snap))
    r = doctor("--from", str(tmp_path / "s.json"), "--fix-script")
    lines = r.stdout.strip().splitlines()
    assert lines and all(line.startswith("# ") for line in lines), lines


def test_markup_in_user_values_is_printed_not_parsed(tmp_path):
    snap = json.loads((SNAPS / "driver_too_old.json").read_text())
    snap["device_runs"]["gpu:0"] = "boom [/b] [red]"
    (tmp_path / "s.json").write_text(json.dumps(snap))
    r = doctor("--from", str(tmp_path / "s.json"))
    assert r.returncode == 1 and "boom [/b] [red]" in " ".join(r.stdout.split()), r.stdout + r.stderr
    r = doctor("-i", "[/]")
    assert r.returncode == 2 and "[/]" in r.stderr and "Traceback" not in r.stderr


def test_spec_without_shared_memory_and_cli_overrides(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "model: lenet\ninputs: ['float32[3,224,224]']\nbatch_size: 256\ndevices: 8\n"
        "data: {num_workers: 8, use_shared_memory: false}\n"
    )
    r = doctor("--from", str(SNAPS / "docker_shm_64mb.json"), "--config", str(spec), "--json")
    found = {f["check_id"]: f["severity"] for f in json.loads(r.stdout)["findings"]}
    assert found["PF106"] == "ok"
    spec.write_text(
        "model: lenet\ninputs: ['float32[3,224,224]']\nbatch_size: 64\ndevices: 8\ndata: {num_workers: 1}\n"
    )
    r = doctor("--from", str(SNAPS / "docker_shm_64mb.json"), "--config", str(spec), "--devices", "1", "--json")
    pf106 = next(f for f in json.loads(r.stdout)["findings"] if f["check_id"] == "PF106")
    assert "1 x 1 workers" in pf106["detail"]  # --devices 1 overrode the spec's 8


def test_doctor_table_at_80_columns_gives_the_finding_the_width():
    """At 80 columns the finding and the fix shared the width: 31-character columns, four lines a finding.
    Narrow terminals put the fix under its finding, so the finding reads as a line."""
    env = dict(os.environ, COLUMNS="80")
    r = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "doctor", "--from", str(SNAPS / "docker_shm_64mb.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    row = next(line for line in lines if line.startswith("PF106"))
    assert "/dev/shm is 64 MiB in a container (DataLoader workers" in row
    assert any("fix: docker run --shm-size=8g" in line for line in lines)
    wide = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "doctor", "--from", str(SNAPS / "docker_shm_64mb.json")],
        capture_output=True,
        text=True,
        env=dict(env, COLUMNS="200"),
        timeout=300,
    ).stdout
    assert "fix" in wide.splitlines()[0]  # wide terminals keep the fix column


def test_inconclusive_timing_is_not_called_ok(tmp_path):
    """PF121 printed `ok` with "inconclusive (noise 135%)" and the summary counted it among the
    ok; every ok row at 80 columns also printed an empty `fix:` line. An inconclusive check has its own label and
    count, does not fail doctor, and a finding without a fix prints no fix line."""
    snap = json.loads((SNAPS / "healthy_8xa100.json").read_text())
    snap["omp"] = {"user": "", "step_s": {"": [0.0182, 0.0100, 0.0121], "PASSIVE": [0.0100, 0.0100, 0.0100]}}
    (tmp_path / "s.json").write_text(json.dumps(snap))
    r = doctor("--from", str(tmp_path / "s.json"), "--json")
    assert r.returncode == 0, r.stderr
    findings = json.loads(r.stdout)["findings"]
    assert [f["severity"] for f in findings if f["check_id"] == "PF121"] == ["inconclusive"]
    n_ok = sum(f["severity"] == "ok" for f in findings)
    narrow = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "doctor", "--all", "--from", str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="80"),
        timeout=300,
    )
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert lines[-1] == f"0 error(s), 0 warning(s), {n_ok} ok, 1 inconclusive"
    assert next(line for line in lines if line.startswith("PF121")).split()[1] == "inconclusive"
    assert not any(line.strip() == "fix:" for line in lines), narrow.stdout


def test_doctor_snapshot_refuses_to_replace_a_job_spec(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("model: lenet\n")
    r = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "doctor", "--no-measure", "--snapshot", str(spec)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "`--snapshot" in r.stderr and "is not a file this command wrote" in r.stderr, r.stderr
    assert spec.read_text() == "model: lenet\n"
    snap = tmp_path / "me.json"
    r = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "doctor", "--no-measure", "--snapshot", str(snap)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode in (0, 1) and '"shm_total_bytes"' in snap.read_text()
    again = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "doctor", "--no-measure", "--snapshot", str(snap)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode in (0, 1), again.stderr  # its own earlier snapshot is replaced
