"""Faults a scheduler and a user meet (issue 27): a rank of a 2-process run SIGKILLed, a full disk at each kind of
write, every crash point of a checkpoint save. Real CLI in subprocesses on the CPU, as in tests/test_train.py."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from test_train import ENV, run, summary, train_cmd, wait_for_step, write_spec

#: The exit codes docs/errors.md documents (no wrapped negative: 241 = -15, 247 = -9)
DOCUMENTED = {0, 1, 2, 3, 4, 130, 143}


def _workers(proc: subprocess.Popen) -> dict[str, object]:
    import psutil

    found = {}
    for p in psutil.Process(proc.pid).children(recursive=True):
        try:
            rank = p.environ().get("PADDLE_TRAINER_ID")
        except psutil.Error:
            continue
        if rank is not None:
            found[rank] = p
    return found


@pytest.mark.slow
@pytest.mark.parametrize("rank", ["1", "0"])
def test_a_sigkilled_rank_exits_with_a_documented_code_and_the_run_resumes_bit_exact(tmp_path: Path,
                                                                                     rank: str) -> None:
    """SIGKILL of one rank of `train --devices 2` (the OOM killer, a node lost): Paddle's launcher exits with the
    worker's negative code, which wrapped to 8 bits is 247 (-9) or 241 (-15), codes Kubeflow's ExitCode policy
    retries and no doc lists. The run exits 1 (the job failed) naming the signal; resumed, it reaches the
    uninterrupted run's parameters bit for bit, losing at most one checkpoint interval."""
    spec = write_spec(tmp_path / "s.yaml", max_steps=30, checkpoint={"every_steps": 5, "every_minutes": 0},
                      data={"train": "trainhelpers:slow_digits", "train_args": {"split": "train", "delay": 0.002}})
    full = run(train_cmd(spec, tmp_path / "full", "--devices", "2"))
    assert full.returncode == 0, full.stderr[-3000:]
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen(train_cmd(spec, run_dir, "--devices", "2"), env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    reached = wait_for_step(run_dir, 12, proc)
    _workers(proc)[rank].send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode in DOCUMENTED - {0}, (proc.returncode, stderr[-3000:])
    assert proc.returncode == 1, stderr[-3000:]
    assert f"paddlefit: rank {rank} ended by signal SIGKILL" in stderr, stderr[-3000:]
    r = run(train_cmd(spec, run_dir, "--devices", "2"))
    assert r.returncode == 0, r.stderr[-3000:]
    resumed = int(r.stderr.split("(step ")[1].split(",")[0])
    assert reached - resumed <= 5 + 1, (reached, resumed)
    assert summary(run_dir)["params_sha256"] == summary(tmp_path / "full")["params_sha256"]


@pytest.mark.parametrize(("launcher", "stopped_by", "want"), [
    (0, None, 0), (None, None, 0), (2, None, 2), (3, None, 3), (4, None, 4), (143, None, 143), (130, None, 130),
    (-9, None, 1), (-15, None, 1), (-1, None, 1), (137, None, 1), (255, None, 1), ("boom", None, 1),
    (15, signal.SIGTERM, 143), (2, signal.SIGINT, 130), (6, signal.SIGABRT, 1),
])  # fmt: skip
def test_launcher_codes_map_to_documented_ones(launcher: object, stopped_by: int | None, want: int) -> None:
    """Paddle's launcher exits with a worker's negative code (-9 wraps to 247) or, stopped itself, the signal's
    number (SIGINT's 2 reads as bad input): each maps to a code docs/errors.md lists."""
    from paddlefit.train.distlaunch import scheduler_exit_code

    assert scheduler_exit_code(launcher, stopped_by) == want
    assert want in DOCUMENTED


def test_log_lines_and_errors_show_a_hostile_run_dir_escaped(tmp_path: Path) -> None:
    """`train` logs its run directory ("resumed from ...", the registry, the summary) and names it in errors: a name
    with `\\e[2J` (clear screen), `\\r` or a C1 CSI reaches the terminal escaped, never raw (issue 27)."""
    hostile = "r\x1b[2J\r\x9b31m"
    run_dir = tmp_path / hostile
    spec = write_spec(tmp_path / "s.yaml", max_steps=2, checkpoint={"every_steps": 1, "every_minutes": 0})
    for _ in range(2):  # the second resumes: "resumed from RUN_DIR/checkpoints/..."
        r = run(train_cmd(spec, run_dir, "--max-steps", "2"), env=dict(ENV, PADDLEFIT_HOME=str(tmp_path)))
        assert r.returncode == 0, r.stderr[-3000:]
        assert not any(c in r.stderr + r.stdout for c in "\x1b\r\x9b"), repr(r.stderr[-2000:])
    assert "r\\x1b[2J\\r\\x9b31m/checkpoints/step-00000002" in r.stderr + r.stdout, r.stderr[-2000:]
    (tmp_path / "afile\x1b[2J").write_text("x")
    r = run(train_cmd(spec, tmp_path / "afile\x1b[2J" / "run"))
    assert r.returncode == 2 and "afile\\x1b[2J" in r.stderr and "\x1b" not in r.stderr, repr(r.stderr)
