"""Python child processes without the current directory on ``sys.path``: a ``paddle.py``, ``json.py`` or
``platform.py`` in the folder a user runs ``paddlefit`` from must never stand in for the installed module in a
process paddlefit starts (``docs/job-spec.md``: user code is imported only from where
:mod:`paddlefit.process.userimport` adds it).

``python -m MODULE`` and ``python -c CODE`` put the current directory first on ``sys.path``; ``python SCRIPT`` puts
the script's folder. Python 3.11 added ``-P`` and ``PYTHONSAFEPATH=1`` to leave it out (the Python documentation,
"Command line and environment": ``-P``, "Don't prepend a potentially unsafe path to sys.path"). So every child is
started by :func:`python_command` (``-P`` on 3.11+; on 3.10 a ``-c`` bootstrap that drops ``sys.path[0]`` before
anything is imported, then runs the module as ``-m`` would) with :func:`safe_env` (``PYTHONSAFEPATH=1``, which the
processes it starts in turn inherit: Paddle's launcher starts the workers itself; and no empty ``PYTHONPATH``
entry, which is the current directory again). Remote launch scripts set
``PYTHONSAFEPATH=1`` (:data:`SAFE_PATH_ENV`) on their ``python`` line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["SAFE_PATH_ENV", "python_command", "safe_env"]

#: The variable (Python 3.11+) that keeps the current directory or script folder off a child's ``sys.path``.
SAFE_PATH_ENV = "PYTHONSAFEPATH"

#: Python 3.10's stand-in for ``-P -m MODULE``: drop the current directory ``-c`` put first, run the module.
_BOOT_310 = (
    "import sys, runpy; sys.path.pop(0); m = sys.argv[1]; del sys.argv[1]; "
    "runpy.run_module(m, run_name='__main__', alter_sys=True)"
)


def python_command(*, module: str | None = None, code: str | None = None) -> list[str]:
    """This interpreter running ``module`` (as ``-m``) or ``code`` (as ``-c``) with nothing of the current directory
    on ``sys.path``; append the arguments after it.

    Raises:
        ValueError: neither or both of ``module`` and ``code``.
    """
    if (module is None) == (code is None):
        raise ValueError("give one of module and code")
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", *(["-m", module] if module is not None else ["-c", code or ""])]
    if module is not None:
        return [sys.executable, "-c", _BOOT_310, module]
    return [sys.executable, "-c", f"import sys; sys.path.pop(0)\n{code}"]


def safe_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with ``PYTHONSAFEPATH=1``, for a child and the Python processes it starts, and without the empty
    entries of ``PYTHONPATH``, which Python reads as the current directory (``PYTHONPATH=$PYTHONPATH:/x`` with
    ``PYTHONPATH`` unset gives ``:/x``); a ``PYTHONPATH`` left empty is removed."""
    out = {**env, SAFE_PATH_ENV: "1"}
    if "PYTHONPATH" in out:
        kept = os.pathsep.join(p for p in out["PYTHONPATH"].split(os.pathsep) if p)
        if kept:
            out["PYTHONPATH"] = kept
        else:
            del out["PYTHONPATH"]
    return out
