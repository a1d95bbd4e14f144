import json

import psutil

from paddlefit.diagnose import Snapshot, collect_snapshot


def test_snapshot_of_this_cpu_machine_round_trips(tmp_path, monkeypatch):
    monkeypatch.setenv("FLAGS_enable_parallel_graph", "1")  # a blog-post flag: recorded as the user set it
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth9")
    snap = collect_snapshot(tmp_path / "runs" / "not-yet")
    assert snap.paddle_version == "3.3.1" and snap.paddle_cuda is None  # the CPU wheel
    assert "FLAGS_check_nan_inf" in snap.paddle_flags and "FLAGS_enable_parallel_graph" not in snap.paddle_flags
    assert snap.env["FLAGS_enable_parallel_graph"] == "1" and snap.env["NCCL_SOCKET_IFNAME"] == "eth9"
    assert snap.memory_total_bytes == psutil.virtual_memory().total
    assert snap.disk_free_bytes and snap.disk_free_bytes > 0
    assert snap.gpus == [] and snap.driver_version is None  # no NVIDIA driver on CI
    assert any(n.name == "lo" for n in snap.net)
    again = Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert again == snap
