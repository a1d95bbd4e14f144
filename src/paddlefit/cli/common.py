"""Shared CLI plumbing: consoles (stdout for results, stderr for logs) and the error boundary."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from paddlefit.errors import PaddlefitError
from paddlefit.textsafe import terminal_safe

#: Columns of the result tables when stdout is a pipe or a file and ``COLUMNS`` is not set: rich's default there
#: is 80, which makes it drop whole columns of the wider tables (``plan --inference`` lost its GPU names).
PIPE_WIDTH = 120
out = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH)


def fit_out_width() -> None:
    """Size the result console for this command line: ``COLUMNS`` when set (read now, not when this module was
    imported: an embedding host or a test runner sets it per call), else the terminal's width, else
    :data:`PIPE_WIDTH` on a pipe or a file."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        out.width = int(columns)
    elif not out.is_terminal:
        out.width = PIPE_WIDTH


err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def serving_request(args: Any, unused: list[str], **fields: Any) -> Any:
    """The :class:`~paddlefit.serving.job.InferenceRequest` of `plan --inference` and `cost --inference`.

    Args:
        args: the command's parsed options (:class:`~paddlefit.cli.params.Args`): the model, its inputs, the
            batch sizes, engine, precision, latency target, GPUs, catalogs, safety margin, TF32 and currency, which
            both commands take alike.
        unused: the training-only options typed, by flag (``["--loss"]``); any one is an error.
        fields: the command's own request fields by name; None or an empty list = not given (the request's
            default).

    Raises:
        PaddlefitError: a training-only option given (named), or a value the request
            refuses (its own message names the option).
    """
    from paddlefit.serving.job import InferenceRequest

    if unused:
        raise PaddlefitError(
            f"{', '.join(f'`{k}`' for k in unused)} {'does' if len(unused) == 1 else 'do'} not "
            "apply to `--inference`: training options (loss, optimizer, length, spot checkpoints, parallel layout, "
            "the training tables) have nothing to set in a serving plan; leave "
            f"{'it' if len(unused) == 1 else 'them'} out."
        )
    fields = {
        "model": args.model,
        "config": args.config,
        "inputs": args.inputs,
        "model_args": args.model_arg,
        "batch_sizes": args.batch_size,
        "precision": args.precision,
        "engine": args.engine,
        "latency_ms": args.latency_ms,
        "gpus": args.gpu,
        "catalog_files": [str(p) for p in args.catalog or []],
        "safety_margin": args.safety_margin,
        "tf32": args.tf32 is not False,
        "currency": args.currency,
        "fx_rates": args.fx_rate,
        **fields,
    }
    return InferenceRequest(**{k: v for k, v in fields.items() if v not in (None, [], ())})


def job_options(args: Any, command: str, **fields: Any) -> Any:
    """The :class:`~paddlefit.job.resolve.JobOptions` of `plan` and `cost` (training): MODEL, ``--config`` and the
    job options both take, plus the command's own ``fields``; ``--batch-size`` once (the caller refused it
    repeated).

    Raises:
        PaddlefitError: a value no job can have, naming the option.
    """
    from paddlefit.job.resolve import JobOptions, attention_option

    return JobOptions(
        model=args.model,
        config=args.config,
        batch_size=args.batch_size[0] if args.batch_size else None,
        inputs=args.inputs,
        model_args=args.model_arg,
        optimizer=args.optimizer,
        precision=args.precision,
        label=args.label,
        label_arg=args.label_arg,
        loss=args.loss,
        tf32=args.tf32,
        command=command,
        attention=attention_option(args.flash_attention),
        **fields,
    )


def loader_fields(args: Any) -> dict[str, Any]:
    """The :class:`~paddlefit.jobspec.loader.LoaderRequest` fields of `doctor` and `image`, from their options."""
    return {
        "num_workers": args.num_workers,
        "prefetch_factor": args.prefetch_factor,
        "batch_size": args.batch_size,
        "inputs": list(args.inputs or []),
        "devices": args.devices,
    }


