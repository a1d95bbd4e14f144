"""The job a command describes: its resolution from options and a job spec, and its length in steps."""
