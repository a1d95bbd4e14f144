"""Run paddlefit's CLI with one file's writes failing, as a full disk would fail them.

``python faultwrite.py NAME ERRNO SKIP -- paddlefit arguments``: the writes of paddlefit's one write path
(:func:`paddlefit.fileio.write_through`) into a file called NAME (or the temporary file of its atomic write,
``.NAME.*.tmp``) succeed SKIP times, then raise ``OSError(ERRNO)`` (ENOSPC, EDQUOT, EROFS, EISDIR by name) as the
kernel would; everything above that call runs as it does for a user.
"""

from __future__ import annotations

import errno
import os
import re
import sys


def install(name: str, code: int, skip: int) -> None:
    from paddlefit import fileio

    real = fileio.write_through
    seen = [0]
    ours = re.compile(rf"^(?:{re.escape(name)}|\.{re.escape(name)}\..+\.tmp)$")

    def failing(f, text, sync):
        try:
            where = os.readlink(f"/proc/self/fd/{f.fileno()}")
        except (OSError, ValueError):
            where = ""
        if ours.match(os.path.basename(where)):
            seen[0] += 1
            if seen[0] > skip:
                raise OSError(code, os.strerror(code))
        return real(f, text, sync)

    fileio.write_through = failing


if __name__ == "__main__":
    name, code, skip, dashes, *rest = sys.argv[1:]
    assert dashes == "--"
    install(name, getattr(errno, code), int(skip))
    sys.argv = ["paddlefit", *rest]
    from paddlefit.cli.main import main

    main()
