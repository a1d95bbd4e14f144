"""Import a user callable named ``package.module:function`` from a job spec or an option (model, dataset, loss).

Where a user's own module is found: the current directory first, as ``python -m`` and the tools users know
(uvicorn, pytest) do, then the folder of the job spec being used, then the installed packages and ``PYTHONPATH``
(Python's "The initialization of the sys.path module search path", docs.python.org/3/library/sys_path_init.html:
``python -m`` puts the current directory first). :func:`add_import_dir` puts a folder on ``sys.path`` and on the
``PYTHONPATH`` of the processes this one starts (``paddle.distributed.launch`` workers, ``train``'s worker, the
CPU probes), so a module found while planning is found while training.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from paddlefit.errors import PaddlefitError

#: Folders added by :func:`add_import_dir`, in search order, with what they are (for error messages).
_USER_DIRS: dict[str, str] = {}


def add_import_dir(folder: str | Path, what: str) -> None:
    """Search ``folder`` for user modules after the folders added before it and before the installed packages.

    Args:
        folder: a directory (made absolute; a later change of directory does not move it).
        what: how an error message names it, e.g. ``current directory``, ``job spec's folder``.
    """
    path = str(Path(folder).resolve())
    if path in _USER_DIRS:
        return
    _USER_DIRS[path] = what
    ours = list(_USER_DIRS)
    sys.path[:] = ours + [p for p in sys.path if p not in _USER_DIRS]
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in _USER_DIRS]
    os.environ["PYTHONPATH"] = os.pathsep.join(ours + inherited)
    importlib.invalidate_caches()


def searched() -> str:
    """The folders user modules are looked up in, for an error message."""
    where = [f"`{p}` ({what})" for p, what in _USER_DIRS.items()]
    return ", ".join([*where, "the installed packages and PYTHONPATH"])


def import_module(name: str, label: str) -> ModuleType:
    """Import module ``name`` for the option or key ``label``.

    Raises:
        PaddlefitError: the module fails to import (its own error, even ``sys.exit``, included); a module that is
            not found names the folders searched (:func:`searched`) and the fix.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        root = name.split(".")[0]
        ours = bool(exc.name) and root == str(exc.name).split(".")[0]  # the module itself, not one it imports
        fix = (f"put the folder that holds `{root}/` (or `{root}.py`) in one of them, run from that folder, or add "
               "it to PYTHONPATH") if ours else f"install `{exc.name}`, which it imports"  # fmt: skip
        raise PaddlefitError(f"`{label}` cannot be imported (ModuleNotFoundError: {exc}); searched {searched()}: "
                             f"{fix}.") from None  # fmt: skip
    except (Exception, SystemExit) as exc:  # the module's own error at import
        raise PaddlefitError(f"`{label}` cannot be imported ({type(exc).__name__}: {exc}).") from None


def import_callable(path: str, label: str, hint: str) -> Callable[..., Any]:
    """The callable at ``path`` (``package.module:function``), the module found as :func:`import_module` finds it.

    Args:
        path: the import path.
        label: how the job spec names it, e.g. ``data.train: mypkg.data:train_set``; starts every message.
        hint: what to use instead, appended to the message for a malformed path.

    Raises:
        PaddlefitError: ``path`` is not ``module:function``, the module fails to import, it has no such
            attribute, or the attribute is not callable.
    """
    mod, sep, fn = path.partition(":")
    if not sep or not mod.strip() or not fn.strip():
        raise PaddlefitError(f"`{label}` cannot be imported (not of the form `package.module:function`); {hint}.")
    module = import_module(mod, label)
    try:
        obj = getattr(module, fn)
    except AttributeError:
        raise PaddlefitError(f"`{label}` cannot be imported (module `{mod}` has no attribute `{fn}`); "
                             f"{hint}.") from None  # fmt: skip
    if not callable(obj):
        raise PaddlefitError(f"`{label}` is a {type(obj).__name__}, not a function.")
    return obj
