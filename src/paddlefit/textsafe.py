"""Text a terminal can trust: names and paths from the run registry, run directories, job specs and logs are shown
with their control characters escaped, so a run directory named ``runs/\\x1b[2J`` prints as that and does not
clear the screen (issue 27).

Escaped (:data:`UNSAFE`): the C0 controls but tab and newline (ESC starts every ANSI sequence; CR and backspace
overwrite what a line shows), DEL, the C1 controls U+0080-U+009F (U+009B is a one-byte CSI to a terminal that reads
them), and the Unicode bidirectional overrides and isolates U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C
that reorder how a line reads (CVE-2021-42574, "Trojan Source"). Sources: ECMA-48 (control functions), Unicode
UAX #9 (explicit directional formatting characters).
"""

from __future__ import annotations

import re
import sys

__all__ = ["UNSAFE", "log_stderr", "terminal_safe"]

#: Characters :func:`terminal_safe` escapes (tab and newline are escaped only in table cells: ``keep_newlines``).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CELL_UNSAFE = re.compile(f"{UNSAFE.pattern[:-1]}\t\n]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    ch = match.group()
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def terminal_safe(text: object, keep_newlines: bool = True) -> str:
    """``str(text)`` with each :data:`UNSAFE` character written as its Python escape (``\\x1b``, ``\\r``,
    ``\\u202e``); with ``keep_newlines=False`` (a table cell) newline and tab too."""
    return (UNSAFE if keep_newlines else _CELL_UNSAFE).sub(_escaped, str(text))


def log_stderr(msg: str) -> None:
    """The default log sink of the trainer, the lock and the workers: ``msg`` made :func:`terminal_safe`, on
    stderr, flushed."""
    print(terminal_safe(msg), file=sys.stderr, flush=True)
