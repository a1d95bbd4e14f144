"""``paddlefit report``: one run directory read (``reading``, ``resumes``) into a self-contained HTML page
(``html``, with ``plots``' matplotlib figures). The terminal's tables are :mod:`paddlefit.cli.render`."""
