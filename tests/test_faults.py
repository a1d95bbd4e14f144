"""Faults a scheduler and a user meet: a rank of a 2-process run SIGKILLed, a full disk at each kind of
write, every crash point of a checkpoint save. Real CLI in subprocesses on the CPU, as in tests/train/test_train.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from secretvalues import SECRETS, leaks
from trainrun import (
    DP_KILL_JOB,
    ENV,
    SharedRun,
    launched_children,
    params_sha256,
    run,
    train_cmd,
    wait_for_step,
    write_spec,
)

#: The exit codes docs/errors.md documents (no wrapped negative: 241 = -15, 247 = -9)
DOCUMENTED = {0, 1, 2, 3, 4, 130, 143}


@pytest.mark.slow
@pytest.mark.parametrize("rank", ["1", "0"])
def test_a_sigkilled_rank_exits_with_a_documented_code_and_the_run_resumes_bit_exact(
    tmp_path: Path, rank: str, dp_reference: SharedRun
) -> None:
    """SIGKILL of one rank of `train --devices 2` (the OOM killer, a node lost): Paddle's launcher exits with the
    worker's negative code, which wrapped to 8 bits is 247 (-9) or 241 (-15), codes Kubeflow's ExitCode policy
    retries and no doc lists. The run exits 1 (the job failed) naming the signal; resumed, it reaches the
    uninterrupted run's parameters (``dp_reference``, the same job) bit for bit, losing at most one checkpoint
    interval."""
    spec = write_spec(tmp_path / "s.yaml", **DP_KILL_JOB)
    run_dir = tmp_path / "killed"
    env = dict(ENV, **SECRETS)  # a failing rank's logs (Paddle's launcher prints their tails) carry none of them
    proc = subprocess.Popen(
        train_cmd(spec, run_dir, "--devices", "2"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    reached = wait_for_step(run_dir, 12, proc)
    launched_children(proc)[rank].send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode in DOCUMENTED - {0}, (proc.returncode, stderr[-3000:])
    assert proc.returncode == 1, stderr[-3000:]
    # the surviving rank may end first (its collective failed) and is named too: "rank 0 ended by code 1, rank 1 ..."
    assert f"rank {rank} ended by signal SIGKILL" in stderr and "paddlefit: rank " in stderr, stderr[-3000:]
    assert "s3cr3t-VALUE" not in stderr and leaks(run_dir) == []
    r = run(train_cmd(spec, run_dir, "--devices", "2"), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    resumed = int(r.stderr.split("(step ")[1].split(",")[0])
    assert reached - resumed <= 5 + 1, (reached, resumed)
    assert params_sha256(run_dir) == params_sha256(dp_reference.run_dir)


@pytest.mark.parametrize(
    ("launcher", "stopped_by", "want"),
    [
        (0, None, 0),
        (None, None, 0),
        (2, None, 2),
        (3, None, 3),
        (4, None, 4),
        (143, None, 143),
        (130, None, 130),
        (-9, None, 1),
        (-15, None, 1),
        (-1, None, 1),
        (137, None, 1),
        (255, None, 1),
        ("boom", None, 1),
        (15, signal.SIGTERM, 143),
        (2, signal.SIGINT, 130),
        (6, signal.SIGABRT, 1),
    ],
)
def test_launcher_codes_map_to_documented_ones(launcher: object, stopped_by: int | None, want: int) -> None:
    """Paddle's launcher exits with a worker's negative code (-9 wraps to 247) or, stopped itself, the signal's
    number (SIGINT's 2 reads as bad input): each maps to a code docs/errors.md lists."""
    from paddlefit.train.distlaunch import scheduler_exit_code

    assert scheduler_exit_code(launcher, stopped_by) == want
    assert want in DOCUMENTED


def test_log_lines_and_errors_show_a_hostile_run_dir_escaped(tmp_path: Path) -> None:
    """`train` logs its run directory ("resumed from ...", the registry, the summary) and names it in errors: a name
    with `\\e[2J` (clear screen), `\\r` or a C1 CSI reaches the terminal escaped, never raw."""
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


FAULT = Path(__file__).parent / "data" / "faultwrite.py"


def _faulty(tmp_path: Path, name: str, code: str, skip: int, *args: str) -> subprocess.CompletedProcess:
    return run(
        [sys.executable, str(FAULT), name, code, str(skip), "--", *args],
        env=dict(ENV, PADDLEFIT_HOME=str(tmp_path / "home")),
    )


@pytest.mark.parametrize(
    ("name", "code", "skip", "at"),
    [
        ("metrics.jsonl", "ENOSPC", 5, "at step 6"),  # mid-run: the 6th line
        ("comparison.json", "EDQUOT", 0, "at step 4"),  # written after the first periodic checkpoint
        ("status.json", "EROFS", 0, "at step 8"),  # the end (and so status.json cannot say it)
        ("summary.json", "ENOSPC", 0, "at step 8"),  # the end
        ("job.yaml", "ENOSPC", 0, "before the first step"),  # start-up
    ],
)
def test_a_failed_write_anywhere_is_exit_2_naming_file_step_and_checkpoint(
    tmp_path: Path, name: str, code: str, skip: int, at: str
) -> None:
    """A full disk outside the checkpoint write gave `OSError: [Errno 28]` from metrics.py's close, a traceback, exit
    1 and no status.json. Each kind of write of a run now fails through one write path: exit 2, a message
    naming the file, the step and the last intact checkpoint, and status.json saying the same (or why it could not);
    the run resumes from that checkpoint."""
    spec = write_spec(tmp_path / "s.yaml", max_steps=8, checkpoint={"every_steps": 4, "every_minutes": 0})
    run_dir = tmp_path / "r"
    r = _faulty(tmp_path, name, code, skip, "train", str(spec), "--run-dir", str(run_dir))
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"error: {at}: cannot write {run_dir / name}" in r.stderr, r.stderr[-3000:]
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").glob("step-*")) if at != "before the first step" else []
    assert (
        f"The last intact checkpoint is {run_dir / 'checkpoints' / ckpts[-1]}" in r.stderr
        if ckpts
        else "There is no intact checkpoint" in r.stderr
    )
    if name == "status.json":
        assert "status.json could not be written either: the file system is read-only" in r.stderr
    else:
        status = json.loads((run_dir / "status.json").read_text())
        assert status["exit_code"] == 2 and f"cannot write {run_dir / name}" in status["reason"], status
        assert status["step"] == (int(at.split()[-1]) if "at step" in at else 0)
    if at != "before the first step":  # `runs` says failed, not lost
        from paddlefit.runs import Registry

        row = Registry(tmp_path / "home" / "runs.db").list_runs()[0]
        assert (row["status"], row["exit_code"]) == ("failed", 2), row
    again = run(train_cmd(spec, run_dir))
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 8


def test_metrics_file_that_is_a_directory_is_exit_2_not_a_traceback(tmp_path: Path) -> None:
    """`metrics.jsonl` made a directory gave `IsADirectoryError` and exit 1."""
    run_dir = tmp_path / "r"
    (run_dir / "metrics.jsonl").mkdir(parents=True)
    r = run(train_cmd(write_spec(tmp_path / "s.yaml", max_steps=2), run_dir))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"{run_dir / 'metrics.jsonl'}" in r.stderr and "it is a directory" in r.stderr, r.stderr[-3000:]


def test_report_on_a_full_disk_is_exit_2_naming_the_file(tmp_path: Path, finished_run: SharedRun) -> None:
    run_dir = finished_run.copy(tmp_path / "r")
    r = _faulty(tmp_path, "report.html", "ENOSPC", 0, "report", str(run_dir))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"cannot write {run_dir / 'report.html'} (`--out`): the disk is full" in r.stderr, r.stderr
    assert not (run_dir / "report.html").exists()


def _tmpfs_script(mount: Path, kib: int, body: str) -> list[str]:
    """A shell running ``body`` with a ``kib`` KiB tmpfs on ``mount``, in its own user and mount namespace (no root
    needed where user namespaces are allowed; the mount goes away with it)."""
    return ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size={kib}k tmpfs {mount} && {body}"]


def _can_mount_tmpfs(tmp_path: Path) -> bool:
    (tmp_path / "probe").mkdir()
    try:
        return subprocess.run(_tmpfs_script(tmp_path / "probe", 64, "true"), capture_output=True).returncode == 0
    except OSError:
        return False


def test_a_disk_filled_mid_run_on_a_small_tmpfs_is_exit_2_and_resumes(tmp_path: Path) -> None:
    """The issue's own reproduction: a run directory on a 2 MiB tmpfs, filled mid-run (a dataset writes a file
    until ENOSPC after 8 steps' samples). It exited 1 with `OSError: [Errno 28]` from metrics.py's close and no
    status.json. Now: exit 2, the file, the step and the last intact checkpoint named, no traceback; with the
    space freed, the same command resumes from that checkpoint and finishes."""
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a tmpfs here (no user namespaces)")
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    filler = mnt / "filler"
    spec = write_spec(
        tmp_path / "s.yaml",
        max_steps=20,
        checkpoint={"every_steps": 5, "every_minutes": 0, "keep_last": 1},
        data={
            "train": "trainhelpers:filling_digits",
            "train_args": {"split": "train", "at": 12 * 16, "path": str(filler)},
        },
    )
    train = " ".join(train_cmd(spec, mnt / "r", "--no-predict"))
    body = (
        f"{train} >{out}/1.out 2>{out}/1.err; echo $? >{out}/1.rc; cp -a {mnt}/r {out}/r1; rm -f {filler}; "
        f"touch {filler}; {train} >{out}/2.out 2>{out}/2.err; echo $? >{out}/2.rc; cp -a {mnt}/r {out}/r2"
    )
    subprocess.run(_tmpfs_script(mnt, 2048, body), env=ENV, timeout=600, check=True)
    err1 = (out / "1.err").read_text()
    assert (out / "1.rc").read_text().strip() == "2", err1[-3000:]
    assert "Traceback" not in err1 and "the disk is full" in err1, err1[-3000:]
    assert f"{mnt / 'r'}" in err1 and "error: at step " in err1, err1[-3000:]
    assert f"The last intact checkpoint is {mnt / 'r' / 'checkpoints' / 'step-00000005'}" in err1, err1[-3000:]
    assert (out / "r1" / "status.json").exists() or "status.json could not be written either" in err1
    err2 = (out / "2.err").read_text()
    assert (out / "2.rc").read_text().strip() == "0", err2[-3000:]
    assert "resumed from" in err2 and "step-00000005 (step 5," in err2, err2[-3000:]
    assert json.loads((out / "r2" / "summary.json").read_text())["steps"] == 20


def test_a_run_dir_made_read_only_mid_run_names_the_file_step_and_checkpoint(tmp_path: Path) -> None:
    """The run directory bind-remounted read-only during train gave exit 2 with only
    "`--run-dir .../status.json`: directory ... is not writable" (check_output_path's plain error was not a write
    failure): no step, no checkpoint. Here checkpoints/ stays writable, so comparison.json (written after the
    step-10 checkpoint) is the first write to fail. Now the message names the file, the step and the last intact
    checkpoint, and says status.json could not be written either."""
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount here (no user namespaces)")
    run_dir, out = tmp_path / "r", tmp_path / "out"
    run_dir.mkdir()
    out.mkdir()
    spec = write_spec(
        tmp_path / "s.yaml",
        max_steps=20,
        checkpoint={"every_steps": 5, "every_minutes": 0},
        data={
            "train": "trainhelpers:readonly_digits",
            "train_args": {"split": "train", "at": 12 * 16, "path": str(run_dir)},
        },
    )
    train = " ".join(train_cmd(spec, run_dir, "--no-predict"))
    body = f"{train} >{out}/1.out 2>{out}/1.err; echo $? >{out}/1.rc"
    subprocess.run(["unshare", "-rm", "sh", "-c", body], env=ENV, timeout=600, check=True)
    err = (out / "1.err").read_text()
    assert (out / "1.rc").read_text().strip() == "2", err[-3000:]
    assert "Traceback" not in err and "error: at step " in err, err[-3000:]
    assert (
        f"error: at step 10: `--run-dir {run_dir / 'comparison.json'}`: directory `{run_dir}` is not writable "
        "(the file system is read-only)"
    ) in err, err[-3000:]
    assert f"The last intact checkpoint is {run_dir / 'checkpoints' / 'step-00000010'}" in err, err[-3000:]
    assert "status.json could not be written either" in err, err[-3000:]


def test_start_up_with_8_kib_free_and_export_to_a_full_disk_are_exit_2(tmp_path: Path, finished_run: SharedRun) -> None:
    """`train` on a file system with 8 KiB free, and `export --out` to one that fills during Paddle's save (its C++
    writer leaves a short file and says nothing; loading it back raised RuntimeError): exit 2 naming the path and
    the full disk, no traceback."""
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a tmpfs here (no user namespaces)")
    spec = finished_run.spec
    finished_run.copy(tmp_path / "done")
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    train = " ".join(train_cmd(spec, mnt / "r", "--no-predict"))
    export = f"{sys.executable} -m paddlefit.cli.main export {tmp_path / 'done'} --out {mnt / 'inference'}"
    body = (
        f"head -c 56k /dev/zero >{mnt}/fill; {train} >/dev/null 2>{out}/1.err; echo $? >{out}/1.rc; "
        f"rm -rf {mnt}/r; head -c 100k /dev/zero >>{mnt}/fill; {export} >/dev/null 2>{out}/2.err; "
        f"echo $? >{out}/2.rc; ls -A {mnt} >{out}/ls"
    )
    subprocess.run(_tmpfs_script(mnt, 192, body), env=ENV, timeout=600, check=True)
    err1, err2 = (out / "1.err").read_text(), (out / "2.err").read_text()
    assert (out / "1.rc").read_text().strip() == "2" and "Traceback" not in err1, err1[-3000:]
    assert str(mnt / "r") in err1 and "the disk is full" in err1, err1[-3000:]  # where it stops depends on sizes
    assert (out / "2.rc").read_text().strip() == "2" and "Traceback" not in err2, err2[-3000:]
    assert f"cannot write `{mnt / 'inference'}` (the disk is full" in err2, err2[-3000:]
    assert (out / "ls").read_text().split() == ["fill"]  # no half-written export, no temporary left


@pytest.mark.slow
def test_a_sample_of_checkpoint_crash_points_resumes_bit_exact(tmp_path: Path) -> None:
    """bench/crash_points.py (the full enumeration) on a sample: SIGKILL right after a payload file is complete,
    after the rename that publishes the checkpoint, and mid-prune; each run resumes within one interval, bit-exact."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import crash_points

    want, ops = crash_points.trace(tmp_path)
    kinds = [o["op"] for o in ops]
    assert {"mkdir", "write", "close", "fsync", "rename", "unlink", "rmdir"} <= set(kinds), kinds
    publish = next(o for o in ops if o["op"] == "rename" and o["path"].endswith("/step-00000004"))
    prune = next(o for o in ops if o["op"] == "unlink" and "step-00000002" in o["path"])
    sample = [next(o for o in ops if o["op"] == "close"), publish, prune]
    points = [crash_points.crash_at(tmp_path, o, want) for o in sample]
    assert all(p.ok for p in points), crash_points.table(points)
    assert [p.resumed_from for p in points] == [2, 4, 4], crash_points.table(points)
