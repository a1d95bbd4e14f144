"""The one write path of paddlefit's files: atomic writes (temp file in the same directory, fsync, rename: never a
half-written file), appended lines (metrics.jsonl), the error a failed write becomes, and bounded reads (size and
JSON depth limits for every file read as input).

Every write here goes through :func:`write_through`, and a failing one (a full disk, ``ENOSPC``; a quota,
``EDQUOT``; a read-only file system, ``EROFS``; a directory where the file should be, ``EISDIR``; or any other
``OSError``) raises :class:`FileWriteError`, which names the file and the cause: exit code 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from paddlefit.errors import PaddlefitError
from paddlefit.rundir.layout import CHECKPOINTS_DIR
from paddlefit.units import MIB

#: What a failed write's errno means, in the message of :class:`FileWriteError` (others: the OS's strerror).
DISK_ERRORS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EISDIR: "it is a directory",
    errno.EFBIG: "the file size limit is reached",
}


class FileWriteError(PaddlefitError, OSError):
    """A file could not be written: the message names the file, the option it came from and the cause
    (:data:`DISK_ERRORS`). Exit code 2 like any :class:`PaddlefitError`; also an ``OSError`` (``errno`` is the
    failed call's), so a caller that handles write failures as ``OSError`` still does. ``path``: the file."""

    def __init__(self, path: str | Path, exc: OSError, option: str = "--out", message: str = "") -> None:
        os_says = exc.strerror or str(exc)
        why = f"{DISK_ERRORS[exc.errno]} ({os_says})" if exc.errno in DISK_ERRORS else os_says
        super().__init__(message or f"cannot write {path} (`{option}`): {why}")
        self.path = Path(path)
        self.errno = exc.errno
        self.why = why


@contextlib.contextmanager
def writing(path: str | Path, option: str = "--out") -> Iterator[None]:
    """Inside the block, an ``OSError`` becomes :class:`FileWriteError` naming ``path``.

    Raises:
        FileWriteError: the block raised an ``OSError``.
    """
    try:
        yield
    except FileWriteError:
        raise
    except OSError as exc:
        raise FileWriteError(path, exc, option) from None


def no_space_left(path: str | Path) -> OSError | None:
    """An ``ENOSPC`` error when the file system holding ``path`` has no block left (``statvfs``: no free block
    for an unprivileged writer, ``f_bavail``, or for anyone, ``f_bfree``), else None (also when it cannot tell).
    For writers that do not report a failed write themselves (Paddle's C++ streams leave a short file and say
    nothing; its reader then fails on the file)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_blocks and (st.f_bavail == 0 or st.f_bfree == 0):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def write_through(f: IO[str], text: str, sync: bool) -> None:
    """Write ``text`` to the open file ``f`` and flush it to the OS (and to the disk: ``fsync``, with ``sync``):
    every byte paddlefit writes passes here.

    Raises:
        OSError: the write, flush or fsync failed.
    """
    f.write(text)
    f.flush()
    if sync:
        os.fsync(f.fileno())


class NotRegularFileError(OSError):
    """A file paddlefit reads or appends to is a FIFO, socket, device or directory (opening or reading one could
    block forever or never end). ``strerror`` says which."""


def _kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` that is no regular file is, for a message."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def open_regular(path: str | Path, flags: int = os.O_RDONLY) -> int:
    """Open ``path`` (``os.open`` ``flags``, e.g. ``os.O_RDONLY`` or ``os.O_WRONLY | os.O_APPEND``) only when it is a
    regular file; returns the descriptor in blocking mode. It is opened with ``O_NONBLOCK`` and checked with
    ``fstat`` on the open descriptor, so a FIFO (whose ``open`` waits for a writer) or a device put in its place,
    even between a check and the open, is refused at once.

    Raises:
        IsADirectoryError: it is a directory; NotRegularFileError: a FIFO, socket or device (the descriptor is
            closed).
        OSError: it cannot be opened (missing included).
    """
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)  # created as open() creates: 0666 & ~umask
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise NotRegularFileError(errno.ENXIO, "a FIFO", str(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):  # as open() says it for writing
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        raise NotRegularFileError(errno.EINVAL, _kind(mode), str(path))
    os.set_blocking(fd, True)
    return fd


class AppendFile:
    """A text file lines are appended to (``RUN_DIR/metrics.jsonl``), each flushed to the OS as it is written.

    Raises (every method):
        FileWriteError: the file cannot be opened, written or closed (a full disk, a directory of its name...).
    """

    def __init__(self, path: str | Path, option: str = "--out") -> None:
        self.path = Path(path)
        self.option = option
        with writing(self.path, option):
            fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            self.file: IO[str] = open(fd, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def write(self, text: str) -> None:
        """Append ``text`` and flush."""
        with writing(self.path, self.option):
            write_through(self.file, text, sync=False)

    def close(self) -> None:
        """Close the file (after a failed write the rest of its buffer fails again here: the error is raised)."""
        with writing(self.path, self.option):
            self.file.close()


def check_output_path(path: str | Path, option: str = "--out", ours: str | None = None) -> Path:
    """Fail early, before any work, if ``path`` cannot take an atomic write; with ``ours`` (text every file the
    command writes holds in its first 64 KiB, e.g. a report's ``<title>paddlefit report``), also if ``path`` is an
    existing file that does not hold it: another run's weights, a job spec.

    Raises:
        PaddlefitError: the path is a directory, a symlink or a special file (device, FIFO, socket), or its
            parent is missing or not a directory, or (``ours``) an existing file this command did not write.
        FileWriteError: the parent is not writable (``EACCES``, or ``EROFS`` on a read-only file system: a run
            directory made read-only mid-run is a failed write of the run, exit 2 with the step and checkpoint).
    """
    path = Path(path)
    try:
        if path.is_symlink():
            raise PaddlefitError(
                f"`{option} {path}` is a symlink; give the real file path (it is replaced atomically)."
            )
        exists = path.exists()
    except OSError as exc:  # a name too long, a path through a file
        raise PaddlefitError(
            f"`{option} {path}`: cannot create a file there ({exc.strerror or exc}); choose another path."
        ) from None
    if exists:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise PaddlefitError(f"`{option} {path}` is a directory; give a file path inside it.")
        if not stat.S_ISREG(mode):
            raise PaddlefitError(f"`{option} {path}` is not a regular file (device, FIFO or socket); give a file path.")
        if ours is not None and not _holds(path, ours):
            raise PaddlefitError(
                f"`{option} {path}` exists and is not a file this command wrote; give a new file "
                "name, or remove that file first."
            )
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise PaddlefitError(f"`{option} {path}`: directory `{parent}` does not exist (or is a file); create it first.")
    if not os.access(parent, os.W_OK | os.X_OK):
        ro = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
        cause = OSError(errno.EROFS if ro else errno.EACCES, os.strerror(errno.EROFS if ro else errno.EACCES))
        raise FileWriteError(
            path,
            cause,
            option,
            f"`{option} {path}`: directory `{parent}` is not writable"
            f"{' (the file system is read-only)' if ro else ''}.",
        )
    return path


def _holds(path: Path, text: str) -> bool:
    """Whether the first 64 KiB of the file at ``path`` contain ``text`` (UTF-8); False if it cannot be read."""
    try:
        with path.open("rb") as f:
            return text.encode() in f.read(65536)
    except OSError:
        return False


def refuse_run_target(
    target: str | Path, run_dir: str | Path, option: str, instead: str | Path, file_suffix: str | None = None
) -> None:
    """The one check of an output path against the run directory it is made from (``export --out``, ``report
    --out``): refuse a ``target`` that is the run directory, holds it, or lies in its ``checkpoints/`` (compared by
    real path, so a symlink does not get round it); with ``file_suffix`` (a file output such as ``.html``), also
    any path inside the run directory that does not end in it (the run's own files: metrics.jsonl, status.json,
    job.yaml..., existing or still to be written).

    Raises:
        PaddlefitError: naming ``option`` and ``target``, with ``instead`` as the fix.
    """
    out, run = Path(target).resolve(), Path(run_dir).resolve()
    own = out == run or run.is_relative_to(out) or out.is_relative_to(run / CHECKPOINTS_DIR)
    if not own and file_suffix is not None and out.is_relative_to(run):
        own = out.suffix.lower() != file_suffix
    if own:
        from paddlefit.textsafe import name_safe

        raise PaddlefitError(
            f"`{option} {name_safe(target)}` would overwrite the run itself; give a new "
            f"{'file' if file_suffix else 'directory'} such as {instead}."
        )


def fsync_path(path: str | Path) -> None:
    """fsync a file or a directory (a directory's fsync makes a rename inside it durable).

    Raises:
        OSError: the path cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str, option: str = "--out") -> Path:
    """Write ``text`` to ``path`` atomically (POSIX rename): a temp file beside it (mode ``0o666 & ~umask``, as
    ``open()`` would give) is written and fsynced, renamed over ``path``, and the directory fsynced. The parent
    directory must exist (it is not created).

    Raises:
        PaddlefitError: ``path`` is not a writable regular-file path (see :func:`check_output_path`).
        FileWriteError: no file can be created in its directory, or the write itself fails (disk full, a read-only
            file system...); the temp file is removed, ``path`` is untouched.
    """
    path = check_output_path(path, option)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # a full or read-only file system, a pseudo one, no permission, a name too long
        said = exc.strerror or exc
        raise FileWriteError(
            path, exc, option, f"`{option} {path}`: cannot create a file there ({said}); choose another path."
        ) from None
    with writing(path, option):
        try:
            os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; give the file the mode open() would
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                write_through(f, text, sync=True)
            os.replace(tmp, path)
            fsync_path(path.parent)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return path


def atomic_write_many(files: dict[Path, str], option: str = "--out") -> list[Path]:
    """Write several files all or nothing: every temp file is written and fsynced first, then all are renamed.

    A failure before the renames (disk full, permissions) leaves every target untouched and no temp file behind.

    Raises:
        PaddlefitError: a target is not a writable regular-file path, or a write fails (the message names it).
    """
    paths = {check_output_path(path, option): text for path, text in files.items()}
    temps: list[tuple[str, Path]] = []
    try:
        for path, text in paths.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            temps.append((tmp, path))
            os.fchmod(fd, 0o666 & ~current_umask())
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                write_through(f, text, sync=True)
    except OSError as exc:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise PaddlefitError(
            f"`{option}`: cannot write {temps[-1][1] if temps else 'the files'} "
            f"({exc.strerror or exc}); nothing was written."
        ) from None
    except BaseException:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise
    for tmp, path in temps:
        os.replace(tmp, path)
    for parent in {path.parent for _, path in temps}:
        fsync_path(parent)
    return [path for _, path in temps]


MAX_INPUT_BYTES = 16 * MIB


def read_text_limited(path: str | Path, option: str, limit: int = MAX_INPUT_BYTES) -> str:
    """Read a small UTF-8 input file (spec, snapshot, catalog) without trusting its size (``/dev/zero``...).

    Raises:
        PaddlefitError: unreadable, larger than ``limit`` bytes, or not UTF-8.
    """
    p = Path(path)
    try:
        with open(open_regular(p), "rb") as f:
            data = f.read(limit + 1)
    except IsADirectoryError:
        raise PaddlefitError(f"`{option} {p}` is a directory; give a regular file.") from None
    except NotRegularFileError as exc:
        raise PaddlefitError(
            f"`{option} {p}` is {exc.strerror} (reading it could block forever or never end); give a regular file."
        ) from None
    except OSError as exc:
        raise PaddlefitError(f"`{option} {p}` cannot be read ({exc.strerror or exc}).") from None
    if len(data) > limit:
        raise PaddlefitError(f"`{option} {p}` is larger than {limit // MIB} MiB; is it the right file?")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise PaddlefitError(f"`{option} {p}` is not UTF-8 text.") from None


#: JSON read from a run directory, the registry or a catalog nests at most this deep (ours nest < 8 levels; a
#: deeper document is hostile or not ours, and Python's parser and every recursive walk of it would overflow)
MAX_JSON_DEPTH = 64


class InputFileError(PaddlefitError, ValueError):
    """A JSON file read as input is unreadable, too large, not UTF-8, not JSON or nested too deeply (exit 2). Also a
    ``ValueError``, so a reader that skips a bad file (``except (OSError, ValueError)``) skips this one too."""


def json_depth(doc: object) -> int:
    """Nesting depth of a parsed JSON value (a scalar 0, ``[]`` 1, ``[[1]]`` 2), walked without recursion."""
    depth, stack = 0, [(doc, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            depth = max(depth, level)
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return depth


def loads_limited(text: str, where: str, max_depth: int = MAX_JSON_DEPTH) -> object:
    """Parse JSON ``text`` (from ``where``, named in messages), refusing a document nested deeper than ``max_depth``
    (a ``[[[[...`` of 100,000 levels is a RecursionError in ``json.loads``; one of 900 passes it but breaks every
    recursive use after).

    Raises:
        InputFileError: not JSON, or nested deeper than ``max_depth``.
    """
    try:
        doc = json.loads(text)
    except RecursionError:
        doc = None
        depth = max_depth + 1
    except ValueError as exc:
        raise InputFileError(f"{where} is not valid JSON ({str(exc)[:150]}).") from None
    else:
        depth = json_depth(doc)
    if depth > max_depth:
        raise InputFileError(
            f"{where} nests deeper than {max_depth} levels; it is not a file paddlefit wrote (a "
            "damaged or hostile copy?). Remove or replace it."
        )
    return doc


def read_json_limited(
    path: str | Path, option: str, limit: int = MAX_INPUT_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> object:
    """Read a JSON file bounded in size (``limit`` bytes, :func:`read_text_limited`) and depth (:func:`loads_limited`).

    Raises:
        InputFileError: unreadable (missing included), a FIFO or directory, too large, not UTF-8, not JSON, or too
            deeply nested; the message names ``option`` and the path.
    """
    try:
        text = read_text_limited(path, option, limit)
    except PaddlefitError as exc:
        raise InputFileError(str(exc)) from None
    return loads_limited(text, f"`{option} {path}`", max_depth)
