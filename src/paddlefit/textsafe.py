"""Text a terminal can trust: names and paths from the run registry, run directories, job specs and logs are shown
with their control characters escaped, so a run directory named ``runs/\\x1b[2J`` prints as that and does not
clear the screen.

Escaped (:data:`UNSAFE`): the C0 controls but tab and newline (ESC starts every ANSI sequence; CR and backspace
overwrite what a line shows), DEL, the C1 controls U+0080-U+009F (U+009B is a one-byte CSI to a terminal that reads
them), and the Unicode bidirectional overrides and isolates U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C
that reorder how a line reads (CVE-2021-42574, "Trojan Source"), and lone surrogates U+D800-U+DFFF: a file name
that is not valid UTF-8 reaches Python with each undecodable byte as U+DC80-U+DCFF (PEP 383, ``surrogateescape``),
which no terminal or UTF-8 file can take; it is shown as the byte, ``\\x9b``. Sources: ECMA-48 (control
functions), Unicode UAX #9 (explicit directional formatting characters), PEP 383.
"""

from __future__ import annotations

import re
import sys

__all__ = ["UNSAFE", "log_stderr", "name_safe", "storable_text", "terminal_safe"]

#: Characters :func:`terminal_safe` escapes (tab and newline are escaped only in table cells: ``keep_newlines``).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_CELL_UNSAFE = re.compile(f"{UNSAFE.pattern[:-1]}\t\n]")
_SURROGATES = re.compile("[\ud800-\udfff]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    ch = match.group()
    if 0xDC80 <= ord(ch) <= 0xDCFF:  # an undecodable byte of a file name (surrogateescape)
        return f"\\x{ord(ch) - 0xDC00:02x}"
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def terminal_safe(text: object, keep_newlines: bool = True) -> str:
    """``str(text)`` with each :data:`UNSAFE` character written as its Python escape (``\\x1b``, ``\\r``,
    ``\\u202e``); with ``keep_newlines=False`` (a table cell) newline and tab too."""
    return (UNSAFE if keep_newlines else _CELL_UNSAFE).sub(_escaped, str(text))


def name_safe(text: object) -> str:
    """A name or path put into a message: :func:`terminal_safe` with newline and tab escaped too, so a run
    directory named ``a\\nerror: ...`` cannot forge a line of the output."""
    return terminal_safe(text, keep_newlines=False)


def storable_text(text: str) -> str:
    """``text`` as valid UTF-8 text for a store that takes nothing else (SQLite's TEXT, a UTF-8 file): each
    undecodable byte of a file name (U+DC80-U+DCFF, PEP 383 ``surrogateescape``) written as ``\\xNN``, any other
    lone surrogate as ``\\udXXX``; text without surrogates is returned as it is."""
    return _SURROGATES.sub(_escaped, text)


def log_stderr(msg: str) -> None:
    """The default log sink of the trainer, the lock and the workers: ``msg`` made :func:`terminal_safe`, on
    stderr, flushed."""
    print(terminal_safe(msg), file=sys.stderr, flush=True)
