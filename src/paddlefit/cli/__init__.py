"""The command-line shell: one module per verb; each parses, calls the core, renders."""
