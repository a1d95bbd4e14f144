"""paddlefit.fileio: atomic writes (temp file, fsync, rename, fsync of the directory), output-path checks, bounded
reads. Unit tests on tmp_path; failures are injected with monkeypatch (no subprocess)."""

import os
import stat
from pathlib import Path

import pytest

from paddlefit import fileio
from paddlefit.errors import PaddlefitError
from paddlefit.fileio import (
    MAX_INPUT_BYTES,
    atomic_write_many,
    atomic_write_text,
    check_output_path,
    current_umask,
    fsync_path,
    read_text_limited,
)
from paddlefit.units import MIB


def _names(directory):
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


# ---------------------------------------------------------------- atomic_write_text


def test_write_text_creates_and_replaces_with_nothing_left_behind(tmp_path, umask_022):
    out = tmp_path / "plan.json"
    assert atomic_write_text(out, "first\n") == out
    assert out.read_text(encoding="utf-8") == "first\n"
    atomic_write_text(str(out), "zweite Ä\n")  # a str path works too; UTF-8 on disk
    assert out.read_bytes() == "zweite Ä\n".encode()
    assert _names(tmp_path) == ["plan.json"]


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_file_has_the_mode_open_would_give(tmp_path, mask, mode):
    out = tmp_path / "f.txt"
    out.write_text("old")
    out.chmod(0o600 if mode != 0o600 else 0o644)  # the old file's mode is not kept: the rename replaces the inode
    old = os.umask(mask)
    try:
        atomic_write_text(out, "new")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == mode


def test_failure_mid_write_keeps_old_content_and_removes_the_temp_file(tmp_path, monkeypatch):
    out = tmp_path / "report.json"
    out.write_text("old content")

    def failing_fsync(fd):  # the data is in the temp file, the rename has not happened
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(out, "new content")
    assert out.read_text() == "old content"
    assert _names(tmp_path) == ["report.json"]


def test_a_write_that_raises_before_any_byte_keeps_old_content(tmp_path):
    out = tmp_path / "report.json"
    out.write_text("old content")
    with pytest.raises(TypeError):
        atomic_write_text(out, 12345)  # not text: the write raises inside the temp file's `with`
    assert out.read_text() == "old content"
    assert _names(tmp_path) == ["report.json"]


def test_failed_rename_removes_the_temp_file(tmp_path, monkeypatch):
    out = tmp_path / "a.txt"

    def failing_replace(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(fileio.os, "replace", failing_replace)
    with pytest.raises(OSError, match="cross-device"):
        atomic_write_text(out, "x")
    assert _names(tmp_path) == []


def _record_syncs(monkeypatch, events):
    """Record every fsync (of a file or of a directory, told apart by fstat) and every rename, then do them."""
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        what = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        events.append(f"fsync {what}")
        real_fsync(fd)

    def replace(src, dst):
        events.append("rename " + os.path.basename(dst))
        real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "fsync", fsync)
    monkeypatch.setattr(fileio.os, "replace", replace)


def test_file_is_fsynced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    events = []
    _record_syncs(monkeypatch, events)
    atomic_write_text(tmp_path / "x.txt", "data")
    assert events == ["fsync file", "rename x.txt", "fsync dir"]


