"""Import a user callable named ``package.module:function`` from a job spec or an option (model, dataset, loss).

Where a user's own module is found: Python's standard library and the installed packages first (so a user file
named like one of them, ``paddle.py`` or ``datasets.py``, cannot replace it under paddlefit or the libraries it
loads), then the current directory, then the folder of the job spec being used (:func:`add_import_dir`). A user
module that such a library hides is reported with the fix instead of being imported from the wrong place. The
folders reach the processes paddlefit starts (``train``'s workers through ``paddle.distributed.launch``, the
prediction subprocess) through the ``PADDLEFIT_IMPORT_DIRS`` environment variable, read by :func:`import_module`.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from paddlefit.errors import PaddlefitError

#: Environment variable carrying the folders to child processes (``os.pathsep``-separated, in search order).
IMPORT_DIRS_ENV = "PADDLEFIT_IMPORT_DIRS"
#: Folders added by :func:`add_import_dir`, in search order, with what they are (for error messages).
_USER_DIRS: dict[str, str] = {}
#: What each folder of :data:`IMPORT_DIRS_ENV` is (a JSON object, path -> ``the current directory``...), so a child
#: process names the folders it searched as the command did.
IMPORT_DIRS_WHAT_ENV = "PADDLEFIT_IMPORT_DIRS_WHAT"
#: The folders of the paddlefit process that started this one, read before this process adds its own.
_INHERITED = [p for p in os.environ.get(IMPORT_DIRS_ENV, "").split(os.pathsep) if p]


def _inherited_what() -> dict[str, str]:
    """:data:`IMPORT_DIRS_WHAT_ENV` as this process started (empty when unset or not a JSON object of strings)."""
    try:
        what = json.loads(os.environ.get(IMPORT_DIRS_WHAT_ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in what.items()} if isinstance(what, dict) else {}


def add_import_dir(folder: str | Path, what: str) -> None:
    """Search ``folder`` for user modules after the installed packages and the folders added before it.

    Args:
        folder: a directory (made absolute; a later change of directory does not move it).
        what: how an error message names it, e.g. ``the current directory``, ``the job spec's folder``.
    """
    _inherited_dirs()
    _add(folder, what)


def _add(folder: str | Path, what: str) -> None:
    """Append ``folder`` to the search (``sys.path`` and :data:`IMPORT_DIRS_ENV`) unless it is there."""
    path = str(Path(folder).resolve())
    if path in _USER_DIRS:
        return
    _USER_DIRS[path] = what
    if path not in sys.path:
        sys.path.append(path)
    os.environ[IMPORT_DIRS_ENV] = os.pathsep.join(_USER_DIRS)
    os.environ[IMPORT_DIRS_WHAT_ENV] = json.dumps(_USER_DIRS)
    importlib.invalidate_caches()


def _inherited_dirs() -> None:
    """The folders the parent paddlefit process added (:data:`IMPORT_DIRS_ENV` as this process started), added
    first, once (a ``train`` worker then searches the user's folders before its run directory's)."""
    what = _inherited_what() if _INHERITED else {}
    while _INHERITED:
        folder = _INHERITED.pop(0)
        _add(folder, what.get(folder, "a folder of the paddlefit command that started this process"))


def user_dirs() -> list[str]:
    """The folders user modules are searched in besides the installed packages, in order (absolute paths)."""
    _inherited_dirs()
    return list(_USER_DIRS)


def add_recorded_dirs(path: Path) -> None:
    """Add the folders a run recorded (``import_dirs.json``: a JSON list of paths, :func:`user_dirs` at training
    time), so ``export`` from another directory finds the modules the run was trained with. A missing, unreadable
    or malformed file (or a FIFO, a directory, over 1 MiB) adds nothing: an import that then fails names the folders
    searched."""
    from paddlefit.fileio import read_text_limited

    if not path.exists():
        return
    try:
        folders = json.loads(read_text_limited(path, "--run-dir", limit=1 << 20))
    except (PaddlefitError, ValueError, RecursionError):
        return
    if isinstance(folders, list):
        for p in folders:
            if isinstance(p, str) and Path(p).is_dir():
                add_import_dir(p, "a folder the run imported from")


def searched() -> str:
    """The folders user modules are looked up in, for an error message."""
    where = [f"`{p}` ({what})" for p, what in _USER_DIRS.items()]
    return ", ".join(["the installed packages and PYTHONPATH", *where])


def _hidden_by(name: str, module: ModuleType) -> str | None:
    """The user's file or package named like ``name``'s top level in a user folder, when ``module`` came from
    elsewhere (an installed package or the standard library of the same name hides it), else None."""
    root = name.split(".")[0]
    origin = Path(getattr(module, "__file__", None) or "").resolve()
    for folder in _USER_DIRS:
        for cand in (Path(folder) / root, Path(folder) / f"{root}.py"):
            if cand.exists() and not origin.is_relative_to(Path(folder)):
                return str(cand)
    return None


class ModuleMissingError(PaddlefitError):
    """The module named is not on this machine (not a module it imports): a planner may go on without a dataset
    factory the spec names when the inputs are given (:func:`paddlefit.job.resolve.resolve_job`)."""


def import_module(name: str, label: str) -> ModuleType:
    """Import module ``name`` for the option or key ``label``.

    Raises:
        PaddlefitError: the module fails to import (its own error, even ``sys.exit``, included); a module that is
            not found (:class:`ModuleMissingError`) names the folders searched (:func:`searched`) and the fix; a
            user module hidden by an installed or standard module of the same name names both and says to rename it.
    """
    _inherited_dirs()
    if not name or name.startswith(".") or any(not part.isidentifier() for part in name.split(".")):
        raise PaddlefitError(
            f"`{label}`: `{name}` is not a module name (dotted Python identifiers, no leading "
            "dot: relative imports have no package here); write it as `package.module`."
        )
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        root = name.split(".")[0]
        ours = bool(exc.name) and root == str(exc.name).split(".")[0]  # the module itself, not one it imports
        fix = (
            (
                f"put the folder that holds `{root}/` (or `{root}.py`) in one of them, run from that folder, or add "
                "it to PYTHONPATH"
            )
            if ours
            else f"install `{exc.name}`, which it imports"
        )
        kind = ModuleMissingError if ours else PaddlefitError
        raise kind(
            f"`{label}` cannot be imported (ModuleNotFoundError: {exc}); searched {searched()}: {fix}."
        ) from None
    except (Exception, SystemExit) as exc:  # the module's own error at import
        raise PaddlefitError(f"`{label}` cannot be imported ({type(exc).__name__}: {exc}).") from None
    hidden = _hidden_by(name, module)
    if hidden:
        raise PaddlefitError(
            f"`{label}`: `{name.split('.')[0]}` is `{getattr(module, '__file__', None) or name}`, "
            f"an installed or standard module, not your `{hidden}`, which it hides: rename "
            "yours (and the import path) to a name no installed package uses."
        )
    return module


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
    if not sep or not mod.strip() or not fn.strip() or mod.startswith("."):
        raise PaddlefitError(
            f"`{label}` cannot be imported (not of the form `package.module:function`, no leading dot); {hint}."
        )
    module = import_module(mod, label)
    try:
        obj = getattr(module, fn)
    except AttributeError:
        raise PaddlefitError(
            f"`{label}` cannot be imported (module `{mod}` has no attribute `{fn}`); {hint}."
        ) from None
    if not callable(obj):
        raise PaddlefitError(f"`{label}` is a {type(obj).__name__}, not a function.")
    return obj


def factory_takes(model: str, arg: str) -> bool:
    """Whether ``model`` is a ``package.module:factory`` whose signature has ``arg`` (e.g. the text examples'
    ``sparse``); False for zoo names and factories that cannot be imported."""
    import inspect

    if ":" not in model:
        return False
    try:
        return arg in inspect.signature(import_callable(model, "model", "")).parameters
    except Exception:
        return False
