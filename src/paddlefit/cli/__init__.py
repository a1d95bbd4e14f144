"""The command-line shell: one module per verb; each parses, calls the core, renders.

Importing it (the first thing ``paddlefit`` and ``python -m paddlefit.cli.main`` do, before typer, rich or Paddle
are imported) makes Ctrl-C, SIGTERM and SIGHUP during start-up exit 130, 143 and 129 at once, one line on stderr,
no traceback and no stale lock record (:mod:`paddlefit.process.quietstart`).
"""

from __future__ import annotations

from paddlefit.process.quietstart import install

install()
