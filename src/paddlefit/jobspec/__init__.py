"""The job spec: what a job is, as YAML a user writes (``spec``: :class:`~paddlefit.jobspec.spec.JobSpec`, its
load and checks), its per-sample inputs (``inputs``: ``float32[3,224,224]``, ``int64[128]:30522``), and the
Markdown reference generated from its fields (``docs``: ``docs/job-spec.md``, ``make docs``)."""