def test_the_temp_file_sits_next_to_the_target(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace
    monkeypatch.setattr(fileio.os, "replace", lambda a, b: (seen.append((a, b)), real_replace(a, b)))
    out = tmp_path / "x.txt"
    atomic_write_text(out, "data")
    ((tmp, dst),) = seen
    # same directory (a rename never crosses a file system), hidden, named after the target
    assert os.path.dirname(tmp) == str(tmp_path) and dst == out
    assert os.path.basename(tmp).startswith(".x.txt.") and tmp.endswith(".tmp")


# ---------------------------------------------------------------- check_output_path


def test_check_output_path_accepts_new_and_regular_files(tmp_path):
    assert check_output_path(tmp_path / "new.json") == tmp_path / "new.json"
    (tmp_path / "old.json").write_text("{}")
    assert check_output_path(str(tmp_path / "old.json")) == tmp_path / "old.json"


def test_check_output_path_rejects_what_cannot_be_replaced_atomically(tmp_path, monkeypatch):
    (tmp_path / "real").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    cases = [
        (tmp_path, "--out", f"`--out {tmp_path}` is a directory; give a file path inside it."),
        (
            tmp_path / "link",
            "--save",
            f"`--save {tmp_path / 'link'}` is a symlink; give the real file path (it is replaced atomically).",
        ),
        (
            tmp_path / "fifo",
            "--out",
            f"`--out {tmp_path / 'fifo'}` is not a regular file (device, FIFO or socket); give a file path.",
        ),
        (
            tmp_path / "missing" / "a.json",
            "--out",
            f"`--out {tmp_path / 'missing' / 'a.json'}`: directory "
            f"`{tmp_path / 'missing'}` does not exist (or is a file); create "
            "it first.",
        ),
        (
            tmp_path / "file" / "a.json",
            "--out",
            f"`--out {tmp_path / 'file' / 'a.json'}`: directory "
            f"`{tmp_path / 'file'}` does not exist (or is a file); create it "
            "first.",
        ),
    ]
    for path, option, message in cases:
        with pytest.raises(PaddlefitError) as err:
            check_output_path(path, option)
        assert str(err.value) == message
    # a parent the process cannot write (os.access is faked: root may write anywhere)
    monkeypatch.setattr(fileio.os, "access", lambda p, mode: False)
    unwritable = r"directory `.*` is not writable( \(the file system is read-only\))?\.$"
    with pytest.raises(fileio.FileWriteError, match=unwritable):
        check_output_path(tmp_path / "new.json")


def test_write_text_checks_the_path_before_creating_anything(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(PaddlefitError, match="is a directory"):
        atomic_write_text(tmp_path / "d", "x", option="--json-out")
    with pytest.raises(PaddlefitError, match=r"`--out .*` does not exist"):
        atomic_write_text(tmp_path / "no" / "x.txt", "x")  # the parent is not created
    assert _names(tmp_path) == ["d"] and _names(tmp_path / "d") == []


# ---------------------------------------------------------------- atomic_write_many


def test_write_many_writes_every_file(tmp_path, umask_022):
    (tmp_path / "sub").mkdir()
    files = {tmp_path / "a.txt": "A", tmp_path / "sub" / "b.txt": "B"}
    assert atomic_write_many(files) == list(files)
    assert [p.read_text() for p in files] == ["A", "B"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in files)
    assert _names(tmp_path) == ["a.txt", "sub"] and _names(tmp_path / "sub") == ["b.txt"]


def test_write_many_is_all_or_nothing(tmp_path, monkeypatch):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    calls = []
    real_fsync = os.fsync

    def fsync_fails_on_second(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(fileio.os, "fsync", fsync_fails_on_second)
    with pytest.raises(PaddlefitError) as err:
        atomic_write_many({a: "new a", b: "new b"}, option="--out-dir")
    assert str(err.value) == f"`--out-dir`: cannot write {b} (No space left on device); nothing was written."
    assert a.read_text() == "old a" and not b.exists()
    assert _names(tmp_path) == ["a.txt"]


def test_write_many_renames_only_after_every_file_is_synced(tmp_path, monkeypatch):
    events = []
    _record_syncs(monkeypatch, events)
    atomic_write_many({tmp_path / "a": "1", tmp_path / "b": "2"})
    assert events == ["fsync file", "fsync file", "rename a", "rename b", "fsync dir"]  # one directory, synced once


def test_write_many_checks_every_path_before_writing(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(PaddlefitError, match="is a directory"):
        atomic_write_many({tmp_path / "ok.txt": "x", tmp_path / "d": "y"})
    assert _names(tmp_path) == ["d"]


def test_write_many_non_os_error_also_cleans_up(tmp_path):
    with pytest.raises(TypeError):
        atomic_write_many({tmp_path / "a": "x", tmp_path / "b": 3})
    assert _names(tmp_path) == []


# ---------------------------------------------------------------- fsync_path, current_umask


def test_fsync_path_syncs_files_and_directories_and_raises_for_missing(tmp_path):
    (tmp_path / "f").write_text("x")
    fsync_path(tmp_path / "f")
    fsync_path(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_path(tmp_path / "missing")


def test_current_umask_reads_without_changing_it():
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        assert current_umask() == 0o027  # still set
    finally:
        os.umask(old)


# ---------------------------------------------------------------- read_text_limited


def test_read_text_limited_reads_utf8_and_drops_a_bom(tmp_path):
    p = tmp_path / "spec.yaml"
    p.write_bytes(b"\xef\xbb\xbfmodel: lenet\n")
    assert read_text_limited(p, "--config") == "model: lenet\n"
    assert MAX_INPUT_BYTES == 16 * MIB


def test_read_text_limited_errors_name_the_option_and_file(tmp_path):
    big, bad, fifo = tmp_path / "big", tmp_path / "bad", tmp_path / "fifo"
    big.write_bytes(b"x" * (2 * MIB + 1))
    bad.write_bytes(b"\xff\xfe\x00")
    os.mkfifo(fifo)  # must not block: opened without waiting for a writer, refused by its kind
    cases = [
        (big, 2 * MIB, f"`--config {big}` is larger than 2 MiB; is it the right file?"),
        (bad, MAX_INPUT_BYTES, f"`--config {bad}` is not UTF-8 text."),
        (
            fifo,
            MAX_INPUT_BYTES,
            f"`--config {fifo}` is a FIFO (reading it could block forever or never end); give a regular file.",
        ),
        (tmp_path, MAX_INPUT_BYTES, f"`--config {tmp_path}` is a directory; give a regular file."),
        (
            tmp_path / "nope",
            MAX_INPUT_BYTES,
            f"`--config {tmp_path / 'nope'}` cannot be read (No such file or directory).",
        ),
    ]
    for path, limit, message in cases:
        with pytest.raises(PaddlefitError) as err:
            read_text_limited(path, "--config", limit)
        assert str(err.value) == message
    assert read_text_limited(big, "--config", 2 * MIB + 1) == "x" * (2 * MIB + 1)  # exactly the limit


@pytest.mark.parametrize("where", ["/proc/paddlefit-report.html", "/sys/paddlefit-report.html", "LONG"])
def test_a_directory_that_takes_no_file_is_bad_input_naming_the_option(tmp_path: Path, where: str) -> None:
    path = tmp_path / ("a" * 300 + ".html") if where == "LONG" else Path(where)
    with pytest.raises(PaddlefitError, match=r"`--out .*`: cannot create a file there \(.+\); choose another path"):
        atomic_write_text(path, "<html></html>", option="--out")
    assert list(tmp_path.iterdir()) == []


def test_an_output_path_that_holds_another_files_content_is_refused(tmp_path):
    """Hostile trial: `report --out OTHER_RUN/.../model.pdparams` and `doctor --snapshot job.yaml` replaced those
    files with HTML / JSON. With ``ours`` an existing file must hold what the command writes."""
    from paddlefit.fileio import check_output_path

    weights = tmp_path / "model.pdparams"
    weights.write_bytes(b"\x80\x04 pickled weights")
    with pytest.raises(PaddlefitError, match=r"`--out .*model.pdparams` exists and is not a file this command wrote"):
        check_output_path(weights, "--out", ours="<title>paddlefit report")
    old = tmp_path / "old.html"
    old.write_text("<!DOCTYPE html>\n<html><head><title>paddlefit report: run</title></head></html>\n")
    assert check_output_path(old, "--out", ours="<title>paddlefit report") == old  # an earlier report: replaced
    assert check_output_path(tmp_path / "new.html", "--out", ours="<title>paddlefit report") == tmp_path / "new.html"
    assert check_output_path(weights, "--out") == weights  # without ``ours``: the old rule


def test_append_file_creates_as_open_does_and_refuses_a_fifo(tmp_path):
    from paddlefit.fileio import AppendFile, FileWriteError, current_umask

    f = AppendFile(tmp_path / "m.jsonl")
    f.write("a\n")
    f.close()
    assert (tmp_path / "m.jsonl").stat().st_mode & 0o777 == 0o666 & ~current_umask()
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(FileWriteError, match="fifo"):  # no reader: refused at once, never waited on
        AppendFile(tmp_path / "fifo")