def quiet_paddle() -> None:
    """Silence Paddle's import-time chatter (ccache UserWarning, glog INFO) so stdout stays clean."""
    warnings.filterwarnings("ignore", category=UserWarning)
    os.environ.setdefault("GLOG_minloglevel", "2")


_last_error: dict[str, Any] = {}


def warn_deprecated(aliases: dict[str, str]) -> None:
    """On stderr, one warning per deprecated option name used on this command line (``{old: new}``); typer gives
    both names the same parameter, so only the raw arguments tell which one was typed."""
    used = {a.split("=", 1)[0] for a in sys.argv[1:]}
    for old, new in aliases.items():
        if old in used:
            err.print(
                f"[yellow]warning:[/] `{old}` is deprecated and will be removed in the next release; use "
                f"`{new}` (same value, same unit).",
                highlight=False,
            )


def shown(text: object) -> str:
    """``text`` for a console line: control characters escaped (:func:`~paddlefit.textsafe.terminal_safe`: a name
    or path from a run directory or the registry never drives the terminal), then rich markup."""
    return escape(terminal_safe(text))


def fail(message: str, code: int = 2, kind: str = "UsageError") -> typer.Exit:
    """Print ``message`` in red on stderr and return the Exit to raise (code 2 = bad input); remembered for
    :func:`handle_errors`'s ``--json`` error document."""
    err.print(f"[bold red]error:[/] {shown(message)}", highlight=False, soft_wrap=True)
    _last_error.update(type=kind, message=message, exit_code=code)
    return typer.Exit(code)


_json_printed: list[bool] = []


def json_document_printed() -> None:
    """Record that this command already printed its one ``--json`` document (a result that reports a failure, such
    as train's early stop), so no error object is added after it."""
    _json_printed.append(True)


def json_error_printed() -> bool:
    """Whether this process already printed a ``--json`` error object (so the entry point does not add one)."""
    return bool(_json_printed)


def _print_json_error() -> None:
    """One JSON object ``{"error": {"type", "message", "exit_code"}}`` on stdout for a failed ``--json`` command."""
    import json

    if _last_error and not _json_printed:
        print(json.dumps({"error": dict(_last_error)}), flush=True)
        _json_printed.append(True)


def handle_errors(fn: F) -> F:
    """Turn PaddlefitError into a one-paragraph message and exit code 2 (no traceback). With ``--json``
    (a ``json_out`` argument) a failure also prints one JSON error object on stdout (:func:`_print_json_error`).

    ``PADDLEFIT_DEBUG=1`` re-raises instead, to see the traceback.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _last_error.clear()
        _json_printed.clear()  # per command line: a host (or a test runner) may run several in one process
        fit_out_width()
        try:
            return fn(*args, **kwargs)
        except PaddlefitError as exc:
            if os.environ.get("PADDLEFIT_DEBUG"):
                raise
            failure = fail(str(exc), exc.exit_code, type(exc).__name__)
            if kwargs.get("json_out"):
                _print_json_error()
            raise failure from None
        except typer.Exit as exc:
            if exc.exit_code and kwargs.get("json_out"):
                _print_json_error()
            raise
        except KeyboardInterrupt:
            err.print("interrupted")
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def progress_status(text: str) -> Iterator[Callable[[str], None]]:
    """Progress of long work on stderr: a spinner whose text each message replaces on a terminal; on a pipe or a
    file (CI logs, `2> log`), where a spinner shows nothing, each new message as one line with the seconds since
    the start, so a probe that runs for minutes is seen to be alive. Yields the ``progress(message)`` callable."""
    if err.is_terminal:
        with err.status(text) as status:
            yield status.update
        return
    import time

    t0, last = time.monotonic(), [""]

    def say(message: str) -> None:
        if message != last[0]:
            last[0] = message
            err.print(f"[dim]{escape(shown(message))} ({time.monotonic() - t0:.0f} s)[/]", soft_wrap=True)

    say(text)
    yield say


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout inside the block to stderr, Python's ``sys.stdout`` and file
    descriptor 1 alike (user model code, Paddle's C++ logging, subprocesses), so a `--json` result printed
    after the block is the only thing on stdout."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (an embedding host): Python-level redirection only
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
