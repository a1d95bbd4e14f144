"""A command's typer parameters, built from the :mod:`paddlefit.options` records it takes.

A command is written ``@command(options.MODEL_ARG, options.CONFIG, ...)`` over ``def x_command(args: Args)``:
typer sees one parameter per option (flags, type, default and help from the record, nothing typed twice), and
the command reads the parsed values as ``args.<name>`` and asks :meth:`Args.given` whether the user typed one.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import typer

from paddlefit.cli.common import handle_errors, warn_deprecated
from paddlefit.errors import PaddlefitError
from paddlefit.options import Option


class Args(SimpleNamespace):
    """The parsed options of one command line: ``args.<option name>``, plus ``args.ctx`` (typer's context) and
    ``args.options`` (name -> :class:`~paddlefit.options.Option`).

    :meth:`given` tells an option typed on the command line from its default, so no command compares a value
    with a default written a second time.
    """

    def given(self, name: str) -> bool:
        """Whether option ``name`` was typed on the command line (not its default)."""
        source = self.ctx.get_parameter_source(name)
        return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")

    def typed(self, *names: str) -> list[str]:
        """The flags (``--loss``, ``--tf32/--no-tf32``) of the options among ``names`` typed on the command line,
        in ``names``' order: what a mode that does not use them refuses, named by flag.

        Raises:
            KeyError: a name that is not one of the command's options (a programming error).
        """
        return [self.options[n].flag for n in names if self.given(n)]


def path(text: str | Path) -> Path:
    """A path option's value, parsed from its text (typer shows the annotation, ``<Path>``, as its type).

    Raises:
        typer.BadParameter: an empty or blank value (``Path("")`` would be ``.``, the current directory).
    """
    if isinstance(text, Path):  # a default, already a path
        return text
    if not text.strip():
        raise typer.BadParameter("the path is empty; give a file or folder name.")
    return Path(text)


def help_text(opt: Option) -> str:
    """``opt``'s ``--help`` text with each ``{spec:KEY}`` replaced by the job spec's description of ``KEY``."""
    from paddlefit.jobspec.spec import field_help

    return re.sub(r"\{spec:([\w.]+)\}", lambda m: field_help(m.group(1)), opt.help)


def _parameter(opt: Option) -> inspect.Parameter:
    """The typer parameter of ``opt``: ``typer.Argument``/``typer.Option`` with its default, flags and help (a
    path parsed by :func:`path`)."""
    parser = path if opt.type in (Path, list[Path]) else None
    if opt.argument:
        info = typer.Argument(opt.default, help=help_text(opt), parser=parser, metavar=opt.flag)
    else:
        info = typer.Option(opt.default, *opt.decls, help=help_text(opt), parser=parser)
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=opt.type)


def _checked(opt: Option, value: Any) -> Any:
    """``value`` as the command reads it.

    Raises:
        PaddlefitError: an empty or blank text value (or item of a repeatable option) of an option whose empty
            value means nothing, naming the option.
    """
    items = value if isinstance(value, list) else [value]
    if not opt.empty_ok and any(isinstance(v, str) and not v.strip() for v in items):
        fix = "" if opt.argument or opt.default is ... else " or leave the option out for the default"
        raise PaddlefitError(f"`{opt.flag}` is empty; give a value (see --help){fix}.")
    return value


def command(*options: Option) -> Callable[[Callable[[Args], None]], Callable[..., None]]:
    """Decorate ``fn(args: Args)`` into a typer command taking ``options`` (in ``--help``'s order), behind
    :func:`~paddlefit.cli.common.handle_errors` (a ``--json`` option is named ``json_out``).

    Raises:
        ValueError: two options with one name (a programming error, at import).
    """
    names = [o.name for o in options]
    if len(set(names)) != len(names) or {"ctx", "options"} & set(names):
        raise ValueError(f"options of one command need distinct names other than ctx and options: {names}")

    by_name = {o.name: o for o in options}

    def decorate(fn: Callable[[Args], None]) -> Callable[..., None]:
        @handle_errors
        def run(ctx: typer.Context, **values: Any) -> None:
            warn_deprecated({alias: o.decls[0] for o in options for alias in o.deprecated})
            checked = {name: _checked(by_name[name], value) for name, value in values.items()}
            return fn(Args(ctx=ctx, options=by_name, **checked))

        wrapper = functools.wraps(fn)(run)
        del wrapper.__wrapped__  # typer reads __signature__, not fn's (args: Args)
        params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)]
        params += [_parameter(o) for o in options]
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        wrapper.options = options  # type: ignore[attr-defined]
        return wrapper

    return decorate
